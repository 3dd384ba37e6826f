#!/usr/bin/env python3
"""A GPT-2 forward pass, the way Hugging Face's GPT2LMHeadModel computes it,
read from a model directory only (config.json + model.safetensors), in pure
Python (no numpy or torch on the test image). Written from the model's
definition, independently of the project's C code.

    hf_gpt2_ref.py DIR DATA_GLOB SEQS T

prints the mean cross-entropy over the first SEQS sequences of length T of
the token shards DATA_GLOB (llm.c's .bin: a 256-int32 header, then uint16
tokens; sequence i is tokens [i*T, i*T+T], the next token its target).

What it takes from config.json, as transformers does: n_layer, n_head,
n_embd, n_positions, vocab_size, activation_function, layer_norm_epsilon,
tie_word_embeddings (the head is wte). Weights are Conv1D, (in, out): y = x W + b.
"""
import glob
import json
import math
import os
import struct
import sys


def load_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        assert v["dtype"] == "F32", (k, v["dtype"])
        s, e = v["data_offsets"]
        out[k] = (v["shape"], list(struct.unpack(f"<{(e - s) // 4}f", b[8 + n + s: 8 + n + e])))
    return out


def rows(flat, r, c):
    return [flat[i * c:(i + 1) * c] for i in range(r)]


def layernorm(x, w, b, eps):
    m = sum(x) / len(x)
    v = sum((t - m) ** 2 for t in x) / len(x)
    r = 1.0 / math.sqrt(v + eps)
    return [(t - m) * r * wi + bi for t, wi, bi in zip(x, w, b)]


def conv1d(x, W, b):  # x (in,), W rows (in, out), b (out,)
    y = list(b)
    for xi, wr in zip(x, W):
        if xi:
            for j, wj in enumerate(wr):
                y[j] += xi * wj
    return y


ACT = {
    "gelu_new": lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
    "relu": lambda x: max(x, 0.0),
}


def main():
    d, pattern, nseq, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg.get("model_type") == "gpt2", cfg.get("model_type")
    assert "GPT2LMHeadModel" in cfg.get("architectures", []), cfg.get("architectures")
    L, NH, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    V, NP, eps = cfg["vocab_size"], cfg["n_positions"], cfg["layer_norm_epsilon"]
    act = ACT[cfg["activation_function"]]
    assert cfg.get("tie_word_embeddings", True), "untied head: lm_head.weight is not in the file"
    assert C % NH == 0, (C, NH)
    hs = C // NH
    p = load_safetensors(os.path.join(d, "model.safetensors"))

    def get(name, shape):
        s, flat = p[name]
        assert list(s) == list(shape), (name, s, shape)
        return rows(flat, shape[0], shape[1]) if len(shape) == 2 else flat

    wte = get("wte.weight", (V, C))
    wpe = get("wpe.weight", (NP, C))
    blocks = []
    for l in range(L):
        g = lambda n, s: get(f"h.{l}.{n}", s)  # noqa: E731
        blocks.append(dict(
            ln1w=g("ln_1.weight", (C,)), ln1b=g("ln_1.bias", (C,)),
            qkvw=g("attn.c_attn.weight", (C, 3 * C)), qkvb=g("attn.c_attn.bias", (3 * C,)),
            projw=g("attn.c_proj.weight", (C, C)), projb=g("attn.c_proj.bias", (C,)),
            ln2w=g("ln_2.weight", (C,)), ln2b=g("ln_2.bias", (C,)),
            fcw=g("mlp.c_fc.weight", (C, 4 * C)), fcb=g("mlp.c_fc.bias", (4 * C,)),
            fcpw=g("mlp.c_proj.weight", (4 * C, C)), fcpb=g("mlp.c_proj.bias", (C,))))
    lnfw, lnfb = get("ln_f.weight", (C,)), get("ln_f.bias", (C,))
    assert T <= NP, (T, NP)

    toks = []
    for f in sorted(glob.glob(pattern)):
        b = open(f, "rb").read()
        n = struct.unpack("<256i", b[:1024])[2]
        toks += struct.unpack(f"<{n}H", b[1024:1024 + 2 * n])

    total, count = 0.0, 0
    for i in range(nseq):
        seq = toks[i * T: i * T + T + 1]
        assert len(seq) == T + 1, "not enough tokens"
        x = [[a + b for a, b in zip(wte[seq[t]], wpe[t])] for t in range(T)]
        for bl in blocks:
            qkv = [conv1d(layernorm(xt, bl["ln1w"], bl["ln1b"], eps), bl["qkvw"], bl["qkvb"]) for xt in x]
            att = [[0.0] * C for _ in range(T)]
            for h in range(NH):
                o = h * hs
                for t in range(T):
                    q = qkv[t][o:o + hs]
                    sc = [sum(a * b for a, b in zip(q, qkv[u][C + o:C + o + hs])) / math.sqrt(hs)
                          for u in range(t + 1)]
                    m = max(sc)
                    e = [math.exp(s - m) for s in sc]
                    z = sum(e)
                    for u in range(t + 1):
                        w = e[u] / z
                        vv = qkv[u][2 * C + o:2 * C + o + hs]
                        for k in range(hs):
                            att[t][o + k] += w * vv[k]
            x = [[a + b for a, b in zip(xt, conv1d(at, bl["projw"], bl["projb"]))] for xt, at in zip(x, att)]
            mlp = []
            for xt in x:
                hmid = [act(v) for v in conv1d(layernorm(xt, bl["ln2w"], bl["ln2b"], eps), bl["fcw"], bl["fcb"])]
                mlp.append(conv1d(hmid, bl["fcpw"], bl["fcpb"]))
            x = [[a + b for a, b in zip(xt, mt)] for xt, mt in zip(x, mlp)]
        for t in range(T):
            y = layernorm(x[t], lnfw, lnfb, eps)
            logits = [sum(a * b for a, b in zip(y, wr)) for wr in wte]
            m = max(logits)
            lse = m + math.log(sum(math.exp(v - m) for v in logits))
            total += lse - logits[seq[t + 1]]
            count += 1
    print(f"{total / count:.9f}")


if __name__ == "__main__":
    main()
