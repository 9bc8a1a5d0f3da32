# cc_precompiled_header: a GCC precompiled header of the headers most of our files parse
# (LibTorch's tensor or module API, Abseil, googletest), for tools/cc.bzl's rules to include first.
# Parsing <torch/nn/module.h> costs about 11 s per file on this 2-core machine, <ATen/core/Tensor.h>
# 1.5 s, gtest and Abseil's status and string headers about 1.5 s more; loading their precompiled
# form costs a fraction of that (docs/BENCHMARKS.md, "Build time").
#
# The rule writes <name>.h (one #include per entry of `includes`) in its output folder and
# compiles it, as C++, to <name>.h.gch beside it, with the C++ toolchain's own command line for
# this configuration (its --copt/--cxxopt, then `copts`, PIC, and the include paths and defines of
# `deps`), so the header is valid for every compile of this configuration (fastbuild, the
# sanitizers', --config=cuda) with the same `copts`, and the disk cache keeps one per
# configuration. A dependent adds
# `-include <package>/<name>.h` to its copts (tools/cc.bzl does): GCC, looking for that file along
# the quote include path, finds the .gch first in the output folder and loads it; where it cannot
# use it (another configuration's flags), it reads the header's text instead, so a mismatch costs
# time, never correctness, and -Winvalid-pch (.bazelrc) says so. No source file of that name may
# exist, or the compiler would find it in the source tree first. Only libraries' headers belong
# in `includes`: a header of ours would make every change to it rebuild every dependent.

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

_CPP_COMPILE = "c++-compile"

def _cc_precompiled_header_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    deps_info = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    deps = deps_info.compilation_context
    header = ctx.actions.declare_file(ctx.label.name + ".h")
    ctx.actions.write(
        output = header,
        content = "".join(["#include %s\n" % h for h in ctx.attr.includes]),
    )
    gch = ctx.actions.declare_file(ctx.label.name + ".h.gch")
    variables = cc_common.create_compile_variables(
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts + ctx.attr.copts +
                             ["-x", "c++-header"],
        source_file = header.path,
        output_file = gch.path,
        include_directories = deps.includes,
        quote_include_directories = depset(["."], transitive = [deps.quote_includes]),
        system_include_directories = deps.system_includes,
        preprocessor_defines = deps.defines,
        use_pic = True,
        add_legacy_cxx_options = True,
    )
    ctx.actions.run(
        executable = cc_common.get_tool_for_action(
            feature_configuration = features,
            action_name = _CPP_COMPILE,
        ),
        arguments = cc_common.get_memory_inefficient_command_line(
            feature_configuration = features,
            action_name = _CPP_COMPILE,
            variables = variables,
        ),
        env = cc_common.get_environment_variables(
            feature_configuration = features,
            action_name = _CPP_COMPILE,
            variables = variables,
        ),
        inputs = depset([header], transitive = [deps.headers, cc_toolchain.all_files]),
        outputs = [gch],
        mnemonic = "CppPch",
        progress_message = "Precompiling %s" % header.short_path,
    )
    own = cc_common.create_compilation_context(headers = depset([header, gch]))
    return [
        DefaultInfo(files = depset([gch])),
        cc_common.merge_cc_infos(cc_infos = [CcInfo(compilation_context = own), deps_info]),
    ]

cc_precompiled_header = rule(
    implementation = _cc_precompiled_header_impl,
    attrs = {
        "includes": attr.string_list(mandatory = True),
        # After the configuration's own flags, as a target's copts come after them.
        "copts": attr.string_list(),
        "deps": attr.label_list(providers = [CcInfo]),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)
