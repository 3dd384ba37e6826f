#!/usr/bin/env bash
# The CUDA FSDP engine at world sizes 2 and 4, on cuemu (NCCL between rank
# processes through shared memory: tests/cuemu/cuemu_nccl.cpp): from the
# same seed and the same batches its loss curve follows the CPU FSDP path's
# at the same world size (Gloo) within the tolerance of worker_cuda_curve.sh
# (each step within 2% + 0.02 nats, mean relative difference under 1%), and
# a rerun at the same world size is bit-identical (losses and final
# weights).
#   worker_cuemu_world.sh [W...]     (default 2 4)
# On GPUs (test worker_cuda_world, label gpu) rank r uses device r % GPUs,
# and NCCL refuses two ranks on one GPU: world sizes above the GPU count are
# skipped there (77 when none is left); on cuemu (FT_CUEMU=1) every rank
# is a process with its own emulated device.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../gpu/gpu_lib.sh"
STEPS=${CUEMU_WORLD_STEPS:-12}
SIZES=
for w in ${*:-2 4}; do
  if [ "${FT_CUEMU:-0}" = 1 ] || [ "$w" -le "$ngpu" ]; then SIZES="$SIZES $w"; else
    echo "SKIP: world $w needs $w GPUs ($ngpu visible)"; fi
done
[ -n "$SIZES" ] || exit 77
synth_data "$TMP"

# runw W PREFIX [DEVICE]: W ranks of the DEVICE (cuda) engine meeting through
# a fresh folder; rank 0's losses in PREFIX.txt, the final model (gathered
# by every rank, a collective) in PREFIX.safetensors
runw() {
  local w=$1 p=$2 dev=${3:-cuda} pids=() r
  rm -rf "$TMP/rdzv" && mkdir "$TMP/rdzv"
  for ((r = 0; r < w; r++)); do
    "$FT_BIN/worker" $(tiny_args) --set nodes.device=$dev --steps "$STEPS" --world "$w" --rank $r \
      --rdzv "$TMP/rdzv" --threads 1 --log-json "$p.$r.jsonl" --export "$p.$r.safetensors" \
      >"$p.$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || { tail -5 "$p.$r.log"; fail "rank $r of the $w-rank $dev run failed"; }
  done
  for ((r = 1; r < w; r++)); do
    cmp -s "$p.0.safetensors" "$p.$r.safetensors" || fail "ranks 0 and $r export different models"
  done
  mv "$p.0.safetensors" "$p.safetensors"
  losses "$p.0.jsonl" >"$p.txt"
  [ "$(wc -l <"$p.txt")" -eq "$STEPS" ] || fail "the $w-rank run logged $(wc -l <"$p.txt") steps"
}

for w in $SIZES; do
  runw "$w" "$TMP/cpu$w" cpu
  runw "$w" "$TMP/w${w}a"
  python3 - "$TMP/cpu$w.txt" "$TMP/w${w}a.txt" "$w" <<'PY' || fail "the $w-rank CUDA loss curve leaves the CPU FSDP's"
import sys
cpu = [float(l.split()[1]) for l in open(sys.argv[1])]
gpu = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(cpu) == len(gpu), (len(cpu), len(gpu))
worst = max(abs(g - c) - (0.02 * c + 0.02) for c, g in zip(cpu, gpu))
mean_rel = sum(abs(g - c) / c for c, g in zip(cpu, gpu)) / len(cpu)
print(f"world {sys.argv[3]}: step 1 cpu {cpu[0]:.4f} cuda {gpu[0]:.4f}; step {len(cpu)} cpu "
      f"{cpu[-1]:.4f} cuda {gpu[-1]:.4f}; mean relative difference {mean_rel:.4%}")
sys.exit(0 if worst <= 0 and mean_rel < 0.01 and gpu[-1] < gpu[0] else 1)
PY
  pass "world $w: the CUDA engine's losses follow the CPU FSDP path's ($STEPS steps)"
  runw "$w" "$TMP/w${w}b"
  cmp -s "$TMP/w${w}a.txt" "$TMP/w${w}b.txt" || fail "two $w-rank CUDA runs give different losses"
  cmp -s "$TMP/w${w}a.safetensors" "$TMP/w${w}b.safetensors" ||
    fail "two $w-rank CUDA runs end with different weights"
  pass "world $w: two runs bit-identical (losses and final weights)"
done
