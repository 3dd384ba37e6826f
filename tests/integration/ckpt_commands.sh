#!/bin/bash
# ckpt_commands: every row of ckpt's command table (ckptstore/ckpt_cli.c,
# cmds[]) reaches its own handler with its own operands: each command is run
# once against a real store and its own output or effect is checked (pin
# pins and unpin unpins, verify/gc/rebuild-catalog answer as themselves),
# and each refuses an operand too many (exit 2, naming the command).
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_commands.XXXXXX")
trap 'rm -rf "$T"' EXIT
S="local:$T/store"
fail() { echo "FAIL: $*"; exit 1; }
expect_rc() { # expected-rc command...
  local want=$1; shift
  "$@" >"$T/stdout" 2>"$T/stderr"
  local rc=$?
  [ $rc -eq "$want" ] || fail "'$*' exited $rc, expected $want: $(cat "$T/stderr")"
}
flat() { tr -d ' \t\n' <"$T/stdout"; } # --json output on one line
pinned() { # step -> true|false, from ls --json
  expect_rc 0 "$C" --store "$S" ls --json
  flat | grep -o "\"step\":$1,[^}]*\"pinned\":[a-z]*" | grep -o '[a-z]*$'
}
unset CKPT_STORE
"$W" --store "$S" --steps 2 --every 100 --start 100 --world 1 >/dev/null || fail "writer failed"

expect_rc 0 "$C" --store "$S" ls
[ "$(grep -c '^testrun' "$T/stdout")" -eq 2 ] || fail "ls does not list 2 checkpoints"
expect_rc 0 "$C" --store "$S" show 200
grep -q "param/wte" "$T/stdout" || fail "show 200 lacks param/wte"
expect_rc 0 "$C" --store "$S" restore 200 --to "$T/m.safetensors"
[ -s "$T/m.safetensors" ] || fail "restore wrote nothing"
expect_rc 0 "$C" --store "$S" verify 200 --json
flat | grep -q '"command":"verify","checked":1' || fail "verify 200: $(flat)"
expect_rc 0 "$C" --store "$S" gc --json
flat | grep -q '"command":"gc"' || fail "gc: $(flat)"
[ "$(pinned 200)" = false ] || fail "step 200 pinned before pin"
expect_rc 0 "$C" --store "$S" pin 200
[ "$(pinned 200)" = true ] || fail "pin 200 did not pin it"
[ "$(pinned 100)" = false ] || fail "pin 200 pinned step 100"
expect_rc 0 "$C" --store "$S" unpin 200
[ "$(pinned 200)" = false ] || fail "unpin 200 did not unpin it"
expect_rc 0 "$C" --store "$S" diff 100 200
grep -q "step 100 -> 200" "$T/stdout" || fail "diff 100 200: $(cat "$T/stdout")"
expect_rc 0 "$C" rebuild-catalog "$S" --json # the operand names the store
flat | grep -q '"command":"rebuild-catalog","found":2' || fail "rebuild-catalog: $(flat)"

# operands: one too many is refused before the store is opened
for c in "ls 1" "show 1 2" "restore 1 2" "verify 1 2" "gc 1" "pin 1 2" "unpin 1 2" \
  "diff 1 2 3" "rebuild-catalog $S 2"; do
  # shellcheck disable=SC2086
  expect_rc 2 "$C" --store "$S" $c
  grep -q "wrong number of arguments for '${c%% *}'" "$T/stderr" ||
    fail "$c: $(cat "$T/stderr")"
done
expect_rc 2 "$C" --store "$S" show
expect_rc 2 "$C" --store "$S" pinn 200
grep -q "unknown command 'pinn'" "$T/stderr" || fail "unknown command: $(cat "$T/stderr")"
echo "ckpt_commands: ok"
