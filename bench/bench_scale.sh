#!/usr/bin/env bash
# One supervisor at large rank counts (docs/design.md, "Scale"): the real
# supervise against ftswarm (tests/scale/ftswarm.c), N simulated ranks on
# N/8 hosts, each rank a real TCP connection speaking the real protocol.
# For each N: gang formation (supervise's start to the last ASSIGN), the
# supervisor's CPU and resident memory in steady state, detection of a
# silent rank / a silent host / a dropped host (injection to the first
# reaction that reaches another worker's host, by the kernel's receive
# timestamp; p50 and p99), a recovery cycle (that
# reaction to the new gang's last ASSIGN, and the fault to its first step),
# commits of N shard manifests (the last SHARD_SAVED written to the first
# COMMITTED), and the growth of events.jsonl and the catalog; each beside
# the issue's target. The heartbeat timeout is 4 s (heartbeats every 1 s),
# a step every 2 s, checkpoints every 10 steps.
#
# usage: bench/bench_scale.sh [BUILD_DIR] [N...]      (default 1024 4096 16384)
#   FAULTS=silent:20,host:20,drop:5 (default) faults per N; KEEP=1 keeps runs
#   RECOVERY=inprocess (default: recovery.in_process, the survivors rejoin
#   the next generation in process) or restart (every gang process is
#   stopped and started again through the launcher)
#   SHARDS=objects (default: each rank's shard is an object of the store and
#   SHARD_SAVED carries its reference, as a gang worker's does) or inline
#   (SHARD_SAVED carries the whole shard manifest: the commit before shard
#   objects); under AGENTS=1 objects means each host's agent reports one
#   reference for its host (a leaf naming its ranks' shard objects), and
#   ranks the agents' reports rank by rank (the commit before host leaves)
#   AGENTS=1: one agent per host (nodes.agent; the swarm plays each host's
#   agent: one connection per host, RELAYed frames, one HOSTBEAT per
#   interval), beside the default direct mode (a connection per rank);
#   ONCE=1 with it: nodes.launch_once, one launcher call for the whole pool
#   (one attach process for every host, as one srun over every host would
#   start every host's agent: 16,384 hosts at 131,072 ranks)
#   RESTORE_SIZES="16384 131072" (default): after the swarm, the bytes one
#   rank reads to restore a checkpoint of that many ranks beside its own
#   shard (bench_restore, no supervisor; "" skips it)
set -euo pipefail
cd "$(dirname "$0")/.."
export FT_SRC=$PWD
B=$(cd "${1:-build}" && pwd)
shift || true
export FT_BIN=$B/bin FT_BUILD=$B
sizes=${*:-1024 4096 16384}
faults=${FAULTS:-silent:20,host:20,drop:5}
recovery=${RECOVERY:-inprocess}
case $recovery in
inprocess) sets="--set recovery.in_process=true" ;;
restart) sets= ;;
*) echo "bench_scale: RECOVERY is inprocess or restart, not '$recovery'" >&2; exit 2 ;;
esac
case ${SHARDS:-objects} in
objects) inline=0 hostrefs=1 ;;
ranks) inline=0 hostrefs=0 ;;
inline) inline=1 hostrefs=0 ;;
*) echo "bench_scale: SHARDS is objects, ranks or inline, not '$SHARDS'" >&2; exit 2 ;;
esac
nf=$(python3 -c 'import sys; print(sum(int(x.split(":")[1]) for x in sys.argv[1].split(",")))' "$faults")
T=$(mktemp -d "${TMPDIR:-/tmp}/ftscale.XXXXXX")
if [ -n "${KEEP:-}" ]; then echo "bench_scale: runs kept in $T"; else trap 'rm -rf "$T"' EXIT; fi
[ "$(ulimit -Hn)" -ge 17000 ] || echo "bench_scale: ulimit -Hn is $(ulimit -Hn); 16,384 ranks need about 17,000"
agents=${AGENTS:-0} once=${ONCE:-0}
mode=direct
[ "$agents" = 1 ] && mode="agents, launched $([ "$once" = 1 ] && echo "once for the pool" || echo "per host")"
echo "bench_scale: recovery $recovery, shards ${SHARDS:-objects}, $mode"
printf "%-7s %-28s %-28s\n" "ranks" "figure" "measured (target)"
for n in $sizes; do
  d=$T/n$n
  SWARM_AGENTS=$agents SWARM_ONCE=$once SWARM_SETS=$sets SWARM_SPARES=$((nf + 2)) SWARM_HB=4 \
    tests/scale/swarm_run.sh "$d" "$n" \
    --steady 60 --commits 2 --faults "$faults" --step-ms 2000 --ckpt-every 10 --settle 2 --timeout 7200 --inline-shards $inline --host-refs $hostrefs ||
    echo "bench_scale: the swarm at $n ranks did not pass (see $d/swarm.out)"
  python3 - "$d/figures.json" "$n" "$recovery" "$d" "$agents" <<'PY'
