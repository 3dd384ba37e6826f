#!/usr/bin/env bash
# Out of memory: a worker whose micro-batch does not fit halves it and
# doubles the accumulation, keeping the global batch (docs/design.md §4). The
# failpoint oom_above_micro=1 makes every micro-batch above 1 fail with
# FT_ENOMEM, as a GPU would; the run configured with micro_batch 8 must
# then train exactly as one configured with micro_batch 1 (same sequences,
# same order, deterministic kernels): bit-identical losses and weights.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP"

"$FT_BIN/worker" $(tiny_args) --steps 6 --set train.micro_batch=1 \
  --log-json "$TMP/ref.jsonl" --export "$TMP/ref.safetensors"

FT_FAILPOINTS=oom_above_micro=1 "$FT_BIN/worker" $(tiny_args) --steps 6 \
  --set train.micro_batch=8 --log-json "$TMP/oom.jsonl" --export "$TMP/oom.safetensors" \
  2>"$TMP/oom.err" || { cat "$TMP/oom.err"; fail "the worker failed instead of adapting"; }
grep -q "out of memory at micro-batch 8: micro-batch 4 x accumulation 4 (global batch 16 kept)" \
  "$TMP/oom.err" || { cat "$TMP/oom.err"; fail "no report of the first halving"; }
grep -q "out of memory at micro-batch 2: micro-batch 1 x accumulation 16" "$TMP/oom.err" ||
  { cat "$TMP/oom.err"; fail "no report of the last halving"; }
pass "micro-batch 8 -> 4 -> 2 -> 1, each halving reported, global batch kept"

losses "$TMP/ref.jsonl" >"$TMP/ref.txt"
losses "$TMP/oom.jsonl" >"$TMP/oom.txt"
[ "$(wc -l <"$TMP/oom.txt")" -eq 6 ] || fail "the adapted run logged $(wc -l <"$TMP/oom.txt") steps"
cmp "$TMP/ref.txt" "$TMP/oom.txt" || { diff "$TMP/ref.txt" "$TMP/oom.txt" | head; fail "losses differ"; }
cmp "$TMP/ref.safetensors" "$TMP/oom.safetensors" || fail "final weights differ"
pass "losses and weights bit-identical to a run configured with micro-batch 1"

# Nothing fits: a clear error and a failing exit, not a crash.
if FT_FAILPOINTS=oom_above_micro=0 "$FT_BIN/worker" $(tiny_args) --steps 2 2>"$TMP/none.err"; then
  fail "the worker succeeded with no micro-batch fitting"
fi
grep -q "out of memory at micro-batch 1, the smallest there is" "$TMP/none.err" ||
  { cat "$TMP/none.err"; fail "no clear error when nothing fits"; }
pass "no micro-batch fits: a clear error, exit $(FT_FAILPOINTS=oom_above_micro=0 "$FT_BIN/worker" $(tiny_args) --steps 2 2>/dev/null; echo $?)"
