#!/usr/bin/env bash
# The progress line: on a terminal supervise draws one line in place (step
# N/TOTAL, %, ETA, loss, tokens/s, generation, spares left), takes it away
# around each event line and for the final summary; not on a terminal it
# writes no such line (the "step" events are the plain progress there).
# Then the step events' own cadence (supervisor.step_events_every).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sup_lib.sh"
command -v script >/dev/null || {
  echo "sup_progress: skipped: script(1) (util-linux) not installed"
  exit 77
}
# on a terminal: script(1) gives supervise a pseudo-terminal
script -qefc "$FT_BIN/supervise --state $TMP/tty --worker $FAKE --steps 40 --spares 1 \
  --set checkpoint.every_steps=10 $FT_SRC/examples/demo.yaml" "$TMP/tty.typescript" \
  >"$TMP/tty.out" 2>&1 || fail "supervise on a terminal: $(tail -5 "$TMP/tty.out")"
python3 - "$TMP/tty.out" <<'PY' || fail "no progress line on the terminal (above)"
import re, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
lines = re.findall(r"\r\x1b\[K(step \d+/40 \([0-9.]+%\) \| ETA [^|]+ \| loss [^|]+ \| [0-9.]+k tok/s \| gen \d+ \| spares \d+)", raw)
assert lines, raw[-600:]
steps = [int(re.match(r"step (\d+)", l).group(1)) for l in lines]
assert steps == sorted(steps), steps
assert "spares 1" in lines[-1], lines[-1]
# every event line starts on a clean line: the progress line is erased first
for m in re.finditer(r"\[ *[0-9.]+s\] [a-z_]+:", raw):
    before = raw[max(0, m.start() - 4):m.start()]
    assert before.endswith("\x1b[K") or before.endswith("\n") or m.start() == 0, repr(raw[m.start() - 80:m.start() + 20])
# the summary line is not glued to a progress line
assert re.search(r"(^|\n|\x1b\[K)supervise: run gpt2-tiny done", raw), raw[-300:]
print(f"{len(lines)} progress lines, steps {steps[0]}..{steps[-1]}, last: {lines[-1]}")
PY
pass "a progress line in place on a terminal, erased around event lines and the summary"
# not a terminal: no progress line at all
"$FT_BIN/supervise" --state "$TMP/plain" --worker "$FAKE" --steps 40 --spares 1 \
  --set checkpoint.every_steps=10 "$FT_SRC/examples/demo.yaml" >"$TMP/plain.out" 2>&1 ||
  fail "supervise: $(tail -5 "$TMP/plain.out")"
! grep -q $'\r' "$TMP/plain.out" || fail "a carriage return in output that is not a terminal"
grep -q "step: step 40 loss" "$TMP/plain.out" || fail "no plain step lines: $(tail -5 "$TMP/plain.out")"
pass "not a terminal: plain event lines only"

# The step events' own cadence (supervisor.step_events_every), not the
# checkpoints': every step by default, so a run with no checkpoints still
# says how it trains; every N steps and the final one when set; none at 0.
steps_of() { # steps_of STATE: the steps of its "step" events, space-separated
  python3 -c 'import json, sys
print(" ".join(str(e["step"]) for e in map(json.loads, open(sys.argv[1])) if e["event"] == "step"))' "$1/events.jsonl"
}
"$FT_BIN/supervise" --state "$TMP/nock" --worker "$FAKE" --steps 12 --spares 0 \
  --set checkpoint.every_steps=0 "$FT_SRC/examples/demo.yaml" >"$TMP/nock.out" 2>&1 ||
  fail "supervise with checkpoint.every_steps 0: $(tail -5 "$TMP/nock.out")"
[ "$(steps_of "$TMP/nock")" = "$(seq -s ' ' 1 12)" ] ||
  fail "checkpoint.every_steps 0: step events $(steps_of "$TMP/nock"), want every step 1..12"
grep -q "step: step 12 loss" "$TMP/nock.out" || fail "no plain step line with no checkpoints"
"$FT_BIN/supervise" --state "$TMP/every5" --worker "$FAKE" --steps 12 --spares 0 \
  --set checkpoint.every_steps=4 --set supervisor.step_events_every=5 \
  "$FT_SRC/examples/demo.yaml" >"$TMP/every5.out" 2>&1 || fail "supervise: $(tail -5 "$TMP/every5.out")"
[ "$(steps_of "$TMP/every5")" = "5 10 12" ] ||
  fail "step_events_every 5 (checkpoints every 4): step events $(steps_of "$TMP/every5"), want 5 10 12"
"$FT_BIN/supervise" --state "$TMP/none" --worker "$FAKE" --steps 12 --spares 0 \
  --set supervisor.step_events_every=0 "$FT_SRC/examples/demo.yaml" >"$TMP/none.out" 2>&1 ||
  fail "supervise: $(tail -5 "$TMP/none.out")"
[ -z "$(steps_of "$TMP/none")" ] || fail "step_events_every 0: step events $(steps_of "$TMP/none")"
has_event "$TMP/none" run_done || fail "step_events_every 0: no run_done"
pass "step events on their own cadence: every step by default (checkpoints off too), every 5 and the final, none at 0"
