#!/usr/bin/env bash
# data_s3_resume: exact resume and recovery of supervised runs on s3:// data
# (docs/data.md "The listing"), against one moto server with signatures
# checked (s3_lib.sh). The demo's model, 2 nodes x 1 worker, 20 steps, a
# checkpoint every 5, each run's store outside its state directory; "ref" is
# one uninterrupted run on the same shards copied to a local folder.
#   (a) a fresh state directory: a run on the bucket stopped (SIGINT) after
#       checkpoint 10; a shard that sorts first is added under the glob;
#       a NEW --state with the same store resumes: the supervisor writes
#       the resume checkpoint's listing before any worker starts (stderr,
#       run_started.data_listing), and every loss after the restore step
#       and the final checkpoint's tensors are ref's bit for bit (a
#       re-listing would put the new shard first: other data). `ckpt show`
#       names the listing the checkpoint carries, and `show --to` writes
#       it: STATE/data_listing.json's JSON (also from a catalog rebuilt
#       from the manifests);
#   (b) the supervisor SIGKILLed mid-run (its workers leave on their own),
#       the same command again: ref's bits;
#   (c) an in-process recovery (recovery.in_process, a spare, node 1 killed
#       at step 13 once checkpoint 10 is committed: failpoints
#       kill_after_commit, chaos.kill_node_at_step): ref's bits (the gang
#       keeps its world of 2);
#   (d) a shrink (no spare, recovery.when_no_spares: shrink: the gang goes
#       on with one rank and the same global batch): the bits of the same
#       faulted run on the local copies (the test says whether they are
#       ref's too: the CPU engine's sums happen to agree across the shrink);
#   (e) (a)'s state directory with a listing that is not its checkpoint's:
#       the checkpoint's replaces it (a warning, the old one kept as .old);
#       then --relist-data: the workers list the bucket again (the shard
#       added is in), and the next checkpoint carries that listing.
. "$(dirname "$0")/lib.sh"
T=$TMP
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; [ -n "${KEEP:-}" ] || cleanup' EXIT
s3_start
s3_mkbucket data

mkdir -p "$TMP/loc" "$TMP/other"
"$FT_BIN/ftdata" synth --out "$TMP/loc/synth" --tokens 200000 --shard-tokens 50000 --val-frac 0 \
  >/dev/null
"$FT_BIN/ftdata" synth --out "$TMP/other/x" --tokens 50000 --seed 7 --val-frac 0 >/dev/null
aws_s3 s3 cp --recursive --exclude '*' --include 'synth_train_*.bin' "$TMP/loc" s3://data/c/ \
  >/dev/null || fail "upload"
S3_TRAIN="s3://data/c/synth_train_*.bin"
LOC_TRAIN="$TMP/loc/synth_train_*.bin"
NSHARDS=$(ls "$TMP"/loc/synth_train_*.bin | wc -l)
export FT_DATA_CACHE_BYTES=0 # every block from the bucket: no cache directory

# mkrf NAME [YAML recovery lines...]: the demo's run file, 20 steps, a
# checkpoint every 5, as $TMP/NAME.yaml
mkrf() {
  local name=$1
  shift
  sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' -e 's|  steps: 300|  steps: 20|' \
    -e 's|  every_steps: 25|  every_steps: 5|' -e 's|  val_every: 25|  val_every: 0|' \
    -e 's|  heartbeat_timeout_s: 10|  heartbeat_timeout_s: 3|' \
    "$FT_SRC/examples/demo.yaml" >"$TMP/$name.yaml"
  local l
  for l in "$@"; do echo "$l" >>"$TMP/$name.yaml"; done
}
mkrf plain
mkrf inproc "  in_process: true" "  rejoin_timeout_s: 2" "chaos: {kill_node_at_step: 13}"
mkrf shrink "chaos: {kill_node_at_step: 13}"

