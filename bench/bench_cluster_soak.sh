#!/usr/bin/env bash
# The 10-minute soak on the namespace Slurm cluster: a random fault every
# 60 s (heartbeat timeout 3 s) during a 2-node run with 4 warm spares
# (tests/cluster/soak.sh: what is injected and asserted). Prints the run's
# goodput (the share of wall time spent on steps that survive in the final
# timeline) beside its ceiling, 100% (a fault-free run's, measured by the
# same formula over the fault-free reference run the soak makes), and the
# target; then per fault: time to detect, time to recover, steps lost.
#
# usage: bench/bench_cluster_soak.sh [BUILD_DIR] [SECONDS] [PERIOD]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-build}" && pwd)
SECS=${2:-600}
PERIOD=${3:-60}
export FT_BIN=$B/bin
out=$(mktemp "${TMPDIR:-/tmp}/ftsoak.XXXXXX")
trap 'rm -f "$out"' EXIT
rc=0
bash tests/cluster/soak.sh "$SECS" "$PERIOD" | tee "$out" || rc=$?
[ $rc -eq 0 ] || exit $rc
g=$(sed -n 's/.*goodput \([0-9.]*\)%.*/\1/p' "$out" | head -1)
echo
echo "goodput with a fault every ${PERIOD} s: ${g}% (ceiling 100%: no fault, no time lost;"
echo "  target >= 95% (issue 13); published for comparison, not measured here:"
echo "  ByteRobust 97% ETTR on 9,600 GPUs, torchft 81% with a failure every 60 s)"
