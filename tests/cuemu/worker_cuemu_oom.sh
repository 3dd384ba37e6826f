#!/usr/bin/env bash
# A real device out-of-memory, on cuemu: the CUDA worker whose activations
# do not fit halves its micro-batch (cudaMalloc failing, not a failpoint),
# keeps the global batch, and then trains exactly as a run configured with
# that micro-batch: bit-identical losses and weights. With too little
# memory for the model itself it gives a clear error and exits 1.
#
# The memory at which this happens depends on the engine's allocations, so
# the test finds it: a bisection on cuemu's device size (CUEMU_MEM_MB) for
# the smallest device on which the run completes. There the micro-batch
# must have been halved at least once.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../gpu/gpu_lib.sh"
synth_data "$TMP"

# run KIB NAME [ARGS...]: 3 steps on a device of KIB KiB; stderr in NAME.err
run() {
  local kib=$1 name=$2
  shift 2
  CUEMU_MEM_MB=$(awk "BEGIN { print $kib / 1024 }") "$FT_BIN/worker" $(tiny_args) \
    --set nodes.device=cuda --steps 3 --log-json "$TMP/$name.jsonl" \
    --export "$TMP/$name.safetensors" "$@" 2>"$TMP/$name.err"
}

lo=1024 hi=262144
run $hi big || { cat "$TMP/big.err"; fail "the run fails on a 256 MiB device"; }
! grep -q "out of memory" "$TMP/big.err" || fail "out of memory on a 256 MiB device"
set +e
run $lo tiny
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$TMP/tiny.err"; fail "a 1 MiB device: exit $rc, not 1"; }
grep -q "out of memory at micro-batch 1, the smallest there is" "$TMP/tiny.err" ||
  { cat "$TMP/tiny.err"; fail "a 1 MiB device: no clear error"; }
pass "1 MiB device: '$(tail -1 "$TMP/tiny.err")', exit 1"

while [ $((hi - lo)) -gt 64 ]; do
  mid=$(((lo + hi) / 2))
  if run $mid probe; then hi=$mid; else lo=$mid; fi
done
run $hi edge || { cat "$TMP/edge.err"; fail "the run at the edge ($hi KiB) failed on a rerun"; }
cat "$TMP/edge.err"
grep -q "out of memory at micro-batch 8: micro-batch 4 x accumulation 4 (global batch 16 kept)" \
  "$TMP/edge.err" || fail "on the smallest device that works ($hi KiB) the micro-batch was not halved"
micro=$(sed -n 's/.*out of memory at micro-batch [0-9]*: micro-batch \([0-9]*\) x.*/\1/p' \
  "$TMP/edge.err" | tail -1)
pass "smallest device that trains: $hi KiB, micro-batch 8 halved to $micro"

run $((hi * 4)) ref --set train.micro_batch="$micro" || fail "the reference run failed"
losses "$TMP/ref.jsonl" >"$TMP/ref.txt"
losses "$TMP/edge.jsonl" >"$TMP/edge.txt"
[ "$(wc -l <"$TMP/edge.txt")" -eq 3 ] || fail "the adapted run logged $(wc -l <"$TMP/edge.txt") steps"
cmp "$TMP/ref.txt" "$TMP/edge.txt" || { diff "$TMP/ref.txt" "$TMP/edge.txt"; fail "losses differ"; }
cmp "$TMP/ref.safetensors" "$TMP/edge.safetensors" || fail "final weights differ"
pass "losses and weights bit-identical to a run configured with micro-batch $micro"
