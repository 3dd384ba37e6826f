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
)

# The S3 tests need an S3-protocol server on loopback: moto_server where the
# machine has it, otherwise s3rver from the npm registry.
s3_server() {
  command -v moto_server >/dev/null 2>&1 || command -v s3rver >/dev/null 2>&1 && return 0
  if command -v npm >/dev/null 2>&1; then
    echo "install-deps: installing s3rver (npm) for the S3 tests" >&2
    npm install -g --silent s3rver >/dev/null 2>&1 ||
      echo "install-deps: warning: could not install s3rver; the S3 tests will fail" >&2
  fi
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
