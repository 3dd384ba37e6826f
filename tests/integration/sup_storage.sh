#!/usr/bin/env bash
# Storage faults are the store's, never a node's (real worker, the store on
# a small tmpfs; needs root for the mount, else skipped with 77):
#  1. a 3 MiB store fills up after two checkpoints: each later shard write
#     fails with ENOSPC, reported as storage_fault (path and errno), the
#     checkpoint is skipped (checkpoint_failed, cause storage) and training
#     goes on; the final checkpoint is retried for a bounded time, then
#     supervise exits 4 saying so. No node
#     quarantined, no spare spent, no recovery.
#  2. the store fills up mid-run and space comes back: checkpoints resume by
#     themselves and the run finishes (exit 0), nobody blamed.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: mounting a tmpfs needs root"; exit 77; }
MNT=$TMP/mnt
mkdir -p "$MNT"
mount -t tmpfs -o size=3m tmpfs "$MNT" || { echo "SKIP: cannot mount a tmpfs"; exit 77; }
trap 'umount -l "$MNT" 2>/dev/null || true; cleanup' EXIT
synth_data "$TMP"

storage_run() { # STATE [args...]: the real worker, 2 nodes + 1 spare, store on $MNT
  local st=$1
  shift
  "$FT_BIN/supervise" --state "$st" --store "local:$MNT/store" --spares 1 \
    --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin" \
    --set watchdog.heartbeat_timeout_s=3 --set watchdog.loss_spike.window=1000 \
    "$@" "$FT_SRC/examples/demo.yaml" >"$st.out" 2>&1
}

no_blame() { # STATE: nobody blamed, no spare spent, no recovery
  has_event "$1" node_quarantined && fail "a node was quarantined for a storage fault"
  has_event "$1" spare_promoted && fail "a spare was spent on a storage fault"
  has_event "$1" fault_detected && fail "a storage fault started a recovery"
  return 0
}

# ---- 1. the store stays full: exit 4 after retrying the final checkpoint ----
ST=$TMP/s1
set +e
storage_run "$ST" --steps 60 --set checkpoint.every_steps=10
rc=$?
set -e
[ $rc -eq 4 ] || { cat "$ST.out"; fail "a full store should end the run with exit 4, got $rc"; }
grep -q "run_failed: the final checkpoint (step 60) could not be written.*No space left on device" "$ST.out" ||
  { cat "$ST.out"; fail "the terminal does not say the final checkpoint failed"; }
has_event "$ST" storage_fault "e['errno'] == 'ENOSPC' and e['path'].startswith('$MNT/store/') and e['step'] < 60" ||
  fail "no storage_fault with errno and path: $(grep storage_fault "$ST/events.jsonl" | head -1)"
has_event "$ST" checkpoint_failed "e['cause'] == 'storage' and e['step'] < 60 and 'No space left' in e['reason']" ||
  fail "a skipped checkpoint wrote no checkpoint_failed (cause storage)"
has_event "$ST" checkpoint_committed || fail "no checkpoint committed before the store filled up"
has_event "$ST" run_failed 'e["cause"] == "store"' || fail "run_failed cause store"
no_blame "$ST"
pass "full store: checkpoints skipped, training went on, final retried, exit 4, no node blamed"

# ---- 2. the store fills up, then space comes back ----
umount "$MNT"
mount -t tmpfs -o size=32m tmpfs "$MNT" # the catalog alone preallocates 4 MiB
ST=$TMP/s2
FT_FAILPOINTS=slow_rank=0 storage_run "$ST" --steps 80 --set checkpoint.every_steps=5 \
  --set checkpoint.keep_last=2 &
SUPPID=$!
wait_event() { # STATE NAME: waits (at most 60 s) for the event
  for _ in $(seq 600); do
    [ -f "$1/events.jsonl" ] && has_event "$1" "$2" && return 0
    kill -0 "$SUPPID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
wait_event "$ST" checkpoint_committed || { cat "$ST.out"; fail "no first checkpoint"; }
dd if=/dev/zero of="$MNT/filler" bs=64k 2>/dev/null || true # the disk is full now
wait_event "$ST" storage_fault || { cat "$ST.out"; fail "no storage_fault on a full store"; }
rm -f "$MNT/filler" # space is back
set +e
wait $SUPPID
rc=$?
set -e
[ $rc -eq 0 ] || { cat "$ST.out"; fail "the run should finish once space is back, got $rc"; }
python3 - "$ST/events.jsonl" <<'PY' || fail "no checkpoint committed after the storage fault"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
first = min(i for i, e in enumerate(evs) if e["event"] == "storage_fault")
assert any(e["event"] == "checkpoint_committed" for e in evs[first:])
assert any(e["event"] == "checkpoint_committed" and e["step"] == 80 for e in evs)
PY
has_event "$ST" run_done || fail "no run_done"
no_blame "$ST"
pass "space back: checkpoints resumed by themselves, the run finished, no node blamed"
