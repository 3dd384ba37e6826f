#!/usr/bin/env bash
# Builds here with the CUDA parts on and gathers what the GPU tests and
# benchmarks need into gpu-bundle/ (git-ignored), for a GPU machine that has
# a CUDA driver but none of this project's Debian libraries:
#
#   gpu-bundle/bin/      build/bin/* (worker, ftdata, supervise, ckpt, bench_*), stripped copies
#   gpu-bundle/tests/    build/tests/* (the test programs), stripped copies
#   gpu-bundle/lib.tar.gz  (env.sh unpacks it into lib/; gzip keeps the bundle
#                        under the 64 MiB a device call carries)
#                        every shared library they link that the GPU machine
#                        may lack or have older: all of ldd's list except glibc's
#                        own (libc, libm, libdl, libpthread, librt, ld-linux) and
#                        the driver (libcuda.so.1), which must come from the
#                        GPU machine. libstdc++ and libgcc_s are included.
#   gpu-bundle/device-libs.txt  the CUDA toolkit's large libraries (cuBLAS,
#                        cuBLASLt, NCCL, ...: hundreds of MiB) left out; env.sh
#                        finds them on the GPU machine (/usr/local/cuda, or the
#                        nvidia-* wheels next to PyTorch). GPU_BUNDLE_CUDA_LIBS=1
#                        copies them too.
#   gpu-bundle/env.sh    `source` it on the GPU machine: FT_BIN, FT_SRC, FT_BUILD,
#                        LD_LIBRARY_PATH, PATH
#   gpu-bundle/run-gpu-tests.sh  the tests CTest labels `gpu`, with their
#                        commands and environment rewritten to the bundle
#
# The bundle lives in the repository root and expects the same checkout
# beside it on the GPU machine (the scripts under bench/ and tests/).
#
# usage: scripts/gpu-bundle.sh
#   BUILD_DIR (build)       the build folder (configured with -DWITH_CUDA=ON)
#   GPU_BUNDLE_NO_BUILD=1   use BUILD_DIR as it is, do not (re)build
#   GPU_BUNDLE_CUDA_LIBS=1  also copy the CUDA toolkit's large libraries
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
OUTD=$ROOT/gpu-bundle

if [ "${GPU_BUNDLE_NO_BUILD:-0}" != 1 ]; then
  BUILD_DIR="$BUILD_DIR" scripts/build.sh -DWITH_CUDA=ON
fi
BUILD=$(cd "$BUILD_DIR" && pwd)
if ! grep -q '^WITH_CUDA:STRING=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "gpu-bundle: $BUILD is not configured with -DWITH_CUDA=ON" >&2
  exit 1
fi
for b in worker ftdata bench_gpu_copy; do
  [ -x "$BUILD/bin/$b" ] || { echo "gpu-bundle: $BUILD/bin/$b was not built" >&2; exit 1; }
done

rm -rf "${OUTD:?}"
mkdir -p "$OUTD/bin" "$OUTD/tests" "$OUTD/lib"

