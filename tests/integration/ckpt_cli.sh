#!/bin/bash
# ckpt_cli: the `ckpt` program end to end against a real store: help and
# exit codes, ls/show/restore/diff/pin/gc, run selection (an unknown --run
# is exit 3), --json of every command, restore refusing non-regular targets,
# gc removing stale manifest temp files, and reading while another process
# holds the writer lock.
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_cli.XXXXXX")
wpid=
trap '[ -n "$wpid" ] && kill -9 $wpid 2>/dev/null; rm -rf "$T"' EXIT
S="local:$T/store"
fail() { echo "FAIL: $*"; exit 1; }
expect_rc() { # expected-rc command...
  local want=$1; shift
  "$@" >"$T/stdout" 2>"$T/stderr"
  local rc=$?
  [ $rc -eq "$want" ] || fail "'$*' exited $rc, expected $want: $(cat "$T/stderr")"
}

expect_rc 0 "$C" --help
grep -q "Exit codes" "$T/stdout" || fail "--help does not document exit codes"
grep -q "Examples" "$T/stdout" || fail "--help has no examples"
unset CKPT_STORE
expect_rc 2 "$C" ls
grep -q "CKPT_STORE" "$T/stderr" || fail "no hint about CKPT_STORE"
expect_rc 2 "$C" --store "$S" frobnicate
expect_rc 3 "$C" --store "local:$T/nothing" ls
[ ! -e "$T/nothing" ] || fail "a reader created a store"
expect_rc 3 "$C" --store "local:$T/nothing" gc
[ ! -e "$T/nothing" ] || fail "gc created a store"

"$W" --store "$S" --steps 3 --every 100 --start 100 --world 3 >/dev/null || fail "writer failed"
expect_rc 0 "$C" --store "$S" ls
grep -q "^RUN .*STEP .*STATE .*NEW .*RATIO" "$T/stdout" || fail "ls has no header"
[ "$(grep -c '^testrun' "$T/stdout")" -eq 3 ] || fail "ls does not list 3 checkpoints"
expect_rc 0 "$C" --store "$S" ls --json
grep -q '"new_bytes"' "$T/stdout" || fail "ls --json lacks new_bytes"
expect_rc 0 "$C" --store "$S" show 200
grep -q "param/wte" "$T/stdout" || fail "show lacks param/wte"
expect_rc 3 "$C" --store "$S" show 150
grep -q "ckpt ls" "$T/stderr" || fail "not-found error does not say what to do"
expect_rc 2 "$C" --store "$S" show abc
expect_rc 0 "$C" --store "$S" restore 300 --to "$T/m.safetensors"
[ -s "$T/m.safetensors" ] || fail "no safetensors written"
head -c 400 "$T/m.safetensors" | grep -q "wte.weight" || fail "model has no wte.weight"
expect_rc 0 "$C" --store "$S" restore latest --to "$T/r1.safetensors" --world 2 --rank 1
head -c 4000 "$T/r1.safetensors" | grep -q '"rank":"1"' || fail "shard metadata lacks the rank"
expect_rc 2 "$C" --store "$S" restore 300 --to "$T/x" --world 2
# --to never replaces anything but a regular file: a FIFO, a link, a device
# (our own node standing in for /dev/full, so a regression cannot hurt the box)
mkfifo "$T/fifo"
expect_rc 2 "$C" --store "$S" restore 300 --to "$T/fifo"
grep -q "is a FIFO" "$T/stderr" || fail "FIFO target: $(cat "$T/stderr")"
[ -p "$T/fifo" ] || fail "restore replaced a FIFO"
ln -s "$T/m.safetensors" "$T/link"
expect_rc 2 "$C" --store "$S" restore 300 --to "$T/link"
[ -L "$T/link" ] || fail "restore replaced a symbolic link"
if [ "$(id -u)" = 0 ] && mknod "$T/full" c 1 7 2>/dev/null; then
  expect_rc 2 "$C" --store "$S" restore 300 --to "$T/full"
  grep -q "is a character device" "$T/stderr" || fail "device target: $(cat "$T/stderr")"
  [ -c "$T/full" ] || fail "restore replaced a character device with a file"
fi
ls "$T" | grep -q '\.tmp\.' && fail "a refused restore left a temp file"
mkdir "$T/out"
expect_rc 0 "$C" --store "$S" restore 300 --to "$T/out"
[ -s "$T/out/model.safetensors" ] || fail "restore into a folder: $(cat "$T/stdout")"
expect_rc 0 "$C" --store "$S" restore 300 --to "$T/out" --world 2 --rank 1
[ -s "$T/out/rank1-of-2.safetensors" ] || fail "shard restore into a folder: $(cat "$T/stdout")"
expect_rc 0 "$C" --store "$S" restore 300 --to "$T/new/" --world 2 --rank 0 # ending in '/': made
[ -s "$T/new/rank0-of-2.safetensors" ] || fail "shard restore into a new folder: $(cat "$T/stderr")"
expect_rc 0 "$C" --store "$S" restore 300 --to "$T/m.safetensors" # an existing file is replaced
expect_rc 2 "$C" --store "$S" restore 300
expect_rc 0 "$C" --store "$S" diff 100 300
grep -q "param/h.0 .*changed" "$T/stdout" || fail "diff does not show param/h.0 changed"
grep -q "lnf" "$T/stdout" && fail "diff lists the unchanged lnf tensors"

