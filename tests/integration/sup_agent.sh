#!/usr/bin/env bash
# One agent per node (nodes.agent: true; worker/agent.c): supervise starts
# one ftagent per node, which starts the node's workers (the fake worker,
# then the real one) on socket pairs and holds the node's one connection.
#  1. a fault-free run of 2 nodes x 2 workers + a spare: done, every worker
#     of a node started by its agent (one launched process per node), each
#     agent stopped by the supervisor at the end;
#  2. a worker SIGKILLs itself: its agent reports the true wait status
#     (process_exit "signal 9", counted against its node), and the node is
#     restarted in place through its agent: no process is launched again;
#  3. a worker hangs (sends nothing, its agent still beats): the hang is
#     named from its beat's age in the agent's HOSTBEAT, its node blamed;
#  4. an agent is SIGKILLed: the host is lost (node_lost, quarantined at
#     once), its workers die with it (PR_SET_PDEATHSIG), a spare replaces
#     it, and the run goes on to the end;
#  5. the real worker trains through agents (Gloo bound to the address the
#     agent hands it);
#  6. its progress travels in the agents' HOSTBEATs: every training thread
#     stops after step S (failpoint hang_at_step) while the workers beat
#     on, and `supervise status --json` shows each rank's phase, step and
#     a progress age that grows while its heartbeat stays fresh;
#  7. one launch for the pool (nodes.launch_once, a command starting every
#     host's agent), its agents' HELLOs before the launch queue reaches
#     their nodes (failpoint launch_slice_ms: none is launched again), and
#     the run file's chaos kill: the killed node's agent alone dies (told
#     by the supervisor, SIGKILL to its workers and itself), not the pool's
#     launch process: one node lost, a spare in its place, the run goes on
#     to the end;
#  8. the status port under a descriptor limit the gang's workers would
#     pass four times over (48 workers behind 3 agents, ulimit -n 400):
#     only the agents' connections count, and `supervise status` finds the
#     run running (it was shed as "not running" before); with
#     status_workers_max=16 it is a large gang's summary: no workers per
#     node, the 8 stalest ranks, which `supervise status` prints.
#  9. checkpoints through agents: each host's agent reports one reference
#     (a leaf naming its workers' shard objects) and every commit holds one
#     per host; verify and a rank's restore read through them; with
#     agent_host_ref_fail=1 node 1's reports go on rank by rank and commit;
# 10. a host's reference from a worker (FAKE_FORGE_HOST_STEP) is refused:
#     that checkpoint fails, nobody is blamed, the next one commits.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
export FT_AGENT=$FT_BIN/ftagent
[ -x "$FT_AGENT" ] || fail "ftagent not built"
AG="--set nodes.agent=true --set nodes.workers_per_node=2 --set train.micro_batch=4"

# launched STATE NODE: the pids worker_launched gave for NODE's slots (sorted, unique)
launched() {
  python3 -c '
import json, sys
p = {json.loads(l)["pid"] for l in open(sys.argv[1]) if json.loads(l)["event"] == "worker_launched" and json.loads(l)["node"] == int(sys.argv[2])}
print(" ".join(str(x) for x in sorted(p)))' "$1/events.jsonl" "$2"
}

