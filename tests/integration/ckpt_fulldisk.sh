#!/usr/bin/env bash
# ckpt_fulldisk: a full disk is an error that names ENOSPC, never a crash,
# and it loses nothing that was committed.
#
# A. The whole store on a 3 MiB tmpfs, filled to the last block: a new
#    checkpoint, gc, and pin each exit non-zero naming "No space left
#    on device" (none is killed by a signal: RocksDB used to abort on an
#    assertion); ls and verify still read everything. Then space comes back:
#    the next commit succeeds and verify is clean.
# B. The catalog alone on a tiny tmpfs, one writer process that keeps the
#    store open: the commit whose RocksDB WAL append fails returns ENOSPC
#    naming the WAL file; once space is back the same process commits again
#    without anyone reopening anything, and every commit it reported is in
#    the catalog.
# Needs root (mount -t tmpfs); skipped (77) otherwise.
source "$(dirname "$0")/lib.sh"
CKPT="$FT_BIN/ckpt"
W="$FT_BIN/../tests/ckpt_testwriter"

M1="$TMP/m1" M2="$TMP/m2"
mkdir -p "$M1" "$M2"
unmount_all() {
  umount -l "$M1" 2>/dev/null || true
  umount -l "$M2" 2>/dev/null || true
  cleanup
}
trap unmount_all EXIT
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=3m tmpfs "$M1" 2>/dev/null; then
  echo "SKIP: needs root to mount a tmpfs"
  exit 77
fi
mount -t tmpfs -o size=1m tmpfs "$M2"

# run_cmd NAME CMD...: runs it, keeps stdout+stderr in $TMP/NAME.out, sets RC.
run_cmd() {
  local name=$1
  shift
  set +e
  "$@" >"$TMP/$name.out" 2>&1
  RC=$?
  set -e
}
# expect_enospc NAME: RC is a plain failure (not 0, not a signal) and the
# output names the full disk.
expect_enospc() {
  [ "$RC" -ne 0 ] || fail "$1 succeeded on a full disk: $(cat "$TMP/$1.out")"
  [ "$RC" -lt 128 ] || fail "$1 was killed by signal $((RC - 128)): $(cat "$TMP/$1.out")"
  grep -q "No space left on device" "$TMP/$1.out" ||
    fail "$1 did not name ENOSPC: $(cat "$TMP/$1.out")"
  pass "$1 on a full disk: exit $RC, $(grep -o 'No space left on device' "$TMP/$1.out" | head -1)"
}

# ---- A: the store on a full tmpfs ------------------------------------------
S="local:$M1/store"
"$W" --store "$S" --steps 2 >/dev/null
dd if=/dev/zero of="$M1/filler" bs=4k 2>/dev/null || true
[ "$(df --output=avail -k "$M1" | tail -1 | tr -d ' ')" -eq 0 ] || fail "the tmpfs is not full"

run_cmd write "$W" --store "$S" --start 10 --steps 1
expect_enospc write
run_cmd gc "$CKPT" --store "$S" gc --keep-last 1
expect_enospc gc
run_cmd pin "$CKPT" --store "$S" pin 1
expect_enospc pin
# reads still work, and say why nothing could be marked
run_cmd verify "$CKPT" --store "$S" verify
[ "$RC" -eq 0 ] || fail "verify on a full disk: exit $RC: $(cat "$TMP/verify.out")"
grep -q "2 checkpoints verified, no problems" "$TMP/verify.out" || fail "verify: $(cat "$TMP/verify.out")"
grep -q "No space left on device" "$TMP/verify.out" || fail "verify did not say the catalog is full"
pass "verify on a full disk reads both checkpoints and says it cannot mark"
run_cmd ls "$CKPT" --store "$S" ls --json
[ "$RC" -eq 0 ] || fail "ls on a full disk: exit $RC"

rm -f "$M1/filler"
"$W" --store "$S" --start 10 --steps 1 | grep -q "committed 10" || fail "no commit after space came back"
"$CKPT" --store "$S" pin 1 >/dev/null
run_cmd verify2 "$CKPT" --store "$S" verify
[ "$RC" -eq 0 ] || fail "verify after space came back: $(cat "$TMP/verify2.out")"
grep -q "3 checkpoints verified, no problems" "$TMP/verify2.out" || fail "$(cat "$TMP/verify2.out")"
for s in 1 2 10; do has_checkpoint "$S" "$s" || fail "step $s missing after the full disk"; done
pass "space back: commit 10 and pin succeed, steps 1, 2, 10 verify clean"

# ---- B: the catalog's WAL hits a full disk inside one writer process --------
S2="local:$TMP/store2"
CAT="$M2/catalog"
# leave ~64 KiB: open and the first few commits fit, a later WAL append not
dd if=/dev/zero of="$M2/filler" bs=4k count=240 2>/dev/null
"$W" --store "$S2" --catalog "$CAT" --steps 20 --retry-file "$TMP/go" >"$TMP/w.out" 2>&1 &
WPID=$!
for _ in $(seq 600); do
  grep -q "^failed" "$TMP/w.out" && break
  kill -0 $WPID 2>/dev/null || break
  sleep 0.1
done
grep -q "^failed" "$TMP/w.out" || fail "the catalog never filled: $(cat "$TMP/w.out")"
grep "^failed" "$TMP/w.out" | head -1 | grep -q "No space left on device.*$CAT/[0-9]*\.log" ||
  fail "the failed commit does not name the WAL and ENOSPC: $(grep '^failed' "$TMP/w.out")"
pass "commit with a full catalog disk: $(grep '^failed' "$TMP/w.out" | head -1 | cut -c1-160)"
rm -f "$M2/filler"
touch "$TMP/go"
while kill -0 $WPID 2>/dev/null; do
  [ "$(grep -c '^failed' "$TMP/w.out")" -le 1 ] ||
    fail "the writer still fails after space came back: $(grep '^failed' "$TMP/w.out" | tail -1)"
  sleep 0.1
done
set +e
wait $WPID
WRC=$?
set -e
[ "$WRC" -eq 0 ] || fail "the writer did not recover after space came back (exit $WRC): $(cat "$TMP/w.out")"
[ "$(grep -c '^committed' "$TMP/w.out")" -eq 20 ] || fail "not 20 commits: $(cat "$TMP/w.out")"
# every manifest on disk is a committed checkpoint (the failed commit left none behind)
[ "$(ls "$TMP/store2/manifests/testrun" | grep -c '\.json$')" -eq 20 ] || fail "stray manifests"
cp -r "$CAT" "$TMP/store2/catalog"
run_cmd verify3 "$CKPT" --store "$S2" verify
grep -q "20 checkpoints verified, no problems" "$TMP/verify3.out" || fail "$(cat "$TMP/verify3.out")"
pass "space back: the same writer process committed all 20 steps, verify clean"
