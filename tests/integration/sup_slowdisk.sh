#!/usr/bin/env bash
# No store I/O on the event loop: every rename(2) of the supervisor (all its
# threads; strace attached after the workers started) takes 4.5 s, longer
# than the heartbeat timeout (3 s). Commits (which rename their manifest
# into place) must run off the loop, so heartbeats go on: the run finishes
# with nobody blamed and no node quarantined. Skips (77) without strace
# or where ptrace is not permitted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
need_strace
ST=$TMP/state
mkdir -p "$ST"

FAKE_STEP_MS=150 sup_bg "$ST" --spares 0 --steps 30 --set checkpoint.every_steps=10
for _ in $(seq 300); do
  has_event "$ST" generation_started 2>/dev/null && break
  sleep 0.05
done
has_event "$ST" generation_started || { cat "$ST.out"; fail "the gang did not start"; }
trace_renames $SUP delay_exit=4500000
rc=0
wait $SUP || rc=$?
traced_renames DELAYED
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc with slow renames"; }
has_event "$ST" run_done || fail "no run_done"
has_event "$ST" checkpoint_committed 'e["step"] == 30' || fail "the final checkpoint was not committed"
has_event "$ST" node_quarantined && { cat "$ST.out"; fail "a node was quarantined for a slow disk"; }
has_event "$ST" fault_detected && { cat "$ST.out"; fail "a fault was detected for a slow disk"; }
pass "4.5 s renames: commits off the loop, nobody blamed, run done"
