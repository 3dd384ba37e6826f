# shellcheck shell=bash
# tests/cluster/cluster.sh: a real Slurm cluster made of network namespaces
# on this machine, for the multi-host tests (issue 13).
#
# Why: multi-host behaviour (hosts that die, links that drop or crawl, nodes
# Slurm drains) can only be tested against real daemons on real, separate
# network stacks. Network namespaces give each "host" its own interfaces,
# addresses and routes at the cost of a few daemons, with no VM and no
# container runtime. Everything is real: slurmctld, one slurmd per host, munge
# authentication, TCP over veth pairs on a bridge, tc for slow links.
#
# Layout of one cluster (K is unique per cluster, so two never collide):
#   bridge ftcbrK in the root namespace; namespaces ftcK-head (login and
#   controller node, Slurm name "head": slurmctld runs there and tests run
#   salloc/supervise there) and ftcK-h1..ftcK-hN (compute nodes h1..hN, one
#   slurmd each). Addresses 10.213.K.0/24 exist only inside these namespaces
#   (head .1, hN .(10+N)). /etc/netns/<ns>/hosts maps every name to its
#   address ("ip netns exec" mounts it over /etc/hosts), so getaddrinfo("h2")
#   works inside the cluster without touching the machine's /etc/hosts.
#   One munged (own key and socket under DIR; a unix socket path reaches all
#   net namespaces) serves every node. Each slurmd runs under
#   unshare --uts --mount with hostname hN and DIR/hosts/hN/local bind-mounted
#   on DIR/local, so every host has its own "local disk" at one common path
#   (wiped when the host loses power). DIR/shared is the same for all, a
#   cluster file system.
#
# Use (as root), sourced:
#   . tests/cluster/cluster.sh
#   cluster_can_run || exit 77        # prints a one-line reason
#   trap 'cluster_down "$DIR"' EXIT
#   cluster_up "$DIR" 3               # exports SLURM_CONF, FTC_* variables
#   cluster_exec head salloc -N3 srun hostname
#   host_link h3 down; host_rate h2 1mbit; host_power_off h2; ...
#   cluster_down "$DIR"
# or run: cluster.sh up DIR N | down DIR | can-run.
#
# Every pid cluster_up starts is in DIR/pids; cluster_down kills those and
# every process left in the cluster's namespaces, then deletes namespaces,
# veths, bridge and /etc/netns entries. It is idempotent and safe in a trap:
# it reads what to remove from DIR/cluster.env, written before anything is
# created, and touches only names with this cluster's K.

FTC_NET_PREFIX=${FTC_NET_PREFIX:-10.213}

# cluster_can_run: 0 when this machine can host a cluster, else prints one
# line saying why not and returns 77 (the CTest skip code).
cluster_can_run() {
  local b
  if [ "$(id -u)" -ne 0 ]; then
    echo "cluster: skipped: needs root (network namespaces, bridges)"
    return 77
  fi
  for b in ip unshare tc munged slurmctld slurmd sinfo srun salloc scontrol; do
    if ! command -v "$b" >/dev/null 2>&1; then
      echo "cluster: skipped: '$b' not installed (scripts/install-deps.sh)"
      return 77
    fi
  done
  if ! ip netns list >/dev/null 2>&1; then
    echo "cluster: skipped: 'ip netns' does not work here"
    return 77
  fi
  return 0
}

# _ftc_env DIR: loads DIR/cluster.env (FTC_K, FTC_N, FTC_DIR) and derives names.
_ftc_env() {
  local dir=$1
  [ -f "$dir/cluster.env" ] || return 1
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
  FTC_BR="ftcbr$FTC_K"
  export SLURM_CONF="$FTC_DIR/etc/slurm.conf"
}

_ftc_ns() { # HOST -> namespace name
  echo "ftc$FTC_K-$1"
}

_ftc_veth() { # HOST -> root-side veth name (<= 15 chars)
  case $1 in
  head) echo "ftc${FTC_K}vhd" ;;
  *) echo "ftc${FTC_K}v${1#h}" ;;
  esac
}

