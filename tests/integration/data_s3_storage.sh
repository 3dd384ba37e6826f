#!/usr/bin/env bash
# data_s3_storage: the data's bucket failing under a supervised gang is a
# storage fault, never a node's (docs/data.md "Faults", docs/watchdog.md).
# moto with every signature checked (s3_lib.sh), the fault proxy
# (chaos/s3_faults.py) on the data bucket's own endpoint
# (FT_DATA_S3_ENDPOINT; the store is local), 2 nodes + 1 spare on the demo
# model, no cache directory, no prefetch, 4 KiB blocks: the training thread
# GETs a block every step or two itself, so it really waits.
#   0. an unfaulted run: its losses, and no data_wait (a healthy bucket's
#      reads are milliseconds: no wait to speak of);
#   a. 503 SlowDown on every block GET for 4 s (longer than the heartbeat
#      interval, shorter than the retry budget): the GETs are retried, the
#      step waits and says so: events data_wait (reason slowdown) and
#      data_wait_end (how resumed), `supervise status` shows "waiting on
#      data storage" meanwhile; the run ends with the same losses as an
#      unfaulted run; no fault, no restart, no node quarantined, no spare
#      promoted, no progress_hang.
#   b. block GETs hanging past the client's budget (FT_S3_TIMEOUT_S=1,
#      FT_S3_RETRIES=2): the worker exits 4 (fault store_error, nobody
#      blamed: a restart in place, no quarantine, no spare), its wait said
#      (data_wait_end reason timeout, how stopped), the progress watchdog
#      silent (the client gave up first); once the proxy answers again the
#      run finishes.
#   c. one rank's GET hanging longer than the others' collective timeout
#      (3 s; the client's defaults): their collective times out first, the records
#      show the rank behind it in storage_wait: progress_hang class storage,
#      nobody blamed, a restart in place; the run finishes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sup_lib.sh"
T=$TMP
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; [ -n "${KEEP:-}" ] || cleanup' EXIT
s3_start
s3_mkbucket data
mkdir -p "$TMP/loc"
"$FT_BIN/ftdata" synth --out "$TMP/loc/synth" --tokens 120000 --shard-tokens 60000 >/dev/null
aws_s3 s3 cp --recursive --exclude '*' --include 'synth_train_*.bin' "$TMP/loc" s3://data/c/ \
  >/dev/null || fail "upload"

s3_proxy_start "$TMP"

STEPS=30
SUPPID=
start() { # NAME [supervise args]: a supervised run on the bucket through the proxy
  local name=$1
  shift
  FT_S3_ENDPOINT=http://127.0.0.1:9 FT_DATA_S3_ENDPOINT="http://127.0.0.1:$PP" \
    FT_DATA_CACHE_BYTES=0 FT_DATA_PREFETCH_BLOCKS=0 FT_DATA_BLOCK_BYTES=4096 \
    "$FT_BIN/supervise" --state "$TMP/$name" --worker "$FT_BIN/worker" --spares 1 \
    --steps $STEPS --set "data.train=s3://data/c/synth_train_*.bin" --set data.val= \
    --set "checkpoint.store=local:$TMP/$name-store" --set chaos.kill_node_at_step=0 \
    --set watchdog.heartbeat_timeout_s=2 "$@" "$FT_SRC/examples/demo.yaml" \
    >"$TMP/$name.out" 2>&1 &
  SUPPID=$!
}
wait_for() { # NAME COND...: waits (at most 60 s) until has_event NAME COND...
  local name=$1
  shift
  for _ in $(seq 600); do
    [ -f "$TMP/$name/events.jsonl" ] && has_event "$TMP/$name" "$@" && return 0
    kill -0 "$SUPPID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
finish() { # NAME: supervise's exit, which must be 0
  local rc=0
  for _ in $(seq 900); do
    kill -0 "$SUPPID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$SUPPID" 2>/dev/null && { kill "$SUPPID"; fail "$1: the run did not end: $(tail -5 "$TMP/$1.out")"; }
  wait "$SUPPID" || rc=$?
  [ $rc -eq 0 ] || fail "$1: supervise exit $rc: $(tail -8 "$TMP/$1.out")"
}
step_losses() { # NAME: "step loss" of every step event
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["event"] == "step":
        print(e["step"], repr(e["loss"]))' "$TMP/$1/events.jsonl"
}
nobody_blamed() { # NAME
  local e
  for e in node_quarantined spare_promoted progress_hang; do
    ! has_event "$TMP/$1" $e || fail "$1: $e: $(grep "\"$e\"" "$TMP/$1/events.jsonl" | head -2)"
  done
}

# ---- the unfaulted run ----------------------------------------------------------------
start base
finish base
[ "$(step_losses base | wc -l)" -eq $STEPS ] || fail "base: $(step_losses base | wc -l) step events"
# a healthy bucket's reads (a GET every step or two, milliseconds each) are
# no wait to speak of: a read only counts once a beat shows it still going
# a heartbeat interval after it began (a loaded machine may stretch one or
# two GETs that far; judging the beats on the loop's clock instead made
# most reads a wait)
nw=$(grep -c '"event":"data_wait"' "$TMP/base/events.jsonl") || true
[ "$nw" -le 2 ] ||
  fail "base: $nw data_wait on a healthy bucket: $(grep '"data_wait"' "$TMP/base/events.jsonl" | head -2)"

