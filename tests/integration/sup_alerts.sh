#!/usr/bin/env bash
# docs/alerts.yml end to end (issue 39), against the real programs:
#  - a supervised demo run (2 nodes, 2 warm spares) serves /metrics;
#  - Debian's Prometheus scrapes it and evaluates docs/alerts.yml every
#    second, and sends to Debian's Alertmanager (group_wait and
#    group_interval 1 s), which routes every alert to a webhook receiver
#    this test runs on loopback (alert_webhook.py);
#  - once Prometheus has scraped a few times, one active node is killed
#    from outside (SIGKILL to its process group: the node is lost, as
#    chaos.kill_node_at_step does it). That is the run's first fault.
# Passes when FtsupFault for that first fault reaches the webhook labelled
# with its kind (node_lost) and node, and FtsupNodeQuarantined with the same
# node; and FtsupNoSpareLeft (a spare remains) is neither pending nor firing
# in Prometheus nor delivered. Without the counters exported from 0, the
# first fault's series appears at 1, increase() sees nothing, and the fault
# alert never arrives (the test fails at its wait). It prints, without
# asserting it, the time from the fault_detected event's ts to the alert's
# arrival at the webhook.
. "$(dirname "$0")/lib.sh"
for b in prometheus promtool prometheus-alertmanager curl; do
  command -v "$b" >/dev/null || {
    echo "sup_alerts: skipped: $b not installed (scripts/install-deps.sh)"
    exit 77
  }
done
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
synth_data "$TMP"
ST=$TMP/st
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
  -e 's|  steps: 300|  steps: 2000|' -e "s|  store: .*|  store: \"local:$TMP/store\"|" \
  -e 's|  keep_last: 5|  keep_last: 1000|' "$FT_SRC/examples/demo.yaml" >"$TMP/run.yaml"
# (keep_last: no retention deletes a checkpoint before /metrics is read: its
# deletion counters must still be at 0 then, however slow the machine)
grep -q 'keep_last: 1000' "$TMP/run.yaml" || fail "the run file has no keep_last: 1000"

# the webhook, Alertmanager, then Prometheus, before the run
python3 "$FT_SRC/tests/integration/alert_webhook.py" "$TMP/hook.port" "$TMP/hook.jsonl" &
HOOK=$!
for ((i = 0; i < 50; i++)); do
  [ -s "$TMP/hook.port" ] && break
  sleep 0.1
done
[ -s "$TMP/hook.port" ] || fail "the webhook receiver did not start"
HP=$(cat "$TMP/hook.port")
AP=$(free_port)
cat >"$TMP/am.yml" <<EOF
route:
  receiver: hook
  group_by: [alertname, kind, node]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs: [{url: "http://127.0.0.1:$HP/", send_resolved: false}]
EOF
prometheus-alertmanager --config.file="$TMP/am.yml" --storage.path="$TMP/am" \
  --web.listen-address="127.0.0.1:$AP" --cluster.listen-address= >"$TMP/am.log" 2>&1 &
AM=$!

"$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" --spares 2 "$TMP/run.yaml" \
  >"$TMP/sup.out" 2>&1 &
SUP=$!
A=$(http_addr "$ST" "$TMP/sup.out")
PP=$(free_port)
cat >"$TMP/prom.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$FT_SRC/docs/alerts.yml"]
alerting:
  alertmanagers: [{static_configs: [{targets: ["127.0.0.1:$AP"]}]}]
scrape_configs:
  - job_name: ftsup
    static_configs: [{targets: ["$A"]}]
EOF
prometheus --config.file="$TMP/prom.yml" --storage.tsdb.path="$TMP/prom" \
  --web.listen-address="127.0.0.1:$PP" >"$TMP/prom.log" 2>&1 &
PROM=$!
alive() {
  kill -0 "$PROM" 2>/dev/null || fail "prometheus died: $(tail -5 "$TMP/prom.log")"
  kill -0 "$AM" 2>/dev/null || fail "alertmanager died: $(tail -5 "$TMP/am.log")"
  kill -0 "$SUP" 2>/dev/null || fail "supervise ended: $(tail -5 "$TMP/sup.out")"
}
q() { # q PROMQL: the first sample's value, or "" when none (or not answering yet)
  { curl -s --get "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" || true; } | python3 -c '
import json, sys
try:
    r = json.load(sys.stdin)["data"]["result"]
    print(r[0]["value"][1] if r else "")
except Exception:
    print("")'
}
# a few scrapes of a training run before the fault: the counters' zeros
# are in Prometheus (the old /metrics had no series to scrape yet)
end=$((SECONDS + 90))
while [ $SECONDS -lt $end ]; do
  v=$(q 'count_over_time(ftsup_step[1m]) >= 3 and ftsup_step >= 5')
  [ -n "$v" ] && break
  alive
  sleep 0.25
