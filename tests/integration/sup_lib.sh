# Helpers for the supervisor's integration tests. Source after lib.sh.
# FT_BUILD (the build root) comes from CTest; the fake worker is built there.
: "${FT_BUILD:=$(dirname "$FT_BIN")}"
FAKE="$FT_BUILD/tests/fake_worker"
[ -x "$FAKE" ] || fail "fake worker not built at $FAKE"
[ -x "$FT_BIN/supervise" ] || fail "supervise not built in $FT_BIN"

# sup_run STATE [args...]: supervise with the fake worker on the demo run
# file, small and fast; stdout+stderr to STATE.out; returns its exit code.
sup_run() {
  local st=$1
  shift
  "$FT_BIN/supervise" --state "$st" --worker "$FAKE" --steps 30 \
    --set checkpoint.every_steps=5 --set watchdog.heartbeat_timeout_s=3 \
    "$@" "$FT_SRC/examples/demo.yaml" >"$st.out" 2>&1
}

# events STATE: the event names of STATE/events.jsonl, one per line.
events() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    print(json.loads(line)["event"])
' "$1/events.jsonl"
}

# has_event STATE NAME [PY_CONDITION on e]: true if some event NAME matches.
has_event() {
  python3 -c '
import json, sys
name, cond = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "True")
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == name and eval(cond):
        sys.exit(0)
sys.exit(1)
' "$1/events.jsonl" "$2" "${3:-True}"
}

# in_order STATE NAME...: the events appear in this order (others between).
in_order() {
  local st=$1
  shift
  events "$st" | python3 -c '
import sys
want = sys.argv[1:]
got = [l.strip() for l in sys.stdin]
i = 0
for g in got:
    if i < len(want) and g == want[i]:
        i += 1
sys.exit(0 if i == len(want) else 1)
' "$@"
}

# sup_bg STATE [args...]: like sup_run, in the background; SUP = supervise's
# own pid (not a subshell's), so tests can signal it.
sup_bg() {
  local st=$1
  shift
  "$FT_BIN/supervise" --state "$st" --worker "$FAKE" --steps 30 \
    --set checkpoint.every_steps=5 --set watchdog.heartbeat_timeout_s=3 \
    "$@" "$FT_SRC/examples/demo.yaml" >"$st.out" 2>&1 &
  SUP=$!
}

# wait_step STATE STEP: until rank 0 of STATE's run reported STEP (up to
# 30 s); fails, with the run's output, if it never does.
wait_step() {
  for _ in $(seq 300); do
    has_event "$1" step "e[\"step\"] >= $2" 2>/dev/null && return 0
    sleep 0.1
  done
  cat "$1.out"
  fail "the run did not reach step $2"
}

# restored_newest STATE GEN MIN: generation GEN restored the newest
# checkpoint committed before it started, and that one is at least step MIN.
restored_newest() {
  python3 - "$1/events.jsonl" "$2" "$3" <<'PY'
import json, sys
gen, least = int(sys.argv[2]), int(sys.argv[3])
best, restore = -1, None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "checkpoint_committed" and restore is None:
        best = max(best, e["step"])
    if e["event"] == "generation_started" and e["gen"] == gen:
        restore = e["restore_step"]
sys.exit(0 if restore == best and best >= least else 1)
PY
}

# sup_meta_get STATE KEY: the supervisor's catalog record KEY (e.g.
# "gpt2-tiny/recovery") of STATE's local store, as JSON on stdout.
sup_meta_get() {
  "$FAKE" --meta-get "local:$1/store" "$2"
}

# need_strace: skips (77) without strace; LeakSanitizer cannot run in a
# traced process (sanitizer builds), so the traced supervisor checks no
# leaks (everything else in it is still checked).
need_strace() {
  command -v strace >/dev/null || { echo "SKIP: strace is not installed"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

# trace_renames PID INJECT: strace -f on PID, every rename(2) (all threads)
# with the injection INJECT (delay_exit=4500000, error=EIO); STRACE = its pid.
trace_renames() {
  rm -f "$TMP"/strace.log*
  # -ff: one file per thread, so a delayed rename is one line ("<unfinished
  # ...>" splits it when threads share the file)
  strace -ff -qq -p "$1" -o "$TMP/strace.log" -e trace=rename,renameat,renameat2 \
    -e inject=rename,renameat,renameat2:"$2" 2>"$TMP/strace.err" &
  STRACE=$!
}

# traced_renames PATTERN: after the traced process ended: skips (77) where
# ptrace was not permitted; fails unless some rename's line matches PATTERN.
traced_renames() {
  wait $STRACE || true
  if grep -q "Operation not permitted" "$TMP/strace.err"; then
    echo "SKIP: strace may not attach here (ptrace not permitted)"
    exit 77
  fi
  cat "$TMP"/strace.log.* >"$TMP/strace.all" 2>/dev/null
  grep -q "$1" "$TMP/strace.all" || { cat "$TMP/strace.all"; fail "no rename matched $1 (strace could not attach?)"; }
}
