# cc_proto: compiles .proto files with Debian's protoc (//third_party:protoc, a declared tool, so a
# new protoc regenerates the code) into a cc_library that links Debian's libprotobuf. Imports
# resolve against the workspace root.

def cc_proto(name, srcs, deps = [], visibility = None, testonly = False):
    hdrs = []
    cc_srcs = []
    for src in srcs:
        if not src.endswith(".proto"):
            fail("cc_proto %s: %s is not a .proto file" % (name, src))
        base = src[:-len(".proto")]
        hdrs.append(base + ".pb.h")
        cc_srcs.append(base + ".pb.cc")
        native.genrule(
            name = "%s_%s_protoc" % (name, base.replace("/", "_")),
            srcs = [src] + [d + "_srcs" for d in deps],
            outs = [base + ".pb.h", base + ".pb.cc"],
            tools = ["//third_party:protoc"],
            # The root of the repository holding this package: "." here, external/<repo> elsewhere.
            cmd = ("root=$$(dirname $(location %s) | sed 's|/%s$$||'); " % (src, native.package_name()) +
                   "$(location //third_party:protoc) -I$$root -I. --cpp_out=$(GENDIR)/$$root $(location %s)" % src),
            testonly = testonly,
        )
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs,
        testonly = testonly,
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = cc_srcs,
        hdrs = hdrs,
        deps = deps + ["//third_party:protobuf"],
        copts = ["-Wno-unused-parameter"],
        visibility = visibility,
        testonly = testonly,
    )
