#!/usr/bin/env bash
# The ssh launcher against a real OpenSSH sshd (nodes.launcher: ssh).
#
# First, without sshd: `worker --token-stdin` exits 2 with a clear message
# when stdin holds no token or a malformed one.
#
# Then (root and sshd needed, else exit 77): the test starts its own sshd on
# a free loopback port with a config, host key and authorized key made in
# its temp dir, and runs the tiny demo model with 2 nodes + 1 spare over
# `ssh -F CONFIG -T {host}` (every host is "localhost"). While it trains:
#  - the run token appears in the argv of no process of the run (supervise,
#    sh, ssh, sshd and its sessions, the workers: all of /proc under
#    supervise and under our sshd), and in the environment of no ssh or sshd
#    process (no FT_RUN_TOKEN, no 64-hex-digit word: the token is 64 hex
#    digits);
#  - every worker's cwd is nodes.workdir, and its kernel thread count is
#    what the worker chose on its host: online cores / workers_per_node
#    (its log line), with no --threads from the supervisor;
# then node 1's worker processes are killed (the remote side: ssh sees its
# command die), the spare is promoted and the run reaches its last step.
# A second short run with nodes.threads=1 and no nodes.workdir: the
# supervisor passes --threads 1 and the workers run in supervise's cwd.
#
# Teardown (also on failure): supervise, then every process under our sshd
# (its sessions and the workers they run), then sshd, each by pid.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh" # has_event

WORKER=$FT_BIN/worker
[ -x "$WORKER" ] || fail "worker not built in $FT_BIN"
synth_data "$TMP" 200000

# ---- worker --token-stdin, no sshd needed --------------------------------
tok_check() { # STDIN_TEXT WANT_MESSAGE
  local rc=0
  printf '%s' "$1" | env -u FT_RUN_TOKEN "$WORKER" --connect localhost:1 --node 0 --slot 0 \
    --runfile "$FT_SRC/examples/demo.yaml" --token-stdin >"$TMP/tok.out" 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "worker --token-stdin with stdin '$1': exit $rc, want 2: $(cat "$TMP/tok.out")"
  grep -q "$2" "$TMP/tok.out" || fail "worker --token-stdin with stdin '$1' said: $(cat "$TMP/tok.out")"
}
tok_check "" "no run token on stdin"
tok_check $'not-a-token\n' "is not a run token"
tok_check $'0123\n' "is not a run token"
pass "worker --token-stdin: a missing or malformed token exits 2 and says why"

