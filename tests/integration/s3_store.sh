#!/bin/bash
# s3_store: an s3:// checkpoint store end to end against a real S3-protocol
# server on loopback, with the real `ckpt` program and the test writer:
#   1. commits with FT_S3_REQUIRE=both put chunks and manifests in the bucket
#      (layout chunks/ab/<sha>, manifests/<run>/<step>.json), ls/verify/restore
#   2. the bucket alone is enough: a new, empty cache lists and restores the
#      same bytes; rebuild-catalog adds what another machine committed
#   3. repair: a chunk missing or corrupt in the cache is fetched from the
#      bucket; a chunk missing or corrupt in the bucket is re-uploaded by verify
#   4. FT_S3_REQUIRE=local commits while the bucket is unreachable, and the
#      uploads left in the journal reach the bucket at the next writable open
#   5. chunks above the multipart threshold go up as multipart uploads
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/s3_store.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
s3_start
s3_mkbucket ckpts
S=s3://ckpts/team/run-a
export FT_S3_TIMEOUT_S=3 FT_S3_RETRIES=3 FT_S3_RETRY_BUDGET_S=10 FT_S3_DRAIN_S=20

# ---- 1 -------------------------------------------------------------------------
export FT_S3_CACHE="$T/cache1"
"$W" --store "$S" --steps 3 --world 2 --layers 2 --embd 64 --chunk-mib 1 >"$T/w1" 2>&1 ||
  fail "writer: $(cat "$T/w1")"
