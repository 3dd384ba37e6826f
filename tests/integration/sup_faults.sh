#!/usr/bin/env bash
# Xid faults, hang blame on a collective failure, and stragglers (the
# watchdog wiring, supervisor side), with the fake worker:
#  1. FAULT xid action=quarantine from node 1: node 1 blamed, quarantined,
#     the spare takes over.
#  2. action=restart: a recovery round with nobody blamed, same nodes.
#  3. action=report: the event only.
#  4. node 1 goes silent (like SIGSTOP) and node 0 then reports a collective
#     timeout and exits 5: node 1 is blamed as "hang" before the heartbeat
#     timeout would have caught it; node 0 is not blamed.
#  5. rank 1 reports 5x the step time: a "straggler" event, no recovery.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"

# ---- 1. Xid quarantine ----
ST=$TMP/s1
FAKE_XID_NODE=1 FAKE_XID_STEP=12 FAKE_XID_ACTION=quarantine sup_run "$ST" --spares 1 ||
  { rc=$?; cat "$ST.out"; fail "xid quarantine run exited $rc"; }
has_event "$ST" xid 'e["node"] == 1 and e["slot"] == 0 and e["xid"] == 79 and e["action"] == "quarantine" and e["pci"] == "0000:01:00"' ||
  fail "xid event fields: $(grep '"xid"' "$ST/events.jsonl" | head -1)"
has_event "$ST" fault_detected 'e["kind"] == "xid" and e["node"] == 1 and e["blamed"]' || fail "xid not blamed"
in_order "$ST" xid fault_detected gang_stopped node_quarantined spare_promoted recovered run_done ||
  fail "xid quarantine events: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" spare_promoted 'e["spare_node"] == 2 and e["replaces"] == 1' || fail "spare not promoted"
pass "xid quarantine"

# ---- 2. Xid restart (once) ----
ST=$TMP/s2
mkdir -p "$TMP/once2"
FAKE_ONCE_DIR=$TMP/once2 FAKE_XID_NODE=1 FAKE_XID_STEP=12 FAKE_XID_ACTION=restart FAKE_XID=13 \
  sup_run "$ST" --spares 1 || { rc=$?; cat "$ST.out"; fail "xid restart run exited $rc"; }
has_event "$ST" fault_detected 'e["kind"] == "xid" and not e["blamed"]' || fail "restart xid should blame nobody"
has_event "$ST" node_quarantined && fail "restart xid quarantined a node"
has_event "$ST" generation_started 'e["gen"] == 2 and e["nodes"] == [0, 1]' || fail "gen 2 should keep nodes [0, 1]"
has_event "$ST" run_done 'e["restarts"] == 1' || fail "xid restart run not done"
pass "xid restart"

# ---- 3. Xid report ----
ST=$TMP/s3
FAKE_XID_NODE=0 FAKE_XID_STEP=5 FAKE_XID_ACTION=report FAKE_XID=31 sup_run "$ST" --spares 0 ||
  { rc=$?; cat "$ST.out"; fail "xid report run exited $rc"; }
has_event "$ST" xid 'e["xid"] == 31 and e["action"] == "report" and e["node"] == 0' || fail "no xid report event"
has_event "$ST" fault_detected && fail "report must not start a recovery"
has_event "$ST" run_done 'e["restarts"] == 0' || fail "xid report run not done"
pass "xid report"

# ---- 4. hang blame on a collective failure ----
# heartbeat_timeout_s 6: heartbeat every 1.5 s, "silent" after 3 s, the hang
# check after 6 s; node 0 reports the collective timeout 4.5 s after node 1
# went silent
ST=$TMP/s4
mkdir -p "$TMP/once4"
FAKE_ONCE_DIR=$TMP/once4 FAKE_HANG_NODE=1 FAKE_HANG_STEP=12 FAKE_COLL_NODE=0 FAKE_COLL_STEP=12 \
  FAKE_COLL_DELAY_MS=4500 sup_run "$ST" --spares 1 --set watchdog.heartbeat_timeout_s=6 ||
  { rc=$?; cat "$ST.out"; fail "collective run exited $rc"; }
has_event "$ST" fault_detected 'e["kind"] == "hang" and e["node"] == 1 and e["blamed"] and "collective" in e["detail"]' ||
  fail "node 1 not blamed for the collective failure: $(grep fault_detected "$ST/events.jsonl")"
has_event "$ST" fault_detected 'e["node"] == 0 and e["blamed"]' && fail "node 0 blamed"
has_event "$ST" node_quarantined 'e["node"] == 1' || fail "node 1 not quarantined"
has_event "$ST" node_quarantined 'e["node"] == 0' && fail "node 0 quarantined"
has_event "$ST" run_done || fail "collective run not done"
pass "collective failure blames the silent node"

# ---- 5. straggler ----
ST=$TMP/s5
FAKE_SLOW_RANK=1 sup_run "$ST" --spares 0 || { rc=$?; cat "$ST.out"; fail "straggler run exited $rc"; }
has_event "$ST" straggler 'e["rank"] == 1 and e["node"] == 1 and e["slot"] == 0 and e["ratio"] > 4' ||
  fail "no straggler event for rank 1"
has_event "$ST" straggler 'e["rank"] == 0' && fail "rank 0 flagged"
has_event "$ST" fault_detected && fail "a straggler must not start a recovery"
has_event "$ST" run_done || fail "straggler run not done"
pass "straggler reported"

# ---- 6. a checkpoint one rank never reports ----
# rank 1 skips its shard of step 10: step 10 can never be committed, and
# once step 15 is complete it is dropped (checkpoint_failed naming rank 1),
# not kept in the supervisor's memory; the run goes on and commits the rest
ST=$TMP/s6
FAKE_SKIP_SAVE_RANK=1 FAKE_SKIP_SAVE_STEP=10 sup_run "$ST" --spares 0 ||
  { rc=$?; cat "$ST.out"; fail "skipped-report run exited $rc"; }
has_event "$ST" checkpoint_failed 'e["step"] == 10 and e["rank"] == 1 and e["missing"] == 1 and "before step 15" in e["reason"]' ||
  fail "step 10 not dropped with rank 1 named"
has_event "$ST" checkpoint_committed 'e["step"] == 10' && fail "step 10 committed without rank 1"
has_event "$ST" checkpoint_committed 'e["step"] == 15' || fail "step 15 not committed"
has_event "$ST" fault_detected && fail "a missing report must not start a recovery"
has_event "$ST" run_done || fail "skipped-report run not done"
pass "a checkpoint a rank never reported is dropped once a newer one is complete"
