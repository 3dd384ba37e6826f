#!/usr/bin/env bash
# A worker dies mid-run (the fake worker of node 1 SIGKILLs itself each time
# it reaches step 12; the host, its process group, still answers):
#  1. the first death restarts the gang in place (same nodes, no spare used,
#     restore from the last committed checkpoint); the second, inside
#     recovery.node_failure_window_s, quarantines node 1 (reason and count in
#     node_quarantined and in the persisted run state) and promotes the spare.
#  2. deaths further apart than the window never quarantine: the gang keeps
#     restarting in place until recovery.max_restarts.
#  3. the chaos failpoint kill_node_at_step kills the node's whole process
#     group: the node is lost, quarantined at once (shrink / fail below).
#  4. a hang: quarantined at once.
#  5. the run file's chaos fault fires once per run: a supervisor killed and
#     run again (the run resumes) does not inject it again.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state

FAKE_DIE_NODE=1 FAKE_DIE_STEP=12 sup_run "$ST" --spares 1 ||
  { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
in_order "$ST" run_started generation_started checkpoint_committed fault_detected gang_stopped \
  node_restarted generation_started fault_detected gang_stopped node_quarantined \
  spare_promoted generation_started recovered run_done ||
  fail "events out of order: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" fault_detected 'e["gen"] == 1 and e["kind"] == "process_exit" and e["node"] == 1 and e["detail"] == "signal 9" and e["blamed"] and e["failures"] == 1 and not e["quarantine"]' ||
  fail "first death: fault_detected fields: $(grep fault_detected "$ST/events.jsonl" | head -1)"
has_event "$ST" node_restarted 'e["node"] == 1 and e["failures"] == 1 and e["failures_to_quarantine"] == 2' ||
  fail "no node_restarted for node 1"
has_event "$ST" generation_started 'e["gen"] == 2 and e["nodes"] == [0, 1]' ||
  fail "generation 2 should restart nodes [0, 1] in place"
restored_newest "$ST" 2 5 || fail "gen 2 did not restore the newest committed checkpoint"
has_event "$ST" fault_detected 'e["gen"] == 2 and e["node"] == 1 and e["failures"] == 2 and e["quarantine"]' ||
  fail "second death: not counted as the second failure"
has_event "$ST" node_quarantined 'e["node"] == 1 and e["failures"] == 2 and "2 failures within 600 s" in e["reason"]' ||
  fail "node_quarantined fields: $(grep node_quarantined "$ST/events.jsonl")"
has_event "$ST" spare_promoted 'e["spare_node"] == 2 and e["replaces"] == 1' || fail "spare_promoted"
has_event "$ST" generation_started 'e["gen"] == 3 and e["nodes"] == [0, 2]' ||
  fail "generation 3 should be nodes [0, 2]"
restored_newest "$ST" 3 5 || fail "gen 3 did not restore the newest committed checkpoint"
has_event "$ST" run_done 'e["restarts"] == 2' || fail "run_done should count 2 restarts"
if [ -x "$FT_BIN/ckpt" ]; then
  has_checkpoint "local:$ST/store" 30 || fail "final checkpoint missing"
fi
# the persisted run state says why node 1 left
sup_meta_get "$ST" "gpt2-tiny/recovery" >"$TMP/notes" || fail "no persisted notes"
python3 - "$TMP/notes" <<'PY' || fail "persisted notes: $(cat "$TMP/notes")"
import json, sys
o = json.load(open(sys.argv[1]))
n = [e for e in o["nodes"] if e["node"] == 1]
assert n and n[0]["failures"] == 2 and "2 failures" in n[0]["reason"], o
PY
pass "worker death: restart in place, then quarantine on the second failure in the window"

# deaths further apart than the window: never quarantined
ST5=$TMP/state5
set +e
FAKE_DIE_NODE=1 FAKE_DIE_STEP=12 sup_run "$ST5" --spares 1 --set recovery.node_failure_window_s=0.001 \
  --set recovery.max_restarts=3
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$ST5.out"; fail "max_restarts should end the run with exit 1, got $rc"; }
has_event "$ST5" node_quarantined && fail "a node was quarantined for failures outside the window"
has_event "$ST5" spare_promoted && fail "a spare was used for failures outside the window"
has_event "$ST5" run_failed '"max_restarts" in e["reason"]' || fail "no run_failed for max_restarts"
[ "$(events "$ST5" | grep -c node_restarted)" -eq 3 ] || fail "expected 3 restarts in place"
pass "failures outside the window: restarted in place every time"

# no spare, shrink: the failpoint kills the gang's last node at step 8
ST2=$TMP/state2
FT_FAILPOINTS=kill_node_at_step=8 sup_run "$ST2" --spares 0 --set recovery.when_no_spares=shrink ||
  { rc=$?; cat "$ST2.out"; fail "supervise (shrink) exited $rc"; }
has_event "$ST2" chaos_kill 'e["node"] == 1' || fail "no chaos_kill"
has_event "$ST2" node_quarantined 'e["node"] == 1 and e["reason"].startswith("node lost")' ||
  fail "the chaos kill should lose node 1: $(grep node_quarantined "$ST2/events.jsonl")"
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
  { rc=$?; cat "$ST4.out"; fail "supervise (hang) exited $rc"; }
has_event "$ST4" fault_detected 'e["kind"] == "hang" and e["node"] == 1' || fail "no hang detected"
in_order "$ST4" fault_detected gang_stopped node_quarantined spare_promoted recovered run_done ||
  fail "hang recovery events: $(events "$ST4" | tr '\n' ' ')"
pass "hang detected and recovered"

# the run file's chaos fault fires once per run, also across a supervisor restart
ST6=$TMP/state6
mkdir -p "$ST6"
FAKE_STEP_MS=100 sup_bg "$ST6" --spares 2 --steps 40 --set chaos.kill_node_at_step=8
for _ in $(seq 300); do
  has_event "$ST6" recovered 2>/dev/null && break
  sleep 0.1
done
has_event "$ST6" chaos_kill || { cat "$ST6.out"; fail "the chaos fault did not fire"; }
has_event "$ST6" recovered || { cat "$ST6.out"; fail "no recovery from the chaos fault"; }
kill -9 $SUP
wait $SUP 2>/dev/null || true
for _ in $(seq 100); do pgrep -f "fake_worker.*$ST6/" >/dev/null || break; sleep 0.1; done
sup_run "$ST6" --spares 2 --steps 40 --set chaos.kill_node_at_step=8 ||
  { rc=$?; cat "$ST6.out"; fail "the resumed run exited $rc"; }
[ "$(events "$ST6" | grep -c chaos_kill)" -eq 1 ] ||
  fail "the chaos fault fired again after the supervisor restart"
has_event "$ST6" run_done || fail "the resumed run is not done"
pass "chaos fault: once per run, also across a supervisor restart"
