# Helpers for the GPU tests (CTest label gpu). Source after lib.sh.
# Each test exits 77 (skipped) when this worker has no CUDA or sees no GPU.
ngpu=$("$FT_BIN/worker" --gpus 2>/dev/null || echo 0)
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "SKIP: no CUDA device visible to this build's worker (worker --gpus: ${ngpu:-0})"
  exit 77
fi
# These tests compare losses and weights, never the validation loss; on
# cuemu the final validation pass (8 forward batches) costs about 2 steps.
FT_TEST_VAL=
