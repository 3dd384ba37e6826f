#!/usr/bin/env bash
# The worker refuses bad data with the file named and exit code 3.
. "$(dirname "$0")/lib.sh"
synth_data "$TMP" 20000
good=$(ls "$TMP"/synth_train_*.bin | head -1)

check() { # name file-glob
  set +e
  "$FT_BIN/worker" --standalone "$FT_SRC/examples/demo.yaml" --set "data.train=$2" --steps 2 \
    --quiet 2>"$TMP/err"
  rc=$?
  set -e
  [ $rc -eq 3 ] || fail "$1: exit code $rc, expected 3 ($(cat "$TMP/err"))"
  grep -qF "$(basename "$2")" "$TMP/err" || fail "$1: the error does not name the file: $(cat "$TMP/err")"
  pass "$1: $(head -1 "$TMP/err")"
}
python3 - "$good" "$TMP" <<'PY'
import struct, sys
src, tmp = sys.argv[1], sys.argv[2]
data = bytearray(open(src, "rb").read())
def w(name, b): open(f"{tmp}/{name}", "wb").write(b)
bad = bytearray(data); bad[0:4] = struct.pack("<i", 12345); w("badmagic.bin", bad)
bad = bytearray(data); bad[4:8] = struct.pack("<i", 7); w("badversion.bin", bad)
w("truncated.bin", data[:-100])
bad = bytearray(data); bad[1024 + 2 * 17: 1024 + 2 * 18] = struct.pack("<H", 300); w("bigtoken.bin", bad)
PY
check "bad magic" "$TMP/badmagic.bin"
check "bad version" "$TMP/badversion.bin"
check "size mismatch" "$TMP/truncated.bin"
check "token >= vocab" "$TMP/bigtoken.bin"
check "empty glob" "$TMP/nothing_*.bin"
