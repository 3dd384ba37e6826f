#!/usr/bin/env bash
# Checkpoints in memory (issue 15 parts 2-4), with the real worker: the demo
# model, 2 nodes + 1 spare, checkpoint.replicate, node 1 lost at step 23.
#  1. every step, most in memory only (every_steps 1, persist_every 10,
#     in process): the steps between persisted ones commit at level memory
#     (checkpoint_committed level "memory", nothing of them in the store);
#     the loss restores the memory checkpoint of the step before the fault
#     (one step lost) with no chunk byte from the store (node 0 from its own
#     memory, the spare node 1's shard from what node 1 pushed into it); the
#     final weights are bit for bit those of a run without a fault; at the
#     end `ckpt ls` lists only persisted checkpoints (memory ones pruned)
#     and `ckpt verify` passes.
#  2. the host and every buddy holding its copies lost (failpoint
#     chaos_kill_spares: the spare dies with node 1; process restarts, so
#     node 0's memory goes too): the memory checkpoint cannot be restored,
#     the supervisor drops the run's memory checkpoints (checkpoint_lost,
#     nobody blamed) and the next generation restores the newest one in the
#     store (step 20), from the store.
#  3. checkpoint.require memory (every 5 steps, all persisted): each
#     checkpoint commits at level memory first, then again once in the
#     store (its record upgraded: `ckpt ls` says durable); same weights.
#  4. a run file asking for memory checkpoints without replicas is refused,
#     naming the file, line and key.
. "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
synth_data "$TMP"

# run_one NAME CHECKPOINT_LINES RECOVERY_LINES CHAOS: a supervised run in $TMP/NAME
run_one() {
  local name=$1 ck=$2 rec=$3 chaos=$4
  sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
    -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
    -e 's|  steps: 300|  steps: 40|' -e "s|  store: .*|  store: \"local:$TMP/$name/store\"|" \
    -e "s|  every_steps: 25|$ck|" -e 's|  val_every: 25|  val_every: 0|' \
    "$FT_SRC/examples/demo.yaml" >"$TMP/$name.yaml"
  printf '%b\n' "$rec" >>"$TMP/$name.yaml"
  [ -n "$chaos" ] && echo "chaos: {kill_node_at_step: $chaos}" >>"$TMP/$name.yaml"
  mkdir -p "$TMP/$name"
  env FT_FAILPOINTS="min_step_ms=60${FP:+,$FP}" "$FT_BIN/supervise" --state "$TMP/$name/st" \
    --worker "$FT_BIN/worker" --spares 1 "$TMP/$name.yaml" >"$TMP/$name.out" 2>&1 ||
    {
      local rc=$?
      tail -30 "$TMP/$name.out"
      fail "$name: supervise exited $rc"
    }
  "$FT_BIN/ckpt" --store "local:$TMP/$name/store" restore 40 --to "$TMP/$name.safetensors" \
    >/dev/null || fail "$name: no final checkpoint"
}

# restore_step NAME GEN: the restore step generation GEN started from
restore_step() {
  python3 -c '
import json, sys
print([e["restore_step"] for e in map(json.loads, open(sys.argv[1]))
       if e["event"] == "generation_started" and e["gen"] == int(sys.argv[2])][0])' \
    "$TMP/$1/st/events.jsonl" "$2"
}

# the reference: no fault, a checkpoint every 5 steps in the store
FP= run_one free '  every_steps: 5' '' ''

EVERY='  every_steps: 1\n  replicate: true\n  persist_every: 10'
FP= run_one every "$EVERY" '  in_process: true' 23
ST=$TMP/every/st
R=$(restore_step every 2)
has_event "$ST" fault_detected 'e["kind"] == "node_lost" and e["node"] == 1' ||
  fail "every: node 1's loss not detected: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" checkpoint_committed "e[\"step\"] == $R and e[\"level\"] == \"memory\"" ||
  fail "every: restore step $R was not a memory-level checkpoint"
has_event "$ST" checkpoint_committed 'e["step"] == 20 and e["level"] == "store"' ||
  fail "every: step 20 (persist_every 10) did not go to the store"
has_event "$ST" recovered 'e["steps_lost"] <= 1' ||
  fail "every: more than one step lost: $(grep '"recovered"' "$ST/events.jsonl")"
# node 0 stays in its process and restores from its own memory, the spare
# from what node 1 pushed into it: neither reads the store. (A late
# memory-level report of the old generation once got node 0's connection
# closed as stale, and it fell back to a process restart.)
has_event "$ST" node_rejoined 'e["node"] == 0' && ! has_event "$ST" rejoin_fallback ||
  fail "every: node 0 did not rejoin in process: $(events "$ST" | grep -v -e '^step$' -e committed | tr '\n' ' ')"