is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# ---- programs: stripped copies ----------------------------------------------------
elves=()
for sub in bin tests; do
  [ -d "$BUILD/$sub" ] || continue
  for f in "$BUILD/$sub"/*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    cp -p "$f" "$OUTD/$sub/"
    if is_elf "$f"; then
      strip --strip-unneeded "$OUTD/$sub/$(basename "$f")"
      elves+=("$f")
    fi
  done
done

# ---- shared libraries -------------------------------------------------------------
# glibc's own and the driver: always from the GPU machine.
system_lib() {
  case $1 in
  linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
    libcuda.so* | libnvidia-ml.so*) return 0 ;;
  esac
  return 1
}
# the CUDA toolkit's big libraries: found on the GPU machine unless asked for
device_lib() {
  [ "${GPU_BUNDLE_CUDA_LIBS:-0}" = 1 ] && return 1
  case $1 in
  libcublas.so* | libcublasLt.so* | libnccl.so* | libcudnn*.so* | libcufft*.so* | libcurand.so* | \
    libcusparse*.so* | libcusolver*.so* | libnvrtc*.so* | libnvJitLink.so* | libnvvm.so*) return 0 ;;
  esac
  return 1
}
: >"$OUTD/device-libs.txt"
missing=0
declare -A seen=()
for f in "${elves[@]}"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    if system_lib "$name"; then
      continue
    elif device_lib "$name"; then
      echo "$name" >>"$OUTD/device-libs.txt"
    elif [ "$path" = "not" ] || [ ! -e "$path" ]; then
      echo "gpu-bundle: $(basename "$f") needs $name, which is not found here" >&2
      missing=1
    else
      cp -L "$path" "$OUTD/lib/$name"
      chmod u+w "$OUTD/lib/$name"
    fi
  done < <(ldd "$f" 2>/dev/null)
done
[ $missing = 0 ] || exit 1
sort -u -o "$OUTD/device-libs.txt" "$OUTD/device-libs.txt"
# Packed, so that the bundle travels in under 64 MiB (OpenBLAS alone is 36
# MiB): env.sh unpacks lib.tar.gz into lib/ the first time it is sourced.
libsize=$(du -sb "$OUTD/lib" | cut -f1)
tar czf "$OUTD/lib.tar.gz" -C "$OUTD" lib
rm -rf "${OUTD:?}/lib"

# ---- env.sh ----------------------------------------------------------------------
cat >"$OUTD/env.sh" <<'EOF'
# Source this on the GPU machine, from the repository root or anywhere:
#   source gpu-bundle/env.sh && bench/gpu_train.sh
# Sets FT_BIN, FT_SRC, FT_BUILD, FT_BUNDLE, PATH and LD_LIBRARY_PATH (the
# bundle's libraries first, then the folders holding the CUDA libraries in
# device-libs.txt, then what was there before). FT_PY_LD_LIBRARY_PATH keeps
# the LD_LIBRARY_PATH from before, for python3/PyTorch (bench/gpu_train.sh
# runs python with it: the bundle's libstdc++ may be older than the one
# PyTorch was built against). Sourcing it twice is harmless.
_ftb=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export FT_BUNDLE="$_ftb"
export FT_SRC="$(cd "$_ftb/.." && pwd)"
export FT_BIN="$_ftb/bin"
export FT_BUILD="$_ftb"
if [ -z "${FT_PY_LD_LIBRARY_PATH+x}" ]; then export FT_PY_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"; fi
if [ -z "${FT_PY_PATH+x}" ]; then export FT_PY_PATH="$PATH"; fi
export PATH="$_ftb/bin:$FT_PY_PATH"
_ftlib="$_ftb/lib"
if [ -f "$_ftb/lib.tar.gz" ] && [ ! -f "$_ftlib/.unpacked" ]; then
  if ! { tar xzf "$_ftb/lib.tar.gz" -C "$_ftb" && : >"$_ftlib/.unpacked"; } 2>/dev/null; then
    # a read-only bundle: unpack under TMPDIR instead
    _ftt="${TMPDIR:-/tmp}/ftsup-gpu-bundle.$(id -u)"
    mkdir -p "$_ftt" && tar xzf "$_ftb/lib.tar.gz" -C "$_ftt" && _ftlib="$_ftt/lib"
  fi
fi
_ftdirs=""
_ftpy=$(LD_LIBRARY_PATH="$FT_PY_LD_LIBRARY_PATH" python3 -c \
  'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
while read -r _ftso; do
  [ -n "$_ftso" ] || continue
  # already where the dynamic loader looks?
  if ldconfig -p 2>/dev/null | awk -v s="$_ftso" '$1 == s { f = 1 } END { exit !f }'; then continue; fi
  _ftfound=""
  for _ftd in ${FT_PY_LD_LIBRARY_PATH//:/ } /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda-*/lib64 /usr/local/nvidia/lib64 ${_ftpy:+$_ftpy/nvidia/cu13/lib $_ftpy/nvidia/*/lib}; do
    if [ -e "$_ftd/$_ftso" ]; then _ftfound=$_ftd; break; fi
  done
  if [ -z "$_ftfound" ]; then
    echo "gpu-bundle/env.sh: $_ftso not found on this machine (CUDA toolkit or PyTorch's nvidia wheels)" >&2
  else
    case ":$_ftdirs:" in *":$_ftfound:"*) ;; *) _ftdirs="${_ftdirs:+$_ftdirs:}$_ftfound" ;; esac
  fi
done <"$_ftb/device-libs.txt"
export LD_LIBRARY_PATH="$_ftlib${_ftdirs:+:$_ftdirs}${FT_PY_LD_LIBRARY_PATH:+:$FT_PY_LD_LIBRARY_PATH}"
unset _ftb _ftlib _ftt _ftdirs _ftpy _ftso _ftfound _ftd
EOF

# ---- run-gpu-tests.sh: CTest's `gpu` tests, rewritten to the bundle ----------------------
(cd "$BUILD" && ctest -L gpu --show-only=json-v1) >"$OUTD/.tests.json"
python3 - "$OUTD/.tests.json" "$BUILD" "$ROOT" >"$OUTD/run-gpu-tests.sh" <<'EOF'
import json, sys
tests, build, src = json.load(open(sys.argv[1]))["tests"], sys.argv[2], sys.argv[3]

def dq(s):  # a double-quoted shell word, the build and source folders as ${B} and ${S}
    out, i = "", 0
    while i < len(s):
        if s.startswith(build, i):
            out += "${B}"; i += len(build)
        elif s.startswith(src, i):
            out += "${S}"; i += len(src)
        else:
            c = s[i]
            out += "\\" + c if c in '\\"$`' else c
            i += 1
    return '"' + out + '"'

print('''#!/usr/bin/env bash
# The tests CTest labels `gpu` (written by scripts/gpu-bundle.sh), run from the
# bundle: source env.sh first. Exit 0 when none failed (skipped ones: 77).
B=$(cd "$(dirname "$0")" && pwd)
S=$(cd "$B/.." && pwd)
[ -n "${FT_BUNDLE:-}" ] || . "$B/env.sh"
pass=0 fail=0 skip=0
t() {  # t NAME TIMEOUT ENV... -- CMD...
  local name=$1 tmo=$2; shift 2
  # GPU_TEST_TIMEOUT_MAX caps CTest's timeout (scripts/gpu-checklist.sh sets it)
  if [ -n "${GPU_TEST_TIMEOUT_MAX:-}" ] && [ "$tmo" -gt "$GPU_TEST_TIMEOUT_MAX" ]; then tmo=$GPU_TEST_TIMEOUT_MAX; fi
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local t0=$SECONDS
  (cd "$B" && env "${envs[@]}" timeout "$tmo" "$@"); local rc=$?
  case $rc in
  0) pass=$((pass + 1)); echo "PASS $name ($((SECONDS - t0)) s)" ;;
  77) skip=$((skip + 1)); echo "SKIP $name" ;;
  *) fail=$((fail + 1)); echo "FAIL $name (exit $rc)" ;;
  esac
}''')
for t in tests:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    envs = props.get("ENVIRONMENT", [])
    if isinstance(envs, str):
        envs = [envs]
    cmd = t.get("command") or []
    if not cmd:
        continue
    tmo = int(float(props.get("TIMEOUT", 1500)))
    print("t " + " ".join([dq(t["name"]), str(tmo)] + [dq(e) for e in envs] + ["--"] + [dq(c) for c in cmd]))
print('echo "gpu tests: $pass passed, $fail failed, $skip skipped"')
print('[ $fail = 0 ]')
EOF
rm -f "$OUTD/.tests.json"
chmod +x "$OUTD/run-gpu-tests.sh"

size=$(du -sb "$OUTD" | cut -f1)
echo "gpu-bundle: $(ls "$OUTD/bin" | wc -l) programs, $(ls "$OUTD/tests" | wc -l) tests," \
  "$(tar tzf "$OUTD/lib.tar.gz" | grep -c '^lib/.')" "libraries ($((libsize / 1048576)) MiB, packed in lib.tar.gz):" \
  "$((size / 1048576)) MiB in $OUTD"
if [ -s "$OUTD/device-libs.txt" ]; then
  echo "  left to the GPU machine (env.sh looks for them there): $(tr '\n' ' ' <"$OUTD/device-libs.txt")"
fi
if [ "$size" -gt $((64 * 1048576)) ]; then
  echo "gpu-bundle: warning: over 64 MiB" >&2
fi
echo "on the GPU machine, from this checkout with gpu-bundle/ beside it:"
echo "  source gpu-bundle/env.sh && bench/gpu_train.sh      # the GPU benchmark"
echo "  gpu-bundle/run-gpu-tests.sh                         # the tests labelled gpu"
