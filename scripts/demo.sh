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
echo "== supervise --spares 2 examples/demo.yaml (CPU: 2 nodes + 2 warm spares; the demo"
echo "   kills a node at step 150 on purpose; the surviving node stays in its process and"
echo "   rejoins with a spare (recovery.in_process), which restores the lost node's shard from"
echo "   what that node pushed into its memory (checkpoint.replicate); state, events and"
echo "   checkpoints in state/demo;"
echo "   the live dashboard is at the address in state/demo/http.addr while it runs)"
rm -rf state/demo
build/bin/supervise --spares 2 --state state/demo --set recovery.in_process=true \
  --set checkpoint.replicate=true examples/demo.yaml "$@"
echo "== the checkpoints it wrote (ckpt --store local:state/demo/store ls)"
build/bin/ckpt --store local:state/demo/store ls
echo "== what happened (state/demo/events.jsonl)"
grep -E '"(fault_detected|node_rejoined|gang_stopped|node_quarantined|spare_promoted|recovered|run_done)"' state/demo/events.jsonl
echo "== where the new generation's restores read their bytes (the workers' logs)"
grep -h "restored step" state/demo/logs/node*.log || true
echo "== the run's report (supervise report state/demo --out state/demo/report.html)"
build/bin/supervise report state/demo --out state/demo/report.html
echo "   open state/demo/report.html in a browser: the loss curve with the fault, the nodes, the timeline"
