#!/bin/bash
# ckpt_crash: kill a checkpoint writer with SIGKILL at random moments, many
# times, and check after each kill that
#   - the catalog lists no partial checkpoint: nothing pending, and
#     `ckpt verify` (every chunk of every listed checkpoint re-read and
#     re-hashed) exits 0;
#   - every checkpoint whose commit returned before the kill (the writer
#     printed "committed STEP") is still there (durability), unless GC
#     legitimately removed it (the writer runs gc --keep-last 3 after each
#     commit, so kills also land inside GC).
# The writer writes delta chunks (--full-every 3: chains up to 2 long), so
# verify also decodes every chain, and GC must keep the bases a kept
# checkpoint needs; a last writer that is not killed makes sure the store
# ends with deltas, verified.
# Env: CKPT_CRASH_ITERS (default 50), CKPT_CRASH_SEED (default: the pid).
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_crash.XXXXXX")
trap 'rm -rf "$T"' EXIT
S="local:$T/store"
ITERS=${CKPT_CRASH_ITERS:-50}
RANDOM=${CKPT_CRASH_SEED:-$$}
echo "ckpt_crash: $ITERS kills, seed ${CKPT_CRASH_SEED:-$$}"

fail() {
  echo "FAIL (iteration $i): $*"
  echo "--- writer stderr:"; cat "$T/err" 2>/dev/null
  exit 1
}

next=1
kills=0
mid=0
deltas=0
for i in $(seq 1 "$ITERS"); do
  "$W" --store "$S" --start "$next" --steps 100000 --world 2 --layers 2 --embd 128 \
    --gc-keep 3 --full-every 3 >"$T/out" 2>"$T/err" &
  pid=$!
  # Every fourth kill is timed from exec, so it can land in the store's open
  # (recovery of the previous kill's leftovers); the others from the writer's
  # "opened" line, so they land among commits however slow the set-up is
  # (it took over 400 ms under ASan on a loaded machine: 49 of 50 kills came
  # before any commit); and one in four of those from its first commit, so
  # they land in the second one, a delta on the first.
  if [ $((i % 4)) -ne 0 ]; then
    from='^opened'
    [ $((i % 4)) -eq 2 ] && from='^committed'
    for _ in $(seq 1 600); do
      grep -q "$from" "$T/out" 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
  fi
  sleep "$(printf '0.%03d' $((RANDOM % 400)))"
  kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
  wait "$pid" 2>/dev/null
  if grep -qE "ckpt_testwriter:|Sanitizer|runtime error" "$T/err"; then
    fail "the writer reported an error before it was killed"
  fi
  printed=$(awk '/^committed/{print $2}' "$T/out")
  last=$(echo "$printed" | tail -n 1)
  [ -n "$printed" ] || mid=$((mid + 1))

  ls_out=$("$C" --store "$S" ls 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && ! echo "$ls_out" | grep -qE "no catalog|no store"; then
    fail "ckpt ls exited $rc: $ls_out"
  fi
  # the DEPTH column (before EXACT, the last): a checkpoint with delta chunks
  if echo "$ls_out" | awk '$1=="testrun" && $(NF-1)+0 > 0 {f=1} END {exit !f}'; then
    deltas=$((deltas + 1))
  fi
  if echo "$ls_out" | grep -q pending; then
    fail "a pending checkpoint is listed: $ls_out"
  fi
  if [ -n "$last" ]; then
    "$C" --store "$S" show "$last" >/dev/null 2>"$T/show" ||
      fail "step $last was reported committed but is not in the catalog: $(cat "$T/show")"
  fi
  if [ $rc -eq 0 ]; then
    "$C" --store "$S" verify >"$T/verify" 2>&1 || fail "verify: $(cat "$T/verify")"
  fi
  maxlisted=$(echo "$ls_out" | awk '$1=="testrun"{print $2}' | sort -n | tail -n 1)
  for s in $last $maxlisted; do
    [ "$s" -ge "$next" ] && next=$((s + 1))
  done
done
# Then a writer that is not killed: its second and third checkpoints are
# deltas (--full-every 3), whatever the kills above happened to leave.
"$W" --store "$S" --start "$next" --steps 3 --world 2 --layers 2 --embd 128 --gc-keep 3 \
  --full-every 3 >"$T/out" 2>"$T/err" || fail "the last writer failed: $(cat "$T/err")"
"$C" --store "$S" verify >"$T/verify" 2>&1 || fail "verify after the last writer: $(cat "$T/verify")"
"$C" --store "$S" ls | awk '$1=="testrun" && $(NF-1)+0 > 0 {f=1} END {exit !f}' ||
  fail "the last writer's checkpoints have no delta chunks: $("$C" --store "$S" ls)"
n=$("$C" --store "$S" ls | grep -c '^testrun')
echo "ckpt_crash: $kills kills ($mid before any commit in that process), next step $next, $n checkpoints listed, all verified; delta chunks listed after $deltas kills"
[ "$next" -gt 3 ] || { echo "FAIL: too few commits happened ($next); the test did not exercise anything"; exit 1; }
exit 0
