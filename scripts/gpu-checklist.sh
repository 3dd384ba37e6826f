#!/usr/bin/env bash
# The first things to run on a GPU machine, in the order docs/gpu.md gives,
# each bounded in time so that a short lease ends with every step's result:
#
#   1 env        nvidia-smi, the driver and CUDA versions, what the programs load
#   2 tests      the tests labelled gpu (gpu-bundle/run-gpu-tests.sh, or ctest -L gpu)
#   3 simt       test_kernels_cuda with the fp32 attention (FT_ATTENTION=simt; the
#                default, tensor-core one ran in step 2)
#   4 bench      bench/gpu_train.sh on GPT-2 124M (GPU_BENCH_MODELS, _STEPS)
#   5 sanitizer  compute-sanitizer memcheck, racecheck and synccheck on
#                test_kernels_cuda (its deliberate out-of-memory is not reported)
#   6 initcheck  compute-sanitizer initcheck on the same (its own step: on sm_90 it
#                does not see the stores of cuBLASLt's main GEMM kernels, so the
#                tests clear what a GEMM writes before reading it; docs/gpu.md)
#   7 doctor     worker --doctor on the GPU, twice: the GPU check passes, both runs
#                give the same CPU and GPU hashes, and NVML's ECC / retired-page /
#                remap state is read from the real driver
#
# Each step writes DIR/<step>.log; DIR/summary.txt has one line per step
# (ok, FAILED with the exit code, or TIMEOUT) and is written as each ends, so a
# run cut short still says how far it came.
#
# usage: scripts/gpu-checklist.sh DIR [STEP...]     (default: every step, in order)
#   from a checkout with gpu-bundle/ beside it (scripts/gpu-bundle.sh), or with
#   FT_BUILD pointing at a build configured with -DWITH_CUDA=ON
#   GPU_CHECK_TEST_TIMEOUT  seconds per gpu test (120); GPU_CHECK_BENCH_TIMEOUT (240);
#   GPU_CHECK_SAN_TIMEOUT   seconds per sanitizer tool (90)
# Exit: 0 when every step that ran passed, 1 otherwise, 77 when no GPU is visible.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTD=${1:?usage: scripts/gpu-checklist.sh DIR [STEP...]}
shift
mkdir -p "$OUTD"
OUTD=$(cd "$OUTD" && pwd)
STEPS=${*:-env tests simt bench sanitizer initcheck doctor}
TT=${GPU_CHECK_TEST_TIMEOUT:-120}
BT=${GPU_CHECK_BENCH_TIMEOUT:-240}
ST=${GPU_CHECK_SAN_TIMEOUT:-90}

if [ -f gpu-bundle/env.sh ] && [ -z "${FT_BUILD:-}" ]; then
  # shellcheck disable=SC1091
  . gpu-bundle/env.sh
fi
FT_BUILD=${FT_BUILD:-build}
TESTS=$FT_BUILD/tests
[ -d "$TESTS" ] || { echo "gpu-checklist: no $TESTS (run scripts/gpu-bundle.sh first)" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu-checklist: no GPU visible (nvidia-smi -L lists none)"
  exit 77
fi

: >"$OUTD/summary.txt"
bad=0
step() { # step NAME CMD...: the command's output to NAME.log, a line to summary.txt
  local name=$1 t0=$SECONDS rc
  shift
  echo "== $name: $*" | tee -a "$OUTD/$name.log"
  "$@" >>"$OUTD/$name.log" 2>&1
  rc=$?
  local line
  case $rc in
  0) line="$name ok ($((SECONDS - t0)) s)" ;;
  124 | 137) line="$name TIMEOUT ($((SECONDS - t0)) s)"; bad=1 ;;
  77) line="$name skipped (77)" ;;
  *) line="$name FAILED exit $rc ($((SECONDS - t0)) s)"; bad=1 ;;
  esac
  echo "$line" | tee -a "$OUTD/summary.txt"
}

env_step() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,ecc.mode.current --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -2
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  for p in "$FT_BIN/worker" "$TESTS/test_kernels_cuda" "$TESTS/test_comm_nccl"; do
    echo "-- $p"
    ldd "$p" | grep -E 'not found|cublas|nccl|cudart|libcuda'
  done
  "$FT_BIN/worker" --gpus
}

tests_step() {
  if [ -x gpu-bundle/run-gpu-tests.sh ] && [ -n "${FT_BUNDLE:-}" ]; then
    GPU_TEST_TIMEOUT_MAX=$TT gpu-bundle/run-gpu-tests.sh
  else
    (cd "$FT_BUILD" && ctest -L gpu --timeout "$TT" --output-on-failure -V)
  fi
}

simt_step() { FT_ATTENTION=simt timeout "$TT" "$TESTS/test_kernels_cuda"; }

bench_step() {
  GPU_BENCH_MODELS=${GPU_BENCH_MODELS:-124M} GPU_BENCH_STEPS=${GPU_BENCH_STEPS:-20} \
    GPU_BENCH_TIMEOUT=$BT timeout $((BT * 3)) bench/gpu_train.sh
}

sanitizer_step() {
  local cs rc=0
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) ||
    { echo "no compute-sanitizer"; return 77; }
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
    echo "-- $tool"
    timeout "$ST" "$cs" --tool "$tool" --report-api-errors no --error-exitcode 9 \
      "$TESTS/test_kernels_cuda" || rc=$?
  done
  return $rc
}

initcheck_step() { SAN_TOOLS=initcheck sanitizer_step; }

doctor_step() {
  local a b
  timeout "$TT" "$FT_BIN/worker" --doctor --json --set nodes.device=cuda >"$OUTD/doctor1.json" || return
  timeout "$TT" "$FT_BIN/worker" --doctor --json --set nodes.device=cuda >"$OUTD/doctor2.json" || return
  cat "$OUTD/doctor1.json"
  # the CPU compute check's hash and the GPU check's hash, each the same twice
  hashes() { python3 -c 'import json,sys; print(" ".join(c["name"]+"="+c.get("hash","") for c in json.load(open(sys.argv[1]))["checks"] if "hash" in c))' "$1"; }
  a=$(hashes "$OUTD/doctor1.json") && b=$(hashes "$OUTD/doctor2.json") || return
  echo "run 1: $a"
  echo "run 2: $b"
  case $a in *gpu=*) ;; *) echo "no gpu check in the report"; return 1 ;; esac
  [ "$a" = "$b" ]
}

for s in $STEPS; do
  case $s in
  env | tests | simt | bench | sanitizer | initcheck | doctor) step "$s" "${s}_step" ;;
  *) echo "gpu-checklist: unknown step $s (env tests simt bench sanitizer initcheck doctor)" >&2; exit 2 ;;
  esac
done
cat "$OUTD/summary.txt"
exit $bad
