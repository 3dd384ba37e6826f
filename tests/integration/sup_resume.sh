#!/usr/bin/env bash
# The supervisor itself dies (SIGKILL) mid-run; its workers exit on their
# own when the connection closes; running the same command again resumes:
# next generation, restored from the last committed checkpoint, run done.
# Also: a second supervisor on a catalog that is held exits 4, and SIGINT
# stops the gang cleanly with exit 130.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"

# 0.2 s steps: 30 steps last 6 s, so the first supervisor still runs (and
# holds the catalog) when the second starts, also on a loaded machine
FAKE_STEP_MS=200 sup_bg "$ST" --spares 1
for _ in $(seq 200); do
  has_event "$ST" checkpoint_committed 'e["step"] >= 10' 2>/dev/null && break
  sleep 0.1
done
has_event "$ST" checkpoint_committed 'e["step"] >= 10' || fail "no checkpoint before the kill"

# a second supervisor while the first holds the catalog
set +e
"$FT_BIN/supervise" --state "$ST" --worker "$FAKE" "$FT_SRC/examples/demo.yaml" >"$TMP/second.out" 2>&1
rc=$?
set -e
[ $rc -eq 4 ] || fail "second supervisor should exit 4, got $rc"
grep -q "another supervisor" "$TMP/second.out" || fail "second supervisor did not say why"

kill -9 $SUP
wait $SUP 2>/dev/null || true
# the orphaned workers leave by themselves (connection closed -> exit 6)
for _ in $(seq 50); do pgrep -f "fake_worker.*$ST" >/dev/null || break; sleep 0.1; done
pgrep -f "fake_worker.*$ST" >/dev/null && fail "orphaned workers still running"

sup_run "$ST" --spares 1 || { rc=$?; cat "$ST.out"; fail "resume exited $rc"; }
grep -q "resuming" "$ST.out" || fail "no resume message"
has_event "$ST" generation_started 'e["gen"] == 2 and e["restore_step"] >= 10' ||
  fail "resume should start gen 2 from a committed step"
has_event "$ST" run_done 'e["gen"] == 2' || fail "resumed run not done"
pass "supervisor killed and resumed"

ST2=$TMP/state2
mkdir -p "$ST2"
FAKE_STEP_MS=100 sup_bg "$ST2" --spares 1
for _ in $(seq 100); do has_event "$ST2" generation_started 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -INT $SUP
set +e
wait $SUP
rc=$?
set -e
[ $rc -eq 130 ] || { cat "$ST2.out"; fail "SIGINT should exit 130, got $rc"; }
has_event "$ST2" run_interrupted || fail "no run_interrupted"
pgrep -f "fake_worker.*$ST2" >/dev/null && fail "workers left after SIGINT"
pass "SIGINT stops the gang, exit 130"
