#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: builds and runs every libFuzzer target.
#
# Every tests/fuzz/fuzz_NAME.c is one target: a decoder of bytes that come
# from outside (the wire protocol, manifests, the run file and --set, llm.c
# shards and model files, S3 XML, the AWS credentials file). This script
#   1. configures a build of its own (FUZZ_BUILD_DIR, default build-fuzz/,
#      gitignored) with clang and -DFT_FUZZ=ON, and builds only the target
#      fuzz_all (the harnesses and the libraries they link; tests/fuzz.cmake);
#   2. per target, replays every regression input in tests/fuzz/crashers/NAME/
#      (each must pass), then fuzzes for SECONDS (default 30) over a copy of
#      tests/fuzz/seeds/NAME/ plus those regression inputs, FUZZ_JOBS (2)
#      targets at a time;
#   3. prints one closing line per target (execs, seconds) and a summary
#      `fuzz: N passed, M failed`.
# Exit status: 0 when every target passed; 1 on any crash, leak, timeout or
# out-of-memory (the reproducer's path is printed, with the command that
# replays it); 2 when the build fails. FUZZ_TARGETS="wire runfile" limits the
# run to those names.
#
# A crash found here is fixed in the decoder and its reproducer kept as
# tests/fuzz/crashers/NAME/<short description> so that every later run
# replays it first.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
SECONDS_PER=${1:-30}
BUILD=${FUZZ_BUILD_DIR:-$SRC/build-fuzz}
JOBS=${FUZZ_JOBS:-2}
case "$SECONDS_PER" in '' | *[!0-9]*)
  echo "usage: scripts/fuzz.sh [SECONDS]" >&2
  exit 2
  ;;
esac

# ---- build ----------------------------------------------------------------
if ! command -v clang >/dev/null 2>&1 || ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang and clang++ are needed (scripts/install-deps.sh installs them)" >&2
  exit 2
fi
mkdir -p "$BUILD"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  if ! CC=clang CXX=clang++ cmake -S "$SRC" -B "$BUILD" -DFT_FUZZ=ON -DWITH_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD/configure.log" 2>&1; then
    cat "$BUILD/configure.log" >&2
    echo "fuzz: configure failed (log: $BUILD/configure.log)" >&2
    exit 2
  fi
fi
if ! cmake --build "$BUILD" --target fuzz_all -j"$JOBS" >"$BUILD/build.log" 2>&1; then
  grep -E -B2 -A6 "error" "$BUILD/build.log" | head -60 >&2
  echo "fuzz: build failed (log: $BUILD/build.log)" >&2
  exit 2
fi

# ---- targets --------------------------------------------------------------
names=()
for src in "$SRC"/tests/fuzz/fuzz_*.c; do
  n=$(basename "$src" .c)
  n=${n#fuzz_}
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $n "* ]]; then
    continue
  fi
  names+=("$n")
done
if [ ${#names[@]} -eq 0 ]; then
  echo "fuzz: no targets" >&2
  exit 2
fi

# Leaks inside third-party libraries that cannot be fixed here (each one
# explained in the file); everything else leaking fails the run.
export LSAN_OPTIONS="suppressions=$SRC/tests/fuzz/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

RUN=$BUILD/fuzz-run
rm -rf "$RUN"
mkdir -p "$RUN"

# One target: replay, then fuzz. Writes $RUN/NAME/result: "ok EXECS SECS" or
# "fail WHAT", and its log lines into $RUN/NAME/report.
fuzz_one() {
  local n=$1 bin=$BUILD/fuzz/fuzz_$1 w=$RUN/$1
  local crashers=$SRC/tests/fuzz/crashers/$1
  mkdir -p "$w/corpus" "$w/artifacts"
  if [ -d "$SRC/tests/fuzz/seeds/$n" ]; then
    cp -R "$SRC/tests/fuzz/seeds/$n/." "$w/corpus/"
  fi
  local opts=(-timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1
    "-artifact_prefix=$w/artifacts/")
  local regress=()
  if [ -d "$crashers" ]; then
    while IFS= read -r -d '' f; do regress+=("$f"); done < <(find "$crashers" -type f -print0 | sort -z)
  fi
  if [ ${#regress[@]} -gt 0 ]; then
    if ! (cd "$w" && "$bin" "${opts[@]}" "${regress[@]}") >"$w/replay.log" 2>&1; then
      local bad
      bad=$(grep -o "Running: .*" "$w/replay.log" | tail -1 | cut -d' ' -f2-)
      {
        tail -40 "$w/replay.log"
        echo "fuzz: $n: regression input fails: ${bad:-see $w/replay.log}"
        echo "fuzz: $n: replay with: $bin ${bad:-$crashers}"
      } >"$w/report"
      echo "fail regression" >"$w/result"
      return 0
    fi
  fi
  local dirs=("$w/corpus")
  [ ${#regress[@]} -gt 0 ] && dirs+=("$crashers")
  local t0=$SECONDS rc=0
  (cd "$w" && "$bin" "${opts[@]}" -max_total_time="$SECONDS_PER" "${dirs[@]}") >"$w/fuzz.log" 2>&1 || rc=$?
  local secs=$((SECONDS - t0))
  local execs
  execs=$(grep -o "stat::number_of_executed_units: [0-9]*" "$w/fuzz.log" | awk '{print $2}' | tail -1)
  if [ $rc -eq 0 ]; then
    echo "ok ${execs:-0} $secs" >"$w/result"
    return 0
  fi
  local repro
  repro=$(find "$w/artifacts" -type f | head -1)
  {
    grep -E -A30 "^==[0-9]+==ERROR|runtime error:|ALARM: working on the last Unit|out-of-memory|deadly signal" "$w/fuzz.log" | head -40
    echo "fuzz: $n: failed after ${execs:-?} execs, $secs s (log: $w/fuzz.log)"
    echo "fuzz: $n: reproducer: ${repro:-none written}"
    [ -n "$repro" ] && echo "fuzz: $n: replay with: $bin $repro"
  } >"$w/report"
  echo "fail $(basename "${repro:-crash}" | cut -d- -f1)" >"$w/result"
}

running=0
for n in "${names[@]}"; do
  if [ ! -x "$BUILD/fuzz/fuzz_$n" ]; then
    mkdir -p "$RUN/$n"
    echo "fail missing" >"$RUN/$n/result"
    echo "fuzz: $n: $BUILD/fuzz/fuzz_$n was not built" >"$RUN/$n/report"
    continue
  fi
  if [ $running -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$n" &
  running=$((running + 1))
done
wait || true

passed=0
failed=0
for n in "${names[@]}"; do
  read -r state a b <"$RUN/$n/result" || state=fail
  if [ "$state" = ok ]; then
    echo "fuzz: $n: ok, $a execs in $b s"
    passed=$((passed + 1))
  else
    cat "$RUN/$n/report" 2>/dev/null || true
    echo "fuzz: $n: FAILED ($a)"
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
