#!/bin/bash
# s3_gc_safety: nothing deletes checkpoints from a catalog that cannot be
# proved complete (issue 41, item 1), against a real S3-protocol server on
# loopback that checks every signature (s3_lib.sh) and the real `ckpt`:
#   1. a new cache whose first open fails (a wrong secret: 403) leaves no
#      catalog behind; with the right secret the next `ckpt ls` builds it
#      whole from the bucket and lists every checkpoint
#   2. an explicit rebuild-catalog that fails midway leaves the incomplete
#      marker: ls and gc exit 4 naming it and the command to run, until a
#      rebuild completes
#   3. a catalog that lacks manifests the bucket has (an older copy: another
#      host committed since) makes `gc --grace 0` (and --dry-run) refuse,
#      naming them; not one object of the bucket is deleted, and a new cache
#      restores every checkpoint bit for bit
#   4. a chunk damaged in the cache is read again from the bucket by a
#      restore (and the cache copy replaced)
#   5. a pin set from another host (the bucket's mark says pinned, this
#      cache's older copy of the mark does not) is honoured by gc
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/s3_gc_safety.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
trap 's3_stop; rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
# run_ckpt NAME ARGS...: $RC and $T/NAME.out (stdout and stderr)
run_ckpt() {
  local name=$1
  shift
  RC=0
  "$C" "$@" >"$T/$name.out" 2>&1 || RC=$?
}
objects() { # every object of the store in the bucket, with its size
  aws_s3 s3 ls --recursive s3://ckpts/run-a/ | awk '{print $3, $4}' | sort
}
s3_start
s3_mkbucket ckpts
S=s3://ckpts/run-a
export FT_S3_TIMEOUT_S=3 FT_S3_RETRIES=2 FT_S3_RETRY_BUDGET_S=6 FT_S3_DRAIN_S=10

export FT_S3_CACHE="$T/cache1"
"$W" --store "$S" --steps 3 --world 2 --layers 2 --embd 64 --chunk-mib 1 >"$T/w1" 2>&1 ||
  fail "writer: $(cat "$T/w1")"
for s in 1 2 3; do
  "$C" --store "$S" restore "$s" --to "$T/want$s.st" >/dev/null || fail "restore $s from cache1"
done
objects >"$T/objects0"

# ---- 1 -------------------------------------------------------------------------
export FT_S3_CACHE="$T/cache2"
AWS_SECRET_ACCESS_KEY=wrong-secret run_ckpt ls_403 --store "$S" ls
[ "$RC" -ne 0 ] || fail "ls with a wrong secret exited 0: $(cat "$T/ls_403.out")"
grep -q "refused" "$T/ls_403.out" || fail "ls with a wrong secret: $(cat "$T/ls_403.out")"
[ ! -e "$T/cache2/catalog" ] || fail "a failed build left a catalog: $(ls "$T/cache2/catalog")"
AWS_SECRET_ACCESS_KEY=wrong-secret run_ckpt gc_403 --store "$S" gc --grace 0
[ "$RC" -ne 0 ] || fail "gc with a wrong secret exited 0: $(cat "$T/gc_403.out")"
run_ckpt ls_ok --store "$S" ls
[ "$RC" -eq 0 ] && [ "$(grep -c '^testrun' "$T/ls_ok.out")" -eq 3 ] ||
  fail "ls with the right secret after a failed build: exit $RC: $(cat "$T/ls_ok.out")"
echo "ok 1: a failed first build leaves no catalog; the next one is whole"

# ---- 2 -------------------------------------------------------------------------
AWS_SECRET_ACCESS_KEY=wrong-secret run_ckpt rebuild_403 rebuild-catalog "$S"
[ "$RC" -ne 0 ] || fail "rebuild-catalog with a wrong secret exited 0: $(cat "$T/rebuild_403.out")"
for cmd in ls "gc --grace 0" "restore latest --to $T/x.st"; do
  # shellcheck disable=SC2086
  run_ckpt incomplete --store "$S" $cmd
  [ "$RC" -eq 4 ] || fail "$cmd on an incomplete catalog: exit $RC: $(cat "$T/incomplete.out")"
  grep -q "incomplete.*ckpt rebuild-catalog $S" "$T/incomplete.out" ||
    fail "$cmd does not say the catalog is incomplete and what to run: $(cat "$T/incomplete.out")"
done
[ ! -e "$T/x.st" ] || fail "restore from an incomplete catalog wrote $T/x.st"
run_ckpt rebuild_ok rebuild-catalog "$S"
[ "$RC" -eq 0 ] || fail "rebuild-catalog: exit $RC: $(cat "$T/rebuild_ok.out")"
run_ckpt ls_ok2 --store "$S" ls
[ "$RC" -eq 0 ] && [ "$(grep -c '^testrun' "$T/ls_ok2.out")" -eq 3 ] ||
  fail "ls after the rebuild completed: exit $RC: $(cat "$T/ls_ok2.out")"
echo "ok 2: an interrupted rebuild-catalog is refused by ls, gc and restore until one completes"

# ---- 3 -------------------------------------------------------------------------
# cache2's catalog stays as it is while cache1's host commits steps 4 and 5
export FT_S3_CACHE="$T/cache1"
# (another width: the writer's bytes depend on the step's index in its run)
"$W" --store "$S" --start 4 --steps 2 --world 2 --layers 2 --embd 128 --chunk-mib 1 >"$T/w2" 2>&1 ||
  fail "writer 2: $(cat "$T/w2")"