# sup RUNFILE STATE STORE TRAIN [args...]: supervise (FP: failpoints; PACE:
# min_step_ms), output to STATE.out; with BG=1 in the background, PID its pid
sup() {
  local rf=$1 st=$2 store=$3 tr=$4
  shift 4
  local cmd=(env FT_FAILPOINTS="min_step_ms=${PACE:-0}${FP:+,$FP}" "$FT_BIN/supervise" --state "$st"
    --store "local:$store" --worker "$FT_BIN/worker" --set "data.train=$tr" --set data.val=
    --set supervisor.step_events_every=1 "$@" "$TMP/$rf.yaml")
  if [ -n "${BG:-}" ]; then
    "${cmd[@]}" >"$st.out" 2>&1 &
    PID=$!
  else
    "${cmd[@]}" >"$st.out" 2>&1
  fi
}
# sup_done NAME RUNFILE TRAIN [args...]: a run to its end in $TMP/NAME.{st,store}
sup_done() {
  local name=$1 rf=$2 tr=$3
  shift 3
  sup "$rf" "$TMP/$name.st" "$TMP/$name.store" "$tr" "$@" ||
    fail "$name: supervise exited $?: $(tail -15 "$TMP/$name.st.out")"
}
# final NAME [STORE]: the final checkpoint's tensors as $TMP/NAME.safetensors
final() {
  "$FT_BIN/ckpt" --store "local:${2:-$TMP/$1.store}" restore 20 --to "$TMP/$1.safetensors" \
    >/dev/null || fail "$1: no final checkpoint"
}
# step_losses STATE... [--after S]: "step loss" of the step events of the
# states' runs (the last one heard for each step), steps > S
step_losses() {
  python3 - "$@" <<'PY'
import json, sys
args, after = sys.argv[1:], -1
if "--after" in args:
    i = args.index("--after"); after = int(args[i + 1]); args = args[:i] + args[i + 2:]
loss = {}
for st in args:
    for l in open(st + "/events.jsonl"):
        e = json.loads(l)
        if e["event"] == "step" and e["step"] > after:
            loss[e["step"]] = e["loss"]
for s in sorted(loss):
    print(s, repr(loss[s]))
PY
}
# restore_of STATE GEN: the restore step of generation GEN
restore_of() {
  python3 -c '
import json, sys
for l in open(sys.argv[1] + "/events.jsonl"):
    e = json.loads(l)
    if e["event"] == "generation_started" and e["gen"] == int(sys.argv[2]):
        print(e["restore_step"])' "$1" "$2"
}
# wait_commit STATE STEP PID: until checkpoint STEP (or newer) is committed
wait_commit() {
  for _ in $(seq 600); do
    has_ev "$1" checkpoint_committed "e['step'] >= $2" && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.05
  done
  fail "$1: no checkpoint $2: $(tail -10 "$1.out")"
}
has_ev() { # STATE NAME COND
  python3 -c '
import json, sys
try:
    ev = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl")]
except (OSError, ValueError):
    sys.exit(1)
sys.exit(0 if any(e["event"] == sys.argv[2] and eval(sys.argv[3]) for e in ev) else 1)' "$@"
}
# same_as_ref NAME STATES...: every loss after the first restore and the
# final tensors equal ref's
same_as_ref() {
  local name=$1
  shift
  local got first
  got=$(step_losses "$@")
  first=${got%% *}
  [ "$got" = "$(step_losses "$TMP/ref.st" | awk -v n="$first" '$1 >= n')" ] ||
    fail "$name: the losses differ from the uninterrupted local run's:
$(diff <(step_losses "$@") <(step_losses "$TMP/ref.st") | head -8)"
  cmp -s "$TMP/$name.safetensors" "$TMP/ref.safetensors" ||
    fail "$name: the final checkpoint's tensors differ from the uninterrupted local run's"
}

# ---- ref: uninterrupted, on the local copies -------------------------------------
sup_done ref plain "$LOC_TRAIN"
final ref
[ "$(step_losses "$TMP/ref.st" | wc -l)" -eq 20 ] || fail "ref: $(step_losses "$TMP/ref.st" | wc -l) step losses, not 20"
has_ev "$TMP/ref.st" run_started "'data_listing' not in e" || fail "ref: local data has a data_listing"
"$FT_BIN/ckpt" --store "local:$TMP/ref.store" show 20 --to "$TMP/none.json" 2>"$TMP/none.err" &&
  fail "ref: ckpt show --to wrote a listing for local data"
grep -q "carries no data listing" "$TMP/none.err" || fail "ref: ckpt show --to: $(cat "$TMP/none.err")"

