#!/usr/bin/env bash
# Exact resume: a run of 2K steps, and a run killed (SIGKILL) after its
# checkpoint at step K and resumed, end with bit-identical losses and weights.
# With the argument `cuda` the same on the GPU (test worker_cuda_resume,
# label gpu; skipped without one), where the checkpoint is also copied off
# the device asynchronously, plus: two identical runs give identical bits.
. "$(dirname "$0")/lib.sh"
K=10
if [ "${1:-cpu}" = cuda ]; then
  . "$FT_SRC/tests/gpu/gpu_lib.sh"
  FT_TEST_DEVICE=cuda
  K=5 # on cuemu a step takes about a second
fi
synth_data "$TMP"

# The reference: 2K steps uninterrupted.
"$FT_BIN/worker" $(tiny_args) --steps $((2 * K)) --store "local:$TMP/ref" --ckpt-every $K \
  --log-json "$TMP/ref.jsonl" --export "$TMP/ref.safetensors"

# The victim: hangs at step K+3 (a failpoint); killed with SIGKILL once the
# checkpoint of step K is committed.
FT_FAILPOINTS=hang_at_step=$((K + 3)) "$FT_BIN/worker" $(tiny_args) --steps $((2 * K)) \
  --store "local:$TMP/run" --ckpt-every $K --log-json "$TMP/run.jsonl" &
pid=$!
for i in $(seq 1 600); do
  if [ "$(cat "$TMP/run.jsonl" 2>/dev/null | wc -l)" -ge $((K + 3)) ] &&
    has_checkpoint "local:$TMP/run" $K; then
    break
  fi
  kill -0 $pid 2>/dev/null || fail "the worker exited before it was killed"
  sleep 0.1
done
kill -9 $pid
wait $pid 2>/dev/null || true
has_checkpoint "local:$TMP/run" $K ||
  fail "no committed checkpoint at step $K before the kill"
pass "killed with SIGKILL after step $((K + 3)), checkpoint $K committed"

# Resume: continues from step K to 2K.
"$FT_BIN/worker" $(tiny_args) --steps $((2 * K)) --store "local:$TMP/run" --resume \
  --ckpt-every $K --log-json "$TMP/resumed.jsonl" --export "$TMP/run.safetensors"

losses "$TMP/ref.jsonl" | awk -v k=$K '$1 > k' >"$TMP/ref.txt"
losses "$TMP/resumed.jsonl" >"$TMP/res.txt"
[ "$(wc -l <"$TMP/res.txt")" -eq $K ] || fail "the resumed run logged $(wc -l <"$TMP/res.txt") steps, expected $K"
cmp "$TMP/ref.txt" "$TMP/res.txt" || { diff "$TMP/ref.txt" "$TMP/res.txt" | head; fail "losses after resume differ"; }
pass "losses of steps $((K + 1))-$((2 * K)) identical to the uninterrupted run"
cmp "$TMP/ref.safetensors" "$TMP/run.safetensors" || fail "final weights differ"
pass "final weights bit-identical"
"$FT_BIN/ckpt" --store "local:$TMP/run" verify || fail "ckpt verify failed on the resumed store"
pass "ckpt verify passes"

if [ "${1:-cpu}" = cuda ]; then # no atomics in any reduction: the same bits twice
  "$FT_BIN/worker" $(tiny_args) --steps $((2 * K)) --log-json "$TMP/again.jsonl"
  losses "$TMP/again.jsonl" >"$TMP/again.txt"
  losses "$TMP/ref.jsonl" >"$TMP/all.txt"
  cmp "$TMP/all.txt" "$TMP/again.txt" || fail "two identical GPU runs differ"
  pass "two identical GPU runs are bit-identical"
fi
