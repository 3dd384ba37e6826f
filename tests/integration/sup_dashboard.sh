#!/usr/bin/env bash
# The dashboard and the report in a real browser (issue 14): a supervised
# run of the demo model (2 nodes + 1 spare, a validation loss every 10
# steps) meets, in this order, a worker killed on purpose (process_exit:
# restarted in place), a fatal Xid 79 on node 1 (quarantined, the spare
# takes over) and a poisoned batch (a real loss spike: rolled back, its
# batches skipped). Headless Chromium (Debian's chromium) loads
#  1. the live dashboard at / while the run goes on: its DOM holds the loss
#     curve's points, the fault marker on the curve and the node map;
#  2. `supervise report` of the finished run, opened from disk (file://,
#     no server): the loss and validation loss points, a fault marker (F)
#     and a rollback marker (R) on the curve, the markers in the order the
#     faults happened (kill, Xid, spike), node 1 quarantined and drained
#     of nothing (local launcher), the spare active, the checkpoints, and
#     the state "done".
#  3. (issue 39) the charts people look at first: the gradient norm and lr
#     chart's points (live and in the report); the log-scale control, the
#     smoothing and the x axis in tokens and in wall time (set through the
#     address: report.html#x=tokens&log=1&ema=0.9, and its axis labels);
#     the node map's per-rank step time and heartbeat age (live); the run's
#     start and duration (live and report, the duration that of the events);
#     MFU "n/a" without nodes.peak_tflops and a percentage with it;
#     timeline rows in words with times since the start, no key=value and
#     no epoch seconds;
#  4. the checkpoints table lists only what the store still has (keep_last
#     5: `ckpt ls`); a failed checkpoint is red in the table, the timeline
#     and on the curve. Until the supervisor writes checkpoint_deleted
#     itself, a copy of the state directory gets the events the store's
#     own list implies (and a checkpoint_failed, which no failpoint of a
#     real worker causes without a root-only full filesystem), and its
#     report is checked the same way.
# Every DOM check is collected and all failures are printed together.
# Screenshots of both are kept in $FT_BUILD/artefacts/sup_dashboard/ and
# checked to be neither blank nor one colour (stdlib PNG decoding).
. "$(dirname "$0")/lib.sh"
command -v chromium >/dev/null || {
  echo "sup_dashboard: skipped: chromium not installed (scripts/install-deps.sh)"
  exit 77
}
ART=${FT_BUILD:-$TMP}/artefacts/sup_dashboard
mkdir -p "$ART"
synth_data "$TMP"
: >"$TMP/kern.log"
ST=$TMP/st
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
  -e "s|  store: .*|  store: \"local:$TMP/store\"|" -e 's|  val_every: 25 .*|  val_every: 10|' \
  -e "s|^watchdog:|watchdog:\n  xid_source: \"$TMP/kern.log\"|" \
  -e 's|  every_steps: 25|  every_steps: 20|' -e 's|  steps: 300|  steps: 600|' \
  "$FT_SRC/examples/demo.yaml" >"$TMP/run.yaml"
grep -q 'val_every: 10' "$TMP/run.yaml" || fail "the run file has no val_every"

