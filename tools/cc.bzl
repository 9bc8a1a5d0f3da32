# cc_library, cc_test and cc_binary as zerotrain's BUILD files use them: Bazel's own rules, each
# compile starting from a precompiled header of what its file would parse anyway (tools/pch.bzl),
# which halves a typical test file's compile (docs/BENCHMARKS.md, "Every compile from a
# precompiled header").
#
# A BUILD file loads these three names from here in place of the built-in ones; the attributes are
# Bazel's, plus `pch`, which says which header a target's sources start from:
#   "auto"      (the default) "tensor" when the target depends on @libtorch//:torch_cpu itself,
#               else "base" when it depends on //third_party:absl or is a test, else "none" (a
#               header brings its libraries along as deps, and a target keeps the ones it chose);
#   "base"      the C++ library and Abseil's status and string headers;
#   "tensor"    base and <ATen/core/Tensor.h>;
#   "torch_nn"  tensor and <torch/nn/module.h>, for the files that build or walk modules (11 s to
#               parse, about 3 s to load precompiled);
#   "none"      nothing (a target whose flags differ from the configuration's, so the header could
#               not be used).
# The flavours' headers are listed once, in tools/BUILD (PCH_FLAVOURS).
# A cc_test's header adds googletest. A target whose deps hold a select() says its `pch`: the
# choice reads the deps list, and a select() cannot be read while the BUILD file loads.
#
# cc_library also takes `implementation_deps`, as later Bazels do: libraries its sources compile
# and link against whose headers, include paths and defines its dependents do not see. The CUDA
# runtime and NCCL come this way, so --config=cuda recompiles only the files that include them,
# not every file above them (docs/BENCHMARKS.md, "CUDA's headers stay with their users").

_TORCH_CPU = "@libtorch//:torch_cpu"
_ABSL = "//third_party:absl"

def _pch_target(rule_kind, name, pch, srcs, deps):
    if type(srcs) == "list" and not [s for s in srcs if s.endswith(".cc")]:
        return None
    pch = _flavour(rule_kind, name, pch, deps)
    if pch == "none":
        return None
    return "//tools:pch_" + pch + ("_gtest" if rule_kind == "cc_test" else "")

def _flavour(rule_kind, name, pch, deps):
    if pch == "auto":
        if type(deps) != "list":
            fail("%s %s: deps holds a select(), so name the precompiled header it starts from: " %
                 (rule_kind, name) + 'pch = "base", "tensor", "torch_nn" or "none" (tools/cc.bzl)')
        if _TORCH_CPU in deps:
            pch = "tensor"
        elif _ABSL in deps or rule_kind == "cc_test":
            pch = "base"
        else:
            pch = "none"
    if pch not in ("base", "tensor", "torch_nn", "none"):
        fail('%s %s: pch = "%s" is none of "auto", "base", "tensor", "torch_nn", "none"' %
             (rule_kind, name, pch))
    return pch

def _with_pch(rule, rule_kind, name, pch, kwargs):
    target = _pch_target(rule_kind, name, pch, kwargs.get("srcs", []), kwargs.get("deps", []))
    if target:
        header = Label(target).package + "/" + Label(target).name + ".h"
        kwargs["copts"] = ["-include", header] + kwargs.get("copts", [])
        kwargs["deps"] = [target] + kwargs.get("deps", [])
    rule(name = name, **kwargs)

def cc_library(name, pch = "auto", implementation_deps = None, **kwargs):
    if implementation_deps == None:
        _with_pch(native.cc_library, "cc_library", name, pch, kwargs)
        return

    # Bazel 4.2.3 has no implementation_deps: the sources compile in <name>_implementation, which
    # sees them, and <name> declares the same headers and links that library through
    # _cc_link_only, which passes on what it links but not what it compiled against.
    public = {k: kwargs[k] for k in ("visibility", "testonly", "tags") if k in kwargs}
    inner = dict(kwargs)
    inner["visibility"] = ["//visibility:private"]
    inner["deps"] = kwargs.get("deps", []) + implementation_deps
    pch = _flavour("cc_library", name, pch, kwargs.get("deps", []))
    _with_pch(native.cc_library, "cc_library", name + "_implementation", pch, inner)
    _cc_link_only(
        name = name + "_link",
        dep = ":%s_implementation" % name,
        visibility = ["//visibility:private"],
        **{k: v for k, v in public.items() if k != "visibility"}
    )
    native.cc_library(
        name = name,
        hdrs = kwargs.get("hdrs", []),
        defines = kwargs.get("defines", []),
        includes = kwargs.get("includes", []),
        deps = kwargs.get("deps", []) + [":%s_link" % name],
        **public
    )

def _cc_link_only_impl(ctx):
    dep = ctx.attr.dep
    return [
        CcInfo(linking_context = dep[CcInfo].linking_context),
        DefaultInfo(files = dep[DefaultInfo].files, runfiles = dep[DefaultInfo].default_runfiles),
    ]

_cc_link_only = rule(
    implementation = _cc_link_only_impl,
    attrs = {"dep": attr.label(providers = [CcInfo])},
)

# A test's own sources compile at -O0, after the configuration's -O2 (or a sanitizer's -O1): a
# fifth less compile time than -O1, and what they test, the libraries, keep their level.
def cc_test(name, pch = "auto", **kwargs):
    kwargs["copts"] = kwargs.get("copts", []) + ["-O0"]
    _with_pch(native.cc_test, "cc_test", name, pch, kwargs)

def cc_binary(name, pch = "auto", **kwargs):
    _with_pch(native.cc_binary, "cc_binary", name, pch, kwargs)
