#!/usr/bin/env bash
# The supervisor's own stall is not a worker's fault: SIGSTOP supervise for
# more than twice the heartbeat timeout mid-run, then SIGCONT. It must
# notice that it did not run (event supervisor_stall with the seconds and a
# cause), blame nobody for the silence (no hang, no quarantine; workers that
# gave the supervisor up, exit 6, restart in place) and finish the run. The
# warm spare, which loses the supervisor too, is relaunched as a spare
# (spare_lost_supervisor), not lost from the pool.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"

FAKE_STEP_MS=100 sup_bg "$ST" --spares 1 --steps 60
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
has_event "$ST" spare_lost && { cat "$ST.out"; fail "the spare left the pool for the supervisor's stall"; }
python3 - "$ST/events.jsonl" <<'PY' || { cat "$ST.out"; fail "the spare was not relaunched after the stall"; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
lost = [k for k, e in enumerate(ev) if e["event"] == "spare_lost_supervisor" and e["node"] == 2]
sys.exit(0 if lost and any(e["event"] == "worker_launched" and e["node"] == 2 and
                           e["role"] == "spare" for e in ev[lost[-1]:]) else 1)
PY
pass "SIGSTOP of the supervisor: stall noticed, nobody blamed, the spare relaunched, run done"
