#!/usr/bin/env bash
# Generations only grow, also across a catalog rebuilt from the manifests
# (which keep no supervisor records): the next run's generation continues
# above every one used before (from STATE/generation), with a line saying
# why. A STATE/generation that is not a number is refused (exit 4) naming
# the file. A finished run rerun with a --steps that does not go beyond its
# final checkpoint says so; a larger --steps trains it on.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"
CAT=$ST/store/catalog

gen_run() { # STEPS [args...]: the fake worker on the demo run file, in $ST
  local steps=$1
  shift
  FAKE_STEP_MS=5 "$FT_BIN/supervise" --state "$ST" --worker "$FAKE" --steps "$steps" \
    --set checkpoint.every_steps=5 --set watchdog.heartbeat_timeout_s=3 \
    "$@" "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1
}
max_gen() { # the highest generation of the events so far (last: the newest)
  python3 -c '
import json, sys
g = [json.loads(l)["gen"] for l in open(sys.argv[1]) if json.loads(l)["event"] == "generation_started"]
print((g[-1:] if len(sys.argv) > 2 else [max(g)])[0] if g else 0)
' "$ST/events.jsonl" "$@"
}

# ---- a finished run and --steps ----
gen_run 10 || { cat "$ST.out"; fail "the first run did not finish"; }
[ "$(max_gen)" -eq 1 ] || fail "the first run's generation is $(max_gen), want 1"
gen_run 10 || { cat "$ST.out"; fail "a done run again: not exit 0"; }
grep -q "already done" "$ST.out" && grep -q -- "--steps 10 changes nothing: the run's final checkpoint is step 10" "$ST.out" ||
  { cat "$ST.out"; fail "a done run with --steps 10 does not say that --steps changed nothing"; }
gen_run 15 || { cat "$ST.out"; fail "--steps 15 on a done run: not exit 0"; }
grep -q "was done at step 10; --steps 15 extends it" "$ST.out" || { cat "$ST.out"; fail "the extension is not said"; }
has_checkpoint "local:$ST/store" 15 || fail "--steps 15 did not train the done run to step 15"
[ "$(max_gen)" -eq 2 ] || fail "the extension's generation is $(max_gen), want 2"
pass "a done run: --steps 10 changes nothing and says so; --steps 15 trains on to 15"

# ---- the catalog rebuilt from the manifests: generations go on ----
before=$(max_gen)
rm -rf "$CAT"
"$FT_BIN/ckpt" rebuild-catalog "local:$ST/store" >"$TMP/rebuild.out" 2>&1 || fail "rebuild-catalog: $(cat "$TMP/rebuild.out")"
"$FAKE" --meta-get "local:$ST/store" gpt2-tiny/state >/dev/null 2>&1 && fail "the rebuilt catalog still has the run state"
gen_run 20 || { cat "$ST.out"; fail "after the rebuild: not done"; }
has_event "$ST" generation_started "e['gen'] == $before + 1 and e['restore_step'] == 15" ||
  { cat "$ST.out"; fail "after the rebuild the generation is $(max_gen last), want $((before + 1)) (from step 15)"; }
grep -q "the catalog has no run state of run gpt2-tiny.*generation $before was used: going on with $((before + 1))" "$ST.out" ||
  { cat "$ST.out"; fail "the generation's source is not said"; }
pass "a catalog rebuilt from the manifests: generation $((before + 1)), above the $before used before"

# ---- a damaged STATE/generation: refused, named ----
echo "not a number" >"$ST/generation"
rc=0
gen_run 25 || rc=$?
[ $rc -eq 4 ] || { cat "$ST.out"; fail "a damaged generation file: exit $rc, want 4"; }
grep -q "$ST/generation is not a generation number" "$ST.out" || { cat "$ST.out"; fail "the damaged file is not named"; }
pass "a damaged STATE/generation: exit 4, named"
