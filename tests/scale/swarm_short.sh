#!/bin/bash
# swarm_short: one supervise against 1,024 simulated ranks (ftswarm, 128
# hosts of 8, real TCP and the real protocol) with a silent rank and a
# dropped host: each must be detected (the right node blamed), the gang
# re-formed with a spare and trained on, and every reply of the supervisor
# conformant. No timing is asserted; the figures are printed.
#   swarm_short.sh [inprocess]
# inprocess (test swarm_inprocess): recovery.in_process, so every gang node
# but the lost one must rejoin the next generation in process (STOP rejoin,
# a heartbeat of the new generation, its ASSIGN) and no process is started
# after the first generation.
# agents (test swarm_agents): one agent per host (nodes.agent; the swarm
# plays each host's agent: one connection, RELAYed frames, HOSTBEATs) and
# recovery.in_process, with a silent host as well: the same verdicts, but a
# dropped host is its agent's connection closed or its agent killed
# (node_lost, whichever the supervisor sees first), the supervisor holds one
# connection per host, and checkpoints commit from one reference per host.
. "$(dirname "$0")/../integration/lib.sh"
: "${FT_BUILD:=$(dirname "$FT_BIN")}"
[ -x "$FT_BUILD/tests/ftswarm" ] || fail "ftswarm not built in $FT_BUILD/tests"
if [ "$(ulimit -Hn)" -lt 2600 ]; then
  echo "SKIP: 1,024 ranks need 2,600 open files (ulimit -Hn is $(ulimit -Hn))"
  exit 77
fi
mode=${1:-restart}
sets= agents=0 faults=silent:1,drop:1
[ "$mode" != restart ] && sets="--set recovery.in_process=true"
if [ "$mode" = agents ]; then
  agents=1 faults=silent:1,host:1,drop:1
  # the swarm plays the agents: the program supervise would start must
  # exist, and ftswarm_attach stands in for it ({argv} starts with it)
  export FT_AGENT=${FT_AGENT:-$FT_BIN/ftagent}
fi
rc=0
SWARM_AGENTS=$agents SWARM_SETS=$sets SWARM_SPARES=4 SWARM_HB=2 "$(dirname "$0")/swarm_run.sh" \
  "$TMP" 1024 --steady 2 --commits 1 --faults $faults --step-ms 250 --ckpt-every 4 --timeout 240 ||
  rc=$?
cat "$TMP/swarm.out"
[ $rc = 0 ] || { tail -30 "$TMP/sup.out"; fail "the swarm did not pass (exit $rc)"; }
ev=$TMP/state/events.jsonl
python3 - "$ev" "$TMP/swarm.out" "$mode" "$TMP/figures.json" <<'PY' || fail "the supervisor's verdicts are not the swarm's faults"
import json, re, sys
events = [json.loads(l) for l in open(sys.argv[1])]
out = open(sys.argv[2]).read()
fig = json.loads(re.sub(r"\bnan\b", "NaN", open(sys.argv[4]).read()))
# the faults the swarm injected, in order: kind and node
mode = sys.argv[3]
faults = re.findall(r"fault \d+: (\w+), node (\d+) ", out)
kinds = ["silent", "host", "drop"] if mode == "agents" else ["silent", "drop"]
assert [k for k, _ in faults] == kinds, faults
det = [e for e in events if e["event"] == "fault_detected"]
assert len(det) == len(kinds), [(e.get("kind"), e.get("node")) for e in det]
for (kind, node), e in zip(faults, det):
    assert e["node"] == int(node), (kind, node, e)
    # a dropped host: its process exit, or under agents its agent's
    # connection closed (the host lost, quarantined at once)
    want = {"silent": "hang", "host": "hang",
            "drop": "node_lost" if mode == "agents" else "process_exit"}[kind]
    assert e["kind"] == want, (kind, e)
    if mode == "agents" and kind == "drop":
        # the host's process is SIGKILLed and its connection reset at once:
        # whichever the supervisor sees first (the closed connection or the
        # agent's exit) names the host
        assert ("agent's connection closed" in e["detail"] or
                "was killed (signal 9)" in e["detail"]), e
        assert e["blamed"] and e["quarantine"], e
# every fault recovered: the gang trains again, at full size, each time
rec = [e for e in events if e["event"] == "recovered"]
gens = [e for e in events if e["event"] == "generation_started"]
assert len(rec) >= len(kinds) and all(g["world"] == 1024 for g in gens), (rec, gens)
# the silent rank's node is out (quarantined), a spare took its place
q = [e["node"] for e in events if e["event"] == "node_quarantined"]
assert int(faults[0][1]) in q, q
assert any(e["event"] == "spare_promoted" for e in events)
# checkpoints of 1,024 shard manifests were committed
assert any(e["event"] == "checkpoint_committed" and e["world"] == 1024 for e in events)
if mode == "agents":
    # ... from the hosts' references: one per host (the swarm's agents make
    # them as worker/agent_ckpt.c does), the commit reading through them
    assert any(e["event"] == "checkpoint_committed" and e["host_refs"] == 128 for e in events), \
        [e.get("host_refs") for e in events if e["event"] == "checkpoint_committed"]
    # what the supervisor says to every worker of a host alike went once
    # to its agent (host frames, ft_wire.h): each generation's ASSIGN once
    # per gang host, each fault's STOP rejoin once per surviving host, and
    # none of the three in a RELAY
    hf, rf = fig["host_frames"], fig["relayed_frames"]
    assert rf == {"assign": 0, "stop_rejoin": 0, "committed": 0}, rf
    assert hf["assign"] == 128 * len(gens), (hf, len(gens))
    assert hf["stop_rejoin"] >= 127 * len(kinds) and hf["committed"] >= 128, hf
    print(f"swarm_short: host frames {hf}, none relayed")
if mode != "restart":
    # every gang node but the lost one rejoined, each time; only a node that
    # faulted is started again (the dropped one, whose process died)
    first = next(i for i, e in enumerate(events) if e["event"] == "generation_started")
    late = {e["node"] for e in events[first:] if e["event"] == "worker_launched"}
    assert late <= {int(n) for _, n in faults}, f"nodes started again after the first generation: {sorted(late)[:10]}"
    assert [e["rejoined_in_process"] for e in rec[:len(kinds)]] == [127] * len(kinds), rec
    assert not any(e["event"] == "rejoin_fallback" for e in events)
    print("swarm_short: 127 nodes rejoined in process at each fault; only the faulted nodes restarted")
print("swarm_short: both faults named the right node; the gang re-formed at 1,024 ranks")
PY
echo "swarm_short: passed"
