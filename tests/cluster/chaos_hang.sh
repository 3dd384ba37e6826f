#!/usr/bin/env bash
# tests/cluster/chaos_hang.sh: one host's worker freezes in compute while
# its process lives and its heartbeats go on, under Slurm (issue 36).
#
# 3 hosts (2 active, 1 warm spare), the store a shared directory. The
# failpoint hang_at_step=12,hang_node=1,hang_in=compute,hang_gen=1 stops the
# training thread of node 1's worker inside step 12's backward, before its
# first gradient reduction: its control thread keeps heartbeating, so no
# heartbeat deadline fires, and its peer on the other host waits in the
# collective. The progress watchdog (watchdog.progress_timeout_s 8; the
# collective timeout is set far above it) must name that rank and its host:
# progress_hang class behind with node 1 the culprit, fault "hang" on node
# 1's host (quarantined), that host drained in Slurm (sinfo -R shows
# "ftsup: hang: ..."), the spare promoted, the other active host never
# blamed nor drained, and the run reaches its last step with every
# committed checkpoint verifying. Before the stop the hung worker is asked
# for its training thread's stack over its connection (DUMP: under srun
# the supervisor cannot signal the worker itself): the event counts it
# (stacks_asked >= 1) and node 1's log holds the stack, the failpoint's
# frame in it.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ftc_begin 3
STEPS=60
STORE="local:$C/shared/ckpt"
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE"
ST=$RUN/state
FT_FAILPOINTS=hang_at_step=12,hang_node=1,hang_in=compute,hang_gen=1 \
  ftc_supervise "$ST" 3 "$RUN/run.yaml" --spares 1 --set watchdog.progress_timeout_s=8 \
  --set watchdog.collective_timeout_s=600
ftc_wait "$ST" progress_hang 1 180
ftc_finish
ftc_events "$ST" "
ph = named('progress_hang')
assert len(ph) == 1, ph
p = ph[0]
assert p['class'] == 'behind' and p['nodes'] == [1], p
assert [c['node'] for c in p['culprits']] == [1], p
assert p['stacks_asked'] >= 1, ('no stack asked for', p)
f = named('fault_detected', kind='hang')
assert len(f) == 1 and f[0]['node'] == 1 and f[0]['blamed'] and f[0]['quarantine'], f
host = f[0]['host']
assert host == h[1], (host, h)
q = named('node_quarantined')
assert len(q) == 1 and q[0]['host'] == host, q
d = named('node_drained')
assert len(d) == 1 and d[0]['host'] == host and d[0]['reason'].startswith('ftsup: hang'), d
assert named('spare_promoted'), 'no spare promoted'
assert not [e for e in named('fault_detected') if e['blamed'] and e['node'] != 1], named('fault_detected')
assert named('run_done')[0]['steps'] == $STEPS
print('hung host:', host, 'drained:', d[0]['reason'])
open('$TMP/victim', 'w').write(host)
"
victim=$(cat "$TMP/victim")
grep -q "failpoint hang_at_step=12 (node 1," "$ST"/logs/node*.log ||
  fail "node 1's worker did not hang (the failpoint did not fire)"
grep -q "worker: stack of the training thread" "$ST"/logs/node1*.log ||
  fail "node 1's log holds no stack of its training thread (DUMP not sent, or the worker stopped first)"
grep -q "ft_failpoint_hang_here" "$ST"/logs/node1*.log ||
  fail "node 1's stack does not show the frame it hung in (ft_failpoint_hang_here)"
drained=$(cluster_exec head sinfo -R -h -o '%n|%E')
echo "$drained" | grep -q "^$victim|ftsup: hang" || fail "sinfo -R does not show $victim drained for the hang: $drained"
[ "$(echo "$drained" | grep -c '|ftsup: ')" = 1 ] || fail "more than the hung host drained: $drained"
pass "the frozen worker's host ($victim) was named, quarantined and drained in Slurm; its stack is in node 1's log; a spare took its place; run done"
ftc_verify_all "$STORE"
