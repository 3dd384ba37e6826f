#!/bin/bash
# ckpt_corrupt: one flipped byte in one chunk file. `ckpt verify` must exit 1
# naming the chunk and mark the checkpoint bad; `ckpt restore` of that
# checkpoint must refuse the chunk with a clear error and write nothing; the
# other checkpoint still verifies and restores. Then delta chunks: a damaged
# base makes every checkpoint whose chains need it fail verify (naming the
# base), and `restore latest` falls back past them to an intact one.
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_corrupt.XXXXXX")
trap 'rm -rf "$T"' EXIT
export CKPT_STORE="local:$T/store"
fail() { echo "FAIL: $*"; exit 1; }

"$W" --store "$CKPT_STORE" --steps 2 >/dev/null || fail "writer failed"
"$C" verify >/dev/null || fail "verify of an intact store failed"

# a chunk of param/h.0 at step 2 (the tensors drift every step, so step 1
# does not share it; the model restore reads it)
hex=$(grep -A40 '"param/h.0"' "$T/store/manifests/testrun/00000000000000000002.json" |
  grep -oE '[0-9a-f]{64}' | head -n 1)
[ -n "$hex" ] || fail "cannot find param/h.0's chunk in the manifest object"
victim="$T/store/chunks/${hex:0:2}/$hex"
[ -f "$victim" ] || fail "no chunk file $victim"
size=$(stat -c %s "$victim")
off=$((size / 2))
byte=$(od -An -tu1 -j "$off" -N1 "$victim" | tr -d ' ')
new=$(((byte + 1) % 256))
printf "\\$(printf %03o "$new")" | dd of="$victim" bs=1 seek="$off" conv=notrunc status=none
[ "$(od -An -tu1 -j "$off" -N1 "$victim" | tr -d ' ')" = "$new" ] || fail "could not flip a byte"

out=$("$C" verify 2>&1)
rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "verify exited $rc, expected 1"
echo "$out" | grep -q "$hex" || fail "verify did not name the damaged chunk $hex"
bad=$(echo "$out" | awk '/^BAD/{sub(":", "", $4); print $4}')
[ "$bad" = 2 ] || fail "verify did not report step 2 as BAD"
good=1
"$C" ls | awk -v s="$bad" '$2==s' | grep -q bad || fail "step $bad is not marked bad in ls"

err=$("$C" restore "$bad" --to "$T/model.safetensors" 2>&1 >/dev/null)
rc=$?
echo "$err"
[ $rc -eq 1 ] || fail "restore of the damaged checkpoint exited $rc, expected 1"
echo "$err" | grep -q "$hex" || fail "restore's error does not name the chunk"
[ ! -e "$T/model.safetensors" ] || fail "restore left a file behind"
"$C" restore "$bad" --to "$T/shard" --world 2 --rank 0 >/dev/null 2>&1 && fail "raw restore succeeded"
[ ! -e "$T/shard" ] || fail "raw restore left a file behind"
ls "$T" | grep -q tmp && fail "a temp file was left behind"

# the intact one still verifies and restores; 'latest' skips the bad one
"$C" verify "$good" >/dev/null || fail "verify of intact step $good failed"
"$C" restore latest --to "$T/model.safetensors" | grep -q "step $good" ||
  fail "restore latest did not pick the intact step $good"
[ -s "$T/model.safetensors" ] || fail "no model written"

# ---- delta chunks: steps 1 and 3 stand alone, 2 and 4 are deltas on them
export CKPT_STORE="local:$T/dstore"
"$W" --store "$CKPT_STORE" --steps 4 --full-every 2 >/dev/null || fail "delta writer failed"
"$C" verify >/dev/null || fail "verify of an intact delta store failed"
"$C" ls | awk '$1=="testrun" {print $2, $(NF-1)}' | tr '\n' ' ' | grep -q "1 0 2 1 3 0 4 1" ||
  fail "expected depths 0 1 0 1: $("$C" ls)"
# the base step 4's first param/h.0 chunk is decoded against: step 3's
base=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
t = [t for t in m["tensors"] if t["name"] == "param/h.0"][0]
print(t["chunks"][0][4][:64])' "$T/dstore/manifests/testrun/00000000000000000004.json")
[ ${#base} = 64 ] || fail "step 4's param/h.0 chunk is not a delta"
grep -q "$base" "$T/dstore/manifests/testrun/00000000000000000003.json" ||
  fail "the base $base is not a chunk of step 3"
victim="$T/dstore/chunks/${base:0:2}/$base"
size=$(stat -c %s "$victim")
printf '\x5a' | dd of="$victim" bs=1 seek=$((size - 8)) conv=notrunc status=none
out=$("$C" verify 2>&1)
rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "verify of the damaged base exited $rc, expected 1"
bad=$(echo "$out" | awk '/^BAD/{sub(":", "", $4); print $4}' | sort -n | tr '\n' ' ')
[ "$bad" = "3 4 " ] || fail "verify marked steps '$bad' bad, expected 3 and 4 (the base and its delta)"
echo "$out" | grep -A1 "step 4" | grep -q "$base" || fail "verify of step 4 did not name its damaged base"
"$C" restore 4 --to "$T/m4.safetensors" >/dev/null 2>&1 && fail "restore of step 4 succeeded"
"$C" restore latest --to "$T/m2.safetensors" | grep -q "step 2" ||
  fail "restore latest did not fall back to step 2 (a delta on intact step 1)"
echo "ckpt_corrupt: ok"
