#!/usr/bin/env bash
# A hang where the processes stay alive (issue 36): every worker's training
# thread stops after step S (FT_FAILPOINTS=hang_at_step=S) while its
# control thread heartbeats on. The supervisor must show what heartbeats
# alone cannot: `supervise status --json` (the HTTP /status) read twice,
# 3 s apart, gives each gang rank's phase (optimizer: the hang is in the
# step's tail), its step S, its collective count (the same on both ranks:
# nobody is behind) and a progress age that grew by the time between the
# reads, while its heartbeats stay fresh; the human `supervise status`
# lists the ranks with "no progress for". Then an operator's `kill -USR1`
# to each worker process: each writes its stuck training thread's stack
# to its log (STATE/logs/nodeN.slot0.log): the header with its rank, step
# S and phase optimizer, a frame in ft_failpoint_hang_here (where the
# failpoint stalls) and its last progress. The run is killed at the end
# (SIGTERM; the progress deadline, 60 s at least, is never reached here).
# Without the worker's SIGUSR1 handler the signal kills the workers and
# the test fails at "no stack of the training thread in ...".
source "$(dirname "$0")/lib.sh"
synth_data "$TMP"
ST=$TMP/st
S=12
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
  -e "s|  store: .*|  store: \"local:$TMP/store\"|" -e 's|  every_steps: 25|  every_steps: 10|' \
  -e 's|  heartbeat_timeout_s: 10|  heartbeat_timeout_s: 4|' \
  "$FT_SRC/examples/demo.yaml" >"$TMP/run.yaml"
FT_FAILPOINTS=hang_at_step=$S "$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" \
  --spares 0 "$TMP/run.yaml" >"$TMP/sup.out" 2>&1 &
SUP=$!
for ((i = 0; i < 900; i++)); do
  [ -s "$ST/http.addr" ] && "$FT_BIN/supervise" status "$ST" --json 2>/dev/null |
    python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["step"] >= int(sys.argv[1]) else 1)' \
      "$S" && break
  kill -0 $SUP 2>/dev/null || fail "supervise exited: $(tail -20 "$TMP/sup.out")"
  sleep 0.1
done
sleep 2 # the hung ranks' next beats carry an age
"$FT_BIN/supervise" status "$ST" --json >"$TMP/s1.json" || fail "supervise status --json (1)"
sleep 3
"$FT_BIN/supervise" status "$ST" --json >"$TMP/s2.json" || fail "supervise status --json (2)"
"$FT_BIN/supervise" status "$ST" >"$TMP/s2.txt" || fail "supervise status (2)"
python3 - "$TMP/s1.json" "$TMP/s2.json" "$S" <<'PY' || fail "progress in /status (above; $(tail -5 "$TMP/sup.out"))"
import json, sys
s1, s2 = (json.load(open(p)) for p in sys.argv[1:3])
S = int(sys.argv[3])
def ranks(s):
    out = {}
    for n in s["nodes"]:
        for w in n.get("workers", []):
            if w["rank"] >= 0:
                out[w["rank"]] = dict(w, node=n["node"])
    return out
r1, r2 = ranks(s1), ranks(s2)
print("first: ", r1)
print("second:", r2)
assert s2["step"] == S and s2["state"] == "running", (s2["step"], s2["state"])
assert sorted(r1) == sorted(r2) == [0, 1], (r1, r2)
seqs = set()
for r in (0, 1):
    a, b = r1[r], r2[r]
    assert b["phase"] == "optimizer", b
    assert b["step"] == S, b
    assert b["coll_seq"] > 0 and b["coll_seq"] == a["coll_seq"], (a, b)
    seqs.add(b["coll_seq"])
    assert a["progress_age_s"] >= 1.0, a
    assert b["progress_age_s"] >= a["progress_age_s"] + 2.5, (a, b)  # 3 s between the reads
    assert b["heartbeat_age_s"] <= 2.5, b  # beats every second: alive, not moving
assert len(seqs) == 1, seqs  # every rank at the same collective: nobody behind
PY
grep -q "rank [01] (node [01] slot 0): optimizer, collective [0-9]*, step $S, no progress for" \
  "$TMP/s2.txt" || fail "supervise status: $(cat "$TMP/s2.txt")"
# the operator asks each worker for its stuck thread's stack
pids=$(pgrep -f -- "--runfile $ST/run.yaml") || fail "no worker processes"
[ "$(echo $pids | wc -w)" = 2 ] || fail "want 2 worker processes: $pids"
kill -USR1 $pids
for n in 0 1; do
  for ((i = 0; i < 300; i++)); do
    grep -q "^worker: end of the training thread's stack" "$ST/logs/node$n.slot0.log" && break
    sleep 0.1
  done
done
python3 - "$ST" "$S" <<'PY' || fail "the stuck thread's stack in the worker's log (above)"
import os, re, sys
st, S = sys.argv[1], int(sys.argv[2])
HEAD = re.compile(r"worker: stack of the training thread \(node (\d) slot 0, rank (\d), step (\d+), "
                  r"phase (\w+), collective (\d+), no progress for [0-9.]+ s\):$")
for n in (0, 1):
    path = os.path.join(st, "logs", "node%d.slot0.log" % n)
    lines = open(path, errors="replace").read().splitlines()
    heads = [i for i, l in enumerate(lines) if HEAD.match(l)]
    assert len(heads) == 1, "no stack of the training thread in %s (%d headers)" % (path, len(heads))
    i = heads[0]
    end = lines.index("worker: end of the training thread's stack", i)
    print("\n".join(lines[i:end + 1]))
    node, rank, step, phase, coll = HEAD.match(lines[i]).groups()
    assert int(node) == n and int(step) == S and phase == "optimizer", lines[i]
    frames = lines[i + 1:end]
    assert any("(ft_failpoint_hang_here+" in l for l in frames), "no frame of the stall: %s" % frames
    ring = frames.index("worker: the training thread's last progress (newest first):")
    assert frames[ring + 1].endswith("step %d, phase optimizer, collective %s" % (S, coll)), frames
PY
for pid in $pids; do kill -0 "$pid" || fail "worker $pid died of SIGUSR1"; done
kill -TERM $SUP # STOP to every worker: their control threads exit the hung processes
for ((i = 0; i < 200; i++)); do
  kill -0 $SUP 2>/dev/null || break
  sleep 0.1
done
kill -0 $SUP 2>/dev/null && { kill -KILL $SUP; fail "supervise did not stop on SIGTERM"; }
pass "a hang with live processes: /status shows each rank's phase, collective and a growing progress age; kill -USR1 puts the stuck thread's stack in each worker's log"
