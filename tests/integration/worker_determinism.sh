#!/usr/bin/env bash
# Two runs of the same config give bit-identical losses, and the loss falls.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP"
"$FT_BIN/worker" $(tiny_args) --steps 40 --log-json "$TMP/a.jsonl"
"$FT_BIN/worker" $(tiny_args) --steps 40 --log-json "$TMP/b.jsonl" --threads 1
losses "$TMP/a.jsonl" >"$TMP/a.txt"
losses "$TMP/b.jsonl" >"$TMP/b.txt"
[ "$(wc -l <"$TMP/a.txt")" -eq 40 ] || fail "expected 40 loss lines, got $(wc -l <"$TMP/a.txt")"
cmp "$TMP/a.txt" "$TMP/b.txt" || fail "two runs (2 threads, 1 thread) gave different losses"
pass "40 steps twice (2 threads, then 1): identical losses"
python3 - "$TMP/a.txt" <<'PY' || fail "loss did not fall"
import sys
l = [float(x.split()[1]) for x in open(sys.argv[1])]
first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
print(f"mean loss of steps 1-5: {first:.4f}, of steps 36-40: {last:.4f}")
sys.exit(0 if last < first - 0.5 else 1)
PY
pass "loss falls"
