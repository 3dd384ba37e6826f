#!/usr/bin/env bash
# bench_gpu_train: the CUDA trainer (worker, nodes.device: cuda) beside
# PyTorch in the same run, on GPU 0.
#
#  1. tokens/s and MFU of GPT-2 124M (12 layers, 12 heads, 768 channels) and
#     350M (24, 16, 1024) at seq_len T = 1024, vocab 50257, one micro-step per
#     optimizer step (micro batch = global batch = B: 16 for 124M, 8 for 350M),
#     for our worker and for bench/pytorch_gpt2.py (--compile, bf16 autocast,
#     fused AdamW) with the same model, batch and vocabulary padding;
#     (plus, with GPU_BENCH_SIMT=1, the default, the worker with
#     FT_ATTENTION=simt: the fp32 CUDA-core attention instead of the
#     tensor-core one, a row "ftsup-simt" that cannot fail the run);
#  2. the checkpoint stall: the worker again on 124M with --store local:DIR
#     --ckpt-every 25 (GPU_BENCH_CKPT_EVERY), 4 checkpoints; the median stall
#     per checkpoint (ckpt_stall_ms, the time snap_take held the loop, plus
#     the next step's ckpt_fence_ms, the time its optimizer waited for the
#     device-to-host copy) beside a bare pinned
#     D2H copy of the same ckpt_bytes through our C API (bench_gpu_copy) and
#     through PyTorch (pytorch_gpt2.py --d2h).
#
# FLOPs per token of one training step (forward + backward), PaLM (Chowdhery
# et al. 2022) appendix B:
#     flops_per_token = 6*N + 12*L*T*C
# N = the parameters used in matmuls: all parameters minus wpe (the learned
# positions are a lookup); wte counts, once, because it is also the
# classifier; the vocabulary padding is not counted. L layers, T context,
# C channels; 12*L*T*C is attention's QK^T and AV (forward + backward,
# causality ignored, as the formula does).
#     MFU = tokens/s * flops_per_token / peak
# peak = 989e12 FLOP/s (H100/H200 SXM dense bf16, the vendor's datasheet);
# the achieved bf16 matmul rate measured in this run (8192^3 torch.matmul,
# pytorch_gpt2.py --matmul-peak) is printed beside it, with MFU against it.
#
# Step time: each run is GPU_BENCH_STEPS (30) optimizer steps; the figure is
# the median over the steps after the first 5 (warm-up: cuBLASLt algorithm
# choice, torch.compile).
#
# usage: bench/gpu_train.sh [BUILD_DIR]      (default: $FT_BIN/.., else build)
#   FT_BIN     the folder holding worker, ftdata, bench_gpu_copy (the CTest
#              registration and gpu-bundle/env.sh set it)
#   B124, B350 batch sizes (16, 8); GPU_BENCH_STEPS (30); GPU_BENCH_MODELS
#              ("124M 350M"; "tiny" is a 2-layer model for checking the script)
#   GPU_BENCH_CKPT_EVERY (25): the stall run's interval; it runs 4 of them
#   GPU_BENCH_SEQ (1024), GPU_BENCH_PRECISION (bf16), GPU_BENCH_PEAK (989e12)
#   GPU_BENCH_TIMEOUT  seconds per worker/PyTorch run (900)
#   GPU_BENCH_KEEP=DIR leave the logs there as gpu_bench_logs.tgz
#   GPU_BENCH_NO_TORCH=1  skip the PyTorch column; PYTHON (python3)
#   GPU_BENCH_DEVICE (cuda) and GPU_BENCH_FORCE=1 (skip the GPU check): only
#              for exercising this script on a machine without a GPU
# Exit: 0 all measured; 77 no GPU visible (skipped); 1 a run failed (the
# rest still run and print).
set -uo pipefail

