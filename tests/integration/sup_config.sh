#!/usr/bin/env bash
# Configuration and data errors are the run's, not the nodes':
#  1. the real worker with a data glob that matches nothing: every worker
#     exits 3; supervise exits 1 at once with the workers' own message (it
#     names the glob), run_failed cause "data", nothing quarantined, no spare
#     promoted.
#  2. every (fake) worker exits 2 with a configuration error: the same with
#     cause "config".
#  3. only node 1's worker exits 3 (its local disk): that node's failure,
#     counted: restarted in place once, quarantined on the second, the spare
#     finishes the run.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"

# ---- 1. data glob matching nothing, real worker ----
ST=$TMP/s1
GLOB="$TMP/nothing_here_*.bin"
set +e
"$FT_BIN/supervise" --state "$ST" --spares 2 --steps 20 --set "data.train=$GLOB" \
  --set "data.val=$GLOB" --set watchdog.heartbeat_timeout_s=30 \
  "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$ST.out"; fail "a missing data glob should exit 1, got $rc"; }
grep "FAILED" "$ST.out" | grep -qF "$GLOB" || { cat "$ST.out"; fail "the terminal does not name the glob"; }
has_event "$ST" run_failed "e['cause'] == 'data' and '$GLOB' in e['reason']" ||
  fail "run_failed: $(grep run_failed "$ST/events.jsonl")"
has_event "$ST" node_quarantined && fail "a node was quarantined for the run's data"
has_event "$ST" spare_promoted && fail "a spare was spent on the run's data"
has_event "$ST" fault_detected && fail "a recovery started for the run's data"
pass "missing data: the run fails at once with the worker's message, no node blamed"

# ---- 2. configuration error in every worker (fake) ----
ST=$TMP/s2
set +e
FAKE_START_EXIT=2 sup_run "$ST" --spares 1
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$ST.out"; fail "a config error should exit 1, got $rc"; }
has_event "$ST" run_failed 'e["cause"] == "config" and "no token shards match" in e["reason"]' ||
  fail "run_failed: $(grep run_failed "$ST/events.jsonl")"
has_event "$ST" node_quarantined && fail "a node was quarantined for a config error"
has_event "$ST" spare_promoted && fail "a spare was spent on a config error"
pass "config error everywhere: the run fails, no node blamed"

# ---- 3. one node's data error: that node's failure, counted ----
ST=$TMP/s3
FAKE_START_EXIT=3 FAKE_START_EXIT_NODE=1 sup_run "$ST" --spares 1 ||
  { rc=$?; cat "$ST.out"; fail "one node's data error: supervise exited $rc"; }
has_event "$ST" run_failed && fail "one node's data error failed the run"
has_event "$ST" fault_detected 'e["node"] == 1 and e["failures"] == 1 and not e["quarantine"] and "exit code 3 (data)" in e["detail"] and "/fake/node1/" in e["detail"]' ||
  fail "first data exit: $(grep fault_detected "$ST/events.jsonl" | head -1)"
has_event "$ST" node_restarted 'e["node"] == 1' || fail "node 1 not restarted in place first"
has_event "$ST" node_quarantined 'e["node"] == 1 and e["failures"] == 2' || fail "node 1 not quarantined"
has_event "$ST" spare_promoted 'e["spare_node"] == 2 and e["replaces"] == 1' || fail "spare not promoted"
has_event "$ST" node_quarantined 'e["node"] == 0' && fail "node 0 quarantined"
has_event "$ST" run_done || fail "run not done"
pass "one node's data error: restarted in place, then quarantined"
