#!/usr/bin/env bash
# tests/cluster/chaos_power.sh: an active host loses power during a run
# under Slurm, and the run goes on from the durable tier.
#
# 4 hosts (2 active, 2 warm spares); the store is S3 (moto with signature
# checking, in the head namespace) behind a cache on each host's node-local
# disk (FT_S3_CACHE=$C/local/s3cache: every host its own,
# FT_S3_CACHE_PER_HOST=1). At the first
# checkpoint an active host loses power: every process in its namespace is
# killed and its local disk wiped. Asserts: the host is quarantined and
# drained in Slurm (sinfo -R shows "ftsup:"), a spare is promoted, the run
# reaches its last step, ckpt verify passes on every committed checkpoint,
# and the final weights are bit-identical to a fault-free run at the same
# world size. The run restarts in process (recovery.in_process): the other
# active host's worker stays in its process and rejoins across the
# namespaces (node_rejoined, rejoined_in_process 1). Every rank pushes its
# shards into the memory of the other active host and of the spares
# (checkpoint.replicate), so the promoted spare restores the lost host's
# shard from what that host pushed into it across the namespaces before it
# lost power: no rank of the new generation reads the store, and no spare
# fetched from it while it waited. The round does not wait for the dead
# host's job step, which srun cannot end (gang_stopped: left_behind). A
# checkpoint every step, all but the last in memory only
# (checkpoint.persist_every 1000): the restore step's record is in the
# supervisor's catalog alone (each host's catalog is its own s3 cache), and
# its manifest reaches the workers through the generation's KV.
# Prints goodput and the time to detect and to recover.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ftc_begin 4
STEPS=100
BUCKET=ftsup-cluster
ftc_moto "$BUCKET"
STORE="s3://$BUCKET/runs"
export FT_S3_CACHE=$C/local/s3cache # node-local on every host (cluster.sh)
export FT_S3_CACHE_PER_HOST=1       # so a chunk counts once it is in the bucket
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE"
ST=$RUN/state
ftc_supervise "$ST" 4 "$RUN/run.yaml" --set recovery.in_process=true \
  --set checkpoint.replicate=true --set checkpoint.every_steps=1 --set checkpoint.persist_every=1000
ftc_wait "$ST" checkpoint_committed 1
victim=$(ftc_active_host "$ST")
ftc_fault "$TMP/faults.jsonl" "power_off $victim"
host_power_off "$victim"
echo "host $victim lost power"
ftc_finish
ftc_events "$ST" "
q = named('node_quarantined')
assert len(q) == 1 and q[0]['host'] == '$victim', q
assert named('spare_promoted'), 'no spare promoted'
d = named('node_drained', host='$victim')
assert d and d[0]['reason'].startswith('ftsup: '), d
assert named('run_done')[0]['steps'] == $STEPS
r = named('node_rejoined')
assert len(r) == 1 and r[0]['node'] != q[0]['node'], r
assert named('recovered')[0]['rejoined_in_process'] == 1, named('recovered')
assert not named('rejoin_fallback'), named('rejoin_fallback')
gs = named('generation_started')[-1]
lv = [e['level'] for e in named('checkpoint_committed') if e['step'] == gs['restore_step']]
assert lv and lv[0] == 'memory', ('the restore step should be a memory-level checkpoint', gs, lv)
g = named('gang_stopped')
assert g and g[0]['left_behind'] == [q[0]['node']], ('the round waited for the dead host', g)
"
cluster_exec head sinfo -R -h -o '%n|%E' | grep -q "^$victim|ftsup: " ||
  fail "sinfo -R does not show $victim drained by ftsup: $(cluster_exec head sinfo -R -h -o '%n|%E')"
grep -h "restored step" "$ST"/logs/node*.log | grep -v ", 0.00 MiB from the store" &&
  fail "a rank of the new generation read the store (above; pushes: $(grep -h 'replica' "$ST"/logs/node*.log))"
grep -h "MiB fetched" "$ST"/logs/node*.log && fail "a spare fetched from the store while it waited (above)"
grep -qh "in the memory of " "$ST"/logs/node*.log || fail "no rank pushed a checkpoint to a buddy"
grep -h "restored step" "$ST"/logs/node*.log | grep -q "[1-9][0-9.]* MiB from memory" ||
  fail "no restore from memory: $(grep -h 'restored step' "$ST"/logs/node*.log)"
pass "$victim lost power: quarantined, drained in Slurm, a spare took its place from the lost host's pushed shards, the other active host rejoined in process, no restore read the store, run done"

# The catalog lives in the cache of the supervisor's host (head, whose
# $C/local is the cluster's common dir); a fresh cache elsewhere rebuilds it
# from the bucket, so check with the supervisor's.
export FT_S3_CACHE=$C/local/s3cache
ftc_verify_all "$STORE"
ref=$(ftc_reference "$RUN/run.yaml" $STEPS)
ftc_same_weights "$STORE" "$ref" $STEPS
pass "every committed checkpoint verifies; step $STEPS's weights equal the fault-free run's"
ftc_goodput "$ST" "$TMP/faults.jsonl"
