#!/bin/bash
# s3_chaos: store-level S3 faults (chaos/s3_faults.py between the store and
# moto, which checks every signature), with the checkpoint test writer
# standing in for training:
#   A  the server answers 500 for a while      -> retried; every commit lands
#   B  the server hangs for a while            -> stall timeout, retried
#   C  the server is down during checkpoints   -> commits wait, land when back
#   D  down for longer than the retry budget   -> the commit is reported as
#      failed (writer exits 1), nothing partial is listed; later commits work
#   E  FT_S3_REQUIRE=local while the server hangs -> every commit returns
#      (training never waits for S3), and the close abandons the requests
#      in flight after FT_S3_DRAIN_S instead of retrying them; the journal
#      uploads them when it is back
#   F  a chunk deleted / corrupted in the bucket -> restore uses the cache;
#      verify repairs the bucket; a bucket-only restore of a chunk with no
#      good copy anywhere fails loudly (exit 1), never with wrong bytes
#   G  FT_S3_REQUIRE=local, a retention GC running beside the commits when
#      the server goes down: the GC waits for the bucket (it reads the
#      checkpoints' marks there), the commits do not wait for the GC
# At the end, from an empty cache (the bucket alone), every checkpoint the
# writer reported committed is listed and verifies: nothing committed is lost.
set -u
W="$FT_BUILD/tests/ckpt_testwriter"
C="$FT_BIN/ckpt"
T=$(mktemp -d "${TMPDIR:-/tmp}/s3_chaos.XXXXXX")
. "$FT_SRC/tests/integration/s3_lib.sh"
PROXY_PID=
trap '[ -n "$PROXY_PID" ] && kill $PROXY_PID 2>/dev/null; s3_stop; rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
s3_start
s3_mkbucket chaos
UP=$S3_PORT
PP=$(free_port)
echo ok >"$T/mode"
python3 "$FT_SRC/chaos/s3_faults.py" --listen "$PP" --upstream "$UP" --mode-file "$T/mode" \
  --log "$T/proxy.log" >"$T/proxy.out" 2>&1 &
PROXY_PID=$!
s3_wait_port "$PP" "$PROXY_PID" || fail "proxy did not start: $(cat "$T/proxy.out")"
export FT_S3_ENDPOINT="http://127.0.0.1:$PP"
export FT_S3_TIMEOUT_S=2 FT_S3_RETRIES=30 FT_S3_RETRY_BUDGET_S=40 FT_S3_DRAIN_S=30
S=s3://chaos/run
ARGS=(--world 2 --layers 2 --embd 64 --chunk-mib 1)
committed() { awk '/^committed/{print $2}' "$1" | tr '\n' ' '; }

# fault FILE-MODE AFTER DURATION: sets the mode after AFTER s for DURATION s
fault() {
  (sleep "$2"; echo "$1" >"$T/mode"; sleep "$3"; echo ok >"$T/mode") &
  FPID=$!
}

# ---- A --------------------------------------------------------------------------
export FT_S3_CACHE="$T/cA"
: >"$T/proxy.log"
fault 500 0.3 3
"$W" --store "$S" --start 1 --steps 4 "${ARGS[@]}" >"$T/wA" 2>&1 || fail "A: writer: $(cat "$T/wA")"
wait "$FPID"
[ "$(committed "$T/wA")" = "1 2 3 4 " ] || fail "A: committed: $(committed "$T/wA")"
n500=$(grep -c '^500 ' "$T/proxy.log")
[ "$n500" -gt 0 ] || fail "A: no request met the injected 500s (the test did not test)"
echo "ok A: $n500 requests answered 500; all 4 commits landed"

# ---- B --------------------------------------------------------------------------
export FT_S3_CACHE="$T/cB"
: >"$T/proxy.log"
fault hang 0.3 4
"$W" --store "$S" --start 5 --steps 3 "${ARGS[@]}" >"$T/wB" 2>&1 || fail "B: writer: $(cat "$T/wB")"
wait "$FPID"
[ "$(committed "$T/wB")" = "5 6 7 " ] || fail "B: committed: $(committed "$T/wB")"
nh=$(grep -c '^hang ' "$T/proxy.log")
[ "$nh" -gt 0 ] || fail "B: no request met the hang"
echo "ok B: $nh requests hung; all 3 commits landed"