# ---- sshd ---------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || {
  echo "skip: not root (the test's sshd logs root in with a key)"
  exit 77
}
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
[ -x "$SSHD" ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || {
  echo "skip: OpenSSH sshd/ssh/ssh-keygen not installed (apt-get install openssh-server openssh-client)"
  exit 77
}

SUP=
SSHD_PID=
MADE_RUN_SSHD=
# descendants PID: every process below PID, deepest last
descendants() {
  python3 - "$1" <<'PY'
import os, sys
kids = {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            st = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
out, todo = [], [int(sys.argv[1])]
while todo:
    p = todo.pop()
    for c in kids.get(p, []):
        out.append(c)
        todo.append(c)
print(" ".join(map(str, out)))
PY
}
ssh_teardown() {
  local p
  if [ -n "$SUP" ]; then
    for p in $(descendants "$SUP") $SUP; do kill -9 "$p" 2>/dev/null || true; done
  fi
  if [ -n "$SSHD_PID" ]; then
    # sessions and the workers they run first, then the listener
    for p in $(descendants "$SSHD_PID"); do kill -9 "$p" 2>/dev/null || true; done
    kill -9 "$SSHD_PID" 2>/dev/null || true
  fi
  [ -n "$MADE_RUN_SSHD" ] && rmdir /run/sshd 2>/dev/null || true
  cleanup
}
trap ssh_teardown EXIT

K=$TMP/ssh
mkdir -p "$K"
chmod 700 "$K"
ssh-keygen -q -t ed25519 -N '' -f "$K/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$K/id"
cp "$K/id.pub" "$K/authorized_keys"
if [ ! -d /run/sshd ]; then # sshd's privilege separation directory
  mkdir -p /run/sshd
  MADE_RUN_SSHD=1
fi
start_sshd() {
  PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$K/sshd_config" <<EOF
ListenAddress 127.0.0.1:$PORT
HostKey $K/host_key
AuthorizedKeysFile $K/authorized_keys
PidFile $K/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
LogLevel VERBOSE
EOF
  "$SSHD" -D -e -f "$K/sshd_config" 2>>"$K/sshd.log" &
  SSHD_PID=$!
}
cat >"$K/config" <<EOF
Host *
  HostName 127.0.0.1
  User root
  IdentityFile $K/id
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  BatchMode yes
  LogLevel ERROR
EOF
up=
for _ in 1 2 3; do # the port was free a moment ago; another may take it
  start_sshd
  sed -i "/^  Port /d" "$K/config"
  echo "  Port $PORT" >>"$K/config"
  for _ in $(seq 100); do
    ssh -F "$K/config" -T localhost true 2>/dev/null && up=1 && break
    kill -0 "$SSHD_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$up" ] && break
  kill -9 "$SSHD_PID" 2>/dev/null || true
  wait "$SSHD_PID" 2>/dev/null || true
done
[ -n "$up" ] || fail "our sshd did not come up: $(tail -5 "$K/sshd.log")"
pass "sshd on port $PORT"

# ---- helpers over /proc --------------------------------------------------
# workers STATE: "PID NODE SLOT" of each worker of this run (argv[0] is our
# worker and its --runfile is STATE's snapshot)
workers() {
  python3 - "$WORKER" "$1/run.yaml" <<'PY'
import os, sys
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        a = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")[:-1]
    except OSError:
        continue
    a = [x.decode(errors="replace") for x in a]
    if a and a[0] == sys.argv[1] and "--runfile" in a and a[a.index("--runfile") + 1] == sys.argv[2]:
        print(d, a[a.index("--node") + 1], a[a.index("--slot") + 1])
PY
}
# no_token_visible PID...: exit 1 (naming the place) if the argv of any of
# these processes, or the environment of an ssh/sshd among them, holds
# FT_RUN_TOKEN or a 64-hex-digit word. Given supervise, sshd and everything
# under them: every process of this run on either "host" (other processes on
# this machine are not ours to judge, and may hold hashes of their own).
no_token_visible() {
  python3 - "$@" <<'PY'
import os, re, sys
hexword = re.compile(rb"(?<![0-9a-fA-F])[0-9a-fA-F]{64}(?![0-9a-fA-F])")
bad = []
for d in sys.argv[1:]:
    try:
        cmd = open(f"/proc/{d}/cmdline", "rb").read()
        comm = open(f"/proc/{d}/comm").read().strip()
    except OSError:
        continue
    if hexword.search(cmd) or b"FT_RUN_TOKEN" in cmd:
        bad.append("argv of %s (%s): %r" % (d, comm, cmd.replace(b"\0", b" ")[:200]))
    if comm in ("ssh", "sshd") or cmd.startswith(b"sshd"):
        try:
            env = open(f"/proc/{d}/environ", "rb").read()
        except OSError:
            continue
        if hexword.search(env) or b"FT_RUN_TOKEN" in env:
            bad.append(f"environment of {d} ({comm})")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}
# wait_workers STATE N: until N workers of STATE run and each has logged its
# thread count (up to 120 s, while supervise lives)
wait_workers() {
  local w ok
  for _ in $(seq 1200); do
    w=$(workers "$1")
    ok=0
    if [ -n "$w" ] && [ "$(wc -l <<<"$w")" -eq "$2" ]; then
      ok=1
      while read -r pid node slot; do
        grep -q "kernel threads" "$1/logs/node$node.slot$slot.log" 2>/dev/null || ok=0
      done <<<"$w"
    fi
    [ $ok -eq 1 ] && return 0
    kill -0 "$SUP" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
wait_event() { # STATE NAME [COND]: up to 120 s, while supervise lives
  for _ in $(seq 1200); do
    [ -f "$1/events.jsonl" ] && has_event "$@" && return 0
    kill -0 "$SUP" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# ---- the run -------------------------------------------------------------
ST=$TMP/state
WD=$TMP/wd
mkdir -p "$ST" "$WD" "$TMP/elsewhere"
RUN=(--set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin"
  --set nodes.launcher=ssh --set "nodes.command=ssh -F $K/config -T {host}"
  --set nodes.hosts=localhost,localhost,localhost --set checkpoint.every_steps=10
  --set watchdog.heartbeat_timeout_s=5 --set recovery.node_failures_to_quarantine=1)
(cd "$TMP/elsewhere" && exec "$FT_BIN/supervise" --state "$ST" --worker "$WORKER" --spares 1 \
  --steps 60 "${RUN[@]}" --set "nodes.workdir=$WD" "$FT_SRC/examples/demo.yaml") >"$ST.out" 2>&1 &
SUP=$!

wait_workers "$ST" 3 || { cat "$ST.out"; fail "3 workers (2 nodes + 1 spare) did not start over ssh"; }
CORES=$(getconf _NPROCESSORS_ONLN)
W=$(workers "$ST")
while read -r pid node slot; do
  cwd=$(readlink "/proc/$pid/cwd")
  [ "$cwd" = "$WD" ] || fail "worker $pid (node $node) runs in $cwd, want nodes.workdir $WD"
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--threads" &&
    fail "the supervisor passed --threads to node $node: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
  want="node $node slot $slot: $CORES kernel threads (cores / nodes.workers_per_node"
  grep -qF "$want" "$ST/logs/node$node.slot$slot.log" ||
    fail "node $node: no '$want' in its log: $(head -5 "$ST/logs/node$node.slot$slot.log")"
done <<<"$W"
pass "workers run in nodes.workdir with cores / workers_per_node = $CORES kernel threads"

for i in 1 2 3 4 5; do
  procs=$(echo $SUP $(descendants $SUP) $SSHD_PID $(descendants $SSHD_PID))
  [ "$(wc -w <<<"$procs")" -gt 8 ] || fail "sample $i: too few processes to judge: $procs"
  out=$(no_token_visible $procs) || fail "the token is visible (sample $i): $out"
  sleep 0.2
done
pass "no token in any argv or in an ssh/sshd environment (5 samples)"

# node 1's host keeps answering, its workers die: a node fault; the spare
# (node 2) takes its place and the run completes
wait_event "$ST" checkpoint_committed || { cat "$ST.out"; fail "no checkpoint committed"; }
for p in $(awk '$2 == 1 {print $1}' <<<"$W"); do kill -9 "$p"; done
rc=0
wait "$SUP" || rc=$?
SUP=
[ $rc -eq 0 ] || { tail -20 "$ST.out"; fail "supervise exited $rc after node 1's workers were killed"; }
has_event "$ST" fault_detected 'e.get("node") == 1' || fail "no fault_detected for node 1"
has_event "$ST" spare_promoted || fail "no spare promoted"
has_event "$ST" run_done 'e["steps"] == 60' || fail "the run did not reach step 60"
has_event "$ST" generation_started 'e["gen"] >= 2' || fail "no second generation"
pass "node 1's workers killed over ssh: the spare is promoted, the run reaches step 60"
# no worker outlives the run on the remote side (ssh's end closes the
# worker's control connection, and a worker without its supervisor stops)
for _ in $(seq 300); do [ -z "$(workers "$ST")" ] && break; sleep 0.1; done
[ -z "$(workers "$ST")" ] || fail "workers outlive the run: $(workers "$ST")"
pass "no worker left on the remote side"

# ---- nodes.threads and the default workdir ---------------------------------
ST2=$TMP/state2
mkdir -p "$ST2"
# (200 steps: the workers must outlive the checks below on a loaded machine)
(cd "$TMP/elsewhere" && exec "$FT_BIN/supervise" --state "$ST2" --worker "$WORKER" --spares 0 \
  --steps 200 "${RUN[@]}" --set nodes.threads=1 "$FT_SRC/examples/demo.yaml") >"$ST2.out" 2>&1 &
SUP=$!
wait_workers "$ST2" 2 || { cat "$ST2.out"; fail "the second run's workers did not start"; }
W2=$(workers "$ST2")
while read -r pid node slot; do
  cwd=$(readlink "/proc/$pid/cwd") || fail "worker $pid (node $node) ended before it was checked"
  [ "$cwd" = "$TMP/elsewhere" ] || fail "worker $pid runs in $cwd, want supervise's cwd $TMP/elsewhere"
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--threads 1 " ||
    fail "node $node: no --threads 1 from nodes.threads: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
done <<<"$W2"
rc=0
wait "$SUP" || rc=$?
SUP=
[ $rc -eq 0 ] || { tail -20 "$ST2.out"; fail "the second run exited $rc"; }
grep -qF "1 kernel threads (--threads" "$ST2/logs/node0.slot0.log" || fail "node 0 did not use 1 thread"
pass "nodes.threads=1 reaches the workers as --threads 1; no workdir: supervise's cwd"
