#!/usr/bin/env bash
# tests/cluster/doctor_links.sh: the node doctor's link check names a
# rate-limited host before the first step; silent data corruption found
# while training drains the corrupting host in Slurm.
#
# 4 hosts (salloc -N4): 3 active, 1 spare, the store a shared directory.
# Before supervise starts, h3's link is limited with tc tbf (both
# directions). The gang starting the run checks its links (doctor.link_mb:
# an all-reduce of known data, then every link of the ring timed both
# ways): the doctor_links event gives each node's fastest link beside the
# median, and doctor_slow_link names h3, only h3, before any step. A slow
# link is a report: nothing is quarantined, the run trains on (the limit
# is lifted once it is named).
# Then node 1's gradients flip a bit from step 13 on (failpoint
# sdc_corrupt_node=1): the recomputation check (watchdog.sdc_every 5)
# names it at step 15, its host is quarantined and drained in Slurm with
# the reason (sinfo -R "ftsup: sdc: ..."), the spare takes its place from
# checkpoint 10 (the last before step 11, the first no check covers), and
# the run finishes. Then `supervise doctor --hosts` (no run) on the other
# three hosts through srun: the one whose GEMM flips a bit is refused and
# drained (--drain).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ftc_begin 4
STEPS=20
STORE="local:$C/shared/ckpt"
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE" -e 's|  count: 2|  count: 3|' \
  -e 's|  global_batch: 16 |  global_batch: 18 |' -e 's|  micro_batch: 8 |  micro_batch: 6 |' \
  -e 's|^watchdog:|watchdog:\n  sdc_every: 5|'
grep -q 'count: 3' "$RUN/run.yaml" && grep -q 'global_batch: 18' "$RUN/run.yaml" &&
  grep -q 'sdc_every: 5' "$RUN/run.yaml" || fail "could not write a 3-node run file"
ST=$RUN/state
host_rate h3 "${FTC_DOCTOR_RATE:-40mbit}" || fail "tc tbf on h3"
echo "h3's link limited to ${FTC_DOCTOR_RATE:-40mbit}"
FT_FAILPOINTS=sdc_corrupt_node=1,sdc_corrupt_from=13 ftc_supervise "$ST" 4 "$RUN/run.yaml" --spares 1
ftc_wait "$ST" doctor_links 1 120
host_rate h3 off
ftc_finish
ftc_events "$ST" "
l = named('doctor_links')[0]
print('doctor_links:', {n['host']: n['best_mb_s'] for n in l['nodes']}, 'median', l['median_mb_s'])
assert l['allreduce_ok'] is True, l
slow = named('doctor_slow_link')
assert [e['host'] for e in slow] == ['h3'], slow
assert all(n['slow'] == (n['host'] == 'h3') for n in l['nodes']), l['nodes']
steps = [i for i, e in enumerate(ev) if e['event'] == 'step']
assert steps and ev.index(slow[0]) < steps[0], 'named after training began'
first_fault = min([ev.index(e) for e in named('fault_detected')] or [len(ev)])
assert not [e for e in ev[:first_fault] if e['event'] == 'node_quarantined'], 'a slow link is a report'
sdc = named('sdc')
assert len(sdc) == 1 and sdc[0]['node'] == 1 and sdc[0]['first_step'] == 11, sdc
assert 'of step 15' in sdc[0]['detail'], sdc
q = named('node_quarantined')
assert [e['node'] for e in q] == [1] and q[0]['reason'].startswith('sdc: rank 1'), q
d = named('node_drained')
assert [e['host'] for e in d] == [h[1]] and d[0]['reason'].startswith('ftsup: sdc'), d
assert [e['restore_step'] for e in named('rollback')] == [10], named('rollback')
assert named('spare_promoted')[0]['replaces'] == 1
assert named('run_done')[-1]['steps'] == $STEPS
print('sdc:', sdc[0]['detail'])
"
pass "the doctor named h3's limited link before the first step, nothing quarantined for it"
bad=$(ftc_events "$ST" "print(h[1])")
sinfo=$(cluster_exec head sinfo -R -h -o '%n|%E')
grep -q "^$bad|ftsup: sdc" <<<"$sinfo" || fail "sinfo -R does not show $bad drained for the SDC: $sinfo"
pass "node 1 ($bad), corrupting its gradients, named at step 15, drained in Slurm (sinfo -R), the spare resumed from step 10, the run finished"

# supervise doctor --hosts, no run: the other three hosts, through srun; the
# third one's GEMM flips a bit (its --node index 2), so it is refused and
# --drain drains it.
others=$(ftc_events "$ST" "print(' '.join(x for x in h if x != h[1]))")
read -r o1 o2 o3 <<<"$others"
rc=0
(cd "$RUN" && FT_FAILPOINTS=doctor_flip_bit=2 cluster_exec head "$FT_BIN/supervise" doctor \
  --hosts "$o1,$o2,$o3" --drain --timeout 60 "$RUN/run.yaml") >"$TMP/hosts.out" 2>&1 || rc=$?
cat "$TMP/hosts.out"
[ $rc = 1 ] || fail "supervise doctor --hosts under Slurm: exit $rc, want 1"
grep -q "^$o1 *passed" "$TMP/hosts.out" && grep -q "^$o2 *passed" "$TMP/hosts.out" &&
  grep -q "^$o3 *refused .*computes wrong numbers.*-> drained" "$TMP/hosts.out" ||
  fail "the --hosts verdicts"
sinfo=$(cluster_exec head sinfo -R -h -o '%n|%E')
grep -q "^$o3|ftsup doctor: compute check" <<<"$sinfo" || fail "sinfo -R does not show $o3 drained: $sinfo"
pass "supervise doctor --hosts through srun: $o1 and $o2 pass, $o3 (a flipped GEMM bit) refused and drained"