FT_SRC=${FT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
if [ $# -ge 1 ]; then
  FT_BIN=$(cd "$1" && pwd)/bin
fi
FT_BIN=${FT_BIN:-$FT_SRC/build/bin}
PY=${PYTHON:-python3}
DEVICE=${GPU_BENCH_DEVICE:-cuda}
STEPS=${GPU_BENCH_STEPS:-30}
CKE=${GPU_BENCH_CKPT_EVERY:-25}
SEQ=${GPU_BENCH_SEQ:-1024}
VOCAB=50257
PREC=${GPU_BENCH_PRECISION:-bf16}
PEAK=${GPU_BENCH_PEAK:-989e12}
TMO=${GPU_BENCH_TIMEOUT:-900}
MODELS=${GPU_BENCH_MODELS:-124M 350M}
B124=${B124:-16}
B350=${B350:-8}

# ---- a GPU, or skip ---------------------------------------------------------
if [ "${GPU_BENCH_FORCE:-0}" != 1 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "bench_gpu_train: no GPU visible (nvidia-smi -L lists none): skipped"
    exit 77
  fi
fi
for b in worker ftdata bench_gpu_copy; do
  if [ ! -x "$FT_BIN/$b" ]; then
    echo "bench_gpu_train: $FT_BIN/$b is missing (build with -DWITH_CUDA=ON, or source gpu-bundle/env.sh)" >&2
    exit 1
  fi
done

# Python runs with the environment it had before gpu-bundle/env.sh put the
# bundle's older libstdc++ and the CUDA toolkit's libraries first on
# LD_LIBRARY_PATH (torch brings its own).
py() {
  if [ -n "${FT_BUNDLE:-}" ]; then
    LD_LIBRARY_PATH="${FT_PY_LD_LIBRARY_PATH:-}" "$PY" "$@"
  else
    "$PY" "$@"
  fi
}
HAVE_TORCH=0
TORCH_WHY="GPU_BENCH_NO_TORCH=1"
if [ "${GPU_BENCH_NO_TORCH:-0}" != 1 ]; then
  if TORCH_WHY=$(py -c 'import torch, sys
sys.exit(0) if torch.cuda.is_available() else sys.exit("torch " + torch.__version__ + " sees no CUDA device")' 2>&1); then
    HAVE_TORCH=1
  else
    TORCH_WHY=$(printf '%s' "$TORCH_WHY" | tail -n 1)
  fi
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/gpu_bench.XXXXXX")
cleanup() {
  if [ -n "${GPU_BENCH_KEEP:-}" ]; then
    mkdir -p "$GPU_BENCH_KEEP" &&
      tar czf "$GPU_BENCH_KEEP/gpu_bench_logs.tgz" -C "$T" --exclude='*.bin' --exclude=store . 2>/dev/null
  fi
  rm -rf "$T"
}
trap cleanup EXIT
FAILED=0
R="$T/results.jsonl" # one JSON object per measurement, read by the table at the end
: >"$R"

dims() { # name -> "L H C B"
  case $1 in
  124M) echo "12 12 768 $B124" ;;
  350M) echo "24 16 1024 $B350" ;;
  tiny) echo "2 2 128 ${BTINY:-2}" ;;
  *) echo "bench_gpu_train: unknown model '$1' (124M, 350M, tiny)" >&2; return 1 ;;
  esac
}

echo "== bench_gpu_train: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || echo "no nvidia-smi")"
echo "   binaries: $FT_BIN; PyTorch: $([ $HAVE_TORCH = 1 ] && py -c 'import torch; print(torch.__version__)' || echo "not used ($TORCH_WHY)")"

# ---- the bf16 matmul peak, measured ------------------------------------------
if [ $HAVE_TORCH = 1 ]; then
  if py "$FT_SRC/bench/pytorch_gpt2.py" --matmul-peak >"$T/peak.json" 2>"$T/peak.err"; then
    tail -n 1 "$T/peak.json" >>"$R"
  else
    echo "bench_gpu_train: pytorch_gpt2.py --matmul-peak failed:" >&2
    tail -n 5 "$T/peak.err" >&2
  fi
fi

# ---- data: enough synthetic tokens that no run wraps around -----------------
maxb=1
for m in $MODELS; do
  read -r _ _ _ b < <(dims "$m") || exit 1
  [ "$b" -gt "$maxb" ] && maxb=$b
done
ntok=$(((STEPS + 2) * maxb * (SEQ + 1) + 100000))
if ! "$FT_BIN/ftdata" synth --out "$T/synth" --tokens "$ntok" --val-frac 0 >"$T/ftdata.log" 2>&1; then
  cat "$T/ftdata.log" >&2
  exit 1
fi

