#!/usr/bin/env bash
# bench_data_s3: training from a bucket beside training from local disk.
#
# 1. Here, on loopback: the demo's tiny model (examples/demo.yaml, one CPU
#    thread) trains STEPS steps on the same shards (ftdata synth, uploaded
#    with `ftdata synth --out s3://` to moto with signatures checked,
#    tests/integration/s3_lib.sh) from local files and from s3://, in
#    interleaved pairs (local, s3, local, s3, ...; each s3 run with an empty
#    cache directory, so every block is a GET), PAIRS pairs; it prints the
#    median training tokens/s of each (tokens of the steps / the steps'
#    time) and, for s3, block GETs and GET requests per second of the run.
#    Reference: the local run's tokens/s.
# 2. On the namespace Slurm cluster (tests/cluster/cluster.sh; root, else
#    skipped): a 2-host run under supervise with the slurm launcher, data on
#    the shared directory, which sets the limit: about twice the byte rate
#    it trained at (tokens/s x 2 bytes, printed); then, the head's link
#    limited with tc tbf (host_rate) to that, CL_PAIRS pairs of the same
#    local run (the reference: the supervisor on the head talks through
#    that link too) and the run with the data in a bucket on moto in the
#    head namespace (each with an empty cache directory), interleaved, so a
#    drift of the machine's load touches both alike; it prints the medians
#    and the median of the pairs' ratios. Target: the s3 run no slower
#    than the local one.
# Blocks of BLOCK bytes (16 KiB: 8 steps of the demo's data per block, so
# the runs issue GETs all along), prefetch PREFETCH blocks.
# usage: bench/bench_data_s3.sh [BUILD_DIR]   PAIRS (3) STEPS (300) LOOPBACK (1: part 1) CLUSTER (1)
#   the cluster part: CL_STEPS (200) CL_GLOBAL (128) CL_MICRO (64) CL_BLOCK (4096)
#   CL_PREFETCH (16) CL_TOKENS (2000000) CL_PAIRS (3)
set -euo pipefail
B=$(cd "${1:-build}" && pwd)
FT_SRC=$(cd "$(dirname "$0")/.." && pwd)
export FT_BIN=$B/bin
PAIRS=${PAIRS:-3}
STEPS=${STEPS:-300}
BLOCK=${BLOCK:-16384}
PREFETCH=${PREFETCH:-4}
# the cluster part (2.): its own geometry and a corpus it does not wrap
CL_STEPS=${CL_STEPS:-200}
CL_GLOBAL=${CL_GLOBAL:-128}
CL_MICRO=${CL_MICRO:-64}
CL_BLOCK=${CL_BLOCK:-4096}
CL_PREFETCH=${CL_PREFETCH:-16}
CL_TOKENS=${CL_TOKENS:-2000000}
CL_PAIRS=${CL_PAIRS:-3}
TOKENS_PER_STEP=1024 # demo.yaml: 16 sequences of 64 tokens
T=$(mktemp -d "${TMPDIR:-/tmp}/bench_data_s3.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; rm -rf "$T"' EXIT
s3_start >/dev/null
s3_mkbucket data
"$FT_BIN/ftdata" synth --out "$T/loc/synth" --tokens 300000 >/dev/null
"$FT_BIN/ftdata" synth --out s3://data/corpus/synth --tokens 300000 >/dev/null
for f in "$T"/loc/*.bin; do
  aws_s3 s3 cp --quiet "s3://data/corpus/${f##*/}" "$T/cmp.bin"
  cmp -s "$f" "$T/cmp.bin" || {
    echo "bench: the uploaded ${f##*/} differs from the local one" >&2
    exit 1
  }
done

