#!/bin/sh
# Fold the small inputs the fuzzers kept (fuzz/corpus-work/TARGET, ignored) into the
# committed corpus (fuzz/corpus/TARGET): only files of at most MAXB bytes, and only
# those that add coverage over what is committed (libFuzzer -merge=1).
#   fuzz/merge.sh MAXB TARGET...
set -eu
cd "$(dirname "$0")"
maxb=$1; shift
bin=target/x86_64-unknown-linux-gnu/release
for t in "$@"; do
  small=$(mktemp -d); out=$(mktemp -d)
  find "corpus-work/$t" -type f -size -"$maxb"c -exec cp {} "$small/" \;
  cp "corpus/$t"/* "$out/"
  before=$(ls "$out" | wc -l)
  RAYON_NUM_THREADS=1 "$bin/$t" -merge=1 -timeout=20 "$out" "$small" > "logs/merge-$t.log" 2>&1
  for f in "$out"/*; do
    [ -e "corpus/$t/$(basename "$f")" ] || cp "$f" "corpus/$t/"
  done
  echo "$t: $before seeds, $(ls "corpus/$t" | wc -l) after merge, $(du -sb "corpus/$t" | cut -f1) bytes"
  rm -rf "$small" "$out"
done
