#!/usr/bin/env bash
# ckpt_catalog_damage: a lost or damaged catalog is an error that names it,
# never an empty or shorter store, and `ckpt rebuild-catalog local:DIR`
# brings back every checkpoint with its bad mark and pin.
#
#   A. catalog/ deleted: ls and pin exit 4 naming the catalog and saying to
#      run rebuild-catalog (and create nothing); rebuild-catalog restores all
#      12 checkpoints as they were (a pin, a bad mark), naming the one
#      manifest object it could not use (exit 1) until it is put back.
#   B. one flipped byte in the SST: a writer's open (verify) exits 4 naming
#      the .sst file; rebuild-catalog moves the damaged catalog aside and
#      restores everything.
#   C. one flipped byte in the WAL: an error, or all 12 commits: never fewer.
source "$(dirname "$0")/lib.sh"
C="$FT_BIN/ckpt"
W="$FT_BIN/../tests/ckpt_testwriter"
D="$TMP/store"
S="local:$D"

# 1..6 end up in an SST (the second writer's open flushes them), 7..12 in the WAL
"$W" --store "$S" --steps 6 --layers 1 --embd 32 >/dev/null
"$W" --store "$S" --steps 6 --start 7 --layers 1 --embd 32 >/dev/null
"$C" --store "$S" pin 3 >/dev/null
# step 5 marked bad by verify (a damaged chunk of its own), then the chunk is put back
hex=$(grep -A40 '"param/h.0"' "$D/manifests/testrun/00000000000000000005.json" |
  grep -oE '[0-9a-f]{64}' | head -n 1)
victim="$D/chunks/${hex:0:2}/$hex"
cp "$victim" "$TMP/victim"
printf 'X' | dd of="$victim" bs=1 seek=100 conv=notrunc status=none
"$C" --store "$S" verify 5 >/dev/null && fail "verify of a damaged chunk passed"
cp "$TMP/victim" "$victim"

