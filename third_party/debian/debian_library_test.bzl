# debian_library_test: checks debian_library.bzl's version parsing, trimming and mismatch message
# without a second Bazel run. The cases are evaluated when the test is analysed; the test binary
# only reports them, so `bazel test` fails (with every failing case) instead of the build.
load(":debian_library.bzl", "parse_versions", "trim_version", "version_problem")

_VERSIONS = parse_versions("""# comment line
libabsl-dev 20220623
libgoogle-glog-dev 0.6.0

protobuf-compiler 3.21.12
""")

def _cases():
    # (what, got, want)
    mismatch = version_problem("libgoogle-glog-dev", "0.7.1-1", "+~-", _VERSIONS, "tools/versions.txt")
    missing = version_problem("libgtest-dev", "1.12.1-0.2", "+~-", _VERSIONS, "tools/versions.txt")
    return [
        ("parse", sorted(_VERSIONS.items()), [
            ("libabsl-dev", "20220623"),
            ("libgoogle-glog-dev", "0.6.0"),
            ("protobuf-compiler", "3.21.12"),
        ]),
        ("trim revision", trim_version("3.21.12-3+deb12u1", "+~-"), "3.21.12"),
        ("trim absl", trim_version("20220623.1-1+deb12u2", ".+~-"), "20220623"),
        ("trim epoch", trim_version("1:2.2.2-2", "+~-"), "2.2.2"),
        ("trim tilde", trim_version("1.7.1~rc1", "+~-"), "1.7.1"),
        ("trim plain", trim_version("0.6.0", "+~-"), "0.6.0"),
        ("match", version_problem("libabsl-dev", "20220623.1-1+deb12u2", ".+~-", _VERSIONS, "v.txt"), ""),
        ("match exact", version_problem("protobuf-compiler", "3.21.12-3+deb12u1", "+~-", _VERSIONS, "v.txt"), ""),
        ("mismatch message", mismatch, (
            "zerotrain: Debian package libgoogle-glog-dev is 0.7.1 here (dpkg: 0.7.1-1), but " +
            "tools/versions.txt expects 0.6.0. Install libgoogle-glog-dev 0.6.0, or, to build " +
            "against 0.7.1, change its line there to \"libgoogle-glog-dev 0.7.1\"."
        )),
        ("missing line", missing, (
            "zerotrain: tools/versions.txt has no line for the Debian package libgtest-dev (found " +
            "1.12.1 here). Add the line \"libgtest-dev 1.12.1\" to tools/versions.txt."
        )),
        # Versions compare whole, never as prefixes.
        ("longer is a mismatch", version_problem("libgoogle-glog-dev", "0.6.0.1-1", "+~-", _VERSIONS, "v") != "", True),
        ("shorter is a mismatch", version_problem("libgoogle-glog-dev", "0.6-1", "+~-", _VERSIONS, "v") != "", True),
    ]

def _impl(ctx):
    lines = []
    failed = 0
    for what, got, want in _cases():
        if got == want:
            lines.append("ok   %s" % what)
        else:
            failed += 1
            lines.append("FAIL %s\n  got:  %r\n  want: %r" % (what, got, want))
    script = "#!/bin/sh\ncat <<'EOF'\n%s\nEOF\nexit %d\n" % ("\n".join(lines), 1 if failed else 0)
    ctx.actions.write(ctx.outputs.executable, script, is_executable = True)
    return [DefaultInfo(executable = ctx.outputs.executable)]

debian_library_test = rule(implementation = _impl, test = True)
