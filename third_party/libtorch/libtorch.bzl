# Repository rule that brings LibTorch into Bazel: by default the torch wheel that tools/setup.sh
# installs into the project's .venv, or any LibTorch (wheel's torch/ folder or the libtorch zip
# layout: include/ and lib/) named by --repo_env=LIBTORCH_HOME=/path.

_PINNED = "2.11.0"

# Header folders we expose. The wheel also carries protobuf and pybind11 headers; leaving them out
# keeps them from shadowing the system protobuf that our own .proto code compiles against.
_INCLUDE_DIRS = ["ATen", "c10", "caffe2", "fmt", "kineto", "torch", "THC", "fp16", "fp16.h"]

def _find_default_home(ctx):
    root = ctx.path(Label("//:WORKSPACE")).dirname
    res = ctx.execute(["sh", "-c", "ls -d '%s'/.venv/lib/python3*/site-packages/torch 2>/dev/null | head -n 1" % root])
    home = res.stdout.strip()
    if not home:
        fail("zerotrain: no LibTorch found. Run tools/setup.sh (it installs torch==%s into %s/.venv) " % (_PINNED, root) +
             "or build with --repo_env=LIBTORCH_HOME=/path/to/libtorch (a folder with include/ and lib/).")
    return home

def _read_version(ctx, home):
    for rel in ["version.py", "build-version"]:
        p = ctx.path(home + "/" + rel)
        if p.exists:
            text = ctx.read(p)
            for line in text.splitlines():
                if line.startswith("__version__"):
                    return line.split("=")[1].strip().strip("'\"")
            if rel == "build-version":
                return text.strip()
    return "unknown"

def _libtorch_impl(ctx):
    home = ctx.os.environ.get("LIBTORCH_HOME", "") or _find_default_home(ctx)
    for sub in ["include", "lib"]:
        if not ctx.path(home + "/" + sub).exists:
            fail("zerotrain: LIBTORCH_HOME=%s has no %s/ folder (expected a torch wheel's torch/ folder or a libtorch zip)" % (home, sub))
    version = _read_version(ctx, home)
    if not version.startswith(_PINNED):
        print("zerotrain: LibTorch at %s is %s; zerotrain is tested with %s" % (home, version, _PINNED))

    for d in _INCLUDE_DIRS:
        src = ctx.path(home + "/include/" + d)
        if src.exists:
            ctx.symlink(src, "include/" + d)
    pybind11 = ctx.path(home + "/include/pybind11")
    if pybind11.exists:
        ctx.symlink(pybind11, "python_include/pybind11")
    lib = home + "/lib"
    has_cuda = ctx.path(lib + "/libtorch_cuda.so").exists

    # The wheel's CUDA libraries (cudart, cublas, nccl, ...) live in sibling nvidia-* packages;
    # the linker needs them to check libtorch_cuda.so's own dependencies.
    nvidia = [d for d in ctx.execute(["sh", "-c", "ls -d '%s'/../nvidia/*/lib 2>/dev/null" % home]).stdout.split("\n") if d]
    cuda_linkopts = ["-Wl,-rpath-link," + d for d in nvidia]

    ctx.template("BUILD", ctx.attr._build_tpl, {
        "%{LIB}": lib,
        "%{VERSION}": version,
        "%{CUDA_LINKOPTS}": repr(cuda_linkopts),
    })
    ctx.file("version.bzl", "LIBTORCH_VERSION = %r\nLIBTORCH_HOME = %r\nLIBTORCH_HAS_CUDA = %s\n" %
                            (version, home, "True" if has_cuda else "False"))

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    environ = ["LIBTORCH_HOME"],
    local = True,
    attrs = {"_build_tpl": attr.label(default = Label("//third_party/libtorch:BUILD.libtorch.tpl"))},
)
