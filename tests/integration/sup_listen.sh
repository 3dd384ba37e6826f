#!/usr/bin/env bash
# The control port's address on one host (issue 13, addresses): with the
# local launcher supervise listens on loopback only (seen in
# /proc/net/tcp during the run) and advertises that address
# (DIR/supervisor.addr, run_started listen/advertise, the workers'
# --connect); --advertise is what workers are told, --listen HOST:PORT
# binds that port; a bind that cannot succeed (an address that is not this
# host's, a port in use) exits 2 naming the address and the option or key it
# came from; a malformed --listen is a usage error. The accept queue is the
# kernel's longest. Runs without root.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"

# listening_on PORT: the local address (hex, as /proc/net/tcp writes it) of
# the socket listening on PORT, in state LISTEN (0A).
listening_on() {
  python3 - "$1" <<'PY'
import sys
port = int(sys.argv[1])
for path in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(path).readlines()[1:]:
        f = line.split()
        addr, p = f[1].split(":")
        if int(p, 16) == port and f[3] == "0A":
            print(addr)
PY
}

# 1. the local launcher: loopback, during the run
ST=$TMP/s1
mkdir -p "$ST"
sup_bg "$ST" --steps 300
for _ in $(seq 300); do [ -s "$ST/supervisor.addr" ] && break; sleep 0.05; done
[ -s "$ST/supervisor.addr" ] || { cat "$ST.out"; fail "no supervisor.addr"; }
port=$(cat "$ST/control.port")
kill -0 "$SUP" || fail "supervise ended before its port could be looked at"
[ "$(listening_on "$port")" = 0100007F ] ||
  fail "the control port $port listens on '$(listening_on "$port")', not loopback (0100007F) only"
[ "$(cat "$ST/supervisor.addr")" = "127.0.0.1:$port" ] ||
  fail "supervisor.addr: '$(cat "$ST/supervisor.addr")'"
# its accept queue is as long as the kernel allows (a gang of thousands
# connects at once): a listening socket's Send-Q is its backlog
want=$(($(cat /proc/sys/net/core/somaxconn) < 65535 ? $(cat /proc/sys/net/core/somaxconn) : 65535))
got=$(ss -ltnH "sport = :$port" | awk '{print $3}')
[ "$got" = "$want" ] || fail "the control port's accept queue is '$got' long, not $want (net.core.somaxconn)"
kill -TERM "$SUP"
wait "$SUP" || true
has_event "$ST" run_started "e['listen'] == '127.0.0.1:$port' and e['advertise'] == '127.0.0.1:$port'" ||
  fail "run_started does not carry listen/advertise"
grep -q "control port $port on 127.0.0.1:$port, workers dial 127.0.0.1:$port" "$ST.out" ||
  fail "supervise did not print where it listens"

# 2. --listen with a port, --advertise a name: the (real) workers are told
# the name and resolve it
ST=$TMP/s2
mkdir -p "$ST"
synth_data "$TMP" 100000
free=$(python3 -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')
"$FT_BIN/supervise" --state "$ST" --steps 6 --set checkpoint.every_steps=3 \
  --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin" \
  --listen "localhost:$free" --advertise localhost "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 ||
  { cat "$ST.out"; fail "a run with --listen/--advertise failed"; }
[ "$(cat "$ST/supervisor.addr")" = "localhost:$free" ] ||
  fail "supervisor.addr: '$(cat "$ST/supervisor.addr")', want localhost:$free"
has_event "$ST" run_started "e['listen'] == '127.0.0.1:$free' and e['port'] == $free" ||
  fail "--listen localhost:$free was not bound"
has_event "$ST" run_done || fail "a run whose workers dial a host name did not finish"
grep -q "worker: node 0 slot 0: gloo on 127.0.0.1 (route to the supervisor)" "$ST/logs/node0.slot0.log" ||
  { cat "$ST/logs/node0.slot0.log"; fail "the worker did not say where Gloo binds"; }

# 3. bind failures: exit 2, naming the address and where it came from
ST=$TMP/s3
mkdir -p "$ST"
rc=0
sup_run "$ST" --listen 203.0.113.7:0 || rc=$?
[ "$rc" = 2 ] || fail "--listen on an address not of this host: exit $rc, want 2"
grep -q "cannot listen on 203.0.113.7:0 (from --listen): .*not an address of this host" "$ST.out" ||
  { cat "$ST.out"; fail "no message naming the address and --listen"; }
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("localhost", 0)); s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(30)' "$TMP/busy.port" &
holder=$!
for _ in $(seq 100); do [ -s "$TMP/busy.port" ] && break; sleep 0.05; done
busy=$(cat "$TMP/busy.port")
rc=0
sup_run "$ST" --set "supervisor.listen=localhost:$busy" || rc=$?
kill "$holder"
[ "$rc" = 2 ] || fail "a port in use: exit $rc, want 2"
grep -q "cannot listen on 127.0.0.1:$busy (from supervisor.listen): Address already in use" "$ST.out" ||
  { cat "$ST.out"; fail "no message naming the port in use and supervisor.listen"; }
rc=0
sup_run "$ST" --listen "host:99999" || rc=$?
[ "$rc" = 2 ] && grep -q -- "--listen: 'host:99999': port '99999' is not a number 0-65535" "$ST.out" ||
  { cat "$ST.out"; fail "a bad --listen: exit $rc"; }
# 4. the workers' Gloo address: FT_IFACE (an interface name) wins; a
# nodes.iface that is no interface of the host is a configuration error
ST=$TMP/s4
mkdir -p "$ST"
FT_IFACE=lo "$FT_BIN/supervise" --state "$ST" --steps 3 --set checkpoint.every_steps=3 \
  --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin" \
  --set nodes.iface=nosuchif0 "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 ||
  { cat "$ST.out"; fail "a run with FT_IFACE=lo failed"; }
grep -q "worker: node 1 slot 0: gloo on 127.0.0.1 (FT_IFACE=lo)" "$ST/logs/node1.slot0.log" ||
  { cat "$ST/logs/node1.slot0.log"; fail "FT_IFACE did not override nodes.iface"; }
ST=$TMP/s5
mkdir -p "$ST"
rc=0
"$FT_BIN/supervise" --state "$ST" --steps 3 --set checkpoint.every_steps=3 \
  --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin" \
  --set nodes.iface=nosuchif0 "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$ST.out"; fail "a nodes.iface the host lacks: exit $rc, want 1 (run failed)"; }
grep -q "worker: nodes.iface=nosuchif0: no interface or address of this host is called 'nosuchif0'" \
  "$ST/logs/node0.slot0.log" || { cat "$ST/logs/node0.slot0.log"; fail "no message naming nodes.iface"; }

pass "local launcher on loopback; --listen/--advertise; bind failures exit 2 naming the address; FT_IFACE > nodes.iface"
