#!/bin/bash
# s3_client: runs test_ckpt_s3_client (the S3 client and the bucket tier)
# against moto with authentication enforced (every signature checked), then:
#   - no multipart upload is left open (the refused create-only multipart
#     upload of the test was aborted)
#   - the `ckpt` program with keys from a shared credentials file: the right
#     profile works; a profile with a wrong secret, and wrong keys in the
#     environment, are refused at once (exit 4, ONE request, no retries) with
#     a message naming where the keys came from and never the secret
set -u
T=$(mktemp -d "${TMPDIR:-/tmp}/s3_client.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
s3_start
export FT_S3_CACHE="$T/cache"
"$FT_BUILD/tests/test_ckpt_s3_client" || fail "test_ckpt_s3_client"

open=$(aws_s3 s3api list-multipart-uploads --bucket unit-bucket --output json)
echo "$open" | grep -q UploadId && fail "multipart uploads left open (not aborted): $open"
echo "ok: no multipart upload left open"

# requests the server answered 403 so far
n403() { grep -c '" 403 ' "$T/s3server.log"; }

AK=$AWS_ACCESS_KEY_ID
SK=$AWS_SECRET_ACCESS_KEY
printf '# test keys\n[good]\naws_access_key_id = %s\naws_secret_access_key = %s\n\n[bad]\naws_access_key_id = %s\naws_secret_access_key = not-%s\n' \
  "$AK" "$SK" "$AK" "$SK" >"$T/credentials"
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
export AWS_SHARED_CREDENTIALS_FILE="$T/credentials"

AWS_PROFILE=good FT_S3_CACHE="$T/c1" "$FT_BIN/ckpt" --store s3://unit-bucket/cli ls >"$T/out" 2>&1 ||
  fail "ckpt with the right key from the credentials file: $(cat "$T/out")"
echo "ok: right key from the credentials file accepted"

before=$(n403)
AWS_PROFILE=bad FT_S3_CACHE="$T/c2" FT_S3_RETRIES=5 "$FT_BIN/ckpt" --store s3://unit-bucket/cli ls >"$T/out" 2>&1
rc=$?
[ $rc -eq 4 ] || fail "wrong secret in the file: exit $rc, expected 4: $(cat "$T/out")"
grep -q "HTTP 403" "$T/out" || fail "wrong secret: no 403 in: $(cat "$T/out")"
grep -q "profile 'bad' of the credentials file $T/credentials" "$T/out" ||
  fail "wrong secret: the message does not name the profile and file: $(cat "$T/out")"
grep -qF -- "$SK" "$T/out" && fail "the secret is in the message"
grep -q "(1 attempt)" "$T/out" || fail "a 403 was retried: $(cat "$T/out")"
[ $(($(n403) - before)) -eq 1 ] || fail "the server saw $(($(n403) - before)) refused requests, expected 1"
echo "ok: wrong secret in profile 'bad' refused once: $(cat "$T/out")"

before=$(n403)
AWS_ACCESS_KEY_ID=AKIAWRONGWRONGWRONG1 AWS_SECRET_ACCESS_KEY="$SK" FT_S3_CACHE="$T/c3" FT_S3_RETRIES=5 \
  "$FT_BIN/ckpt" --store s3://unit-bucket/cli ls >"$T/out" 2>&1
rc=$?
[ $rc -eq 4 ] || fail "wrong key id in the environment: exit $rc, expected 4: $(cat "$T/out")"
grep -q "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment" "$T/out" ||
  fail "wrong key id: the message does not name the variables: $(cat "$T/out")"
grep -q "AKIAWRONG" "$T/out" && fail "the key id is in the message"
[ $(($(n403) - before)) -eq 1 ] || fail "the server saw $(($(n403) - before)) refused requests, expected 1"
echo "ok: wrong key id in the environment refused once"
echo "PASS: s3_client"
