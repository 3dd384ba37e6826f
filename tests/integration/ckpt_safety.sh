#!/bin/bash
# ckpt_safety: what an operator's command must never do to a local store
# (issue 41, items 1-3), with the real `ckpt` and the test writer:
#   1. gc on a catalog that lacks a checkpoint the store's manifests/ has (an
#      older copy of the catalog put back) refuses, naming the manifest, and
#      deletes nothing; after rebuild-catalog it runs and the step restores
#   2. restore --to a path inside the store (a manifest; through '..' or a
#      symbolic link) is exit 2 and the file is unchanged; verify reports a
#      manifest object overwritten with other bytes by name and marks the
#      checkpoint bad; rebuild-catalog names it and goes on
#   3. one chunk of the newest checkpoint truncated: `restore latest` names
#      the damaged step and chunk and restores the previous step (the same
#      bytes as `restore <prev>`), exit 0 with a warning; `restore <newest>`
#      still fails and writes nothing
#   4. the catalog lags the store's marks (an older copy put back): a pin
#      the catalog does not show is still honoured by gc (and written back
#      to the catalog), and a pin the catalog already shows is written to
#      the store again, so a rebuilt catalog keeps it
source "$(dirname "$0")/lib.sh"
: "${FT_BUILD:?FT_BUILD must point to the build directory}"
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
D="$TMP/store"
export CKPT_STORE="local:$D"
M="$D/manifests/testrun"
run_ckpt() { # NAME ARGS...: $RC and $TMP/NAME.out (stdout and stderr)
  local name=$1
  shift
  RC=0
  "$C" "$@" >"$TMP/$name.out" 2>&1 || RC=$?
}
write() { # START STEPS EMBD (the writer's bytes depend on the step's index in its
  # run, not on the step: another width gives chunks no earlier run wrote)
  "$W" --store "$CKPT_STORE" --start "$1" --steps "$2" --world 2 --layers 2 --embd "$3" \
    --chunk-mib 1 >"$TMP/w.out" 2>&1 || fail "writer: $(cat "$TMP/w.out")"
}

# ---- 1 -------------------------------------------------------------------------
write 1 2 64
cp -a "$D/catalog" "$TMP/catalog.old"
write 3 1 128
"$C" restore 3 --to "$TMP/want3.st" >/dev/null || fail "restore 3"
rm -rf "$D/catalog"
cp -a "$TMP/catalog.old" "$D/catalog"
nchunks=$(find "$D/chunks" -type f | wc -l)
for dry in --dry-run ""; do
  # shellcheck disable=SC2086
  run_ckpt gc gc --grace 0 $dry
  [ "$RC" -eq 4 ] || fail "gc $dry on an older catalog: exit $RC: $(cat "$TMP/gc.out")"
  grep -q "gc refused, nothing deleted.* 1 checkpoint manifest that its catalog does not list (manifests/testrun/00000000000000000003.json).*ckpt rebuild-catalog" \
    "$TMP/gc.out" || fail "gc $dry: $(cat "$TMP/gc.out")"
done
[ "$(find "$D/chunks" -type f | wc -l)" -eq "$nchunks" ] || fail "gc deleted chunks"
run_ckpt rebuild rebuild-catalog "$D"
[ "$RC" -eq 0 ] || fail "rebuild-catalog: $(cat "$TMP/rebuild.out")"
run_ckpt gc2 gc --grace 0
[ "$RC" -eq 0 ] || fail "gc after the rebuild: exit $RC: $(cat "$TMP/gc2.out")"
"$C" restore 3 --to "$TMP/got3.st" >/dev/null && cmp "$TMP/want3.st" "$TMP/got3.st" ||
  fail "step 3 does not restore after the gc"
pass "gc refuses a catalog that lacks a manifest of the store, naming it; nothing deleted"

# ---- 2 -------------------------------------------------------------------------
m3="$M/00000000000000000003.json"
before=$(sha256sum <"$m3")
ln -s "$M" "$TMP/link"
for to in "$m3" "$D/chunks/../manifests/testrun/00000000000000000003.json" "$TMP/link/new.st" \
  "$D/" "$D/catalog/"; do
  run_ckpt into restore 1 --to "$to"
  [ "$RC" -eq 2 ] || fail "restore --to $to (in the store): exit $RC: $(cat "$TMP/into.out")"
  grep -q "is inside the store's folder $D" "$TMP/into.out" || fail "restore --to $to: $(cat "$TMP/into.out")"
done
[ "$(sha256sum <"$m3")" = "$before" ] || fail "a restore changed manifest 3"
[ ! -e "$M/new.st" ] || fail "a restore wrote into the store through a link"
"$C" restore 1 --to "$TMP/one.st" >/dev/null || fail "restore outside the store"
m2="$M/00000000000000000002.json"
cp "$m2" "$TMP/m2.json"
cp "$TMP/one.st" "$m2" # as an unguarded `restore 1 --to $m2` would have left it
run_ckpt verify verify
[ "$RC" -eq 1 ] || fail "verify with an overwritten manifest: exit $RC: $(cat "$TMP/verify.out")"
grep -q "BAD   testrun step 2: bad manifest object" "$TMP/verify.out" &&
  grep -q "manifest object manifests/testrun/00000000000000000002.json was overwritten or damaged: it is not a manifest" \
    "$TMP/verify.out" || fail "verify does not name the manifest: $(cat "$TMP/verify.out")"
