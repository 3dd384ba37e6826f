#!/usr/bin/env bash
# Delta chunks on a real training run's states, beside what a user would use
# instead, measured in the same run on the same disk:
#   full size         the states' bytes
#   zstd -3           the CLI on each raw state file (rank 0's safetensors)
#   restic            Debian's restic 0.14 (a local repository, version 2,
#                     --compression max: zstd, content-defined chunking and
#                     deduplication), backing up the same raw state files one
#                     after the other
#   today             the store without deltas: byte shuffle + zstd -1
#   delta             the store with checkpoint.full_every 2 (the default), 4
#                     and 8: chains up to 1, 3 and 7 long; and with the Adam
#                     moments lossy (checkpoint.moments q8, bf16)
# for 20 successive checkpoints at intervals of 1 and 10 steps, of the demo
# model and of one with over 100 MB of state (weights and both Adam moments).
# Write throughput is the states' bytes over the time from submit to commit;
# restore throughput reads the newest checkpoint (the longest chain) back
# from a cold page cache, hash-verified (bench_delta.c).
# usage: bench/bench_delta.sh [BUILD_DIR]   (default build; BENCH_DELTA_QUICK=1:
# the demo model only; BENCH_DELTA_ONLY=NAME: that one of demo-every1,
# demo-every10, big-every1, big-every10)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B/bin/ftdata" synth --out "$T/synth" >/dev/null
export RESTIC_PASSWORD=bench RESTIC_CACHE_DIR=$T/restic-cache

one() { # NAME EVERY SETS...: train, then measure every codec on its states
  local name=$1 every=$2
  shift 2
  [ -z "${BENCH_DELTA_ONLY:-}" ] || [ "$BENCH_DELTA_ONLY" = "$name" ] || return 0
  local d=$T/$name
  mkdir -p "$d/raw"
  "$B/bin/worker" --standalone examples/demo.yaml --set "data.train=$T/synth_train_*.bin" \
    --set "data.val=$T/synth_val_*.bin" --set train.val_every=0 "$@" \
    --set checkpoint.full_every=1 --set checkpoint.keep_last=1000 \
    --steps $((20 * every)) --store "local:$d/src" --ckpt-every "$every" --quiet
  echo "== $name: 20 checkpoints, one every $every step(s) (${*:-the demo model})"
  "$B/bin/bench_delta" "local:$d/src" gpt2-tiny "$d/out" 1 2 4 8 2:q8 4:q8 4:bf16
  # the raw state files: rank 0's whole shard of every tensor, as safetensors
  local steps
  steps=$("$B/bin/ckpt" --store "local:$d/src" ls --json |
    python3 -c 'import json,sys; print(" ".join(str(c["step"]) for c in json.load(sys.stdin)))')
  for s in $steps; do
    mkdir -p "$d/raw/$s"
    "$B/bin/ckpt" --store "local:$d/src" restore "$s" --to "$d/raw/$s/" --world 1 --rank 0 \
      >/dev/null
  done
  local full zs t0 t1 rs
  full=$(cat "$d"/raw/*/*.safetensors | wc -c)
  t0=$(date +%s.%N)
  zs=0
  for f in "$d"/raw/*/*.safetensors; do
    zs=$((zs + $(zstd -3 -q -c "$f" | wc -c)))
  done
  t1=$(date +%s.%N)
  python3 -c "import sys; f,z,t=int(sys.argv[1]),int(sys.argv[2]),float(sys.argv[3])
print(f'%-36s %11.1f %6.2fx %11.0f' % ('zstd -3 (CLI, each file)', z/2**20, f/z, f/t/1e6))" \
    "$full" "$zs" "$(python3 -c "print($t1 - $t0)")"
  restic init -q --repo "$d/restic" >/dev/null
  t0=$(date +%s.%N)
  for s in $steps; do
    (cd "$d/raw/$s" && restic -q --repo "$d/restic" backup --compression max . >/dev/null)
  done
  t1=$(date +%s.%N)
  rs=$(du -sb "$d/restic" | cut -f1)
  python3 -c "import sys; f,z,t=int(sys.argv[1]),int(sys.argv[2]),float(sys.argv[3])
print(f'%-36s %11.1f %6.2fx %11.0f' % ('restic 0.14 (compression max)', z/2**20, f/z, f/t/1e6))" \
    "$full" "$rs" "$(python3 -c "print($t1 - $t0)")"
  printf '%-36s %11.1f\n' "full size (raw state files)" "$(python3 -c "print($full / 1048576)")"
  rm -rf "$d"
}

one demo-every1 1
one demo-every10 10
if [ -z "${BENCH_DELTA_QUICK:-}" ]; then
  big=(--set model.n_layer=4 --set model.n_embd=448)
  one big-every1 1 "${big[@]}"
  one big-every10 10 "${big[@]}"
fi
