#!/bin/bash
# s3_client: runs test_ckpt_s3_client (the S3 client and the bucket tier)
# against a real S3-protocol server started here on loopback.
set -u
T=$(mktemp -d "${TMPDIR:-/tmp}/s3_client.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; rm -rf "$T"' EXIT
s3_start
export FT_S3_CACHE="$T/cache"
"$FT_BUILD/tests/test_ckpt_s3_client"
