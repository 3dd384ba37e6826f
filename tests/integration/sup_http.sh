#!/usr/bin/env bash
# The operator's HTTP port, against the real thing (issue 14, first part):
#  1. a supervised run (the demo model, 2 nodes + 1 spare) serves /metrics;
#     Debian's prometheus, started here on loopback with a 1 s scrape
#     interval, scrapes it; one worker is SIGKILLed on purpose; Prometheus's
#     HTTP API (/api/v1/query) shows ftsup_step advancing and
#     ftsup_faults_total{kind="process_exit"} equal to 1; promtool check
#     metrics passes on what the port serves;
#  2. the port survives what a hostile client sends (headers over 8 KiB, a
#     POST, 100 idle connections) and still answers;
#  3. `supervise status` on the running run (exit 0), on it after SIGTERM
#     (exit 3, interrupted), on a finished run (exit 3, done), and on a run
#     that failed (exit 3, failed with its reason).
. "$(dirname "$0")/lib.sh"
for b in prometheus promtool curl; do
  command -v "$b" >/dev/null || {
    echo "sup_http: skipped: $b not installed (scripts/install-deps.sh)"
    exit 77
  }
done
synth_data "$TMP"
ST=$TMP/st
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
  -e 's|  steps: 300|  steps: 900|' -e "s|  store: .*|  store: \"local:$TMP/store\"|" \
  -e 's|  every_steps: 25|  every_steps: 20|' "$FT_SRC/examples/demo.yaml" >"$TMP/run.yaml"
"$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" --spares 1 "$TMP/run.yaml" \
  >"$TMP/sup.out" 2>&1 &
SUP=$!
A=$(http_addr "$ST" "$TMP/sup.out")
case $A in 127.0.0.1:* | "[::1]:"*) ;; *) fail "the HTTP port is not on loopback by default: $A" ;; esac

# Prometheus on loopback, scraping every second
PP=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/prom.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: ftsup
    static_configs: [{targets: ["$A"]}]
EOF
prometheus --config.file="$TMP/prom.yml" --storage.tsdb.path="$TMP/prom" \
  --web.listen-address="127.0.0.1:$PP" >"$TMP/prom.log" 2>&1 &
