#!/usr/bin/env bash
# data_encode_s3: `ftdata encode|synth --out s3://BUCKET/DIR/NAME` against moto
# with every signature checked (s3_lib.sh), one server for all cases:
#   - encode to the bucket: every object holds the bytes of the file a local
#     encode of the same input writes (cmp), and `ftdata stats s3://...`
#     gives the local copies' numbers;
#   - synth to the bucket with a shard above FT_S3_MULTIPART_MIB (a
#     multipart upload of two parts): the same bytes as a local synth;
#   - a wrong key (FT_DATA_AWS_*): exit 3, the message names the bucket and
#     where the keys came from, and nothing is listed under the prefix; a
#     missing bucket: exit 3, "does not exist"; --out s3://BUCKET: exit 2;
#   - ftdata killed in the middle of a multipart shard (a fault proxy,
#     chaos/s3_faults.py, holds its second part): every object listed under
#     the glob is whole (equal to the local shard) and `ftdata stats`
#     accepts the glob: no half-written object is ever listed;
#   - a smaller encode over a larger one warns about the stale shard by key.
. "$(dirname "$0")/lib.sh"
T=$TMP
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; [ -n "${KEEP:-}" ] || cleanup' EXIT
s3_start
s3_mkbucket corpus
export FT_DATA_CACHE="$TMP/cache"
FTDATA=$FT_BIN/ftdata