runfile() { # name L H C B -> path of a run file
  local f="$T/run_$1.yaml"
  cat >"$f" <<EOF
# written by bench/gpu_train.sh: GPT-2 $1, one micro-step per optimizer step
run: bench-gpt2-$1
model: {n_layer: $2, n_head: $3, n_embd: $4, vocab_size: $VOCAB, seq_len: $SEQ}
train:
  steps: $STEPS
  global_batch: $5
  micro_batch: $5
  lr: 3.0e-4
  warmup: 5
  schedule: cosine
  weight_decay: 0.1
  grad_clip: 1.0
  seed: 1337
  precision: $PREC
data: {train: "$T/synth_train_*.bin", val: ""}
nodes: {count: 1, workers_per_node: 1, device: $DEVICE}
checkpoint: {every_steps: 5, store: "local:$T/store_$1", keep_last: 2}
EOF
  echo "$f"
}

# worker_run TAG RUNFILE [extra worker args]: trains; appends its figures to $R
worker_run() {
  local tag=$1 rf=$2
  shift 2
  local log="$T/worker_$tag.jsonl"
  rm -f "$log"
  local t0=$SECONDS
  if timeout "$TMO" "$FT_BIN/worker" --standalone "$rf" --set "nodes.device=$DEVICE" --steps "${WSTEPS:-$STEPS}" \
    --log-json "$log" --quiet "$@" >"$T/worker_$tag.out" 2>"$T/worker_$tag.err"; then
    :
  else
    local rc=$?
    echo "bench_gpu_train: worker ($tag) failed with exit code $rc after $((SECONDS - t0)) s:" >&2
    tail -n 8 "$T/worker_$tag.err" "$T/worker_$tag.out" >&2
    FAILED=1
    echo "{\"impl\":\"worker\",\"tag\":\"$tag\",\"failed\":$rc}" >>"$R"
    return 1
  fi
  # the median over the steps after the first 5, and the checkpoint fields
  py - "$log" "$tag" >>"$R" <<'EOF'
import json, statistics, sys
log, tag = sys.argv[1], sys.argv[2]
steps = []
for line in open(log):
    line = line.strip()
    if line:
        o = json.loads(line)
        if "ms" in o and "step" in o:
            steps.append(o)
steps.sort(key=lambda o: o["step"])
timed = steps[5:] if len(steps) > 5 else steps
out = {"impl": "worker", "tag": tag, "steps": len(steps), "timed": len(timed)}
if timed:
    out["ms"] = statistics.median(o["ms"] for o in timed)
    out["tok_s"] = statistics.median(o["tok_s"] for o in timed)
    out["loss_first"], out["loss_last"] = steps[0].get("loss"), steps[-1].get("loss")
# A checkpoint's stall = the time snap_take held the loop (enqueueing the
# copy) + the time the next step's optimizer waited for the copy to finish
# (ckpt_fence_ms on that next line; absent when the copy was already done).
by_step = {o["step"]: o for o in steps}
for o in steps:
    if "ckpt_stall_ms" in o:
        o["ckpt_stall_ms"] += by_step.get(o["step"] + 1, {}).get("ckpt_fence_ms", 0.0)
ck = [o for o in steps if "ckpt_stall_ms" in o]
if ck:
    out["ckpt_stall_ms"] = statistics.median(o["ckpt_stall_ms"] for o in ck)
    out["ckpt_stall_ms_all"] = [o["ckpt_stall_ms"] for o in ck]
    out["ckpt_bytes"] = int(statistics.median(o.get("ckpt_bytes", 0) for o in ck))
    out["ckpts"] = len(ck)
print(json.dumps(out))
EOF
}

# torch_run TAG L H C B: the PyTorch reference with the same model and batch
torch_run() {
  local tag=$1
  if [ $HAVE_TORCH != 1 ]; then
    return 0
  fi
  local warm=5 timed=$((STEPS - 5))
  [ $timed -lt 1 ] && timed=1
  if py_timeout "$FT_SRC/bench/pytorch_gpt2.py" --layers "$2" --heads "$3" --embd "$4" --seq "$SEQ" \
      --vocab "$VOCAB" --pad-vocab 128 --batch "$5" --steps "$timed" --warmup "$warm" --compile \
      >"$T/torch_$tag.json" 2>"$T/torch_$tag.err"; then
    tail -n 1 "$T/torch_$tag.json" | py -c 'import json, sys
o = json.loads(sys.stdin.read()); o["tag"] = sys.argv[1]; print(json.dumps(o))' "$tag" >>"$R"
  else
    echo "bench_gpu_train: pytorch_gpt2.py ($tag) failed:" >&2
    tail -n 8 "$T/torch_$tag.err" >&2
    FAILED=1
    echo "{\"impl\":\"pytorch\",\"tag\":\"$tag\",\"failed\":1}" >>"$R"
  fi
}
py_timeout() {
  if [ -n "${FT_BUNDLE:-}" ]; then
    LD_LIBRARY_PATH="${FT_PY_LD_LIBRARY_PATH:-}" timeout "$TMO" "$PY" "$@"
  else
    timeout "$TMO" "$PY" "$@"
  fi
}