# states: "step state pinned" per checkpoint
states() { "$C" --store "$S" ls --json | python3 -c '
import json, sys
for c in json.load(sys.stdin):
    print(c["step"], c["state"], c["pinned"])'; }
states >"$TMP/want"
grep -q "^3 committed True$" "$TMP/want" || fail "setup: step 3 not pinned: $(cat "$TMP/want")"
grep -q "^5 bad False$" "$TMP/want" || fail "setup: step 5 not bad: $(cat "$TMP/want")"
[ "$(wc -l <"$TMP/want")" -eq 12 ] || fail "setup: not 12 checkpoints"
cp -a "$D" "$TMP/pristine"
restore_pristine() { rm -rf "$D" && cp -a "$TMP/pristine" "$D"; }

# run_cmd NAME CMD...: runs it, keeps stdout+stderr in $TMP/NAME.out, sets RC.
run_cmd() {
  local name=$1
  shift
  set +e
  "$@" >"$TMP/$name.out" 2>&1
  RC=$?
  set -e
}
expect_catalog_error() { # NAME WHAT: exit 4 naming WHAT and rebuild-catalog
  [ "$RC" -eq 4 ] || fail "$1: exit $RC, expected 4: $(cat "$TMP/$1.out")"
  grep -q -- "$2" "$TMP/$1.out" || fail "$1 does not name $2: $(cat "$TMP/$1.out")"
  grep -q "rebuild-catalog" "$TMP/$1.out" || fail "$1 does not say to rebuild: $(cat "$TMP/$1.out")"
}

# ---- A: the catalog deleted ------------------------------------------------
rm -rf "$D/catalog"
run_cmd ls_nocat "$C" --store "$S" ls
expect_catalog_error ls_nocat "$D/catalog"
run_cmd pin_nocat "$C" --store "$S" pin 2
expect_catalog_error pin_nocat "$D/catalog"
[ ! -e "$D/catalog" ] || fail "a command created an empty catalog in place of the lost one"
pass "no catalog: ls and pin exit 4: $(head -1 "$TMP/ls_nocat.out" | cut -c1-150)"

printf 'x' | dd of="$D/manifests/testrun/00000000000000000004.json" bs=1 seek=60 conv=notrunc \
  status=none
run_cmd rebuild1 "$C" rebuild-catalog "$S"
[ "$RC" -eq 1 ] || fail "rebuild with a damaged manifest: exit $RC: $(cat "$TMP/rebuild1.out")"
grep -q "skipped manifests/testrun/00000000000000000004.json: .*checksum" "$TMP/rebuild1.out" ||
  fail "rebuild did not name the damaged manifest and why: $(cat "$TMP/rebuild1.out")"
grep -q "12 manifests in the store; 11 checkpoints added to the catalog; 1 skipped" \
  "$TMP/rebuild1.out" || fail "$(cat "$TMP/rebuild1.out")"
cp "$TMP/pristine/manifests/testrun/00000000000000000004.json" "$D/manifests/testrun/"
run_cmd rebuild2 "$C" rebuild-catalog "$S"
[ "$RC" -eq 0 ] || fail "rebuild: exit $RC: $(cat "$TMP/rebuild2.out")"
grep -q "1 checkpoint added to the catalog; 0 skipped" "$TMP/rebuild2.out" ||
  fail "$(cat "$TMP/rebuild2.out")"
states >"$TMP/got"
diff "$TMP/want" "$TMP/got" >&2 || fail "rebuilt catalog differs (states, pins)"
"$C" --store "$S" verify | grep -q "12 checkpoints verified, no problems" || fail "verify after rebuild"
pass "rebuild-catalog local: all 12 back, step 3 pinned, step 5 bad; a damaged manifest named"

# ---- B: one flipped byte in the SST ----------------------------------------
restore_pristine
sst=$(ls "$D"/catalog/*.sst | head -1)
[ -n "$sst" ] || fail "no SST file in the catalog"
off=$(($(stat -c %s "$sst") / 2))
printf 'Z' | dd of="$sst" bs=1 seek="$off" conv=notrunc status=none
cmp -s "$sst" "$TMP/pristine/catalog/$(basename "$sst")" && fail "the byte did not change"
run_cmd verify_sst "$C" --store "$S" verify
expect_catalog_error verify_sst "$(basename "$sst")"
grep -q "verified" "$TMP/verify_sst.out" && fail "verify went on with a damaged catalog"
pass "flipped SST byte: $(head -1 "$TMP/verify_sst.out" | cut -c1-200)"
run_cmd rebuild_sst "$C" rebuild-catalog "$S"
[ "$RC" -eq 0 ] || fail "rebuild of a damaged catalog: exit $RC: $(cat "$TMP/rebuild_sst.out")"
grep -q "moved to $D/catalog.damaged" "$TMP/rebuild_sst.out" || fail "$(cat "$TMP/rebuild_sst.out")"
states >"$TMP/got"
diff "$TMP/want" "$TMP/got" >&2 || fail "catalog rebuilt after SST damage differs"
pass "rebuild-catalog after SST damage: the old one set aside, all 12 back with marks"

# ---- C: one flipped byte in the WAL ----------------------------------------
# a store whose last writer committed 7..12 (in the WAL) and nothing opened it since
rm -rf "$D"
"$W" --store "$S" --steps 6 --layers 1 --embd 32 >/dev/null
"$W" --store "$S" --steps 6 --start 7 --layers 1 --embd 32 >/dev/null
states >"$TMP/want"
[ "$(grep -c committed "$TMP/want")" -eq 12 ] || fail "setup: $(cat "$TMP/want")"
rm -rf "$TMP/pristine"
cp -a "$D" "$TMP/pristine"
for where in 3 2; do # a third and half-way into the WAL
  restore_pristine
  wal=$(ls "$D"/catalog/*.log | head -1)
  size=$(stat -c %s "$wal")
  [ "$size" -gt 1000 ] || fail "the WAL is nearly empty ($size bytes)"
  printf 'Z' | dd of="$wal" bs=1 seek=$((size / where)) conv=notrunc status=none
  run_cmd ls_wal "$C" --store "$S" ls --json
  if [ "$RC" -eq 0 ]; then
    n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$TMP/ls_wal.out")
    [ "$n" -eq 12 ] || fail "flipped WAL byte: ls lists $n checkpoints, not 12, and no error"
    pass "flipped WAL byte at 1/$where: all 12 commits still listed"
  else
    expect_catalog_error ls_wal "$D/catalog"
    pass "flipped WAL byte at 1/$where: $(head -1 "$TMP/ls_wal.out" | cut -c1-160)"
  fi
done
run_cmd rebuild_wal "$C" rebuild-catalog "$S"
[ "$RC" -eq 0 ] || fail "rebuild after WAL damage: exit $RC: $(cat "$TMP/rebuild_wal.out")"
states >"$TMP/got"
diff "$TMP/want" "$TMP/got" >&2 || fail "catalog rebuilt after WAL damage differs"
pass "rebuild-catalog after WAL damage: all 12 back with marks"
