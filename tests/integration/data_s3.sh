#!/usr/bin/env bash
# data_s3: training data straight from a bucket (worker/data_s3.c,
# docs/data.md) against moto with every signature checked (s3_lib.sh).
# Shards made locally (ftdata synth), uploaded with the aws cli, then:
#   - `ftdata stats s3://...` sees what it sees of the local copies, and the
#     glob matches one '/' level only (decoys under the prefix are ignored);
#   - a worker trained on s3:// data gives the same bits as on the local
#     files: every step's loss, the validation loss and the exported model
#     file byte for byte; it prints its GETs (the test reports GETs per step);
#   - the cache directory stays within FT_DATA_CACHE_BYTES although the data
#     is bigger (blocks were evicted), and a second run on a cache big enough
#     for the data reads every block from it (no block GET; headers of shards
#     whose first block no run read are still GETs) with the same bits; a
#     cache file damaged then (a byte changed) fails its SHA-256: that
#     block alone is fetched again, same bits;
#   - two ranks (--world 2) on one host, sharing the cache directory and the
#     recorded listing: the same bits as two ranks on the local files, each
#     block fetched once for the host (blocks fetched by both ranks = block
#     files in the cache) and the headers read by one rank only;
#   - world 4 as two hosts of two ranks (each pair its own cache directory):
#     the same losses as the local run; with the trainer's hint a host GETs
#     only the blocks that overlap its ranks' windows (the expected set
#     computed from the geometry: every one it needs, none of the other
#     host's), each once, the blocks of a window with one GET (fewer than
#     2 GETs per step), and downloads at most twice the bytes it uses (the
#     test prints GETs per step and the ratio);
#   - the data bucket's own endpoint (FT_DATA_S3_ENDPOINT, while the store's
#     FT_S3_ENDPOINT points nowhere): a fault proxy (chaos/s3_faults.py) in
#     front of moto answers HTTP 500 to some block GETs: they are retried
#     and the run ends with the same bits; answering 500 for good, past
#     FT_S3_RETRIES, the worker stops with a message naming the key and
#     the HTTP 500 (a storage fault: data_err_is_storage; the exit code the
#     supervisor gets is train.c's, see docs/data.md);
#   - the recorded listing (FT_DATA_LISTING): the first run lists and records
#     both patterns; a shard added under the glob (sorting first) afterwards
#     changes nothing for a run that reads the record (same bits, no LIST,
#     no header GET), while a run that lists again trains on other data;
#   - a shard overwritten in the bucket after the listing (a new ETag): the
#     worker stops with exit 3 (FT_EXIT_DATA) and a message naming the key
#     and saying it changed since it was listed; one deleted: exit 3, naming
#     the key, "no such object".
. "$(dirname "$0")/lib.sh"
T=$TMP
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; [ -n "${KEEP:-}" ] || cleanup' EXIT
s3_start
s3_mkbucket data

mkdir -p "$TMP/loc" "$TMP/other"
"$FT_BIN/ftdata" synth --out "$TMP/loc/synth" --tokens 300000 --shard-tokens 60000 >/dev/null
"$FT_BIN/ftdata" synth --out "$TMP/other/x" --tokens 50000 --seed 7 --val-frac 0 >/dev/null
aws_s3 s3 cp --recursive --exclude '*' --include 'synth_*.bin' "$TMP/loc" s3://data/corpus/ \
  >/dev/null || fail "upload"
# decoys: another '/' level and another suffix under the listed prefix
aws_s3 s3 cp "$TMP/loc/synth_train_000.bin" s3://data/corpus/synth_train_9/x.bin >/dev/null
aws_s3 s3 cp "$TMP/loc/synth_val_000.bin" s3://data/corpus/synth_train_x.txt >/dev/null
S3_TRAIN="s3://data/corpus/synth_train_*.bin"
S3_VAL="s3://data/corpus/synth_val_*.bin"

# ---- ftdata stats ---------------------------------------------------------------
export FT_DATA_CACHE="$TMP/statcache"
"$FT_BIN/ftdata" stats --json "$S3_TRAIN" >"$TMP/s3.json" 2>"$TMP/s3.err" ||
  fail "ftdata stats $S3_TRAIN: $(cat "$TMP/s3.err")"
