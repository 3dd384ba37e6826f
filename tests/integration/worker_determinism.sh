#!/usr/bin/env bash
# Two runs of the same config give bit-identical losses, and the loss falls;
# the validation loss (train.val_every) only reads the weights: a run
# without it trains bit for bit the same.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP"
"$FT_BIN/worker" $(tiny_args) --steps 40 --log-json "$TMP/a.jsonl"
"$FT_BIN/worker" $(tiny_args) --steps 40 --log-json "$TMP/b.jsonl" --threads 1
losses "$TMP/a.jsonl" >"$TMP/a.txt"
losses "$TMP/b.jsonl" >"$TMP/b.txt"
[ "$(wc -l <"$TMP/a.txt")" -eq 40 ] || fail "expected 40 loss lines, got $(wc -l <"$TMP/a.txt")"
cmp "$TMP/a.txt" "$TMP/b.txt" || fail "two runs (2 threads, 1 thread) gave different losses"
pass "40 steps twice (2 threads, then 1): identical losses"
"$FT_BIN/worker" $(tiny_args) --steps 40 --log-json "$TMP/c.jsonl" --set train.val_every=0
losses "$TMP/c.jsonl" >"$TMP/c.txt"
cmp "$TMP/a.txt" "$TMP/c.txt" || fail "train.val_every changed the training losses"
python3 - "$TMP/a.jsonl" "$TMP/c.jsonl" <<'PY' || fail "validation losses (above)"
import json, sys
def val(path):
    return [(o["step"], o["val_loss"]) for o in map(json.loads, open(path)) if "val_loss" in o and "loss" in o]
a, c = val(sys.argv[1]), val(sys.argv[2])
assert [s for s, _ in a] == [25], a   # the demo's val_every: 25
assert 0 < a[0][1] < 10, a
assert c == [], c
print(f"val loss at step 25: {a[0][1]:.4f}")
PY
pass "train.val_every 25: a validation loss at step 25, and the same training losses as without"
python3 - "$TMP/a.txt" <<'PY' || fail "loss did not fall"
import sys
l = [float(x.split()[1]) for x in open(sys.argv[1])]
first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
print(f"mean loss of steps 1-5: {first:.4f}, of steps 36-40: {last:.4f}")
sys.exit(0 if last < first - 0.5 else 1)
PY
pass "loss falls"
