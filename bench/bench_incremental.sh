#!/usr/bin/env bash
# Stored bytes of five successive checkpoints of a real training run, beside
# their full (logical) size: what content addressing, shuffle and zstd save.
# usage: bench/bench_incremental.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B/bin/ftdata" synth --out "$T/synth" >/dev/null
"$B/bin/worker" --standalone examples/demo.yaml --set "data.train=$T/synth_train_*.bin" \
  --set "data.val=$T/synth_val_*.bin" --set model.n_layer=4 --set model.n_embd=128 \
  --steps 50 --store "local:$T/st" --ckpt-every 10 --quiet
echo "five successive checkpoints (every 10 steps) of a 4-layer, 128-channel GPT-2:"
"$B/bin/ckpt" --store "local:$T/st" ls
"$B/bin/ckpt" --store "local:$T/st" ls --json | python3 -c '
import json, sys
c = json.load(sys.stdin)
full = sum(x["logical_bytes"] for x in c); new = sum(x["new_bytes"] for x in c)
print(f"total: {full/2**20:.2f} MiB of state written as {new/2**20:.2f} MiB on disk ({full/new:.2f}x)")'
