#!/usr/bin/env python3
"""pytorch_gpt2: the PyTorch reference for bench/gpu_train.sh.

A plain GPT-2 written here (no Hugging Face): learned positional embedding,
pre-LayerNorm blocks, causal self-attention through
F.scaled_dot_product_attention, GELU (tanh) MLP, final LayerNorm and a
classifier tied to the token embedding. Trained the usual mixed-precision
way: fp32 parameters, bf16 autocast, fused AdamW (betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on 2-D weights), gradient clipping at 1.0, on random tokens.

Modes (each prints exactly one JSON line on stdout; notes go to stderr):

  train (default)   --layers L --heads H --embd C --seq T --vocab V --batch B
                    --steps N --warmup W [--compile] [--pad-vocab M]
      {"impl":"pytorch","tok_s":median,"ms":median,"params":N,...}
      tok_s and ms are medians over the N timed steps (after W untimed ones;
      the first steps include torch.compile's compilation and autotuning).
      params counts every parameter once (tied wte once), without the
      vocabulary padding that --pad-vocab adds.
  --matmul-peak     achieved bf16 GEMM TFLOP/s: 8192^3 torch.matmul on random
                    normal data, best of several rounds of 10 products
      {"impl":"pytorch","matmul_tflops":best,...}
  --d2h BYTES       a bare device-to-host copy of BYTES: torch.empty on cuda
                    -> pinned cpu tensor .copy_(non_blocking=True),
                    synchronize; best of 5 after one untimed copy
      {"impl":"pytorch","d2h_bytes":BYTES,"ms":best,"gb_s":..,...}

Exit codes: 0 measured; 77 no torch or no CUDA device (skipped); 2 bad
arguments.
"""
import argparse
import json
import math
import statistics
import sys
import time


def die_skip(msg):
    print(f"pytorch_gpt2: {msg}: skipped", file=sys.stderr)
    sys.exit(77)


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # no torch in this python: the caller skips the column
    die_skip(f"cannot import torch ({e})")


# ---- the model ----------------------------------------------------------------

class SelfAttention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = SelfAttention(C, H)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        # the classifier is wte itself (tied): logits = x @ wte^T
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * L) if name.endswith("c_proj.weight") else std
                nn.init.normal_(p, mean=0.0, std=s)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


# ---- modes ----------------------------------------------------------------------

def need_cuda():
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        die_skip("no CUDA device visible to torch")
    torch.cuda.set_device(0)
    return torch.device("cuda", 0)


def device_facts():
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}


def run_train(a):
    dev = need_cuda()
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    L, H, C, T, V, B = a.layers, a.heads, a.embd, a.seq, a.vocab, a.batch
    if C % H:
        print("pytorch_gpt2: --heads must divide --embd", file=sys.stderr)
        sys.exit(2)
    Vp = (V + a.pad_vocab - 1) // a.pad_vocab * a.pad_vocab
    model = GPT2(L, H, C, T, Vp).to(dev)
    nparams = sum(p.numel() for p in model.parameters()) - (Vp - V) * C
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if a.compile else model

    # a few batches of random tokens below V, rotated (not one cached batch)
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    batches = []
    for _ in range(4):
        tok = torch.randint(0, V, (B, T + 1), device=dev, generator=g)
        batches.append((tok[:, :-1].contiguous(), tok[:, 1:].contiguous()))

    def step(i):
        x, y = batches[i % len(batches)]
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t_warm = time.perf_counter()
    first_loss = None
    for i in range(a.warmup):
        loss = step(i)
        if first_loss is None:
            first_loss = float(loss)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t_warm
    print(f"pytorch_gpt2: {a.warmup} warm-up steps in {warm_s:.1f} s"
          f"{' (torch.compile included)' if a.compile else ''}", file=sys.stderr)

    ms = []
    for i in range(a.steps):
        t0 = time.perf_counter()
        loss = step(a.warmup + i)
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    last_loss = float(loss)
    med = statistics.median(ms)
    out = {"impl": "pytorch", "tok_s": round(B * T / (med * 1e-3), 1), "ms": round(med, 3),
           "ms_min": round(min(ms), 3), "params": nparams, "layers": L, "heads": H, "embd": C,
           "seq": T, "vocab": V, "padded_vocab": Vp, "batch": B, "steps": a.steps,
           "warmup": a.warmup, "compile": bool(a.compile),
           "loss_first": first_loss, "loss_last": last_loss,
           "max_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    out.update(device_facts())
    print(json.dumps(out))


def run_matmul_peak(a):
    dev = need_cuda()
    n, reps, rounds = a.matmul_n, 10, 5
    g = torch.Generator(device=dev)
    g.manual_seed(2)
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g)
    z = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(x, y, out=z)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    tf = []
    for _ in range(rounds):
        e0.record()
        for _ in range(reps):
            torch.matmul(x, y, out=z)
        e1.record()
        e1.synchronize()
        tf.append(2.0 * n ** 3 * reps / (e0.elapsed_time(e1) * 1e-3) / 1e12)
    if not torch.isfinite(z.float()).all():
        print("pytorch_gpt2: matmul produced non-finite values", file=sys.stderr)
        sys.exit(1)
    out = {"impl": "pytorch", "matmul_tflops": round(max(tf), 1),
           "matmul_tflops_median": round(statistics.median(tf), 1), "n": n, "dtype": "bf16",
           "rounds": rounds, "per_round": reps}
    out.update(device_facts())
    print(json.dumps(out))


def run_d2h(a):
    dev = need_cuda()
    nbytes = a.d2h
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    src.fill_(0x5A)
    dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst.zero_()  # first touch of the pinned pages, outside the timing
    torch.cuda.synchronize()
    dst.copy_(src, non_blocking=True)  # untimed warm-up copy
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev, wall = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        e0.record()
        dst.copy_(src, non_blocking=True)
        e1.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        ev.append(e0.elapsed_time(e1))
    if int(dst[0]) != 0x5A or int(dst[-1]) != 0x5A:
        print("pytorch_gpt2: the copied bytes are wrong", file=sys.stderr)
        sys.exit(1)
    best = min(ev)
    out = {"impl": "pytorch", "d2h_bytes": nbytes, "ms": round(best, 4),
           "gb_s": round(nbytes / (best * 1e-3) / 1e9, 2), "wall_ms": round(min(wall), 4),
           "ms_median": round(statistics.median(ev), 4), "reps": 5}
    out.update(device_facts())
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--pad-vocab", type=int, default=1,
                   help="round the embedding/classifier rows up to a multiple of this "
                        "(128 matches the worker's padded vocabulary)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=25, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--matmul-peak", action="store_true",
                   help="measure the achieved bf16 GEMM TFLOP/s instead")
    p.add_argument("--matmul-n", type=int, default=8192, help=argparse.SUPPRESS)
    p.add_argument("--d2h", type=int, metavar="BYTES",
                   help="measure a bare pinned device-to-host copy of BYTES instead")
    a = p.parse_args()
    if a.pad_vocab < 1 or a.steps < 1 or a.warmup < 0 or a.batch < 1:
        p.error("--pad-vocab, --steps, --batch must be >= 1 and --warmup >= 0")
    if a.matmul_peak:
        run_matmul_peak(a)
    elif a.d2h is not None:
        if a.d2h < 1:
            p.error("--d2h wants a positive byte count")
        run_d2h(a)
    else:
        run_train(a)


if __name__ == "__main__":
    main()
