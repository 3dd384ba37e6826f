#!/usr/bin/env bash
# A rank stuck inside a CUDA call (issue 36), on cuemu: the CUDA engine at
# world 2 under the supervisor, 1 spare. At step 8 node 1's worker launches
# a kernel that never finishes (FT_FAILPOINTS hang_in=cuda: one device
# thread spinning on a word nothing writes, kernels/cuda kc_stall) and its
# training thread blocks behind it in cudaDeviceSynchronize (kc_sync);
# its control thread heartbeats on. On cuemu the kernel runs as a fibre
# inside that synchronisation, so the thread is really stuck in the CUDA
# call. Node 0 enqueues step 8's collectives and waits in them (the
# collective timeout, 120 s, is far off). Checked:
#   - progress_hang class behind (trigger deadline) naming node 1, its phase
#     (forward: the step's first micro-batch) beside node 0's collective;
#   - fault "hang" on node 1, quarantined; node 0 never blamed;
#   - node 1's process gone by the time the gang is reported stopped
#     (gang_stopped, nothing left behind): the stuck CUDA call did not keep
#     it alive; the spare takes its place, the run finishes, one restart.
# Broken detection (progress never judged) leaves node 0 waiting until the
# collective timeout blames node 1 later, by another trigger: the trigger
# check fails; a broken stop leaves the process behind.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../gpu/gpu_lib.sh"
source "$(dirname "$0")/../integration/sup_lib.sh"
synth_data "$TMP"
ST=$TMP/st
FT_FAILPOINTS=hang_at_step=8,hang_in=cuda,hang_node=1,hang_gen=1 "$FT_BIN/supervise" \
  --state "$ST" --worker "$FT_BIN/worker" --spares 1 --steps 16 --set nodes.count=2 \
  --set nodes.device=cuda --set checkpoint.every_steps=5 --set "checkpoint.store=local:$ST/store" \
  --set chaos.kill_node_at_step=0 --set train.val_every=0 --set watchdog.heartbeat_timeout_s=10 \
  --set watchdog.progress_timeout_s=15 --set watchdog.collective_timeout_s=120 \
  --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin" \
  "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 &
SUP=$!
# the moment the gang is reported stopped, node 1's first worker (the one
# stuck in the CUDA call) must be gone
PID=
for _ in $(seq 4000); do
  kill -0 $SUP 2>/dev/null || break
  if [ -z "$PID" ] && [ -f "$ST/events.jsonl" ]; then
    PID=$(python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
if any(e["event"] == "gang_stopped" for e in ev):
    print(next(e["pid"] for e in ev if e["event"] == "worker_launched" and e["node"] == 1))
' "$ST/events.jsonl" 2>/dev/null || true)
    if [ -n "$PID" ]; then
      ! kill -0 "$PID" 2>/dev/null || fail "node 1's stuck worker (pid $PID) still runs after gang_stopped"
    fi
  fi
  sleep 0.1
done
rc=0
wait $SUP || rc=$?
[ $rc = 0 ] || { tail -n 30 "$ST.out"; fail "supervise exited $rc, want 0"; }
[ -n "$PID" ] || fail "no gang_stopped seen while supervise ran"
kill -0 "$PID" 2>/dev/null && fail "node 1's worker (pid $PID) still runs"
grep -q 'failpoint hang_at_step=8 (node 1, rank 1, in cuda): hanging' "$ST/logs/node1.slot0.log" ||
  { tail -n 20 "$ST/logs/node1.slot0.log"; fail "node 1 did not launch the kernel that never ends"; }
grep -l 'failpoint hang_at_step' "$ST"/logs/node0.*.log "$ST"/logs/node2.*.log 2>/dev/null &&
  fail "another node stalled too"
python3 - "$ST/events.jsonl" "$PID" <<'PY' || fail "events (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
pid = int(sys.argv[2])
hangs = [e for e in ev if e["event"] == "progress_hang"]
faults = [e for e in ev if e["event"] == "fault_detected"]
quar = [e for e in ev if e["event"] == "node_quarantined"]
gens = [e for e in ev if e["event"] == "generation_started"]
print("progress_hang:", hangs)
print("fault_detected:", [(f["kind"], f["node"], f["blamed"], f["quarantine"]) for f in faults])
print("generations:", [(g["gen"], g["nodes"]) for g in gens])
assert len(hangs) == 1, "want exactly one progress_hang"
h = hangs[0]
assert h["class"] == "behind" and h["trigger"] == "deadline" and h["gen"] == 1, h
assert [c["node"] for c in h["culprits"]] == [1] and h["nodes"] == [1], h
assert h["phase"] == "forward" and h["action"] == "quarantine", h
ranks = {r["rank"]: r for r in h["ranks"]}
assert ranks[1]["node"] == 1 and ranks[1]["phase"] == "forward" and ranks[1]["step"] == 7, ranks
assert ranks[0]["phase"] == "collective" and ranks[0]["coll_seq"] > ranks[1]["coll_seq"], ranks
assert len(faults) == 1, faults
f = faults[0]
assert f["kind"] == "hang" and f["node"] == 1 and f["blamed"] and f["quarantine"], f
assert f["pid"] == pid and "no progress" in f["detail"], f
stopped = [e for e in ev if e["event"] == "gang_stopped"]
assert len(stopped) == 1 and stopped[0]["left_behind"] == [], stopped
assert [q["node"] for q in quar] == [1], quar
assert [(g["gen"], sorted(g["nodes"])) for g in gens] == [(1, [0, 1]), (2, [0, 2])], gens
done = [e for e in ev if e["event"] == "run_done"]
assert done and done[0]["restarts"] == 1, done
print("gang stopped %d ms after the detection (shown, not checked)" % stopped[0]["ms"])
PY
pass "a rank stuck in cudaDeviceSynchronize behind a kernel that never ends: detected (behind, forward), its process gone, node 1 quarantined, the spare in its place"
