#!/usr/bin/env bash
# Bounded teardown (issue 36): nothing a recovery asked to stop may hold it
# for ever. The real worker, 2 nodes and warm spares. One part per ctest
# entry:
#   rejoin  recovery.in_process with recovery.rejoin_timeout_s at an hour:
#           node 0's training thread hangs after step 14 in generation 1
#           (failpoint hang_at_step, hang_node=0, hang_gen=1) and node 1 is
#           lost at that step (chaos.kill_node_at_step). Node 0 is asked to
#           rejoin in process but never moves: a grace after the request its
#           heartbeats' progress has not changed, so it falls back to a
#           process restart ("hung", not the deadline) and is killed, its
#           training thread's stack first written to its log; the spare
#           replaces node 1 and the run finishes.
#   dstate  a real process in uninterruptible sleep: the run's store is on
#           a loop-mounted ext4 image frozen with fsfreeze mid-run, so each
#           worker's checkpoint writer blocks in D state and no SIGKILL
#           reaps it until the file system is thawed. Node 1's process group
#           is then killed (the node lost): node 0 is stopped, SIGKILLed at
#           the grace, and both workers stay unreaped. Each is reported
#           (worker_unkillable with its node and pid, "common": both nodes'
#           workers stuck alike on one file system), and the round goes on
#           while the processes still exist (it did not wait for them): node
#           1 (lost) is replaced by a spare, node 0 is not blamed (a common
#           cause, the store's, never costs a node) and restarts in place.
#           Thawed, the run finishes, and both processes are reaped
#           (unkillable_reaped). Needs root and a loop device (exit 77
#           without).
#   dstate_end  the same two workers in D state, and the run interrupted
#           (SIGINT) instead: supervise's run is over once both are given up
#           (unkillable_left names them, while they still exist), and it
#           exits 130 after the thaw (its own store is on that file system).
# Before this was built, rejoin waits out the hour (timeout, 124), dstate
# never gets past the stopping gang (no worker_unkillable while frozen) and
# dstate_end waits for the frozen workers (no unkillable_left).
. "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
PART=${1:?usage: sup_teardown.sh rejoin|dstate|dstate_end}

# runfile NAME STORE: the demo run file for a short run in $TMP/NAME.yaml
# (40 steps, a checkpoint every 5, heartbeats timing out after 3 s), its
# recovery section last, without the demo's chaos
runfile() {
  sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
    -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
    -e 's|  steps: 300|  steps: 40|' -e "s|  store: .*|  store: \"$2\"|" \
    -e 's|  every_steps: 25|  every_steps: 5|' -e 's|  val_every: 25|  val_every: 0|' \
    -e 's|  heartbeat_timeout_s: 10|  heartbeat_timeout_s: 3|' \
    "$FT_SRC/examples/demo.yaml" >"$TMP/$1.yaml"
}

# pid_of STATE NODE: the pid of NODE's last launched worker
pid_of() {
  python3 -c '
import json, sys
p = [e["pid"] for e in map(json.loads, open(sys.argv[1]))
     if e["event"] == "worker_launched" and e["node"] == int(sys.argv[2])]
print(p[-1] if p else "")' "$1/events.jsonl" "$2"
}