# 1. fault-free
ST=$TMP/ok
# shellcheck disable=SC2086
sup_run "$ST" --spares 1 $AG || { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" run_done 'e["steps"] == 30 and e["restarts"] == 0' || fail "run_done fields"
! has_event "$ST" fault_detected || fail "a fault in a fault-free run"
for n in 0 1 2; do
  [ "$(launched "$ST" $n | wc -w)" = 1 ] || fail "node $n: more than one process launched: $(launched "$ST" $n)"
  grep -q "ftagent: node $n: connected to .* starting 2 workers" "$ST/logs/node$n.log" ||
    fail "node $n: no agent: $(head -3 "$ST/logs/node$n.log")"
  [ "$(grep -c "ftagent: node $n slot .: worker [0-9]* started" "$ST/logs/node$n.log")" = 2 ] ||
    fail "node $n: its agent did not start its 2 workers"
  grep -q "ftagent: node $n: STOP (done" "$ST/logs/node$n.log" || fail "node $n: its agent was not stopped"
done
pass "a run through agents: one process per node, every worker started by its agent"

# 2. a worker killed: the agent's report, a restart through the agent
ST=$TMP/die
# shellcheck disable=SC2086
FAKE_DIE_NODE=1 FAKE_DIE_STEP=12 sup_run "$ST" --spares 1 $AG --set recovery.node_failures_to_quarantine=3 ||
  { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" fault_detected 'e["gen"] == 1 and e["kind"] == "process_exit" and e["node"] == 1 and e["detail"] == "signal 9" and e["blamed"]' ||
  fail "the worker's death: $(grep fault_detected "$ST/events.jsonl" | head -1)"
has_event "$ST" node_restarted 'e["node"] == 1' || fail "node 1 not restarted in place"
has_event "$ST" run_done || fail "the run did not finish"
[ "$(launched "$ST" 1 | wc -w)" = 1 ] ||
  fail "node 1 was launched again instead of restarted by its agent: $(launched "$ST" 1)"
[ "$(grep -c "ftagent: node 1 slot .: worker [0-9]* started" "$ST/logs/node1.log")" -gt 2 ] ||
  fail "node 1's agent did not start its workers again"
pass "a worker's death: its true status from its agent, the node restarted through the agent"

# 3. a hung worker behind a live agent
ST=$TMP/hang
# shellcheck disable=SC2086
FAKE_HANG_NODE=1 FAKE_HANG_STEP=12 sup_run "$ST" --spares 1 $AG ||
  { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" fault_detected 'e["kind"] == "hang" and e["node"] == 1' ||
  fail "the hang: $(grep fault_detected "$ST/events.jsonl" | head -1)"
has_event "$ST" run_done || fail "the run did not finish"
pass "a hung worker named through its agent's HOSTBEAT"

# 4. an agent killed mid-run
ST=$TMP/kill
# shellcheck disable=SC2086
FAKE_STEP_MS=100 sup_run "$ST" --spares 1 $AG &
sup=$!
for _ in $(seq 200); do
  has_event "$ST" checkpoint_committed 2>/dev/null && break
  sleep 0.05
done
apid=$(launched "$ST" 1)
wpids=$(sed -n 's/^ftagent: node 1 slot .: worker \([0-9]*\) started$/\1/p' "$ST/logs/node1.log")
[ -n "$apid" ] && [ -n "$wpids" ] || fail "no agent or workers on node 1"
kill -KILL "$apid"
wait $sup || { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" fault_detected "e['kind'] == 'node_lost' and e['node'] == 1 and e['quarantine']" ||
  fail "the agent's death: $(grep fault_detected "$ST/events.jsonl" | head -1)"
has_event "$ST" spare_promoted 'e["spare_node"] == 2 and e["replaces"] == 1' || fail "no spare for node 1"
has_event "$ST" run_done || fail "the run did not finish"
for p in $wpids; do
  ! kill -0 "$p" 2>/dev/null || fail "worker $p of the killed agent still runs"
done
pass "an agent's death: the host lost, its workers gone with it, a spare in its place"

# 5. the real worker through agents
synth_data "$TMP"
ST=$TMP/real
"$FT_BIN/supervise" --state "$ST" --steps 6 --set checkpoint.every_steps=3 \
  --set nodes.agent=true --set nodes.workers_per_node=2 --set train.micro_batch=4 \
  --set "data.train=$TMP/synth_train_*.bin" --set "data.val=" \
  "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 || { rc=$?; tail -20 "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" run_done 'e["steps"] == 6' || fail "the real run did not finish"
has_event "$ST" checkpoint_committed 'e["step"] == 6 and e["world"] == 4' || fail "no checkpoint of 4 ranks"
grep -q "gloo on 127.0.0.1 (route to the supervisor)" "$ST/logs/node0.log" ||
  fail "the worker did not bind Gloo to its agent's address: $(grep -h gloo "$ST/logs/node0.log")"
pass "the real worker trains through agents"

# 6. progress through agents: the training threads stop, the beats go on
ST=$TMP/prog
S=8
FT_FAILPOINTS=hang_at_step=$S "$FT_BIN/supervise" --state "$ST" --steps 40 --spares 0 \
  --set nodes.agent=true --set nodes.workers_per_node=2 --set train.micro_batch=4 \
  --set watchdog.heartbeat_timeout_s=4 --set "data.train=$TMP/synth_train_*.bin" --set "data.val=" \
  "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 &
sup=$!
for ((i = 0; i < 900; i++)); do
  [ -s "$ST/http.addr" ] && "$FT_BIN/supervise" status "$ST" --json 2>/dev/null |
    python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["step"] >= int(sys.argv[1]) else 1)' \
      "$S" && break
  kill -0 $sup 2>/dev/null || fail "supervise exited: $(tail -20 "$ST.out")"
  sleep 0.1
done
sleep 2
"$FT_BIN/supervise" status "$ST" --json >"$TMP/s1.json" || fail "supervise status --json (1)"
sleep 3
"$FT_BIN/supervise" status "$ST" --json >"$TMP/s2.json" || fail "supervise status --json (2)"
kill -TERM $sup
wait $sup || true
python3 - "$TMP/s1.json" "$TMP/s2.json" "$S" <<'PY' || fail "progress through agents (above)"
import json, sys
s1, s2 = (json.load(open(p)) for p in sys.argv[1:3])
S = int(sys.argv[3])
def ranks(s):
    return {w["rank"]: w for n in s["nodes"] for w in n.get("workers", []) if w["rank"] >= 0}
r1, r2 = ranks(s1), ranks(s2)
assert sorted(r2) == [0, 1, 2, 3], r2
for r in range(4):
    a, b = r1[r], r2[r]
    assert b["phase"] == "optimizer" and b["step"] == S, b
    assert b["coll_seq"] > 0 and b["coll_seq"] == a["coll_seq"], (a, b)
    assert b["progress_age_s"] >= a["progress_age_s"] + 2.5, (a, b)
    assert b["heartbeat_age_s"] <= 2.5, b
PY
pass "progress (phase, step, collectives, its age) travels in the agents' HOSTBEATs"

# 7. launched once for the pool; the chaos kill takes one host, not the pool
ST=$TMP/once
# (the launcher's /bin/sh runs it; {argv} comes shell-quoted)
pool='for i in $(seq 0 $(({nodes} - 1))); do FT_NODE=$i {argv} & done; wait'
# shellcheck disable=SC2086
# launch_slice_ms: the launch queue reaches each node 400 ms after the last,
# so every agent's HELLO comes before its node's turn (the loop behind its
# queue, as at 16,384 hosts); a node started by the pool's launch is not
# launched again then
FT_FAILPOINTS=launch_slice_ms=400 FAKE_STEP_MS=50 sup_run "$ST" --spares 1 $AG --set nodes.launch_once=true \
  --set nodes.launcher=command --set "nodes.command=$pool" --set chaos.kill_node_at_step=12 ||
  { rc=$?; tail -20 "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" chaos_kill 'e["node"] == 1' || fail "no chaos kill of node 1"
has_event "$ST" fault_detected "e['kind'] == 'node_lost' and e['node'] == 1" ||
  fail "the chaos kill: $(grep fault_detected "$ST/events.jsonl" | head -1)"
! has_event "$ST" fault_detected "e['node'] != 1" || fail "a node other than 1 blamed: $(grep fault_detected "$ST/events.jsonl")"
has_event "$ST" spare_promoted 'e["spare_node"] == 2 and e["replaces"] == 1' || fail "no spare for node 1"
has_event "$ST" run_done 'e["steps"] == 30' || fail "the run did not finish: $(tail -5 "$ST.out")"
grep -q "ftagent: node 1: signal 9 to the host from the supervisor" "$ST/logs/agents.log" ||
  fail "node 1's agent was not told: $(grep 'node 1' "$ST/logs/agents.log" | tail -3)"
pass "launched once for the pool, the chaos kill takes one host's agent, not the pool"

# 8. the status port when the workers outnumber the descriptors it keeps
ST=$TMP/fds
(
  ulimit -n 400
  # shellcheck disable=SC2086
  FT_FAILPOINTS=status_workers_max=16 FAKE_STEP_MS=100 sup_run "$ST" --spares 1 $AG --set nodes.workers_per_node=16 --set train.micro_batch=1 --set train.global_batch=32
) &
sup=$!
for _ in $(seq 300); do
  has_event "$ST" checkpoint_committed 2>/dev/null && break
  sleep 0.05
done
"$FT_BIN/supervise" status "$ST" --json >"$TMP/fds.json" ||
  fail "supervise status: exit $? ($(cat "$TMP/fds.json"))"
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["running"] is True and len(s["nodes"]) == 3, s' "$TMP/fds.json" ||
  fail "status under ulimit -n 400: $(head -c 300 "$TMP/fds.json")"
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert all("workers" not in n for n in s["nodes"]), "workers past status_workers_max"
assert len(s["stalest"]) == 8, s["stalest"]
ages = [w["progress_age_s"] for w in s["stalest"]]
assert ages == sorted(ages, reverse=True) and all(w["rank"] >= 0 for w in s["stalest"]), s["stalest"]' "$TMP/fds.json" ||
  fail "the large gang's status summary: $(head -c 400 "$TMP/fds.json")"
"$FT_BIN/supervise" status "$ST" >"$TMP/fds.txt"
grep -q "progress (oldest first):" "$TMP/fds.txt" && [ "$(grep -c "^    rank " "$TMP/fds.txt")" = 8 ] ||
  fail "supervise status from the summary: $(cat "$TMP/fds.txt")"
wait $sup || { rc=$?; tail -20 "$ST.out"; fail "supervise exited $rc"; }
pass "the status port answers when only the agents' connections fit the descriptors"
pass "past status_workers_max ranks /status sums up: the 8 stalest ranks, no workers per node"

# 9. checkpoints through agents: each host's agent puts one leaf naming its
# workers' shard objects and reports it (SHARD_SAVED of the host), the
# supervisor commits one reference per host; what a user reads back is the
# same. A failed leaf (failpoint) sends that host's reports on rank by rank.
# (Six commits, steps 5..30; retention keeps the last five.)
ST=$TMP/leaf
# shellcheck disable=SC2086
sup_run "$ST" --spares 1 $AG || { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
python3 - "$ST/events.jsonl" <<'PY' || fail "the commits were not made from the hosts' references"
import json, sys
c = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "checkpoint_committed"]
assert len(c) == 6 and all(e["world"] == 4 and e["host_refs"] == 2 for e in c), c
PY
! grep -h "rank by rank" "$ST"/logs/node*.log || fail "an agent sent its host's reports rank by rank"
"$FT_BIN/ckpt" --store "local:$ST/store" verify >"$TMP/leaf.verify" 2>&1 ||
  fail "ckpt verify of host leaves: $(tail -5 "$TMP/leaf.verify")"
grep -q "5 checkpoints verified, no problems" "$TMP/leaf.verify" || fail "verify: $(tail -3 "$TMP/leaf.verify")"
"$FT_BIN/ckpt" --store "local:$ST/store" restore 30 --world 4 --rank 3 --to "$TMP/restored/" >"$TMP/leaf.restore" 2>&1 ||
  fail "ckpt restore of rank 3 through its host's leaf: $(tail -3 "$TMP/leaf.restore")"
python3 - "$TMP/restored/rank3-of-4.safetensors" <<'PY' || fail "rank 3's restored shard is not what it saved"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
(name, t), = [(k, v) for k, v in h.items() if k != "__metadata__"]
lo, hi = t["data_offsets"]
got = struct.unpack("<16f", b[8 + n + lo:8 + n + hi])
want = [struct.unpack("<f", struct.pack("<f", 30 + (48 + i) * 0.001))[0] for i in range(16)]
assert list(got) == want, (name, got[:3], want[:3])
PY
pass "checkpoints through agents: one reference per host committed; verify and a rank's restore read through its leaf"
ST=$TMP/leaffail
# shellcheck disable=SC2086
FT_FAILPOINTS=agent_host_ref_fail=1 sup_run "$ST" --spares 1 $AG || { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" checkpoint_committed 'e["step"] == 30 and e["host_refs"] == 1' ||
  fail "with node 1's leaf failing: $(grep checkpoint_committed "$ST/events.jsonl" | tail -1)"
grep -q "ftagent: node 1: the checkpoint of step 30 goes to the supervisor rank by rank: failpoint" "$ST/logs/node1.log" ||
  fail "node 1's agent did not say its reports went on rank by rank"
! has_event "$ST" checkpoint_failed || fail "a checkpoint failed: $(grep checkpoint_failed "$ST/events.jsonl" | head -1)"
"$FT_BIN/ckpt" --store "local:$ST/store" verify >/dev/null 2>&1 || fail "ckpt verify of mixed references"
pass "an agent that cannot make its host's leaf: its ranks' references committed one by one"

# 10. a worker is not an agent: a host's reference from it is refused (the
# checkpoint fails, training goes on, nobody is blamed)
ST=$TMP/forge
FAKE_FORGE_HOST_STEP=10 sup_run "$ST" --spares 1 --set nodes.workers_per_node=2 --set train.micro_batch=4 ||
  { rc=$?; cat "$ST.out"; fail "supervise exited $rc"; }
has_event "$ST" checkpoint_failed 'e["step"] == 10 and "only its agent may" in e["reason"]' ||
  fail "a worker's host reference: $(grep checkpoint_failed "$ST/events.jsonl" | head -1)"
! has_event "$ST" checkpoint_committed 'e["step"] == 10' || fail "step 10 committed from a worker's host reference"
has_event "$ST" checkpoint_committed 'e["step"] == 15' || fail "no commit after the refused one"
! has_event "$ST" fault_detected || fail "a refused reference cost a node"
pass "a worker's host reference is refused, the run trains and checkpoints on"
