#!/usr/bin/env bash
# The README's second command (and what CI runs): installs what is missing,
# then, in order, and stopping at the first phase that fails:
#   1. format: every C/C++/CUDA file as .clang-format says (check-format.sh)
#   2. build into build/ with warnings as errors
#   3. the whole test suite through CTest (benchmarks excluded; GPU tests
#      skip cleanly where no GPU is visible)
#   4. an address + undefined-behaviour sanitizer build (build-asan/) and
#      its unit and integration tests (but those labelled no_asan)
#   5. every fuzz target for a short time (scripts/fuzz.sh 3: a smoke run that
#      replays the regression inputs; `scripts/fuzz.sh 300` is the real search)
# Arguments go to the main CTest run (e.g. -R sup_ to run fewer tests).
# FT_TEST_QUICK=1 skips phases 4 and 5 (for a quick local run; CI never sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
phase() { echo "== $1 ($((SECONDS - t0)) s)"; }

scripts/install-deps.sh
phase "format"
scripts/check-format.sh
phase "building (build/, warnings are errors)"
scripts/build.sh -DFT_WERROR=ON
phase "running the tests"
(cd build && ctest -LE bench --output-on-failure --timeout 900 -j2 "$@")

if [ "${FT_TEST_QUICK:-0}" != 1 ]; then
  phase "sanitizer build (build-asan/: address, undefined)"
  BUILD_DIR=build-asan scripts/build.sh -DSANITIZE=address,undefined -DFT_WERROR=ON \
    -DFT_CUEMU=OFF -DWITH_CUDA=OFF
  phase "unit and integration tests under the sanitizers"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest -L 'unit|integration' -LE 'bench|no_asan' --output-on-failure --timeout 900 -j2)
  phase "fuzz targets, 3 s each (build-fuzz/)"
  scripts/fuzz.sh 3
fi
phase "done"