# ---- C --------------------------------------------------------------------------
export FT_S3_CACHE="$T/cC"
: >"$T/proxy.log"
fault down 0.3 4
"$W" --store "$S" --start 8 --steps 3 "${ARGS[@]}" >"$T/wC" 2>&1 || fail "C: writer: $(cat "$T/wC")"
wait "$FPID"
[ "$(committed "$T/wC")" = "8 9 10 " ] || fail "C: committed: $(committed "$T/wC")"
echo "ok C: server down 4 s during checkpoints; all 3 commits landed when it came back"

# ---- D --------------------------------------------------------------------------
export FT_S3_CACHE="$T/cD"
"$C" --store "$S" ls >/dev/null || fail "D: ls"
echo down >"$T/mode"
FT_S3_RETRY_BUDGET_S=3 FT_S3_DRAIN_S=1 "$W" --store "$S" --start 11 --steps 2 "${ARGS[@]}" >"$T/wD" 2>&1 &&
  fail "D: the writer succeeded with the bucket down and require=both"
grep -q "commit" "$T/wD" && grep -q "not durable in the bucket" "$T/wD" || fail "D: error was: $(cat "$T/wD")"
[ -z "$(committed "$T/wD")" ] || fail "D: a commit was reported: $(committed "$T/wD")"
echo ok >"$T/mode"
"$C" --store "$S" show 11 >/dev/null 2>&1 && fail "D: the failed checkpoint 11 is listed"
grep -qF -e "$AWS_ACCESS_KEY_ID" -e "$AWS_SECRET_ACCESS_KEY" "$T/wD" && fail "D: credentials in an error message"
"$W" --store "$S" --start 11 --steps 2 "${ARGS[@]}" >"$T/wD2" 2>&1 || fail "D: retry writer: $(cat "$T/wD2")"
echo "ok D: commit reported failed while down; later commits work. The report:"
sed 's/^/    /' "$T/wD" | cut -c1-400

# ---- E --------------------------------------------------------------------------
export FT_S3_CACHE="$T/cE"
"$C" --store "$S" ls >/dev/null || fail "E: ls"
: >"$T/proxy.log"
echo hang >"$T/mode"
FT_S3_REQUIRE=local FT_S3_DRAIN_S=1 FT_S3_UPLOAD_THREADS=2 "$W" --store "$S" --start 13 --steps 3 "${ARGS[@]}" >"$T/wE" 2>&1 ||
  fail "E: require=local writer with a hanging server: $(cat "$T/wE")"
[ "$(committed "$T/wE")" = "13 14 15 " ] || fail "E: committed: $(committed "$T/wE")"
# at close, after FT_S3_DRAIN_S, the uploads in flight are abandoned: each
# of the 2 upload threads sent a request or two (the stall timeout is 2 s),
# none went on retrying (30 attempts, 40 s) against the hanging server
nh=$(grep -c '^hang ' "$T/proxy.log")
[ "$nh" -ge 1 ] && [ "$nh" -le 4 ] || fail "E: $nh requests met the hang, want 1-4 (2 threads, abandoned at close)"
echo ok >"$T/mode"
sleep 0.3
FT_S3_REQUIRE=local "$C" --store "$S" rebuild-catalog >/dev/null || fail "E: reopen"
[ "$(ls "$T/cE/uploads" | wc -l)" -eq 0 ] || fail "E: journal left: $(ls "$T/cE/uploads")"
echo "ok E: require=local: 3 commits with the server hanging ($nh requests hung, abandoned at close); uploaded once it answered"

