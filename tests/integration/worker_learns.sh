#!/usr/bin/env bash
# The trainer drives the loss well below the corpus's unigram entropy (the
# loss of the best model that ignores context) within a few hundred steps.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP" 1000000
H=$("$FT_BIN/ftdata" stats --json "$TMP/synth_train_*.bin" | python3 -c 'import json,sys; print(json.load(sys.stdin)["unigram_entropy_nats"])')
"$FT_BIN/worker" $(tiny_args) --steps 300 --log-json "$TMP/l.jsonl"
python3 - "$TMP/l.jsonl" "$H" <<'PY' || fail "validation loss not well below the unigram entropy"
import json, sys
H = float(sys.argv[2])
val = [json.loads(l)["val_loss"] for l in open(sys.argv[1]) if "val_loss" in l][-1]  # the last: after the run
print(f"unigram entropy {H:.4f} nats, validation loss after 300 steps {val:.4f}")
sys.exit(0 if val < H - 1.0 else 1)
PY
pass "validation loss more than 1 nat below the unigram entropy"
