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
  restic                # bench_delta's reference: a backup tool's deduplication
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
  # The multi-host test cluster (tests/cluster/cluster.sh): real Slurm across
  # network namespaces, one munged for all of them, and sshd/ssh for the ssh
  # launcher. The tests start these daemons themselves; none runs as a service.
  iproute2              # ip netns, veth, bridge, tc
  slurmctld slurmd slurm-client
  munge
  openssh-server openssh-client
  # The operator's view: the dashboard's chart library, embedded into
  # supervise at build time (no CDN, no data files at run time); a real
  # Prometheus (promtool, a scrape) and a real browser test it.
  libjs-dygraphs
  prometheus
  prometheus-alertmanager  # delivers docs/alerts.yml's alerts to a webhook (sup_alerts.sh)
  curl                  # the HTTP port tests' client
  chromium
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

# Packages with daemons (munge, slurmctld, slurmd, sshd) try to start them
# from their maintainer scripts. Here nothing may run as a service: in a
# container there is no systemd and a failed start fails the install, and on
# a host a stray munged/slurmctld would collide with the test cluster. A
# policy-rc.d that answers 101 ("action forbidden") stops invoke-rc.d from
# starting anything; ours is removed afterwards, one already there is kept.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# install-deps: no daemons started by package scripts\nexit 101\n' |
    $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  own_policy=1
  trap '$SUDO rm -f "$policy"' EXIT
fi
# apt's chatter (debconf notes included) is shown only when it fails.
aptlog=$(mktemp)
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$aptlog" 2>&1; then
  cat "$aptlog" >&2
  rm -f "$aptlog"
  exit 1
fi
rm -f "$aptlog"
# Under systemd the packages enable their units: disable those of the Slurm
# daemons installed just now (not sshd, not ones that were here before) so a
# reboot does not start them either. Nothing to do without systemd.
if [ -d /run/systemd/system ]; then
  for u in munge slurmctld slurmd; do
    case " ${missing[*]} " in
    *" $u "*) $SUDO systemctl disable --now "$u" >/dev/null 2>&1 || true ;;
    esac
  done
fi
if [ "$own_policy" -eq 1 ]; then
  $SUDO rm -f "$policy"
  trap - EXIT
fi
s3_server
echo "install-deps: done" >&2