# in_dstate PID: true if a thread of PID is in uninterruptible sleep
in_dstate() {
  local t
  for t in /proc/"$1"/task/*/stat; do
    [ "$(sed 's/.*) //' "$t" 2>/dev/null | cut -c1)" = D ] && return 0
  done
  return 1
}

# frozen_run: the dstate parts' start: a loop-mounted ext4 image at
# $TMP/mnt holding the run's store (skips with 77 without root or a loop
# device), supervise (SUP, state ST) with 2 nodes and 2 spares on it,
# trained past a committed checkpoint 10; then the file system frozen and
# both gang workers (P0, P1) blocked in D state in their checkpoint writes.
frozen_run() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a loop-mounted file system to freeze)"; exit 77; }
  local c
  for c in mkfs.ext4 fsfreeze mount umount mountpoint; do
    command -v $c >/dev/null || { echo "SKIP: $c is not installed"; exit 77; }
  done
  MNT=$TMP/mnt
  mkdir -p "$MNT" "$TMP/doctor"
  truncate -s 256M "$TMP/fs.img"
  mkfs.ext4 -q -F "$TMP/fs.img" >/dev/null 2>&1 || { echo "SKIP: mkfs.ext4 failed"; exit 77; }
  mount -o loop "$TMP/fs.img" "$MNT" 2>"$TMP/mount.err" || {
    echo "SKIP: cannot loop-mount an image: $(cat "$TMP/mount.err")"
    exit 77
  }
  SUP=
  trap unfreeze EXIT
  runfile dstate "local:$MNT/store"
  ST=$TMP/st
  # (the node doctor's disk check off the frozen mount: a spare's recheck
  # is not what this tests)
  FT_FAILPOINTS=min_step_ms=150 "$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" \
    --spares 2 --set "doctor.dir=$TMP/doctor" "$TMP/dstate.yaml" >"$ST.out" 2>&1 &
  SUP=$!
  # (the waits give up after a minute, so a failure is reported rather than
  # left to ctest's timeout; nothing is timed)
  local end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    has_event "$ST" checkpoint_committed 'e["step"] >= 10' 2>/dev/null && break
    kill -0 $SUP 2>/dev/null || fail "supervise ended early: $(tail -5 "$ST.out")"
    sleep 0.1
  done
  has_event "$ST" checkpoint_committed 'e["step"] >= 10' || fail "no checkpoint committed"
  P0=$(pid_of "$ST" 0)
  P1=$(pid_of "$ST" 1)
  fsfreeze -f "$MNT"
  # each worker's checkpoint writer blocks at its next write
  end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    in_dstate "$P0" && in_dstate "$P1" && break
    sleep 0.1
  done
  in_dstate "$P0" && in_dstate "$P1" ||
    fail "the workers ($P0, $P1) never blocked in D state on the frozen store"
}

# unfreeze: the dstate parts' exit trap: thaw before anything else (a frozen
# mount holds every writer, lib.sh's cleanup included), then the run, then
# the mount
unfreeze() {
  fsfreeze -u "$MNT" 2>/dev/null || true
  [ -n "$SUP" ] && kill -9 "$SUP" 2>/dev/null || true
  for _ in $(seq 100); do
    umount "$MNT" 2>/dev/null && break
    sleep 0.1
  done
  mountpoint -q "$MNT" && umount -l "$MNT" 2>/dev/null
  cleanup
}

synth_data "$TMP"
case $PART in
rejoin)
  runfile rejoin "local:$TMP/rejoin/store"
  cat >>"$TMP/rejoin.yaml" <<EOF
  in_process: true
  rejoin_timeout_s: 3600
chaos: {kill_node_at_step: 14}
EOF
  ST=$TMP/rejoin/st
  mkdir -p "$TMP/rejoin"
  rc=0
  FT_FAILPOINTS=min_step_ms=60,hang_at_step=14,hang_node=0,hang_gen=1 timeout 120 \
    "$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" --spares 1 \
    "$TMP/rejoin.yaml" >"$ST.out" 2>&1 || rc=$?
  [ $rc = 0 ] || {
    tail -n 20 "$ST.out"
    fail "supervise exited $rc, want 0 (124: the hung survivor held the recovery)"
  }
  grep -q "failpoint hang_at_step=14" "$ST/logs/node0.slot0.log" ||
    fail "node 0 did not hang (the failpoint did not fire)"
  # the evidence before the kill: the hung thread's stack in its log
  grep -q "^worker: stack of the training thread" "$ST/logs/node0.slot0.log" &&
    grep -q "ft_failpoint_hang_here" "$ST/logs/node0.slot0.log" ||
    fail "no stack of node 0's hung training thread in its log"
  python3 - "$ST/events.jsonl" <<'PY' || fail "events (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
names = [e["event"] for e in ev]
fb = [e for e in ev if e["event"] == "rejoin_fallback"]
print("rejoin_fallback:", fb)
print("faults:", [(f["kind"], f["node"], f["blamed"]) for f in ev if f["event"] == "fault_detected"])
assert "chaos_kill" in names, "node 1 was not killed"
assert len(fb) == 1 and fb[0]["node"] == 0 and fb[0]["gen"] == 2, fb
assert fb[0]["reason"].startswith("hung: slot 0's training thread has not moved"), fb[0]["reason"]
assert "rejoin_timeout_s" not in fb[0]["reason"], fb[0]["reason"]
assert "node_rejoined" not in names, "the hung node rejoined"
launched0 = [e for e in ev if e["event"] == "worker_launched" and e["node"] == 0]
assert len(launched0) == 2, "node 0 should be relaunched as a process: %d launches" % len(launched0)
g2 = [e for e in ev if e["event"] == "generation_started" and e["gen"] == 2]
assert g2 and g2[0]["nodes"] == [0, 2], g2
assert not any(e["event"] == "fault_detected" and e["node"] == 0 and e["blamed"] for e in ev), \
    "node 0 blamed (a survivor that hangs falls back, it is not quarantined)"
assert "run_done" in names, "no run_done"
PY
  pass "rejoin: a survivor whose training thread hung was killed at its grace (not rejoin_timeout_s), the spare took node 1's place, the run finished"
  ;;

dstate | dstate_end)
  frozen_run
  if [ $PART = dstate_end ]; then
    # the run ends (interrupted) while both workers are in D state: it is
    # over once they are given up, and says so; init reaps them later
    kill -INT $SUP
    end=$((SECONDS + 60))
    while [ $SECONDS -lt $end ]; do
      has_event "$ST" unkillable_left && break
      kill -0 $SUP 2>/dev/null || break
      sleep 0.1
    done
    has_event "$ST" unkillable_left "sorted(e['pids']) == sorted([$P0, $P1])" ||
      fail "no unkillable_left naming $P0 and $P1: $(events "$ST" | tail -n 12 | tr '\n' ' ')"
    [ -d "/proc/$P0" ] && [ -d "/proc/$P1" ] ||
      fail "a worker was reaped while frozen: the test proves nothing"
    has_event "$ST" worker_unkillable "e['node'] == 0 and e['pid'] == $P0" ||
      fail "no worker_unkillable for node 0 (pid $P0)"
    fsfreeze -u "$MNT"
    rc=0
    wait $SUP || rc=$?
    SUP=
    [ $rc = 130 ] || { tail -n 20 "$ST.out"; fail "supervise exited $rc, want 130 (interrupted)"; }
    echo "events: $(events "$ST" | tail -n 6 | tr '\n' ' ')"
    pass "dstate_end: a run interrupted with two workers in D state ended once they were given up (unkillable_left), not when they could be reaped"
    exit 0
  fi
  # node 1 lost (its process group): the round stops node 0 as well
  kill -9 -- "-$(ps -o pgid= -p "$P1" | tr -d ' ')"
  end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    has_event "$ST" spare_promoted 'e["replaces"] == 1' &&
      has_event "$ST" worker_unkillable 'e["node"] == 0' && break
    kill -0 $SUP 2>/dev/null || fail "supervise ended: $(tail -5 "$ST.out")"
    sleep 0.1
  done
  echo "events while frozen: $(events "$ST" | tail -n 14 | tr '\n' ' ')"
  has_event "$ST" worker_unkillable "e['node'] == 0 and e['pid'] == $P0 and e['state'] == 'D'" ||
    fail "no worker_unkillable for node 0 (pid $P0): $(grep -e unkillable -e gang_stopped "$ST/events.jsonl")"
  has_event "$ST" worker_unkillable "e['node'] == 1 and e['pid'] == $P1" ||
    fail "no worker_unkillable for node 1 (pid $P1)"
  # the round went on while both processes were still there, unreaped
  [ -d "/proc/$P0" ] && [ -d "/proc/$P1" ] ||
    fail "a worker was reaped while frozen: the test proves nothing"
  in_order "$ST" fault_detected worker_unkillable gang_stopped node_quarantined spare_promoted ||
    fail "events out of order: $(events "$ST" | tr '\n' ' ')"
  fsfreeze -u "$MNT"
  rc=0
  end=$((SECONDS + 120))
  while [ $SECONDS -lt $end ]; do
    kill -0 $SUP 2>/dev/null || break
    sleep 0.1
  done
  kill -0 $SUP 2>/dev/null && fail "supervise did not end after the thaw: $(tail -5 "$ST.out")"
  wait $SUP || rc=$?
  SUP=
  [ $rc = 0 ] || { tail -n 20 "$ST.out"; fail "supervise exited $rc"; }
  python3 - "$ST/events.jsonl" "$P0" "$P1" <<'PY' || fail "events (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
p0, p1 = int(sys.argv[2]), int(sys.argv[3])
names = [e["event"] for e in ev]
unk = [e for e in ev if e["event"] == "worker_unkillable"]
print("worker_unkillable:", unk)
print("unkillable_reaped:", [e for e in ev if e["event"] == "unkillable_reaped"])
assert sorted((e["node"], e["pid"]) for e in unk) == [(0, p0), (1, p1)], unk
assert all(e["common"] for e in unk), "one file system froze both: a common cause"
f0 = [e for e in ev if e["event"] == "fault_detected" and e["node"] == 0]
assert f0 and f0[0]["kind"] == "worker_unkillable" and not f0[0]["blamed"], f0
assert not any(f["blamed"] for f in f0), ("node 0 blamed for the frozen store", f0)
assert "uninterruptible sleep" in f0[0]["detail"], f0[0]
q = sorted(e["node"] for e in ev if e["event"] == "node_quarantined")
assert q == [1], q
g2 = [e for e in ev if e["event"] == "generation_started" and e["gen"] == 2]
assert g2 and sorted(g2[0]["nodes"]) == [0, 2], g2
reaped = sorted(e["pid"] for e in ev if e["event"] == "unkillable_reaped")
assert reaped == sorted([p0, p1]), reaped
assert "run_done" in names and "unkillable_left" not in names, names[-5:]
PY
  "$FT_BIN/ckpt" --store "local:$MNT/store" restore 40 --to "$TMP/final.safetensors" >/dev/null ||
    fail "no final checkpoint"
  pass "dstate: workers in D state on a frozen store were given up (worker_unkillable, common) without waiting for them; node 0 not blamed for the store, node 1 (lost) replaced by a spare; thawed, the run finished and both were reaped"
  ;;
*) fail "unknown part $PART" ;;
esac
