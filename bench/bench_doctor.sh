#!/usr/bin/env bash
# The node doctor's figures beside the issue's targets (docs/design.md §6):
#
#  1. doctor time per node: `worker --doctor` (compute check, memory
#     pattern, disk write/fsync/read-back) on the demo's settings and on the
#     defaults (64 MiB memory, 8 MiB disk), 5 runs each, median and worst,
#     beside the 10 s target; and each check's share.
#  2. the silent-data-corruption check's cost: 3 supervised nodes, the same
#     run with no check (watchdog.sdc_every 0) and with a check at every
#     step (sdc_every 1); per check = the difference of the mean wall time
#     per step (from the step events' timestamps: the supervisor emits one
#     per checkpoint, so checkpoints every third of the run, and the window
#     from the first to the last, one checkpoint inside it); the overhead
#     at the default interval (100) = per check / (100 x a plain step),
#     beside the 1% target. The reference is the check's arithmetic: one
#     more micro-batch forward and backward per rank and check, i.e. at
#     most 1/(accum x sdc_every) of a step's compute.
#     Two model sizes: the demo's and L=4 C=256 (compute-bound steps), each
#     rank's micro-batch the whole of its share (accum 1: the check costs a
#     whole step's forward and backward, the worst case); then L=4 C=256 at
#     accum 2 (the check recomputes one of the two micro-batches).
#
# usage: bench/bench_doctor.sh [BUILD_DIR]   (KEEP=1 keeps the runs' folders)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
B=$(cd "${1:-build}" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/ftdoctor.XXXXXX")
if [ -n "${KEEP:-}" ]; then echo "bench_doctor: runs kept in $T"; else trap 'rm -rf "$T"' EXIT; fi
export OMP_WAIT_POLICY=passive

echo "== 1. doctor time per node (worker --doctor, 5 runs each; target: under 10 s) =="
for cfg in demo defaults; do
  set_args=(--set "doctor.dir=$T")
  [ $cfg = defaults ] && set_args+=(--set doctor.mem_mb=64 --set doctor.disk_mb=8)
  for i in 1 2 3 4 5; do
    "$B/bin/worker" --doctor "$SRC/examples/demo.yaml" --json "${set_args[@]}" >"$T/doc-$cfg-$i.json"
  done
  python3 - "$cfg" "$T"/doc-"$cfg"-*.json <<'PY'
import json, statistics, sys
runs = [json.load(open(p)) for p in sys.argv[2:]]
assert all(r["ok"] for r in runs), "a doctor run failed"
tot = sorted(r["ms"] for r in runs)
parts = {c["name"]: statistics.median(r2["ms"] for r in runs for r2 in r["checks"] if r2["name"] == c["name"])
         for c in runs[0]["checks"]}
desc = ", ".join(f"{k} {v:.0f} ms" for k, v in parts.items())
mem = next(c for c in runs[0]["checks"] if c["name"] == "memory")["mb"]
print(f"  {sys.argv[1]:8s} (memory {mem} MiB): median {statistics.median(tot):7.0f} ms, worst "
      f"{tot[-1]:7.0f} ms   target 10000 ms ({10000 / tot[-1]:.0f}x under)   [{desc}]")
PY
done

"$B/bin/ftdata" synth --out "$T/synth" --tokens 400000 >/dev/null
# run NAME MODEL_SETS SDC_EVERY STEPS MICRO
run() {
  local name=$1 model=$2 every=$3 steps=$4 micro=$5
  # shellcheck disable=SC2086
  "$B/bin/supervise" --state "$T/$name" --spares 0 --steps "$steps" --set nodes.count=3 \
    --set train.global_batch=24 --set train.micro_batch="$micro" --set checkpoint.every_steps=$((steps / 3)) \
    --set train.val_every=0 --set watchdog.sdc_every="$every" $model \
    --set "data.train=$T/synth_train_*.bin" --set "data.val=$T/synth_val_*.bin" \
    "$SRC/examples/demo.yaml" >"$T/$name.out" 2>&1 || { cat "$T/$name.out"; exit 1; }
}
# per_step STATE: mean seconds per step between the first and the last step event
per_step() {
  python3 - "$1/events.jsonl" <<'PY'
import json, sys
ts = {e["step"]: e["ts"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "step"}
a, b = min(ts), max(ts)
print((ts[b] - ts[a]) / (b - a))
PY
}
echo "== 2. the SDC check's cost (3 nodes, supervised; target: at most 1% of step time at sdc_every 100) =="
for size in demo big big-accum2; do
  model="" steps=60 micro=8 accum=1
  [ $size != demo ] && model="--set model.n_layer=4 --set model.n_embd=256 --set model.n_head=4" steps=30
  [ $size = big-accum2 ] && micro=4 accum=2
  for rep in 1 2; do
    run "$size-off-$rep" "$model" 0 $steps $micro
    run "$size-every-$rep" "$model" 1 $steps $micro
  done
  python3 - "$size" "$(per_step "$T/$size-off-1")" "$(per_step "$T/$size-off-2")" \
    "$(per_step "$T/$size-every-1")" "$(per_step "$T/$size-every-2")" "$T/$size-every-1/events.jsonl" \
    $accum <<'PY'
import json, sys
size, accum = sys.argv[1], int(sys.argv[7])
off = min(float(sys.argv[2]), float(sys.argv[3]))
every = min(float(sys.argv[4]), float(sys.argv[5]))
alarms = sum(1 for l in open(sys.argv[6]) if json.loads(l)["event"] == "sdc")
per_check = every - off
pct = 100 * per_check / (100 * off)
print(f"  {size:10s}: plain step {off * 1e3:7.1f} ms, checked every step {every * 1e3:7.1f} ms -> "
      f"{per_check * 1e3:6.1f} ms per check ({100 * per_check / off:.0f}% of a step; the "
      f"arithmetic: one micro-batch of {accum}, {100 / accum:.0f}% of the compute); at sdc_every "
      f"100: {pct:.2f}%   target 1.00%; alarms in the checked runs: {alarms}")
PY
done
