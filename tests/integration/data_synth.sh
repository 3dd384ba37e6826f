#!/bin/bash
# `ftdata synth` is deterministic for a seed, differs across seeds, and its
# corpus has structure: the conditional bigram entropy is clearly below the
# unigram entropy (`ftdata stats --json`).
set -u
FTDATA="${FT_BIN:?FT_BIN not set}/ftdata"
[ -x "$FTDATA" ] || { echo "FAIL: $FTDATA not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ft_data_synth.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$FTDATA" synth --out "$tmp/a/c" --seed 5 >/dev/null || fail "synth a"
"$FTDATA" synth --out "$tmp/b/c" --seed 5 >/dev/null || fail "synth b"
"$FTDATA" synth --out "$tmp/d/c" --seed 6 >/dev/null || fail "synth d"
for s in train val; do
  cmp -s "$tmp/a/c_${s}_000.bin" "$tmp/b/c_${s}_000.bin" || fail "same seed, $s shards differ"
  cmp -s "$tmp/a/c_${s}_000.bin" "$tmp/d/c_${s}_000.bin" && fail "different seeds, same $s shard"
done
# Default size: about 1M tokens in total, 10% val.
"$FTDATA" stats --json "$tmp/a/c_*.bin" >"$tmp/all.json" || fail "stats all"
"$FTDATA" stats --json "$tmp/a/c_val_*.bin" >"$tmp/val.json" || fail "stats val"
num() { sed -n "s/.*\"$2\":[[:space:]]*\([0-9.eE+-]*\).*/\1/p" "$1"; }
tokens=$(num "$tmp/all.json" tokens)
vtokens=$(num "$tmp/val.json" tokens)
[ "$tokens" = 1000000 ] || fail "default corpus has $tokens tokens, want 1000000"
[ "$vtokens" = 100000 ] || fail "default val split has $vtokens tokens, want 100000"
h1=$(num "$tmp/all.json" unigram_entropy_nats)
h2=$(num "$tmp/all.json" bigram_entropy_nats)
b1=$(num "$tmp/all.json" unigram_entropy_bits)
echo "unigram entropy $h1 nats ($b1 bits), bigram entropy $h2 nats"
awk -v h1="$h1" -v h2="$h2" -v b1="$b1" 'BEGIN {
  if (!(h1 > 1.0 && h1 < log(256))) { print "FAIL: unigram entropy " h1 " out of (1, ln 256)"; exit 1 }
  if (!(h2 > 0 && h2 < 0.75 * h1)) { print "FAIL: bigram entropy " h2 " not clearly below unigram " h1; exit 1 }
  if (!((b1 - h1 / log(2)) < 1e-9 && (h1 / log(2) - b1) < 1e-9)) { print "FAIL: bits != nats / ln 2"; exit 1 }
}' || fail "entropies"
# Sizes and shards: --tokens and --shard-tokens.
"$FTDATA" synth --out "$tmp/e/c" --tokens 5000 --shard-tokens 2000 --val-frac 0.2 >/dev/null || fail "synth e"
n=$(ls "$tmp"/e/c_train_*.bin | wc -l)
[ "$n" -eq 2 ] || fail "4000 train tokens / 2000 per shard gave $n shards"
"$FTDATA" stats --json "$tmp/e/c_*.bin" >"$tmp/e.json" || fail "stats e"
[ "$(num "$tmp/e.json" tokens)" = 5000 ] || fail "--tokens 5000 gave $(num "$tmp/e.json" tokens)"
[ "$(num "$tmp/e.json" shards)" = 3 ] || fail "want 3 shards, got $(num "$tmp/e.json" shards)"

[ "$fails" -eq 0 ] && echo PASS || { echo "$fails failure(s)"; exit 1; }
