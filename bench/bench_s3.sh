#!/usr/bin/env bash
# bench_s3: the S3 tier's throughput beside `aws s3 cp` of the same bytes to
# the same local moto_server in the same run, and requests per checkpoint.
# The server checks every request's signature (tests/integration/s3_lib.sh,
# chaos/moto_auth.py), so both clients pay for signing as they would on AWS.
# usage: bench/bench_s3.sh [BUILD_DIR] (default build); BENCH_S3_MIB (128)
set -euo pipefail
B=$(cd "${1:-build}" && pwd)
FT_SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; rm -rf "$T"' EXIT
MIB=${BENCH_S3_MIB:-128}
s3_start
s3_mkbucket bench
# float-like data (what checkpoints hold): weights ~ N(0, 0.02) as f32
python3 -c '
import random, struct, sys
random.seed(7); n = int(sys.argv[1]) * 262144
with open(sys.argv[2], "wb") as f:
    for i in range(0, n, 65536):
        f.write(struct.pack("<65536f", *[random.gauss(0, 0.02) for _ in range(65536)]))
' "$MIB" "$T/data.bin"
echo "bench_s3: $MIB MiB of f32 weights, $S3_KIND at $FT_S3_ENDPOINT (all on loopback)"
t() { python3 -c 'import time; print(time.monotonic())'; }
a=$(t); aws_s3 s3 cp --quiet "$T/data.bin" s3://bench/aws/data.bin; b=$(t)
python3 -c "import sys; m=$MIB; s=$b-$a; print(f'{\"aws s3 cp upload (awscli, multipart, 10 threads)\":44s} {m:9.1f} MiB {s:8.2f} s {m/s:9.1f} MiB/s')"
a=$(t); aws_s3 s3 cp --quiet s3://bench/aws/data.bin "$T/back.bin"; b=$(t)
python3 -c "import sys; m=$MIB; s=$b-$a; print(f'{\"aws s3 cp download\":44s} {m:9.1f} MiB {s:8.2f} s {m/s:9.1f} MiB/s')"
cmp "$T/data.bin" "$T/back.bin"
BIN=$(dirname "$B/bin")/bin
FT_S3_CACHE="$T/c0" FT_S3_MULTIPART_MIB=8 FT_S3_PART_MIB=8 "$BIN/bench_s3" object "$T/data.bin" s3://bench/ft/data.bin
FT_S3_CACHE="$T/c1" FT_S3_REQUIRE=both "$BIN/bench_s3" ckpt "$T/data.bin" s3://bench/ckpt "$T/c2"
