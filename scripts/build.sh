#!/usr/bin/env bash
# Configures and builds the project into build/ (or $BUILD_DIR).
# Extra arguments go to cmake's configure step, e.g. -DWITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
if [ ! -f "$BUILD_DIR/Makefile" ] && [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" "$@" >"$BUILD_DIR/configure.log" 2>&1 ||
    { cat "$BUILD_DIR/configure.log"; exit 1; }
fi
if ! cmake --build "$BUILD_DIR" -j"$(nproc)" >"$BUILD_DIR/build.log" 2>&1; then
  grep -E -B2 -A6 "error|Error" "$BUILD_DIR/build.log" | head -80
  echo "build failed: the full log is $BUILD_DIR/build.log" >&2
  exit 1
fi
grep -E "warning:" "$BUILD_DIR/build.log" | sort -u | head -20 || true
