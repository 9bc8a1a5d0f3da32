#!/bin/bash
# Rebuilds fortunes.txt, the embedded training corpus, from the Debian `fortunes` package's data
# files (fortune-mod 1:1.99.1, BSD licence; see LICENSE). Run once by hand; the output is
# committed so builds need neither the package nor a download.
#   usage: make_fortunes.sh [DIR]   (DIR defaults to /usr/share/games/fortunes)
# Each fortune becomes a paragraph; paragraphs are separated by one blank line. Overstrike
# sequences (x BACKSPACE) and other control bytes are removed, and fortunes containing words on a
# short block list are dropped. The files are interleaved by relative position (the i-th of n
# fortunes of a file sorts at i/n), so every part of the stream, including the held-out tail,
# mixes all the sources.
set -euo pipefail
dir=${1:-/usr/share/games/fortunes}
files=(computers science wisdom literature)
block='damn|hell|sex|drunk|drug|beer|whore|rape|kill|bitch|shit|fuck|nigg|jew|negro|nazi|breast|porn|nude|naked|gay'
for f in "${files[@]}"; do
  # One record per fortune: "relative-position TAB file TAB text-with-newlines-as-\001".
  LC_ALL=C awk -v name="$f" -v block="$block" '
    function flush() {
      gsub(/[^\n]\010/, "", text); gsub(/[\001-\010\013-\037\177]/, "", text)
      sub(/[ \t\n]+$/, "", text); sub(/^\n+/, "", text)
      if (text != "" && tolower(text) !~ block) { n++; body[n] = text }
      text = ""
    }
    $0 == "%" { flush(); next }
    { text = text $0 "\n" }
    END {
      flush()
      for (i = 1; i <= n; i++) { gsub(/\n/, "\001", body[i]); printf "%.9f\t%s\t%s\n", i / n, name, body[i] }
    }' "$dir/$f"
done | LC_ALL=C sort -t "$(printf '\t')" -k1,1n -k2,2 | LC_ALL=C awk '
  { text = $0; sub(/^[^\t]*\t[^\t]*\t/, "", text); gsub(/\001/, "\n", text); if (NR > 1) printf "\n"; printf "%s\n", text }'
