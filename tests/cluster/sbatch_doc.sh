#!/usr/bin/env bash
# tests/cluster/sbatch_doc.sh: the sbatch script of docs/multihost.md works
# as written on the namespace Slurm cluster (tests/cluster/cluster.sh).
#
# The script is cut out of the doc (between its sbatch-example markers) and
# submitted unchanged with sbatch from a run directory on the cluster's
# shared file system, beside a run file with nodes.launcher: slurm and
# nodes.count 2 on a 3-node allocation. Asserts: the job completes; the
# supervisor ran on the allocation's first node; the workers ran as one
# job step per node on h1 and h2, with h3 the warm spare (its step idles);
# the run reached its last step and its checkpoint verifies.
# Needs root, ip netns and Slurm/munge (else exits 77, skipped).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
reason=$(cluster_can_run) || {
  echo "$reason"
  exit 77
}
: "${FT_BIN:?FT_BIN must point to build/bin}"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ftcsbatch.XXXXXX")
C=$TMP/cluster
cleanup() {
  cluster_down "$C"
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$RUN"/supervise-*.out "$RUN"/state/logs/*.log; do
    [ -f "$f" ] && { echo "== $f" && tail -15 "$f"; } >&2
  done
  exit 1
}
pass() { echo "PASS: $*"; }

cluster_up "$C" 3 || fail "cluster_up 3"
RUN=$C/shared/run
mkdir -p "$RUN"

# The doc's script, unchanged.
awk '/<!-- sbatch-example/{on=1; next} /<!-- \/sbatch-example/{on=0} on' "$SRC/docs/multihost.md" |
  sed -e '/^```/d' >"$RUN/train.sbatch"
grep -q '^exec supervise' "$RUN/train.sbatch" || fail "no sbatch example found in docs/multihost.md"

# The run: the tiny demo model, 2 active nodes, the store on the shared dir.
"$FT_BIN/ftdata" synth --out "$RUN/synth" --tokens 200000 >/dev/null
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$RUN/synth_train_*.bin\", val: \"$RUN/synth_val_*.bin\"}|" \
  -e 's|  launcher: local|  launcher: slurm|' -e 's|  steps: 300|  steps: 30|' \
  -e "s|  store: .*|  store: \"local:$C/shared/ckpt\"|" -e 's|  every_steps: 25|  every_steps: 10|' \
  "$SRC/examples/demo.yaml" >"$RUN/run.yaml"
grep -q 'launcher: slurm' "$RUN/run.yaml" || fail "could not make the run file"

# Submitted as a user would: from the run directory, supervise on PATH.
job=$(cd "$RUN" && PATH="$FT_BIN:$PATH" cluster_exec head sbatch --parsable train.sbatch) ||
  fail "sbatch refused the doc's script"
echo "submitted job $job"
state=
for ((i = 0; i < 600; i++)); do
  state=$(cluster_exec head scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
[ "$state" = COMPLETED ] || fail "job $job ended $state (want COMPLETED)"
pass "job $job COMPLETED"

out="$RUN/supervise-$job.out"
[ -f "$out" ] || fail "no $out (the script's --output)"
grep -q "run gpt2-tiny done: 30 steps" "$out" || fail "supervise did not report the run done"
python3 - "$RUN/state/events.jsonl" <<'PY' || fail "events: see above"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
def one(name):
    e = [x for x in ev if x["event"] == name]
    assert e, "no %s event" % name
    return e
started = one("run_started")[0]
assert started["world"] == 2 and started["spares"] == 1, started
assert started["launcher"] == "slurm" and started["hosts"] == ["h1", "h2", "h3"], started
launched = {(e["node"], e["role"]) for e in one("worker_launched")}
assert launched == {(0, "active"), (1, "active"), (2, "spare")}, launched
assert one("run_done")[0]["steps"] == 30
assert not [e for e in ev if e["event"] in ("fault_detected", "node_quarantined")], "a fault"
PY
pass "2 active nodes + 1 warm spare from the allocation; run done"

# Each node's log: its own step on its own host (--label prefixes the slot).
for n in 0 1 2; do
  grep -q "^0: worker: node $n slot 0: gloo on \|^0: worker: node $n slot 0" "$RUN/state/logs/node$n.log" ||
    fail "node $n's step log has no labelled worker line"
done
grep -q "gloo on 10\.[0-9.]*\.11 " "$RUN/state/logs/node0.log" || fail "node 0 did not run on h1"
grep -q "gloo on 10\.[0-9.]*\.12 " "$RUN/state/logs/node1.log" || fail "node 1 did not run on h2"
pass "node 0 on h1, node 1 on h2, one labelled step log each"

"$FT_BIN/ckpt" --store "local:$C/shared/ckpt" --run gpt2-tiny verify 30 >/dev/null ||
  fail "ckpt verify of step 30"
pass "the last checkpoint verifies"

# Allocations that do not fit the run file: exit 2 with the reason.
set +e
(cd "$RUN" && cluster_exec head salloc -N1 "$FT_BIN/supervise" --state "$TMP/st1" run.yaml) >"$TMP/n1.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "salloc -N1 for nodes.count 2: supervise exited $rc, want 2"
grep -q "has 1 node(s), h1, but nodes.count is 2" "$TMP/n1.out" || fail "message: $(cat "$TMP/n1.out")"
set +e
(cd "$RUN" && cluster_exec head salloc -N2 "$FT_BIN/supervise" --spares 1 --state "$TMP/st2" run.yaml) \
  >"$TMP/n2.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "salloc -N2 --spares 1 for nodes.count 2: supervise exited $rc, want 2"
grep -q -- "--spares 1: the allocation (job [0-9]*, h\[1-2\]) has 0 node(s) beyond" "$TMP/n2.out" ||
  fail "message: $(cat "$TMP/n2.out")"
pass "an allocation too small for nodes.count or --spares: exit 2 with the reason"

