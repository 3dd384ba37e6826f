#!/usr/bin/env bash
# What lossy optimizer moments cost in training: the demo model trained to
# step 300 without a break (the reference), and the same run killed after
# its checkpoint of step 100 and resumed from it, its Adam moments stored
# exactly, as bf16, and as q8 (checkpoint.moments); prints, per form, the checkpoint's stored size and
# how far the next 200 steps' losses move from the reference's (mean and
# largest |difference|, and at the last step), beside the loss's own
# step-to-step noise in the reference over the same steps.
# usage: bench/bench_moments.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B/bin/ftdata" synth --out "$T/synth" >/dev/null
W=("$B/bin/worker" --standalone examples/demo.yaml --set "data.train=$T/synth_train_*.bin"
  --set "data.val=$T/synth_val_*.bin" --set train.val_every=0 --quiet)
"${W[@]}" --steps 300 --log-json "$T/ref.jsonl"
for form in exact bf16 q8; do
  # the same run (its schedule is over 300 steps), stopped once its
  # checkpoint of step 100 is committed: it hangs at step 103 (a failpoint)
  FT_FAILPOINTS=hang_at_step=103 "${W[@]}" --steps 300 --store "local:$T/$form" --ckpt-every 100 \
    --set checkpoint.moments=$form &
  pid=$!
  for _ in $(seq 1 600); do
    "$B/bin/ckpt" --store "local:$T/$form" ls --json 2>/dev/null | grep -q '"step":[[:space:]]*100,' && break
    sleep 0.1
  done
  sleep 0.5
  kill -9 $pid
  wait $pid 2>/dev/null || true
  "${W[@]}" --steps 300 --store "local:$T/$form" --ckpt-every 1000 --resume \
    --set checkpoint.moments=$form --log-json "$T/$form.jsonl" 2>"$T/$form.err"
  grep -q "not bit-exactly" "$T/$form.err" && echo "($form: the worker said the resume is not bit-exact)"
  "$B/bin/ckpt" --store "local:$T/$form" ls --json >"$T/$form.ls"
done
python3 - "$T" <<'PY'
import json, sys, statistics
t = sys.argv[1]
def losses(p):
    return {j["step"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j and "step" in j}
ref = losses(f"{t}/ref.jsonl")
steps = [s for s in sorted(ref) if 100 < s <= 300]
noise = statistics.mean(abs(ref[s] - ref[s - 1]) for s in steps)
print(f"reference: loss at step 300 {ref[300]:.4f}; mean |loss(s) - loss(s-1)| over "
      f"steps 101..300: {noise:.4f}")
print(f"{'moments':8} {'ckpt MiB':>9} {'exact':>6} {'mean |dloss|':>13} {'max |dloss|':>12} "
      f"{'loss@300':>9}")
for form in ("exact", "bf16", "q8"):
    run = losses(f"{t}/{form}.jsonl")
    ck = [c for c in json.load(open(f"{t}/{form}.ls")) if c["step"] == 100][0]
    d = [abs(run[s] - ref[s]) for s in steps]
    print(f"{form:8} {ck['stored_bytes'] / 2**20:9.3f} {str(ck['exact']).lower():>6} "
          f"{statistics.mean(d):13.5f} {max(d):12.5f} {run[300]:9.4f}")
PY