# same LOCALPREFIX S3PREFIX SPLIT...: every shard of the splits is in the
# bucket with the local file's bytes, and no other object is under S3PREFIX_
same() {
  local loc=$1 s3=$2 f key n=0
  shift 2
  aws_s3 s3 cp --recursive "s3://corpus/${s3%/*}/" "$TMP/got/" >/dev/null || fail "download $s3"
  for split in "$@"; do
    for f in "${loc}_${split}"_*.bin; do
      key=${s3##*/}_${split}_${f##*_}
      cmp -s "$f" "$TMP/got/$key" || fail "s3://corpus/${s3%/*}/$key differs from $f"
      n=$((n + 1))
    done
  done
  [ "$(find "$TMP/got" -name "${s3##*/}_*" | wc -l)" -eq $n ] ||
    fail "objects under s3://corpus/${s3}_: $(ls "$TMP/got")"
  rm -rf "$TMP/got"
  echo "$n"
}

# ---- encode: the bytes of a local encode, stats agree ----------------------------
python3 -c '
import random, sys
r = random.Random(5)
w = "the cat sat on a mat while rain fell over old stone walls".split()
sys.stdout.write(" ".join(r.choice(w) for _ in range(40000)))' >"$TMP/in.txt"
"$FTDATA" encode --in "$TMP/in.txt" --out "$TMP/loc/t" --shard-tokens 60000 >/dev/null
"$FTDATA" encode --in "$TMP/in.txt" --out s3://corpus/enc/t --shard-tokens 60000 >"$TMP/enc.out" \
  2>&1 || fail "encode --out s3://: $(cat "$TMP/enc.out")"
grep -q "^uploaded s3://corpus/enc/t_train_000.bin (60000 tokens, .*% of" "$TMP/enc.out" ||
  fail "no progress line: $(cat "$TMP/enc.out")"
n=$(same "$TMP/loc/t" enc/t train val)
"$FTDATA" stats --json "s3://corpus/enc/t_train_*.bin" >"$TMP/s3.json" || fail "stats s3://"
"$FTDATA" stats --json "$TMP/loc/t_train_*.bin" >"$TMP/loc.json"
python3 - "$TMP/s3.json" "$TMP/loc.json" <<'PY' || fail "ftdata stats s3:// differs from the local files"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
a.pop("glob"); b.pop("glob")
assert a == b, (a, b)
PY
pass "encode --out s3://: $n objects, each the local encode's bytes; ftdata stats agrees"

# ---- synth, one shard multipart -------------------------------------------------
export FT_S3_MULTIPART_MIB=5 FT_S3_PART_MIB=5
SYN=(--tokens 3000000 --shard-tokens 2800000 --val-frac 0.02)
"$FTDATA" synth --out "$TMP/loc/s" "${SYN[@]}" >/dev/null
"$FTDATA" synth --out s3://corpus/syn/s "${SYN[@]}" >"$TMP/syn.out" 2>&1 ||
  fail "synth --out s3://: $(cat "$TMP/syn.out")"
n=$(same "$TMP/loc/s" syn/s train val)
pass "synth --out s3://: $n objects (one a multipart upload of 2 parts), the local synth's bytes"

# ---- refused keys, no bucket, usage ----------------------------------------------
rc=0
FT_DATA_AWS_ACCESS_KEY_ID=AKIAWRONGWRONGWRONG0 FT_DATA_AWS_SECRET_ACCESS_KEY=wrong \
  "$FTDATA" encode --in "$TMP/in.txt" --out s3://corpus/bad/t >"$TMP/bad.out" 2>&1 || rc=$?
[ $rc -eq 3 ] || fail "a wrong key: exit $rc, expected 3: $(cat "$TMP/bad.out")"
grep -q "cannot write s3://corpus/bad/t_\*.bin: .*403.*FT_DATA_AWS_ACCESS_KEY_ID and FT_DATA_AWS_SECRET_ACCESS_KEY from the environment" \
  "$TMP/bad.out" || fail "the refusal does not say where the keys came from: $(cat "$TMP/bad.out")"
[ -z "$(aws_s3 s3 ls s3://corpus/bad/)" ] || fail "objects under s3://corpus/bad/ after a refusal"
echo "  $(grep ftdata: "$TMP/bad.out" | head -1)"
rc=0
"$FTDATA" synth --out s3://nosuch/x/t >"$TMP/nob.out" 2>&1 || rc=$?
[ $rc -eq 3 ] && grep -q "bucket 'nosuch' does not exist at http://127.0.0.1:" "$TMP/nob.out" ||
  fail "no such bucket: exit $rc: $(cat "$TMP/nob.out")"
rc=0
"$FTDATA" synth --out s3://corpus >"$TMP/use.out" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "--out s3://corpus: exit $rc: $(cat "$TMP/use.out")"
pass "a wrong key: exit 3 naming the key's source, nothing written; no bucket: exit 3; no name: exit 2"

# ---- killed mid-object: nothing half-written is listed ---------------------------
s3_proxy_start "$TMP"
FT_DATA_S3_ENDPOINT="http://127.0.0.1:$PP" "$FTDATA" synth --out s3://corpus/kill/s "${SYN[@]}" \
  >"$TMP/kill.out" 2>&1 &
KPID=$!
for _ in $(seq 1 300); do
  grep -q "PUT .*partNumber=1&" "$TMP/proxy.log" 2>/dev/null && break
  sleep 0.02
done
echo hang >"$TMP/mode"
for _ in $(seq 1 300); do # the second part is held (or, had part 1 been slow, a later request)
  grep -q "^hang " "$TMP/proxy.log" 2>/dev/null && break
  sleep 0.02
done
kill -9 $KPID 2>/dev/null
wait $KPID 2>/dev/null || true
echo ok >"$TMP/mode"
grep -q "^hang PUT .*partNumber=2&" "$TMP/proxy.log" ||
  fail "the kill did not land in the middle of the multipart shard: $(cut -c1-60 "$TMP/proxy.log")"
aws_s3 s3 cp --recursive s3://corpus/kill/ "$TMP/got/" >/dev/null
for f in "$TMP"/got/*; do
  [ -e "$f" ] || continue
  cmp -s "$f" "$TMP/loc/s_${f##*/s_}" || fail "a half-written object is listed: ${f##*/}"
done
[ ! -e "$TMP/got/s_train_000.bin" ] || fail "the killed shard is listed"
up=$(aws_s3 s3api list-multipart-uploads --bucket corpus --prefix kill/ --query 'length(Uploads)')
[ "$up" = 1 ] || fail "expected the killed multipart upload pending (invisible), got $up"
kill $PROXY_PID 2>/dev/null || true
rm -rf "$TMP/got"
pass "killed in the middle of a multipart shard: it is not listed (the upload pending, invisible)"

# ---- a smaller encode over a larger one: the stale key is named -------------------
"$FTDATA" encode --in "$TMP/in.txt" --out s3://corpus/enc/t --shard-tokens 200000 \
  >"$TMP/re.out" 2>&1 || fail "re-encode: $(cat "$TMP/re.out")"
grep -q "warning: s3://corpus/enc/t_train_001.bin is left from an earlier run" "$TMP/re.out" ||
  fail "no stale-shard warning: $(cat "$TMP/re.out")"
pass "a smaller encode over a larger one names the stale shard s3://corpus/enc/t_train_001.bin"