done
[ -n "$v" ] || fail "Prometheus never scraped 3 samples of a training run (ftsup_step: '$(q ftsup_step)')"
! grep -q '"event":"fault_detected"' "$ST/events.jsonl" ||
  fail "a fault came before the one this test makes: $(grep fault_detected "$ST/events.jsonl")"

# before it: every fault kind, every event and each deletion reason at 0;
# tokens trained, the grad norm and the lr of a training run
curl -s "http://$A/metrics" >"$TMP/before.txt"
promtool check metrics <"$TMP/before.txt" ||
  fail "promtool check metrics: $(promtool check metrics <"$TMP/before.txt" 2>&1)"
python3 - "$TMP/before.txt" <<'PY' || fail "/metrics before the fault (above)"
import math, re, sys
m = {}
for line in open(sys.argv[1]):
    if not line.startswith("#"):
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
kinds = {k: v for k, v in m.items() if k.startswith("ftsup_faults_total{")}
assert len(kinds) >= 20 and set(kinds.values()) == {0}, kinds
for kind in ("node_lost", "process_exit", "xid", "hang", "sdc", "store_error"):
    assert m['ftsup_faults_total{kind="%s"}' % kind] == 0, kind
events = {k: v for k, v in m.items() if k.startswith("ftsup_events_total{")}
assert len(events) >= 50, len(events)
for e in ("fault_detected", "node_quarantined", "node_drained", "checkpoint_failed", "checkpoint_deleted"):
    assert m['ftsup_events_total{event="%s"}' % e] == 0, e
assert m['ftsup_checkpoints_deleted_total{reason="retention"}'] == 0
assert m['ftsup_checkpoints_deleted_total{reason="removed"}'] == 0
assert not any(k.startswith("ftsup_node_faults_total{") for k in m), "a node fault before any"
assert m["ftsup_tokens_total"] >= 5 * 16 * 64, m["ftsup_tokens_total"]  # 5 steps x batch x seq
assert math.isfinite(m["ftsup_grad_norm"]) and m["ftsup_grad_norm"] > 0, m["ftsup_grad_norm"]
assert 0 < m["ftsup_learning_rate"] <= 3e-3, m["ftsup_learning_rate"]
PY
v=$(q 'rate(ftsup_tokens_total[1m])')
python3 -c 'import sys; assert float(sys.argv[1] or 0) > 0' "$v" || fail "rate(ftsup_tokens_total[1m]) is '$v'"
pass "/metrics before the fault: every kind, event and deletion reason at 0; tokens, grad norm, lr; promtool clean"

# the run's first fault: an active node's process group killed
read -r node pid < <(python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
w = [e for e in ev if e["event"] == "worker_launched" and e.get("role") == "active"][-1]
print(w["node"], w["pid"])' "$ST/events.jsonl")
pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
[ -n "$pgid" ] && [ "$pgid" != "$(ps -o pgid= -p $$ | tr -d ' ')" ] ||
  fail "node $node's worker $pid has no process group of its own ('$pgid')"
kill -KILL -- "-$pgid"

# the alerts at the webhook: FtsupFault{kind=node_lost,node} and the quarantine
got() { # got ALERTNAME: the webhook's alerts of that name as "kind node received"
  python3 - "$TMP/hook.jsonl" "$1" <<'PY'
import json, os, sys
if os.path.exists(sys.argv[1]):
    for line in open(sys.argv[1]):
        o = json.loads(line)
        for a in o["body"].get("alerts", []):
            l = a["labels"]
            if l.get("alertname") == sys.argv[2] and a["status"] == "firing":
                print(l.get("kind", "-"), l.get("node", "-"), o["received"])
PY
}
# (a minute is many times a scrape, an evaluation and group_wait: only a
# broken chain waits it out)
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ]; do
  grep -q '"FtsupFault"' "$TMP/hook.jsonl" 2>/dev/null &&
    grep -q '"FtsupNodeQuarantined"' "$TMP/hook.jsonl" && break
  alive
  sleep 0.25
