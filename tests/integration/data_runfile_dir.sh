#!/usr/bin/env bash
# A relative data glob in a run file is relative to the run file's
# directory: a run file kept beside its data trains from any current
# directory, and one whose glob matches nothing there names the resolved
# glob. (docs/runfile.md, "Paths".)
. "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/run/data" "$TMP/elsewhere"
"$FT_BIN/ftdata" synth --out "$TMP/run/data/c" --tokens 20000 >/dev/null
cat >"$TMP/run/run.yaml" <<'YAML'
model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}
train: {steps: 2, global_batch: 4, micro_batch: 2, warmup: 0}
data: {train: "data/c_train_*.bin", val: "data/c_val_*.bin"}
nodes: {count: 1}
YAML
cd "$TMP/elsewhere"
"$FT_BIN/worker" --standalone ../run/run.yaml --log-json "$TMP/log.jsonl" --quiet 2>"$TMP/err" ||
  fail "worker from another directory: exit $? ($(cat "$TMP/err"))"
grep -q '"step": *2' "$TMP/log.jsonl" || grep -q '"step":2' "$TMP/log.jsonl" ||
  fail "no step 2 in the log: $(cat "$TMP/log.jsonl")"
pass "trained from $TMP/elsewhere on ../run/data/c_train_*.bin"

# The same file copied elsewhere, away from its data: refused, naming the glob
# under the file's directory (not the current one).
mkdir -p "$TMP/copy"
cp "$TMP/run/run.yaml" "$TMP/copy/run.yaml"
set +e
(cd "$TMP/run" && "$FT_BIN/worker" --standalone ../copy/run.yaml --quiet) 2>"$TMP/err2"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a run file away from its data trained anyway"
grep -qF "../copy/data/c_train_*.bin" "$TMP/err2" || fail "the error does not name the glob: $(cat "$TMP/err2")"
pass "away from its data: $(head -1 "$TMP/err2")"