# run NAME TRAIN VAL: one standalone run; prints "tok_s wall_s block_gets requests"
run() {
  local name=$1 a b
  a=$(date +%s.%N)
  "$FT_BIN/worker" --standalone "$FT_SRC/examples/demo.yaml" --set "data.train=$2" \
    --set "data.val=$3" --set nodes.device=cpu --steps "$STEPS" --quiet --threads 1 \
    --log-json "$T/$name.jsonl" 2>"$T/$name.err" || {
    echo "bench: worker ($name) failed: $(tail -3 "$T/$name.err")" >&2
    exit 1
  }
  b=$(date +%s.%N)
  python3 - "$T/$name.jsonl" "$T/$name.err" "$a" "$b" $TOKENS_PER_STEP <<'PY'
import json, re, sys
steps = [s for s in map(json.loads, open(sys.argv[1])) if "ms" in s and "step" in s]
ms = sum(s["ms"] for s in steps)
io = re.search(r"data: \S+train\S*: (\d+) block GETs(?: \(\d+ blocks\))?, \d+ header GETs, (\d+) requests",
               open(sys.argv[2]).read())
print(len(steps) * int(sys.argv[5]) / (ms / 1000.0), float(sys.argv[4]) - float(sys.argv[3]),
      io.group(1) if io else 0, io.group(2) if io else 0)
PY
}

if [ "${LOOPBACK:-1}" = 1 ]; then
echo "bench_data_s3: the demo model, $STEPS steps, 1 CPU thread; shards of 270000 + 30000 tokens;"
echo "  s3: moto (signatures checked) at $FT_S3_ENDPOINT, blocks of $BLOCK bytes, prefetch $PREFETCH"
: >"$T/local.txt"
: >"$T/s3.txt"
for i in $(seq 1 "$PAIRS"); do
  run "local$i" "$T/loc/synth_train_*.bin" "$T/loc/synth_val_*.bin" >>"$T/local.txt"
  FT_DATA_CACHE="$T/cache$i" FT_DATA_BLOCK_BYTES=$BLOCK FT_DATA_PREFETCH_BLOCKS=$PREFETCH \
    run "s3$i" "s3://data/corpus/synth_train_*.bin" "s3://data/corpus/synth_val_*.bin" >>"$T/s3.txt"
done
python3 - "$T/local.txt" "$T/s3.txt" "$PAIRS" <<'PY'
import statistics as st, sys
loc = [list(map(float, l.split())) for l in open(sys.argv[1])]
s3 = [list(map(float, l.split())) for l in open(sys.argv[2])]
med = lambda rows, i: st.median(r[i] for r in rows)
lt, s3t = med(loc, 0), med(s3, 0)
print(f"  {'local disk: training tokens/s (median of ' + sys.argv[3] + ')':52s} {lt:10.0f}   (reference)")
print(f"  {'s3://: training tokens/s':52s} {s3t:10.0f}   ({s3t / lt * 100:.0f}% of local disk)")
print(f"  {'s3:// / local, median of the pairs':52s} {st.median(b[0] / a[0] for a, b in zip(loc, s3)) * 100:9.0f}%"
      f"   (target: 100%; each pair run back to back)")
print(f"  {'s3://: block GETs per run, requests per run':52s} {med(s3, 2):5.0f} {med(s3, 3):5.0f}")
print(f"  {'s3://: GET requests/s of the run (wall)':52s} {st.median(r[3] / r[1] for r in s3):10.1f}"
      f"   (local: none; S3 allows 5500/s per prefix)")
PY
fi

