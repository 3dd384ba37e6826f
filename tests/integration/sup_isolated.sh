#!/usr/bin/env bash
# The supervisor's own isolation is not the nodes' fault. Every worker of
# the run, the gang's and the warm spare's, goes silent at once (SIGSTOP of
# all of them, as when the supervisor's host is cut off from the network)
# for longer than the heartbeat timeout. Asserts: one fault of kind
# supervisor_isolated with nobody blamed, no node quarantined, the spare
# leaves the pool as lost (not quarantined), and the gang, restarted in
# place, finishes the run. The contrast (one silent node among answering
# ones is that node's hang, quarantined) is sup_faults.sh's case 4.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"

FAKE_STEP_MS=100 sup_bg "$ST" --spares 1 --steps 100
wait_step "$ST" 5
pids=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["event"] == "worker_launched":
        print(e["pid"])' "$ST/events.jsonl")
[ "$(echo "$pids" | wc -w)" -eq 3 ] || fail "want 3 workers launched, got: $pids"
# shellcheck disable=SC2086
kill -STOP $pids
rc=0
wait $SUP || rc=$?
# shellcheck disable=SC2086
kill -9 $pids 2>/dev/null || true
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" fault_detected 'e["kind"] == "supervisor_isolated" and e["blamed"] is False' ||
  { cat "$ST.out"; fail "no supervisor_isolated fault"; }
has_event "$ST" fault_detected 'e["blamed"] is True' && { cat "$ST.out"; fail "a node was blamed"; }
has_event "$ST" node_quarantined && { cat "$ST.out"; fail "a node was quarantined"; }
has_event "$ST" spare_lost 'e["node"] == 2' || { cat "$ST.out"; fail "the spare was not let go as lost"; }
has_event "$ST" run_done 'e["steps"] == 100' || fail "no run_done"
pass "every worker silent at once: the supervisor's isolation, nobody blamed, run done"
