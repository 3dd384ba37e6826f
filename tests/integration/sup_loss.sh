#!/usr/bin/env bash
# Loss faults (the watchdog wiring, supervisor side), with the fake worker:
#  1. rollback_and_skip: rank 0 reports a 5x loss at the step consuming
#     batch 19 (step 20); the checkpoint of step 20, committed before that
#     STEP, is marked BAD; the gang restarts in place from step 15 with the
#     skip range [15, 20); batch 19 is never trained on again; earlier
#     checkpoints become GOOD after `window` clean steps. Then the
#     supervisor is killed and restarted: the skip list survives.
#  2. rollback (no skip) of a spike that comes back every time: each round
#     counts against recovery.max_restarts, so the run fails (exit 1).
#  3. a worker's FAULT nan (it waits for STOP) rolls back even under warn.
#  4. warn: a spike is only an event.
#  5. after a rollback_and_skip the re-trained steps commit again (the store
#     replaces a BAD step), and a node lost right after that restores the
#     re-trained checkpoint, not the one before the spike.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
SPIKE=(--set watchdog.loss_spike.window=10 --set watchdog.loss_spike.min_steps=5)

# the lines of rank 0's log after its last ASSIGN of generation GEN
log_after_gen() {
  python3 - "$1/logs/node0.slot0.log" "$2" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
start = max(i for i, l in enumerate(lines) if f"gen {sys.argv[2]} rank" in l)
print("\n".join(lines[start:]))
PY
}

# rollback_restores_newest ST SPIKE: every rollback of ST's run is of a
# spike at step SPIKE, without a skip range, and restores the newest
# checkpoint committed before it, 5 or 10
rollback_restores_newest() {
  python3 - "$1/events.jsonl" "$2" <<'PY'
import json, sys
best, seen = -1, 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "checkpoint_committed":
        best = max(best, e["step"])
    if e["event"] == "rollback":
        seen += 1
        ok = (e["spike_step"] == int(sys.argv[2]) and e["restore_step"] == best and best in (5, 10)
              and e["skip_first"] is None and e["skip_end"] is None)
        if not ok:
            sys.exit(1)
sys.exit(0 if seen else 1)
PY
}

# ---- 1. rollback_and_skip, then a supervisor restart ----
ST=$TMP/state
mkdir -p "$ST"
# (120 steps: long enough that the run is still going when it is killed
# below, even on a slow or sanitizer build)
FAKE_STEP_MS=60 FAKE_SAVE_FIRST=1 FAKE_SPIKE_BATCH=19 sup_bg "$ST" --spares 0 "${SPIKE[@]}" \
  --steps 120 --set recovery.on_loss_spike=rollback_and_skip --set recovery.skip_batches=3
for _ in $(seq 300); do
  has_event "$ST" recovered 2>/dev/null && break
  sleep 0.1
done
has_event "$ST" loss_spike 'e["step"] == 20 and e["verdict"] == "spike" and e["z"] > 6 and e["source"] == "step"' ||
  { cat "$ST.out"; fail "no loss_spike at step 20"; }
has_event "$ST" checkpoint_bad 'e["step"] == 20' || fail "checkpoint 20 not marked bad"
has_event "$ST" rollback 'e["spike_step"] == 20 and e["restore_step"] == 15 and e["skip_first"] == 15 and e["skip_end"] == 20 and e["bad_steps"] == [20]' ||
  fail "rollback fields: $(grep rollback "$ST/events.jsonl")"
has_event "$ST" fault_detected 'e["kind"] == "loss_spike" and not e["blamed"]' || fail "fault_detected"
has_event "$ST" generation_started 'e["gen"] == 2 and e["restore_step"] == 15 and e["skips"] == [[15, 20]] and e["nodes"] == [0, 1]' ||
  fail "gen 2 should restore 15 with skips [[15, 20]] on the same nodes"
has_event "$ST" node_quarantined && fail "a loss fault must not quarantine a node"
kill -9 $SUP
wait $SUP 2>/dev/null || true
for _ in $(seq 50); do pgrep -f "fake_worker.*$ST/" >/dev/null || break; sleep 0.1; done
FAKE_SPIKE_BATCH=19 sup_run "$ST" --spares 0 "${SPIKE[@]}" \
  --steps 120 --set recovery.on_loss_spike=rollback_and_skip --set recovery.skip_batches=3 ||
  { rc=$?; cat "$ST.out"; fail "resumed run exited $rc"; }
has_event "$ST" generation_started 'e["gen"] == 3 and e["skips"] == [[15, 20]]' ||
  fail "the skip list did not survive the supervisor restart"
log_after_gen "$ST" 3 >"$TMP/gen3.log"
log_after_gen "$ST" 2 >"$TMP/gen2.log"
grep -q "skip batches \[15, 20)" "$TMP/gen3.log" || fail "gen 3's ASSIGN lacks the skips"
grep -q " batch 19$" "$TMP/gen3.log" && fail "batch 19 trained again after the rollback"
grep -q " batch 19$" "$TMP/gen2.log" && fail "batch 19 trained again in gen 2"
grep -q "step 16 batch 20$" "$TMP/gen2.log" || fail "gen 2's step 16 should consume batch 20"
[ "$(grep -c '"event": *"loss_spike"' "$ST/events.jsonl")" -eq 1 ] || fail "more than one loss_spike"
has_event "$ST" checkpoint_good 'e["step"] == 5' || fail "checkpoint 5 should be GOOD"
has_event "$ST" run_done || fail "run not done"
pass "rollback_and_skip: bad, skip range, good; skips survive a supervisor restart"

