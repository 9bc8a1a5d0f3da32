# debian_library_repository: makes Debian -dev packages (Abseil, glog, protobuf, GoogleTest, ...)
# a Bazel repository whose headers and libraries are declared inputs, so that Bazel rebuilds what
# uses them when they change, and refuses to build against versions other than tools/versions.txt's.
#
# For each package it symlinks the package's own files (dpkg -L) from /usr/include into include/,
# from /usr/lib/x86_64-linux-gnu (lib*.so, lib*.a) into lib/ and from /usr/bin into bin/, and uses
# build_file as the repository's BUILD. The version check runs whenever the repository is fetched:
# on the first build of each Bazel server (local = True), and when tools/versions.txt changes.

# Where a versions file other than tools/versions.txt can be named (--repo_env=...=/path), so the
# check can be exercised without editing the checkout.
VERSIONS_ENV = "ZEROTRAIN_VERSIONS_FILE"

_ROOTS = {
    "/usr/include/": "include/",
    "/usr/lib/x86_64-linux-gnu/": "lib/",
    "/usr/bin/": "bin/",
}

def parse_versions(text):
    """Maps each name in a versions.txt ("name version" lines, # comments) to its version."""
    versions = {}
    for line in text.splitlines():
        words = [w for w in line.replace("\t", " ").split(" ") if w]
        if not words or words[0].startswith("#"):
            continue
        versions[words[0]] = words[1] if len(words) > 1 else ""
    return versions

def trim_version(version, cut):
    """The part of a dpkg version that is pinned: without the epoch, and up to the first of cut.

    With cut "+~-" that is the upstream version (3.21.12-3+deb12u1 -> 3.21.12); Abseil is pinned by
    its LTS date, so it cuts at "." too (20220623.1-1+deb12u2 -> 20220623), as tools/setup.sh does.
    """
    head, sep, rest = version.partition(":")
    if sep and head.isdigit():
        version = rest
    for i in range(len(version)):
        if version[i] in cut:
            return version[:i]
    return version

def version_problem(package, dpkg_version, cut, versions, versions_file):
    """The error for package at dpkg_version against a parsed versions file, or "" if it matches."""
    found = trim_version(dpkg_version, cut)
    expected = versions.get(package)
    if expected == None:
        return ("zerotrain: %s has no line for the Debian package %s (found %s here). " +
                "Add the line \"%s %s\" to %s.") % (versions_file, package, found, package, found, versions_file)
    if found != expected:
        return ("zerotrain: Debian package %s is %s here (dpkg: %s), but %s expects %s. " +
                "Install %s %s, or, to build against %s, change its line there to \"%s %s\".") % (
            package,
            found,
            dpkg_version,
            versions_file,
            expected,
            package,
            expected,
            found,
            package,
            found,
        )
    return ""

def _versions_file(ctx):
    override = ctx.os.environ.get(VERSIONS_ENV, "")
    if override:
        path = ctx.path(override)
        if not path.exists:
            fail("zerotrain: %s=%s does not exist" % (VERSIONS_ENV, override))
        return path, override
    path = ctx.path(ctx.attr.versions)

    # The checkout's own file, not the copy Bazel links another workspace's view through.
    return path, "tools/versions.txt (%s)" % path.realpath

def _dpkg(ctx, package, script):
    # script runs with the package name as $0.
    res = ctx.execute(["sh", "-c", script, package])
    if res.return_code != 0:
        fail(("zerotrain: the Debian package %s is not installed (%s). zerotrain builds against " +
              "Debian 12's packages: run tools/setup.sh as root.") % (package, (res.stderr or res.stdout).strip()))
    return res.stdout

def _debian_library_impl(ctx):
    versions_path, versions_name = _versions_file(ctx)
    versions = parse_versions(ctx.read(versions_path))

    # Every version is checked before any file is linked, so a mismatch is the only error, and
    # it names every package of this repository that differs.
    problems = []
    for package in ctx.attr.packages:
        dpkg_version = _dpkg(ctx, package, """
            s=$(dpkg-query -W -f='${Status} ${Version}' "$0") || exit 1
            case "$s" in "install ok installed "*) echo "${s##* }" ;; *) echo "dpkg: $s" >&2; exit 1 ;; esac
        """).strip()
        problem = version_problem(package, dpkg_version, ctx.attr.version_cut, versions, versions_name)
        if problem:
            problems.append(problem)
    if problems:
        fail("\n".join(problems))

    for package in ctx.attr.packages:
        # Only regular files (or links to them): dpkg -L lists the package's directories too.
        listing = _dpkg(ctx, package, 'dpkg -L "$0" | while read -r f; do [ ! -f "$f" ] || echo "$f"; done')
        for f in listing.splitlines():
            for root, dest in _ROOTS.items():
                if not f.startswith(root):
                    continue
                rel = f[len(root):]

                # Libraries sit directly in the library folder (not cmake/, pkgconfig/).
                if dest == "lib/" and ("/" in rel or not rel.startswith("lib") or
                                       not (rel.endswith(".so") or rel.endswith(".a"))):
                    continue
                ctx.symlink(f, dest + rel)

    ctx.file("WORKSPACE", "workspace(name = %r)\n" % ctx.name)
    ctx.symlink(ctx.attr.build_file, "BUILD")

debian_library_repository = repository_rule(
    implementation = _debian_library_impl,
    doc = "One library (or a few shipped together) from Debian -dev packages, version-checked.",
    attrs = {
        "packages": attr.string_list(
            mandatory = True,
            doc = "Debian packages whose files the repository holds; each needs a tools/versions.txt line.",
        ),
        "build_file": attr.label(mandatory = True, allow_single_file = True),
        "version_cut": attr.string(
            default = "+~-",
            doc = "The dpkg version is compared up to the first of these characters (see trim_version).",
        ),
        # Label() resolves against this file's repository: @zerotrain//tools:versions.txt from any
        # workspace. Being a label, an edit to the file refetches (and rechecks) the repository.
        "versions": attr.label(default = Label("//tools:versions.txt"), allow_single_file = True),
    },
    environ = [VERSIONS_ENV],
    local = True,
)