# browser URL FILE.html [SCREENSHOT.png]: the DOM after the page's scripts ran
browser() {
  local i
  for ((i = 0; i < 3; i++)); do # chromium on a loaded machine may time out: again
    timeout 90 chromium --headless=new --no-sandbox --disable-gpu --window-size=1400,1800 \
      --virtual-time-budget=4000 --dump-dom "$1" >"$2" 2>"$TMP/chromium.err" && [ -s "$2" ] && break
  done
  [ -s "$2" ] || fail "chromium --dump-dom $1: $(tail -3 "$TMP/chromium.err")"
  if [ -n "${3:-}" ]; then
    timeout 90 chromium --headless=new --no-sandbox --disable-gpu --window-size=1400,1800 \
      --virtual-time-budget=4000 --screenshot="$3" "$1" >/dev/null 2>&1 || true
    [ -s "$3" ] && echo "screenshot: $3"
  fi
}
# png FILE: not blank (decoded with zlib: its size, its distinct colours)
png_sane() {
  python3 - "$1" <<'PY' || fail "screenshot $1 (above)"
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
i, idat, w = 8, b"", 0
while i < len(b):
    n, t = struct.unpack(">I4s", b[i:i + 8])
    d = b[i + 8:i + 8 + n]
    if t == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", d[:10])
        assert depth == 8 and ctype in (2, 6), f"colour type {ctype} depth {depth}"
        bpp = 3 if ctype == 2 else 4
    elif t == b"IDAT":
        idat += d
    i += 12 + n
raw, stride = zlib.decompress(idat), w * bpp
prev, colours, counts = bytearray(stride), set(), {}
def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        c = prev[x - bpp] if x >= bpp else 0
        line[x] = (line[x] + (0, a, prev[x], (a + prev[x]) >> 1, paeth(a, prev[x], c))[f]) & 255
    if y % 4 == 0:
        for x in range(0, stride, 4 * bpp):
            px = bytes(line[x:x + 3])
            colours.add(px)
            counts[px] = counts.get(px, 0) + 1
    prev = line
top = max(counts.values()) / sum(counts.values())
print(f"{sys.argv[1]}: {w}x{h}, {len(colours)} colours sampled, the commonest {100 * top:.0f}%")
assert w >= 1000 and h >= 1000, f"{w}x{h}"
assert len(colours) >= 16, f"only {len(colours)} colours: blank?"
assert top < 0.95, f"{100 * top:.0f}% one colour: blank?"
PY
}
# events NAME [COND]: how many
count() {
  python3 - "$ST/events.jsonl" "$1" "${2:-True}" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print(sum(1 for e in ev if e["event"] == sys.argv[2] and eval(sys.argv[3])))
PY
}
wait_for() { # NAME MIN [COND]: up to 90 s, while supervise lives
  local i
  for ((i = 0; i < 900; i++)); do
    [ "$(count "$1" "${3:-True}")" -ge "$2" ] && return 0
    kill -0 "$SUP" 2>/dev/null || fail "supervise ended waiting for $1: $(tail -5 "$TMP/sup.out")"
    sleep 0.1
  done
  fail "no $1 after 90 s"
}

# the spike comes from the data: batch 400 scrambled (about step 400, after
# the live dashboard was looked at: the run goes on meanwhile)
FT_FAILPOINTS=poison_batch=400 "$FT_BIN/supervise" --state "$ST" --worker "$FT_BIN/worker" \
  --spares 1 "$TMP/run.yaml" >"$TMP/sup.out" 2>&1 &
