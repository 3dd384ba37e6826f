#!/usr/bin/env bash
# The step time a rank reports for straggler detection (STEP's compute time,
# the supervisor's ftsup_step_seconds and history.bin; --log-json's
# compute_ms) is the step's own compute time: never negative, and a
# validation step (train.val_every) is not an outlier by construction.
# Two ranks over a rendezvous folder, validation every 3 steps, rank 1 a
# straggler (failpoint slow_rank=1, which slows its share of a validation
# too): rank 0 waits in the validation's collectives for rank 1. That wait
# used to be subtracted from a step time taken before the validation, so
# every validation step's compute time came out negative.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP"
STEPS=12
mkdir "$TMP/rdzv"
pids=()
for r in 0 1; do
  FT_FAILPOINTS=slow_rank=1 "$FT_BIN/worker" $(tiny_args) --steps $STEPS --world 2 --rank $r \
    --rdzv "$TMP/rdzv" --threads 1 --set train.val_every=3 --log-json "$TMP/r$r.jsonl" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a rank of the 2-rank run failed"; done
python3 - "$TMP/r0.jsonl" $STEPS <<'PY' || fail "the reported step times are wrong"
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if "ms" in r]
assert len(steps) == int(sys.argv[2]), f"{len(steps)} step records"
for r in steps:
    print(f"step {r['step']:3d}: ms {r['ms']:8.3f} compute_ms {r['compute_ms']:8.3f}"
          + (" (validation)" if "val_loss" in r else ""))
val = [r for r in steps if "val_loss" in r]
other = [r for r in steps if "val_loss" not in r and r["step"] > 1]  # step 1 sets things up
assert len(val) == 4, f"{len(val)} validation steps, want 4"
bad = [r["step"] for r in steps if not 0 <= r["compute_ms"] <= r["ms"] + 1e-3]
assert not bad, f"compute_ms outside [0, ms] at steps {bad}"
mv = statistics.median(r["compute_ms"] for r in val)
mo = statistics.median(r["compute_ms"] for r in other)
print(f"median compute_ms: validation steps {mv:.3f}, others {mo:.3f}")
# the same work: within a factor of 4 either way (the validation's wait is
# 2-3x a step's compute here, so the old measure was far below 0)
assert mo / 4 <= mv <= mo * 4, "validation steps are outliers"
PY
pass "every reported step time is in [0, ms]; validation steps' compute times are like the others'"
