#!/usr/bin/env bash
# No store I/O on the event loop: every rename(2) of the supervisor (all its
# threads; strace attached after the workers started) takes 4.5 s, longer
# than the heartbeat timeout (3 s), with a warm spare standing by. Commits
# (which rename their manifest into place) and GOOD marks (each renames a
# mark object into place) must run off the loop, so heartbeats go on: the
# run finishes, checkpoint 40 is marked GOOD, and there is no stall, no
# fault, no quarantine, and no spare or worker gives the supervisor up.
# The marks are spaced so the commit queue is idle when one falls due (a
# checkpoint every 6 s, GOOD 5 steps later): a supervisor that marks on the
# loop then stalls for 4.5 s. A second run loses a node under the slow
# disk: the new generation's records (STATE/generation renamed in) go
# through the record lane, so the recovery stalls nothing either. Skips
# (77) without strace or where ptrace is not permitted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
need_strace

# slow_run STATE TRACER [args...]: sup_bg in STATE (150 ms steps); once the
# gang started, TRACER (trace_renames or trace_threads) makes each rename of
# the supervisor take 4.5 s; waits for supervise: its exit code in rc.
slow_run() {
  local st=$1 tracer=$2
  shift 2
  mkdir -p "$st"
  FAKE_STEP_MS=150 sup_bg "$st" "$@"
  for _ in $(seq 300); do
    has_event "$st" generation_started 2>/dev/null && break
    sleep 0.05
  done
  has_event "$st" generation_started || { cat "$st.out"; fail "the gang did not start"; }
  $tracer $SUP delay_exit=4500000
  rc=0
  wait $SUP || rc=$?
}

# trace_threads PID INJECT: as sup_lib.sh's trace_renames, on every thread
# of PID but none of the processes it starts later: the workers relaunched
# by a recovery write their shards with renames of their own, and slowed
# down they would be silent (a hang) for reasons of the test's own.
trace_threads() {
  local args=()
  for t in /proc/"$1"/task/*; do args+=(-p "${t##*/}"); done
  rm -f "$TMP"/strace.log*
  strace --output-separately -qq "${args[@]}" -o "$TMP/strace.log" -e trace=rename,renameat,renameat2 \
    -e inject=rename,renameat,renameat2:"$2" 2>"$TMP/strace.err" &
  STRACE=$!
}

ST=$TMP/state
slow_run "$ST" trace_renames --spares 1 --steps 120 --set checkpoint.every_steps=40 \
  --set watchdog.loss_spike.window=5
traced_renames DELAYED
[ $rc -eq 0 ] || { cat "$ST.out"; fail "supervise exited $rc with slow renames"; }
has_event "$ST" run_done || fail "no run_done"
has_event "$ST" checkpoint_committed 'e["step"] == 120' || fail "the final checkpoint was not committed"
has_event "$ST" checkpoint_good 'e["step"] == 40' || { cat "$ST.out"; fail "step 40 was not marked GOOD"; }
for e in supervisor_stall spare_lost spare_lost_supervisor fault_detected node_quarantined; do
  has_event "$ST" $e && { cat "$ST.out"; fail "$e with slow renames (a commit or mark blocked the loop?)"; }
done
pass "4.5 s renames: commits and GOOD marks off the loop, nobody blamed, the spare stays, run done"

# ---- a recovery under the slow disk ----
# Node 1 is lost at step 40 (chaos kill) with two warm spares: the new
# generation is written to STATE/generation (a rename: 4.5 s) and to the
# catalog before its ASSIGN, and the quarantine with it. Those records go
# through the record lane, not the loop: the one fault is the kill's, no
# stall, no spare or survivor gives the supervisor up, and the run
# finishes on the spare.
ST2=$TMP/state2
FT_FAILPOINTS=kill_node_at_step=40 slow_run "$ST2" trace_threads --spares 2 --steps 100 \
  --set checkpoint.every_steps=20
traced_renames "generation.*DELAYED"
[ $rc -eq 0 ] || { cat "$ST2.out"; fail "supervise exited $rc: a recovery with slow renames"; }
has_event "$ST2" run_done || fail "no run_done after the recovery"
has_event "$ST2" generation_started 'e["gen"] == 2' || fail "no generation 2"
has_event "$ST2" spare_promoted || fail "no spare replaced the lost node"
# the kill itself may be seen once or twice (the process's exit, then its
# group's: "joins the recovery in progress"); any fault of another node, or
# of another kind, would be the stall's
has_event "$ST2" fault_detected 'e["node"] != 1 or e["kind"] not in ("process_exit", "node_lost")' &&
  { cat "$ST2.out"; fail "a fault besides the kill with slow renames (a record write blocked the loop?)"; }
for e in supervisor_stall spare_lost spare_lost_supervisor; do
  has_event "$ST2" $e && { cat "$ST2.out"; fail "$e in a recovery with slow renames (a record write blocked the loop?)"; }
done
[ "$(cat "$ST2/generation")" = 2 ] || fail "STATE/generation holds $(cat "$ST2/generation"), want 2"
pass "4.5 s renames: the new generation and the quarantine recorded off the loop, no stall, run done"
