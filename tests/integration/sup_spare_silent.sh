#!/usr/bin/env bash
# A warm spare that goes silent (its host lost power or was cut off; here:
# SIGSTOP of the spare's worker) leaves the pool as soon as it has been
# silent for the heartbeat timeout: node_quarantined for the spare with the
# reason, no fault of the gang, no restart, and the run goes on to its end
# (a spare found dead only when promoted would cost a second recovery).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"

FAKE_STEP_MS=100 sup_bg "$ST" --spares 1 --steps 100
wait_step "$ST" 5
spare=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["event"] == "worker_launched" and e["role"] == "spare":
        print(e["pid"])' "$ST/events.jsonl")
[ -n "$spare" ] || fail "no spare launched"
kill -STOP "$spare"
rc=0
wait $SUP || rc=$?
kill -9 "$spare" 2>/dev/null || true
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" node_quarantined 'e["node"] == 2 and "spare slot 0 silent" in e["reason"]' ||
  { cat "$ST.out"; fail "the silent spare was not quarantined"; }
has_event "$ST" fault_detected && { cat "$ST.out"; fail "a fault of the gang for a silent spare"; }
has_event "$ST" run_done 'e["steps"] == 100 and e["restarts"] == 0' || fail "run_done fields"
pass "a silent spare leaves the pool (quarantined), the gang trains on"
