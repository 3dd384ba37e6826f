#!/usr/bin/env bash
# Every terminal state ends supervise, and an operator can clear quarantine.
# A run whose node is quarantined (one failure quarantines; no spares;
# when_no_spares: fail) fails; run again with the same state it must say
# why and exit 1 at once (it used to sit in its loop forever, holding the
# catalog). `supervise --unquarantine all` puts the node back, and the next
# run resumes and finishes. SIGTERM ends a run that waits for a spare
# (when_no_spares: wait) with exit 130.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"
FAIL_ARGS=(--spares 0 --set recovery.when_no_spares=fail --set recovery.node_failures_to_quarantine=1)

set +e
FT_FAILPOINTS=kill_node_at_step=8 FAKE_STEP_MS=40 sup_run "$ST" "${FAIL_ARGS[@]}"
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$ST.out"; fail "the first run should fail (exit 1), got $rc"; }

# again: fails at once (a bounded wait; a hang is killed by timeout -> 124)
set +e
timeout -s KILL 30 "$FT_BIN/supervise" --state "$ST" --worker "$FAKE" --steps 30 \
  --set checkpoint.every_steps=5 --set watchdog.heartbeat_timeout_s=3 "${FAIL_ARGS[@]}" \
  "$FT_SRC/examples/demo.yaml" >"$TMP/again.out" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$TMP/again.out"; fail "the rerun should exit 1 promptly, got $rc"; }
grep -q "usable node" "$TMP/again.out" || { cat "$TMP/again.out"; fail "the rerun did not say why"; }

# a node that is not quarantined: nothing changes
"$FT_BIN/supervise" --state "$ST" --unquarantine 0 "$FT_SRC/examples/demo.yaml" >"$TMP/uq0.out" 2>&1 ||
  fail "--unquarantine 0 failed: $(cat "$TMP/uq0.out")"
grep -q "nothing changed" "$TMP/uq0.out" || fail "--unquarantine 0: $(cat "$TMP/uq0.out")"
# a bad node argument is a usage error
set +e
"$FT_BIN/supervise" --state "$ST" --unquarantine x1 "$FT_SRC/examples/demo.yaml" >/dev/null 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "--unquarantine x1 should exit 2, got $rc"

"$FT_BIN/supervise" --state "$ST" --unquarantine all "$FT_SRC/examples/demo.yaml" >"$TMP/uq.out" 2>&1 ||
  fail "--unquarantine all failed: $(cat "$TMP/uq.out")"
grep -q "node(s) 1 taken out of quarantine" "$TMP/uq.out" || fail "--unquarantine said: $(cat "$TMP/uq.out")"
grep -q "node 1 was quarantined: " "$TMP/uq.out" || fail "--unquarantine did not say why the node was out: $(cat "$TMP/uq.out")"

FAKE_STEP_MS=20 sup_run "$ST" "${FAIL_ARGS[@]}" || { cat "$ST.out"; fail "the run after --unquarantine did not finish"; }
grep -q "resuming run" "$ST.out" || fail "the run after --unquarantine did not resume"
has_event "$ST" run_done || fail "no run_done"
has_event "$ST" run_started 'e["world"] == 2' || fail "no run with both nodes"
pass "terminal states exit; --unquarantine lets the run go on"

# SIGTERM while waiting for a spare
ST2=$TMP/state2
mkdir -p "$ST2"
FT_FAILPOINTS=kill_node_at_step=8 FAKE_STEP_MS=40 sup_bg "$ST2" --spares 0 \
  --set recovery.when_no_spares=wait --set recovery.node_failures_to_quarantine=1
for _ in $(seq 200); do has_event "$ST2" waiting_for_spare 2>/dev/null && break; sleep 0.1; done
has_event "$ST2" waiting_for_spare || { cat "$ST2.out"; fail "the run does not wait for a spare"; }
kill -TERM $SUP
for _ in $(seq 200); do kill -0 $SUP 2>/dev/null || break; sleep 0.1; done
kill -0 $SUP 2>/dev/null && { kill -9 $SUP; fail "SIGTERM did not end a run waiting for a spare"; }
rc=0
wait $SUP || rc=$?
[ $rc -eq 130 ] || { cat "$ST2.out"; fail "SIGTERM while waiting: exit $rc, want 130"; }
pass "SIGTERM ends a run that waits for a spare (130)"

# A node taken out of quarantine starts with a clean slate: the failures that
# quarantined it do not count again. Node 1 dies at step 12 every time; with
# node_failures_to_quarantine 2 the first run restarts it once, then
# quarantines it (and fails: no spares). After --unquarantine, the next run
# must again restart it in place first, not quarantine it on its first death.
ST3=$TMP/state3
mkdir -p "$ST3"
TWO=(--spares 0 --set recovery.when_no_spares=fail --set recovery.node_failures_to_quarantine=2)
rc=0
FAKE_DIE_NODE=1 FAKE_DIE_STEP=12 sup_run "$ST3" "${TWO[@]}" || rc=$?
[ $rc -eq 1 ] || { cat "$ST3.out"; fail "node 1 dying twice should fail the run, got $rc"; }
has_event "$ST3" node_quarantined 'e["node"] == 1 and e["failures"] == 2' ||
  fail "node 1 not quarantined after 2 failures: $(events "$ST3" | tr '\n' ' ')"
"$FT_BIN/supervise" --state "$ST3" --unquarantine 1 "$FT_SRC/examples/demo.yaml" >/dev/null 2>&1 ||
  fail "--unquarantine 1 failed"
n0=$(wc -l <"$ST3/events.jsonl")
rc=0
FAKE_DIE_NODE=1 FAKE_DIE_STEP=12 sup_run "$ST3" "${TWO[@]}" || rc=$?
tail -n +$((n0 + 1)) "$ST3/events.jsonl" >"$TMP/run3.jsonl"
python3 - "$TMP/run3.jsonl" <<'PY' || fail "after --unquarantine, node 1's first death should restart it in place: $(grep -E 'node_(restarted|quarantined)' "$TMP/run3.jsonl" | tr '\n' ' ')"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
first = next(e for e in evs if e["event"] in ("node_restarted", "node_quarantined") and e["node"] == 1)
assert first["event"] == "node_restarted" and first["failures"] == 1, first
PY
pass "a node out of quarantine starts with no failures counted"
