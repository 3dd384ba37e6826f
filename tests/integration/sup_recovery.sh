#!/usr/bin/env bash
# A node dies mid-run (the fake worker of node 1 SIGKILLs itself at step 12):
# supervise detects it, stops the gang, quarantines node 1, promotes the
# warm spare, restarts from the last committed checkpoint and finishes.
# Then the chaos failpoint kill_node_at_step with when_no_spares: shrink.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state

FAKE_DIE_NODE=1 FAKE_DIE_STEP=12 sup_run "$ST" --spares 1 ||
  { cat "$ST.out"; fail "supervise exited $?"; }
in_order "$ST" run_started generation_started checkpoint_committed fault_detected gang_stopped \
  node_quarantined spare_promoted generation_started recovered run_done ||
  fail "events out of order: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" fault_detected 'e["kind"] == "process_exit" and e["node"] == 1 and e["detail"] == "signal 9" and e["blamed"]' ||
  fail "fault_detected fields"
has_event "$ST" node_quarantined 'e["node"] == 1' || fail "node 1 not quarantined"
has_event "$ST" spare_promoted 'e["spare_node"] == 2 and e["replaces"] == 1' || fail "spare_promoted"
has_event "$ST" generation_started 'e["gen"] == 2 and e["nodes"] == [0, 2]' ||
  fail "generation 2 should be nodes [0, 2]"
# it restores the newest checkpoint committed before the fault
restored_newest "$ST" 2 5 || fail "gen 2 did not restore the newest committed checkpoint"
has_event "$ST" recovered 'e["gen"] == 2 and e["steps_lost"] >= 0 and e["detect_to_first_step_ms"] >= e["detect_to_stopped_ms"]' ||
  fail "recovered fields"
has_event "$ST" run_done 'e["restarts"] == 1' || fail "run_done should count 1 restart"
if [ -x "$FT_BIN/ckpt" ]; then
  has_checkpoint "local:$ST/store" 30 || fail "final checkpoint missing"
fi
pass "node death: quarantine, spare, recovered"

# no spare, shrink: the failpoint kills the gang's last node at step 8
ST2=$TMP/state2
FT_FAILPOINTS=kill_node_at_step=8 sup_run "$ST2" --spares 0 --set recovery.when_no_spares=shrink ||
  { cat "$ST2.out"; fail "supervise (shrink) exited $?"; }
has_event "$ST2" chaos_kill 'e["node"] == 1' || fail "no chaos_kill"
has_event "$ST2" gang_shrunk 'e["world_before"] == 2 and e["world_after"] == 1' || fail "no gang_shrunk"
has_event "$ST2" generation_started 'e["gen"] == 2 and e["world"] == 1' || fail "gen 2 world 1"
has_event "$ST2" run_done || fail "shrunk run not done"
pass "no spare: shrink"

# no spare, fail: exit 1 with run_failed
ST3=$TMP/state3
set +e
FT_FAILPOINTS=kill_node_at_step=8 sup_run "$ST3" --spares 0 --set recovery.when_no_spares=fail
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$ST3.out"; fail "when_no_spares: fail should exit 1, got $rc"; }
has_event "$ST3" run_failed || fail "no run_failed"
pass "no spare: fail"

# a hang: node 1's worker goes silent at step 12 (no heartbeats, no exit);
# after heartbeat_timeout_s (3 s) the hang check kills the node and recovers
ST4=$TMP/state4
FAKE_HANG_NODE=1 FAKE_HANG_STEP=12 sup_run "$ST4" --spares 1 ||
  { cat "$ST4.out"; fail "supervise (hang) exited $?"; }
has_event "$ST4" fault_detected 'e["kind"] == "hang" and e["node"] == 1' || fail "no hang detected"
in_order "$ST4" fault_detected gang_stopped node_quarantined spare_promoted recovered run_done ||
  fail "hang recovery events: $(events "$ST4" | tr '\n' ' ')"
pass "hang detected and recovered"