# several runs: ambiguous without --run
"$W" --store "$S" --run other --steps 1 >/dev/null || fail "writer failed"
expect_rc 2 "$C" --store "$S" show 100
grep -q "other" "$T/stderr" && grep -q "testrun" "$T/stderr" || fail "ambiguity error does not list runs"
expect_rc 0 "$C" --store "$S" --run testrun show 100

# pin, gc
expect_rc 0 "$C" --store "$S" --run testrun pin 100
expect_rc 0 "$C" --store "$S" gc --dry-run --keep-last 1 --grace 0
grep -q "would delete 1 checkpoint" "$T/stdout" || fail "dry run: $(cat "$T/stdout")"
expect_rc 0 "$C" --store "$S" gc --keep-last 1 --grace 0
grep -q "deleted 1 checkpoint" "$T/stdout" || fail "gc: $(cat "$T/stdout")"
expect_rc 0 "$C" --store "$S" --run testrun ls
[ "$(grep -c '^testrun' "$T/stdout")" -eq 2 ] || fail "gc kept the wrong set: $(cat "$T/stdout")"
grep -q "committed\*" "$T/stdout" || fail "pinned marker missing"
expect_rc 0 "$C" --store "$S" verify

# an unknown run is an error (exit 3), never "0 checkpoints verified, no problems"
for cmd in verify ls "pin 100" "show 100" gc; do
  expect_rc 3 "$C" --store "$S" --run typo $cmd
  grep -q "no run 'typo' (its runs: other, testrun)" "$T/stderr" ||
    fail "--run typo $cmd: $(cat "$T/stderr")"
done

# --json: one object per command, with stable keys
jkeys() { # FILE KEY...: the object in FILE has "command" and every KEY
  python3 - "$@" <<'PY' || fail "--json output of $(head -c 300 "$1")"
import json, sys
o = json.load(open(sys.argv[1]))
assert isinstance(o, dict) and "command" in o, o
missing = [k for k in sys.argv[2:] if k not in o]
assert not missing, missing
PY
}
expect_rc 0 "$C" --store "$S" --run testrun --json verify
jkeys "$T/stdout" checked damaged marked_bad checkpoints
grep -q '"ok":\s*true' "$T/stdout" || fail "verify --json: $(cat "$T/stdout")"
grep -q "verified" "$T/stdout" && fail "verify --json printed text"
expect_rc 0 "$C" --store "$S" --json gc --dry-run
jkeys "$T/stdout" dry_run checkpoints_deleted chunks_deleted bytes_freed tmp_deleted sweep_only
expect_rc 0 "$C" --store "$S" --run testrun --json diff 100 300
jkeys "$T/stdout" run from to tensors_changed bytes_changed tensors
expect_rc 0 "$C" --store "$S" --run testrun --json pin 300
jkeys "$T/stdout" run step pinned
expect_rc 0 "$C" --store "$S" --run testrun --json unpin 300
jkeys "$T/stdout" run step pinned
expect_rc 0 "$C" --store "$S" --run testrun --json restore 300 --to "$T/j.safetensors"
jkeys "$T/stdout" run step state format world rank path
[ -s "$T/j.safetensors" ] || fail "restore --json wrote no file"

# temp files of manifest writes left by a crash: gc removes those older than a
# minute whose writer is gone; a fresh one, or one of a live process, stays
md="$T/store/manifests/testrun"
sleep 0 &
dead=$!
wait $dead
touch -d '2 minutes ago' "$md/00000000000000000100.json.tmp.$dead.1.1" \
  "$md/00000000000000000100.mark.tmp.$dead.1.2" "$md/00000000000000000200.json.tmp.$$.1.3"
touch "$md/00000000000000000300.json.tmp.$dead.1.4"
expect_rc 0 "$C" --store "$S" gc
grep -q "deleted 2 temp files" "$T/stdout" || fail "gc and temp files: $(cat "$T/stdout")"
[ ! -e "$md/00000000000000000100.json.tmp.$dead.1.1" ] || fail "a stale manifest temp file stayed"
[ ! -e "$md/00000000000000000100.mark.tmp.$dead.1.2" ] || fail "a stale mark temp file stayed"
[ -e "$md/00000000000000000200.json.tmp.$$.1.3" ] || fail "gc removed a live writer's temp file"
[ -e "$md/00000000000000000300.json.tmp.$dead.1.4" ] || fail "gc removed a fresh temp file"
rm -f "$md"/*.tmp.*

# another process holds the writer lock: readers work, writers get 5
"$W" --store "$S" --run busy --steps 1000000 >/dev/null 2>&1 &
wpid=$!
for _ in $(seq 50); do [ -s "$T/store/catalog.lock" ] && break; sleep 0.1; done
sleep 0.3
expect_rc 5 "$C" --store "$S" --run testrun unpin 100
grep -q "locked by another writer" "$T/stderr" || fail "lock error unclear: $(cat "$T/stderr")"
expect_rc 0 "$C" --store "$S" --run testrun ls
expect_rc 0 "$C" --store "$S" --run testrun verify
grep -q "not marked bad" "$T/stderr" "$T/stdout" || true
kill -9 $wpid; wait $wpid 2>/dev/null; wpid=
expect_rc 0 "$C" --store "$S" --run testrun unpin 100
echo "ckpt_cli: ok"
