#!/usr/bin/env bash
# Formats zerotrain's C++ and CUDA sources with clang-format 14 and .clang-format (Google style,
# 100 columns). --check (CI) changes nothing and fails naming every file that is not formatted;
# without it, the files are rewritten in place. Only files git tracks are touched.
set -euo pipefail
cd "$(dirname "$0")/.."

CLANG_FORMAT=${CLANG_FORMAT:-clang-format-14}
command -v "$CLANG_FORMAT" >/dev/null ||
  { echo "format: $CLANG_FORMAT not found; run tools/setup.sh (Debian's clang-format-14)" >&2; exit 2; }

mode=fix
case "${1:-}" in
  --check) mode=check ;;
  "") ;;
  *) echo "usage: tools/format.sh [--check]" >&2; exit 2 ;;
esac

mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' | grep -v '^third_party/')
if [ "$mode" = fix ]; then
  "$CLANG_FORMAT" -i --style=file "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$CLANG_FORMAT" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -ne 0 ]; then
  echo "format: ${#bad[@]} file(s) not formatted with .clang-format (run: bash tools/format.sh):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format: ${#files[@]} files formatted as .clang-format says"
