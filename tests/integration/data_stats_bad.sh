#!/bin/bash
# `ftdata stats` refuses each kind of bad shard with exit code 1 and names the
# file on stderr; usage errors exit 2; good data exits 0.
set -u
FTDATA="${FT_BIN:?FT_BIN not set}/ftdata"
[ -x "$FTDATA" ] || { echo "FAIL: $FTDATA not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ft_data_stats_bad.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$FTDATA" synth --out "$tmp/good/c" --tokens 20000 --seed 3 >/dev/null || fail "synth"
good="$tmp/good/c_train_000.bin"
"$FTDATA" stats "$tmp/good/c_*.bin" >"$tmp/out" 2>&1 || fail "stats on good data: $(cat "$tmp/out")"

# put FILE OFFSET OCTAL-BYTES: overwrite bytes in place.
put() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

cp "$good" "$tmp/bad_magic.bin";   put "$tmp/bad_magic.bin" 0 '\071\060\000\000'    # 12345
cp "$good" "$tmp/bad_version.bin"; put "$tmp/bad_version.bin" 4 '\007\000\000\000'  # 7
head -c 5000 "$good" >"$tmp/truncated.bin"
cp "$good" "$tmp/big_token.bin";   put "$tmp/big_token.bin" $((1024 + 2 * 10)) '\054\001' # 300
for i in $(seq 100); do echo "just some text, not tokens"; done >"$tmp/text.bin"

check_bad() { # check_bad FILE-OR-GLOB EXPECTED-TEXT [FILE-NAMED]
  local f="$1" want="$2" named="${3:-$1}" rc
  "$FTDATA" stats "$f" >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 1 ] || fail "stats $f: exit $rc, want 1"
  grep -qF "$named" "$tmp/err" || fail "stats $f: stderr does not name the file: $(cat "$tmp/err")"
  grep -qF "$want" "$tmp/err" || fail "stats $f: stderr lacks '$want': $(cat "$tmp/err")"
  echo "ok: $(cat "$tmp/err")"
}
check_bad "$tmp/bad_magic.bin" "20240520"
check_bad "$tmp/bad_version.bin" "version 7"
check_bad "$tmp/truncated.bin" "bytes"
check_bad "$tmp/big_token.bin" "token 300"
check_bad "$tmp/text.bin" "text"
check_bad "$tmp/nothing_*.bin" "no token shards match"
# The bad shard is named even when good ones match the same glob.
cp "$good" "$tmp/good/c_train_001.bin"; put "$tmp/good/c_train_001.bin" 4 '\002\000\000\000'
check_bad "$tmp/good/c_train_*.bin" "version 2" "$tmp/good/c_train_001.bin"
# --vocab widens what is valid.
"$FTDATA" stats --vocab 301 "$tmp/big_token.bin" >/dev/null 2>&1 || fail "--vocab 301 should accept token 300"

# Usage errors: exit 2.
for args in "" "bogus" "stats" "stats --vocab 0 x" "synth" "synth --out x --tokens abc" \
            "encode --out x" "encode --in x --out y --val-frac 1.5" "stats a b"; do
  "$FTDATA" $args >/dev/null 2>&1; rc=$?
  [ "$rc" -eq 2 ] || fail "ftdata $args: exit $rc, want 2"
done
"$FTDATA" --help >"$tmp/help" || fail "--help exit code"
grep -q "Exit codes" "$tmp/help" || fail "--help does not document exit codes"

[ "$fails" -eq 0 ] && echo PASS || { echo "$fails failure(s)"; exit 1; }