PROM=$!
q() { # q PROMQL: the first sample's value, or "" when none
  curl -s --get "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
try:
    r = json.load(sys.stdin)["data"]["result"]
    print(r[0]["value"][1] if r else "")
except Exception:
    print("")'
}
wait_q() { # wait_q PROMQL PYCOND SECONDS: until the value v satisfies PYCOND
  local i v
  for ((i = 0; i < $3 * 4; i++)); do
    v=$(q "$1")
    [ -n "$v" ] && python3 -c "import sys; v = float(sys.argv[1]); sys.exit(0 if ($2) else 1)" "$v" &&
      {
        echo "$v"
        return 0
      }
    kill -0 "$PROM" 2>/dev/null || fail "prometheus died: $(tail -5 "$TMP/prom.log")"
    sleep 0.25
  done
  fail "Prometheus: $1 never satisfied '$2' (last: '${v:-none}')"
}
s1=$(wait_q 'ftsup_step' 'v >= 20' 40)
# a worker killed on purpose: its node restarts in place (a process_exit)
pid=$(python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print([e for e in ev if e["event"] == "worker_launched" and e.get("role") == "active"][-1]["pid"])' \
  "$ST/events.jsonl")
kill -KILL "$pid"
n=$(wait_q 'ftsup_faults_total{kind="process_exit"}' 'v >= 1' 40)
[ "$n" = 1 ] || fail "ftsup_faults_total{kind=\"process_exit\"} is $n, want 1"
# the new generation's first step (the histogram counts it); a step
# above s1 alone could still be the old gang's, scraped before the kill
wait_q 'ftsup_recovery_seconds_count' 'v >= 1' 60 >/dev/null
s2=$(wait_q 'ftsup_step' "v > $s1" 40)
wait_q 'ftsup_restarts_total' 'v == 1' 20 >/dev/null
pass "Prometheus scraped the run: step $s1 -> $s2, faults_total{kind=process_exit} = $n, restarts 1"
curl -s "http://$A/metrics" >"$TMP/metrics.txt"
promtool check metrics <"$TMP/metrics.txt" || fail "promtool check metrics: $(promtool check metrics <"$TMP/metrics.txt" 2>&1)"
grep -q '^ftsup_recovery_seconds_count 1$' "$TMP/metrics.txt" ||
  fail "no recovery in the histogram: $(grep recovery_seconds "$TMP/metrics.txt")"
pass "promtool check metrics passes; the recovery is in ftsup_recovery_seconds"

# the dashboard's page and data (what Chromium draws: test sup_dashboard)
curl -s "http://$A/" >"$TMP/page.html"
grep -q '<title>ftsup</title>' "$TMP/page.html" && grep -q 'Dygraph' "$TMP/page.html" ||
  fail "/ is not the dashboard with dygraphs inlined: $(head -c 300 "$TMP/page.html")"
! grep -q '<script src=\|<link [^>]*href=' "$TMP/page.html" || fail "the dashboard loads files"
curl -s "http://$A/view.json?points=100" | python3 -c '
import json, sys
v = json.load(sys.stdin)
assert v["live"] and v["status"]["running"], v["status"]
rows = v["history"]["rows"]
assert len(rows) >= 20 and v["history"]["total"] >= 20, v["history"]
assert [r[0] for r in rows] == sorted(r[0] for r in rows), "rows out of step order"
assert any(e["event"] == "fault_detected" and e["kind"] == "process_exit" for e in v["events"]), v["events"]
assert any(e["event"] == "run_started" for e in v["events"])
assert 0 < v["goodput"] <= 1, v["goodput"]
' || fail "/view.json (above)"
pass "/ is the dashboard (dygraphs inlined, nothing fetched); /view.json has the steps, the fault, goodput"

# hostile clients: the port refuses and goes on
big=$(head -c 16384 /dev/zero | tr '\0' a)
code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $big" "http://$A/metrics") || true
case $code in 4* | 000) ;; *) fail "16 KiB of headers got $code" ;; esac
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x "http://$A/status")
[ "$code" = 405 ] || fail "POST got $code, want 405"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$A/nope")
[ "$code" = 404 ] || fail "/nope got $code, want 404"
python3 - "$A" <<'PY' &
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
conns = [socket.create_connection((host, int(port))) for _ in range(100)]
time.sleep(4)
PY
IDLE=$!
sleep 1
curl -s -m 5 "http://$A/status" | python3 -c 'import json, sys; assert json.load(sys.stdin)["running"]' ||
  fail "/status did not answer beside 100 idle connections"
wait $IDLE || true
pass "16 KiB of headers refused, POST 405, unknown path 404, answers beside 100 idle connections"

rc=0
"$FT_BIN/supervise" status "$ST" >"$TMP/status.txt" || rc=$?
[ $rc -eq 0 ] || fail "supervise status on a running run exited $rc"
grep -q "^run gpt2-tiny: running, generation [0-9]*, step [0-9]*/900" "$TMP/status.txt" ||
  fail "supervise status: $(cat "$TMP/status.txt")"
grep -q "fault at step [0-9]*: process_exit" "$TMP/status.txt" ||
  fail "supervise status does not list the fault: $(cat "$TMP/status.txt")"
"$FT_BIN/supervise" status "$ST" --json | python3 -c '
import json, sys
o = json.load(sys.stdin)
assert o["running"] and o["final_step"] == 900 and o["step"] > 0, o
roles = sorted(n["role"] for n in o["nodes"])
assert roles == ["active", "active", "spare"], roles
assert o["faults"][-1]["kind"] == "process_exit", o["faults"]
assert o["checkpoints"] and o["checkpoints"][-1]["state"] in ("committed", "good"), o["checkpoints"]
' || fail "supervise status --json (above)"
pass "supervise status on the running run: exit 0, step, nodes, checkpoints and the fault"