for s in 4 5; do
  "$C" --store "$S" restore "$s" --to "$T/want$s.st" >/dev/null || fail "restore $s from cache1"
done
objects >"$T/objects1"
export FT_S3_CACHE="$T/cache2"
for dry in --dry-run ""; do
  # shellcheck disable=SC2086
  run_ckpt gc_behind --store "$S" gc --grace 0 $dry
  [ "$RC" -eq 4 ] || fail "gc $dry on a catalog behind the bucket: exit $RC: $(cat "$T/gc_behind.out")"
  grep -q "gc refused, nothing deleted.* 2 checkpoint manifests that its catalog does not list" \
    "$T/gc_behind.out" || fail "gc $dry: $(cat "$T/gc_behind.out")"
  grep -q "manifests/testrun/00000000000000000004.json, manifests/testrun/00000000000000000005.json" \
    "$T/gc_behind.out" || fail "gc $dry does not name the manifests: $(cat "$T/gc_behind.out")"
  grep -q "rebuild-catalog $S" "$T/gc_behind.out" || fail "gc $dry: $(cat "$T/gc_behind.out")"
done
objects >"$T/objects2"
diff "$T/objects1" "$T/objects2" >"$T/objdiff" || fail "gc deleted from the bucket: $(cat "$T/objdiff")"
export FT_S3_CACHE="$T/cache3"
for s in 1 2 3 4 5; do
  "$C" --store "$S" restore "$s" --to "$T/got$s.st" >/dev/null 2>"$T/e" ||
    fail "restore $s from a new cache: $(cat "$T/e")"
  cmp "$T/want$s.st" "$T/got$s.st" || fail "step $s restored from a new cache differs"
done
export FT_S3_CACHE="$T/cache2"
run_ckpt rebuild2 rebuild-catalog "$S"
[ "$RC" -eq 0 ] || fail "rebuild-catalog: $(cat "$T/rebuild2.out")"
run_ckpt gc_ok --store "$S" gc --grace 0
[ "$RC" -eq 0 ] || fail "gc after the rebuild: exit $RC: $(cat "$T/gc_ok.out")"
grep -q "deleted 0 checkpoints, 0 chunks" "$T/gc_ok.out" || fail "gc after the rebuild: $(cat "$T/gc_ok.out")"
echo "ok 3: gc refuses a catalog behind the bucket, naming the manifests; nothing deleted, all restore"

# ---- 4 -------------------------------------------------------------------------
# a chunk of step 3 truncated in cache1: the restore reads the bucket's copy
# (and puts it back in the cache) instead of failing or falling back
export FT_S3_CACHE="$T/cache1"
hex=$(grep -A40 '"param/h.0"' "$T/cache1/manifests/testrun/00000000000000000003.json" |
  grep -oE '[0-9a-f]{64}' | head -n 1)
victim="$T/cache1/chunks/${hex:0:2}/$hex"
[ -f "$victim" ] || fail "no chunk file $victim in the cache"
truncate -s 100 "$victim"
run_ckpt evict --store "$S" restore 3 --to "$T/again3.st"
[ "$RC" -eq 0 ] || fail "restore 3 with a truncated cache chunk: exit $RC: $(cat "$T/evict.out")"
cmp "$T/want3.st" "$T/again3.st" || fail "restore 3 after the cache repair differs"
[ "$(stat -c %s "$victim")" -gt 100 ] || fail "the cache copy of $hex was not replaced"
echo "ok 4: a damaged cache chunk is read again from the bucket"

# ---- 5 -------------------------------------------------------------------------
# host B (cache2) marked step 2 GOOD (its cache holds that mark); host A then
# pinned it: the bucket's mark says so, B's copy does not. B's gc follows
# the bucket's mark, keeps step 2 and records the pin in its catalog.
export FT_S3_CACHE="$T/cache2"
"$C" --store "$S" ls >/dev/null || fail "ls from cache2"
mark=manifests/testrun/00000000000000000002.mark
printf '{"run":"testrun","step":2,"state":"good","pinned":false}\n' >"$T/cache2/$mark"
printf '{"run":"testrun","step":2,"state":"good","pinned":true}\n' >"$T/mark.pinned"
aws_s3 s3 cp --quiet "$T/mark.pinned" "s3://ckpts/run-a/$mark" || fail "cannot put the bucket's mark"
run_ckpt gc_pin --store "$S" gc --keep-last 1 --grace 0
[ "$RC" -eq 0 ] || fail "gc with a pin set from another host: exit $RC: $(cat "$T/gc_pin.out")"
grep -q "1 checkpoint pinned or marked in the store but not in the catalog" "$T/gc_pin.out" ||
  fail "gc did not follow the bucket's mark: $(cat "$T/gc_pin.out")"
export FT_S3_CACHE="$T/cache4"
"$C" --store "$S" restore 2 --to "$T/pin2.st" >/dev/null 2>"$T/e" && cmp "$T/want2.st" "$T/pin2.st" ||
  fail "gc deleted step 2, pinned from another host: $(cat "$T/e")"
export FT_S3_CACHE="$T/cache2"
"$C" --store "$S" ls | grep -qE '^testrun +2 .*good\* ' ||
  fail "cache2's catalog does not show the pin: $("$C" --store "$S" ls)"
echo "ok 5: gc follows a pin another host set (the bucket's mark over the cache's copy)"
echo "PASS: s3_gc_safety"
