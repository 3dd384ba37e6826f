#!/usr/bin/env bash
# The dashboard on a 100k-step run: how big the report is and how long
# headless Chromium takes from navigation to the page drawn, with the loss
# curve thinned as supervise serves it (the default), beside the same page
# carrying every step (--points 100000: what a page without thinning would
# have to draw). The run is synthetic: a STATE/history.bin of 100k steps
# (a loss spike at 73,210 rolled back) and an events.jsonl with the faults,
# recoveries, a rollback and 2,000 checkpoints.
# usage: bench/bench_dashboard.sh [BUILD_DIR]   (default build; needs chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
command -v chromium >/dev/null || {
  echo "bench_dashboard: chromium not installed"
  exit 77
}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/st"
python3 - "$T/st" <<'PY'
import json, math, random, struct, sys
d = sys.argv[1]
random.seed(7)
t0, steps = 1.8e9, 100000
with open(f"{d}/history.bin", "wb") as f:
    f.write(b"FTHIST\0\0" + struct.pack("<II", 1, 32))
    t = t0
    def rec(step, loss, val):
        global t
        t += 0.05
        f.write(struct.pack("<dqffff", t, step, loss, val, 50.0, 20000.0))
    for s in range(1, 73211):
        rec(s, 5 / (1 + s / 2000) + random.gauss(0, 0.02) + (20 if s == 73210 else 0),
            4.9 / (1 + s / 2000) if s % 500 == 0 else math.nan)
    for s in range(73001, steps + 1):  # the rollback to 73,000
        rec(s, 5 / (1 + s / 2000) + random.gauss(0, 0.02), 4.9 / (1 + s / 2000) if s % 500 == 0 else math.nan)
ev = [{"ts": t0, "event": "run_started", "run": "bench", "gen": 1, "world": 2, "spares": 1,
       "hosts": ["h1", "h2", "h3"], "steps": steps}]
ev.append({"ts": t0 + 1, "event": "generation_started", "gen": 1, "world": 2, "nodes": [0, 1],
           "restore_step": -1, "skips": []})
for s in range(50, steps + 1, 50):
    ev.append({"ts": t0 + s * 0.05, "event": "checkpoint_committed", "step": s, "world": 2, "commit_ms": 9.0})
for s, kind, node in ((20000, "process_exit", 1), (51000, "xid", 1)):
    ev.append({"ts": t0 + s * 0.05, "event": "fault_detected", "kind": kind, "node": node, "step": s,
               "blamed": True, "stalled_s": 0.4})
    ev.append({"ts": t0 + s * 0.05 + 2, "event": "recovered", "gen": 2, "restore_step": s - s % 50,
               "first_step": s - s % 50 + 1, "steps_lost": s % 50, "detect_to_first_step_ms": 2100})
ev.append({"ts": t0 + 73210 * 0.05, "event": "rollback", "spike_step": 73210, "restore_step": 73000,
           "kind": "loss_spike", "skip_first": 73000, "skip_end": 73200, "bad_steps": [73050]})
ev.append({"ts": t0 + steps * 0.06, "event": "run_done", "steps": steps, "restarts": 3})
ev.sort(key=lambda e: e["ts"])
with open(f"{d}/events.jsonl", "w") as f:
    for e in ev:
        f.write(json.dumps(e) + "\n")
PY
render() { # FILE: the page's own count of ms from navigation to drawn
  local i ms=""
  for ((i = 0; i < 3; i++)); do
    ms=$(timeout 120 chromium --headless=new --no-sandbox --disable-gpu --window-size=1400,1800 \
      --dump-dom "file://$1" 2>/dev/null | grep -o 'data-render-ms="[0-9]*"' | grep -o '[0-9]*' || true)
    [ -n "$ms" ] && break
  done
  echo "${ms:-?}"
}
row() { # LABEL ARGS...
  local label=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$B/bin/supervise" report "$T/st" --out "$T/r.html" "$@" 2>/dev/null
  t1=$(date +%s.%N)
  local rows
  rows=$(python3 -c '
import json, re, sys
p = open(sys.argv[1]).read()
v = json.loads(re.search(r"window.FT_VIEW = (.*?);</script>", p, re.S).group(1).replace("<\\/", "</"))
print(len(v["history"]["rows"]))' "$T/r.html")
  local a b c
  a=$(render "$T/r.html")
  b=$(render "$T/r.html")
  c=$(render "$T/r.html")
  python3 -c 'import sys; l, r, n, t0, t1, a, b, c = sys.argv[1:]
print(f"{l:<34} {r:>7} rows {int(n) / 2**20:6.2f} MB  report {float(t1) - float(t0):5.2f} s  "
      f"drawn in {a}, {b}, {c} ms")' "$label" "$rows" "$(stat -c %s "$T/r.html")" "$t0" "$t1" "$a" "$b" "$c"
}
echo "a 100k-step run (3 faults, 2,000 checkpoints), headless Chromium, three loads each:"
row "thinned (default, as served)"
row "reference: every step" --points 100000
