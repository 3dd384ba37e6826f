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
# The training data is in a bucket too (s3://ftsup-data/corpus/, written by
# `ftdata synth --out s3://...` from the head) and no shard exists on any
# path a host reads: no shared data directory; each host reads blocks into
# its own node-local data cache (FT_DATA_CACHE=$C/local/datacache). Asserts
# also that the run trained from the bucket (ranged GETs of the shards from
# the hosts in moto's log, block files in the hosts' caches) and that no
# shard file exists in the cluster's tree.
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
# the data: in the bucket only (ftc_begin's shared copies removed)
DATA=s3://ftsup-data/corpus/synth
cluster_exec head aws --endpoint-url "$FT_S3_ENDPOINT" s3api create-bucket --bucket ftsup-data \
  >/dev/null || fail "create-bucket ftsup-data"
rm -f "$RUN"/synth_*.bin
cluster_exec head "$FT_BIN/ftdata" synth --out "$DATA" --tokens 300000 >"$TMP/synth.out" 2>&1 ||
  fail "ftdata synth --out $DATA: $(cat "$TMP/synth.out")"
export FT_DATA_CACHE=$C/local/datacache # node-local, like FT_S3_CACHE
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE" \
  -e "s|^data:.*|data: {train: \"${DATA}_train_*.bin\", val: \"${DATA}_val_*.bin\"}|"
grep -q "^data: {train: \"s3://" "$RUN/run.yaml" || fail "the run file's data is not in the bucket"
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
# trained from the bucket: ranged GETs of the data objects from the compute
# hosts in moto's log, block files in the active hosts' own caches (the
# loader's I/O line comes at its close, which a worker told STOP skips)
gets=$(grep -c '"GET /ftsup-data/corpus/synth_train_000.bin HTTP/1.1" 206' "$TMP/moto.log") || true
[ "${gets:-0}" -gt 0 ] || fail "no ranged GET of the data in moto's log: the run did not read the bucket"
blk=$(find "$C"/hosts/*/local/datacache -name 'ftsup-data_*.blk' 2>/dev/null | wc -l)
[ "$blk" -ge 2 ] || fail "$blk data blocks in the hosts' own caches (expected the active hosts')"
[ -z "$(find "$C" -name 'synth_*.bin' -print -quit)" ] ||
  fail "a shard file exists on a host's path: $(find "$C" -name 'synth_*.bin')"
echo "trained from the bucket: $gets block GETs of the train shard, $blk block files in the hosts' caches, no shard file in the cluster"
pass "$victim lost power: quarantined, drained in Slurm, a spare took its place from the lost host's pushed shards, the other active host rejoined in process, no restore read the store, run done, its data read from the bucket"

# The catalog lives in the cache of the supervisor's host (head, whose
# $C/local is the cluster's common dir); a fresh cache elsewhere rebuilds it
# from the bucket, so check with the supervisor's.
export FT_S3_CACHE=$C/local/s3cache
ftc_verify_all "$STORE"
# the fault-free reference on local copies of the same shards (the bucket is
# reached only inside the cluster; data_s3.sh shows the two give the same bits)
"$FT_BIN/ftdata" synth --out "$TMP/refdata/synth" --tokens 300000 >/dev/null
sed "s|^data:.*|data: {train: \"$TMP/refdata/synth_train_*.bin\", val: \"$TMP/refdata/synth_val_*.bin\"}|" \
  "$RUN/run.yaml" >"$TMP/ref.yaml"
ref=$(ftc_reference "$TMP/ref.yaml" $STEPS)
ftc_same_weights "$STORE" "$ref" $STEPS
pass "every committed checkpoint verifies; step $STEPS's weights equal the fault-free run's"
ftc_goodput "$ST" "$TMP/faults.jsonl"
