#!/usr/bin/env bash
# A retention GC that the store refuses is an event, and costs nothing:
# with checkpoint.keep_last=2, a manifest the catalog does not list (a copy
# put into STORE/manifests/RUN/ under a step of its own while the run
# trains) makes every later GC refuse, deleting nothing (ckptstore/ckpt_gc.c,
# G1b). The run writes gc_failed {reason naming that manifest, refused true}
# once (not again after every commit: the reason is the same), trains to
# the end (exit 0), nobody is blamed, and every checkpoint committed after
# the manifest came is still listed by `ckpt ls`.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"
MAN=$ST/store/manifests/gpt2-tiny
STRAY=00000000000000009999.json

FAKE_STEP_MS=150 sup_bg "$ST" --spares 0 --steps 40 --set checkpoint.keep_last=2
for _ in $(seq 300); do
  has_event "$ST" checkpoint_committed 'e["step"] == 5' 2>/dev/null && break
  sleep 0.05
done
[ -f "$MAN/00000000000000000005.json" ] || { cat "$ST.out"; fail "no manifest of step 5"; }
cp "$MAN/00000000000000000005.json" "$TMP/$STRAY"
mv "$TMP/$STRAY" "$MAN/$STRAY" # whole, as a commit puts it
# the newest checkpoint committed before the stray manifest came
before=$(python3 -c '
import json, sys
print(max(e["step"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "checkpoint_committed"))
' "$ST/events.jsonl")
rc=0
wait $SUP || rc=$?
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc with a refused GC (want 0: the run goes on)"; }
has_event "$ST" run_done || fail "no run_done"
has_event "$ST" gc_failed "e['refused'] is True and '$STRAY' in e['reason'] and 'rebuild-catalog' in e['reason']" ||
  { cat "$ST.out"; fail "no gc_failed event naming the manifest the catalog does not list"; }
n=$(events "$ST" | grep -c '^gc_failed$')
[ "$n" -eq 1 ] || fail "gc_failed $n times for the same reason (want once)"
grep -q "gc_failed: retention GC refused" "$ST.out" || { cat "$ST.out"; fail "the terminal does not say the GC was refused"; }
for e in fault_detected node_quarantined run_failed; do
  has_event "$ST" $e && { cat "$ST.out"; fail "$e after a refused GC"; }
done
steps=$(python3 -c '
import json, sys
print(" ".join(str(e["step"]) for e in map(json.loads, open(sys.argv[1]))
               if e["event"] == "checkpoint_committed" and e["step"] > int(sys.argv[2])))
' "$ST/events.jsonl" "$before")
[ "$(echo $steps | wc -w)" -gt 2 ] || fail "too few checkpoints after the stray manifest: $steps"
for k in $steps; do
  has_checkpoint "local:$ST/store" "$k" || { "$FT_BIN/ckpt" --store "local:$ST/store" ls; fail "checkpoint $k was deleted by a refused GC"; }
done
pass "a refused retention GC: one gc_failed naming the stray manifest, nothing deleted, run done"
