#!/usr/bin/env bash
# No blocking file-system call on the supervisor's loop, and a spare that
# lost the supervisor is not a lost spare. Every rename(2) of the supervisor
# (all its threads; strace attached once the gang trains) takes 4.5 s, longer
# than the heartbeat timeout (3 s), with a warm spare standing by and GOOD
# marks due (each writes a mark object: a rename). The marks must be made
# off the loop, so heartbeats go on: the run finishes, the checkpoints are
# marked GOOD, no stall, no worker or spare gives the supervisor up, no
# spare leaves the pool. Then the supervisor is stopped (SIGSTOP) for longer
# than the timeout: the spare that loses it is relaunched as a spare, not
# lost. Skips (77) without strace or where ptrace is not permitted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
command -v strace >/dev/null || { echo "SKIP: strace is not installed"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
ST=$TMP/state
mkdir -p "$ST"

# a checkpoint every 7.5 s, each GOOD 5 steps later: the commit queue is idle
# when a mark falls due
FAKE_STEP_MS=150 sup_bg "$ST" --spares 1 --steps 120 --set checkpoint.every_steps=40 \
  --set watchdog.loss_spike.window=5
for _ in $(seq 300); do
  has_event "$ST" generation_started 2>/dev/null && break
  sleep 0.05
done
has_event "$ST" generation_started || { cat "$ST.out"; fail "the gang did not start"; }
strace -f -qq -p $SUP -o "$TMP/strace.log" -e trace=rename,renameat,renameat2 \
  -e inject=rename,renameat,renameat2:delay_exit=4500000 2>"$TMP/strace.err" &
STRACE=$!
rc=0
wait $SUP || rc=$?
wait $STRACE || true
if grep -q "Operation not permitted" "$TMP/strace.err"; then
  echo "SKIP: strace may not attach here (ptrace not permitted)"
  exit 77
fi
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc with slow renames"; }
grep -q DELAYED "$TMP/strace.log" || { cat "$TMP/strace.log"; fail "no rename was delayed"; }
has_event "$ST" checkpoint_good 'e["step"] == 40' || { cat "$ST.out"; fail "step 40 was not marked GOOD"; }
for e in supervisor_stall spare_lost spare_lost_supervisor fault_detected node_quarantined; do
  has_event "$ST" $e && { cat "$ST.out"; fail "$e with slow renames (a mark blocked the loop?)"; }
done
has_event "$ST" run_done || fail "no run_done"
pass "4.5 s renames: GOOD marks off the loop, no stall, the spare stays"

# The supervisor's own stall: the spare (and the gang) lose it; the spare is
# relaunched, nothing is counted against its node
ST2=$TMP/state2
mkdir -p "$ST2"
FAKE_STEP_MS=100 sup_bg "$ST2" --spares 1 --steps 100
wait_step "$ST2" 10
kill -STOP $SUP
sleep 7 # heartbeat_timeout_s is 3
kill -CONT $SUP
rc=0
wait $SUP || rc=$?
[ $rc -eq 0 ] || { cat "$ST2.out"; fail "supervise exited $rc after its stall"; }
has_event "$ST2" supervisor_stall || { cat "$ST2.out"; fail "no supervisor_stall"; }
has_event "$ST2" spare_lost && { cat "$ST2.out"; fail "the spare left the pool for the supervisor's stall"; }
has_event "$ST2" spare_lost_supervisor 'e["node"] == 2' || { cat "$ST2.out"; fail "no spare_lost_supervisor for node 2"; }
has_event "$ST2" worker_launched 'e["node"] == 2 and e["role"] == "spare"' || fail "no spare launch"
python3 - "$ST2/events.jsonl" <<'PY' || { cat "$ST2.out"; fail "the spare was not relaunched after the stall"; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
i = max(k for k, e in enumerate(ev) if e["event"] == "spare_lost_supervisor")
sys.exit(0 if any(e["event"] == "worker_launched" and e["node"] == 2 and e["role"] == "spare"
                  for e in ev[i:]) else 1)
PY
has_event "$ST2" node_quarantined && fail "a node was quarantined for the supervisor's stall"
has_event "$ST2" run_done || fail "no run_done"
pass "SIGSTOP: the spare that lost the supervisor is relaunched, not lost"