nman=$(aws_s3 s3 ls --recursive s3://ckpts/team/run-a/manifests/ | wc -l)
[ "$nman" -eq 3 ] || fail "the bucket holds $nman manifests, expected 3"
aws_s3 s3 ls --recursive s3://ckpts/team/run-a/manifests/ | grep -q 'team/run-a/manifests/testrun/00000000000000000003.json' ||
  fail "manifest key layout"
nlocal=$(find "$T/cache1/chunks" -type f | wc -l)
nbucket=$(aws_s3 s3 ls --recursive s3://ckpts/team/run-a/chunks/ | wc -l)
[ "$nlocal" -gt 0 ] && [ "$nlocal" -eq "$nbucket" ] || fail "cache has $nlocal chunks, bucket $nbucket"
aws_s3 s3 ls --recursive s3://ckpts/team/run-a/chunks/ | awk '{print $4}' | head -n 20 |
  grep -vqE '^team/run-a/chunks/([0-9a-f]{2})/\1[0-9a-f]{62}$' && fail "chunk key layout"
[ "$("$C" --store "$S" ls | grep -c '^testrun')" -eq 3 ] || fail "ls: $("$C" --store "$S" ls 2>&1)"
"$C" --store "$S" verify >"$T/v" 2>&1 || fail "verify: $(cat "$T/v")"
"$C" --store "$S" restore latest --to "$T/a.st" >/dev/null || fail "restore from the cache"
"$C" --store "$S" restore 2 --to "$T/a2.st" --world 2 --rank 1 >/dev/null || fail "restore rank"
echo "ok 1: commit (require both), layout, ls, verify, restore"

# ---- 2 -------------------------------------------------------------------------
export FT_S3_CACHE="$T/cache2"
[ "$("$C" --store "$S" ls | grep -c '^testrun')" -eq 3 ] || fail "empty cache: ls does not see the bucket's checkpoints"
"$C" --store "$S" restore 3 --to "$T/b.st" >/dev/null || fail "restore from the bucket alone"
cmp "$T/a.st" "$T/b.st" || fail "bytes restored from the bucket differ from the cache's"
"$C" --store "$S" restore 2 --to "$T/b2.st" --world 2 --rank 1 >/dev/null && cmp "$T/a2.st" "$T/b2.st" ||
  fail "rank restore from the bucket differs"
"$C" --store "$S" verify >"$T/v" 2>&1 || fail "verify from the bucket: $(cat "$T/v")"
# another machine (cache3) adds checkpoints 4, 5; cache1's catalog learns them
export FT_S3_CACHE="$T/cache3"
"$W" --store "$S" --start 4 --steps 2 --world 2 --layers 2 --embd 64 --chunk-mib 1 >"$T/w3" 2>&1 ||
  fail "writer 2: $(cat "$T/w3")"
export FT_S3_CACHE="$T/cache1"
out=$("$C" rebuild-catalog "$S") || fail "rebuild-catalog: $out"
echo "$out" | grep -q "5 manifests in the store; 2 checkpoints added" || fail "rebuild-catalog said: $out"
[ "$("$C" --store "$S" ls | grep -c '^testrun')" -eq 5 ] || fail "ls after rebuild"
"$C" --store "$S" restore 5 --to "$T/c5.st" >/dev/null || fail "restore a rebuilt checkpoint"
echo "ok 2: empty cache sees and restores the bucket; rebuild-catalog adds foreign commits"

# ---- 3 -------------------------------------------------------------------------
export FT_S3_CACHE="$T/cache1"
victims=$(find "$T/cache1/chunks" -type f | sort | head -n 2)
v1=$(echo "$victims" | sed -n 1p)
v2=$(echo "$victims" | sed -n 2p)
rm -f "$v1"
printf 'garbage' | dd of="$v2" bs=1 seek=40 conv=notrunc 2>/dev/null
"$C" --store "$S" restore 3 --to "$T/r3.st" >/dev/null 2>"$T/e" || fail "restore with a damaged cache: $(cat "$T/e")"
"$C" --store "$S" restore 5 --to "$T/r5.st" >/dev/null 2>"$T/e" || fail "restore 5 with a damaged cache: $(cat "$T/e")"
cmp "$T/a.st" "$T/r3.st" && cmp "$T/c5.st" "$T/r5.st" || fail "restore after cache repair differs"
"$C" --store "$S" verify >"$T/v" 2>&1 || fail "verify after cache repair: $(cat "$T/v")"
[ -f "$v1" ] || fail "the missing cache chunk was not repaired"
"$C" --store "$S" verify >"$T/v" 2>&1 || fail "verify after cache repair: $(cat "$T/v")"
grep -q repaired "$T/v" && fail "a second verify still repaired something: $(cat "$T/v")"
# now the bucket: delete one chunk, corrupt another
b1=$(aws_s3 s3 ls --recursive s3://ckpts/team/run-a/chunks/ | awk '{print $4}' | sort | sed -n 3p)
b2=$(aws_s3 s3 ls --recursive s3://ckpts/team/run-a/chunks/ | awk '{print $4}' | sort | sed -n 4p)
aws_s3 s3 rm "s3://ckpts/$b1" >/dev/null || fail "aws rm"
echo "not a chunk" >"$T/junk"
aws_s3 s3 cp "$T/junk" "s3://ckpts/$b2" >/dev/null || fail "aws cp"
out=$("$C" --store "$S" verify 2>&1) || fail "verify with a damaged bucket: $out"
echo "$out" | grep -qE "repaired 0 chunks in the cache from the bucket and 2 in the bucket" ||
  fail "verify did not repair the bucket: $out"
aws_s3 s3 ls "s3://ckpts/$b1" >/dev/null || fail "deleted bucket chunk not re-uploaded"
aws_s3 s3 cp "s3://ckpts/$b2" "$T/b2.obj" >/dev/null
head -c 4 "$T/b2.obj" | grep -q FTCK || fail "corrupt bucket chunk not replaced"
export FT_S3_CACHE="$T/cache4"
"$C" --store "$S" verify >"$T/v" 2>&1 || fail "bucket-only verify after repair: $(cat "$T/v")"
echo "ok 3: cache repaired from the bucket, bucket repaired from the cache"

# ---- 4 -------------------------------------------------------------------------
export FT_S3_CACHE="$T/cache5" FT_S3_REQUIRE=local
real=$FT_S3_ENDPOINT
"$C" --store "$S" ls >/dev/null || fail "ls to create cache5"
export FT_S3_ENDPOINT="http://127.0.0.1:$(free_port)" FT_S3_DRAIN_S=1
start=$(date +%s)
"$W" --store "$S" --start 10 --steps 3 --world 2 --layers 2 --embd 64 --chunk-mib 1 >"$T/w5" 2>&1 ||
  fail "require=local writer with the bucket unreachable: $(cat "$T/w5")"
grep -c committed "$T/w5" | grep -q 3 || fail "not all commits returned"
[ "$(ls "$T/cache5/uploads" | wc -l)" -eq 3 ] || fail "journal: $(ls "$T/cache5/uploads")"
aws_s3 s3 ls "s3://ckpts/team/run-a/manifests/testrun/00000000000000000010.json" >/dev/null 2>&1 &&
  fail "manifest 10 cannot be in the bucket yet"
export FT_S3_ENDPOINT=$real FT_S3_DRAIN_S=30
"$C" --store "$S" rebuild-catalog >/dev/null || fail "writable open with the bucket back"
[ "$(ls "$T/cache5/uploads" | wc -l)" -eq 0 ] || fail "journal not drained: $(ls "$T/cache5/uploads")"
export FT_S3_CACHE="$T/cache6" FT_S3_REQUIRE=both
for s in 10 11 12; do
  "$C" --store "$S" show "$s" >/dev/null 2>&1 || fail "checkpoint $s (require=local) never reached the bucket"
done
"$C" --store "$S" verify 12 >"$T/v" 2>&1 || fail "verify 12 from the bucket: $(cat "$T/v")"
echo "ok 4: require=local commits without the bucket; the journal uploads later"

# ---- 5 -------------------------------------------------------------------------
export FT_S3_CACHE="$T/cache7" FT_S3_MULTIPART_MIB=5 FT_S3_PART_MIB=5
S2=s3://ckpts/big
"$W" --store "$S2" --run big --steps 1 --world 1 --layers 1 --embd 512 --chunk-mib 8 >"$T/w7" 2>&1 ||
  fail "big writer: $(cat "$T/w7")"
multi=0
for k in $(aws_s3 s3 ls --recursive s3://ckpts/big/chunks/ | awk '$3 > 5242880 {print $4}'); do
  aws_s3 s3api head-object --bucket ckpts --key "$k" | grep -qE '"ETag": "\\"[0-9a-f]+-[0-9]+' && multi=$((multi + 1))
done
[ "$multi" -gt 0 ] || fail "no chunk above 5 MiB went up as a multipart upload"
export FT_S3_CACHE="$T/cache8"
"$C" --store "$S2" verify >"$T/v" 2>&1 || fail "verify multipart chunks from the bucket: $(cat "$T/v")"
echo "ok 5: $multi multipart chunk objects, verified from the bucket"
echo "PASS: s3_store"
