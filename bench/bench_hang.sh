#!/usr/bin/env bash
# How fast the progress watchdog (issue 36) catches a hang where the
# processes stay alive, per class, beside its reference: the deadline that
# applies plus one heartbeat interval (progress is seen a heartbeat at a
# time). The real worker, the local launcher, 2 nodes (+ 1 spare where a
# node is blamed), watchdog.progress_timeout_s=5 and heartbeat_timeout_s=4
# (a beat every second), so the four cases run in about two minutes:
#   gang        every rank hangs in compute at step 8 -> class gang, restart
#   behind      node 1 alone hangs in compute -> behind, node 1 quarantined
#   storage     every rank hangs in a data read -> storage, restart
#   rendezvous  node 1 takes its ASSIGN and never joins the rendezvous ->
#               rendezvous, caught when node 0's rendezvous times out
#               (max(collective timeout, 60 s); the progress deadline's
#               rendezvous allowance is 600 s), node 1 quarantined
# The hang happens once (hang_gen=1), so each run finishes. Per case:
#   deadline   the progress_hang event's deadline_s (what applied)
#   target     deadline + one heartbeat interval (heartbeat_timeout_s / 4)
#   detect     the hang (the earliest "hanging (ts T)" line of the
#              failpoint) to the progress_hang event
#   first      the hang to the new generation's first step (recovered)
#   lost       the steps trained again (recovered's steps_lost)
#   verdict    MET when detect <= target, else MISSED (printed, never
#              asserted: one machine, two cores, shared with other runs)
# Then one JSON line with the same figures.
# usage: bench/bench_hang.sh [BUILD_DIR]   (default build; KEEP=1 keeps the runs)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
B=$(cd "${1:-build}" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/fthang.XXXXXX")
if [ -n "${KEEP:-}" ]; then echo "bench_hang: runs kept in $T"; else trap 'rm -rf "$T"' EXIT; fi
"$B/bin/ftdata" synth --out "$T/synth" --tokens 300000 >/dev/null
export OMP_WAIT_POLICY=passive
HB=4 PT=5 S=8

# run NAME SPARES FAILPOINTS: one supervised run in $T/NAME
run() {
  local name=$1 spares=$2 fp=$3
  FT_FAILPOINTS=hang_at_step=$S,hang_gen=1,min_step_ms=20,$fp timeout 300 "$B/bin/supervise" \
    --state "$T/$name" --worker "$B/bin/worker" --spares "$spares" --steps 30 \
    --set nodes.count=2 --set train.val_every=0 --set checkpoint.every_steps=5 \
    --set watchdog.heartbeat_timeout_s=$HB --set watchdog.progress_timeout_s=$PT \
    --set "data.train=$T/synth_train_*.bin" --set "data.val=$T/synth_val_*.bin" \
    "$SRC/examples/demo.yaml" >"$T/$name.out" 2>&1 || {
    tail -20 "$T/$name.out"
    echo "bench_hang: $name: supervise failed" >&2
    exit 1
  }
}

run gang 0 hang_in=compute
run behind 1 hang_in=compute,hang_node=1
run storage 0 hang_in=data
run rendezvous 1 hang_in=rendezvous,hang_node=1

python3 - "$T" "$HB" "$PT" <<'PY'
import glob, json, re, sys
T, hb, pt = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
interval = hb / 4  # the supervisor's heartbeat period: a quarter of the timeout
rows = []
for case, want in (("gang", "gang"), ("behind", "behind"), ("storage", "storage"),
                   ("rendezvous", "rendezvous")):
    hung = []
    for log in glob.glob(f"{T}/{case}/logs/*.log"):
        for line in open(log, errors="replace"):
            m = re.search(r"failpoint hang_at_step=.*: hanging \(ts ([0-9.]+)\)", line)
            if m:
                hung.append(float(m.group(1)))
    ev = [json.loads(l) for l in open(f"{T}/{case}/events.jsonl")]
    hangs = [e for e in ev if e["event"] == "progress_hang"]
    rec = [e for e in ev if e["event"] == "recovered"]
    if not hung or not hangs or not rec:
        sys.exit(f"bench_hang: {case}: no hang line ({len(hung)}), progress_hang ({len(hangs)}) "
                 f"or recovered ({len(rec)})")
    h, r, t0 = hangs[0], rec[0], min(hung)
    deadline = h["deadline_s"]
    target = deadline + interval
    detect = h["ts"] - t0
    rows.append({"case": case, "class": h["class"], "trigger": h["trigger"],
                 "class_ok": h["class"] == want, "deadline_s": deadline,
                 "target_s": round(target, 3), "detect_s": round(detect, 3),
                 "first_step_s": round(r["ts"] - t0, 3), "steps_lost": r["steps_lost"],
                 "verdict": "MET" if detect <= target else "MISSED"})
print(f"progress watchdog: hang -> detection, per class (progress_timeout_s={pt:g}, "
      f"heartbeat every {interval:g} s; target = deadline + 1 heartbeat interval)")
print(f"{'case':<11} {'class':<11} {'trigger':<19} {'deadline':>9} {'target':>8} {'detect':>8} "
      f"{'first step':>11} {'lost':>5}  verdict")
for x in rows:
    cls = x["class"] + ("" if x["class_ok"] else "(!)")
    print(f"{x['case']:<11} {cls:<11} {x['trigger']:<19} {x['deadline_s']:>8g}s "
          f"{x['target_s']:>7.2f}s {x['detect_s']:>7.2f}s {x['first_step_s']:>10.2f}s "
          f"{x['steps_lost']:>5}  {x['verdict']}")
print("rendezvous: its deadline is the workers' own rendezvous timeout "
      "(max(watchdog.collective_timeout_s, 60 s)); the progress deadline gives a rendezvous 600 s")
print(json.dumps({"bench": "hang", "progress_timeout_s": pt, "heartbeat_interval_s": interval,
                  "cases": rows}))
PY
