#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, writes the
# synthetic corpus and trains the demo run on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
echo "== building (build/)"
scripts/build.sh
echo "== writing the synthetic corpus (data/synth_*)"
build/bin/ftdata synth --out data/synth
build/bin/ftdata stats 'data/synth_train_*.bin'
echo "== training examples/demo.yaml (standalone, CPU), checkpoints in state/demo-store"
rm -rf state/demo-store
build/bin/worker --standalone examples/demo.yaml --store local:state/demo-store --ckpt-every 50 "$@"
echo "== the checkpoints it wrote"
build/bin/ckpt --store local:state/demo-store ls
