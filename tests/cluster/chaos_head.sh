#!/usr/bin/env bash
# tests/cluster/chaos_head.sh: the supervisor's own host cut off from every
# worker for longer than the heartbeat timeout.
#
# 3 hosts (2 active, 1 spare), the store a shared directory. At the second
# checkpoint the head's link (the host supervise runs on, under salloc)
# goes down for about 2.5 heartbeat timeouts. Asserts: the supervisor judges it its
# own isolation (fault supervisor_isolated, nobody blamed): no node is
# quarantined or drained; every worker of that generation stops by itself
# (no worker process is left on any host); nothing is committed after the
# cut (the catalog's checkpoints are those committed before it). The
# operator then stops supervise (SIGINT, exit 130) and, the link back, runs
# the same command again: it resumes from the last commit with a newer
# generation and finishes; every committed checkpoint verifies and the
# final weights are bit-identical to a fault-free run.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The cut lasts about 10 s; with Slurm's usual 10 s its controller (on the
# head too) set every node DOWN half the time, and the second supervise's
# salloc waited some 40 s for them to return to service: Slurm's own view,
# not what this test is about.
export FTC_SLURMD_TIMEOUT=30
ftc_begin 3
STEPS=100
STORE="local:$C/shared/ckpt"
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE"
ST=$RUN/state
ftc_supervise "$ST" 3 "$RUN/run.yaml"
ftc_wait "$ST" checkpoint_committed 2
head_link down
t_cut=$(date +%s.%N)
echo "the supervisor's host (head) cut off"
ftc_wait "$ST" fault_detected 1 30
sleep 4 # past the heartbeat timeout: every worker has given the supervisor up
for h in h1 h2 h3; do
  left=$(ftc_workers_on "$h")
  [ -z "$left" ] || fail "worker processes left on $h after the cut: $(ps -o pid,etimes,stat,args -p "$(echo $left | tr " " ,)")"
done
pass "every worker stopped by itself"
sup_pid=$(ftc_events "$ST" "print(named('run_started')[0]['pid'])")
kill -INT "$sup_pid"
rc=0
wait "$FTC_SUP" || rc=$?
head_link up
[ $rc -eq 130 ] || fail "supervise exited $rc after SIGINT, want 130"
ftc_events "$ST" "
f = [e for e in named('fault_detected') if e['ts'] >= $t_cut]
assert f and f[0]['kind'] == 'supervisor_isolated' and not f[0]['blamed'], f[:2]
assert not [e for e in f if e['blamed']], [e for e in f if e['blamed']]
assert not named('node_quarantined') and not named('node_drained'), 'a node paid for our isolation'
late = [e['step'] for e in named('checkpoint_committed') if e['ts'] >= $t_cut]
assert not late, ('committed after the cut', late)
"
before=$(ftc_ckpt --store "$STORE" --run gpt2-tiny ls --json | python3 -c '
import json, sys
print(" ".join(str(c["step"]) for c in json.load(sys.stdin)))')
want=$(ftc_events "$ST" "print(' '.join(str(e['step']) for e in named('checkpoint_committed')))")
[ "$before" = "$want" ] || fail "the catalog holds steps '$before', want those committed before the cut: '$want'"
# (Slurm may list nodes it found "Not responding" while its controller,
# on the head too, was cut off: its own state, not a drain of ours)
! cluster_exec head sinfo -R -h -o '%E' | grep -q '^ftsup:' ||
  fail "a node is drained: $(cluster_exec head sinfo -R -h)"
pass "isolation: nobody blamed, nothing drained, nothing committed after the cut"

last=${want##* }
gen1=$(ftc_events "$ST" "print(max(e['gen'] for e in named('generation_started')))")
ftc_supervise "$ST" 3 "$RUN/run.yaml"
ftc_finish
ftc_events "$ST" "
starts = named('run_started')
assert len(starts) == 2
g = [e for e in named('generation_started') if e['ts'] >= starts[1]['ts']][0]
assert g['restore_step'] == $last and g['gen'] > $gen1, g
assert named('run_done')[-1]['steps'] == $STEPS
"
pass "supervise run again resumed from step $last (generation > $gen1) and finished"
ftc_verify_all "$STORE"
ref=$(ftc_reference "$RUN/run.yaml" $STEPS)
ftc_same_weights "$STORE" "$ref" $STEPS
pass "every committed checkpoint verifies; step $STEPS's weights equal the fault-free run's"
