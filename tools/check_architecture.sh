#!/usr/bin/env bash
# Holds docs/ARCHITECTURE.md's "package arrows" block to the BUILD files: for each top-level
# package it names, the other top-level packages its non-test targets depend on directly, as
# `bazel query` finds them. Fails naming every arrow the doc draws that the BUILD files lack,
# every dependency the doc does not draw, and every top-level package the block leaves out.
# A drawing nobody checks drifts the first time a dependency is added for convenience; this is
# what keeps the one-way layering visible. Not a Bazel test: `bazel query` needs the server a test
# would run under. CI runs it after the formatting check (.ci/run). It also fails naming every C++
# target that a BUILD file declares with Bazel's own rules instead of tools/cc.bzl's.
#
# Usage: bash tools/check_architecture.sh [ARCHITECTURE.md]   (default docs/ARCHITECTURE.md)
set -euo pipefail
cd "$(dirname "$0")/.."
doc=${1:-docs/ARCHITECTURE.md}
# Build support every package may use; it is not part of the layering the doc draws.
not_drawn="tools third_party"
# Test-only code and the root package: nothing of the libraries may depend on them, and a
# non-test target that did would show up as a dependency the doc lacks.
exempt="$not_drawn tests"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The block: lines "pkg -> dep dep ..." between "```package-arrows" and the closing fence.
awk '/^```package-arrows$/ {on = 1; next} on && /^```/ {exit} on' "$doc" >"$work/block"
if ! grep -q -- '->' "$work/block"; then
  echo "check_architecture: no \`\`\`package-arrows block in $doc" >&2
  exit 1
fi
awk -F'->' '{gsub(/ /, "", $1); print $1}' "$work/block" | sort >"$work/packages"
awk -F'->' '{gsub(/ /, "", $1); n = split($2, d, " "); for (i = 1; i <= n; i++) print $1, d[i]}' \
  "$work/block" | sort -u >"$work/drawn"

query() {
  if ! bazel query --noimplicit_deps "$@" 2>"$work/err"; then
    cat "$work/err" >&2
    echo "check_architecture: bazel query failed" >&2
    exit 1
  fi
}

# Every direct edge out of a non-test target of the drawn packages, as "from to" labels.
universe=$(sed 's#.*#//&/...#' "$work/packages" | paste -sd+ | sed 's/+/ + /g')
query --output=graph --nograph:factored "deps(attr(testonly, 0, $universe), 1)" |
  sed -n -E 's#^  "(//[^"]*)" -> "(//[^"]*)"$#\1 \2#p' >"$work/edges"
# Reduced to top-level packages, with one example edge each for the message.
awk -v skip="$not_drawn" '
  BEGIN { n = split(skip, s, " "); for (i = 1; i <= n; i++) ignored[s[i]] = 1 }
  function top(label) { sub(/^\/\//, "", label); sub(/[\/:].*/, "", label); return label }
  {
    from = top($1); to = top($2)
    if (from == to || (to in ignored) || (from " " to) in seen) next
    seen[from " " to] = 1
    print from, to, $1, $2
  }' "$work/edges" | sort >"$work/actual_edges"
cut -d' ' -f1,2 "$work/actual_edges" >"$work/actual"

problems=0
while read -r from to; do
  echo "check_architecture: $doc draws $from -> $to, but no non-test target of //$from/..." \
    "depends on //$to/... (remove the arrow, or is a dependency missing?)"
  problems=$((problems + 1))
done < <(comm -23 "$work/drawn" "$work/actual")
while read -r from to; do
  example=$(awk -v f="$from" -v t="$to" '$1 == f && $2 == t {print $3 " -> " $4; exit}' \
    "$work/actual_edges")
  echo "check_architecture: $example, but $doc draws no $from -> $to" \
    "(add the arrow, and a word in the prose, or remove the dependency)"
  problems=$((problems + 1))
done < <(comm -13 "$work/drawn" "$work/actual")

# A new top-level package must be placed in the drawing too.
query --output=package '//...' >"$work/all_packages"
while read -r pkg; do
  case " $exempt " in *" $pkg "*) continue ;; esac
  if ! grep -qx -- "$pkg" "$work/packages"; then
    echo "check_architecture: //$pkg/... is a package with no line in $doc's package arrows"
    problems=$((problems + 1))
  fi
done < <(sed -n 's#^\([^/][^/]*\).*#\1#p' "$work/all_packages" | sort -u)

# Every C++ rule of ours comes from tools/cc.bzl (or a macro of tools/ built on Bazel's rules), so
# that each compile starts from a precompiled header: a BUILD file that calls Bazel's own
# cc_library silently compiles its files at several times the cost.
query --output=build "kind('cc_(library|test|binary) rule', //... except //third_party/...)" |
  awk '/^# \// { if (at != "" && !made) print at; at = $2; made = 0 }
       /^  generator_function = / { made = 1 }
       END { if (at != "" && !made) print at }' | sed "s#^$PWD/##" >"$work/native"
while read -r at; do
  echo "check_architecture: $at is Bazel's own C++ rule; load cc_library, cc_test and" \
    "cc_binary from //tools:cc.bzl in its BUILD file (tools/README.md)"
  problems=$((problems + 1))
done <"$work/native"

if ((problems > 0)); then
  echo "check_architecture: $problems problem(s) in $doc's arrows or the BUILD files"
  exit 1
fi
echo "check_architecture: $doc's package arrows match the BUILD files" \
  "($(wc -l <"$work/drawn") arrows, $(wc -l <"$work/packages") packages)"