has_event "$ST" connection_closed && fail "every: a connection closed: $(grep connection_closed "$ST/events.jsonl")"
for n in 0 2; do
  grep -Eq "restored step $R in [0-9]+ ms: [0-9.]*[1-9][0-9.]* MiB from memory, 0.00 MiB from buddies, 0.00 MiB from the store; 0 chunk" \
    "$ST/logs/node$n.slot0.log" ||
    fail "every: node $n should restore step $R from memory alone: $(grep restored "$ST/logs/node$n.slot0.log")"
done
cmp -s "$TMP/free.safetensors" "$TMP/every.safetensors" ||
  fail "every: the final weights differ from the run without a fault"
"$FT_BIN/ckpt" --store "local:$TMP/every/store" ls --json >"$TMP/every.ls"
python3 - "$TMP/every.ls" <<'PY' || fail "every: ckpt ls: $(cat "$TMP/every.ls")"
import json, sys
v = json.load(open(sys.argv[1]))
assert [c["step"] for c in v] == [10, 20, 30, 40], [c["step"] for c in v]
assert all(c["level"] == "durable" for c in v), v
PY
"$FT_BIN/ckpt" --store "local:$TMP/every/store" verify >/dev/null || fail "every: ckpt verify failed"
pass "a checkpoint every step, 9 in 10 in memory only: node 1 lost at step 23, step $R restored from memory (no byte from the store, one step lost); same weights as without a fault"

# the host and the buddies holding its copies all lost: back to the store
FP=chaos_kill_spares=1 run_one lost "$EVERY" '  in_process: false' 23
ST=$TMP/lost/st
has_event "$ST" checkpoint_lost 'e["node"] in (0, 2)' || # whichever fails its restore first
  fail "lost: no checkpoint_lost: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" fault_detected 'e["kind"] == "store_error" and not e["blamed"]' ||
  fail "lost: the failed restore should blame nobody"
has_event "$ST" node_quarantined 'e["node"] == 0' && fail "lost: node 0 was quarantined for a lost memory checkpoint"
last=$(python3 -c '
import json, sys
print([e["restore_step"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "generation_started"][-1])' "$ST/events.jsonl")
[ "$last" = 20 ] || fail "lost: the last generation should restore step 20 from the store, got $last"
grep -Eq "restored step 20 in [0-9]+ ms: 0.00 MiB from memory, 0.00 MiB from buddies, [0-9.]*[1-9][0-9.]* MiB from the store" \
  "$ST/logs/node0.slot0.log" || fail "lost: step 20 should come from the store: $(grep restored "$ST/logs/node0.slot0.log")"
has_event "$ST" run_done || fail "lost: the run did not finish"
pass "the host and every buddy lost: the memory checkpoint is dropped (checkpoint_lost, nobody blamed), step 20 restored from the store"

# require memory: committed in memory first, then upgraded once in the store
FP= run_one req '  every_steps: 5\n  replicate: true\n  require: memory' '  in_process: true' 23
ST=$TMP/req/st
for s in 5 10 15 20; do
  has_event "$ST" checkpoint_committed "e[\"step\"] == $s and e[\"level\"] == \"memory\"" &&
    has_event "$ST" checkpoint_committed "e[\"step\"] == $s and e[\"level\"] == \"store\"" ||
    fail "req: step $s should commit in memory, then in the store: $(grep "\"step\":$s," "$ST/events.jsonl" | grep committed)"
done
"$FT_BIN/ckpt" --store "local:$TMP/req/store" ls --json >"$TMP/req.ls"
python3 - "$TMP/req.ls" <<'PY' || fail "req: ckpt ls: $(cat "$TMP/req.ls")"
import json, sys
v = json.load(open(sys.argv[1]))
assert [c["level"] for c in v] == ["durable"] * len(v) and len(v) >= 5, v
PY
cmp -s "$TMP/free.safetensors" "$TMP/req.safetensors" ||
  fail "req: the final weights differ from the run without a fault"
pass "checkpoint.require memory: every checkpoint committed in memory first, then upgraded to durable; same weights"

# memory checkpoints without replicas: refused before anything starts
printf 'run: x\ncheckpoint:\n  every_steps: 1\n  persist_every: 4\n' >"$TMP/bad.yaml"
set +e
"$FT_BIN/supervise" --state "$TMP/bad-st" "$TMP/bad.yaml" >"$TMP/bad.out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || fail "bad: exit $rc, expected 2: $(cat "$TMP/bad.out")"
[ -e "$TMP/bad-st" ] && fail "bad: supervise started (made its state folder) on a refused run file"
grep -q "bad.yaml:4:[0-9]*: checkpoint.persist_every: 4 .*needs checkpoint.replicate: true" "$TMP/bad.out" ||
  fail "bad: the error should name the file, line 4 and the key: $(cat "$TMP/bad.out")"
pass "persist_every without checkpoint.replicate is refused at line 4"