# SIGTERM: the run stops (exit 130); status names it interrupted, resumable
kill -TERM "$SUP"
rc=0
wait "$SUP" || rc=$?
[ $rc -eq 130 ] || fail "supervise exited $rc on SIGTERM, want 130: $(tail -5 "$TMP/sup.out")"
[ ! -e "$ST/http.addr" ] || fail "http.addr left behind after the run"
rc=0
"$FT_BIN/supervise" status "$ST" >"$TMP/status.txt" || rc=$?
[ $rc -eq 3 ] || fail "supervise status on an interrupted run exited $rc, want 3"
grep -q "^run gpt2-tiny: not running: interrupted, generation 2, step [0-9]*/900" "$TMP/status.txt" ||
  fail "interrupted: $(cat "$TMP/status.txt")"
pass "supervise status on the interrupted run: exit 3, interrupted in generation 2"
"$FT_BIN/supervise" report "$ST" --out "$TMP/report.html" 2>"$TMP/report.err" ||
  fail "supervise report: $(cat "$TMP/report.err")"
python3 - "$TMP/report.html" "$ST/history.bin" <<'PY' || fail "the report (above)"
import json, os, re, sys
page = open(sys.argv[1]).read()
m = re.search(r"<script>window.FT_VIEW = (.*?);</script>", page, re.S)
assert m, "no view in the report"
v = json.loads(m.group(1).replace("<\\/", "</"))
assert not v["live"] and v["status"]["state"] == "interrupted", v["status"]
n = (os.path.getsize(sys.argv[2]) - 16) // int.from_bytes(open(sys.argv[2], "rb").read(16)[12:16], "little")
assert v["history"]["total"] == n and n >= 20, (v["history"]["total"], n)
print(f"report: {n} steps recorded, {len(v['events'])} events")
PY
rc=0
"$FT_BIN/supervise" report "$TMP/nowhere" --out "$TMP/x.html" 2>/dev/null || rc=$?
[ $rc -eq 2 ] || fail "supervise report on no state directory exited $rc, want 2"
pass "supervise report: the view of the interrupted run in one file; no state directory: exit 2"

# a run that finishes
"$FT_BIN/supervise" --state "$TMP/done" --worker "$FT_BIN/worker" --store "local:$TMP/donestore" \
  --spares 0 --steps 30 "$TMP/run.yaml" >"$TMP/done.out" 2>&1 || fail "the 30-step run: $(tail -5 "$TMP/done.out")"
rc=0
"$FT_BIN/supervise" status "$TMP/done" >"$TMP/status.txt" || rc=$?
[ $rc -eq 3 ] || fail "supervise status on a finished run exited $rc, want 3"
grep -q "^run gpt2-tiny: not running: done, generation 1, step 30/30" "$TMP/status.txt" ||
  fail "finished: $(cat "$TMP/status.txt")"
pass "supervise status on the finished run: exit 3, done at step 30"

# a run that fails: a node lost at step 8, no spare, when_no_spares: fail
rc=0
FT_FAILPOINTS=kill_node_at_step=8 "$FT_BIN/supervise" --state "$TMP/bad" --worker "$FT_BIN/worker" \
  --store "local:$TMP/badstore" --spares 0 --steps 30 --set recovery.when_no_spares=fail "$TMP/run.yaml" >"$TMP/bad.out" 2>&1 ||
  rc=$?
[ $rc -eq 1 ] || fail "the failing run exited $rc, want 1: $(tail -5 "$TMP/bad.out")"
rc=0
"$FT_BIN/supervise" status "$TMP/bad" --json >"$TMP/bad.json" || rc=$?
[ $rc -eq 3 ] || fail "supervise status on a failed run exited $rc, want 3"
python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
assert not o["running"] and o["state"] == "failed" and o["reason"], o' "$TMP/bad.json" ||
  fail "failed run: $(cat "$TMP/bad.json")"
rc=0
"$FT_BIN/supervise" status "$TMP/nowhere" 2>/dev/null || rc=$?
[ $rc -eq 2 ] || fail "supervise status on no state directory exited $rc, want 2"
pass "supervise status on a failed run: exit 3, failed with its reason; no state directory: exit 2"
kill "$PROM" 2>/dev/null || true