# ---- 1. throughput -----------------------------------------------------------
for m in $MODELS; do
  read -r L H C B < <(dims "$m") || exit 1
  rf=$(runfile "$m" "$L" "$H" "$C" "$B")
  echo "   GPT-2 $m (L=$L H=$H C=$C T=$SEQ B=$B): worker..."
  worker_run "$m" "$rf"
  if [ "${GPU_BENCH_SIMT:-1}" = 1 ]; then # the fp32 attention the tensor-core one replaced
    echo "   GPT-2 $m: worker with FT_ATTENTION=simt..."
    f0=$FAILED
    FT_ATTENTION=simt worker_run "${m}_simt" "$rf" || true
    FAILED=$f0 # a comparison row does not fail the benchmark
  fi
  if [ $HAVE_TORCH = 1 ]; then
    echo "   GPT-2 $m: PyTorch (torch.compile)..."
    torch_run "$m" "$L" "$H" "$C" "$B"
  fi
done

# ---- 2. the checkpoint stall ----------------------------------------------------
cm=124M
case " $MODELS " in *" 124M "*) ;; *) cm=${MODELS%% *} ;; esac
read -r L H C B < <(dims "$cm") || exit 1
rf=$(runfile "$cm" "$L" "$H" "$C" "$B")
echo "   checkpoint stall: worker $cm with --store local:DIR --ckpt-every $CKE, $((CKE * 4)) steps..."
if WSTEPS=$((CKE * 4)) worker_run "ckpt_$cm" "$rf" --store "local:$T/store_ckpt" --ckpt-every "$CKE"; then
  bytes=$(tail -n 1 "$R" | py -c 'import json, sys; print(json.loads(sys.stdin.read()).get("ckpt_bytes", 0))')
  if [ "${bytes:-0}" -gt 0 ]; then
    if "$FT_BIN/bench_gpu_copy" "$bytes" 5 >"$T/copy_kc.out" 2>"$T/copy_kc.err"; then
      tail -n 1 "$T/copy_kc.out" >>"$R"
    else
      echo "bench_gpu_copy $bytes failed:" >&2
      tail -n 5 "$T/copy_kc.err" >&2
      FAILED=1
    fi
    if [ $HAVE_TORCH = 1 ]; then
      if py "$FT_SRC/bench/pytorch_gpt2.py" --d2h "$bytes" >"$T/copy_torch.json" 2>"$T/copy_torch.err"; then
        tail -n 1 "$T/copy_torch.json" >>"$R"
      else
        echo "pytorch_gpt2.py --d2h $bytes failed:" >&2
        tail -n 5 "$T/copy_torch.err" >&2
        FAILED=1
      fi
    fi
  else
    echo "bench_gpu_train: the worker's log has no ckpt_stall_ms/ckpt_bytes" >&2
    FAILED=1
  fi
fi

# ---- the table ------------------------------------------------------------------------
py - "$R" "$PEAK" "$SEQ" "$VOCAB" "$HAVE_TORCH" "$TORCH_WHY" "$MODELS" "$B124" "$B350" "${BTINY:-2}" "$CKE" <<'EOF'
import json, sys
path, peak, T, V = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
have_torch, why, models = sys.argv[5] == "1", sys.argv[6], sys.argv[7].split()
batch = {"124M": int(sys.argv[8]), "350M": int(sys.argv[9]), "tiny": int(sys.argv[10])}
cke = int(sys.argv[11])
dims = {"124M": (12, 12, 768), "350M": (24, 16, 1024), "tiny": (2, 2, 128)}
rs = [json.loads(l) for l in open(path) if l.strip()]
mm = next((r["matmul_tflops"] * 1e12 for r in rs if "matmul_tflops" in r), None)

def get(impl, tag):
    return next((r for r in rs if r.get("impl") == impl and r.get("tag") == tag), None)

