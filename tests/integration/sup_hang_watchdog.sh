#!/usr/bin/env bash
# The progress watchdog acts (issue 36): a hang where the processes stay
# alive (FT_FAILPOINTS=hang_at_step, the real worker, 2 nodes) is detected
# from the ranks' progress records, attributed, and recovered from; the
# hang happens in generation 1 only (hang_gen=1), so the restarted gang
# finishes the run (exit 0). One part per ctest entry:
#   behind   one rank hangs in compute (hang_node=1) while its peer waits
#            in the collective, --spares 1, watchdog.progress_timeout_s=5:
#            progress_hang class behind naming node 1, fault "hang" on node
#            1 (quarantined), the spare promoted; node 0 never blamed
#   coll     the same hang, but the collective timeout (3 s) comes before
#            the progress deadline (60 s): the peer's FAULT
#            collective_timeout is attributed from the records (trigger
#            collective_timeout): node 1 blamed, not nobody
#   gang     every rank hangs in compute: class gang, a restart with
#            nobody blamed, nothing quarantined
#   storage  every rank hangs in a data read (hang_in=data): class storage,
#            a restart with nobody blamed, nothing quarantined, after
#            waiting on storage (watchdog.storage_backoff_s, default 10 s:
#            events waiting_on_storage then storage_retry)
#   storage2 the same data read hangs in generations 1 and 2 (hang_gens=2),
#            storage_backoff_s 3: the supervisor does not restart into the
#            stall at once: it waits 3 s, then 6 s (doubled), saying so in
#            `supervise status` and /metrics (ftsup_waiting_on_storage 1)
#            while it waits; generation 3 finishes the run
# In every part the evidence is left for the operator before the stop:
# the event's "logs" names the stuck workers' logs (the culprit's; with
# nobody named, every rank's), and each of those logs holds its training
# thread's stack, asked for by the supervisor (SIGUSR1): the header line
# (its node, slot, rank, and the phase and collective the event shows), a
# frame in ft_failpoint_hang_here (where the failpoint stalls) and the
# last progress records (storage2: one such stack per hang); a worker not
# named (behind: node 0) is not asked.
# On the main before the watchdog was wired (progress shown, not judged),
# behind/gang/storage time out here (the supervisor waits forever, or
# until the collective timeout blames nobody) and coll blames nobody.
# Without the stack request (the signal not sent) each part fails at
# "no stack of the training thread in ..."
. "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
PART=${1:?usage: sup_hang_watchdog.sh behind|coll|gang|storage|storage2}
synth_data "$TMP"
W=$FT_BIN/worker
S=8
ARGS=(--worker "$W" --steps 30 --set nodes.count=2 --set train.val_every=0
  --set checkpoint.every_steps=5 --set watchdog.heartbeat_timeout_s=4
  --set "data.train=$TMP/synth_train_*.bin" --set "data.val=$TMP/synth_val_*.bin")
FP=hang_at_step=$S,hang_gen=1,min_step_ms=20
case $PART in
behind)
  FP=$FP,hang_node=1,hang_in=compute
  ARGS+=(--spares 1 --set watchdog.progress_timeout_s=5)
  CLASS=behind TRIGGER=deadline KIND=hang
  ;;
coll)
  FP=$FP,hang_node=1,hang_in=compute
  ARGS+=(--spares 1 --set watchdog.progress_timeout_s=60 --set watchdog.collective_timeout_s=3)
  CLASS=behind TRIGGER=collective_timeout KIND=hang
  ;;
gang)
  FP=$FP,hang_in=compute
  ARGS+=(--spares 0 --set watchdog.progress_timeout_s=5)
  CLASS=gang TRIGGER=deadline KIND=gang_hang
  ;;
storage)
  FP=$FP,hang_in=data
  ARGS+=(--spares 0 --set watchdog.progress_timeout_s=5)
  CLASS=storage TRIGGER=deadline KIND=storage_hang
  ;;
storage2)
  FP=hang_at_step=$S,hang_gens=2,min_step_ms=20,hang_in=data
  ARGS+=(--spares 0 --set watchdog.progress_timeout_s=5 --set watchdog.storage_backoff_s=3)
  CLASS=storage TRIGGER=deadline KIND=storage_hang
  ;;
*) fail "unknown part $PART" ;;
esac
ST=$TMP/st
rc=0
FT_FAILPOINTS=$FP timeout 100 "$FT_BIN/supervise" --state "$ST" "${ARGS[@]}" \
  "$FT_SRC/examples/demo.yaml" >"$ST.out" 2>&1 &
