#!/usr/bin/env bash
# tests/cluster/chaos_slow.sh: a slow host, then the spares run out.
#
# 2 hosts, both active, no spare (salloc -N2 --spares 0), the store a shared
# directory, recovery.when_no_spares: shrink. 1) After the first checkpoint
# h2's link is rate-limited with tc tbf: the straggler detector names that
# host (a "straggler" event with cause "link" and host h2, never h1); when
# the limit is lifted it is cleared. (Compute stragglers are not asserted
# on: every "host" here shares the machine's two cores.) A slow link is a report: nothing is
# quarantined for it. 2) Then h2 loses power with no spare left: the gang
# shrinks to one node and keeps the global batch (the one worker accumulates
# both ranks' micro-batches), so the run reaches its last step with the
# loss of a fault-free 2-node run (same sequences per step; only the sum's
# order differs); every committed checkpoint verifies.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ftc_begin 2
STEPS=120
STORE="local:$C/shared/ckpt"
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE"
grep -q 'when_no_spares: shrink' "$RUN/run.yaml" || fail "the run file does not shrink"
ST=$RUN/state
F=$TMP/faults.jsonl
ftc_supervise "$ST" 2 "$RUN/run.yaml" --spares 0
ftc_wait "$ST" checkpoint_committed 1
ftc_fault "$F" "slow_link h2"
host_rate h2 "${FTC_SLOW_RATE:-4mbit}" || fail "tc tbf on h2"
echo "h2's link limited to ${FTC_SLOW_RATE:-4mbit}"
ftc_wait_event "$ST" "e['event'] == 'straggler' and e['cause'] == 'link'" 60
host_rate h2 off
echo "h2's link at full speed again"
ftc_wait_event "$ST" "e['event'] == 'straggler_cleared' and e['cause'] == 'link'" 60
ftc_events "$ST" "
s = named('straggler', cause='link')
assert s and all(e['host'] == 'h2' for e in s), s
assert named('straggler_cleared', cause='link', host='h2'), named('straggler_cleared')
assert not named('fault_detected') and not named('node_quarantined'), 'a slow link is a report'
print('straggler:', s[0])
"
pass "the slow link's host (h2) was named, and cleared once its link was back"

ftc_wait "$ST" checkpoint_committed 3
ftc_fault "$F" "power_off h2"
host_power_off h2
echo "h2 lost power; no spare left"
ftc_finish
ftc_events "$ST" "
q = named('node_quarantined')
assert len(q) == 1 and q[0]['host'] == 'h2', q
sh = named('gang_shrunk')
assert sh and sh[0]['world_before'] == 2 and sh[0]['world_after'] == 1, sh
assert named('generation_started')[-1]['world'] == 1
assert named('run_done')[-1]['steps'] == $STEPS
"
pass "h2 lost with no spare: the gang shrank to one node and reached step $STEPS"
ftc_verify_all "$STORE"
ref=$(ftc_reference "$RUN/run.yaml" $STEPS)
python3 - "$ST/events.jsonl" "$TMP/ref/state/events.jsonl" $STEPS <<'PY' || fail "loss after the shrink"
import json, sys
def losses(path):
    return {e["step"]: e["loss"] for e in map(json.loads, open(path))
            if e["event"] == "step" and e.get("loss") is not None}
got, want, last = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
for k in sorted(want):
    if k in got:
        d = abs(got[k] - want[k])
        print(f"step {k}: loss {got[k]:.6f}, fault-free 2-node run {want[k]:.6f}, |diff| {d:.2e}")
        assert d <= 1e-5 * abs(want[k]), f"step {k}: beyond tolerance"
assert last in got and last in want, "no loss at the last step"
PY
pass "after the shrink the loss stays within 1e-5 (relative) of the fault-free run: the global batch was kept"
ftc_goodput "$ST" "$F"
