#!/usr/bin/env bash
# In-process restart (recovery.in_process, issue 15 part 1), with the real
# worker: the demo model, 2 nodes + 1 spare, node 1 lost at step 15 (the run
# file's chaos.kill_node_at_step kills its whole process group).
#  1. in process: node 0's worker is not relaunched (one worker_launched for
#     node 0, and that pid answers kill -0 until the end), it left its
#     generation in process (node_rejoined), the spare replaced node 1, and
#     the final weights are bit for bit those of the same run restarted as
#     processes (recovery.in_process: false). Node 0 restored from its own
#     memory, the spare from the checkpoint it fetched into memory while it
#     waited (no chunk byte from the store in either restore);
#     Node 0 kept its engine (its memory already touched); the spare built
#     one ahead at the checkpoint's world size and took it.
#  2. node 0 lost instead (failpoint kill_gang_position): node 1 keeps its
#     engine as rank 1; a chunk damaged in its memory (failpoint
#     corrupt_memory_chunk) fails its hash, that chunk comes from the
#     store, the weights are the same;
#     Then every rank's backward cut short mid-step (failpoint
#     fail_reduce_once): a round with nobody blamed, both nodes rejoin
#     with their engines (whose gradient buffers the cut left half
#     reduced), same weights.
#  3. checkpoint.replicate, with process restarts: each rank pushes its
#     shards into the memory of the spare and of the other rank; the spare
#     fetches nothing from the store while it waits; after the loss both
#     restore with no chunk byte from the store: the spare node 1's shard
#     from its own memory, the relaunched node 0 its own from the spare's
#     (ckpt_store_set_remote). A chunk damaged on its way from the buddy
#     (failpoint corrupt_replica_chunk) fails its hash and comes from the
#     store. Same weights each time.
#  4. a survivor that does not get out of its generation within
#     recovery.rejoin_timeout_s (the worker failpoint rejoin_delay_ms holds
#     it) falls back to a process restart (rejoin_fallback, node 0 launched
#     again), and the run still ends with the same weights.
#  5. a peer SIGSTOPped mid-collective (its connections stay open, as
#     over a cut link): the rejoin request aborts node 0's blocked comm from
#     its reader thread, so it rejoins in process instead of falling back.
. "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
synth_data "$TMP"

# run_one NAME IN_PROCESS [VAR=VALUE ...]: a supervised run in $TMP/NAME
run_one() {
  local name=$1 inp=$2
  shift 2
  sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
    -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
    -e 's|  steps: 300|  steps: 40|' -e "s|  store: .*|  store: \"local:$TMP/$name/store\"|" \
    -e "s|  every_steps: 25|  every_steps: 5\n  replicate: ${REPL:-false}|" -e 's|  val_every: 25|  val_every: 0|' \
    "$FT_SRC/examples/demo.yaml" >"$TMP/$name.yaml"
  cat >>"$TMP/$name.yaml" <<EOF
  in_process: $inp
  rejoin_timeout_s: 2
chaos: {kill_node_at_step: 15}
EOF
  mkdir -p "$TMP/$name"
  env FT_FAILPOINTS="min_step_ms=60${FP:+,$FP}" "$@" "$FT_BIN/supervise" --state "$TMP/$name/st" \
    --worker "$FT_BIN/worker" --spares 1 "$TMP/$name.yaml" >"$TMP/$name.out" 2>&1 ||
    {
      tail -30 "$TMP/$name.out"
      fail "$name: supervise exited $?"
    }
  "$FT_BIN/ckpt" --store "local:$TMP/$name/store" restore 40 --to "$TMP/$name.safetensors" \
    >/dev/null || fail "$name: no final checkpoint"
}

# launched NAME NODE: how many workers were launched for node NODE
launched() {
  python3 - "$TMP/$1/st/events.jsonl" "$2" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print(sum(1 for e in ev if e["event"] == "worker_launched" and e["node"] == int(sys.argv[2])))
PY
}

FP= run_one procs false
has_event "$TMP/procs/st" node_rejoined && fail "procs: a node rejoined in process with in_process false"
[ "$(launched procs 0)" = 2 ] || fail "procs: node 0 should be launched twice, got $(launched procs 0)"

