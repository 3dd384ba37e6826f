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
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