# ---- 2. rollback without skip: the spike repeats; max_restarts ends it ----
ST2=$TMP/state2
set +e
FAKE_SPIKE_BATCH=12 sup_run "$ST2" --spares 0 "${SPIKE[@]}" \
  --set recovery.on_loss_spike=rollback --set recovery.max_restarts=2
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$ST2.out"; fail "a repeating spike should fail the run (exit 1), got $rc"; }
[ "$(grep -c '"event": *"rollback"' "$ST2/events.jsonl")" -eq 3 ] ||
  fail "expected 3 rollbacks (2 restarts + the one over the limit)"
# each round restores the newest checkpoint committed before it (10, or 5
# when rank 1, which the fake worker does not keep in step with rank 0, had
# not saved step 10 yet on a loaded machine)
rollback_restores_newest "$ST2" 13 || fail "rollback without skip fields: $(grep -E 'rollback|committed' "$ST2/events.jsonl")"
has_event "$ST2" run_failed 'e["reason"].startswith("recovery.max_restarts")' || fail "run_failed reason"
pass "rollback: rounds count against max_restarts"

# ---- 3. FAULT nan from the workers, under warn: rolled back anyway ----
ST3=$TMP/state3
mkdir -p "$TMP/once3"
FAKE_ONCE_DIR=$TMP/once3 FAKE_NAN_BATCH=11 sup_run "$ST3" --spares 0 "${SPIKE[@]}" \
  --set recovery.on_loss_spike=warn || { rc=$?; cat "$ST3.out"; fail "nan run exited $rc"; }
has_event "$ST3" loss_spike 'e["step"] == 12 and e["verdict"] == "nonfinite" and e["source"] == "worker_fault"' ||
  fail "no loss_spike for the FAULT nan"
# it restores the newest checkpoint committed before the fault (5 or 10,
# whichever the gang had completed when rank 0 stopped at step 12)
rollback_restores_newest "$ST3" 12 || { grep -E "rollback|committed" "$ST3/events.jsonl"; fail "nan rollback fields"; }
has_event "$ST3" run_done 'e["restarts"] == 1' || fail "nan run not done with 1 restart"
pass "FAULT nan: rollback"

# ---- 4. warn: the event only ----
ST4=$TMP/state4
FAKE_SPIKE_BATCH=19 sup_run "$ST4" --spares 0 "${SPIKE[@]}" --set recovery.on_loss_spike=warn ||
  { rc=$?; cat "$ST4.out"; fail "warn run exited $rc"; }
has_event "$ST4" loss_spike 'e["step"] == 20 and e["action"] == "warn"' || fail "no warn loss_spike"
has_event "$ST4" rollback && fail "warn must not roll back"
has_event "$ST4" fault_detected && fail "warn must not start a recovery"
has_event "$ST4" run_done 'e["restarts"] == 0' || fail "warn run not done"
pass "warn: event only"

# ---- 5. the re-trained timeline commits; a node loss restores from it ----
ST5=$TMP/state5
FT_FAILPOINTS=kill_node_at_step=23 FAKE_SAVE_FIRST=1 FAKE_SPIKE_BATCH=19 sup_run "$ST5" --spares 1 \
  "${SPIKE[@]}" --steps 30 --set recovery.on_loss_spike=rollback_and_skip \
  --set recovery.skip_batches=3 || { rc=$?; cat "$ST5.out"; fail "rollback + node loss run exited $rc"; }
has_event "$ST5" rollback 'e["spike_step"] == 20 and e["restore_step"] == 15 and e["bad_steps"] == [20]' ||
  fail "no rollback to 15 marking 20 bad"
python3 - "$ST5/events.jsonl" <<'PY' || fail "step 20 was not committed again after the rollback"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
rb = min(i for i, e in enumerate(evs) if e["event"] == "rollback")
assert any(e["event"] == "checkpoint_committed" and e["step"] == 20 and e["gen"] == 2 for e in evs[rb:])
PY
in_order "$ST5" rollback checkpoint_committed chaos_kill node_quarantined spare_promoted run_done ||
  fail "events: $(events "$ST5" | tr '\n' ' ')"
# gen 3 restores a checkpoint of the re-trained timeline: one committed by
# gen 2, after the rollback (20, or 25 when rank 1's step-25 shard beat rank
# 0's STEP 23 to the supervisor under load), never 15 from before the spike
python3 - "$ST5/events.jsonl" <<'PY' || fail "gen 3 should restore a re-trained checkpoint (>= 20, committed by gen 2) on nodes [0, 2]: $(grep generation_started "$ST5/events.jsonl" | tail -1)"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
g3 = [e for e in evs if e["event"] == "generation_started" and e["gen"] == 3]
assert g3 and g3[0]["nodes"] == [0, 2], g3
r = g3[0]["restore_step"]
assert r >= 20, r
assert any(e["event"] == "checkpoint_committed" and e["step"] == r and e["gen"] == 2 for e in evs), r
PY
pass "re-trained steps commit after a rollback; a node loss restores the re-trained checkpoint"
