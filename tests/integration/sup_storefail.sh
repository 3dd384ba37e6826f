#!/usr/bin/env bash
# A store that refuses the final checkpoint ends the run (the workers have
# nothing left to train; waiting would never end): exit 4, run_failed with
# cause "store", nobody blamed. The refusal: every rename(2) of the
# supervisor fails with EIO (strace attached once step 20 is committed).
# Run again with a working store: it resumes and finishes. Skips (77)
# without strace or where ptrace is not permitted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
need_strace
ST=$TMP/state
mkdir -p "$ST"

# steps of 0.4 s: the 10 steps after checkpoint 20 leave strace time to attach
# on a loaded machine before the final checkpoint's renames
FAKE_STEP_MS=400 sup_bg "$ST" --spares 0 --steps 30 --set checkpoint.every_steps=10
for _ in $(seq 300); do
  has_event "$ST" checkpoint_committed 'e["step"] == 20' 2>/dev/null && break
  sleep 0.05
done
has_event "$ST" checkpoint_committed 'e["step"] == 20' || { cat "$ST.out"; fail "no checkpoint 20"; }
trace_renames $SUP error=EIO
rc=0
for _ in $(seq 600); do kill -0 $SUP 2>/dev/null || break; sleep 0.1; done
kill -0 $SUP 2>/dev/null && { kill -9 $SUP; cat "$ST.out"; fail "supervise did not end after its final checkpoint failed"; }
wait $SUP || rc=$?
traced_renames "EIO (Input/output error) (INJECTED)"
[ $rc -eq 4 ] || { cat "$ST.out"; fail "a refused final checkpoint: exit $rc, want 4"; }
has_event "$ST" run_failed 'e["cause"] == "store"' || { cat "$ST.out"; fail "no run_failed with cause store"; }
has_event "$ST" node_quarantined && fail "a node was quarantined for the store"
grep -q "stopped by its store" "$ST.out" || fail "no last line about the store"
FAKE_STEP_MS=20 sup_run "$ST" --spares 0 --steps 30 --set checkpoint.every_steps=10 ||
  { cat "$ST.out"; fail "the rerun did not finish"; }
has_event "$ST" run_done || fail "no run_done after the rerun"
pass "a refused final checkpoint: exit 4 with the store's reason; the rerun finishes"
