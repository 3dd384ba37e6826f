#!/usr/bin/env bash
# A Hugging Face model directory: `worker --export DIR/` and `ckpt restore
# STEP --to DIR` write config.json beside model.safetensors, and a GPT-2
# forward pass that reads only that directory, written here in Python from
# GPT2LMHeadModel's definition (tests/integration/hf_gpt2_ref.py), gets the
# loss the worker measured on the same validation sequences. (transformers
# itself is not on the test image; this is what from_pretrained reads.)
. "$(dirname "$0")/lib.sh"
REF="$(dirname "$0")/hf_gpt2_ref.py"
synth_data "$TMP" 60000
# a model small enough for a pure-Python forward pass; val_loss covers
# 8 micro-batches of 2 sequences of 16 tokens
small="--set model.n_embd=16 --set model.n_head=2 --set model.seq_len=16
       --set train.micro_batch=2 --set train.global_batch=4"
"$FT_BIN/worker" $(tiny_args) $small --steps 300 --store "local:$TMP/st" --ckpt-every 300 \
  --export "$TMP/hf/" --log-json "$TMP/a.jsonl" || fail "worker --export DIR/ failed"
[ -f "$TMP/hf/config.json" ] && [ -f "$TMP/hf/model.safetensors" ] ||
  fail "worker --export $TMP/hf/ did not write config.json and model.safetensors: $(ls "$TMP/hf")"
python3 - "$TMP/hf/config.json" <<'PY' || fail "config.json lacks GPT2Config's keys"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 2,
        "n_embd": 16, "n_positions": 16, "n_ctx": 16, "vocab_size": 256,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True, "torch_dtype": "float32"}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
PY
pass "worker --export DIR/ wrote config.json (GPT2Config keys) beside model.safetensors"

vl=$(python3 -c 'import json,sys
print([json.loads(l)["val_loss"] for l in open(sys.argv[1]) if "val_loss" in l][-1])' "$TMP/a.jsonl")
ref=$(python3 "$REF" "$TMP/hf" "$TMP/synth_val_*.bin" 16 16) || fail "the reference could not load $TMP/hf"
python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5)' \
  "$vl" "$ref" || fail "GPT-2 from the directory gives loss $ref, the worker measured $vl"
pass "GPT-2 read from the directory: loss $ref, the worker's validation loss $vl"

# the reference can fail: the same weights under a wrong config do not match
# (n_head 4 splits attention wrongly, n_layer 1 drops a block, relu is not
# the trained GELU)
for edit in 's/"n_head":[[:space:]]*2/"n_head": 4/' 's/"n_layer":[[:space:]]*2/"n_layer": 1/' \
  's/"gelu_new"/"relu"/'; do
  rm -rf "$TMP/wrong" && mkdir "$TMP/wrong" && cp "$TMP/hf/model.safetensors" "$TMP/wrong/"
  sed "$edit" "$TMP/hf/config.json" >"$TMP/wrong/config.json"
  ! cmp -s "$TMP/hf/config.json" "$TMP/wrong/config.json" || fail "could not apply $edit"
  bad=$(python3 "$REF" "$TMP/wrong" "$TMP/synth_val_*.bin" 16 16)
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) < 1e-4)' \
    "$vl" "$bad" || fail "the reference does not notice $edit ($bad vs $vl)"
  pass "with config.json edited ($edit) the reference disagrees ($bad), as it must"
done

# ckpt restore into an existing folder writes the same two files
mkdir "$TMP/hf2"
"$FT_BIN/ckpt" --store "local:$TMP/st" restore 300 --to "$TMP/hf2" >"$TMP/r.out" ||
  fail "ckpt restore --to DIR failed"
grep -q "config.json" "$TMP/r.out" || fail "ckpt restore did not say it wrote config.json: $(cat "$TMP/r.out")"
cmp "$TMP/hf/config.json" "$TMP/hf2/config.json" || fail "restore's config.json differs from the export's"
python3 - "$TMP/hf/model.safetensors" "$TMP/hf2/model.safetensors" <<'PY' || fail "restore's weights differ"
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items()}
assert load(sys.argv[1]) == load(sys.argv[2])
PY
"$FT_BIN/ckpt" --store "local:$TMP/st" --json restore 300 --to "$TMP/hf3/" >"$TMP/r.json" ||
  fail "ckpt restore --to DIR/ (new) failed"
python3 -c 'import json,sys; o = json.load(open(sys.argv[1])); assert o["config"].endswith("hf3/config.json"), o' \
  "$TMP/r.json" || fail "--json restore does not name the config: $(cat "$TMP/r.json")"
pass "ckpt restore 300 --to DIR: the same config.json and weights as the worker's export"

# a file target stays one file, and a device is refused before training
"$FT_BIN/ckpt" --store "local:$TMP/st" restore 300 --to "$TMP/one.safetensors" >/dev/null
[ ! -e "$TMP/config.json" ] || fail "a file target also wrote config.json beside it"
rc=0
"$FT_BIN/worker" $(tiny_args) $small --steps 10 --export /dev/null 2>"$TMP/e" || rc=$?
[ "$rc" = 2 ] && grep -q "device" "$TMP/e" ||
  fail "worker --export /dev/null: exit $rc, want 2 and a word on the device: $(cat "$TMP/e")"
pass "a file target gets no config.json; --export /dev/null is refused at start (exit 2)"
