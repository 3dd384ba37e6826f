#!/usr/bin/env bash
# The checkpoints every view lists are the store's (issue 39, item 1): a run
# with checkpoint.keep_last: 2 and a checkpoint every 5 steps commits 12 and
# retention deletes 10 of them. Checked:
#  1. each deletion is an event (checkpoint_deleted, reason retention), and
#     `supervise status --json` after the run lists exactly the checkpoints
#     `ckpt ls` has (before: the last 12 committed, 10 of them gone);
#  2. the status of a finished run has the keys a running one has: nodes
#     (with roles, not null), restarts, val_loss, checkpoints;
#  3. resumed to step 70 by a second supervise, the first process's
#     checkpoints (55, 60) are deleted by the second one's retention and
#     told as events too (the supervisor seeds what it knows from the
#     store), and the lists agree again.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP" 200000
ST=$TMP/st
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
  -e 's|  steps: 300|  steps: 60|' -e "s|  store: .*|  store: \"local:$TMP/store\"|" \
  -e 's|  every_steps: 25|  every_steps: 5|' -e 's|  keep_last: 5|  keep_last: 2|' \
  "$FT_SRC/examples/demo.yaml" >"$TMP/run.yaml"
grep -q 'keep_last: 2' "$TMP/run.yaml" || fail "the run file has no keep_last: 2"

# agree: `supervise status --json` lists the steps `ckpt ls --json` has
agree() {
  "$FT_BIN/supervise" status "$ST" --json >"$TMP/status.json" || [ $? -eq 3 ] ||
    fail "supervise status failed"
  "$FT_BIN/ckpt" --store "local:$TMP/store" ls --json >"$TMP/ls.json"
  python3 - "$TMP/status.json" "$TMP/ls.json" "$1" <<'PY'
import json, sys
st, ls = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
want = sorted(c["step"] for c in ls)
got = sorted(int(c["step"]) for c in st.get("checkpoints") or [])
if got != want:
    sys.exit(f"FAIL: supervise status lists checkpoints {got}; the store has {want}")
if want != json.loads(sys.argv[3]):
    sys.exit(f"FAIL: the store has {want}, expected {sys.argv[3]}")
for k in ("nodes", "restarts", "val_loss", "checkpoints"):
    if k not in st:
        sys.exit(f"FAIL: the finished run's status has no {k!r}: {sorted(st)}")
roles = [n.get("role") for n in st["nodes"] or []]
if roles != ["active", "active"]:
    sys.exit(f"FAIL: the finished run's nodes: {st['nodes']!r}")
if not isinstance(st["val_loss"], (int, float)):
    sys.exit(f"FAIL: no validation loss in the finished run's status: {st['val_loss']!r}")
print(f"status and store agree: {got}")
PY
}
deleted() { # the steps of checkpoint_deleted events, with reason R
  python3 - "$ST/events.jsonl" "$1" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join(str(e["step"]) for e in ev
               if e["event"] == "checkpoint_deleted" and e.get("reason") == sys.argv[2]))
PY
}

"$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" --spares 0 "$TMP/run.yaml" \
  >"$TMP/sup1.out" 2>&1 || fail "the first run failed: $(tail -5 "$TMP/sup1.out")"
d=$(deleted retention)
[ "$d" = "5 10 15 20 25 30 35 40 45 50" ] || fail "checkpoint_deleted (retention) steps: '$d'"
agree "[55, 60]"
pass "retention's deletions are events; the finished run's status lists the store's checkpoints"

"$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" --spares 0 --steps 70 "$TMP/run.yaml" \
  >"$TMP/sup2.out" 2>&1 || fail "the resumed run failed: $(tail -5 "$TMP/sup2.out")"
d=$(deleted retention)
[ "$d" = "5 10 15 20 25 30 35 40 45 50 55 60" ] ||
  fail "after the resume, checkpoint_deleted (retention) steps: '$d'"
agree "[65, 70]"
pass "a resumed run tells of the earlier process's checkpoints it deletes"