import json, re, sys
# a figure with no sample (a fault kind not injected) is written as nan
f = json.loads(re.sub(r"\bnan\b", "NaN", open(sys.argv[1]).read())); n = sys.argv[2]
def row(name, val, target):
    print(f"{n:<7} {name:<28} {val} ({target})")
big = int(n) > 16384  # the 131,072-rank targets (agents)
row("gang formation", f"{f['formation_s']:.2f} s", "< 10 s" if big else "< 5 s")
row("steady supervisor CPU", f"{f['sup_cores']:.3f} cores", "< 0.5")
row("steady supervisor RSS", f"{f['sup_rss_mib']:.0f} MiB", "< 1024 MiB")
for k, what in (("detect_silent_ms", "silent rank"), ("detect_host_ms", "silent host"),
                ("detect_drop_ms", "dropped host")):
    d = f[k]
    row(f"detect {what} p50/p99", f"{d['p50']:.0f} / {d['p99']:.0f} ms (n={d['n']})",
        "p99 < timeout 4000 + 100 ms" if k != "detect_drop_ms"
        else "agent's connection reset: < 1000 ms" if sys.argv[5] == "1" else "reset: at once")
d = f["stop_spread_ms"]
row("STOP, first to last worker", f"{d['p50']:.0f} / {d['p99']:.0f} ms (n={d['n']})",
    "every worker told")
# the supervisor's side of a silence: injection (the swarm's wall clock) to
# its fault_detected (detected_at); the rest of "detect" above is the
# supervisor's fault handling up to its first STOP and that STOP's way to the
# worker's host
inj = [(m.group(1), float(m.group(2))) for m in
       re.finditer(r"fault \d+: (silent|host), .* at ([0-9.]+)", open(sys.argv[4] + "/swarm.out").read())]
det = sorted(e["detected_at"] for e in map(json.loads, open(sys.argv[4] + "/state/events.jsonl"))
             if e.get("event") == "fault_detected")
lat = sorted(min((t for t in det if t >= t0), default=float("nan")) - t0 for _, t0 in inj)
if lat:
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3
    row("supervisor names a silence", f"{pct(0.5):.0f} / {pct(0.99):.0f} ms (n={len(lat)})",
        "p50/p99; p99 < 4100 ms")
r, c = f["recover_assign_ms"], f["fault_to_step_ms"]
row(f"recovery ({sys.argv[3]}): stop to ASSIGN", f"{r['p50']:.0f} / {r['p99']:.0f} ms",
    "< 2000 ms" if big else "16,384 in process: 850 / 1150 ms direct; < 5000 ms")
row("fault to first step", f"{c['p50']:.0f} / {c['p99']:.0f} ms", "detection + recovery")
m = f["commit_ms"]
row("commit of N manifests", f"{m['p50']:.0f} / {m['p99']:.0f} ms (n={m['n']})", "< 1000 ms")
if sys.argv[5] == "1":
    row("hosts' references sent", f"{f.get('host_refs', 0)}", "one per host a checkpoint (SHARDS=objects)")
for k in ("grow_0", "grow_1"):
    if k in f:
        row("growth " + f[k]["path"].split("/")[-1], f"{f[k]['bytes_per_hour'] / 2**20:.1f} MiB/h",
            f"checkpoint every {f['ckpt_every_s']:.0f} s")
row("protocol errors", f"{f['conformance_errors']}", "0")
PY
done
# the bytes one rank reads to restore, beside its own shard (bench_restore:
# the same model's checkpoint, committed from shard objects)
restore_sizes=${RESTORE_SIZES-16384 131072}
if [ -n "$restore_sizes" ]; then
  # shellcheck disable=SC2086 # the sizes are words
  "$B/bin/bench_restore" "$T/restore" $restore_sizes || echo "bench_scale: bench_restore failed"
fi
