#!/usr/bin/env bash
# The progress line fits the terminal (issue 39, item 5): supervise on a
# pseudo-terminal (script(1)) of 72 columns, where the full line ("step
# 123/300 (41.0%) | ETA ... | spares N") is longer: every progress line
# drawn is at most 71 columns (one that fills the last column wraps, and
# each redraw then leaves a stale line behind), and still begins with the
# step; at 200 columns the whole line is drawn.
. "$(dirname "$0")/lib.sh"
command -v script >/dev/null || {
  echo "sup_progress_tty: skipped: no script(1) (util-linux)"
  exit 77
}
synth_data "$TMP" 200000
sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
  -e "s|^data:.*|data: {train: \"$TMP/synth_train_*.bin\", val: \"$TMP/synth_val_*.bin\"}|" \
  -e 's|  every_steps: 25|  every_steps: 0|' "$FT_SRC/examples/demo.yaml" >"$TMP/run.yaml"
tty_run() { # tty_run COLS NAME: the run on a COLS-column terminal, its output in $TMP/NAME.out
  script -qec "stty cols $1 rows 40; FT_FAILPOINTS=min_step_ms=5 '$FT_BIN/supervise' --state '$TMP/$2' \
    --worker '$FT_BIN/worker' --spares 0 --steps 300 --set checkpoint.store=local:$TMP/$2.store '$TMP/run.yaml'" /dev/null >"$TMP/$2.out" 2>&1 ||
    fail "supervise on a $1-column terminal failed: $(tail -c 600 "$TMP/$2.out")"
}
widths() { # the progress lines' lengths, one per line
  python3 - "$1" <<'PY'
import re, sys
t = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
t = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", t)  # the erase sequences
for seg in re.split(r"[\r\n]", t):
    if re.match(r"step \d+/\d+", seg):
        print(len(seg))
PY
}
tty_run 72 narrow
n=$(widths "$TMP/narrow.out" | wc -l)
[ "$n" -gt 0 ] || fail "no progress line on the terminal: $(tail -c 400 "$TMP/narrow.out")"
max=$(widths "$TMP/narrow.out" | sort -n | tail -1)
[ "$max" -le 71 ] || fail "a progress line of $max columns on a 72-column terminal"
pass "$n progress lines on 72 columns, the longest $max"
tty_run 200 wide
grep -qa "| spares 0" "$TMP/wide.out" || fail "at 200 columns the whole line is not drawn"
pass "at 200 columns the whole line (to spares) is drawn"
