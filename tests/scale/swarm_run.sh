#!/bin/bash
# One supervise against ftswarm: N simulated ranks, 8 a host (or $SWARM_G).
#   swarm_run.sh DIR N [ftswarm serve options...]
# Environment: FT_BIN (supervise), FT_BUILD (tests/ftswarm), FT_SRC;
# SWARM_SPARES (default 2), SWARM_HB (watchdog.heartbeat_timeout_s, default 4),
# SWARM_SETS (more --set words for supervise), SWARM_AGENTS=1 (one agent
# per host: supervise's nodes.agent, and the swarm plays each host's agent),
# SWARM_ONCE=1 (with agents: nodes.launch_once, one attach process for the
# whole pool, as one srun over every host).
# Leaves DIR/state (events.jsonl, store), DIR/swarm.out, DIR/sup.out and
# DIR/figures.json. The demo run file's chaos kill is off: the swarm's own
# faults are the ones measured. Exits with the swarm's code (0: every fault
# detected and recovered, no protocol error).
set -u
dir=$1 n=$2
shift 2
: "${FT_BUILD:=$(dirname "$FT_BIN")}"
G=${SWARM_G:-8}
nodes=$(((n + G - 1) / G))
spares=${SWARM_SPARES:-2}
hb=${SWARM_HB:-4}
mkdir -p "$dir"
rm -rf "$dir/state" "$dir/swarm.sock" "$dir/figures.json"
sock=$dir/swarm.sock
# every rank is a descriptor in both processes
ulimit -n "$(ulimit -Hn)"
"$FT_BUILD/tests/ftswarm" serve --socket "$sock" --world $((nodes * G)) \
  --t0-file "$dir/t0" --sup-pid-file "$dir/sup.pid" --grow "$dir/state/events.jsonl" --grow "$dir/state/store/catalog" \
  --out "$dir/figures.json" --agents "${SWARM_AGENTS:-0}" "$@" >"$dir/swarm.out" 2>&1 &
swarm=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
date +%s.%N >"$dir/t0"
pool=
[ "${SWARM_ONCE:-0}" = 1 ] && pool='--pool {nodes} '
"$FT_BIN/supervise" --state "$dir/state" --spares "$spares" --steps 1000000000 \
  --set nodes.count=$nodes --set nodes.workers_per_node=$G \
  --set nodes.launcher=command \
  --set "nodes.command=$FT_BUILD/tests/ftswarm_attach $sock {slots} $pool{argv}" \
  --set nodes.launch_once="$([ "${SWARM_ONCE:-0}" = 1 ] && echo true || echo false)" \
  --set train.micro_batch=1 --set train.global_batch=$((nodes * G)) \
  --set checkpoint.every_steps=1000000 --set checkpoint.keep_last=3 \
  --set watchdog.heartbeat_timeout_s="$hb" --set watchdog.start_timeout_s=120 \
  --set recovery.max_restarts=1000 --set chaos.kill_node_at_step=0 \
  --set nodes.agent="$([ "${SWARM_AGENTS:-0}" = 1 ] && echo true || echo false)" \
  ${SWARM_SETS:-} "$FT_SRC/examples/demo.yaml" >"$dir/sup.out" 2>&1 &
sup=$!
echo $sup >"$dir/sup.pid"
# the swarm writes its figures, then serves on until told: supervise stops first
while kill -0 $swarm 2>/dev/null && [ ! -s "$dir/figures.json" ]; do sleep 0.2; done
kill -TERM $sup 2>/dev/null
for _ in $(seq 600); do kill -0 $sup 2>/dev/null || break; sleep 0.1; done
kill -KILL $sup 2>/dev/null
wait $sup 2>/dev/null
kill -TERM $swarm 2>/dev/null
wait $swarm
exit $?