"$FT_BIN/ftdata" stats --json "$TMP/loc/synth_train_*.bin" >"$TMP/loc.json"
python3 - "$TMP/s3.json" "$TMP/loc.json" <<'PY' || fail "ftdata stats on s3:// differs from the local files"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
a.pop("glob"); b.pop("glob")
assert a == b, (a, b)
assert a["shards"] == 5, a
PY
pass "ftdata stats s3://: 5 shards, the same numbers as the local copies (decoys ignored)"

# ---- bit identity, GETs per step, the cache bound -------------------------------
STEPS=40
BLOCK=16384
BOUND=50000 # three blocks; the run reads about seven, the train data is 33
train() { # NAME TRAIN VAL [worker args...]
  local name=$1 tr=$2 va=$3
  shift 3
  "$FT_BIN/worker" --standalone "$FT_SRC/examples/demo.yaml" --set "data.train=$tr" \
    --set "data.val=$va" --set nodes.device=cpu --steps $STEPS --quiet --threads 1 \
    --log-json "$TMP/$name.jsonl" --export "$TMP/$name.safetensors" "$@" 2>"$TMP/$name.err" ||
    fail "worker ($name): exit $? $(tail -5 "$TMP/$name.err")"
}
train local "$TMP/loc/synth_train_*.bin" "$TMP/loc/synth_val_*.bin"
FT_DATA_CACHE="$TMP/cache" FT_DATA_BLOCK_BYTES=$BLOCK FT_DATA_CACHE_BYTES=$BOUND \
  FT_DATA_PREFETCH_BLOCKS=2 train s3 "$S3_TRAIN" "$S3_VAL"
[ "$(losses "$TMP/s3.jsonl")" = "$(losses "$TMP/local.jsonl")" ] ||
  fail "losses differ: s3 $(losses "$TMP/s3.jsonl" | tail -2) local $(losses "$TMP/local.jsonl" | tail -2)"
vals() { grep -o '"val_loss":[^,}]*' "$1"; }
[ -n "$(vals "$TMP/s3.jsonl")" ] && [ "$(vals "$TMP/s3.jsonl")" = "$(vals "$TMP/local.jsonl")" ] ||
  fail "validation losses differ"
cmp "$TMP/s3.safetensors" "$TMP/local.safetensors" || fail "the exported models differ"
pass "s3:// run = local run: $STEPS losses, val loss and the model file bit for bit"