SUP=$!
wait_for step 1 'e["step"] >= 40'
pid=$(python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print([e for e in ev if e["event"] == "worker_launched" and e.get("role") == "active"][-1]["pid"])' \
  "$ST/events.jsonl")
kill -KILL "$pid"
wait_for recovered 1
wait_for step 1 'e["step"] >= 100'
printf '[ 99.000000] NVRM: Xid (PCI:0000:01:00): 79, pid=4242, name=worker, GPU has fallen off the bus.\n' \
  >>"$TMP/kern.log"
wait_for node_quarantined 1
wait_for recovered 2

A=$(cat "$ST/http.addr")
# both ranks of the new gang have stepped (and beaten) before the page is
# looked at: the node map then has a step time for each. Not waited for
# past 20 steps after the recovery (the run must still be going when the
# page is read; the DOM check below then says what is missing).
step0=$(python3 -c '
import json, sys
print([e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "recovered"][-1]["first_step"])' "$ST/events.jsonl")
for ((i = 0; i < 600; i++)); do
  curl -s "http://$A/status" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
ws = [w for n in s["nodes"] for w in n.get("workers", []) if w["rank"] >= 0 and w.get("step_ms") is not None]
sys.exit(0 if len(ws) >= 2 or s["step"] >= int(sys.argv[1]) + 20 else 1)' "$step0" 2>/dev/null && break
  sleep 0.05
done
browser "http://$A/" "$TMP/live.html" "$ART/live.png"
python3 - "$TMP/live.html" <<'PY' || fail "the live dashboard (above)"
import re, sys
dom = open(sys.argv[1]).read()
pts = int(re.search(r'id="loss"[^>]*data-points="(\d+)"', dom).group(1))
assert pts >= 50, f"{pts} loss points drawn"
assert re.search(r'class="[^"]*dygraph-annotation[^"]*ann-fault', dom), "no fault marker on the curve"
assert re.search(r'<li class="m-fault"[^>]*>[^<]*process_exit', dom), "no process_exit in the markers"
assert re.search(r'class="node quarantined[^"]*" data-node="1"', dom), "node 1 is not shown quarantined"
assert re.search(r'id="state" class="running"', dom), "the state is not running (did the run end first?)"
print(f"live dashboard: {pts} loss points, the fault marker, node 1 quarantined")
PY
pass "live dashboard in Chromium: the loss curve, the fault marker, node 1 quarantined"
python3 - "$TMP/live.html" <<'PY' || fail "the live dashboard's issue-39 views (above)"
import re, sys
dom, bad = open(sys.argv[1]).read(), []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    ok or bad.append(what)
def attr(pat):
    m = re.search(pat, dom)
    return m.group(1) if m else None
norm, lr = attr(r'id="optim"[^>]*data-norm-points="(\d+)"'), attr(r'id="optim"[^>]*data-lr-points="(\d+)"')
check(norm is not None and int(norm) >= 50, f"grad norm chart: {norm} points")
check(lr is not None and int(lr) >= 50, f"lr chart: {lr} points")
ranks = re.findall(r'<span class="w( late)?" data-rank="(\d+)" data-step-ms="([\d.]*)" data-heartbeat-age="([\d.]+)"', dom)
check(len(ranks) >= 2 and all(ms for _, _, ms, _ in ranks), f"node map, per rank step time and heartbeat age: {ranks}")
check(re.search(r'class="node active[^"]*" data-node="\d" data-host="[^"]*" data-step-ms="[\d.]+"', dom) is not None,
      "an active node's step time")
check(attr(r'id="runtime"[^>]*>(started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, running for [^<]+)<') is not None,
      f"the start and the time running: {attr(r'id=.runtime.[^>]*>([^<]*)<')}")
check(attr(r'id="card-mfu"><b>([^<]*)<') == "n/a", f"MFU without a peak: {attr(r'id=.card-mfu.><b>([^<]*)<')}")
check(re.search(r'id="logscale"', dom) is not None and re.search(r'id="xaxis"', dom) is not None
      and re.search(r'id="ema"', dom) is not None, "the log-scale, x-axis and smoothing controls")
if bad:
    sys.exit(f"{len(bad)} check(s) failed: {bad}")
PY
pass "live dashboard: grad norm and lr, per-rank step time and heartbeat age, start and time running, MFU n/a, the chart controls"

rc=0
wait "$SUP" || rc=$?
[ $rc -eq 0 ] || fail "supervise exited $rc: $(tail -5 "$TMP/sup.out")"
[ "$(count rollback 1)" -ge 1 ] || fail "the poisoned batch did not roll back: $(grep -c loss_spike "$ST/events.jsonl")"
"$FT_BIN/supervise" report "$ST" --out "$TMP/report.html" || fail "supervise report"
grep -q 'http://\|https://' <(grep -o '<script src=[^>]*>\|<link [^>]*href=[^>]*>' "$TMP/report.html") &&
  fail "the report loads something from the network"
cp "$TMP/report.html" "$ART/report.html"
browser "file://$TMP/report.html" "$TMP/report.dom" "$ART/report.png"
cp "$TMP/report.dom" "$ART/report.dom"
python3 - "$TMP/report.dom" <<'PY' || fail "the report (above)"
import re, sys
dom = open(sys.argv[1]).read()
pts = int(re.search(r'id="loss"[^>]*data-points="(\d+)"', dom).group(1))
val = int(re.search(r'data-val-points="(\d+)"', dom).group(1))
assert pts >= 580, f"{pts} loss points"
assert val >= 55, f"{val} validation loss points"
assert re.search(r'ann-fault', dom) and re.search(r'ann-rollback', dom), "no F and R markers on the curve"
marks = re.findall(r'<li class="m-(\w+)" data-step="(\d*)">([^<]*)</li>', dom)
print("markers:", [f"{k}@{st}" for k, st, _ in marks])
def what(kind, text):
    if "process_exit" in text:
        return "exit"
    if "xid" in text:
        return "xid"
    if kind == "rollback" or "loss_spike" in text:
        return "spike"
    return None
seen = [(what(k, t), int(st)) for k, st, t in marks if k in ("fault", "rollback") and what(k, t)]
firsts = {}
for w, st in seen:
    firsts.setdefault(w, st)
assert list(firsts) == ["exit", "xid", "spike"], f"faults in the order {list(firsts)}"
assert firsts["exit"] < firsts["xid"] < firsts["spike"], f"at steps {firsts}"
assert re.search(r'class="node quarantined[^"]*" data-node="1"', dom), "node 1 not quarantined"
assert re.search(r'class="node active[^"]*" data-node="2"', dom), "the spare (node 2) not active"
ck = re.findall(r'<tr class="ckpt[^"]*" data-step="(\d+)">', dom)
assert "600" in ck, f"checkpoints listed: {ck}"
assert re.search(r'id="state" class="done"', dom), "the state is not done"
print(f"report: {pts} loss points, {val} validation points, {len(ck)} checkpoints")
PY
pass "the report from disk in Chromium: curves, F and R markers in the order they happened, nodes, checkpoints, done"
png_sane "$ART/live.png"
png_sane "$ART/report.png"
pass "screenshots: full size, many colours, not blank"

# the report's issue-39 views: as it opens, then with the controls set
# through the address (x axis in tokens, log scale and smoothing; wall time)
browser "file://$TMP/report.html#x=tokens&log=1&ema=0.9" "$TMP/report-tokens.dom"
browser "file://$TMP/report.html#x=time" "$TMP/report-time.dom"
"$FT_BIN/ckpt" --store "local:$TMP/store" --json ls >"$TMP/ls.json" || fail "ckpt ls"
python3 - "$ST/events.jsonl" "$TMP/report.dom" "$TMP/report-tokens.dom" "$TMP/report-time.dom" "$TMP/ls.json" <<'PY' ||
import json, re, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
dom, tok, tim = (open(p).read() for p in sys.argv[2:5])
bad = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    ok or bad.append(what)
def attr(d, pat):
    m = re.search(pat, d)
    return m.group(1) if m else None
norm, lr = attr(dom, r'id="optim"[^>]*data-norm-points="(\d+)"'), attr(dom, r'id="optim"[^>]*data-lr-points="(\d+)"')
check(norm is not None and int(norm) >= 580, f"grad norm chart: {norm} points")
check(lr is not None and int(lr) >= 580, f"lr chart: {lr} points")
start = [e["ts"] for e in ev if e["event"] == "run_started"][0]
end = [e["ts"] for e in ev if e["event"] == "run_done"][-1]
rt = attr(dom, r'id="runtime"[^>]*>([^<]*)<') or ""
dur = attr(dom, r'id="runtime"[^>]*data-duration="(\d+)"') or attr(dom, r'data-duration="(\d+)"')
check(re.fullmatch(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, took .+", rt) is not None, f"start and duration: {rt!r}")
check(dur is not None and abs(int(dur) - (end - start)) <= 1, f"duration {dur} s, the events' {end - start:.1f} s")
check(attr(dom, r'id="card-started"><b>(\d{4}-[^<]+)<') is not None and attr(dom, r'id="card-duration"><b>([^<-]+)<') is not None,
      "start and duration cards")
check(attr(dom, r'id="card-mfu"><b>([^<]*)<') == "n/a", "MFU n/a without nodes.peak_tflops")
tl = re.search(r'<table id="timeline">(.*?)</table>', dom, re.S)
tl = tl.group(1) if tl else ""
rows = re.findall(r'<tr class="ev ev-(\w+)"><td class="t">([^<]*)<small>(\d\d:\d\d:\d\d)</small></td><td>[^<]*</td><td>([^<]*)</td><td class="what">(.*?)</td></tr>', tl)
nrows = len(re.findall(r'<tr class="ev ', tl))
check(nrows > 10 and len(rows) == nrows, f"timeline: {len(rows)} of {nrows} rows with a relative time and the clock")
check(rows and all(t.startswith("+") for _, t, _, _, _ in rows), "every timeline time is since the start (+...)")
text = re.sub(r"<[^>]+>", " ", tl)  # what a reader sees
check(not re.search(r"\w=", text), f"no key=value in the timeline: {re.findall(r'[^ ]+=[^ ]+', text)[:3]}")
epoch = r"\b1\d{9}(?:\.\d+)?\b"
check(not re.search(epoch, text), f"no epoch seconds in the timeline: {re.findall(epoch, text)[:3]}")
check(any(n == "fault_detected" and "fault: process_exit" in w and "on node" in w for n, _, _, _, w in rows),
      "the kill in words: fault: process_exit on node N")
check(any(n == "rollback" and re.search(r"at step \d+ to checkpoint \d+", w) for n, _, _, _, w in rows), "the rollback in words")
check(attr(dom, r'id="loss"[^>]*data-xaxis="(\w+)"') == "step", "the x axis in steps by default")
check(attr(tok, r'id="loss"[^>]*data-xaxis="(\w+)"') == "tokens", "#x=tokens: the x axis in tokens")
xl = re.findall(r'dygraph-axis-label-x">([^<]*)<', tok)
check(len(xl) >= 3 and any(re.fullmatch(r"[\d.]+[kMGT]", x) for x in xl), f"token axis labels: {xl[:6]}")
check(attr(tok, r'id="loss"[^>]*data-logscale="(\d)"') == "1", "#log=1: the loss chart in log scale")
sm = attr(tok, r'id="loss"[^>]*data-smoothed-points="(\d+)"')
check(sm is not None and int(sm) >= 580, f"#ema=0.9: {sm} smoothed points")
# log by default when the drawn loss spans more than a decade (the view's own rows)
html = open(sys.argv[2].replace("report.dom", "report.html")).read()
view = json.loads(re.search(r"window\.FT_VIEW = (.*?);</script>", html, re.S).group(1).replace("<\\/", "</"))
loss = [r[1] for r in view["history"]["rows"] if r[1] is not None and r[1] > 0]
want = "1" if max(loss) / min(loss) > 10 else "0"
check(attr(dom, r'id="loss"[^>]*data-logscale="(\d)"') == want,
      f"log scale by default exactly when the loss spans a decade ({min(loss):.3f} to {max(loss):.3f}: {want})")
check(attr(tim, r'id="loss"[^>]*data-xaxis="(\w+)"') == "time", "#x=time: the x axis in wall time")
xl = re.findall(r'dygraph-axis-label-x">([^<]*)<', tim)
check(len(xl) >= 3 and all(re.fullmatch(r"(\d+m )?\d+s", x) for x in xl), f"time axis labels: {xl[:6]}")
ls = json.load(open(sys.argv[5]))
have = {c["step"] for c in (ls.get("checkpoints") if isinstance(ls, dict) else ls)}
shown = {int(s) for s in re.findall(r'<tr class="ckpt st-(?!failed)\w+" data-step="(\d+)">', dom)}
if any(e["event"] == "checkpoint_deleted" for e in ev):
    check(shown and shown <= have, f"checkpoints shown {sorted(shown)}, the store has {sorted(have)}")
else:
    print(f"(no checkpoint_deleted events yet: the report lists {len(shown)}, the store has {sorted(have)}; checked on a copy below)")
if bad:
    sys.exit(f"{len(bad)} check(s) failed: {bad}")
PY
  fail "the report's issue-39 views (above)"
pass "the report: grad norm and lr, start and duration, MFU n/a, the timeline in words, tokens and wall-time axes, log scale and smoothing"

# a copy of the state directory: the deletions the store's own list implies
# (when the supervisor did not write them), a failed checkpoint, and a peak
# for MFU (nodes.peak_tflops in its sealed run file)
ST2=$TMP/st2
cp -r "$ST" "$ST2"
sed -i "s|^nodes:|nodes:\n  peak_tflops: 0.05|" "$ST2/run.yaml"
python3 - "$ST2/events.jsonl" "$TMP/ls.json" "$ST/run.yaml" "$ST2/run.yaml" <<'PY'
import json, sys
path, ls, old, new = sys.argv[1:5]
ev = [json.loads(l) for l in open(path)]
ls = json.load(open(ls))
have = {c["step"] for c in (ls.get("checkpoints") if isinstance(ls, dict) else ls)}
deleted = {e["step"] for e in ev if e["event"] == "checkpoint_deleted"}
end = ev[-1]["ts"]
out = []
for e in ev:
    if e["event"] == "run_started" and e.get("runfile") == old:
        e["runfile"] = new
    out.append(e)
for e in ev:
    if e["event"] == "checkpoint_committed" and e["step"] not in have and e["step"] not in deleted:
        out.append({"ts": end, "event": "checkpoint_deleted", "step": e["step"], "reason": "retention"})
out.append({"ts": end, "event": "checkpoint_failed", "step": 590, "rank": 1, "cause": "storage",
            "reason": "write shard: No space left on device"})
with open(path, "w") as f:
    f.writelines(json.dumps(e) + "\n" for e in out)
PY
"$FT_BIN/supervise" report "$ST2" --out "$TMP/report2.html" || fail "supervise report (copy)"
browser "file://$TMP/report2.html" "$TMP/report2.dom" "$ART/report2.png"
python3 - "$TMP/report2.dom" "$TMP/ls.json" <<'PY' || fail "the report of the copy (above)"
import json, re, sys
dom = open(sys.argv[1]).read()
ls = json.load(open(sys.argv[2]))
have = {c["step"] for c in (ls.get("checkpoints") if isinstance(ls, dict) else ls)}
bad = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    ok or bad.append(what)
shown = {int(s) for s in re.findall(r'<tr class="ckpt st-(?!failed)\w+" data-step="(\d+)">', dom)}
check(shown and shown <= have, f"checkpoints shown {sorted(shown)}, the store has {sorted(have)} (keep_last 5)")
check(re.search(r'<tr class="ckpt st-failed" data-step="590"><td>590</td><td class="st-failed">failed</td>.*?No space left', dom) is not None,
      "the failed checkpoint 590 red in the table, with its reason")
check(re.search(r'<tr class="ev ev-checkpoint_failed">.*?checkpoint 590 failed', dom) is not None, "the failed checkpoint in the timeline")
check(re.search(r'<li class="m-fault" data-step="590">', dom) is not None, "the failed checkpoint marked on the curve")
mfu = re.search(r'id="card-mfu"><b>([\d.]+)%<', dom)
check(mfu is not None and 0 < float(mfu.group(1)) < 100, f"MFU with nodes.peak_tflops: {mfu.group(1) if mfu else None}%")
if bad:
    sys.exit(f"{len(bad)} check(s) failed: {bad}")
PY
pass "the report of a copy with deletions, a failed checkpoint and a peak: only the store's checkpoints, the failure in red, MFU"
