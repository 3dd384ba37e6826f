#!/usr/bin/env bash
# FSDP across processes (Gloo over TCP): at equal global batch a 4-rank run's
# losses match the single-process trainer's within floating-point tolerance,
# and a rerun at the same world size is bit-identical.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP"
STEPS=20
run4() { # out-prefix
  rm -rf "$TMP/rdzv" && mkdir "$TMP/rdzv"
  local pids=()
  for r in 0 1 2 3; do
    "$FT_BIN/worker" $(tiny_args) --steps $STEPS --world 4 --rank $r --rdzv "$TMP/rdzv" \
      --threads 1 --log-json "$1_$r.jsonl" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail "a rank of the 4-rank run failed"; done
}
"$FT_BIN/worker" $(tiny_args) --steps $STEPS --log-json "$TMP/w1.jsonl"
run4 "$TMP/a"
run4 "$TMP/b"
losses "$TMP/w1.jsonl" >"$TMP/w1.txt"
losses "$TMP/a_0.jsonl" >"$TMP/a.txt"
losses "$TMP/b_0.jsonl" >"$TMP/b.txt"
[ "$(wc -l <"$TMP/a.txt")" -eq $STEPS ] || fail "the 4-rank run logged $(wc -l <"$TMP/a.txt") steps"
cmp "$TMP/a.txt" "$TMP/b.txt" || fail "two 4-rank runs differ"
pass "two 4-rank runs: bit-identical losses"
python3 - "$TMP/w1.txt" "$TMP/a.txt" <<'PY' || fail "4-rank losses differ from the single process beyond tolerance"
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"largest relative difference over {len(a)} steps: {worst:.2e} (tolerance 1e-4)")
sys.exit(0 if worst < 1e-4 else 1)
PY
pass "4 ranks match 1 process within 1e-4"
