#!/bin/bash
# ckpt_s3_marks: on an s3:// store the pin and good/bad marks survive the
# loss of the cache (and so of the catalog in it): they are kept as small
# objects beside the manifests, uploaded like them (not parsed as manifests),
# and a new cache's catalog, rebuilt from the bucket at open, has them back.
# Against a real S3-protocol server on loopback (tests/integration/s3_lib.sh).
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_s3_marks.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
s3_start
s3_mkbucket marks
S=s3://marks/run
export FT_S3_TIMEOUT_S=3 FT_S3_RETRIES=3 FT_S3_RETRY_BUDGET_S=10 FT_S3_DRAIN_S=20

export FT_S3_CACHE="$T/cache1"
"$W" --store "$S" --steps 3 --layers 1 --embd 32 >"$T/w1" 2>&1 || fail "writer: $(cat "$T/w1")"
"$C" --store "$S" pin 2 >/dev/null || fail "pin"
"$C" --store "$S" pin 3 >/dev/null || fail "pin"
"$C" --store "$S" unpin 3 >/dev/null || fail "unpin"
aws_s3 s3 ls --recursive s3://marks/run/manifests/ >"$T/keys"
grep -q "manifests/testrun/00000000000000000002.mark" "$T/keys" ||
  fail "the pin's mark object is not in the bucket: $(cat "$T/keys")"
grep -q "00000000000000000003.mark" "$T/keys" && fail "an unpinned committed step kept a mark"
"$C" --store "$S" ls --json >"$T/ls1" || fail "ls"

states() {
  python3 -c '
import json, sys
for c in json.load(open(sys.argv[1])):
    print(c["step"], c["state"], c["pinned"])' "$1"
}
states "$T/ls1" >"$T/want"
grep -q "^2 committed True$" "$T/want" || fail "setup: $(cat "$T/want")"

# a new machine: an empty cache; its catalog is rebuilt from the bucket
export FT_S3_CACHE="$T/cache2"
"$C" --store "$S" ls --json >"$T/ls2" || fail "ls with a new cache"
states "$T/ls2" >"$T/got"
diff "$T/want" "$T/got" || fail "a new cache lost the pin"
# the same after the catalog in a cache is lost
rm -rf "$T/cache1/catalog"
export FT_S3_CACHE="$T/cache1"
out=$("$C" rebuild-catalog "$S" 2>&1) || fail "rebuild-catalog: $out"
# (an s3:// cache without a catalog is rebuilt at open already; the command adds none)
echo "$out" | grep -q "3 manifests in the store; 0 checkpoints added to the catalog; 0 skipped" ||
  fail "rebuild-catalog said: $out"
"$C" --store "$S" ls --json >"$T/ls3" || fail "ls"
states "$T/ls3" >"$T/got"
diff "$T/want" "$T/got" || fail "rebuild-catalog lost the pin"
"$C" --store "$S" verify >/dev/null || fail "verify"
echo "ckpt_s3_marks: ok"
