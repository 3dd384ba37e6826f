#!/usr/bin/env bash
# tests/cluster/chaos_cut.sh: a host cut off from the network, then a fatal
# Xid on another, during one run under Slurm; each is drained with its
# reason and replaced by a warm spare.
#
# 4 hosts (2 active, 2 spares), the store a shared directory (a cluster
# file system). 1) At the first checkpoint an active host's link goes
# down: it is found silent within the heartbeat timeout, quarantined,
# drained in Slurm ("ftsup: hang ..." in sinfo -R), a spare is promoted;
# its own workers stop by themselves once they have lost the supervisor
# (nothing of theirs is committed: their generation is fenced); when its
# link comes back it is not used again. 2) Then an Xid 79 (fallen off the
# bus) appears in another active host's kernel log (watchdog.xid_source, a
# file on each host's node-local disk): that node is drained with the Xid
# in the reason. Asserts the run reaches its last step, every committed
# checkpoint verifies and the final weights are bit-identical to a
# fault-free run. Prints goodput and per-fault detect/recover times.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ftc_begin 4
STEPS=120
STORE="local:$C/shared/ckpt"
for h in h1 h2 h3 h4; do : >"$C/hosts/$h/local/kern.log"; done
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE" \
  -e "s|^watchdog:|watchdog:\n  xid_source: \"$C/local/kern.log\"|"
grep -q "xid_source" "$RUN/run.yaml" || fail "no xid_source in the run file"
ST=$RUN/state
F=$TMP/faults.jsonl
ftc_supervise "$ST" 4 "$RUN/run.yaml"
ftc_wait "$ST" checkpoint_committed 1
cut=$(ftc_active_host "$ST")
ftc_fault "$F" "link_down $cut"
host_link "$cut" down
echo "host $cut cut off"
ftc_wait "$ST" recovered 1 60
host_link "$cut" up
echo "host $cut plugged in again"
ftc_wait "$ST" checkpoint_committed 3
xid=$(ftc_active_host "$ST")
node=$(ftc_events "$ST" "print(h.index('$xid'))")
ftc_fault "$F" "xid79 $xid"
printf '[ 1234.567890] NVRM: Xid (PCI:0000:%02x:00): 79, pid=4242, name=worker, GPU has fallen off the bus.\n' \
  "$node" >>"$C/hosts/$xid/local/kern.log"
echo "Xid 79 on $xid (node $node)"
ftc_finish
ftc_events "$ST" "
q = {e['host']: e['reason'] for e in named('node_quarantined')}
assert set(q) == {'$cut', '$xid'}, q
d = {e['host']: e['reason'] for e in named('node_drained')}
assert set(d) == {'$cut', '$xid'}, d
assert d['$cut'].startswith('ftsup: hang'), d
assert 'xid=79' in d['$xid'], d
assert len(named('spare_promoted')) == 2
cutn = h.index('$cut')
back = [e for e in named('worker_launched') if e['node'] == cutn and e['ts'] > named('node_quarantined')[0]['ts']]
assert not back, ('the cut-off host was used again', back)
assert named('run_done')[0]['steps'] == $STEPS
"
sinfo=$(cluster_exec head sinfo -R -h -o '%n|%E')
grep -q "^$cut|ftsup: hang" <<<"$sinfo" || fail "sinfo -R does not show $cut drained: $sinfo"
grep -q "^$xid|ftsup: .*79" <<<"$sinfo" || fail "sinfo -R does not show $xid drained for the Xid: $sinfo"
pass "cut-off $cut and Xid-79 $xid: both drained with their reasons (sinfo -R), spares promoted, $cut not used again"
ftc_verify_all "$STORE"
ref=$(ftc_reference "$RUN/run.yaml" $STEPS)
ftc_same_weights "$STORE" "$ref" $STEPS
pass "every committed checkpoint verifies; step $STEPS's weights equal the fault-free run's"
ftc_goodput "$ST" "$F"
