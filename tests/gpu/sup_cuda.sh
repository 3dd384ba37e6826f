#!/usr/bin/env bash
# A world-size-1 NCCL run under the supervisor (the NCCL unique id relayed
# through the supervisor's rendezvous store), with checkpoints and a node
# killed by the chaos failpoint: a spare takes over, restores the last
# checkpoint onto the GPU, and the run finishes with a verified store. The
# kill waits for checkpoint 10's commit (failpoint kill_after_commit): on an
# H100 step 15 came before it, and the spare restored the one before.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/gpu_lib.sh"
source "$(dirname "$0")/../integration/sup_lib.sh"
synth_data "$TMP"
ST=$TMP/state
FT_FAILPOINTS=kill_node_at_step=15,kill_after_commit=10 "$FT_BIN/supervise" --state "$ST" --spares 1 --steps 30 \
  --set nodes.count=1 --set nodes.device=cuda --set checkpoint.every_steps=10 \
  --set "checkpoint.store=local:$ST/store" --set chaos.kill_node_at_step=0 \
  --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin" \
  "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 || { cat "$ST.out"; fail "supervise exited $?"; }
has_event "$ST" chaos_kill || { cat "$ST.out"; fail "no chaos_kill"; }
has_event "$ST" generation_started 'e["gen"] == 2 and e["world"] == 1' ||
  fail "no generation 2 at world 1"
restored_newest "$ST" 2 10 || {
  grep -E '"(checkpoint_committed|chaos_kill|generation_started)"' "$ST/events.jsonl"
  fail "generation 2 did not restore the newest committed checkpoint"
}
has_event "$ST" run_done || fail "no run_done"
has_checkpoint "local:$ST/store" 30 || fail "final checkpoint missing"
"$FT_BIN/ckpt" --store "local:$ST/store" verify || fail "ckpt verify failed"
pass "NCCL world 1 under the supervisor: kill, spare, restore on the GPU, done"
