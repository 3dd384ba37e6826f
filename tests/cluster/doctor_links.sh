#!/usr/bin/env bash
# tests/cluster/doctor_links.sh: the node doctor's link check names a
# rate-limited host before the first step.
#
# 3 hosts, all active (salloc -N3, no spare), the store a shared directory.
# Before supervise starts, h3's link is limited with tc tbf (both
# directions). The gang starting the run checks its links (doctor.link_mb:
# an all-reduce of known data, then every link of the ring timed both
# ways): the doctor_links event gives each node's fastest link beside the
# median, and doctor_slow_link names h3, only h3, before any step. A slow
# link is a report: nothing is quarantined, the run trains on (the limit
# is lifted once it is named) and finishes.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ftc_begin 3
STEPS=20
STORE="local:$C/shared/ckpt"
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE" -e 's|  count: 2|  count: 3|' \
  -e 's|  global_batch: 16 |  global_batch: 18 |' -e 's|  micro_batch: 8 |  micro_batch: 6 |'
grep -q 'count: 3' "$RUN/run.yaml" && grep -q 'global_batch: 18' "$RUN/run.yaml" ||
  fail "could not write a 3-node run file"
ST=$RUN/state
host_rate h3 "${FTC_DOCTOR_RATE:-40mbit}" || fail "tc tbf on h3"
echo "h3's link limited to ${FTC_DOCTOR_RATE:-40mbit}"
ftc_supervise "$ST" 3 "$RUN/run.yaml" --spares 0
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
assert not named('node_quarantined') and not named('fault_detected'), 'a slow link is a report'
assert named('run_done')[-1]['steps'] == $STEPS
"
pass "the doctor named h3's limited link before the first step; nothing quarantined, the run finished"
