#!/usr/bin/env bash
# The README's second command (and what CI runs): installs what is missing,
# builds, and runs the whole test suite through CTest (benchmarks excluded;
# GPU tests skip cleanly where no GPU is visible).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
echo "== building (build/)"
scripts/build.sh
echo "== running the tests"
cd build
ctest -LE bench --output-on-failure --timeout 900 -j2 "$@"