print()
print("FLOPs per token = 6*N + 12*L*T*C   (PaLM appendix B; N = parameters used in matmuls:")
print("                  all minus wpe, wte counted once as the classifier, no vocab padding)")
print(f"MFU = tokens/s * FLOPs per token / peak, peak = {peak/1e12:.0f} TFLOP/s (H100/H200 SXM dense bf16 datasheet)")
print("measured bf16 matmul peak (8192^3 torch.matmul, best of 5x10): " +
      (f"{mm/1e12:.0f} TFLOP/s ({100*mm/peak:.0f}% of the datasheet)" if mm else
       "not measured (" + (why if not have_torch else "failed") + ")"))
print()
hdr = f"{'model':6} {'B':>3} {'N (M)':>7} {'GFLOP/tok':>9}  {'impl':8} {'ms/step':>8} {'tokens/s':>10} {'MFU':>6} {'of measured':>11}"
print(hdr)
print("-" * len(hdr))
for m in models:
    L, H, C = dims[m]
    N = V * C + L * (12 * C * C + 13 * C) + 2 * C
    fpt = 6 * N + 12 * L * T * C
    first = True
    for impl, label, tag in (("worker", "ftsup", m), ("worker", "ftsup-simt", m + "_simt"),
                             ("pytorch", "pytorch", m)):
        r = get(impl, tag)
        if label == "ftsup-simt" and r is None:
            continue
        lead = f"{m:6} {batch[m]:3d} {N/1e6:7.1f} {fpt/1e9:9.3f}" if first else " " * 28
        first = False
        if impl == "pytorch" and not have_torch:
            print(f"{lead}  {label:8} {'-':>8} {'-':>10} {'-':>6} {'-':>11}  (no PyTorch: {why})")
            continue
        if r is None or "tok_s" not in r:
            print(f"{lead}  {label:8} {'failed':>8}")
            continue
        tok = r["tok_s"]
        mfu = tok * fpt / peak
        of_mm = f"{100*tok*fpt/mm:10.1f}%" if mm else f"{'-':>11}"
        print(f"{lead}  {label:8} {r['ms']:8.1f} {tok:10.0f} {100*mfu:5.1f}% {of_mm}")
    w, p = get("worker", m), get("pytorch", m)
    if w and p and "tok_s" in w and "tok_s" in p:
        print(" " * 30 + f"ftsup / pytorch = {w['tok_s']/p['tok_s']:.2f}x")

ck = next((r for r in rs if r.get("impl") == "worker" and str(r.get("tag", "")).startswith("ckpt_")), None)
kc = next((r for r in rs if r.get("impl") == "kc"), None)
tc = next((r for r in rs if r.get("impl") == "pytorch" and "d2h_bytes" in r), None)
print()
if ck and "ckpt_stall_ms" in ck:
    nb = ck["ckpt_bytes"]
    print(f"checkpoint ({ck['tag'][5:]}, every {cke} steps, {ck['ckpts']} checkpoints, {nb/1e6:.1f} MB off the device each):")
    print("  stall at each checkpoint: " + " ".join(f"{x:.1f}" for x in ck["ckpt_stall_ms_all"]) +
          f" ms (median {ck['ckpt_stall_ms']:.2f} ms)")
    base = get("worker", ck["tag"][5:])
    if base and "ms" in base and "ms" in ck:
        print(f"  median step with checkpoints every {cke} steps {ck['ms']:.1f} ms, without {base['ms']:.1f} ms")
        print(f"  (a checkpoint finds the previous one still being written when the store commits slower than "
              f"{nb / 1e6 / (cke * ck['ms']):.2f} GB/s; its stall then includes that wait)")
    if kc:
        print(f"checkpoint stall {ck['ckpt_stall_ms']:.2f} ms vs bare D2H copy of the same bytes "
              f"{kc['ms']:.2f} ms (bench_gpu_copy, kernels_cuda.h: {kc['gb_s']:.1f} GB/s, host clock {kc['wall_ms']:.2f} ms)"
              f" = {ck['ckpt_stall_ms']/kc['ms']:.2f}x")
    if tc:
        print(f"checkpoint stall {ck['ckpt_stall_ms']:.2f} ms vs bare D2H copy of the same bytes "
              f"{tc['ms']:.2f} ms (PyTorch pinned copy_: {tc['gb_s']:.1f} GB/s, host clock {tc['wall_ms']:.2f} ms)")
    elif not have_torch:
        print(f"  (PyTorch D2H copy not measured: {why})")
elif ck:
    print("checkpoint stall: the worker's log has no ckpt_stall_ms")
else:
    print("checkpoint stall: not measured (the worker failed)")
EOF
[ $FAILED = 0 ] || exit 1
exit 0
