#!/usr/bin/env bash
# A run across hosts that are network namespaces (issue 13, addresses):
# three hosts fta<pid>-h1..h3 (h3 the warm spare) and the supervisor's host
# fta<pid>-head, joined by a bridge that lives in the head namespace, so
# the hosts reach each other only over it. supervise runs in head with
# --listen 0.0.0.0:0 and the command launcher `ip netns exec {host}
# {argv}`; it resolves the hosts' names from /etc/netns/<head>/hosts. The
# real worker trains the tiny model.
# Asserts: supervisor.addr and run_started hold the head's bridge address
# (the route to the first host), every worker's log names its own bridge
# address as its Gloo address, killing every process in h1's namespace
# promotes the spare h3 and the run reaches its last step.
# Needs root and `ip netns`; exits 77 with the reason otherwise.
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: no ip(8)"; exit 77; }

P=fta$$
HEAD=$P-head
HOSTS=("$P-h1" "$P-h2" "$P-h3")
NET=10.213.77
HEADIP=$NET.1
declare -A IP=(["$P-h1"]=$NET.11 ["$P-h2"]=$NET.12 ["$P-h3"]=$NET.13)
MADE=()
SUP=
teardown() {
  local ns pid
  set +e # tear down everything, whatever fails
  [ -n "$SUP" ] && kill -9 "$SUP" 2>/dev/null
  for ns in "${MADE[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  for ns in "${MADE[@]}"; do
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  cleanup
}
trap teardown EXIT

ip netns add "$HEAD" 2>/dev/null || { echo "SKIP: ip netns add failed (no CAP_SYS_ADMIN?)"; exit 77; }
MADE+=("$HEAD")
NSX() { ip netns exec "$@"; }
NSX "$HEAD" ip link set lo up
NSX "$HEAD" ip link add "${P}br" type bridge
NSX "$HEAD" ip addr add "$HEADIP/24" dev "${P}br"
NSX "$HEAD" ip link set "${P}br" up
mkdir -p "/etc/netns/$HEAD"
{
  echo "127.0.0.1 localhost"
  echo "$HEADIP $HEAD"
  for h in "${HOSTS[@]}"; do echo "${IP[$h]} $h"; done
} >"/etc/netns/$HEAD/hosts"
i=0
for h in "${HOSTS[@]}"; do
  i=$((i + 1))
  ip netns add "$h"
  MADE+=("$h")
  mkdir -p "/etc/netns/$h"
  cp "/etc/netns/$HEAD/hosts" "/etc/netns/$h/hosts"
  # the veth pair is made in the head namespace, one end moved to the host
  NSX "$HEAD" ip link add "${P}v$i" type veth peer name "${P}e$i"
  NSX "$HEAD" ip link set "${P}e$i" netns "$h"
  NSX "$HEAD" ip link set "${P}v$i" master "${P}br" up
  NSX "$h" ip link set lo up
  NSX "$h" ip addr add "${IP[$h]}/24" dev "${P}e$i"
  NSX "$h" ip link set "${P}e$i" up
done

synth_data "$TMP" 200000
python3 - "$FT_SRC/examples/demo.yaml" "$TMP/run.yaml" "$TMP" "$P" <<'PY'
import sys
src, dst, tmp, p = sys.argv[1:]
out = []
for line in open(src):
    if line.startswith("chaos:"):
        continue
    if line.startswith("data:"):
        line = 'data: {train: "%s/synth_train_*.bin", val: "%s/synth_val_*.bin"}\n' % (tmp, tmp)
    if line.strip() == "launcher: local":
        line = ('  launcher: command\n'
                '  command: "ip netns exec {host} {argv} --threads 1"\n'
                '  hosts: [%s-h1, %s-h2, %s-h3]\n' % (p, p, p))
    out.append(line)
open(dst, "w").write("".join(out))
PY
grep -q 'launcher: command' "$TMP/run.yaml" || fail "could not make the run file"

ST=$TMP/state
NSX "$HEAD" "$FT_BIN/supervise" --state "$ST" --spares 1 --steps 40 --listen 0.0.0.0:0 \
  --set checkpoint.every_steps=10 --set watchdog.heartbeat_timeout_s=5 \
  --set recovery.node_failures_to_quarantine=1 "$TMP/run.yaml" >"$ST.out" 2>&1 &
SUP=$!

# the advertised address: the head's bridge address, the route to h1
for _ in $(seq 300); do [ -s "$ST/supervisor.addr" ] && break; sleep 0.1; done
[ -s "$ST/supervisor.addr" ] || { cat "$ST.out"; fail "no $ST/supervisor.addr"; }
port=$(cat "$ST/control.port")
[ "$(cat "$ST/supervisor.addr")" = "$HEADIP:$port" ] ||
  fail "supervisor.addr is '$(cat "$ST/supervisor.addr")', want $HEADIP:$port"
grep -q "workers dial $HEADIP:$port" "$ST.out" || fail "supervise did not print the advertised address"

# every worker of the first gang trains, then h1 loses power
for _ in $(seq 600); do
  grep -q '"event":"checkpoint_committed"' "$ST/events.jsonl" 2>/dev/null && break
  kill -0 "$SUP" 2>/dev/null || break
  sleep 0.2
done
grep -q '"event":"checkpoint_committed"' "$ST/events.jsonl" ||
  { cat "$ST.out" "$ST"/logs/*; fail "no checkpoint committed across the namespaces"; }
pids=$(ip netns pids "$P-h1")
[ -n "$pids" ] || fail "no process in $P-h1's namespace"
kill -9 $pids

wait "$SUP" && rc=0 || rc=$?
SUP=
[ "$rc" = 0 ] || { tail -30 "$ST.out"; fail "supervise exited $rc"; }
python3 - "$ST/events.jsonl" "$HEADIP:$port" <<'PY' || fail "events: see above"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
def one(name):
    return [e for e in ev if e["event"] == name]
rs = one("run_started")[0]
assert rs["listen"] == "0.0.0.0:%s" % sys.argv[2].split(":")[1], rs
assert rs["advertise"] == sys.argv[2], rs
assert any(e.get("node") == 0 for e in one("node_quarantined")), "node 0 (h1) not quarantined"
assert one("spare_promoted"), "no spare promoted"
assert one("run_done"), "no run_done"
steps = [e["step"] for e in one("step")]
assert steps and max(steps) >= 39, "last step %s" % (max(steps) if steps else None)
PY
has_checkpoint "local:$ST/store" 40 || fail "no final checkpoint (step 40)"

# each worker bound Gloo to its own host's bridge address
for n in 0 1 2; do
  h=${HOSTS[$n]}
  grep -q "worker: node $n slot 0: gloo on ${IP[$h]} (route to the supervisor)" \
    "$ST/logs/node$n.slot0.log" ||
    { cat "$ST/logs/node$n.slot0.log"; fail "node $n ($h) did not bind Gloo to ${IP[$h]}"; }
done
pass "a run across network namespaces: advertised $HEADIP:$port, Gloo on each host's address, h1 lost, spare h3 promoted, step 40 reached"