SUP=$!
# what an operator sees while the supervisor waits on storage: status and
# the metric, polled for as long as the run lasts
: >"$TMP/seen"
while kill -0 $SUP 2>/dev/null; do
  if [ -s "$ST/http.addr" ]; then
    { "$FT_BIN/supervise" status "$ST" 2>/dev/null | grep "waiting on storage" >>"$TMP/seen"; } || true
    { curl -s -m 2 "http://$(cat "$ST/http.addr" 2>/dev/null)/metrics" 2>/dev/null |
      grep '^ftsup_waiting_on_storage 1' >>"$TMP/seen"; } || true
  fi
  sleep 0.2
done
wait $SUP || rc=$?
[ $rc = 0 ] || { tail -n 30 "$ST.out"; fail "supervise exited $rc, want 0 (124: it never recovered)"; }
grep -q "failpoint hang_at_step=$S" "$ST"/logs/node*.log ||
  fail "no worker hung (the failpoint did not fire)"
python3 - "$ST/events.jsonl" "$PART" "$CLASS" "$TRIGGER" "$KIND" "$TMP/seen" <<'PY' || fail "events (above)"
import json, sys
path, part, cls, trigger, kind, seen = sys.argv[1:7]
ev = [json.loads(l) for l in open(path)]
waits = [e for e in ev if e["event"] == "waiting_on_storage"]
retries = [e for e in ev if e["event"] == "storage_retry"]
print("waiting_on_storage:", [(w["attempt"], w["wait_s"]) for w in waits])
if part == "storage2":
    # two storage hangs in a row: waits of 3 s then 6 s, each before the
    # next generation starts, none while a gang trains
    hangs = [e for e in ev if e["event"] == "progress_hang"]
    faults = [e for e in ev if e["event"] == "fault_detected"]
    assert [h["class"] for h in hangs] == ["storage", "storage"], hangs
    assert [f["kind"] for f in faults] == ["storage_hang"] * 2, faults
    assert not any(f["blamed"] for f in faults), faults
    assert [(w["attempt"], w["wait_s"]) for w in waits] == [(1, 3), (2, 6)], waits
    assert [(r["attempt"], r["waited_s"]) for r in retries] == [(1, 3), (2, 6)], retries
    names = [e["event"] for e in ev if e["event"] in
             ("fault_detected", "waiting_on_storage", "storage_retry", "generation_started")]
    want = ["generation_started", "fault_detected", "waiting_on_storage", "storage_retry",
            "generation_started", "fault_detected", "waiting_on_storage", "storage_retry",
            "generation_started"]
    assert names == want, names
    assert not any(e["event"] == "node_quarantined" for e in ev)
    assert any(e["event"] == "run_done" for e in ev), "no run_done"
    s = open(seen).read()
    assert "waiting on storage: hang 1 in a row" in s or "waiting on storage: hang 2 in a row" in s, \
        "supervise status never said it was waiting on storage: " + s
    assert "ftsup_waiting_on_storage 1" in s, "/metrics never showed ftsup_waiting_on_storage 1"
    print("ok: waited 3 s then 6 s on storage; status and /metrics said so")
    sys.exit(0)
if cls == "storage":
    assert [(w["attempt"], w["wait_s"]) for w in waits] == [(1, 10)], waits
    assert [r["attempt"] for r in retries] == [1], retries
else:
    assert not waits and not retries, (waits, retries)
hangs = [e for e in ev if e["event"] == "progress_hang"]
faults = [e for e in ev if e["event"] == "fault_detected"]
quar = [e for e in ev if e["event"] == "node_quarantined"]
print("progress_hang:", hangs)
print("fault_detected:", [(f["kind"], f["node"], f["blamed"], f["quarantine"]) for f in faults])
print("node_quarantined:", [q.get("node") for q in quar])
assert len(hangs) == 1, "want exactly one progress_hang"
h = hangs[0]
assert h["class"] == cls and h["trigger"] == trigger, (h["class"], h["trigger"])
assert h["gen"] == 1, h["gen"]
ranks = {r["rank"]: r for r in h["ranks"]}
assert sorted(ranks) == [0, 1], ranks
for r in ranks.values():
    assert r["in_gen"] and r["step"] >= 7 and r["stuck_s"] >= 0, r