# ---- 2. the namespace cluster, the bucket's link limited ----------------------------
[ "${CLUSTER:-1}" = 1 ] || exit 0
s3_stop
(
  . "$FT_SRC/tests/cluster/lib.sh"
  reason=$(cluster_can_run) || {
    echo "  cluster part skipped: $reason"
    exit 0
  }
  ftc_begin 2 >/dev/null
  export FTC_MIN_STEP_MS=0
  # the rate of one run: the median of the supervisor's per-step tok/s
  rate() { grep -o '([0-9]* tok/s)' "$1" | tr -d '(' | python3 -c '
import statistics, sys
v = [float(l.split()[0]) for l in sys.stdin]
print(int(statistics.median(v[len(v) // 5:])))'; }
  # a host's window (micro_batch x seq_len x 2 bytes) several blocks wide,
  # as on a real cluster (docs/data.md "Request rates": a host downloads
  # 1 + block/window times what it uses); the demo's 1 KiB windows are
  # smaller than the smallest block, so there each host would read the
  # whole stream (2x the bytes at 2 hosts, all of the link's limit)
  geo=(-e "s|  global_batch: 16 .*|  global_batch: $CL_GLOBAL|" -e "s|  micro_batch: 8 .*|  micro_batch: $CL_MICRO|")
  "$FT_BIN/ftdata" synth --out "$RUN/synth" --tokens "$CL_TOKENS" >/dev/null
  ftc_runfile "$RUN/local.yaml" "$CL_STEPS" "local:$C/shared/ckpt-local" "${geo[@]}"
  ftc_supervise "$RUN/st-local" 2 "$RUN/local.yaml"
  ftc_finish
  lt0=$(rate "$RUN/st-local.out")
  bps=$((lt0 * 2))
  limit=$((bps * 2 * 8 / 1000))
  # the reference: the same local run with the head's link limited too (the
  # supervisor runs on the head: its control traffic crosses that link in
  # both runs, so the two differ only in where the data comes from)
  ftc_moto ftsup-data >/dev/null
  cluster_exec head "$FT_BIN/ftdata" synth --out s3://ftsup-data/corpus/synth --tokens "$CL_TOKENS" >/dev/null
  export FT_DATA_BLOCK_BYTES=$CL_BLOCK FT_DATA_PREFETCH_BLOCKS=$CL_PREFETCH
  : >"$RUN/pairs.txt"
  for i in $(seq 1 "$CL_PAIRS"); do
    ftc_runfile "$RUN/local$i.yaml" "$CL_STEPS" "local:$C/shared/ckpt-local$i" "${geo[@]}"
    host_rate head "${limit}kbit"
    ftc_supervise "$RUN/st-local$i" 2 "$RUN/local$i.yaml"
    ftc_finish
    host_rate head off
    ftc_runfile "$RUN/s3$i.yaml" "$CL_STEPS" "local:$C/shared/ckpt-s3$i" "${geo[@]}" \
      -e 's|^data:.*|data: {train: "s3://ftsup-data/corpus/synth_train_*.bin", val: "s3://ftsup-data/corpus/synth_val_*.bin"}|'
    host_rate head "${limit}kbit"
    FT_DATA_CACHE=$C/local/datacache$i ftc_supervise "$RUN/st-s3$i" 2 "$RUN/s3$i.yaml"
    ftc_finish
    host_rate head off
    echo "$(rate "$RUN/st-local$i.out") $(rate "$RUN/st-s3$i.out")" >>"$RUN/pairs.txt"
  done
  read -r lt st ratio < <(python3 -c '
import statistics as s, sys
r = [list(map(float, l.split())) for l in open(sys.argv[1])]
print(int(s.median(a for a, b in r)), int(s.median(b for a, b in r)), int(s.median(b / a for a, b in r) * 100))' "$RUN/pairs.txt")
  gets=$(grep -c '"GET /ftsup-data/corpus/synth_train_000.bin HTTP/1.1" 206' "$TMP/moto.log") || true
  echo "  cluster: 2 hosts (namespaces), supervise + slurm launcher, $CL_STEPS steps of $CL_GLOBAL sequences"
  echo "  (micro-batch $CL_MICRO: a host's window $((CL_MICRO * 128)) bytes), blocks of $CL_BLOCK bytes, prefetch $CL_PREFETCH"
  printf '  %-52s %10s\n' "local (shared dir), head's link free: tokens/s" "$lt0"
  printf '  %-52s %10s   (%s bytes/s of tokens)\n' "  its byte rate" "$bps" "$bps"
  printf '  %-52s %10s   (about 2x the byte rate)\n' "head's link (moto, supervisor) limited to, kbit/s" "$limit"
  printf '  %-52s %10s   (reference; median of %s)\n' "local (shared dir) with that limit: tokens/s" "$lt" "$CL_PAIRS"
  printf '  %-52s %10s   (%s%% of local)\n' "s3:// through that link: training tokens/s" "$st" \
    "$((st * 100 / lt))"
  printf '  %-52s %9s%%   (target >= 100%%; each pair run back to back)\n' "s3:// / local, median of the pairs" "$ratio"
  printf '  %-52s %10s\n' "  ranged GETs of the train shard, all s3 runs (moto's log)" "$gets"
)
