#!/usr/bin/env bash
# Recovery broken into its parts, process restart beside in-process restart
# (recovery.in_process), at two model sizes, on one machine (local
# launcher, 2 nodes + 1 spare, the local store): node 1 is lost (its process
# group SIGKILLed by chaos.kill_node_at_step) and the spare takes its place.
# The process restart is the reference: what torchrun and a plain
# supervisor do (every worker relaunched, every rank restored from the
# store). Per run:
#   detect    the last step before the fault to its detection (fault_detected stalled_s)
#   stop      detection to the old gang stopped (gang_stopped; in process:
#             the survivor out of its generation)
#   re-form   stopped to the new generation assigned (launches, HELLOs)
#   restore0  node 0's restore (the survivor; the worker's "restored step"
#             line), and where its bytes came from (memory / store)
#   restore2  node 2's (the spare that replaced node 1: from the store, or
#             with in_process from what it fetched while waiting, or with
#             checkpoint.replicate from what node 1 pushed into it)
#   first     detection to the new generation's first step (recovered),
#             which includes one step's compute: step is the run's median,
#             overhead = first - step
# (127MB: the fault at step 12, well after the first checkpoint, so a warm
# spare has built its engine: on one machine of two cores its build
# competes with the gang's steps)
# Sizes: the demo model (0.8 MB of training state) and L=6 C=384 (about
# 127 MB of state: weights, Adam moments).
# Then a checkpoint every step (one standalone worker, the local store):
# the median step time with no checkpoint beside the one with a checkpoint
# every step, and the median time a checkpoint holds the training loop
# (ckpt_stall_ms), as a share of the step (the issue's target: 5%).
# usage: bench/bench_inprocess.sh [BUILD_DIR]   (default build; KEEP=1 keeps the runs' folders)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
B=$(cd "${1:-build}" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/ftinproc.XXXXXX")
if [ -n "${KEEP:-}" ]; then echo "bench_inprocess: runs kept in $T"; else trap 'rm -rf "$T"' EXIT; fi
"$B/bin/ftdata" synth --out "$T/synth" --tokens 400000 >/dev/null
export OMP_WAIT_POLICY=passive

# run NAME IN_PROCESS MODEL STEPS KILL_AT [REPLICATE]
run() {
  local name=$1 inp=$2 model=$3 steps=$4 kill=$5 repl=${6:-false}
  sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
    -e "s|^data:.*|data: {train: \"$T/synth_train_*.bin\", val: \"$T/synth_val_*.bin\"}|" \
    -e "s|^model:.*|model: $model|" -e "s|  steps: 300|  steps: $steps|" \
    -e "s|  store: .*|  store: \"local:$T/$name/store\"|" -e "s|  every_steps: 25|  every_steps: 5\n  replicate: $repl|" \
    -e 's|  val_every: 25|  val_every: 0|' "$SRC/examples/demo.yaml" >"$T/$name.yaml"
  printf '  in_process: %s\nchaos: {kill_node_at_step: %s}\n' "$inp" "$kill" >>"$T/$name.yaml"
  mkdir -p "$T/$name"
  "$B/bin/supervise" --state "$T/$name/st" --worker "$B/bin/worker" --spares 1 "$T/$name.yaml" \
    >"$T/$name.out" 2>&1 || {
    tail -20 "$T/$name.out"
    echo "bench_inprocess: $name failed"
    exit 1
  }
  python3 - "$T/$name/st" "$name" <<'PY'
import glob, json, re, sys
st, name = sys.argv[1], sys.argv[2]
ev = [json.loads(l) for l in open(f"{st}/events.jsonl")]
def first(kind):
    return next(e for e in ev if e["event"] == kind)
f, g = first("fault_detected"), first("gang_stopped")
gens = [e for e in ev if e["event"] == "generation_started"]
r = first("recovered")
reform = (gens[1]["ts"] - f["ts"]) * 1e3 - g["ms"]
rest, src = {}, "-"
for p in sorted(glob.glob(f"{st}/logs/node*.slot*.log")):
    node = re.search(r"node(\d+)\.", p).group(1)
    for l in open(p):
        m = re.search(r"restored step \d+ in (\d+) ms: ([\d.]+) MiB from memory, ([\d.]+) MiB from buddies, ([\d.]+) MiB from the store", l)
        if m:
            rest[node] = int(m.group(1))
            if node == "0":
                src = (f"{float(m.group(2)):.1f} mem / {float(m.group(3)):.1f} buddies / "
                       f"{float(m.group(4)):.1f} store (MiB)")
steps = sorted(float(m.group(1)) for p in glob.glob(f"{st}/logs/node0.slot0.log")
               for m in re.finditer(r"\|\s+([\d.]+) ms \|", open(p).read()))
step = steps[len(steps) // 2] if steps else 0
first = r["detect_to_first_step_ms"]
print(f"{name:<21} {f['stalled_s'] * 1e3:6.0f} {g['ms']:6.0f} {reform:7.0f} "
      f"{rest.get('0', 0):8.0f} {rest.get('2', 0):7.0f} {first:7.0f} "
      f"{step:6.0f} {first - step:8.0f}   {src}")
PY
}

echo "bench_inprocess: ms; node 1 lost, node 2 (a warm spare) replaces it, node 0 survives"
printf '%-21s %6s %6s %7s %8s %7s %7s %6s %8s   %s\n' run detect stop re-form restore0 restore2 first step overhead \
  "node 0's restore"
SMALL='{n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 256, seq_len: 64}'
BIG='{n_layer: 6, n_head: 6, n_embd: 384, vocab_size: 256, seq_len: 64}'
FT_FAILPOINTS=min_step_ms=60 run demo-process false "$SMALL" 40 15
FT_FAILPOINTS=min_step_ms=60 run demo-in-process true "$SMALL" 40 15
FT_FAILPOINTS=min_step_ms=60 run demo-process+buddies false "$SMALL" 40 15 true
FT_FAILPOINTS=min_step_ms=60 run demo-in-proc+buddies true "$SMALL" 40 15 true
run 127MB-process false "$BIG" 16 12
run 127MB-in-process true "$BIG" 16 12
run 127MB-process+buddies false "$BIG" 16 12 true
run 127MB-in-proc+buddies true "$BIG" 16 12 true
echo "reference: the process rows (every worker relaunched, every rank restored from the store)"
echo "+buddies: checkpoint.replicate (the spare holds node 1's shard pushed by node 1; a"
echo "relaunched node 0 takes its own from the spare's memory)"

# every_step NAME MODEL STEPS: median step ms without checkpoints, with one
# every step, and the median stall
every_step() {
  local name=$1 model=$2 steps=$3 k
  for k in 0 1; do
    sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
      -e "s|^data:.*|data: {train: \"$T/synth_train_*.bin\", val: \"$T/synth_val_*.bin\"}|" \
      -e "s|^model:.*|model: $model|" -e 's|  val_every: 25|  val_every: 0|' \
      "$SRC/examples/demo.yaml" >"$T/$name-$k.yaml"
    local args=()
    [ $k = 1 ] && args=(--store "local:$T/$name-$k.store" --ckpt-every 1)
    "$B/bin/worker" --standalone "$T/$name-$k.yaml" --steps "$steps" --quiet \
      --log-json "$T/$name-$k.jsonl" "${args[@]}" >/dev/null 2>"$T/$name-$k.err" || {
      tail -5 "$T/$name-$k.err"
      exit 1
    }
  done
  python3 - "$T/$name-0.jsonl" "$T/$name-1.jsonl" "$name" <<'PY'
import json, statistics, sys
def rows(p):
    return [json.loads(l) for l in open(p) if '"ms"' in l][3:]  # past the warm-up
a, b = rows(sys.argv[1]), rows(sys.argv[2])
base = statistics.median(r["ms"] for r in a)
each = statistics.median(r["ms"] for r in b)
stall = statistics.median(r["ckpt_stall_ms"] for r in b if "ckpt_stall_ms" in r)
print(f"{sys.argv[3]:<8} {base:9.1f} {each:11.1f} {100 * (each - base) / base:+8.1f}% "
      f"{stall:9.2f} {100 * stall / base:8.1f}%")
PY
}
echo
echo "every-step checkpoints (standalone worker, local store): ms, medians"
printf '%-8s %9s %11s %9s %9s %9s\n' model no-ckpt every-step slower stall stall/step
every_step demo "$SMALL" 60
every_step 127MB "$BIG" 14
echo "target (issue 15): stall at most 5% of the step"
