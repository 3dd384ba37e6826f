#!/usr/bin/env bash
# Checks across keys judge the configuration a program really runs: the run
# file, then --steps/--set, then the world it trains in (issue 40).
#  1. worker --standalone (world 1) trains a run file with
#     train: {global_batch: 4, micro_batch: 4} and no nodes: section, whose
#     default nodes.count (2) would not divide the batch.
#  2. worker --standalone with a micro-batch (--set) that does not divide
#     the global batch at world 1 is refused, naming both keys and saying
#     the micro-batch came from --set.
#  3. supervise (fake workers) refuses that file at its default 2 nodes,
#     saying nodes.count is the default; accepts it with
#     --set nodes.count=1 and finishes the run.
#  4. supervise with --set nodes.count=3 (no world divides the batch) is
#     refused, naming train.global_batch, the merged nodes.count 3 and that
#     it came from --set.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"

RF=$TMP/batch4.yaml
cat >"$RF" <<'EOF'
# no nodes: section: nodes.count is its default, 2
train:
  global_batch: 4
  micro_batch: 4
doctor: {mem_mb: 1, disk_mb: 1}
EOF

# ---- 1. worker --standalone: world 1 ----
synth_data "$TMP" 20000
set +e
"$FT_BIN/worker" --standalone "$RF" --set "data.train=$TMP/synth_train_*.bin" \
  --set "data.val=$TMP/synth_val_*.bin" --steps 2 --quiet --log-json "$TMP/loss.jsonl" \
  >"$TMP/w1.out" 2>&1
rc=$?
set -e
[ $rc -eq 0 ] || { cat "$TMP/w1.out"; fail "worker --standalone refused a batch that divides at world 1 (exit $rc)"; }
[ "$(losses "$TMP/loss.jsonl" | tail -1 | cut -d' ' -f1)" = 2 ] ||
  fail "worker --standalone did not train 2 steps: $(cat "$TMP/loss.jsonl")"
pass "worker --standalone trains global_batch 4 x micro_batch 4 with no nodes: section"

# ---- 2. worker --standalone: a micro-batch that does not divide ----
set +e
"$FT_BIN/worker" --standalone "$RF" --set train.micro_batch=3 --steps 2 --quiet >"$TMP/w2.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || { cat "$TMP/w2.out"; fail "micro_batch 3 of 4: exit $rc, expected 2"; }
grep -qF "train.micro_batch: 3 does not divide train.global_batch (4); 2 would [train.micro_batch: --set]" \
  "$TMP/w2.out" || fail "micro_batch 3 of 4: $(cat "$TMP/w2.out")"
pass "worker --standalone: $(head -1 "$TMP/w2.out")"

# ---- 3. supervise: refused at 2 nodes, accepted with --set nodes.count=1 ----
sup() { # STATE [args...]
  local st=$1
  shift
  "$FT_BIN/supervise" --state "$st" --worker "$FAKE" --steps 10 \
    --set checkpoint.every_steps=5 --set watchdog.heartbeat_timeout_s=3 "$@" "$RF" >"$st.out" 2>&1
}
ST=$TMP/s2
set +e
sup "$ST"
rc=$?
set -e
[ $rc -eq 2 ] || { cat "$ST.out"; fail "2 nodes x micro_batch 4 of global_batch 4: exit $rc, expected 2"; }
grep -qF "$RF:4:16: train.micro_batch: 4 x the world size 2 (nodes.count 2 x nodes.workers_per_node 1)" "$ST.out" &&
  grep -qF "nodes.count: default" "$ST.out" ||
  fail "2 nodes: the message does not name the keys and the default: $(cat "$ST.out")"
pass "supervise at the default 2 nodes: $(head -1 "$ST.out")"

ST=$TMP/s1
sup "$ST" --set nodes.count=1 || { rc=$?; cat "$ST.out"; fail "--set nodes.count=1: supervise exited $rc"; }
has_event "$ST" run_done || { cat "$ST.out"; fail "--set nodes.count=1: the run did not finish"; }
has_event "$ST" run_started 'e["world"] == 1' ||
  fail "--set nodes.count=1: not a world of 1: $(grep run_started "$ST/events.jsonl")"
pass "supervise --set nodes.count=1 accepts a batch only one node divides, and finishes"

# ---- 4. supervise: a world that does not divide the batch, from --set ----
ST=$TMP/s3
set +e
sup "$ST" --set nodes.count=3
rc=$?
set -e
[ $rc -eq 2 ] || { cat "$ST.out"; fail "--set nodes.count=3: exit $rc, expected 2"; }
grep -qF "train.global_batch: 4 is not a multiple of the world size 3 (nodes.count 3 x nodes.workers_per_node 1); 3 or 6 would be" "$ST.out" &&
  grep -qF "nodes.count: --set" "$ST.out" ||
  fail "--set nodes.count=3: $(cat "$ST.out")"
pass "supervise --set nodes.count=3: $(head -1 "$ST.out")"