done
[ -n "$(got FtsupFault)" ] ||
  fail "FtsupFault never reached the webhook (Prometheus has faults_total: '$(q 'sum(ftsup_faults_total)')'," \
    "increase: '$(q 'sum(increase(ftsup_faults_total[5m]))')'; events: $(grep -c fault_detected "$ST/events.jsonl"))"
[ -n "$(got FtsupNodeQuarantined)" ] || fail "FtsupNodeQuarantined never reached the webhook: $(cat "$TMP/hook.jsonl")"
read -r fkind fnode ftime < <(got FtsupFault | head -1)
[ "$fkind" = node_lost ] && [ "$fnode" = "$node" ] ||
  fail "FtsupFault labelled kind=$fkind node=$fnode, want node_lost and $node: $(got FtsupFault)"
read -r _ qnode _ < <(got FtsupNodeQuarantined | head -1)
[ "$qnode" = "$node" ] || fail "FtsupNodeQuarantined names node $qnode, want $node"
python3 - "$TMP/hook.jsonl" <<'PY' || fail "the webhook's FtsupFault lacks its annotations (above)"
import json, sys
for line in open(sys.argv[1]):
    for a in json.loads(line)["body"]["alerts"]:
        if a["labels"]["alertname"] == "FtsupFault":
            s = a["annotations"]["summary"]
            assert "node_lost" in s and "on node" in s, a["annotations"]
            assert a["annotations"]["description"], a["annotations"]
PY
detected=$(python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
f = [e for e in ev if e["event"] == "fault_detected"]
print(f[0]["ts"], f[0]["kind"], f[0]["node"], len(f))' "$ST/events.jsonl")
read -r dts dkind dnode _ <<<"$detected"
[ "$dkind" = node_lost ] && [ "$dnode" = "$node" ] ||
  fail "the run's first fault_detected is $dkind on node $dnode, not node_lost on $node"
curl -s "http://$A/metrics" >"$TMP/after.txt"
promtool check metrics <"$TMP/after.txt" ||
  fail "promtool check metrics: $(promtool check metrics <"$TMP/after.txt" 2>&1)"
grep -q "^ftsup_faults_total{kind=\"node_lost\"} 1\$" "$TMP/after.txt" &&
  grep -q "^ftsup_node_faults_total{kind=\"node_lost\",node=\"$node\"} 1\$" "$TMP/after.txt" &&
  grep -q "^ftsup_fault_last_info{kind=\"node_lost\",node=\"$node\"} 1\$" "$TMP/after.txt" ||
  fail "/metrics after the fault: $(grep -E 'fault|node_lost' "$TMP/after.txt" | grep -v '^#' | grep -v ' 0$')"
pass "the first fault's alert reached the webhook: FtsupFault{kind=node_lost,node=$node}, FtsupNodeQuarantined{node=$node}"
python3 -c 'import sys; print("fault_detected to webhook: %.2f s (scrape and evaluation 1 s, group_wait 1 s)" % (float(sys.argv[2]) - float(sys.argv[1])))' "$dts" "$ftime"

# what must not fire: a spare is left
[ "$(q 'ftsup_nodes{role="spare"}')" -ge 1 ] 2>/dev/null || fail "no spare left: $(q 'ftsup_nodes{role="spare"}')"
curl -s "http://127.0.0.1:$PP/api/v1/alerts" >"$TMP/alerts.json"
python3 - "$TMP/alerts.json" <<'PY' || fail "Prometheus's alerts (above)"
import json, sys
alerts = json.load(open(sys.argv[1]))["data"]["alerts"]
names = {(a["labels"]["alertname"], a["state"]) for a in alerts}
print("prometheus alerts:", sorted(names))
bad = [n for n in names if n[0] in ("FtsupNoSpareLeft", "FtsupRunStalled", "FtsupCheckpointFailed")]
assert not bad, bad
assert ("FtsupFault", "firing") in names, names
PY
[ -z "$(got FtsupNoSpareLeft)" ] || fail "FtsupNoSpareLeft was delivered with a spare left"
pass "with a spare left, FtsupNoSpareLeft is neither pending nor firing nor delivered"

kill -TERM "$SUP" "$PROM" "$AM" "$HOOK" 2>/dev/null || true
wait "$SUP" "$PROM" "$AM" "$HOOK" 2>/dev/null || true
