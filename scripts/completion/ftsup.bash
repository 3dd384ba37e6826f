# bash completion for supervise, ckpt, worker, ftagent and ftdata (installed by
# `cmake --install` under share/bash-completion/completions/, one copy per
# program name). Options are read from the program's own --help, so they are
# never out of date; for ckpt and ftdata the first word completes to a
# command, and after --store/--to/--state/... to a file name.
_ftsup_complete() {
  local cur prev prog words
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD - 1]}
  prog=${COMP_WORDS[0]}
  case "$prev" in
  --store | --state | --to | --out | --in | --init-from | --export | --log-json | --worker | --from)
    COMPREPLY=($(compgen -f -- "$cur"))
    return
    ;;
  esac
  if [[ "$cur" == -* ]]; then
    words=$("$prog" --help 2>&1 | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  case "${prog##*/}" in
  supervise) # the first word: a subcommand or the run file
    if [ "$COMP_CWORD" = 1 ]; then
      COMPREPLY=($(compgen -W "status report" -- "$cur") $(compgen -f -- "$cur"))
      return
    fi
    ;;
  ckpt | ftdata)
    local i have=0
    for ((i = 1; i < COMP_CWORD; i++)); do
      [[ "${COMP_WORDS[i]}" != -* && "${COMP_WORDS[i - 1]}" != --* ]] && have=1
    done
    if [ "$have" = 0 ]; then
      # commands: the lines of --help's "Commands:" list (two spaces, a
      # word), or its usage lines "  PROG COMMAND ..."
      words=$("$prog" --help 2>&1 | awk -v p="${prog##*/}" '
        /^[A-Z][a-z]*:/ { sect = $1 }
        sect == "Commands:" && /^  [a-z]/ { print $1 }
        $1 == p && /^  / && $2 ~ /^[a-z]/ { print $2 }' | sort -u)
      COMPREPLY=($(compgen -W "$words" -- "$cur"))
      return
    fi
    ;;
  esac
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -F _ftsup_complete supervise ckpt worker ftagent ftdata
