#!/usr/bin/env bash
# No store I/O on the event loop: every rename(2) of the supervisor (all its
# threads; strace attached after the workers started) takes 4.5 s, longer
# than the heartbeat timeout (3 s), with a warm spare standing by. Commits
# (which rename their manifest into place) and GOOD marks (each renames a
# mark object into place) must run off the loop, so heartbeats go on: the
# run finishes, checkpoint 40 is marked GOOD, and there is no stall, no
# fault, no quarantine, and no spare or worker gives the supervisor up.
# The marks are spaced so the commit queue is idle when one falls due (a
# checkpoint every 6 s, GOOD 5 steps later): a supervisor that marks on the
# loop then stalls for 4.5 s. Skips (77) without strace or where ptrace is
# not permitted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
need_strace
ST=$TMP/state
mkdir -p "$ST"

FAKE_STEP_MS=150 sup_bg "$ST" --spares 1 --steps 120 --set checkpoint.every_steps=40 \
  --set watchdog.loss_spike.window=5
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
has_event "$ST" checkpoint_committed 'e["step"] == 120' || fail "the final checkpoint was not committed"
has_event "$ST" checkpoint_good 'e["step"] == 40' || { cat "$ST.out"; fail "step 40 was not marked GOOD"; }
for e in supervisor_stall spare_lost spare_lost_supervisor fault_detected node_quarantined; do
  has_event "$ST" $e && { cat "$ST.out"; fail "$e with slow renames (a commit or mark blocked the loop?)"; }
done
pass "4.5 s renames: commits and GOOD marks off the loop, nobody blamed, the spare stays, run done"
