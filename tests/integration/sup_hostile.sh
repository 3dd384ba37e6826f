#!/usr/bin/env bash
# Garbage, oversized frames, a HELLO with a bad MAC, a HELLO for another run
# and a message before HELLO, all sent to the control port during a run:
# each closes only its own connection (event connection_closed with a
# reason), and the run still finishes. On the HTTP port, 70 clients that
# ask for the dashboard and never read: at most 64 are answered (503 "too
# many HTTP clients" to the rest), and the port answers again once they go.
# Then an authenticated gang worker (node 0 slot 0, FAKE_FLOOD) asks
# for 30 x 15 MiB of KV answers and reads nothing for a second (issue 41:
# 1.5 GB of RSS, nothing closed): the supervisor's peak RSS stays under
# 300 MiB, that connection is closed at its output cap with an event naming
# the worker and the bytes queued, its node is blamed (peer_misbehaved),
# and the run still finishes.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
ST=$TMP/state
mkdir -p "$ST" "$TMP/once"

FAKE_STEP_MS=100 FAKE_FLOOD_NODE=0 FAKE_FLOOD_STEP=3 FAKE_ONCE_DIR=$TMP/once FAKE_GATE=$TMP/go \
  sup_bg "$ST" --spares 0
# the supervisor's peak resident memory (VmHWM) while it runs
(while kill -0 "$SUP" 2>/dev/null; do
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$SUP/status" 2>/dev/null) && [ -n "$hwm" ] &&
    echo "$hwm" >"$TMP/hwm"
  sleep 0.05
done) &
for _ in $(seq 100); do [ -s "$ST/control.port" ] && break; sleep 0.1; done
[ -s "$ST/control.port" ] || fail "no control.port"
PORT=$(cat "$ST/control.port")
for _ in $(seq 100); do [ -s "$ST/http.addr" ] && break; sleep 0.1; done
[ -s "$ST/http.addr" ] || fail "no http.addr"

VERSION=$(sed -n 's/^#define FT_WIRE_VERSION \([0-9]*\).*/\1/p' "$FT_SRC/common/ft_wire.h")
python3 - "$PORT" "$VERSION" "$ST/http.addr" <<'PY'
import os, socket, struct, sys, time
port, VERSION = int(sys.argv[1]), int(sys.argv[2])

def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    hdr = s.recv(4)
    (n,) = struct.unpack(">I", hdr)
    body = b""
    while len(body) < n:
        body += s.recv(n - len(body))
    assert body[0] == VERSION and body[1] == 1, "first frame must be a CHALLENGE"
    return s

def wstr(b):
    return struct.pack(">I", len(b)) + b

def frame(t, payload):
    return struct.pack(">IBB", len(payload) + 2, VERSION, t) + payload

def closed(s):
    s.settimeout(5)
    try:
        while True:
            d = s.recv(4096)
            if not d:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False

cases = {
    "garbage": os.urandom(64) + b"\xff" * 8,
    "huge frame before HELLO": struct.pack(">IBB", 1 << 20, VERSION, 2) + b"x" * 100,
    "bad version": struct.pack(">IBB", 10, 9, 2) + b"x" * 8,
    "bad MAC": frame(2, wstr(b"gpt2-tiny") + struct.pack(">QIII", 0, 0, 0, 1234) + b"\0" * 32),
    "another run": frame(2, wstr(b"other-run") + struct.pack(">QIII", 0, 0, 0, 1234) + b"\1" * 32),
    "STEP before HELLO": frame(6, wstr(b"gpt2-tiny") + struct.pack(">Qq", 1, 5) + b"\0" * 32),
    "truncated HELLO": frame(2, wstr(b"gpt2-tiny") + b"\0\0"),
}
for name, data in cases.items():
    s = conn()
    try:
        s.sendall(data)
    except BrokenPipeError:
        pass
    if not closed(s):
        print("FAIL: supervisor kept the connection after:", name)
        sys.exit(1)
    s.close()
# a client that connects and vanishes
s = conn(); s.close()
print("hostile: %d cases closed" % len(cases))

# HTTP: 70 clients each ask for the dashboard 20 times and read nothing;
# at most 64 are answered (one answer each held), the rest get 503 and
# are closed; once they go, the port answers again
host, hport = open(sys.argv[3]).read().strip().rsplit(":", 1)
def http_status(path):
    s = socket.create_connection((host, int(hport)), timeout=5)
    s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    head = s.recv(4096).decode("latin-1")
    s.close()
    return head
held = []
for _ in range(70):
    s = socket.create_connection((host, int(hport)), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" * 20)
    held.append(s)
for _ in range(100):
    head = http_status(b"/metrics")
    if head.startswith("HTTP/1.1 503"):
        break
    time.sleep(0.05)
if "503 too many HTTP clients" not in head.split("\r\n")[0]:
    print("FAIL: 70 clients that never read were all answered; the last said:", head[:80])
    sys.exit(1)
for s in held:
    s.close()
for _ in range(100):
    head = http_status(b"/metrics")
    if head.startswith("HTTP/1.1 200"):
        break
    time.sleep(0.05)
if not head.startswith("HTTP/1.1 200"):
    print("FAIL: the HTTP port did not answer again after the clients left:", head[:80])
    sys.exit(1)
print("hostile: HTTP clients past the cap refused, then answered again")
PY
touch "$TMP/go" # the run may train now (the flooding worker's step 3)
wait $SUP || { rc=$?; cat "$ST.out"; fail "supervise exited $rc after hostile clients"; }
has_event "$ST" run_done || fail "run not done"
n=$(events "$ST" | grep -c connection_closed || true)
[ "$n" -ge 7 ] || fail "expected >= 7 connection_closed events, got $n"
has_event "$ST" connection_closed '"MAC" in e["reason"]' || fail "no bad-MAC reason logged"
has_event "$ST" connection_closed '"another run" in e["reason"]' || fail "no wrong-run reason"
grep -q "$(printf '%s' FT_RUN_TOKEN)=" "$ST.out" && fail "token leaked into the log"

# the worker that stopped reading
wait
[ -e "$TMP/once/flood" ] || fail "the flooding worker never flooded"
has_event "$ST" connection_closed '"output queue over its cap" in e["reason"] and e["node"] == 0 and e["slot"] == 0 and e["rank"] >= 0 and e["queued_bytes"] > 0 and e["peer"].startswith("127.0.0.1:")' ||
  { events "$ST" | sort | uniq -c; fail "no connection_closed naming the worker over its output cap"; }
has_event "$ST" fault_detected 'e["kind"] == "peer_misbehaved" and e["node"] == 0' ||
  fail "the flooding worker's node was not blamed"
grep -h -e "output queue" -e peer_misbehaved "$ST/events.jsonl" || true
hwm_kb=$(cat "$TMP/hwm")
echo "supervise peak RSS: $((hwm_kb / 1024)) MiB"
[ "$hwm_kb" -lt $((300 * 1024)) ] || fail "supervise grew to $((hwm_kb / 1024)) MiB (bound 300 MiB)"
pass "hostile clients closed; a worker that stopped reading closed at its cap; run finished"