grep -q "ok    testrun step 3" "$TMP/verify.out" || fail "verify: $(cat "$TMP/verify.out")"
"$C" ls | grep -qE '^testrun +2 .* bad ' || fail "step 2 not marked bad: $("$C" ls)"
run_ckpt rebuild2 rebuild-catalog "$D"
[ "$RC" -eq 1 ] && grep -q "skipped manifests/testrun/00000000000000000002.json: " "$TMP/rebuild2.out" &&
  grep -q "3 manifests in the store; 0 checkpoints added to the catalog; 1 skipped" "$TMP/rebuild2.out" ||
  fail "rebuild-catalog with an overwritten manifest: exit $RC: $(cat "$TMP/rebuild2.out")"
cp "$TMP/m2.json" "$m2"
pass "restore into the store refused (exit 2, manifest unchanged); verify and rebuild name an overwritten manifest"

# ---- 3 -------------------------------------------------------------------------
write 4 2 96 # steps 4 and 5
"$C" restore 4 --to "$TMP/want4.st" >/dev/null || fail "restore 4"
hex=$(grep -A40 '"param/h.0"' "$M/00000000000000000005.json" | grep -oE '[0-9a-f]{64}' | head -n 1)
victim="$D/chunks/${hex:0:2}/$hex"
[ -f "$victim" ] || fail "no chunk file $victim"
truncate -s 100 "$victim"
run_ckpt latest restore latest --to "$TMP/latest.st"
[ "$RC" -eq 0 ] || fail "restore latest with a damaged newest: exit $RC: $(cat "$TMP/latest.out")"
grep -q "warning: checkpoint testrun step 5 is damaged: .*$hex" "$TMP/latest.out" &&
  grep -q "restored testrun step 4 " "$TMP/latest.out" &&
  grep -q "warning: restored step 4, not the newest (step 5)" "$TMP/latest.out" ||
  fail "restore latest: $(cat "$TMP/latest.out")"
cmp "$TMP/want4.st" "$TMP/latest.st" || fail "restore latest gave other bytes than restore 4"
run_ckpt five restore 5 --to "$TMP/five.st"
[ "$RC" -eq 1 ] && [ ! -e "$TMP/five.st" ] || fail "restore 5: exit $RC: $(cat "$TMP/five.out")"
grep -q "falling back" "$TMP/five.out" && fail "an explicit step fell back: $(cat "$TMP/five.out")"
pass "restore latest falls back past a damaged newest checkpoint, naming it; an explicit step does not"

# ---- 4 -------------------------------------------------------------------------
export CKPT_STORE="local:$TMP/store4"
D4="$TMP/store4"
"$W" --store "$CKPT_STORE" --start 1 --steps 3 --world 2 --layers 2 --embd 64 --chunk-mib 1 \
  >"$TMP/w.out" 2>&1 || fail "writer: $(cat "$TMP/w.out")"
"$C" restore 2 --to "$TMP/want2.st" >/dev/null || fail "restore 2"
cp -a "$D4/catalog" "$TMP/cat4.old" # nothing pinned
"$C" pin 2 >/dev/null || fail "pin 2"
rm -rf "$D4/catalog" && cp -a "$TMP/cat4.old" "$D4/catalog"
"$C" ls | grep -qE '^testrun +2 .*committed ' || fail "the older catalog shows step 2 pinned: $("$C" ls)"
run_ckpt gc4 gc --keep-last 1 --grace 0
[ "$RC" -eq 0 ] || fail "gc on a catalog behind the marks: exit $RC: $(cat "$TMP/gc4.out")"
grep -q "deleted 1 checkpoint," "$TMP/gc4.out" &&
  grep -q "1 checkpoint pinned or marked in the store but not in the catalog" "$TMP/gc4.out" ||
  fail "gc on a catalog behind the marks: $(cat "$TMP/gc4.out")"
"$C" restore 2 --to "$TMP/got2.st" >/dev/null 2>"$TMP/e" && cmp "$TMP/want2.st" "$TMP/got2.st" ||
  fail "gc deleted step 2, pinned in the store: $(cat "$TMP/e")"
"$C" ls | grep -qE '^testrun +2 .*committed\* ' || fail "the catalog does not show the pin now: $("$C" ls)"
# the other way: the catalog says pinned, the store's mark was removed since
cp -a "$D4/catalog" "$TMP/cat4.pinned"
"$C" unpin 2 >/dev/null || fail "unpin 2"
rm -rf "$D4/catalog" && cp -a "$TMP/cat4.pinned" "$D4/catalog"
"$C" pin 2 >/dev/null || fail "pin 2 on a catalog that shows it pinned"
rm -rf "$D4/catalog"
"$C" rebuild-catalog "$D4" >/dev/null || fail "rebuild-catalog"
"$C" ls | grep -qE '^testrun +2 .*committed\* ' ||
  fail "a pin that exited 0 is lost by a rebuilt catalog: $("$C" ls)"
pass "pins the catalog lags are honoured by gc; a pin that exits 0 is in the store"