# ---- a. 503 SlowDown for 4 s: the step waits, says so, and goes on -------------------
FT_S3_RETRIES=30 FT_S3_RETRY_BUDGET_S=60 start slow
wait_for slow step || fail "slow: no step: $(tail -5 "$TMP/slow.out")"
echo slowdown:4 >"$TMP/mode"
seen=
for _ in $(seq 100); do
  "$FT_BIN/supervise" status "$TMP/slow" >"$TMP/slow.status" 2>&1 || true
  if grep -q "waiting on data storage" "$TMP/slow.status"; then
    seen=1
    break
  fi
  kill -0 "$SUPPID" 2>/dev/null || break
  sleep 0.1
done
finish slow
echo ok >"$TMP/mode"
grep -q '^503 GET /data/c/synth_train_' "$TMP/proxy.log" ||
  fail "slow: no block GET was answered 503: $(tail -3 "$TMP/proxy.log")"
[ -n "$seen" ] || fail "slow: supervise status never said 'waiting on data storage': $(cat "$TMP/slow.status")"
echo "status: $(grep 'waiting on data storage' "$TMP/slow.status")"
has_event "$TMP/slow" data_wait "e['reason'] in ('slowdown', 'none') and e['seconds'] > 0" ||
  fail "slow: no data_wait event: $(grep -E 'data_wait|fault' "$TMP/slow/events.jsonl" | head -3)"
has_event "$TMP/slow" data_wait_end "e['how'] == 'resumed' and e['reason'] == 'slowdown' and e['attempt'] >= 1 and e['seconds'] > 0" ||
  fail "slow: no data_wait_end (resumed, slowdown): $(grep data_wait "$TMP/slow/events.jsonl" | head -3)"
for e in fault_detected node_restarted; do
  ! has_event "$TMP/slow" $e || fail "slow: $e: $(grep "\"$e\"" "$TMP/slow/events.jsonl" | head -2)"
done
nobody_blamed slow
[ "$(step_losses slow)" = "$(step_losses base)" ] ||
  fail "slow: the losses differ from the unfaulted run's: $(diff <(step_losses slow) <(step_losses base) | head -4)"
pass "503 SlowDown for 4 s: the step waited and said so ($(grep -m1 '"data_wait_end"' "$TMP/slow/events.jsonl" | cut -c1-240)); same $STEPS losses, no fault, nobody blamed"

# ---- b. GETs hanging past the client's budget: exit 4, restart in place --------------
FT_S3_TIMEOUT_S=1 FT_S3_RETRIES=2 FT_S3_RETRY_BUDGET_S=2 start hang
wait_for hang step || fail "hang: no step: $(tail -5 "$TMP/hang.out")"
echo hang >"$TMP/mode"
wait_for hang fault_detected || fail "hang: no fault: $(tail -5 "$TMP/hang.out")"
echo ok >"$TMP/mode"
finish hang
grep -q '^hang GET /data/c/synth_train_' "$TMP/proxy.log" || fail "hang: no block GET hung"
has_event "$TMP/hang" fault_detected "e['kind'] == 'store_error'" ||
  fail "hang: the fault is not store_error: $(grep fault_detected "$TMP/hang/events.jsonl" | head -2)"
why=$(grep -h 'S3 GET s3://data/c/synth_train_.*Timeout was reached' "$TMP"/hang/logs/*.log | head -1)
[ -n "$why" ] || fail "hang: no worker log says its block GET timed out: $(tail -3 "$TMP"/hang/logs/*.log)"
has_event "$TMP/hang" data_wait_end "e['how'] == 'stopped' and e['reason'] == 'timeout'" ||
  fail "hang: no data_wait_end (stopped, timeout): $(grep data_wait "$TMP/hang/events.jsonl" | head -3)"
nobody_blamed hang
has_event "$TMP/hang" generation_started "e['gen'] >= 2" || fail "hang: no restart"
pass "GETs hanging past the budget: exit 4 ($(echo "$why" | cut -c1-200)), fault store_error, restarted in place, nobody blamed, the run finished"
# ---- c. a wait longer than the others' collective timeout ------------------------------
# watchdog.collective_timeout_s=3, the client's defaults (a 10 s stall
# timeout, 120 s budget); one block GET hangs (hang:1), the other rank's go
# through: the rank waiting on its GET makes its peer's collective time
# out first; the
# records show the rank behind it in storage_wait: progress_hang class
# storage (trigger collective_timeout), nobody blamed (before, its node
# was named "behind" and quarantined), the gang restarted in place after
# watchdog.storage_backoff_s, and the run finishes once the proxy answers.
start coll --set watchdog.collective_timeout_s=3 --set watchdog.storage_backoff_s=1
wait_for coll step || fail "coll: no step: $(tail -5 "$TMP/coll.out")"
echo hang:1 >"$TMP/mode"
wait_for coll fault_detected || fail "coll: no fault: $(tail -5 "$TMP/coll.out")"
echo ok >"$TMP/mode"
finish coll
has_event "$TMP/coll" progress_hang "e['class'] == 'storage' and e['trigger'] == 'collective_timeout' and not e['culprits']" ||
  fail "coll: no progress_hang class storage: $(grep -E 'progress_hang|fault_detected' "$TMP/coll/events.jsonl" | head -2 | cut -c1-600)"
for e in node_quarantined spare_promoted; do
  ! has_event "$TMP/coll" $e || fail "coll: $e: $(grep "\"$e\"" "$TMP/coll/events.jsonl" | head -2)"
done
! has_event "$TMP/coll" fault_detected "e['blamed']" ||
  fail "coll: a node was blamed: $(grep fault_detected "$TMP/coll/events.jsonl" | head -2)"
pass "a wait past the others' collective timeout: $(grep -m1 '"progress_hang"' "$TMP/coll/events.jsonl" | grep -o '"why":"[^"]*"'); nobody blamed, restarted, finished"
kill $PROXY_PID 2>/dev/null || true
