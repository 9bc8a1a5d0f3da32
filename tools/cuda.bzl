# cuda_library: compiles .cu files with /usr/local/cuda's nvcc into a cc_library. Its targets are
# tagged manual: they build only when a --config=cuda target selects them, so a build without
# the flag needs no GPU toolchain.

# Ampere and Hopper (H100/H200), plus PTX for newer chips.
_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_flags = [], visibility = None, testonly = False):
    objs = []
    for src in srcs:
        if not src.endswith(".cu"):
            fail("cuda_library %s: %s is not a .cu file" % (name, src))
        obj = src[:-len(".cu")] + ".cu.o"
        objs.append(obj)
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                "/usr/local/cuda/bin/nvcc -c -O3 -std=c++17 -Xcompiler=-fPIC -Xcompiler=-Wall",
                "--expt-relaxed-constexpr -I. -I$(GENDIR)",
            ] + _GENCODE + nvcc_flags + ["$(location %s) -o $@" % src]),
            tags = ["manual"],
            testonly = testonly,
        )
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_runtime"],
        tags = ["manual"],
        alwayslink = True,
        visibility = visibility,
        testonly = testonly,
    )
