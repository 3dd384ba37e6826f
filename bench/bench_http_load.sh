#!/usr/bin/env bash
# The HTTP port under a flood, beside the run it must not starve (issue 39):
# the demo run (2 nodes + 1 spare, 300 steps, a checkpoint every 20) under
# `ulimit -n 1024` (the usual default soft limit; FT_BENCH_SUP_NOFILE), with
# 2,000 connections held open (a quarter asking /status now and then, each
# opened again a second after the server closes it) and 500 slowloris
# sockets (tests/integration/http_load.py, its ulimit raised to the hard
# limit), and a poller asking /status on a new connection every 0.1 s
# (and /view.json?points=20000 every 10th time) from the first step until
# the checkpoint of step 260. Each loaded run is paired with an unloaded one
# (the poller alone), interleaved (loaded, unloaded, ...): on two cores the
# load generator competes with the workers, so the step rate is a figure,
# not a gate.
# Per run: /status latency p50/p99/max and failures (5 s timeout),
# checkpoints failed, steps lost (steps trained more than once: history
# records past the last step), steps/s (first to last step), and what the
# port counted (ftsup_http_*). Then the medians of each kind.
# usage: bench/bench_http_load.sh [BUILD_DIR] [PAIRS]   (default build 3)
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-build}" && pwd)/bin
PAIRS=${2:-3}
SRC=$PWD
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
"$B/ftdata" synth --out "$T/synth" --tokens 300000 >/dev/null
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$T/synth_train_*.bin\", val: \"$T/synth_val_*.bin\"}|" \
  -e 's|  every_steps: 25|  every_steps: 20|' -e "s|  store: .*|  store: \"local:$T/store\"|" \
  "$SRC/examples/demo.yaml" >"$T/run.yaml"

# run NAME IDLE SLOW: one supervised run with the load; a JSON line to $T/NAME.json
run() {
  local st=$T/$1 view=10
  [ "$2" = 0 ] && view=0
  rm -rf "$T/store" "$st"
  (
    ulimit -n "${FT_BENCH_SUP_NOFILE:-1024}"
    exec "$B/supervise" --state "$st" --worker "$B/worker" --spares 1 "$T/run.yaml"
  ) >"$T/$1.out" 2>&1 &
  local sup=$! i
  for ((i = 0; i < 200; i++)); do
    [ -s "$st/http.addr" ] && [ -s "$st/history.bin" ] && break
    sleep 0.05
  done
  local a
  a=$(cat "$st/http.addr")
  python3 "$SRC/tests/integration/http_load.py" "$a" --idle "$2" --slow "$3" --poll-s 0.1 \
    --view-every $view --stop "$T/$1.stop" --out "$T/$1.load" >"$T/$1.lout" 2>&1 &
  local load=$!
  while kill -0 $sup 2>/dev/null; do
    grep -q '"checkpoint_committed".*"step":260[,}]' "$st/events.jsonl" 2>/dev/null && break
    sleep 0.2
  done
  curl -s -m 5 "http://$a/metrics" | grep '^ftsup_http_' >"$T/$1.metrics" || true
  touch "$T/$1.stop"
  wait $load || true
  local rc=0
  wait $sup || rc=$?
  python3 - "$1" "$st" "$T/$1.load" "$T/$1.metrics" "$rc" >"$T/$1.json" <<'PY'
import json, os, struct, sys
name, st, load, met, rc = sys.argv[1:]
o = json.load(open(load))
ms = sorted(o["status_ms"])
q = lambda p: ms[min(len(ms) - 1, int(p * len(ms)))] if ms else None
ev = [json.loads(l) for l in open(f"{st}/events.jsonl")]
with open(f"{st}/history.bin", "rb") as f:
    f.read(16)
    rec = [struct.unpack("<dqffff", f.read(32)) for _ in range((os.path.getsize(f"{st}/history.bin") - 16) // 32)]
last = max(r[1] for r in rec)
m = dict(l.split() for l in open(met) if l.strip())
print(json.dumps({
    "run": name, "rc": int(rc), "status_asked": o["status_asked"], "status_failed": o["status_failed"],
    "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": ms[-1] if ms else None,
    "views_ok": o.get("views_ok", 0), "views_asked": o.get("views_asked", 0),
    "ckpt_failed": sum(e["event"] == "checkpoint_failed" for e in ev),
    "ckpt_committed": sum(e["event"] == "checkpoint_committed" for e in ev),
    "steps_lost": len(rec) - last, "steps_per_s": round((len(rec) - 1) / (rec[-1][0] - rec[0][0]), 2),
    "slow_closed": f"{o['slow_closed_by_server']}/{o['slow']}", "held_opened": o["idle_opened"],
    "evicted": m.get("ftsup_http_evicted_total"), "expired": m.get("ftsup_http_expired_total"),
    "shed": m.get("ftsup_http_shed_total"), "refused": m.get("ftsup_http_refused_total")}))
PY
}

printf '%-10s %5s %9s %7s %7s %8s %7s %6s %6s %7s %10s %8s %8s\n' run rc status/f p50ms p99ms maxms view ckptF lost steps/s slowclosed evicted expired
for ((p = 1; p <= PAIRS; p++)); do
  for kind in loaded unloaded; do
    if [ $kind = loaded ]; then run "$kind$p" 2000 500; else run "$kind$p" 0 0; fi
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("%-10s %5d %5d/%-3d %7s %7s %8s %3d/%-3d %6d %6d %7.2f %10s %8s %8s" % (r["run"], r["rc"], r["status_asked"],
      r["status_failed"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["views_ok"], r["views_asked"],
      r["ckpt_failed"], r["steps_lost"], r["steps_per_s"], r["slow_closed"], r["evicted"], r["expired"]))' "$T/$kind$p.json"
  done
done
python3 - "$T" "$PAIRS" <<'PY'
import json, statistics, sys
t, n = sys.argv[1], int(sys.argv[2])
for kind in ("loaded", "unloaded"):
    rs = [json.load(open(f"{t}/{kind}{p}.json")) for p in range(1, n + 1)]
    med = lambda k: statistics.median(r[k] for r in rs if r[k] is not None)
    print(f"median {kind}: /status p50 {med('p50_ms')} ms, p99 {med('p99_ms')} ms, max {med('max_ms')} ms; "
          f"/status failures {sum(r['status_failed'] for r in rs)}; checkpoints failed "
          f"{sum(r['ckpt_failed'] for r in rs)}; steps lost {sum(r['steps_lost'] for r in rs)}; "
          f"{med('steps_per_s')} steps/s")
PY
