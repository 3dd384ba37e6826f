#!/usr/bin/env bash
# The run file is snapshotted into the state directory at start, and every
# launch reads the snapshot: deleting the run file mid-run and then losing
# a node (every relaunched worker reads its --runfile) still recovers and
# finishes; a second supervisor, refused, does not touch the snapshot.
# With the real worker: the run file's relative data globs still
# mean its own directory although the workers read the snapshot.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"
cp "$FT_SRC/examples/demo.yaml" "$TMP/run.yaml"

# the workers take no step before the gate file exists, so the run file is
# gone before the node is killed however loaded the machine is
FAKE_GATE=$TMP/gate FT_FAILPOINTS=kill_node_at_step=15 FAKE_STEP_MS=60 "$FT_BIN/supervise" --state "$ST" \
  --worker "$FAKE" --steps 40 --set checkpoint.every_steps=5 \
  --set watchdog.heartbeat_timeout_s=3 --spares 0 "$TMP/run.yaml" >"$ST.out" 2>&1 &
SUP=$!
for _ in $(seq 100); do [ -s "$ST/control.port" ] && break; sleep 0.05; done
[ -s "$ST/control.port" ] || fail "no control.port"
rm "$TMP/run.yaml"
has_event "$ST" chaos_kill && fail "the node was killed before the run file was deleted"
touch "$TMP/gate"
# a second supervisor on the same state, with another run file, is refused
# and leaves the running one's snapshot alone
sed 's/^run: gpt2-tiny/run: gpt2-tiny  # changed/' "$FT_SRC/examples/demo.yaml" >"$TMP/other.yaml"
rc=0
"$FT_BIN/supervise" --state "$ST" --worker "$FAKE" "$TMP/other.yaml" >"$TMP/second.out" 2>&1 || rc=$?
[ $rc -eq 4 ] || { cat "$TMP/second.out"; fail "a second supervisor should exit 4, got $rc"; }
cmp -s "$ST/run.yaml" "$FT_SRC/examples/demo.yaml" || fail "the refused supervisor replaced the snapshot"
rc=0
wait $SUP || rc=$?
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc after the run file was deleted"; }
has_event "$ST" chaos_kill || fail "no node was killed"
has_event "$ST" run_done || fail "no run_done"
[ "$(events "$ST" | grep -c worker_launched)" -gt 2 ] || fail "nothing was relaunched"
cmp -s "$ST/run.yaml" "$FT_SRC/examples/demo.yaml" || fail "no snapshot in $ST/run.yaml"
has_event "$ST" run_started "e[\"runfile\"] == \"$ST/run.yaml\"" || fail "run_started does not name the snapshot"
pass "run file deleted mid-run: the relaunch used the snapshot; run done"

# the real worker, a run file with relative data beside it, run from elsewhere
mkdir -p "$TMP/r/data" "$TMP/elsewhere"
synth_data "$TMP/r/data" 200000
sed -e '/^chaos:/,$d' -e 's|^data:.*|data: {train: "data/synth_train_*.bin", val: "data/synth_val_*.bin"}|' \
  "$FT_SRC/examples/demo.yaml" >"$TMP/r/run.yaml"
grep -q '^data: {train: "data/synth_train_' "$TMP/r/run.yaml" || fail "no relative data globs in the run file"
(cd "$TMP/elsewhere" && "$FT_BIN/supervise" --state "$TMP/st2" --steps 10 \
  --set checkpoint.every_steps=5 "$TMP/r/run.yaml" >"$TMP/st2.out" 2>&1) ||
  { cat "$TMP/st2.out"; tail -5 "$TMP"/st2/logs/*; fail "the real worker could not train from the snapshot"; }
has_event "$TMP/st2" run_done || fail "real worker: no run_done"
pass "real worker: relative data of the run file found through the snapshot"