if cls == "behind":
    assert [c["node"] for c in h["culprits"]] == [1] and h["nodes"] == [1], h
    assert h["action"] == "quarantine"
    assert ranks[0]["phase"] == "collective" and ranks[1]["phase"] in ("backward", "forward"), ranks
    assert ranks[1]["coll_seq"] < ranks[0]["coll_seq"], ranks
    if trigger == "deadline":
        assert h["deadline_s"] == 5 and h["stuck_s"] >= 5, h
    else:
        assert h["deadline_s"] == 3, h
    hf = [f for f in faults if f["kind"] == "hang"]
    assert len(hf) == 1 and hf[0]["node"] == 1 and hf[0]["blamed"] and hf[0]["quarantine"], hf
    assert "no progress" in hf[0]["detail"], hf[0]
    assert not any(f["node"] == 0 and f["blamed"] for f in faults), "node 0 blamed"
    assert [q["node"] for q in quar] == [1], quar
    assert any(e["event"] == "spare_promoted" for e in ev), "no spare promoted"
    g2 = [e for e in ev if e["event"] == "generation_started" and e["gen"] == 2]
    assert g2 and 1 not in g2[0]["nodes"] and 0 in g2[0]["nodes"], g2
else:
    assert h["culprits"] == [] and h["action"] == "restart", h
    assert h["deadline_s"] == 5 and h["stuck_s"] >= 5, h
    want = "data" if cls == "storage" else None
    for r in ranks.values():
        assert want is None or r["phase"] == want, r
    assert [f["kind"] for f in faults] == [kind], faults
    assert not faults[0]["blamed"] and not faults[0]["quarantine"], faults[0]
    assert not quar, quar
    assert not any(e["event"] == "collective_failure" for e in ev)
assert any(e["event"] == "run_done" for e in ev), "no run_done"
PY
# the stuck threads' stacks, in the logs the event names (one stack per
# hang: storage2 has two)
python3 - "$ST" "$CLASS" <<'PY' || fail "the stuck thread's stack in the worker's log (above)"
import json, os, re, sys
st, cls = sys.argv[1:3]
ev = [json.loads(l) for l in open(os.path.join(st, "events.jsonl"))]
HEAD = re.compile(r"worker: stack of the training thread \(node (\d+) slot (\d+), rank (\d+), "
                  r"step (-?\d+), phase (\w+), collective (\d+), no progress for [0-9.]+ s\):$")
def log(node):
    return os.path.join(st, "logs", "node%d.slot0.log" % node)
want_heads = {}  # log -> the (hang's rank record) each of its stacks must match, in order
for h in [e for e in ev if e["event"] == "progress_hang"]:
    ranks = {r["rank"]: r for r in h["ranks"]}
    stuck = [c["rank"] for c in h["culprits"]] if cls == "behind" else sorted(ranks)
    print("gen", h["gen"], "logs:", h["logs"], "stacks_asked:", h["stacks_asked"])
    assert h["logs"] == [log(ranks[r]["node"]) for r in stuck], h["logs"]
    assert h["stacks_asked"] == len(stuck), h["stacks_asked"]
    for r in ranks:
        want_heads.setdefault(log(ranks[r]["node"]), [])
    for r in stuck:
        want_heads[log(ranks[r]["node"])].append(ranks[r])
for path, want in sorted(want_heads.items()):
    lines = open(path, errors="replace").read().splitlines()
    heads = [i for i, l in enumerate(lines) if HEAD.match(l)]
    if not want:  # not named: not asked
        assert not heads, "a stack in %s, which no hang named" % path
        continue
    assert len(heads) == len(want), \
        "no stack of the training thread in %s (%d headers, want %d)" % (path, len(heads), len(want))
    for i, rec in zip(heads, want):
        end = lines.index("worker: end of the training thread's stack", i)
        print("\n".join(lines[i:end + 1]))
        node, slot, rank, step, phase, coll = HEAD.match(lines[i]).groups()
        assert (int(node), int(slot), int(rank)) == (rec["node"], 0, rec["rank"]), lines[i]
        assert phase == rec["phase"] and int(coll) == rec["coll_seq"], (lines[i], rec)
        assert int(step) == rec["step"], (lines[i], rec)
        frames = lines[i + 1:end]
        assert any("(ft_failpoint_hang_here+" in l for l in frames), "no frame of the stall: %s" % frames
        ring = frames.index("worker: the training thread's last progress (newest first):")
        assert len(frames) - ring - 1 >= 2, "no progress records: %s" % frames[ring:]
        assert frames[ring + 1].endswith("step %s, phase %s, collective %s" % (step, phase, coll)), frames
PY
pass "$PART: a live hang detected ($CLASS, $TRIGGER), $KIND, recovered; the run finished; the stuck thread's stack in its log"
