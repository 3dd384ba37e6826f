#!/usr/bin/env bash
# What every program's command line promises, checked on the real programs:
#   - `--version` prints "PROG (ftsup) X.Y.Z (git REV)" and exits 0;
#   - a long option is taken only by its exact name: a prefix or a typo
#     (`--spare` for `--spares`) is exit 2 with "did you mean --spares?",
#     never silently another option;
#   - `cmake --install` lays out the programs, a man page per program
#     (help2man, from --help), the docs and bash completion that completes
#     the commands of ckpt from its own --help.
source "$(dirname "$0")/lib.sh"

# check_typo PROG TYPED WANTED ARGS...: PROG ARGS... with the typo exits 2
# and suggests WANTED
check_typo() {
  local prog=$1 typed=$2 wanted=$3 out rc=0
  shift 3
  out=$("$FT_BIN/$prog" "$@" 2>&1) || rc=$?
  [ "$rc" = 2 ] || fail "$prog $*: exit $rc, expected 2 (usage)"
  grep -q -- "unknown option '$typed', did you mean $wanted?" <<<"$out" ||
    fail "$prog $*: no suggestion of $wanted in: $out"
}

for p in supervise ckpt worker ftagent ftdata; do
  v=$("$FT_BIN/$p" --version) || fail "$p --version exits non-zero"
  [[ "$v" =~ ^$p\ \(ftsup\)\ [0-9]+\.[0-9]+\.[0-9]+\ \(git\ [^\)]+\)$ ]] ||
    fail "$p --version printed '$v'"
done
pass "--version on every program"

check_typo supervise --spare --spares --spare 2 "$FT_SRC/examples/demo.yaml"
check_typo supervise --stat --state --stat "$TMP/st" "$FT_SRC/examples/demo.yaml"
check_typo ckpt --stor --store --stor "local:$TMP/s" ls
check_typo ckpt --keep-lst --keep-last --store "local:$TMP/s" gc --keep-lst 2
check_typo worker --standalon --standalone --standalon "$FT_SRC/examples/demo.yaml"
check_typo ftdata --tok --tokens synth --out "$TMP/d" --tok 5
check_typo ftagent --slot --slots --connect 127.0.0.1:1 --node 0 --slot 2 -- "$FT_BIN/worker"
pass "a prefix or a typo of an option is refused with a suggestion"

# ---- cmake --install ----------------------------------------------------------
: "${FT_BUILD:?FT_BUILD must point to the build directory}"
P=$TMP/prefix
cmake --install "$FT_BUILD" --prefix "$P" >"$TMP/install.log" 2>&1 ||
  { cat "$TMP/install.log"; fail "cmake --install failed"; }
for p in supervise ckpt worker ftagent ftdata; do
  [ -x "$P/bin/$p" ] || fail "no $P/bin/$p"
  man1="$P/share/man/man1/$p.1"
  [ -s "$man1" ] || fail "no man page $man1"
  grep -q '^\.TH' "$man1" || fail "$man1 is not a man page"
  grep -q -- 'version' "$man1" || fail "$man1 does not list --version"
  [ -s "$P/share/bash-completion/completions/$p" ] || fail "no bash completion for $p"
done
grep -q -- 'spares' "$P/share/man/man1/supervise.1" || fail "supervise.1 lacks --spares"
[ -s "$P/share/doc/ftsup/design.md" ] || fail "no design.md under share/doc/ftsup"
[ -s "$P/share/doc/ftsup/examples/demo.yaml" ] || fail "no example run file installed"
"$P/bin/ckpt" --version >/dev/null || fail "the installed ckpt does not run"
pass "cmake --install: programs, man pages, docs, completion"

# The completion completes ckpt's commands and options from its --help.
words=$(PATH="$P/bin:$PATH" bash -c '
  source "$1"
  COMP_WORDS=(ckpt re); COMP_CWORD=1; _ftsup_complete; echo "${COMPREPLY[*]}"
  COMP_WORDS=(supervise --spa); COMP_CWORD=1; _ftsup_complete; echo "${COMPREPLY[*]}"
' _ "$P/share/bash-completion/completions/ckpt")
grep -qx 'rebuild-catalog restore' <<<"$(head -1 <<<"$words")" || fail "ckpt re<TAB> gave '$words'"
grep -qx -- '--spares' <<<"$(tail -1 <<<"$words")" || fail "supervise --spa<TAB> gave '$words'"
pass "bash completion of commands and options"