# in process; a watcher checks that node 0's first worker lives on
FP= run_one inproc true &
RUN=$!
pid0=
for ((i = 0; i < 200; i++)); do
  pid0=$(python3 -c '
import json, sys
try:
    ev = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    ev = []
p = [e["pid"] for e in ev if e["event"] == "worker_launched" and e["node"] == 0]
print(p[0] if p else "")' "$TMP/inproc/st/events.jsonl" 2>/dev/null)
  [ -n "$pid0" ] && break
  sleep 0.1
done
[ -n "$pid0" ] || fail "inproc: node 0 never launched"
alive_through=0
while kill -0 $RUN 2>/dev/null; do
  if grep -q '"event": *"node_rejoined"' "$TMP/inproc/st/events.jsonl" 2>/dev/null &&
    grep -q '"event": *"recovered"' "$TMP/inproc/st/events.jsonl" 2>/dev/null; then
    kill -0 "$pid0" 2>/dev/null && alive_through=1
    break
  fi
  sleep 0.05
done
wait $RUN || fail "inproc: the run failed"
ST=$TMP/inproc/st
in_order "$ST" chaos_kill fault_detected node_rejoined gang_stopped node_quarantined spare_promoted \
  generation_started recovered run_done ||
  fail "inproc: events out of order: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" node_rejoined 'e["node"] == 0 and e["gen"] == 2' || fail "inproc: node 0 did not rejoin"
has_event "$ST" rejoin_fallback && fail "inproc: a fallback: $(grep rejoin_fallback "$ST/events.jsonl")"
has_event "$ST" recovered 'e["rejoined_in_process"] == 1' || fail "inproc: recovered: $(grep '"recovered"' "$ST/events.jsonl")"
has_event "$ST" generation_started 'e["gen"] == 2 and e["nodes"] == [0, 2]' ||
  fail "inproc: generation 2 should be nodes [0, 2]"
[ "$(launched inproc 0)" = 1 ] || fail "inproc: node 0 was launched $(launched inproc 0) times"
[ $alive_through = 1 ] || fail "inproc: node 0's first worker (pid $pid0) did not live through the recovery"
grep -q "the engine of the last generation kept" "$ST/logs/node0.slot0.log" ||
  fail "inproc: node 0 did not keep its engine: $(tail -5 "$ST/logs/node0.slot0.log")"
grep -q "engine for world 2 ready ahead" "$ST/logs/node2.slot0.log" &&
  grep -q "the engine built ahead taken" "$ST/logs/node2.slot0.log" ||
  fail "inproc: the spare did not build its engine ahead: $(grep -i engine "$ST/logs/node2.slot0.log")"
grep -q "left generation 1 in .* ms, in process" "$ST/logs/node0.slot0.log" ||
  fail "inproc: node 0's log: $(tail -5 "$ST/logs/node0.slot0.log")"
cmp -s "$TMP/procs.safetensors" "$TMP/inproc.safetensors" ||
  fail "inproc: the final weights differ from the process restart's"
grep -Eq "restored step [0-9]+ in [0-9]+ ms: [0-9.]*[1-9][0-9.]* MiB from memory, 0.00 MiB from buddies, 0.00 MiB from the store; 0 chunk" \
  "$ST/logs/node0.slot0.log" || fail "inproc: node 0 did not restore from its memory alone: $(grep restored "$ST/logs/node0.slot0.log")"
R=$(sed -n 's/.*restored step \([0-9]*\) .*/\1/p' "$ST/logs/node0.slot0.log")
grep -q "checkpoint $R in memory ([0-9.]* MiB fetched" "$ST/logs/node2.slot0.log" ||
  fail "inproc: the spare did not fetch checkpoint $R while waiting: $(grep 'in memory' "$ST/logs/node2.slot0.log")"
grep -Eq "restored step $R in [0-9]+ ms: [0-9.]*[1-9][0-9.]* MiB from memory, 0.00 MiB from buddies, 0.00 MiB from the store" \
  "$ST/logs/node2.slot0.log" || fail "inproc: the spare should restore from its memory: $(grep restored "$ST/logs/node2.slot0.log")"
ms=$(python3 -c '
import json, sys
print([json.loads(l) for l in open(sys.argv[1]) if "\"recovered\"" in l][0]["detect_to_first_step_ms"])' "$ST/events.jsonl")
pass "in process: node 0 kept pid $pid0, rejoined generation 2 with the spare, both restored step $R from memory, first step ${ms} ms after detection; weights equal to the process restart's"

# node 0 lost this time (failpoint kill_gang_position=0): node 1 survives as
# rank 1 and keeps its engine; a chunk damaged in its memory is detected by
# its hash and read from the store
FP=corrupt_memory_chunk=1,kill_gang_position=0 run_one corrupt true
ST=$TMP/corrupt/st
has_event "$ST" chaos_kill 'e["node"] == 0' || fail "corrupt: node 0 should be the one killed"
has_event "$ST" node_rejoined 'e["node"] == 1' || fail "corrupt: node 1 did not rejoin"
has_event "$ST" generation_started 'e["gen"] == 2 and e["nodes"] == [2, 1]' ||
  fail "corrupt: generation 2 should be nodes [2, 1]: $(grep generation_started "$ST/events.jsonl")"
grep -q "the engine of the last generation kept" "$ST/logs/node1.slot0.log" ||
  fail "corrupt: node 1 did not keep its engine"
grep -Eq "MiB from memory, 0.00 MiB from buddies, [0-9.]*[1-9][0-9.]* MiB from the store; 1 chunk\(s\) in memory and 0 from buddies failed their hash" \
  "$ST/logs/node1.slot0.log" || fail "corrupt: node 1's restore: $(grep restored "$ST/logs/node1.slot0.log")"
cmp -s "$TMP/procs.safetensors" "$TMP/corrupt.safetensors" ||
  fail "corrupt: the final weights differ from the process restart's"
pass "node 0 lost: node 1 kept its engine as rank 1; a chunk damaged in its memory fails its hash and is read from the store; same weights"

# every rank's backward cut short (failpoint fail_reduce_once: the 38th
# gradient reduction, mid-step, fails in every worker): nobody died, so a
# round with nobody blamed (collective_failure); both nodes rejoin in
# process and keep their engines, whose gradient buffers the cut left
# half-reduced: the weights must still be the process restart's
FP=fail_reduce_once=38 run_one cut true
ST=$TMP/cut/st
has_event "$ST" fault_detected 'e["kind"] == "collective_failure" and not e["blamed"]' ||
  fail "cut: no collective_failure round: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" node_rejoined 'e["node"] == 0' && has_event "$ST" node_rejoined 'e["node"] == 1' ||
  fail "cut: both nodes should rejoin in process"
grep -q "the engine of the last generation kept" "$ST/logs/node1.slot0.log" ||
  fail "cut: node 1 did not keep its engine"
cmp -s "$TMP/procs.safetensors" "$TMP/cut.safetensors" ||
  fail "cut: the final weights differ from the process restart's (a kept engine's stale gradients?)"
pass "every backward cut short mid-step: both nodes rejoin in process with their engines; same weights"

# buddies, with process restarts: node 0 is relaunched and takes its shard
# from the memory of the spare (now rank 1), which node 0 pushed it to; the
# spare takes node 1's from its own memory, where node 1 pushed it
REPL=true FP= run_one buddy false
ST=$TMP/buddy/st
has_event "$ST" generation_started 'e["gen"] == 2 and e["nodes"] == [0, 2]' ||
  fail "buddy: generation 2 should be nodes [0, 2]"
[ "$(launched buddy 0)" = 2 ] || fail "buddy: node 0 should be relaunched"
grep -q "replica server on " "$ST/logs/node2.slot0.log" || fail "buddy: the spare serves no replicas"
grep -q "in the memory of " "$ST/logs/node1.slot0.log" ||
  fail "buddy: node 1 pushed nothing: $(grep -i replica "$ST/logs/node1.slot0.log")"
grep -q "MiB fetched" "$ST/logs/node2.slot0.log" && fail "buddy: the spare fetched from the store"
R=$(sed -n 's/.*restored step \([0-9]*\) .*/\1/p' "$ST/logs/node2.slot0.log")
grep -Eq "restored step $R in [0-9]+ ms: [0-9.]*[1-9][0-9.]* MiB from memory, 0.00 MiB from buddies, 0.00 MiB from the store; 0 chunk" \
  "$ST/logs/node2.slot0.log" || fail "buddy: the spare should restore from pushed memory alone: $(grep restored "$ST/logs/node2.slot0.log")"
grep -Eq "restored step $R in [0-9]+ ms: 0.00 MiB from memory, [0-9.]*[1-9][0-9.]* MiB from buddies, 0.00 MiB from the store; 0 chunk" \
  "$ST/logs/node0.slot0.log" || fail "buddy: node 0 should restore from its buddy alone: $(grep restored "$ST/logs/node0.slot0.log")"
cmp -s "$TMP/procs.safetensors" "$TMP/buddy.safetensors" ||
  fail "buddy: the final weights differ from the process restart's"
pass "replicas: step $R restored with no byte from the store: node 1's by the spare from its own memory, node 0's (relaunched) from the spare's; same weights"

# a chunk damaged on its way from the buddy: its hash fails, the store has it
REPL=true FP=corrupt_replica_chunk=1 run_one buddybad false
ST=$TMP/buddybad/st
grep -Eq "MiB from memory, [0-9.]*[1-9][0-9.]* MiB from buddies, [0-9.]*[1-9][0-9.]* MiB from the store; 0 chunk\(s\) in memory and 1 from buddies failed their hash" \
  "$ST/logs/node0.slot0.log" || fail "buddybad: node 0's restore: $(grep restored "$ST/logs/node0.slot0.log")"
cmp -s "$TMP/procs.safetensors" "$TMP/buddybad.safetensors" ||
  fail "buddybad: the final weights differ from the process restart's"
pass "a chunk damaged on its way from a buddy fails its hash and is read from the store; same weights"

# the fallback: node 0 held in its old generation past rejoin_timeout_s
FP=rejoin_delay_ms=6000 run_one slow true
ST=$TMP/slow/st
has_event "$ST" rejoin_fallback 'e["node"] == 0 and "rejoin_timeout_s" in e["reason"]' ||
  fail "slow: no rejoin_fallback for node 0: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" node_rejoined && fail "slow: node 0 rejoined although held past the deadline"
[ "$(launched slow 0)" = 2 ] || fail "slow: node 0 should be relaunched, launched $(launched slow 0) times"
has_event "$ST" run_done || fail "slow: the run did not finish"
cmp -s "$TMP/procs.safetensors" "$TMP/slow.safetensors" ||
  fail "slow: the final weights differ from the process restart's"
pass "a survivor held past recovery.rejoin_timeout_s is restarted as a process; same weights"

# a peer that neither answers nor closes its connections (SIGSTOPped: a cut
# link looks the same to Gloo): node 0's collective blocks on it until
# watchdog.collective_timeout_s (30 s), far past rejoin_timeout_s (2 s).
# The supervisor finds node 1 silent (heartbeat_timeout_s 3) and asks node 0
# to rejoin; its reader thread aborts the comm, so node 0 leaves at once and
# rejoins in process instead of falling back to a process restart
name=stopped
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
  -e 's|  steps: 300|  steps: 40|' -e "s|  store: .*|  store: \"local:$TMP/$name/store\"|" \
  -e 's|  every_steps: 25|  every_steps: 5|' -e 's|  val_every: 25|  val_every: 0|' \
  -e 's|  heartbeat_timeout_s: 10|  heartbeat_timeout_s: 3|' \
  "$FT_SRC/examples/demo.yaml" >"$TMP/$name.yaml"
printf '  in_process: true\n  rejoin_timeout_s: 2\n' >>"$TMP/$name.yaml"
mkdir -p "$TMP/$name"
ST=$TMP/$name/st
# (steps of 150 ms: the SIGSTOP lands mid-run even on a loaded machine)
FT_FAILPOINTS=min_step_ms=150 "$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" --spares 1 \
  "$TMP/$name.yaml" >"$ST.out" 2>&1 &
RUN=$!
wait_step "$ST" 15
pid1=$(python3 -c '
import json, sys
print([e["pid"] for e in map(json.loads, open(sys.argv[1]))
       if e["event"] == "worker_launched" and e["node"] == 1][-1])' "$ST/events.jsonl")
kill -STOP "$pid1" || fail "stopped: node 1's worker $pid1 is gone: $(events "$ST" | tr '\n' ' ')"
wait $RUN || fail "stopped: the run failed: $(tail -5 "$ST.out")"
has_event "$ST" fault_detected 'e["kind"] == "hang" and e["node"] == 1' ||
  fail "stopped: node 1's silence not found: $(events "$ST" | tr '\n' ' ')"
has_event "$ST" node_rejoined 'e["node"] == 0' ||
  fail "stopped: node 0 did not rejoin in process: $(grep -e rejoin -e fault_detected "$ST/events.jsonl")"
has_event "$ST" rejoin_fallback && fail "stopped: a fallback: $(grep rejoin_fallback "$ST/events.jsonl")"
[ "$(launched stopped 0)" = 1 ] || fail "stopped: node 0 was launched $(launched stopped 0) times"
"$FT_BIN/ckpt" --store "local:$TMP/$name/store" restore 40 --to "$TMP/$name.safetensors" >/dev/null ||
  fail "stopped: no final checkpoint"
cmp -s "$TMP/procs.safetensors" "$TMP/$name.safetensors" ||
  fail "stopped: the final weights differ from the process restart's"
pass "a peer stopped mid-collective (its connections open): node 0's comm aborted by the rejoin request, it rejoined in process; same weights"