# ---- (a) a fresh state directory, a shard added to the bucket -----------------------
A=$TMP/a
BG=1 PACE=100 sup plain "$A.st1" "$A.store" "$S3_TRAIN"
wait_commit "$A.st1" 10 $PID
kill -INT $PID
set +e
wait $PID
rc=$?
set -e
[ $rc -eq 130 ] || fail "(a): the interrupted run exited $rc, not 130: $(tail -5 "$A.st1.out")"
[ -s "$A.st1/data_listing.json" ] || fail "(a): no STATE/data_listing.json"
R=$(python3 -c '
import json, sys
print(max(e["step"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "checkpoint_committed"))' \
  "$A.st1/events.jsonl")
"$FT_BIN/ckpt" --store "local:$A.store" show "$R" --json >"$TMP/show.json" || fail "(a): ckpt show $R"
python3 - "$TMP/show.json" "$S3_TRAIN" "$NSHARDS" <<'PY' || fail "(a): ckpt show --json: the listing"
import json, sys
d = json.load(open(sys.argv[1]))["data_listing"]
assert d and d[0]["pattern"] == sys.argv[2] and d[0]["objects"] == int(sys.argv[3]), d
assert d[0]["tokens"] > 0 and d[0]["bytes"] > 0, d
PY
"$FT_BIN/ckpt" --store "local:$A.store" show "$R" | grep -qF "data    $S3_TRAIN: $NSHARDS objects, " ||
  fail "(a): ckpt show $R: $("$FT_BIN/ckpt" --store "local:$A.store" show "$R" | grep '^data')"
"$FT_BIN/ckpt" --store "local:$A.store" show "$R" --to "$TMP/a.listing" >/dev/null &&
  python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' \
    "$TMP/a.listing" "$A.st1/data_listing.json" ||
  fail "(a): ckpt show $R --to: not the state directory's listing"
"$FT_BIN/ckpt" --store "local:$A.store" show "$R" --to "$A.store/x.json" 2>/dev/null &&
  fail "(a): ckpt show --to wrote into the store's folder"
# a shard that sorts first ('.' < '0'): listing the bucket again would start the stream with it
aws_s3 s3 cp "$TMP/other/x_train_000.bin" s3://data/c/synth_train_0.bin >/dev/null
sup plain "$A.st2" "$A.store" "$S3_TRAIN" || fail "(a): the resume exited $?: $(tail -15 "$A.st2.out")"
grep -q "data listing of checkpoint $R written to $A.st2/data_listing.json" "$A.st2.out" ||
  fail "(a): the supervisor did not say it wrote checkpoint $R's listing: $(grep -i listing "$A.st2.out")"
has_ev "$A.st2" run_started "e['data_listing']['source'] == 'checkpoint' and e['data_listing']['step'] == $R" ||
  fail "(a): run_started: $(grep run_started "$A.st2/events.jsonl")"
[ "$(restore_of "$A.st2" 2)" = "$R" ] || fail "(a): the resume restored $(restore_of "$A.st2" 2), not $R"
grep -q synth_train_0.bin "$A.st2/data_listing.json" && fail "(a): the listing names the new shard"
final a "$A.store"
# the manifests are the truth: a catalog rebuilt from them has the listing back
cp -r "$A.store" "$TMP/rb.store" && rm -rf "$TMP/rb.store/catalog"
"$FT_BIN/ckpt" --store "local:$TMP/rb.store" rebuild-catalog >/dev/null 2>&1 || fail "(a): rebuild-catalog"
"$FT_BIN/ckpt" --store "local:$TMP/rb.store" show "$R" --to "$TMP/rb.listing" >/dev/null &&
  cmp -s "$TMP/rb.listing" "$TMP/a.listing" || fail "(a): the rebuilt catalog lost checkpoint $R's listing"
same_as_ref a "$A.st2"
aws_s3 s3 rm s3://data/c/synth_train_0.bin >/dev/null # the later runs list the bucket of ref
pass "(a) a fresh --state resumes step $R with the checkpoint's listing (the shard added since ignored): $((20 - R)) losses and the final tensors = the local run's"

# ---- (b) the supervisor SIGKILLed, the same command again ---------------------------
B=$TMP/b
BG=1 PACE=100 sup plain "$B.st" "$B.store" "$S3_TRAIN"
wait_commit "$B.st" 10 $PID
kill -9 $PID
wait $PID 2>/dev/null || true
for _ in $(seq 100); do pgrep -f "worker.*$B.st" >/dev/null || break; sleep 0.1; done
pgrep -f "worker.*$B.st" >/dev/null && fail "(b): the workers outlived their supervisor"
cp "$B.st/events.jsonl" "$TMP/b.events1"
sup plain "$B.st" "$B.store" "$S3_TRAIN" || fail "(b): the resume exited $?: $(tail -15 "$B.st.out")"
has_ev "$B.st" run_started "e['data_listing']['source'] == 'state'" ||
  fail "(b): run_started: $(grep run_started "$B.st/events.jsonl" | tail -1)"
final b
same_as_ref b "$B.st"
pass "(b) supervisor SIGKILLed after step $(restore_of "$B.st" 2), resumed: the losses after it and the final tensors = the local run's"

# ---- (c) in-process recovery with a spare ---------------------------------------------
FP=kill_after_commit=10 sup_done c inproc "$S3_TRAIN" --spares 1
has_ev "$TMP/c.st" node_rejoined "e['node'] == 0" || fail "(c): node 0 did not rejoin in process: $(tail -15 "$TMP/c.st.out")"
has_ev "$TMP/c.st" spare_promoted "True" || fail "(c): no spare promoted"
final c
same_as_ref c "$TMP/c.st"
pass "(c) in process: node 1 killed at step 13, node 0 rejoined with the spare from step $(restore_of "$TMP/c.st" 2): losses and final tensors = the local uninterrupted run's"

# ---- (d) shrink: no spare, the same faulted run on the local copies ---------------------
FP=kill_after_commit=10 PACE=60 sup_done dl shrink "$LOC_TRAIN"
FP=kill_after_commit=10 PACE=60 sup_done ds shrink "$S3_TRAIN"
for n in dl ds; do
  has_ev "$TMP/$n.st" generation_started "e['gen'] == 2 and len(e['nodes']) == 1" ||
    fail "($n): no shrunk generation 2: $(grep generation_started "$TMP/$n.st/events.jsonl")"
  final $n
done
[ "$(restore_of "$TMP/dl.st" 2)" = "$(restore_of "$TMP/ds.st" 2)" ] ||
  fail "(d): the local run restored $(restore_of "$TMP/dl.st" 2), the s3 one $(restore_of "$TMP/ds.st" 2)"
[ "$(step_losses "$TMP/ds.st")" = "$(step_losses "$TMP/dl.st")" ] ||
  fail "(d): the losses differ from the faulted local run's: $(diff <(step_losses "$TMP/ds.st") <(step_losses "$TMP/dl.st") | head -6)"
cmp -s "$TMP/ds.safetensors" "$TMP/dl.safetensors" ||
  fail "(d): the final tensors differ from the faulted local run's"
also="differ from"
cmp -s "$TMP/ds.safetensors" "$TMP/ref.safetensors" && also="also equal"
pass "(d) shrink to one rank from step $(restore_of "$TMP/ds.st" 2): every loss and the final tensors = the same faulted run's on the local copies (they $also the uninterrupted world-2 run's)"

# ---- (e) a different listing in the state directory; --relist-data ---------------------
# (a)'s resumed run, done at step 20, extended by 2 steps twice (--steps)
E=$A.st2
python3 - "$E/data_listing.json" <<'PY' # another listing than the checkpoint's
import json, sys
d = json.load(open(sys.argv[1]))
d["patterns"]["s3://data/other/*.bin"] = {"objects": []}
json.dump(d, open(sys.argv[1], "w"))
PY
sup plain "$E" "$A.store" "$S3_TRAIN" --steps 22 || fail "(e): --steps 22 exited $?: $(tail -15 "$E.out")"
grep -q "warning: $E/data_listing.json is not the data listing of checkpoint 20" "$E.out" ||
  fail "(e): no warning: $(grep -i listing "$E.out")"
has_ev "$E" run_started "e['data_listing']['source'] == 'checkpoint' and e['data_listing']['replaced'] and e['gen'] == 3" ||
  fail "(e): run_started: $(grep run_started "$E/events.jsonl" | tail -1)"
[ -s "$E/data_listing.json.old" ] || fail "(e): the replaced listing was not kept"
cmp -s "$E/data_listing.json" "$TMP/a.listing" || fail "(e): the listing is not the checkpoint's"
aws_s3 s3 cp "$TMP/other/x_train_000.bin" s3://data/c/synth_train_0.bin >/dev/null
sup plain "$E" "$A.store" "$S3_TRAIN" --steps 24 --relist-data ||
  fail "(e): --relist-data exited $?: $(tail -15 "$E.out")"
has_ev "$E" run_started "e['data_listing']['source'] == 'relist' and e['gen'] == 4" ||
  fail "(e): run_started: $(grep run_started "$E/events.jsonl" | tail -1)"
cmp -s "$E/data_listing.json.old" "$TMP/a.listing" || fail "(e): --relist-data did not keep the old listing"
"$FT_BIN/ckpt" --store "local:$A.store" show 24 | grep -qF "data    $S3_TRAIN: $((NSHARDS + 1)) objects, " ||
  fail "(e): checkpoint 24: $("$FT_BIN/ckpt" --store "local:$A.store" show 24 | grep '^data')"
pass "(e) a listing in the state directory that is not the checkpoint's is replaced by it (kept as .old, a warning); --relist-data lists the bucket again and the checkpoints after carry the new listing ($((NSHARDS + 1)) objects)"
