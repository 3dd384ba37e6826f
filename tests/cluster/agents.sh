#!/usr/bin/env bash
# tests/cluster/agents.sh [each|once]: real agents (nodes.agent: true) on the
# namespace Slurm cluster: one ftagent per host starts the host's 2 workers
# and holds its one connection to the supervisor across the namespaces.
#   each: one srun step per host, as without agents (one task: the agent);
#   once: nodes.launch_once, one srun step for the whole pool (a task per
#         host, each agent's node its SLURM_NODEID).
# 3 hosts (2 active, 1 warm spare). At the first checkpoint an active host
# loses power (every process in its namespace killed): its agent's
# connection is gone, so the host is lost (node_lost, quarantined, drained
# in Slurm), the spare takes its place, the other active host's workers
# rejoin in process (recovery.in_process), and the run reaches its last
# step. Asserts also that the run started every worker through its agent
# (each host's log), that the supervisor held one connection per host and
# that no worker of the lost host is left anywhere.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mode=${1:-each}
case $mode in
each) once=false ;;
once) once=true ;;
*) fail "mode is each or once, not '$mode'" ;;
esac
ftc_begin 3
STEPS=60
ftc_runfile "$RUN/run.yaml" $STEPS "local:$C/shared/store" \
  -e 's|  workers_per_node: 1|  workers_per_node: 2|' -e 's|  micro_batch: 8|  micro_batch: 4|'
grep -q "workers_per_node: 2" "$RUN/run.yaml" || fail "the run file does not have 2 workers a host"
ST=$RUN/state
ftc_supervise "$ST" 3 "$RUN/run.yaml" --spares 1 --set recovery.in_process=true \
  --set nodes.agent=true --set nodes.launch_once=$once
ftc_wait "$ST" checkpoint_committed 1
victim=$(ftc_active_host "$ST")
host_power_off "$victim"
echo "host $victim lost power"
ftc_finish
ftc_events "$ST" "
lost = [e for e in named('fault_detected') if e['kind'] == 'node_lost']
assert lost and h[lost[0]['node']] == '$victim', ('the host should be lost by its agent', named('fault_detected'))
q = named('node_quarantined')
assert len(q) == 1 and q[0]['host'] == '$victim', q
assert named('spare_promoted'), 'no spare promoted'
d = named('node_drained', host='$victim')
assert d and d[0]['reason'].startswith('ftsup: '), d
assert named('run_done')[0]['steps'] == $STEPS
assert named('recovered')[0]['rejoined_in_process'] == 1, (named('recovered'), named('rejoin_fallback'), [e for e in ev if not e['event'].startswith(('step', 'checkpoint', 'loss'))][:60])
# one process launched per host ($mode): every slot of a node stands for it
pids = {}
for e in named('worker_launched'):
    pids.setdefault(e['node'], set()).add(e['pid'])
assert all(len(p) == 1 for p in pids.values()), pids
if '$mode' == 'once':
    assert len(set.union(*pids.values())) == 1, ('one srun for the pool', pids)
"
# every worker was started by its host's agent
log() { if [ "$mode" = once ]; then cat "$ST/logs/agents.log"; else cat "$ST"/logs/node*.log; fi; }
for n in 0 1 2; do
  log | grep -q "ftagent: node $n: connected to .* starting 2 workers" || fail "node $n had no agent"
done
started=$(log | grep -c "ftagent: node . slot .: worker [0-9]* started") || true
[ "$started" -ge 6 ] || fail "$started workers started by agents (3 hosts x 2 at least)"
[ -z "$(ftc_workers_on "$victim")" ] || fail "workers left on $victim"
pass "agents ($mode launch): $victim lost power, its agent's host lost and drained, a spare in its place, the other host rejoined in process, run done"
