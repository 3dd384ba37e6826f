#!/usr/bin/env bash
# A damaged catalog never silently restarts a run.
#  - A catalog behind the store (an older copy put back: the store has
#    manifests of the run newer than anything the catalog lists): supervise
#    refuses with exit 4, naming the catalog and `ckpt rebuild-catalog`;
#    after the rebuild it goes on from the newest checkpoint. --from-scratch
#    goes on without the rebuild.
#  - A newest checkpoint marked BAD (rollback) is not a catalog behind.
#  - A catalog that cannot be opened (deleted, or garbage in it): exit 4
#    with the store's message, nothing launched; after `ckpt
#    rebuild-catalog` the run goes on from its newest checkpoint.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"
CAT=$ST/store/catalog

# a run interrupted after step 10, its catalog kept; then resumed to the end
# (150 ms a step: the run must still be going when the poll below, slow on
# a loaded machine, sees step 10)
FAKE_STEP_MS=150 sup_bg "$ST" --spares 0
for _ in $(seq 200); do
  has_event "$ST" checkpoint_committed 'e["step"] >= 10' 2>/dev/null && break
  sleep 0.05
done
kill -INT $SUP
wait $SUP || true
cp -a "$CAT" "$TMP/catalog.old"
sup_run "$ST" --spares 0 || { cat "$ST.out"; fail "the resumed run did not finish"; }
has_checkpoint "local:$ST/store" 30 || fail "no checkpoint 30"

# the old catalog put back: refused
rm -rf "$CAT"
cp -a "$TMP/catalog.old" "$CAT"
starts=$(events "$ST" | grep -c run_started)
rc=0
sup_run "$ST" --spares 0 || rc=$?
[ $rc -eq 4 ] || { cat "$ST.out"; fail "a catalog behind the store: exit $rc, want 4"; }
grep -q "ckpt rebuild-catalog local:$ST/store" "$ST.out" || { cat "$ST.out"; fail "no rebuild-catalog advice"; }
grep -q "$CAT" "$ST.out" || { cat "$ST.out"; fail "the message does not name the catalog"; }
grep -q -- "--from-scratch" "$ST.out" || fail "the message does not mention --from-scratch"
[ "$(events "$ST" | grep -c run_started)" -eq "$starts" ] || fail "a run started on a catalog behind the store"

# --from-scratch goes on from the catalog's newest
rc=0
FAKE_STEP_MS=5 sup_run "$ST" --spares 0 --from-scratch || rc=$?
[ $rc -eq 0 ] || { cat "$ST.out"; fail "--from-scratch: exit $rc"; }
grep -q "catalog lacks checkpoints up to step 30" "$ST.out" || { cat "$ST.out"; fail "--from-scratch did not say what it skips"; }
[ "$(events "$ST" | grep -c run_started)" -gt "$starts" ] || { cat "$ST.out"; fail "--from-scratch did not start the run"; }

# rebuilt: goes on from step 30, which is the end
rm -rf "$CAT"
cp -a "$TMP/catalog.old" "$CAT"
"$FT_BIN/ckpt" rebuild-catalog "local:$ST/store" >"$TMP/rebuild.out" 2>&1 || fail "rebuild-catalog: $(cat "$TMP/rebuild.out")"
sup_run "$ST" --spares 0 || { cat "$ST.out"; fail "after rebuild-catalog: not done"; }
grep -q "final checkpoint (step 30) is committed" "$ST.out" || { cat "$ST.out"; fail "after the rebuild the run did not go on from step 30"; }

# no catalog at all (deleted) beside the store's manifests: exit 4, the
# store's message, nothing started
starts=$(events "$ST" | grep -c run_started)
mv "$CAT" "$TMP/catalog.good"
rc=0
sup_run "$ST" --spares 0 || rc=$?
[ $rc -eq 4 ] || { cat "$ST.out"; fail "a deleted catalog: exit $rc, want 4"; }
grep -q "rebuild-catalog" "$ST.out" || { cat "$ST.out"; fail "a deleted catalog: no way out named"; }
[ "$(events "$ST" | grep -c run_started)" -eq "$starts" ] || fail "a run started without a catalog"
mv "$TMP/catalog.good" "$CAT"

# garbage in the catalog: the store's error, exit 4, nothing started
starts=$(events "$ST" | grep -c run_started)
for f in "$CAT"/*.sst "$CAT"/MANIFEST-*; do [ -f "$f" ] && head -c 4096 /dev/urandom >"$f"; done
rc=0
sup_run "$ST" --spares 0 || rc=$?
[ $rc -eq 4 ] || { cat "$ST.out"; fail "a corrupt catalog: exit $rc, want 4"; }
grep -q "cannot open the store" "$ST.out" || { cat "$ST.out"; fail "no store message"; }
[ "$(events "$ST" | grep -c run_started)" -eq "$starts" ] || fail "a run started on a corrupt catalog"
"$FT_BIN/ckpt" rebuild-catalog "local:$ST/store" >"$TMP/rebuild2.out" 2>&1 || fail "rebuild-catalog of a corrupt catalog: $(cat "$TMP/rebuild2.out")"
sup_run "$ST" --spares 0 || { cat "$ST.out"; fail "after rebuilding a corrupt catalog: not done"; }
grep -q "final checkpoint (step 30) is committed" "$ST.out" || { cat "$ST.out"; fail "after rebuilding a corrupt catalog the run did not go on from step 30"; }
# a newest checkpoint marked BAD (a loss-spike rollback) is not a catalog
# behind the store: a supervisor killed right after the rollback resumes
ST3=$TMP/state3
mkdir -p "$ST3"
SPIKE=(--set watchdog.loss_spike.window=10 --set watchdog.loss_spike.min_steps=5
  --set recovery.on_loss_spike=rollback_and_skip --set recovery.skip_batches=3 --steps 60)
FAKE_STEP_MS=100 FAKE_SAVE_FIRST=1 FAKE_SPIKE_BATCH=19 sup_bg "$ST3" --spares 0 "${SPIKE[@]}"
for _ in $(seq 300); do has_event "$ST3" checkpoint_bad 2>/dev/null && break; sleep 0.05; done
kill -9 $SUP
wait $SUP 2>/dev/null || true
has_event "$ST3" checkpoint_bad 'e["step"] == 20' || { cat "$ST3.out"; fail "no checkpoint marked BAD"; }
for _ in $(seq 50); do pgrep -f "fake_worker.*$ST3/" >/dev/null || break; sleep 0.1; done
rc=0
FAKE_SPIKE_BATCH=19 sup_run "$ST3" --spares 0 "${SPIKE[@]}" || rc=$?
[ $rc -eq 0 ] || { cat "$ST3.out"; fail "a resume after a rollback: exit $rc, want 0"; }
has_event "$ST3" run_done || fail "the run after the rollback did not finish"
pass "a catalog behind the store, missing or corrupt: exit 4 with the way out; never a silent restart"
