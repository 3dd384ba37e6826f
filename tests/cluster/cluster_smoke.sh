#!/usr/bin/env bash
# tests/cluster/cluster_smoke.sh: the namespace Slurm cluster works as the
# multi-host tests need it (tests/cluster/cluster.sh).
#
# Checks, on a 3-host cluster: Slurm runs a step on every host
# (salloc -N3 srun hostname prints h1 h2 h3); hosts reach each other by name
# over TCP; each host has its own node-local directory at one path; a drained
# node shows its reason in sinfo -R; host_link h3 down cuts h3 off; after
# cluster_down no process, namespace, bridge, veth or /etc/netns entry of the
# cluster remains. Prints how long cluster_up took (a figure, not a check).
# Needs root, ip netns and Slurm/munge (else exits 77, skipped).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
reason=$(cluster_can_run) || {
  echo "$reason"
  exit 77
}
N=${FTC_SMOKE_HOSTS:-3}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ftcsmoke.XXXXXX")
C=$TMP/cluster
cleanup() {
  cluster_down "$C"
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
pass() { echo "PASS: $*"; }

t0=$(date +%s%N)
cluster_up "$C" "$N" || fail "cluster_up $N"
t1=$(date +%s%N)
echo "cluster_up $N hosts: $(((t1 - t0) / 1000000)) ms (K=$FTC_K)"

# 1. One step on every host, launched from the head.
want=$(for ((i = 1; i <= N; i++)); do echo "h$i"; done)
got=$(cluster_exec head salloc -N"$N" srun hostname 2>/dev/null | sort)
[ "$got" = "$want" ] || fail "salloc -N$N srun hostname printed '$got', want '$want'"
pass "salloc -N$N srun hostname ran on h1..h$N"

# 2. TCP by name between hosts: a server in h3 on a kernel-picked port
#    answers a client in h2 that connects to "h3".
cluster_exec h3 python3 -c '
import socket, sys
s = socket.socket()
s.bind(("0.0.0.0", 0))
s.listen(4)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    c, _ = s.accept()
    c.sendall(("hello from " + socket.gethostname() + "\n").encode())
    c.close()
' "$C/shared/port" &
disown # cluster_down kills it with everything in h3; no job report then
for ((i = 0; i < 100; i++)); do
  [ -s "$C/shared/port" ] && break
  sleep 0.1
done
port=$(cat "$C/shared/port") || fail "the server in h3 did not start"
# shellcheck disable=SC2016
msg=$(cluster_exec h2 timeout 10 bash -c 'exec 3<>"/dev/tcp/h3/$1" && head -n1 <&3' sh "$port") ||
  fail "h2 could not reach h3:$port by name"
[ "$msg" = "hello from h3" ] || fail "h2 got '$msg' from h3, want 'hello from h3'"
pass "h2 reaches h3 by name over TCP"

# 3. Node-local directories: the same path, a different directory per host,
#    both for a shell in the host and for a Slurm step on it.
for ((i = 1; i <= N; i++)); do
  cluster_exec "h$i" sh -c 'hostname >"$1/local/who"' sh "$C"
done
for ((i = 1; i <= N; i++)); do
  [ "$(cat "$C/hosts/h$i/local/who")" = "h$i" ] || fail "h$i's local dir holds '$(cat "$C/hosts/h$i/local/who")'"
done
[ ! -e "$C/local/who" ] || fail "a host's local file shows in the root namespace's $C/local"
got=$(cluster_exec head salloc -N"$N" srun sh -c 'echo "$(hostname):$(cat "$1/local/who")"' sh "$C" 2>/dev/null | sort)
want=$(for ((i = 1; i <= N; i++)); do echo "h$i:h$i"; done)
[ "$got" = "$want" ] || fail "steps saw local dirs '$got', want '$want'"
pass "each host sees its own node-local dir at $C/local"

# 4. Drain a node with a reason: sinfo -R shows it.
cluster_exec head scontrol update nodename=h2 state=drain reason="smoke drain test"
cluster_exec head sinfo -R -h -o '%n|%E' | grep -qx 'h2|smoke drain test' ||
  fail "sinfo -R does not show h2 drained: $(cluster_exec head sinfo -R -h -o '%n|%E')"
pass "drained h2 shows in sinfo -R"

# 5. host_link h3 down: h3 is unreachable from h1; up again: reachable.
# shellcheck disable=SC2016
probe='exec 3<>"/dev/tcp/h3/$1" && head -n1 <&3'
cluster_exec h1 timeout 10 bash -c "$probe" sh "$port" >/dev/null || fail "h1 cannot reach h3 before the cut"
host_link h3 down
if cluster_exec h1 timeout 5 bash -c "$probe" sh "$port" >/dev/null 2>&1; then
  fail "h1 still reaches h3 after host_link h3 down"
fi
host_link h3 up
pass "host_link h3 down cuts h3 off from h1"

# 6. cluster_down leaves nothing behind.
k=$FTC_K
pids=$(awk '{print $1}' "$C/pids")
for h in $(_ftc_hosts); do pids="$pids $(ip netns pids "ftc$k-$h")"; done
cluster_down "$C"
cluster_down "$C" # idempotent
for p in $pids; do
  if kill -0 "$p" 2>/dev/null && [ "$(cat "/proc/$p/stat" 2>/dev/null | awk '{print $3}')" != Z ]; then
    fail "process $p ($(cat "/proc/$p/comm" 2>/dev/null)) outlived cluster_down"
  fi
done
left=$(ip netns list | grep -c "^ftc$k-" || true)
[ "$left" -eq 0 ] || fail "$left namespaces ftc$k-* remain"
! ip link show "ftcbr$k" >/dev/null 2>&1 || fail "bridge ftcbr$k remains"
[ -z "$(ip -o link show | grep -E ": ftc${k}v")" ] || fail "veths ftc${k}v* remain"
[ -z "$(ls -d /etc/netns/ftc"$k"-* 2>/dev/null)" ] || fail "/etc/netns/ftc$k-* remain"
pass "cluster_down removed every process, namespace, link and /etc/netns entry"
