#!/usr/bin/env bash
# tests/cluster/soak.sh: a run under Slurm on the namespace cluster with a
# random fault every PERIOD seconds for SECONDS seconds.
#
# usage: tests/cluster/soak.sh [SECONDS [PERIOD]]   (root; FT_BIN=build/bin)
#   default 72 s with a fault every 12 s (cluster_soak, the test run:
#   about five faults from a shuffled deck of the five kinds);
#   bench_cluster_soak runs 600 s with a fault every 60 s.
#   FTC_SOAK_SEED picks the hosts and shuffles the kinds (default 13;
#   printed, so a run can be replayed); FTC_SOAK_RATE is the steps per second the run is sized by
#   (default 5, the pace here beside another test: it trains about SECONDS,
#   then finishes; alone it is faster and meets a fault or two fewer);
#   FTC_SOAK_EVERY the checkpoint interval in steps (default 10, about
#   1.5 s of training here: a commit costs ~10 ms, and what a fault loses
#   is mostly the steps since the last commit).
#
# 6 hosts: 2 active, 4 warm spares; heartbeat timeout 3 s; the store a
# shared directory; Xids read from each host's node-local kern.log. Each
# fault waits until the last one is recovered from, then hits one host of
# the current gang with one of:
#   power_off   every process on the host killed, its local disk wiped
#   link_down   its link down for 10 s (a hang: quarantined, drained)
#   xid79       a fatal Xid in its kernel log (quarantined, drained)
#   slow_link   its link limited to 4 Mbit/s for 12 s (reported, no recovery)
#   worker_kill one of its workers SIGKILLed (restarted in place)
# Faults that cost a node are drawn only while a spare is left. The
# supervisor's own host is not cut off here (the operator restarts
# supervise then: cluster_chaos_head).
#
# Asserts: the run reaches its last step; nobody is blamed but hosts hit by
# a node-costing fault (or, for worker_kill, by repeated kills); no
# progress_hang, in the soak or the fault-free run (no fault here leaves a
# live process stuck: link_down's host goes silent, which the heartbeats
# catch; a progress_hang would be the progress watchdog's false alarm); every
# committed checkpoint verifies; the loss at each checkpointed step equals
# the fault-free run's within 1e-5 (relative) and, unless the gang shrank,
# the final weights are bit-identical. Prints goodput and, per fault, time
# to detect, time to recover, steps lost and who paid (chaos/goodput.py).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SECS=${1:-72}
PERIOD=${2:-12}
SEED=${FTC_SOAK_SEED:-13}
RATE=${FTC_SOAK_RATE:-5}
STEPS=$((SECS * RATE / 10 * 10))
ftc_begin 6
STORE="local:$C/shared/ckpt"
for h in h1 h2 h3 h4 h5 h6; do : >"$C/hosts/$h/local/kern.log"; done
ftc_runfile "$RUN/run.yaml" $STEPS "$STORE" -e "s|  every_steps: 10|  every_steps: ${FTC_SOAK_EVERY:-10}|" \
  -e "s|^watchdog:|watchdog:\n  xid_source: \"$C/local/kern.log\"|"
ST=$RUN/state
F=$TMP/faults.jsonl
: >"$F"
echo "soak: ${SECS} s, a fault every ${PERIOD} s, seed $SEED, $STEPS steps"
ftc_supervise "$ST" 6 "$RUN/run.yaml" --spares 4
ftc_wait "$ST" checkpoint_committed 1

