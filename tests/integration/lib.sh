# Shared helpers for the shell-driven integration tests. Source it.
# FT_BIN (the build's bin/) and FT_SRC (the source root) come from CTest.
set -euo pipefail
: "${FT_BIN:?FT_BIN must point to build/bin}"
: "${FT_SRC:?FT_SRC must point to the source root}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fttest.XXXXXX")
cleanup() {
  local pids
  pids=$(jobs -p)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
pass() { echo "PASS: $*"; }

# synth_data DIR: writes the synthetic corpus as DIR/synth_{train,val}_*.bin
synth_data() {
  "$FT_BIN/ftdata" synth --out "$1/synth" --tokens "${2:-300000}" >/dev/null
}

# The tiny run every worker test trains: the demo config on data in $TMP,
# on FT_TEST_DEVICE (cpu unless set; the GPU tests set cuda). FT_TEST_VAL
# set but empty leaves out the validation data (and so the final validation
# pass).
tiny_args() {
  echo --standalone "$FT_SRC/examples/demo.yaml" --set "data.train=$TMP/synth_train_*.bin" \
    --set "data.val=${FT_TEST_VAL-$TMP/synth_val_*.bin}" \
    --set "nodes.device=${FT_TEST_DEVICE:-cpu}" --quiet
}

# losses FILE: the step and loss of each line of a --log-json file.
losses() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "loss" in o:
        print(o["step"], repr(o["loss"]))
' "$1"
}

# has_checkpoint STORE STEP: true if `ckpt ls --json` lists STEP as committed or good.
has_checkpoint() {
  "$FT_BIN/ckpt" --store "$1" ls --json 2>/dev/null | python3 -c '
import json, sys
step = int(sys.argv[1])
ok = any(c["step"] == step and c["state"] in ("committed", "good") for c in json.load(sys.stdin))
sys.exit(0 if ok else 1)
' "$2"
}

# http_addr STATE LOG: the HTTP address of the supervise running on STATE
# (its STATE/http.addr, waited for 10 s at most); fails with LOG's tail.
# Use as A=$(http_addr ...): a failure ends the test (set -e).
http_addr() {
  local i
  for ((i = 0; i < 100; i++)); do
    [ -s "$1/http.addr" ] && break
    sleep 0.1
  done
  [ -s "$1/http.addr" ] || fail "no $1/http.addr: $(tail -5 "$2")"
  cat "$1/http.addr"
}
