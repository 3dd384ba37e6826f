#!/bin/bash
# `ftdata`'s options: exact names only (a typo or an abbreviation is a usage
# error that names the option meant), --name=VALUE and --name VALUE,
# options before or after the GLOB, --version and --help with any
# subcommand.
set -u
FTDATA="${FT_BIN:?FT_BIN not set}/ftdata"
[ -x "$FTDATA" ] || { echo "FAIL: $FTDATA not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ft_data_args.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# usage_err WANT-TEXT ARGS...: exit 2, stderr holds WANT-TEXT, nothing written.
usage_err() {
  local want="$1" rc
  shift
  "$FTDATA" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "ftdata $*: exit $rc, want 2"
  grep -qF -- "$want" "$tmp/err" || fail "ftdata $*: stderr lacks '$want': $(cat "$tmp/err")"
  echo "ok: ftdata $*: $(head -1 "$tmp/err")"
}
usage_err "synth: unknown option '--token', did you mean --tokens?" synth --out "$tmp/t/c" --token 5000
usage_err "synth: unknown option '--tok', did you mean --tokens?" synth --out "$tmp/t/c" --tok 5000
usage_err "synth: unknown option '--sed', did you mean --seed?" synth --out "$tmp/t/c" --sed=3
usage_err "encode: unknown option '--val-fraction', did you mean --val-frac?" \
  encode --in /dev/null --out "$tmp/t/c" --val-fraction 0.2
usage_err "stats: unknown option '--jsn', did you mean --json?" stats --jsn "$tmp/t/c_*.bin"
usage_err "stats: unknown option '--frobnicate'" stats --frobnicate x
usage_err "stats: option '--json' takes no value" stats --json=yes x
usage_err "synth: --out needs a value" synth --out
usage_err "encode: unexpected argument 'extra'" encode --in /dev/null --out "$tmp/t/c" extra
[ -e "$tmp/t" ] && fail "a refused command wrote $tmp/t"

# Both value forms, options after the GLOB, and "--" before a GLOB.
"$FTDATA" synth --out="$tmp/a/c" --tokens 5000 --seed=9 >/dev/null || fail "synth --out=..."
"$FTDATA" stats "$tmp/a/c_*.bin" --json --vocab=256 >"$tmp/s.json" || fail "stats GLOB --json"
grep -q '"tokens":[[:space:]]*5000' "$tmp/s.json" || fail "stats --json: $(cat "$tmp/s.json")"
"$FTDATA" stats --vocab 256 -- "$tmp/a/c_train_*.bin" >/dev/null || fail "stats -- GLOB"

# --version and --help, alone or after a subcommand: exit 0 on stdout.
for args in "--version" "synth --version" "stats --version"; do
  out=$("$FTDATA" $args) || fail "ftdata $args exited $?"
  echo "$out" | grep -qE '^ftdata \(ftsup\) [0-9]+\.[0-9]+\.[0-9]+ \(git ' ||
    fail "ftdata $args printed '$out'"
done
for args in "--help" "help" "encode --help" "stats -h"; do
  "$FTDATA" $args | grep -q "Option names are exact" || fail "ftdata $args: no help text"
done

[ "$fails" -eq 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
