#!/usr/bin/env bash
# docs/alerts.yml's rules (CTest alerts_rules, label unit):
#  1. promtool check rules: they load in Prometheus;
#  2. promtool test rules tests/alerts/alerts_test.yml: each fires on the
#     series /metrics writes, and a supervisor restart raises nothing;
#  3. the alerts can see every event's first occurrence: each event name
#     the supervisor writes (every sup_events_emit literal in supervisor/)
#     is in sup_metrics.c's EVENTS, which ftsup_events_total exports from 0.
# Skips (77) without promtool (scripts/install-deps.sh installs it).
set -euo pipefail
SRC=${FT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v promtool >/dev/null || {
  echo "alerts_rules: skipped: promtool not installed (scripts/install-deps.sh)"
  exit 77
}
promtool check rules "$SRC/docs/alerts.yml"
promtool test rules "$SRC/tests/alerts/alerts_test.yml"
python3 - "$SRC/supervisor" <<'PY'
import glob, re, sys
src = {f: open(f).read() for f in glob.glob(sys.argv[1] + "/*.c")}
emitted = set()
for text in src.values():
    for call in re.finditer(r'sup_events_emit\(\s*[^,]+,\s*([^,]*?),', text):
        emitted.update(re.findall(r'"([a-z_]+)"', call.group(1)))
m = re.search(r'EVENTS\[\] = \{(.*?)\};', src[sys.argv[1] + "/sup_metrics.c"], re.S)
listed = set(re.findall(r'"([a-z_]+)"', m.group(1)))
missing = sorted(emitted - listed)
if len(emitted) < 40 or missing:
    sys.exit(f"alerts_rules: events written but not exported from 0 (add them to sup_metrics.c's "
             f"EVENTS): {missing} ({len(emitted)} names found)")
print(f"alerts_rules: the {len(emitted)} event names the supervisor writes are in EVENTS")
PY
echo "alerts_rules: passed"
