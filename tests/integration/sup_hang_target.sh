#!/usr/bin/env bash
# Failpoints that target one node, and a strict FT_FAILPOINTS (issue 36).
#  1. FT_FAILPOINTS=hang_at_step=40@node1 (trailing text; the old parser
#     took 40): supervise refuses it before it creates or launches anything,
#     the worker at its start, both exit 2, naming the failpoint and the text.
#  2. hang_at_step=5,hang_node=1,hang_in=compute under supervise (2 nodes,
#     the real worker): node 1's worker alone hangs, mid-backward (its line
#     names node 1 and compute); node 0 never says it hangs, and waits in
#     the gradient collective of step 5 until that times out
#     (watchdog.collective_timeout_s). Node 1 keeps heartbeating: nothing
#     here waits for the supervisor to see the hang.
. "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
synth_data "$TMP"
W=$FT_BIN/worker
DATA=(--set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin")

# ---- 1. refused at start --------------------------------------------------------
rc=0
FT_FAILPOINTS=min_step_ms=5,hang_at_step=40@node1 "$FT_BIN/supervise" --state "$TMP/bad" \
  --worker "$W" "${DATA[@]}" "$FT_SRC/examples/demo.yaml" >"$TMP/bad.out" 2>&1 || rc=$?
[ $rc = 2 ] || fail "supervise with hang_at_step=40@node1: exit $rc, want 2: $(cat "$TMP/bad.out")"
grep -q "hang_at_step.*'40@node1'" "$TMP/bad.out" || fail "no message naming it: $(cat "$TMP/bad.out")"
[ ! -e "$TMP/bad" ] || fail "supervise created its state before refusing the failpoints"
rc=0
FT_FAILPOINTS=hang_at_step=40@node1 "$W" $(tiny_args) --steps 2 >"$TMP/wbad.out" 2>&1 || rc=$?
[ $rc = 2 ] || fail "worker with hang_at_step=40@node1: exit $rc, want 2: $(cat "$TMP/wbad.out")"
grep -q "hang_at_step.*'40@node1'" "$TMP/wbad.out" || fail "no message naming it: $(cat "$TMP/wbad.out")"
grep -q '^step' "$TMP/wbad.out" && fail "the worker trained"
rc=0
FT_FAILPOINTS=hang_node=1 "$W" $(tiny_args) --steps 2 >"$TMP/wmod.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q 'hang_node: needs hang_at_step' "$TMP/wmod.out" ||
  fail "hang_node without hang_at_step: exit $rc: $(cat "$TMP/wmod.out")"
pass "an FT_FAILPOINTS that does not parse: supervise and the worker refuse to start (exit 2), naming it"

# ---- 2. one node hangs, in compute ------------------------------------------------
FT_FAILPOINTS=hang_at_step=5,hang_node=1,hang_in=compute,min_step_ms=50 "$FT_BIN/supervise" \
  --state "$TMP/h" --worker "$W" --steps 40 --set nodes.count=2 --set train.val_every=0 \
  --set checkpoint.every_steps=100 --set watchdog.collective_timeout_s=3 "${DATA[@]}" \
  "$FT_SRC/examples/demo.yaml" >"$TMP/h.out" 2>&1 &
SUP=$!
L0=$TMP/h/logs/node0.slot0.log L1=$TMP/h/logs/node1.slot0.log
for _ in $(seq 600); do
  grep -q 'collective failed at step 4' "$L0" 2>/dev/null && break
  kill -0 $SUP 2>/dev/null || { cat "$TMP/h.out"; fail "supervise exited early"; }
  sleep 0.1
done
grep -q 'collective failed at step 4' "$L0" ||
  { tail -n 20 "$L0" "$L1"; fail "node 0 did not wait in step 5's collective until it timed out"; }
grep -q 'failpoint hang_at_step=5 (node 1, rank 1, in compute): hanging' "$L1" ||
  { tail -n 20 "$L1"; fail "node 1 did not say it hangs in compute at step 5"; }
grep -q 'failpoint hang_at_step' "$L0" && fail "node 0 hung too: $(grep failpoint "$L0")"
kill -TERM $SUP 2>/dev/null || true
for _ in $(seq 300); do kill -0 $SUP 2>/dev/null || break; sleep 0.1; done
pass "hang_node=1,hang_in=compute: node 1 alone hangs mid-backward at step 5; node 0 waits in the collective until its timeout"
