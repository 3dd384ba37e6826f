#!/usr/bin/env bash
# Model files people use: the worker's safetensors export equals what
# `ckpt restore` writes from the checkpoint of the same step; converting that
# export to llm.c's model file with an independent (Python) implementation
# of the layouts and starting a run from it (--init-from) gives back the
# same model (same validation loss).
. "$(dirname "$0")/lib.sh"
synth_data "$TMP"
"$FT_BIN/worker" $(tiny_args) --steps 10 --store "local:$TMP/st" --ckpt-every 10 \
  --export "$TMP/a.safetensors" --log-json "$TMP/a.jsonl"
"$FT_BIN/ckpt" --store "local:$TMP/st" restore 10 --to "$TMP/r.safetensors"
python3 - "$TMP/a.safetensors" "$TMP/r.safetensors" <<'PY' || fail "ckpt restore and worker --export disagree"
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]]) for k, v in h.items()}
a, r = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == r.keys(), (sorted(a.keys() ^ r.keys()))
for k in a:
    assert a[k] == r[k], k
print(f"{len(a)} tensors identical; e.g. h.0.attn.c_attn.weight shape {a['h.0.attn.c_attn.weight'][1]}")
PY
pass "ckpt restore 10 == worker --export after 10 steps"

# safetensors (HF names, Conv1D (in, out)) -> llm.c model file, written here
# independently of common/ft_gpt2.c.
python3 - "$TMP/a.safetensors" "$TMP/a.bin" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
def t(name):
    v = h[name]; s, e = v["data_offsets"]
    return list(struct.unpack(f"<{(e - s) // 4}f", b[8 + n + s: 8 + n + e])), v["shape"]
def T(x, shape):  # transpose a (rows, cols) list
    r, c = shape
    return [x[i * c + j] for j in range(c) for i in range(r)]
V, C = h["wte.weight"]["shape"]; maxT = h["wpe.weight"]["shape"][0]
L = sum(1 for k in h if k.endswith(".ln_1.weight")); NH = 4; Vp = (V + 127) // 128 * 128
out = [t("wte.weight")[0] + [0.0] * ((Vp - V) * C), t("wpe.weight")[0]]
per = [("ln_1.weight", 0), ("ln_1.bias", 0), ("attn.c_attn.weight", 1), ("attn.c_attn.bias", 0),
       ("attn.c_proj.weight", 1), ("attn.c_proj.bias", 0), ("ln_2.weight", 0), ("ln_2.bias", 0),
       ("mlp.c_fc.weight", 1), ("mlp.c_fc.bias", 0), ("mlp.c_proj.weight", 1), ("mlp.c_proj.bias", 0)]
for name, tr in per:
    for l in range(L):
        x, s = t(f"h.{l}.{name}")
        out.append(T(x, s) if tr else x)
out += [t("ln_f.weight")[0], t("ln_f.bias")[0]]
hdr = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    for x in out:
        f.write(struct.pack(f"<{len(x)}f", *x))
PY
"$FT_BIN/worker" $(tiny_args) --steps 1 --init-from "$TMP/a.bin" --set train.lr=1e-12 \
  --set train.weight_decay=0 --log-json "$TMP/b.jsonl"
python3 - "$TMP/a.jsonl" "$TMP/b.jsonl" <<'PY' || fail "the model started from the llm.c file is not the exported one"
import json, sys
va = [json.loads(l)["val_loss"] for l in open(sys.argv[1]) if "val_loss" in l][-1]  # the final one
vb = [json.loads(l)["val_loss"] for l in open(sys.argv[2]) if "val_loss" in l][-1]
print(f"val loss of the trained model {va:.7f}, of the same model through llm.c's file {vb:.7f}")
sys.exit(0 if abs(va - vb) < 1e-5 else 1)
PY
pass "--init-from an llm.c file reproduces the exported model"