RANDOM=$SEED
restore_pids=()
alive() { kill -0 "$FTC_SUP" 2>/dev/null; }
# recovered: no fault since the last "recovered" (one recovery may detect
# several faults: a lost host, then its peers' failed collective)
recovered() {
  python3 - "$ST/events.jsonl" <<'PY'
import json, sys
last = None
for line in open(sys.argv[1]):
    e = json.loads(line)["event"]
    if e in ("fault_detected", "recovered"):
        last = e
sys.exit(0 if last != "fault_detected" else 1)
PY
}
t_end=$(($(date +%s) + SECS))
next=$(($(date +%s) + PERIOD))
n=0
deck=()
while alive && [ "$(date +%s)" -lt "$t_end" ]; do
  if [ "$(date +%s)" -lt "$next" ] || ! recovered; then
    sleep 0.2
    continue
  fi
  next=$(($(date +%s) + PERIOD))
  spares=$((4 - $(ftc_count "$ST" spare_promoted)))
  gang=$(ftc_events "$ST" 'print(" ".join(h[n] for n in named("generation_started")[-1]["nodes"]))')
  read -ra hs <<<"$gang"
  host=${hs[RANDOM % ${#hs[@]}]}
  # kinds come from a shuffled deck, so every kind shows up early
  [ ${#deck[@]} -gt 0 ] || mapfile -t deck < <(printf '%s\n' power_off link_down xid79 slow_link worker_kill |
    shuf --random-source=<(yes "$SEED.$n"))
  kind=${deck[0]}
  if [ "$spares" -eq 0 ]; then
    case $kind in power_off | link_down | xid79) kind=slow_link ;; esac
  fi
  deck=("${deck[@]:1}")
  n=$((n + 1))
  echo "fault $n at $(date +%T): $kind $host ($spares spare(s) left)"
  ftc_fault "$F" "$kind $host"
  case $kind in
  power_off) host_power_off "$host" ;;
  link_down)
    host_link "$host" down
    (sleep 10 && host_link "$host" up) &
    restore_pids+=($!)
    ;;
  xid79)
    node=$(ftc_events "$ST" "print(h.index('$host'))")
    printf '[ %d.000000] NVRM: Xid (PCI:0000:%02x:00): 79, pid=4242, name=worker, GPU has fallen off the bus.\n' \
      "$n" "$node" >>"$C/hosts/$host/local/kern.log"
    ;;
  slow_link)
    host_rate "$host" 4mbit
    (sleep 12 && host_rate "$host" off) &
    restore_pids+=($!)
    ;;
  worker_kill)
    pid=$(ftc_workers_on "$host" | head -1)
    [ -n "$pid" ] && kill -KILL "$pid"
    ;;
  esac
done
echo "soak: $n fault(s) injected; the run goes on to step $STEPS"
for p in "${restore_pids[@]}"; do wait "$p" || true; done
ftc_finish

python3 - "$ST/events.jsonl" "$F" "$STEPS" <<'PY' || fail "soak outcome (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
faults = [json.loads(l) for l in open(sys.argv[2])]
h = next(e for e in ev if e["event"] == "run_started")["hosts"]
done = [e for e in ev if e["event"] == "run_done"]
assert done and done[-1]["steps"] == int(sys.argv[3]), done
hit = {}
for f in faults:
    kind, host = f["kind"].split()
    hit.setdefault(host, []).append(kind)
costly = {"power_off", "link_down", "xid79"}
for q in (e for e in ev if e["event"] == "node_quarantined"):
    kinds = hit.get(q["host"], [])
    ok = costly & set(kinds) or kinds.count("worker_kill") >= 2
    assert ok, f"{q['host']} quarantined ({q['reason']}) but it was hit by {kinds or 'nothing'}"
for host, kinds in hit.items():
    if costly & set(kinds):
        assert any(e["event"] == "node_quarantined" and e["host"] == host for e in ev), \
            f"{host} ({kinds}) was not quarantined"
ph = [e for e in ev if e["event"] == "progress_hang"]
assert not ph, f"progress_hang with no live hang injected (a false alarm): {ph[:2]}"
print(f"soak: {len(faults)} faults; quarantined:",
      sorted(e["host"] for e in ev if e["event"] == "node_quarantined") or "none")
PY
pass "the run reached step $STEPS; only hosts hit by a node-costing fault paid; no progress_hang"
ftc_verify_all "$STORE"
ref=$(ftc_reference "$RUN/run.yaml" $STEPS)
python3 - "$ST/events.jsonl" "$TMP/ref/state/events.jsonl" <<'PY' || fail "loss against the fault-free run"
import json, sys
def losses(path):
    return {e["step"]: e["loss"] for e in map(json.loads, open(path))
            if e["event"] == "step" and e.get("loss") is not None}
got, want = losses(sys.argv[1]), losses(sys.argv[2])
ph = [e for e in map(json.loads, open(sys.argv[2])) if e["event"] == "progress_hang"]
assert not ph, f"the fault-free run reported progress_hang (a false alarm): {ph[:2]}"
common = sorted(set(got) & set(want))
assert common, "no common checkpointed step"
for k in common:
    assert abs(got[k] - want[k]) <= 1e-5 * abs(want[k]), (k, got[k], want[k])
print(f"loss equal to the fault-free run's at {len(common)} checkpointed steps")
PY
if [ "$(ftc_count "$ST" gang_shrunk)" -eq 0 ]; then
  ftc_same_weights "$STORE" "$ref" $STEPS
  pass "every committed checkpoint verifies; step $STEPS's weights equal the fault-free run's"
else
  pass "the gang shrank (spares ran out): losses checked, weights not compared"
fi
ftc_goodput "$ST" "$F"
echo "the fault-free reference run (local launcher), by the same formula:"
ftc_goodput "$TMP/ref/state"
