#!/usr/bin/env bash
# The supervisor's own stall is not a worker's fault: SIGSTOP supervise for
# more than twice the heartbeat timeout mid-run, then SIGCONT. It must
# notice that it did not run (event supervisor_stall with the seconds and a
# cause), blame nobody for the silence (no hang, no quarantine; workers that
# gave the supervisor up, exit 6, restart in place) and finish the run.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"

FAKE_STEP_MS=100 sup_bg "$ST" --spares 0 --steps 60
for _ in $(seq 300); do
  has_event "$ST" step 'e["step"] >= 10' 2>/dev/null && break
  sleep 0.1
done
has_event "$ST" step 'e["step"] >= 10' || { cat "$ST.out"; fail "the run did not reach step 10"; }
kill -STOP $SUP
sleep 7 # heartbeat_timeout_s is 3
kill -CONT $SUP
rc=0
wait $SUP || rc=$?
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc after its stall"; }
has_event "$ST" run_done || fail "no run_done"
has_event "$ST" supervisor_stall 'e["seconds"] >= 5 and e["cause"] == "loop_blocked"' ||
  { cat "$ST.out"; fail "no supervisor_stall event of >= 5 s"; }
has_event "$ST" node_quarantined && { cat "$ST.out"; fail "a node was quarantined for the supervisor's stall"; }
has_event "$ST" fault_detected 'e["kind"] == "hang" or e.get("blamed") is True' &&
  { cat "$ST.out"; fail "a worker was blamed for the supervisor's stall"; }
pass "SIGSTOP of the supervisor: stall noticed, nobody blamed, run done"
