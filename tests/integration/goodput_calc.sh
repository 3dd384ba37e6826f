#!/usr/bin/env bash
# chaos/goodput.py on an event log whose answer is known by hand: a run of
# 100 steps at one step a second loses node at step 60, rolls back to the
# checkpoint at 50 and needs 10 s to train again: 100 s of the 119 s went
# into steps of the final timeline (goodput 84.0%), 10 steps were lost, the
# fault was detected 0.5 s and recovered 10.5 s after it was injected.
. "$(dirname "$0")/lib.sh"
G="$FT_SRC/chaos/goodput.py"
cat >"$TMP/ev.jsonl" <<'JS'
{"ts":1000,"event":"run_started","gen":0}
{"ts":1000,"event":"generation_started","gen":1,"restore_step":-1}
{"ts":1025,"event":"step","step":25,"gen":1}
{"ts":1050,"event":"step","step":50,"gen":1}
{"ts":1060,"event":"fault_detected","kind":"collective_failure","node":0,"step":60,"gen":1}
{"ts":1061,"event":"node_quarantined","node":1,"host":"h2"}
{"ts":1065,"event":"generation_started","gen":2,"restore_step":50}
{"ts":1070,"event":"recovered","gen":2,"first_step":51,"steps_lost":10}
{"ts":1094,"event":"step","step":75,"gen":2}
{"ts":1119,"event":"step","step":100,"gen":2}
{"ts":1119,"event":"run_done","steps":100,"gen":2}
JS
echo '{"ts":1059.5,"kind":"host power off"}' >"$TMP/faults.jsonl"
python3 "$G" "$TMP/ev.jsonl" --faults "$TMP/faults.jsonl" --json >"$TMP/out.json" ||
  fail "goodput.py failed"
python3 - "$TMP/out.json" <<'PY' || fail "wrong figures: $(cat "$TMP/out.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert abs(r["wall_s"] - 119) < 1e-9, r["wall_s"]
assert abs(r["useful_s"] - 100) < 1e-9, r["useful_s"]
assert abs(r["goodput"] - 100 / 119) < 1e-9, r["goodput"]
assert r["surviving_steps"] == 100 and r["generations"] == 2, r
f = r["faults"][0]
assert abs(f["detect_s"] - 0.5) < 1e-9 and abs(f["recover_s"] - 10.5) < 1e-9, f
assert f["steps_lost"] == 10 and f["blamed"] == "h2", f  # who paid, not who noticed
PY
pass "goodput 100/119 s, 10 steps lost, detect 0.5 s, recover 10.5 s"
# (the whole table first: `| grep -q` would close the pipe on the first
# match, and the rest of the table's writing fail with EPIPE)
table=$(python3 "$G" "$TMP/ev.jsonl" --faults "$TMP/faults.jsonl") || fail "goodput.py failed: $table"
grep -q "goodput 84.0%" <<<"$table" || fail "the table does not say goodput 84.0%: $table"
# a fault-free run of the same length: everything counts
grep -v -e fault_detected -e '"gen":2' -e recovered "$TMP/ev.jsonl" >"$TMP/clean.jsonl"
echo '{"ts":1100,"event":"step","step":100,"gen":1}' >>"$TMP/clean.jsonl"
echo '{"ts":1100,"event":"run_done","steps":100,"gen":1}' >>"$TMP/clean.jsonl"
python3 "$G" "$TMP/clean.jsonl" --json | python3 -c 'import json,sys; r = json.load(sys.stdin)
assert abs(r["goodput"] - 1) < 1e-9, r' || fail "a fault-free run is not 100%"
pass "a fault-free run: goodput 100%"
# a slow stretch before the first step event: extrapolating back from it
# must not count time before the generation began (steps 0-25 at 1/s, then
# 25-50 at 3 s each); a slow link is reported by a straggler event
cat >"$TMP/slow.jsonl" <<'JS'
{"ts":1000,"event":"run_started","gen":0}
{"ts":1000,"event":"generation_started","gen":1,"restore_step":-1}
{"ts":1050,"event":"step","step":25,"gen":1}
{"ts":1060,"event":"straggler","cause":"link","node":1,"host":"h2","gen":1}
{"ts":1125,"event":"step","step":50,"gen":1}
{"ts":1125,"event":"run_done","steps":50,"gen":1}
JS
echo '{"ts":1055,"kind":"slow link"}' >"$TMP/slowf.jsonl"
python3 "$G" "$TMP/slow.jsonl" --faults "$TMP/slowf.jsonl" --json | python3 -c 'import json,sys
r = json.load(sys.stdin)
assert abs(r["goodput"] - 1) < 1e-9, r
f = r["faults"][0]
assert f["detected_as"] == "straggler:link" and f["blamed"] == "reported h2", f
assert abs(f["detect_s"] - 5) < 1e-9 and f["steps_lost"] is None, f' ||
  fail "a slow first stretch or a straggler report: $(python3 "$G" "$TMP/slow.jsonl" --faults "$TMP/slowf.jsonl" --json)"
pass "a slow first stretch counts from the generation's start (not before); a straggler report detects a slow link"
rc=0; python3 "$G" "$TMP/nope.jsonl" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "a missing log: exit $rc, want 2"
pass "a missing event log exits 2"