line=$(grep -F "data: $S3_TRAIN:" "$TMP/s3.err") || fail "no I/O line for the train data: $(cat "$TMP/s3.err")"
gets=$(echo "$line" | sed -E 's/.*: ([0-9]+) block GETs.*/\1/')
evicted=$(echo "$line" | sed -E 's/.* ([0-9]+) evicted$/\1/')
echo "measured: $line"
python3 -c "import sys; print('measured: %d block GETs over %d steps = %.3f GETs per step (block %d bytes)' % (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[1]) / int(sys.argv[2]), int(sys.argv[3])))" "$gets" $STEPS $BLOCK
[ "$gets" -gt 0 ] || fail "no block GET counted: $line"
[ "$gets" -lt $STEPS ] || fail "$gets block GETs for $STEPS steps: reads are not coalesced"
size=$(find "$TMP/cache" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
[ "$size" -le $BOUND ] || fail "cache directory holds $size bytes, over the bound $BOUND"
[ "$evicted" -gt 0 ] || fail "nothing evicted: the bound was not exercised ($line)"
pass "cache directory $size bytes <= $BOUND ($evicted blocks evicted)"

# a cache big enough for the data: the second run reads every block from it
# (no prefetch: a prefetcher reads ahead of the last step, and how far it
# got when the first run ended varies, so the second could find a block
# ahead of the first's last one missing and GET it: seen once in 6 runs)
export FT_DATA_CACHE="$TMP/cache2" FT_DATA_BLOCK_BYTES=$BLOCK FT_DATA_CACHE_BYTES=$((64 << 20))
export FT_DATA_PREFETCH_BLOCKS=0
train warm1 "$S3_TRAIN" "$S3_VAL"
train warm2 "$S3_TRAIN" "$S3_VAL"
unset FT_DATA_BLOCK_BYTES FT_DATA_CACHE_BYTES FT_DATA_PREFETCH_BLOCKS
cmp "$TMP/warm2.safetensors" "$TMP/local.safetensors" || fail "the warm-cache run's model differs"
line=$(grep -F "data: $S3_TRAIN:" "$TMP/warm2.err")
echo "$line" | grep -q ": 0 block GETs (0 blocks)," || fail "a warm cache still read the bucket: $line"
pass "warm cache: $line"

# a cache file damaged (a crash tore it: files are written without fsync,
# each with its bytes' SHA-256 at its end): refused, fetched again, same bits
victim=$(find "$TMP/cache2" -name '*_[1-9].blk' | head -1)
[ -n "$victim" ] || fail "no cache file of a block other than 0 in $TMP/cache2"
printf '\377\377' | dd of="$victim" bs=1 seek=100 conv=notrunc status=none
FT_DATA_CACHE="$TMP/cache2" FT_DATA_BLOCK_BYTES=$BLOCK FT_DATA_CACHE_BYTES=$((64 << 20)) \
  FT_DATA_PREFETCH_BLOCKS=0 train warm3 "$S3_TRAIN" "$S3_VAL"
cmp "$TMP/warm3.safetensors" "$TMP/local.safetensors" || fail "a damaged cache file changed the model"
gets=$(grep '^data: s3://' "$TMP/warm3.err" | sed -E 's/.*: ([0-9]+) block GETs.*/\1/' | awk '{s += $1} END {print s + 0}')
[ "$gets" -eq 1 ] || fail "$gets block GETs after one cache file was damaged, expected 1: $(grep '^data: s3://' "$TMP/warm3.err")"
pass "damaged cache file ${victim##*/}: refused and fetched again, same bits"

# ---- two ranks of one host share the cache and the listing ------------------------
run2() { # NAME TRAIN VAL: ranks 0 and 1 over a rendezvous folder
  rm -rf "$TMP/rdzv" && mkdir "$TMP/rdzv"
  local pids=() r
  for r in 0 1; do
    "$FT_BIN/worker" --standalone "$FT_SRC/examples/demo.yaml" --set "data.train=$2" \
      --set "data.val=$3" --set nodes.device=cpu --steps $STEPS --quiet --threads 1 \
      --world 2 --rank $r --rdzv "$TMP/rdzv" --log-json "$TMP/$1_$r.jsonl" 2>"$TMP/$1_$r.err" &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || fail "$1: rank $r failed: $(tail -3 "$TMP/$1_$r.err")"; done
}
run2 w2local "$TMP/loc/synth_train_*.bin" "$TMP/loc/synth_val_*.bin"
FT_DATA_CACHE="$TMP/cache2r" FT_DATA_BLOCK_BYTES=$BLOCK FT_DATA_LISTING="$TMP/listing2r.json" \
  run2 w2s3 "$S3_TRAIN" "$S3_VAL"
# rank 0 logs the gang's losses
[ -n "$(losses "$TMP/w2s3_0.jsonl")" ] &&
  [ "$(losses "$TMP/w2s3_0.jsonl")" = "$(losses "$TMP/w2local_0.jsonl")" ] ||
  fail "2 ranks: the losses differ from the local run's"
sum_of() { # FIELD: the sum over both ranks' I/O lines (train and val)
  cat "$TMP"/w2s3_?.err | grep '^data: s3://' | sed -E "s/.* ([0-9]+) $1.*/\1/" | awk '{s += $1} END {print s + 0}'
}
gets=$(sum_of "block GETs")
blocks=$(cat "$TMP"/w2s3_?.err | grep '^data: s3://' | sed -E 's/.*block GETs \(([0-9]+) blocks\).*/\1/' |
  awk '{s += $1} END {print s + 0}')
heads=$(sum_of "header GETs")
files=$(find "$TMP/cache2r" -name '*.blk' | wc -l)
[ "$blocks" -eq "$files" ] || fail "2 ranks: $blocks blocks fetched for $files blocks: a block was fetched twice on one host"
[ "$heads" -eq 6 ] || fail "2 ranks: $heads header GETs, expected 6 (5 train + 1 val shards, read once)"
pass "2 ranks on one host: same bits as local; $gets block GETs brought $blocks blocks for $files block files, $heads header GETs"

# ---- world 4 as 2 hosts of 2: each host reads its own windows only ---------------
# A step's global window (128 sequences of 64 tokens, 16 KiB) is four 4 KiB
# blocks; a host's ranks read 64 consecutive sequences of it (8 KiB): with
# the trainer's hint its prefetcher brings the 3 blocks that overlap them,
# never the next blocks of the stream (the other host's). Each host has its
# own cache directory and listing. The test computes each host's block set
# from the geometry and compares the cache files (= its block GETs) with it.
W4_STEPS=12
run4() { # NAME TRAIN: ranks 0..3, ranks 2h and 2h+1 on "host" h
  rm -rf "$TMP/rdzv4" && mkdir "$TMP/rdzv4"
  local pids=() r
  for r in 0 1 2 3; do
    FT_DATA_CACHE="$TMP/$1_cache$((r / 2))" FT_DATA_LISTING="$TMP/$1_listing$((r / 2)).json" \
      "$FT_BIN/worker" --standalone "$FT_SRC/examples/demo.yaml" --set "data.train=$2" \
      --set data.val= --set nodes.device=cpu --set nodes.workers_per_node=2 \
      --set train.global_batch=128 --set train.micro_batch=32 --set watchdog.sdc_every=0 \
      --steps $W4_STEPS --quiet --threads 1 --world 4 --rank $r --rdzv "$TMP/rdzv4" \
      --log-json "$TMP/$1_$r.jsonl" 2>"$TMP/$1_$r.err" &
    pids+=($!)
  done
  for r in 0 1 2 3; do wait "${pids[$r]}" || fail "$1: rank $r failed: $(tail -3 "$TMP/$1_$r.err")"; done
}
run4 w4local "$TMP/loc/synth_train_*.bin"
FT_DATA_BLOCK_BYTES=4096 FT_DATA_PREFETCH_BLOCKS=4 run4 w4s3 "$S3_TRAIN"
[ -n "$(losses "$TMP/w4s3_0.jsonl")" ] &&
  [ "$(losses "$TMP/w4s3_0.jsonl")" = "$(losses "$TMP/w4local_0.jsonl")" ] ||
  fail "world 4: the losses differ from the local run's"
for h in 0 1; do
  lines=$(cat "$TMP/w4s3_$((2 * h)).err" "$TMP/w4s3_$((2 * h + 1)).err" | grep -F "data: $S3_TRAIN:")
  gets=$(echo "$lines" | sed -E 's/.*: ([0-9]+) block GETs.*/\1/' | awk '{s += $1} END {print s + 0}')
  blocks=$(echo "$lines" | sed -E 's/.*block GETs \(([0-9]+) blocks\).*/\1/' | awk '{s += $1} END {print s + 0}')
  python3 - "$TMP/loc" "$TMP/w4s3_cache$h" "$h" "$gets" "$blocks" $W4_STEPS <<'PY' || fail "world 4, host $h: its blocks (above)"
import glob, hashlib, os, struct, sys
loc, cache, h = sys.argv[1], sys.argv[2], int(sys.argv[3])
gets, nblocks, steps = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
T, B, G, W, WPN, BS, HDR = 64, 32, 128, 4, 2, 4096, 1024
names = sorted(glob.glob(loc + "/synth_train_*.bin"))
counts = [struct.unpack("<3i", open(n, "rb").read(12))[2] for n in names]
starts = [sum(counts[:k]) for k in range(len(counts))]
nseq = (sum(counts) - 1) // T
khash = {hashlib.sha256(("corpus/" + os.path.basename(n)).encode()).hexdigest()[:16]: k
         for k, n in enumerate(names)}
def ranges(nsteps):  # the host's token ranges [p, q) over the first nsteps steps
    out = []
    for s in range(nsteps):
        for r in range(WPN * h, WPN * h + WPN):
            i = (s * G + r * B) % nseq
            assert i + B <= nseq  # no wrap in this many steps
            out.append((i * T, (i + B) * T + 1))
    return out
def blocks(rs):
    bl = set()
    for p, q in rs:
        for k, (st, n) in enumerate(zip(starts, counts)):
            a, b = max(p, st), min(q, st + n)
            if a < b:
                bl |= {(k, j) for j in range((HDR + 2 * (a - st)) // BS, (HDR + 2 * (b - st) - 1) // BS + 1)}
    return bl
def used_bytes(rs):
    tok, end = 0, -1
    for p, q in sorted(rs):
        if q > end:
            tok += q - max(p, end)
            end = q
    return 2 * tok
got, down, nfiles = set(), 0, 0
for f in glob.glob(cache + "/*.blk"):  # ..._<index>.blk, a piece ..._<index>.<lo>-<hi>.blk
    parts = os.path.basename(f)[:-4].split("_")
    if parts[1] in khash and int(parts[3]) == BS:
        got.add((khash[parts[1]], int(parts[4].split(".")[0])))
        down += os.path.getsize(f)
        nfiles += 1
need, may = blocks(ranges(steps)), blocks(ranges(steps + 2))
assert nblocks == nfiles, "%d pieces fetched for %d files: a piece fetched twice" % (nblocks, nfiles)
assert need <= got, "blocks it needed are not in its cache: %s" % sorted(need - got)
assert got <= may, "GETs of blocks no rank of host %d reads (another host's): %s" % (h, sorted(got - may))
ratio = down / used_bytes(ranges(steps))
print("measured: host %d: %d block GETs (%d blocks of %d bytes) in %d steps: %.2f GETs per step; "
      "%d bytes downloaded for %d used: ratio %.2f"
      % (h, gets, nblocks, BS, steps, gets / steps, down, used_bytes(ranges(steps)), ratio))
# the pieces of the windows' edge blocks: about the bytes it reads, and
# the windows of the next step or two it prefetched (whole blocks: 1.61)
assert ratio <= 1.3, "host %d downloaded %.2f times the bytes it read" % (h, ratio)
# a window's 3 blocks are one GET (the first step's may come one by one)
assert gets < 2 * steps, "%d block GETs in %d steps: the blocks of a window are not one GET" % (gets, steps)
PY
done
pass "world 4 as 2 hosts of 2: same bits as local; each host GETs only the blocks of its ranks' windows"

# ---- the storage failing: retried, then a storage fault -----------------------------
# The data endpoint is a fault proxy's; the store's points nowhere. No cache
# directory, no prefetch, 4 KiB blocks: every step or two GETs a block, so
# blocks are still to be read when the mode changes (the worker stopped
# with SIGSTOP meanwhile, so no read slips past the change).
s3_proxy_start "$TMP"
proxied() { # NAME MODE STEPS [worker args]: MODE from the end of the first step on
  local name=$1 m=$2 steps=$3
  shift 3
  FT_S3_ENDPOINT=http://127.0.0.1:9 FT_DATA_S3_ENDPOINT="http://127.0.0.1:$PP" \
    FT_DATA_CACHE_BYTES=0 FT_DATA_PREFETCH_BLOCKS=0 FT_DATA_BLOCK_BYTES=4096 \
    "$FT_BIN/worker" --standalone "$FT_SRC/examples/demo.yaml" --set "data.train=$S3_TRAIN" \
    --set "data.val=$S3_VAL" --set nodes.device=cpu --steps "$steps" --quiet --threads 1 \
    --log-json "$TMP/$name.jsonl" "$@" 2>"$TMP/$name.err" &
  local pid=$!
  for _ in $(seq 1 1200); do
    grep -q '"step"' "$TMP/$name.jsonl" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  kill -STOP $pid 2>/dev/null || fail "$name: the worker ended before its first step: $(cat "$TMP/$name.err")"
  echo "$m" >"$TMP/mode"
  kill -CONT $pid
  set +e
  wait $pid
  PROXIED_RC=$?
  set -e
  echo ok >"$TMP/mode"
}
proxied flaky 500:8 $STEPS --export "$TMP/flaky.safetensors"
[ $PROXIED_RC -eq 0 ] || fail "through transient 500s: exit $PROXIED_RC $(tail -3 "$TMP/flaky.err")"
cmp "$TMP/flaky.safetensors" "$TMP/local.safetensors" || fail "the run through 500s differs"
line=$(grep -F "data: $S3_TRAIN:" "$TMP/flaky.err")
grep -q '^500 GET /data/corpus/synth_train_' "$TMP/proxy.log" ||
  fail "no block GET was answered 500: $(cat "$TMP/proxy.log")"
echo "$line" | grep -qE 'requests in all \([1-9][0-9]* retried' || fail "no retry counted: $line"
pass "HTTP 500s on block GETs from the data endpoint: retried, same bits ($line)"

FT_S3_RETRIES=2 proxied down 500 100000
[ $PROXIED_RC -ne 0 ] || fail "a data endpoint answering 500 for good: the worker trained on"
grep -q "s3://data/corpus/synth_train_00[0-4].bin.*HTTP 500" "$TMP/down.err" ||
  fail "endpoint failing: the message does not name the key and the status: $(tail -3 "$TMP/down.err")"
pass "endpoint answering 500 past the retries: exit $PROXIED_RC, $(grep -m1 'HTTP 500' "$TMP/down.err")"
kill $PROXY_PID 2>/dev/null || true

# ---- the recorded listing --------------------------------------------------------
aws_s3 s3 cp --recursive --exclude '*' --include 'synth_*.bin' "$TMP/loc" s3://data/rec/ >/dev/null
REC_TRAIN="s3://data/rec/synth_train_*.bin"
REC_VAL="s3://data/rec/synth_val_*.bin"
LISTING="$TMP/state/data_listing.json"
mkdir -p "$TMP/state"
FT_DATA_LISTING="$LISTING" FT_DATA_CACHE="$TMP/cache4" train rec1 "$REC_TRAIN" "$REC_VAL"
cmp "$TMP/rec1.safetensors" "$TMP/local.safetensors" || fail "recording run: the model differs"
python3 - "$LISTING" "$REC_TRAIN" "$REC_VAL" <<'PY' || fail "the listing file: $(head -c 600 "$LISTING")"
import json, sys
d = json.load(open(sys.argv[1]))
objs = d["patterns"][sys.argv[2]]["objects"]
assert [o["key"] for o in objs] == ["rec/synth_train_%03d.bin" % i for i in range(5)], objs
assert sum(o["tokens"] for o in objs) == 270000, objs
assert all(o["size"] == 1024 + 2 * o["tokens"] and o["etag"] for o in objs), objs
assert len(d["patterns"][sys.argv[3]]["objects"]) == 1
PY
aws_s3 s3 cp "$TMP/other/x_train_000.bin" "s3://data/rec/synth_train_-new.bin" >/dev/null
FT_DATA_LISTING="$LISTING" FT_DATA_CACHE="$TMP/cache5" train rec2 "$REC_TRAIN" "$REC_VAL"
cmp "$TMP/rec2.safetensors" "$TMP/local.safetensors" ||
  fail "a shard added after the recording changed a run that reads the record"
line=$(grep -F "data: $REC_TRAIN:" "$TMP/rec2.err")
echo "$line" | grep -qE ': ([0-9]+) block GETs \([0-9]+ blocks\), 0 header GETs, \1 requests in all' ||
  fail "a run reading the record still listed or read headers: $line"
FT_DATA_CACHE="$TMP/cache6" train rec3 "$REC_TRAIN" "$REC_VAL"
! cmp -s "$TMP/rec3.safetensors" "$TMP/local.safetensors" ||
  fail "listing again did not see the added shard (the check above proves nothing)"
pass "recorded listing: a shard added later is ignored (same bits, $line); listed again it is read"

# ---- a shard changed or deleted under the run -----------------------------------
aws_s3 s3 cp --recursive --exclude '*' --include 'synth_train_*.bin' "$TMP/loc" s3://data/small/ \
  >/dev/null
fault_run() { # NAME ACTION: ACTION changes the bucket once the worker trains
  local name=$1 action=$2
  FT_DATA_CACHE_BYTES=0 FT_DATA_PREFETCH_BLOCKS=0 FT_DATA_BLOCK_BYTES=4096 \
    "$FT_BIN/worker" --standalone "$FT_SRC/examples/demo.yaml" \
    --set "data.train=s3://data/small/synth_train_00[34].bin" --set data.val= \
    --set nodes.device=cpu --steps 100000 --quiet --threads 1 --log-json "$TMP/$name.jsonl" \
    2>"$TMP/$name.err" &
  local pid=$!
  # the listing is taken at open: change the bucket once a step is done
  for _ in $(seq 1 1200); do
    grep -q '"step"' "$TMP/$name.jsonl" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  grep -q '"step"' "$TMP/$name.jsonl" 2>/dev/null || fail "$name: the worker never trained: $(cat "$TMP/$name.err")"
  $action
  # it reads every block again each pass over the data (no cache): it must stop
  for _ in $(seq 1 3000); do
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $pid 2>/dev/null; then
    kill -9 $pid
    fail "$name: the worker trained on after the bucket changed"
  fi
  set +e
  wait $pid
  FAULT_RC=$?
  set -e
}
overwrite() { aws_s3 s3 cp "$TMP/other/x_train_000.bin" s3://data/small/synth_train_004.bin >/dev/null; }
fault_run changed overwrite
[ $FAULT_RC -eq 3 ] || fail "changed shard: exit $FAULT_RC, expected 3 (data): $(tail -3 "$TMP/changed.err")"
grep -q "s3://data/small/synth_train_004.bin.*changed since it was listed" "$TMP/changed.err" ||
  fail "changed shard: the message does not name the key: $(tail -3 "$TMP/changed.err")"
pass "changed shard: exit 3: $(grep -m1 'changed since' "$TMP/changed.err")"

delete() { aws_s3 s3 rm s3://data/small/synth_train_003.bin >/dev/null; }
fault_run deleted delete
[ $FAULT_RC -eq 3 ] || fail "deleted shard: exit $FAULT_RC, expected 3 (data): $(tail -3 "$TMP/deleted.err")"
grep -q "s3://data/small/synth_train_003.bin: no such object" "$TMP/deleted.err" ||
  fail "deleted shard: the message does not name the key: $(tail -3 "$TMP/deleted.err")"
pass "deleted shard: exit 3: $(grep -m1 'no such object' "$TMP/deleted.err")"

# ---- supervised: a changed shard fails the run, nobody blamed -------------------
# 2 nodes + 1 spare on s3:// data (the listing recorded in STATE, which the
# supervisor hands its workers as FT_DATA_LISTING); a shard overwritten once
# the gang trains: the workers' reads fail If-Match, each exits FT_EXIT_DATA
# after a FAULT data, and the run fails with cause "data" naming the key: no
# node quarantined, no spare spent, no restart (no restart reads better data).
aws_s3 s3 cp --recursive --exclude '*' --include 'synth_train_*.bin' "$TMP/loc" s3://data/sup/ \
  >/dev/null
SST=$TMP/sst
FT_DATA_CACHE_BYTES=0 FT_DATA_PREFETCH_BLOCKS=0 FT_DATA_BLOCK_BYTES=4096 \
  "$FT_BIN/supervise" --state "$SST" --worker "$FT_BIN/worker" --spares 1 --steps 100000 \
  --set "data.train=s3://data/sup/synth_train_00[34].bin" --set data.val= \
  --set "checkpoint.store=local:$TMP/sst-store" --set chaos.kill_node_at_step=0 \
  "$FT_SRC/examples/demo.yaml" >"$TMP/sup.out" 2>&1 &
SUPPID=$!
for _ in $(seq 1 1200); do
  grep -q '"event":"step"' "$SST/events.jsonl" 2>/dev/null && break
  kill -0 $SUPPID 2>/dev/null || break
  sleep 0.1
done
grep -q '"event":"step"' "$SST/events.jsonl" 2>/dev/null ||
  fail "supervised: the gang never trained: $(tail -5 "$TMP/sup.out")"
[ -s "$SST/data_listing.json" ] || fail "supervised: no STATE/data_listing.json"
aws_s3 s3 cp "$TMP/other/x_train_000.bin" s3://data/sup/synth_train_004.bin >/dev/null
for _ in $(seq 1 3000); do
  kill -0 $SUPPID 2>/dev/null || break
  sleep 0.1
done
if kill -0 $SUPPID 2>/dev/null; then
  kill $SUPPID
  fail "supervised: the run trained on after its data changed: $(tail -5 "$TMP/sup.out")"
fi
set +e
wait $SUPPID
SRC=$?
set -e
[ $SRC -eq 1 ] || fail "supervised: supervise exit $SRC, expected 1 (failed): $(tail -5 "$TMP/sup.out")"
python3 - "$SST/events.jsonl" <<'PY' || fail "supervised: the run's events (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
names = [e["event"] for e in ev]
end = [e for e in ev if e["event"] == "run_failed"]
assert end, ("no run_failed", names[-8:])
r = json.dumps(end[-1])
assert "data" in r and "synth_train_004.bin" in r and "changed since it was listed" in r, r
for bad in ("node_quarantined", "spare_promoted", "node_restarted"):
    assert bad not in names, (bad, [e for e in ev if e["event"] == bad])
print("run_failed:", end[-1].get("reason", r)[:200])
PY
pass "supervised: a shard changed under the gang fails the run (cause data), no node blamed"
