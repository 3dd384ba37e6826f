#!/usr/bin/env bash
# Which store supervise uses, and that it says so at start (run_started
# store, store_from): a local checkpoint.store of the run file, relative to
# the run file's directory; --store over it; the default local:state/store
# under --state DIR.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sup_lib.sh"
mkdir -p "$TMP/r" "$TMP/elsewhere"
sed 's|^  store: .*|  store: "local:ckpts"|' "$FT_SRC/examples/demo.yaml" >"$TMP/r/run.yaml"
grep -q 'local:ckpts' "$TMP/r/run.yaml" || fail "demo.yaml has no checkpoint.store to replace"

sup_at() { # STATE [args...]: supervise from $TMP/elsewhere on $TMP/r/run.yaml
  local st=$1
  shift
  (cd "$TMP/elsewhere" && "$FT_BIN/supervise" --state "$st" --worker "$FAKE" --steps 10 \
    --set checkpoint.every_steps=5 "$@" "$TMP/r/run.yaml" >"$st.out" 2>&1) ||
    { cat "$st.out"; fail "supervise $* failed"; }
}

sup_at "$TMP/s1"
has_checkpoint "local:$TMP/r/ckpts" 10 || fail "no checkpoint in the run file's store $TMP/r/ckpts"
has_event "$TMP/s1" run_started "e['store'] == 'local:$TMP/r/ckpts' and 'run file' in e['store_from']" ||
  fail "run_started does not name the run file's store"
grep -q "store local:$TMP/r/ckpts (from the run file's checkpoint.store)" "$TMP/s1.out" ||
  fail "supervise did not print the store in use"
[ ! -e "$TMP/s1/store" ] || fail "a store was made under --state too"

sup_at "$TMP/s2" --store "local:$TMP/other"
has_checkpoint "local:$TMP/other" 10 || fail "--store was not used"
has_event "$TMP/s2" run_started "e['store_from'] == '--store'" || fail "run_started: store_from is not --store"

ST=$TMP/s3
mkdir -p "$ST"
sup_run "$ST"
has_event "$ST" run_started "e['store'] == 'local:$ST/store' and e['store_from'] == 'the state directory'" ||
  fail "the default store is not under --state"
pass "local checkpoint.store relative to the run file; --store wins; default under --state"
