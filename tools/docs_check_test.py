#!/usr/bin/env python3
"""Every directory README lists its directory's source files, and names none that are gone.

A README that lists a package's files is read as the map of that package; a file it leaves out is
invisible to the next reader, and a name it keeps after the file went sends them looking for
nothing. The arguments are the runfiles of each checked package's `readme_sources` filegroup (its
README.md and a glob of its sources), so adding, renaming or removing a file reruns this test.

A file counts as named when its README has it in one of the forms the READMEs use: `foo.cc`,
`engine/foo.cc` (the README's own directory), `foo.{h,cc}`, `foo.h/.cc`, `foo.h`, `.cc`; a
test, benchmark or fuzz target's file (`*_test`, `*_bench`, `*_fuzz`) also by the target's name,
`foo_test`. A bare file name with a source extension that is not in the directory is stale;
names with another directory in front (`engine/engine.h` in checkpoint/README.md) are not
checked, nor are files in subpackages, which have READMEs of their own (tools/BUILD's
README_SOURCES lists every checked package, and says which directories are left out and why).
"""

import collections
import os
import re
import sys

EXTENSIONS = ("cc", "h", "cu", "proto", "py", "sh")
EXT = "(?:" + "|".join(EXTENSIONS) + ")"
# What may precede a name: not a word character, a dot or a dash (so `sub_group_store.h` never
# counts for `group_store.h`); a slash only as part of the captured directory prefix.
START = r"(?<![\w.\-/])"
PREFIX = r"((?:[\w.\-]+/)*)"
# foo.{h,cc}
BRACES = re.compile(START + PREFIX + r"(\w+)\.\{([\w ,]+)\}")
# foo.h, foo.h/.cc, `foo.h`, `.cc`
LISTED = re.compile(
    START + PREFIX + r"(\w+)\.(" + EXT + r")\b((?:`?[ \t]*[,/][ \t]*`?\." + EXT + r"\b)*)"
)
TARGET_SUFFIXES = ("_test", "_bench", "_fuzz")


def named_files(readme, directory):
    """The files of `directory` that `readme` names, and the bare names it gives that look like
    source files (to find stale ones)."""
    named = set()
    for match in BRACES.finditer(readme):
        prefix, stem, exts = match.groups()
        for ext in re.split(r"[ ,]+", exts.strip()):
            named.add((prefix, f"{stem}.{ext}"))
    for match in LISTED.finditer(readme):
        prefix, stem, first, rest = match.groups()
        for ext in [first] + re.findall(r"\.(\w+)", rest):
            named.add((prefix, f"{stem}.{ext}"))
    own, bare = set(), set()
    for prefix, name in named:
        if prefix == "":
            bare.add(name)
            own.add(name)
        elif prefix == directory + "/":
            own.add(name)
    return own, bare


def check(directory, readme_path, sources):
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    own, bare = named_files(readme, directory)
    problems = []
    for name in sorted(sources):
        stem = name.rsplit(".", 1)[0]
        if name in own:
            continue
        if stem.endswith(TARGET_SUFFIXES) and re.search(
            r"(?<![\w.\-])" + re.escape(stem) + r"(?![\w])", readme
        ):
            continue
        problems.append(
            f"{readme_path} does not name {directory}/{name}: add a line on what it is for"
        )
    for name in sorted(bare - set(sources)):
        problems.append(
            f"{readme_path} names {name}, which is not a file of {directory}/ "
            "(renamed or removed? or give its directory)"
        )
    return problems


def main(paths):
    by_directory = collections.defaultdict(list)
    for path in paths:
        by_directory[os.path.dirname(path)].append(os.path.basename(path))
    problems = []
    for directory, names in sorted(by_directory.items()):
        if "README.md" not in names:
            problems.append(f"{directory}/: files given without the directory's README.md")
            continue
        sources = [n for n in names if n.rsplit(".", 1)[-1] in EXTENSIONS]
        problems += check(directory, os.path.join(directory, "README.md"), sources)
        print(f"{directory}/README.md: {len(sources)} source file(s)")
    for problem in problems:
        print("FAIL: " + problem)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print(f"{len(by_directory)} READMEs name their directories' files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
