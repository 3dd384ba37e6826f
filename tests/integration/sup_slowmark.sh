#!/usr/bin/env bash
# No blocking file-system call on the supervisor's loop, and a spare that
# lost the supervisor is not a lost spare. Every rename(2) of the supervisor
# (all its threads; strace attached once the gang trains) takes 4.5 s, longer
# than the heartbeat timeout (3 s), with a warm spare standing by and GOOD
# marks due (each writes a mark object: a rename). The marks must be made
# off the loop, so heartbeats go on: the run finishes, the checkpoints are
# marked GOOD, no stall, no worker or spare gives the supervisor up, no
# spare leaves the pool (sup_stall: a spare that did lose the supervisor is
# relaunched). Skips (77) without strace or where ptrace is not permitted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
need_strace
ST=$TMP/state
mkdir -p "$ST"

# a checkpoint every 7.5 s, each GOOD 5 steps later: the commit queue is idle
# when a mark falls due
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
has_event "$ST" checkpoint_good 'e["step"] == 40' || { cat "$ST.out"; fail "step 40 was not marked GOOD"; }
for e in supervisor_stall spare_lost spare_lost_supervisor fault_detected node_quarantined; do
  has_event "$ST" $e && { cat "$ST.out"; fail "$e with slow renames (a mark blocked the loop?)"; }
done
has_event "$ST" run_done || fail "no run_done"
pass "4.5 s renames: GOOD marks off the loop, no stall, the spare stays"

