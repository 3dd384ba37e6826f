#!/usr/bin/env bash
# supervise runs a fault-free run to the end with the protocol-conformant
# fake worker: every checkpoint is committed in the store under --state, the
# event log tells the story, and a second supervise on the done run exits 0.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state

sup_run "$ST" --spares 1 || { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
in_order "$ST" run_started worker_launched generation_started checkpoint_committed run_done ||
  fail "events out of order: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" run_started 'e["world"] == 2 and e["spares"] == 1 and e["gen"] == 1' ||
  fail "run_started fields"
has_event "$ST" worker_launched 'e["role"] == "spare" and e["node"] == 2' || fail "no spare launched"
has_event "$ST" generation_started 'e["gen"] == 1 and e["world"] == 2 and e["restore_step"] == -1' ||
  fail "generation_started fields"
for s in 5 10 15 20 25 30; do
  has_event "$ST" checkpoint_committed "e['step'] == $s and e['world'] == 2" ||
    fail "no checkpoint_committed for step $s"
done
has_event "$ST" run_done 'e["steps"] == 30 and e["restarts"] == 0' || fail "run_done fields"
! has_event "$ST" fault_detected || fail "a fault in a fault-free run"
[ -s "$ST/control.port" ] || fail "no control.port"
[ -d "$ST/store/catalog" ] || fail "the catalog is not under --state"
if [ -x "$FT_BIN/ckpt" ]; then
  has_checkpoint "local:$ST/store" 30 || fail "ckpt does not list step 30 as committed"
fi
pass "fault-free run done, checkpoints committed"

sup_run "$ST" --spares 1 || fail "a second supervise on a done run exited $?"
grep -q "already done" "$ST.out" || fail "second run did not say it is done"
pass "a done run stays done"

# kernel threads under the local launcher: the cores shared by the gang's
# workers, unless nodes.threads says how many
half=$(($(nproc) / 2))
grep -qx "fake worker: --threads $((half > 0 ? half : 1))" "$ST/logs/node0.slot0.log" ||
  fail "node 0 was not given $(nproc) cores / 2 workers: $(grep -h -- --threads "$ST/logs/node0.slot0.log")"
sup_run "$TMP/threads" --set nodes.threads=7 --steps 5 ||
  { rc=$?; cat "$TMP/threads.out"; fail "the nodes.threads run exited $rc"; }
grep -qx "fake worker: --threads 7" "$TMP/threads/logs/node1.slot0.log" ||
  fail "nodes.threads 7 was not passed on: $(grep -h -- --threads "$TMP/threads/logs/node1.slot0.log")"
pass "kernel threads: cores / workers, or nodes.threads"

# errors: a bad flag value is a usage error (2); an s3:// store is accepted
# and opened (a bad bucket name or FT_S3_* value is a store error, 4, with
# the reason; the S3 runs themselves are in the chaos suite "s3")
set +e
"$FT_BIN/supervise" --spares x "$FT_SRC/examples/demo.yaml" 2>/dev/null
[ $? -eq 2 ] || fail "--spares x should exit 2"
"$FT_BIN/supervise" --state "$TMP/s3" --store s3://b/p "$FT_SRC/examples/demo.yaml" 2>"$TMP/s3.err"
[ $? -eq 4 ] || fail "an s3 store with a bad bucket name should exit 4: $(cat "$TMP/s3.err")"
grep -q "bucket name 'b' is not valid" "$TMP/s3.err" || fail "s3 message: $(cat "$TMP/s3.err")"
FT_S3_REQUIRE=sometimes "$FT_BIN/supervise" --state "$TMP/s3" --store s3://bucket/p \
  "$FT_SRC/examples/demo.yaml" 2>"$TMP/s3.err"
[ $? -eq 4 ] || fail "FT_S3_REQUIRE=sometimes should exit 4"
grep -q "FT_S3_REQUIRE" "$TMP/s3.err" || fail "s3 message names FT_S3_REQUIRE: $(cat "$TMP/s3.err")"
# (read whole first: grep -q stops reading at its match, and with pipefail the
# writer's SIGPIPE would fail the pipe)
help=$("$FT_BIN/supervise" --help)
grep -q "s3://" <<<"$help" || fail "--help lacks s3://"
grep -q "exit codes" <<<"$help" || fail "--help lacks exit codes"
# a host list shorter than nodes + spares would put nodes on localhost
"$FT_BIN/supervise" --state "$TMP/short" --worker "$FAKE" --spares 1 --set nodes.launcher=command \
  --set 'nodes.command=env {argv}' --set nodes.hosts=a,b "$FT_SRC/examples/demo.yaml" 2>"$TMP/short.err"
[ $? -eq 2 ] || fail "a 2-host list for 3 nodes should exit 2"
grep -q "nodes.hosts lists 2 host(s) but the run needs 3" "$TMP/short.err" ||
  fail "short host list message: $(cat "$TMP/short.err")"
# the slurm launcher outside an allocation
env -u SLURM_JOB_ID -u SLURM_JOB_NODELIST "$FT_BIN/supervise" --state "$TMP/noalloc" \
  --set nodes.launcher=slurm "$FT_SRC/examples/demo.yaml" 2>"$TMP/noalloc.err"
[ $? -eq 2 ] || fail "the slurm launcher outside an allocation should exit 2"
grep -q "SLURM_JOB_ID is not set: run supervise inside an allocation" "$TMP/noalloc.err" ||
  fail "outside-allocation message: $(cat "$TMP/noalloc.err")"
set -e
pass "usage errors"

# the command launcher: sh -c "env {argv}" with the token in sh's environment
ST2=$TMP/state_cmd
sup_run "$ST2" --spares 1 --set nodes.launcher=command --set 'nodes.command=env {argv}' ||
  { rc=$?; cat "$ST2.out"; fail "command launcher run exited $rc"; }
has_event "$ST2" run_done || fail "command launcher run not done"
pass "command launcher"