# ---- F --------------------------------------------------------------------------
export FT_S3_CACHE="$T/cA"
k1=$(aws --endpoint-url "http://127.0.0.1:$UP" s3 ls --recursive s3://chaos/run/chunks/ | awk '{print $4}' | sort | sed -n 1p)
k2=$(aws --endpoint-url "http://127.0.0.1:$UP" s3 ls --recursive s3://chaos/run/chunks/ | awk '{print $4}' | sort | sed -n 2p)
h1=$(basename "$k1")
aws --endpoint-url "http://127.0.0.1:$UP" s3 rm "s3://chaos/$k1" >/dev/null
echo junk >"$T/junk"
aws --endpoint-url "http://127.0.0.1:$UP" s3 cp "$T/junk" "s3://chaos/$k2" >/dev/null
# which checkpoint uses k1? try every step from A's cache: all must restore
for s in 1 2 3 4; do
  "$C" --store "$S" restore "$s" --to "$T/f$s.st" >/dev/null 2>"$T/e" || fail "F: restore $s from the cache: $(cat "$T/e")"
done
# a bucket-only reader meets the damage: fails loudly, never wrong bytes
export FT_S3_CACHE="$T/cF"
bad=0
for s in 1 2 3 4; do
  "$C" --store "$S" restore "$s" --to "$T/g$s.st" >/dev/null 2>"$T/e"
  rc=$?
  if [ $rc -ne 0 ]; then
    [ $rc -eq 1 ] || fail "F: restore $s exit $rc: $(cat "$T/e")"
    bad=$((bad + 1))
  else
    cmp "$T/f$s.st" "$T/g$s.st" || fail "F: bucket-only restore $s gave different bytes"
  fi
done
[ $bad -gt 0 ] || fail "F: the damage in the bucket was not seen by a bucket-only restore"
# cache A still holds good copies: verify repairs the bucket
export FT_S3_CACHE="$T/cA"
out=$("$C" --store "$S" verify 2>&1) || fail "F: verify with cache A: $out"
echo "$out" | grep -q "in the bucket from the cache" || fail "F: no bucket repair: $out"
echo "ok F: bucket chunk deleted+corrupted: cache restores, $bad bucket-only restores refused, verify repaired"

# ---- G --------------------------------------------------------------------------
# The GC starts after checkpoint 16 (its first step, listing the manifests,
# while the server answers), pauses 3 s (failpoint gc_pause_ms), and the
# server goes down during the pause; then it reads the marks from the bucket
# and waits. The writer commits 17 and 18 4.5 s after the GC started: they
# must land while the GC still waits (a GC that held the store's lock
# through its bucket reads made them wait for the whole retry budget).
export FT_S3_CACHE="$T/cG"
"$C" --store "$S" ls >/dev/null || fail "G: ls"
FT_S3_REQUIRE=local FT_FAILPOINTS=gc_pause_ms=3000 "$W" --store "$S" --start 16 --steps 3 --gc-beside 4500 \
  "${ARGS[@]}" >"$T/wG" 2>&1 &
WPID=$!
for _ in $(seq 600); do grep -q '^gc started' "$T/wG" && break; sleep 0.1; done
grep -q '^gc started' "$T/wG" || fail "G: the GC did not start: $(cat "$T/wG")"
sleep 1
echo down >"$T/mode"
for _ in $(seq 1200); do
  grep -q '^committed 18' "$T/wG" && break
  kill -0 $WPID 2>/dev/null || break
  sleep 0.1
done
echo ok >"$T/mode"
wait $WPID || fail "G: writer: $(cat "$T/wG")"
order=$(grep -E '^(committed 18|gc returned)' "$T/wG" | tr '\n' ';')
case "$order" in
"committed 18;gc returned 0;") ;;
*) fail "G: want checkpoint 18 committed while the GC waited for the bucket, then the GC done; the writer printed: $(tr '\n' ';' <"$T/wG")" ;;
esac
echo "ok G: require=local: checkpoints 17 and 18 committed while a GC waited for the bucket that was down"

# ---- nothing committed is lost ---------------------------------------------------
export FT_S3_CACHE="$T/cFinal"
all="$(committed "$T/wA")$(committed "$T/wB")$(committed "$T/wC")$(committed "$T/wD2")$(committed "$T/wE")$(committed "$T/wG")"
for s in $all; do
  "$C" --store "$S" show "$s" >/dev/null 2>&1 || fail "checkpoint $s was committed but is not in the bucket"
done
"$C" --store "$S" verify >"$T/v" 2>&1 || fail "final bucket-only verify: $(cat "$T/v")"
echo "PASS: s3_chaos: $(echo $all | wc -w) committed checkpoints, all in the bucket and verified"