_ftc_addr() { # HOST -> address
  case $1 in
  head) echo "$FTC_NET_PREFIX.$FTC_K.1" ;;
  *) echo "$FTC_NET_PREFIX.$FTC_K.$((10 + ${1#h}))" ;;
  esac
}

_ftc_hosts() { # all host names, head first
  local i
  echo head
  for ((i = 1; i <= FTC_N; i++)); do echo "h$i"; done
}

# _ftc_pick_k: a K in 1..250 no other cluster uses (no bridge ftcbrK, no
# namespace ftcK-*). Starts from $$ so concurrent shells rarely probe alike.
_ftc_pick_k() {
  local start=$(($$ % 250)) i k
  for ((i = 0; i < 250; i++)); do
    k=$(((start + i) % 250 + 1))
    if ! ip link show "ftcbr$k" >/dev/null 2>&1 &&
      ! ip netns list | grep -q "^ftc$k-" &&
      mkdir "/run/ftc-cluster-$k.lock" 2>/dev/null; then
      echo "$k"
      return 0
    fi
  done
  return 1
}

_ftc_log_tails() {
  local f
  for f in "$FTC_DIR"/log/*.log; do
    [ -f "$f" ] || continue
    echo "---- ${f#"$FTC_DIR"/} (last 15 lines)"
    tail -n 15 "$f"
  done
}

_ftc_write_conf() {
  local dir=$FTC_DIR i cpus
  cpus=$(nproc)
  {
    cat <<EOF
# Written by tests/cluster/cluster.sh for one namespace test cluster.
ClusterName=ftc$FTC_K
SlurmctldHost=head($(_ftc_addr head))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Fast failure detection for tests: a silent slurmd is DOWN after 10 s
# (FTC_SLURMD_TIMEOUT), a node that comes back with a valid config returns
# to service by itself (at slurmctld's next ping: tens of seconds).
SlurmdTimeout=${FTC_SLURMD_TIMEOUT:-10}
SlurmctldTimeout=10
MessageTimeout=5
TCPTimeout=2
InactiveLimit=0
KillWait=2
MinJobAge=30
ReturnToService=2
EOF
    for ((i = 1; i <= FTC_N; i++)); do
      echo "NodeName=h$i NodeAddr=$(_ftc_addr "h$i") CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=ftc Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"$dir/etc/slurm.conf"
  # 22.05 reads cgroup.conf even with task/none; nothing is constrained.
  cat >"$dir/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
}

# _ftc_bg PIDNAME cmd...: starts cmd in the background, records its pid.
_ftc_bg() {
  local name=$1
  shift
  "$@" </dev/null >>"$FTC_DIR/log/$name.out" 2>&1 &
  echo "$! $name" >>"$FTC_DIR/pids"
}

_ftc_start_slurmd() {
  local h=$1 dir=$FTC_DIR
  mkdir -p "$dir/hosts/$h/local" "$dir/spool/$h"
  _ftc_bg "slurmd-$h" ip netns exec "$(_ftc_ns "$h")" \
    unshare --uts --mount --propagation private sh -c \
    'hostname "$1" && mount --bind "$2/hosts/$1/local" "$2/local" &&
     exec slurmd -D -f "$2/etc/slurm.conf" -N "$1"' sh "$h" "$dir"
}

# cluster_up DIR N: builds and starts a cluster of N compute hosts under DIR
# (created if missing). Exports SLURM_CONF, FTC_DIR, FTC_K, FTC_N. Returns 0
# when sinfo shows every node idle; on failure prints why and the daemons'
# log tails and returns 1 (call cluster_down DIR afterwards either way).
cluster_up() {
  local dir=$1 n=$2 h ns veth i hostsf waited
  if [ -z "$dir" ] || [ -z "$n" ] || [ "$n" -lt 1 ] || [ "$n" -gt 200 ]; then
    echo "cluster_up: usage: cluster_up DIR N (1 <= N <= 200)" >&2
    return 1
  fi
  mkdir -p "$dir" || return 1
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/cluster.env" ]; then
    echo "cluster_up: $dir holds a cluster already (cluster_down it first)" >&2
    return 1
  fi
  FTC_K=$(_ftc_pick_k) || {
    echo "cluster_up: no free cluster number" >&2
    return 1
  }
  FTC_N=$n
  FTC_DIR=$dir
  # Written first, so cluster_down knows what to remove whatever fails next.
  printf 'FTC_K=%s\nFTC_N=%s\nFTC_DIR=%s\n' "$FTC_K" "$FTC_N" "$FTC_DIR" >"$dir/cluster.env"
  _ftc_env "$dir"
  export FTC_DIR FTC_K FTC_N FTC_BR
  mkdir -p "$dir"/{etc,log,run,state,spool,munge,hosts,local,shared}
  : >"$dir/pids"

  # Network: a bridge, one namespace and veth pair per host.
  ip link add "$FTC_BR" type bridge || return 1
  ip link set "$FTC_BR" up || return 1
  hostsf=$(mktemp)
  {
    echo "127.0.0.1 localhost"
    for h in $(_ftc_hosts); do echo "$(_ftc_addr "$h") $h"; done
  } >"$hostsf"
  for h in $(_ftc_hosts); do
    ns=$(_ftc_ns "$h")
    veth=$(_ftc_veth "$h")
    mkdir -p "/etc/netns/$ns" && cp "$hostsf" "/etc/netns/$ns/hosts" || return 1
    ip netns add "$ns" || return 1
    ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
    ip link set "$veth" master "$FTC_BR" up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr add "$(_ftc_addr "$h")/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
  done
  rm -f "$hostsf"

  # munge: own key, socket, pid and seed files; one daemon for all nodes.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none || return 1
  chmod 700 "$dir/munge" && chmod 400 "$dir/munge/munge.key"
  _ftc_bg munged munged --foreground --force \
    --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  for ((waited = 0; waited < 100; waited++)); do
    [ -S "$dir/munge/munge.socket" ] && break
    sleep 0.1
  done
  if [ ! -S "$dir/munge/munge.socket" ]; then
    echo "cluster_up: munged did not create its socket" >&2
    _ftc_log_tails >&2
    return 1
  fi

  _ftc_write_conf
  _ftc_bg slurmctld ip netns exec "$(_ftc_ns head)" unshare --uts sh -c \
    'hostname head && exec slurmctld -D -i -f "$1"' sh "$SLURM_CONF"
  for ((i = 1; i <= FTC_N; i++)); do
    _ftc_start_slurmd "h$i"
  done
  cluster_wait_idle 60 || return 1
  return 0
}

# cluster_wait_idle [SECONDS]: waits (bounded) until sinfo shows every node
# idle; on timeout prints sinfo and the log tails and returns 1.
cluster_wait_idle() {
  local limit=${1:-60} i states
  for ((i = 0; i < limit * 5; i++)); do
    states=$(cluster_exec head sinfo -h -N -o '%N %T' 2>/dev/null | sort -u)
    if [ -n "$states" ] && [ "$(echo "$states" | grep -c ' idle$')" -eq "$FTC_N" ]; then
      return 0
    fi
    sleep 0.2
  done
  {
    echo "cluster: nodes not all idle after ${limit}s:"
    echo "${states:-(sinfo gave nothing)}"
    _ftc_log_tails
  } >&2
  return 1
}

# cluster_down DIR: stops and removes everything cluster_up DIR created.
# Idempotent; safe from a trap, also after a partial cluster_up.
cluster_down() {
  local dir=$1 pid name h ns pids had_e=0
  _ftc_env "$dir" 2>/dev/null || return 0
  # Callers run under set -e (also in their EXIT trap); here every step is
  # best effort, so a kill of a pid already gone must not stop the cleanup.
  case $- in *e*) had_e=1 ;; esac
  set +e
  # The daemons we started (by pid), then whatever is left in the namespaces
  # (jobs, salloc, test processes).
  if [ -f "$FTC_DIR/pids" ]; then
    while read -r pid name; do
      kill -TERM "$pid" 2>/dev/null
    done <"$FTC_DIR/pids"
    sleep 0.3
    while read -r pid name; do
      kill -KILL "$pid" 2>/dev/null
    done <"$FTC_DIR/pids"
  fi
  for h in $(_ftc_hosts); do
    ns=$(_ftc_ns "$h")
    ip netns list 2>/dev/null | grep -q "^$ns\b" || continue
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  done
  # Reap our own children (quietly: bash reports killed jobs on stderr).
  if [ -f "$FTC_DIR/pids" ]; then
    {
      while read -r pid name; do
        wait "$pid"
      done <"$FTC_DIR/pids"
    } 2>/dev/null
  fi
  for h in $(_ftc_hosts); do
    ns=$(_ftc_ns "$h")
    ip netns del "$ns" 2>/dev/null
    ip link del "$(_ftc_veth "$h")" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  ip link del "$FTC_BR" 2>/dev/null
  rmdir "/run/ftc-cluster-$FTC_K.lock" 2>/dev/null
  rm -f "$FTC_DIR/cluster.env" "$FTC_DIR/pids"
  [ "$had_e" -eq 1 ] && set -e
  return 0
}

# cluster_exec HOST cmd...: runs cmd in HOST's namespace (head or hN), with
# that hostname. For compute hosts it also sees the host's node-local
# directory at $FTC_DIR/local, like the host's slurmd does.
cluster_exec() {
  local h=$1
  shift
  case $h in
  head)
    ip netns exec "$(_ftc_ns head)" unshare --uts sh -c \
      'hostname head && shift && exec "$@"' sh head "$@"
    ;;
  *)
    ip netns exec "$(_ftc_ns "$h")" unshare --uts --mount --propagation private sh -c \
      'hostname "$1" && mount --bind "$2/hosts/$1/local" "$2/local" && shift 2 && exec "$@"' \
      sh "$h" "$FTC_DIR" "$@"
    ;;
  esac
}

# host_power_off HOST: the host loses power: SIGKILL every process in its
# namespace (its slurmd, job steps, anything a test started there) and its
# node-local directory is wiped. The network stays; Slurm sees a silent node.
host_power_off() {
  local h=$1 pids
  pids=$(ip netns pids "$(_ftc_ns "$h")" 2>/dev/null) || true
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  rm -rf "$FTC_DIR/hosts/$h/local"
  mkdir -p "$FTC_DIR/hosts/$h/local"
  return 0
}

# host_power_on HOST: boots a powered-off host again: a fresh slurmd with an
# empty node-local directory.
host_power_on() {
  _ftc_start_slurmd "$1"
}

# host_link HOST up|down: plugs or unplugs HOST's network cable.
host_link() {
  ip link set "$(_ftc_veth "$1")" "$2"
}

head_link() {
  host_link head "$1"
}

# host_rate HOST RATE|off: limits HOST's link to RATE (tc units: 1mbit,
# 500kbit) in both directions with tbf, or removes the limit.
host_rate() {
  local h=$1 rate=$2 ns veth
  ns=$(_ftc_ns "$h")
  veth=$(_ftc_veth "$h")
  if [ "$rate" = off ]; then
    tc qdisc del dev "$veth" root 2>/dev/null || true
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    return 0
  fi
  tc qdisc replace dev "$veth" root tbf rate "$rate" burst 32kbit latency 400ms &&
    ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$rate" burst 32kbit latency 400ms
}

# Run as a program: cluster.sh up DIR N | down DIR | can-run
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case ${1:-} in
  up)
    cluster_can_run || exit 77
    cluster_up "$2" "$3" || exit 1
    echo "SLURM_CONF=$SLURM_CONF"
    ;;
  down) cluster_down "$2" ;;
  can-run) cluster_can_run ;;
  *)
    echo "usage: cluster.sh up DIR N | down DIR | can-run" >&2
    exit 2
    ;;
  esac
fi
