#!/usr/bin/env bash
# Installs the Debian packages this project builds and tests with.
# Idempotent: when everything is already there it prints nothing and exits 0.
# Run as root (or with sudo available). Debian's packages only.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libopenblas-dev       # CPU GEMMs
  libcmocka-dev         # unit tests
  librocksdb-dev        # checkpoint catalog
  libzstd-dev zstd      # chunk codec (+ the CLI, a benchmark reference)
  libssl-dev            # SHA-256 (EVP), HMAC
  libcurl4-openssl-dev  # S3 tier
  libevent-dev          # supervisor event loop
  libfyaml-dev          # run files
  libcjson-dev          # manifests, wire metadata, event log
  libgloo-dev           # CPU collectives
  libexpat1-dev         # S3 XML responses
  libinih-dev           # the AWS credentials file
  clang clang-format    # fuzz targets (libFuzzer), the format check
  help2man              # man pages from --help
  strace                # tests that slow the supervisor's disk (rename delays, EIO)
)

# The S3 tests, the S3 chaos suite and bench_s3 run moto_server with
# authentication enforced (chaos/moto_auth.py): python3 with moto 5 (and its
# server extra) and boto3. There is no stand-in: a server that skips
# signature checks lets wrongly signed requests pass unnoticed, so without
# moto those tests fail loudly. moto is not a Debian package for this python:
# pip is tried, and a warning printed when that does not work.
s3_server() {
  python3 -c 'import moto.server, boto3' >/dev/null 2>&1 && return 0
  echo "install-deps: installing moto[server] and boto3 (pip) for the S3 tests" >&2
  python3 -m pip install -q 'moto[server]>=5,<6' boto3 >/dev/null 2>&1 ||
    echo "install-deps: warning: python3 lacks moto/boto3 and pip could not install them;" \
      "the S3 tests will fail" >&2
}

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  s3_server
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
s3_server
echo "install-deps: done" >&2
