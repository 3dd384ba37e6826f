#!/usr/bin/env bash
# Checks that every tracked C, C++ and CUDA file is formatted as .clang-format
# says. Exits 1 and names the files (with clang-format's first complaints)
# when one is not; `scripts/check-format.sh --fix` formats them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
[ "${1:-}" = "--fix" ] && fix=1
command -v clang-format >/dev/null || { echo "check-format: clang-format is missing (scripts/install-deps.sh)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.cu' '*.cuh')
if [ "$fix" = 1 ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) not formatted (fix: scripts/check-format.sh --fix):" >&2
  for f in "${bad[@]}"; do
    echo "  $f" >&2
    clang-format --dry-run "$f" 2>&1 | head -6 | sed 's/^/    /' >&2
  done
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
