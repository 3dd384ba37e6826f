#!/usr/bin/env bash
# Runs a chaos suite (chaos/chaos.py) in a temporary folder; keeps the folder
# (events, logs, stores) under build/chaos-<suite> when a case fails.
. "$(dirname "$0")/lib.sh"
suite=$1
shift
if python3 "$FT_SRC/chaos/chaos.py" --bin "$FT_BIN" --work "$TMP/w" --suite "$suite" "$@"; then
  exit 0
fi
keep="${FT_BUILD:-$TMP/..}/chaos-$suite"
rm -rf "$keep" && cp -r "$TMP/w" "$keep" 2>/dev/null && echo "kept the suite's files in $keep" >&2
exit 1
