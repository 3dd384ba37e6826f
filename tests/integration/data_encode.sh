#!/bin/bash
# `ftdata encode`: byte-level tokens (token = byte value), the last fraction
# of the file becomes val, shards split at --shard-tokens, and the shards
# concatenated give back the input bytes.
set -u
FTDATA="${FT_BIN:?FT_BIN not set}/ftdata"
[ -x "$FTDATA" ] || { echo "FAIL: $FTDATA not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ft_data_encode.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Input with every byte value, 0..255, ten times plus a tail: 2600 bytes.
for i in $(seq 10); do for b in $(seq 0 255); do printf "\\$(printf %03o "$b")"; done; done >"$tmp/in.bin"
printf 'tail of the file' | head -c 40 >>"$tmp/in.bin"
size=$(stat -c %s "$tmp/in.bin")
"$FTDATA" encode --in "$tmp/in.bin" --out "$tmp/o/x" --val-frac 0.25 --shard-tokens 1000 \
  >"$tmp/out" || fail "encode: $(cat "$tmp/out")"
cat "$tmp/out"
val=$((size / 4)); train=$((size - val))
ntrain=$(ls "$tmp"/o/x_train_*.bin | wc -l)
[ "$ntrain" -eq $(((train + 999) / 1000)) ] || fail "$train train tokens in $ntrain shards"
# Decode: tokens (uint16 after the 1024-byte header) against the input bytes.
: >"$tmp/tokens"
for f in "$tmp"/o/x_train_*.bin "$tmp"/o/x_val_*.bin; do
  od -An -v -tu2 -w2 -j1024 "$f" >>"$tmp/tokens"
done
od -An -v -tu1 -w1 "$tmp/in.bin" >"$tmp/bytes"
diff <(tr -d ' ' <"$tmp/tokens") <(tr -d ' ' <"$tmp/bytes") >/dev/null || fail "tokens != input bytes"
"$FTDATA" stats --json "$tmp/o/x_val_*.bin" >"$tmp/v.json" || fail "stats val"
grep -q "\"tokens\":[[:space:]]*$val," "$tmp/v.json" || fail "val split: $(cat "$tmp/v.json")"
# Empty input: bad data (1); missing input: I/O error (3).
: >"$tmp/empty.txt"
"$FTDATA" encode --in "$tmp/empty.txt" --out "$tmp/o/e" >/dev/null 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "empty input: exit $rc, want 1"
"$FTDATA" encode --in "$tmp/missing.txt" --out "$tmp/o/m" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 3 ] || fail "missing input: exit $rc, want 3"
grep -qF "missing.txt" "$tmp/err" || fail "missing input not named: $(cat "$tmp/err")"
# Re-encoding a shorter file warns about stale shards from the longer run.
head -c 900 "$tmp/in.bin" >"$tmp/short.bin"
"$FTDATA" encode --in "$tmp/short.bin" --out "$tmp/o/x" --val-frac 0 --shard-tokens 1000 \
  >/dev/null 2>"$tmp/err" || fail "re-encode"
grep -q "x_train_001.bin" "$tmp/err" || fail "no warning about the stale shard: $(cat "$tmp/err")"

[ "$fails" -eq 0 ] && echo PASS || { echo "$fails failure(s)"; exit 1; }
