#!/bin/bash
# ckpt_property: random sequences of `ckpt` commands (ls, gc, verify, pin,
# rebuild-catalog, restore, and a writer committing new checkpoints) against
# a local store and an s3 store while faults hit the S3 endpoint and the local
# disk; after every command, every checkpoint an earlier `ls` showed good must
# still restore bit-identically unless a gc's policy allowed deleting it
# (ckpt_property.py says what is injected and what is checked).
#
# The s3 store is moto with signatures checked (s3_lib.sh) behind
# chaos/s3_faults.py; the local store and the s3 cache each sit on a small
# tmpfs so the disk can be filled and made read-only (root; without it those
# two faults are left out and the script says so).
#
# FT_PROPERTY_SEED=N replays a run (the seed is printed first);
# FT_PROPERTY_OPS=N commands per store (default 40; the sanitizer build sets
# fewer). A violation prints the seed and the commands that led to it.
set -u
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_property.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
PROXY_PID=
MOUNTS=()
cleanup() {
  [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
  s3_stop
  for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
SEED=${FT_PROPERTY_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
OPS=${FT_PROPERTY_OPS:-40}
echo "seed $SEED (replay: FT_PROPERTY_SEED=$SEED ctest -R ckpt_property)"

# tmpfs DIR SIZE: mounts one and sets DISK=(--disk DIR), or DISK=() when it cannot
tmpfs() {
  mkdir -p "$1"
  DISK=()
  if [ "$(id -u)" = 0 ] && mount -t tmpfs -o "size=$2" tmpfs "$1" 2>/dev/null; then
    MOUNTS+=("$1")
    DISK=(--disk "$1")
  fi
}
PY="$FT_SRC/tests/integration/ckpt_property.py"

# ---- local ------------------------------------------------------------------------
tmpfs "$T/ldisk" 48m
python3 "$PY" --kind local --store "local:$T/ldisk/store" --work "$T/lwork" --seed "$SEED" \
  --ops "$OPS" "${DISK[@]}" || fail "local store (seed $SEED)"

# ---- s3 ---------------------------------------------------------------------------
s3_start
s3_mkbucket prop
PP=$(free_port)
echo ok >"$T/mode"
python3 "$FT_SRC/chaos/s3_faults.py" --listen "$PP" --upstream "$S3_PORT" --mode-file "$T/mode" \
  >"$T/proxy.out" 2>&1 &
PROXY_PID=$!
s3_wait_port "$PP" "$PROXY_PID" || fail "proxy did not start: $(cat "$T/proxy.out")"
export FT_S3_ENDPOINT="http://127.0.0.1:$PP"
export FT_S3_TIMEOUT_S=2 FT_S3_RETRIES=2 FT_S3_RETRY_BUDGET_S=4 FT_S3_DRAIN_S=4
tmpfs "$T/sdisk" 48m
python3 "$PY" --kind s3 --store s3://prop/run --cache "$T/sdisk/cache" --mode-file "$T/mode" \
  --work "$T/swork" --seed "$SEED" --ops "$OPS" "${DISK[@]}" || fail "s3 store (seed $SEED)"
echo "PASS: ckpt_property (seed $SEED)"
