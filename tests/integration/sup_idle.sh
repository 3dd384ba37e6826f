#!/usr/bin/env bash
# Idle connections cannot exhaust the supervisor. Under `ulimit -n 256`
# (soft and hard, so raising the soft limit cannot help), 600 connections
# to the control port that never say HELLO, held for longer than the HELLO
# deadline, while a run trains: the run finishes, no checkpoint fails (the
# store still gets descriptors), and the log stays small (accept errors and
# refused connections are rate limited).
# Then descriptors really run out (ulimit -n 27: fewer than the process
# needs with its connections without HELLO): accept fails with EMFILE, and
# the listener must pause (100 ms doubling to 1 s) instead of spinning, so
# only a few accept errors happen at all, and their lines are rate limited.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST"

(
  ulimit -n 256
  FAKE_STEP_MS=100 exec "$FT_BIN/supervise" --state "$ST" --worker "$FAKE" --steps 80 \
    --set checkpoint.every_steps=5 --set watchdog.heartbeat_timeout_s=3 --spares 0 \
    "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1
) &
SUP=$!
for _ in $(seq 100); do [ -s "$ST/control.port" ] && break; sleep 0.1; done
[ -s "$ST/control.port" ] || fail "no control.port"
PORT=$(cat "$ST/control.port")

python3 - "$PORT" <<'PY'
import resource, socket, sys, time
port = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
socks, refused = [], 0
end = time.time() + 8  # longer than the 5 s HELLO deadline
while time.time() < end:
    if len(socks) < 600:
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            refused += 1
            time.sleep(0.01)
    else:
        time.sleep(0.05)
print("idle: %d connections open, %d refused" % (len(socks), refused))
for s in socks:
    s.close()
PY
rc=0
wait $SUP || rc=$?
[ $rc -eq 0 ] || { tail -20 "$ST.out"; fail "supervise exited $rc under idle connections"; }
has_event "$ST" run_done || fail "no run_done"
has_event "$ST" checkpoint_failed && { grep checkpoint_failed "$ST.out" | head -3; fail "a checkpoint failed"; }
size=$(stat -c %s "$ST.out")
[ "$size" -lt 100000 ] || fail "supervise's output is $size bytes: not rate limited"
n=$(events "$ST" | grep -c connection_closed || true)
[ "$n" -lt 200 ] || fail "$n connection_closed events: not rate limited"
has_event "$ST" connection_closed '"HELLO" in e["reason"] or e.get("suppressed", 0) > 0' ||
  fail "no event says idle connections were closed"
pass "600 idle connections under ulimit -n 256: run done, $size bytes of output, $n close events"

ST2=$TMP/state2
mkdir -p "$ST2"
(
  ulimit -n 27
  FAKE_STEP_MS=100 exec "$FT_BIN/supervise" --state "$ST2" --worker "$FAKE" --steps 1000 \
    --set checkpoint.every_steps=50 --set watchdog.heartbeat_timeout_s=3 --spares 0 \
    "$FT_SRC/examples/demo.yaml" >"$ST2.out" 2>&1
) &
SUP=$!
for _ in $(seq 100); do has_event "$ST2" generation_started 2>/dev/null && break; sleep 0.1; done
has_event "$ST2" generation_started || { cat "$ST2.out"; fail "no gang under ulimit -n 27"; }
python3 - "$(cat "$ST2/control.port")" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
socks = []
end = time.time() + 4
while time.time() < end:
    try:
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=1))
    except OSError:
        time.sleep(0.01)
    if len(socks) > 200:
        socks.pop(0).close()
PY
kill -INT $SUP
rc=0
wait $SUP || rc=$?
[ $rc -eq 130 ] || { tail -20 "$ST2.out"; fail "SIGINT under EMFILE: exit $rc, want 130"; }
grep -q "accept on the control port: Too many open files" "$ST2.out" ||
  { tail -20 "$ST2.out"; fail "accept never failed with EMFILE: the test did not test"; }
errors=$(python3 - "$ST2.out" <<'PY'
import re, sys
n = 0
for line in open(sys.argv[1]):
    if "accept on the control port" in line:
        n += 1
        m = re.search(r"\((\d+) similar line\(s\) left out\)", line)
        n += int(m.group(1)) if m else 0
    m = re.search(r"(\d+) more line\(s\) about the control port left out", line)
    n += int(m.group(1)) if m else 0
print(n)
PY
)
lines=$(grep -c "control port" "$ST2.out" || true)
[ "$errors" -lt 200 ] || fail "$errors accept errors: the listener does not back off"
[ "$lines" -lt 40 ] || fail "$lines lines about the control port: not rate limited"
pass "EMFILE on accept: $errors accept errors in $lines lines, no spinning"
