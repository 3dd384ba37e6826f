#!/usr/bin/env bash
# The CUDA engine at world 2 under the supervisor, on cuemu (NCCL between
# the rank processes: tests/cuemu/cuemu_nccl.cpp; the unique id relayed
# through the supervisor's rendezvous store): node 1 is killed at step 12,
# in the middle of its step's collectives (the chaos failpoint, once
# checkpoint 10 is committed), so node 0 is left blocked in a collective
# until the gang is stopped; the spare takes node 1's place, both restore
# checkpoint 10 onto their devices, and the run ends with the same bits as
# a run without the fault (final checkpoint restored and compared), and a
# store that verifies.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../gpu/gpu_lib.sh"
source "$(dirname "$0")/../integration/sup_lib.sh"
synth_data "$TMP"
STEPS=20

# run NAME [FAILPOINTS]: a supervised world-2 CUDA run in $TMP/NAME; its final
# checkpoint restored to $TMP/NAME.safetensors
run() {
  local st=$TMP/$1
  FT_FAILPOINTS=${2:-} "$FT_BIN/supervise" --state "$st" --worker "$FT_BIN/worker" --spares 1 \
    --steps $STEPS --set nodes.count=2 --set nodes.device=cuda --set checkpoint.every_steps=5 \
    --set "checkpoint.store=local:$st/store" --set chaos.kill_node_at_step=0 \
    --set train.val_every=0 --set watchdog.heartbeat_timeout_s=10 \
    --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin" \
    "$FT_SRC/examples/demo.yaml" >"$st.out" 2>&1 || { tail -30 "$st.out"; fail "$1: supervise exited $?"; }
  has_event "$st" run_done || fail "$1: no run_done"
  "$FT_BIN/ckpt" --store "local:$st/store" restore $STEPS --to "$TMP/$1.safetensors" >/dev/null ||
    fail "$1: no final checkpoint"
}

run ref
has_event "$TMP/ref" generation_started 'e["gen"] == 1 and e["world"] == 2' || fail "ref: no world-2 gang"
pass "a world-2 CUDA run under the supervisor, on cuemu"

run fault kill_node_at_step=12,kill_after_commit=10,kill_gang_position=1
ST=$TMP/fault
has_event "$ST" chaos_kill || fail "no chaos_kill"
has_event "$ST" spare_promoted || fail "no spare promoted"
has_event "$ST" generation_started 'e["gen"] == 2 and e["world"] == 2' || fail "no generation 2 at world 2"
restored_newest "$ST" 2 10 || {
  grep -E '"(checkpoint_committed|chaos_kill|generation_started)"' "$ST/events.jsonl"
  fail "generation 2 did not restore the newest committed checkpoint"
}
"$FT_BIN/ckpt" --store "local:$ST/store" verify >/dev/null || fail "ckpt verify failed"
pass "node 1 killed mid-step: the spare takes its place, both restore checkpoint 10 on their devices"
# the losses the resumed gang reported (every 5 steps) are the fault-free run's, bit for bit
python3 - "$TMP/ref/events.jsonl" "$TMP/fault/events.jsonl" <<'PY' || fail "the resumed run's losses differ"
import json, sys
def losses(path):  # the last report of each step (a step redone after the restore replaces it)
    return {e["step"]: e["loss"] for e in map(json.loads, open(path)) if e["event"] == "step"}
ref, got = losses(sys.argv[1]), losses(sys.argv[2])
after = sorted(k for k in got if k > 10)
print("steps after the restore:", ", ".join(f"{k}: {got[k]!r} (ref {ref.get(k)!r})" for k in after))
sys.exit(0 if after and all(got[k] == ref.get(k) for k in after) else 1)
PY
cmp -s "$TMP/ref.safetensors" "$TMP/fault.safetensors" ||
  fail "the run with the fault ends with different weights than the run without"
pass "losses after the restore and final weights bit-identical to the run without the fault"
