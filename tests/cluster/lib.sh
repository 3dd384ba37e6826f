# shellcheck shell=bash
# tests/cluster/lib.sh: what the cluster chaos tests share (sourced after
# setting -euo pipefail). A test calls ftc_begin N to get a namespace Slurm
# cluster of N compute hosts (tests/cluster/cluster.sh) with a run
# directory on its shared file system, then runs `supervise` inside an
# allocation exactly as a user would (salloc in the head namespace, the
# slurm launcher), injects faults, and checks the outcome against a
# fault-free reference run of the same run file with the local launcher.
#
# Variables after ftc_begin: SRC (the source tree), C (the cluster's dir),
# RUN (the run directory, shared), TMP (scratch, removed at exit).
# FT_BIN (the build's bin/) comes from CTest.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
: "${FT_BIN:?FT_BIN must point to build/bin}"

fail() {
  echo "FAIL: $*" >&2
  if [ -n "${FTC_ST:-}" ]; then
    [ -f "$FTC_ST.out" ] && { echo "== supervise" && tail -25 "$FTC_ST.out"; } >&2
    for f in "$FTC_ST"/logs/*.log; do
      [ -f "$f" ] && { echo "== $f" && grep -v '^[0-9]*: step ' "$f" | tail -6; } >&2
    done
  fi
  exit 1
}
pass() { echo "PASS: $*"; }

# ftc_begin N: skips (77) where no cluster can run; else brings up N hosts.
ftc_begin() {
  local reason
  reason=$(cluster_can_run) || {
    echo "$reason"
    exit 77
  }
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/ftcchaos.XXXXXX")
  C=$TMP/cluster
  trap ftc_end EXIT
  cluster_up "$C" "$1" || fail "cluster_up $1"
  RUN=$C/shared/run
  mkdir -p "$RUN"
  "$FT_BIN/ftdata" synth --out "$RUN/synth" --tokens 300000 >/dev/null
}

ftc_end() {
  [ -n "${FTC_MOTO:-}" ] && kill "$FTC_MOTO" 2>/dev/null
  cluster_down "$C"
  if [ -n "${FTC_KEEP:-}" ]; then
    echo "kept $TMP (FTC_KEEP)"
  else
    rm -rf "$TMP"
  fi
}

# ftc_runfile FILE STEPS STORE [sed expressions...]: the demo's tiny model
# as a 2-node run under the slurm launcher, checkpoints every 10 steps,
# heartbeat timeout 3 s, the store STORE.
ftc_runfile() {
  local out=$1 steps=$2 store=$3
  shift 3
  sed -e '/^chaos:/d' -e '/^# The demo loses/,$d' \
    -e "s|^data:.*|data: {train: \"$RUN/synth_train_*.bin\", val: \"$RUN/synth_val_*.bin\"}|" \
    -e 's|  launcher: local|  launcher: slurm|' -e "s|  steps: 300|  steps: $steps|" \
    -e "s|  store: .*|  store: \"$store\"|" -e 's|  every_steps: 25|  every_steps: 10|' \
    -e 's|  heartbeat_timeout_s: 10|  heartbeat_timeout_s: 3|' "$@" \
    "$SRC/examples/demo.yaml" >"$out"
  grep -q 'launcher: slurm' "$out" || fail "could not write $out"
}

# ftc_supervise STATE NODES RUNFILE [supervise args...]: supervise inside a
# NODES-node allocation (salloc from the head), in the background; its pid
# in FTC_SUP, its output in STATE.out. The caller's environment (FT_*,
# AWS_*) reaches supervise and, through srun, the workers. The workers take
# at least FTC_MIN_STEP_MS (150) ms a step (failpoint min_step_ms), so a
# fault injected after the first commits lands mid-run however fast this
# machine trains the tiny model (15 steps/s when nothing else runs).
ftc_supervise() {
  local st=$1 n=$2 rf=$3
  shift 3
  FTC_ST=$st
  local fp="min_step_ms=${FTC_MIN_STEP_MS:-150}"
  (cd "$RUN" && FT_FAILPOINTS="${FT_FAILPOINTS:+$FT_FAILPOINTS,}$fp" cluster_exec head salloc --no-kill -N"$n" "$FT_BIN/supervise" --state "$st" \
    --worker "$FT_BIN/worker" "$@" "$rf") >"$st.out" 2>&1 &
  FTC_SUP=$!
}

# ftc_count STATE EVENT: how many EVENT lines STATE/events.jsonl holds.
ftc_count() {
  local n
  n=$(grep -c "\"event\":\"$2\"" "$1/events.jsonl" 2>/dev/null) || true
  echo "${n:-0}"
}

# ftc_wait STATE EVENT [N [SECONDS]]: until EVENT has appeared N times
# (default 1, 120 s); fails if supervise ends first or time runs out.
ftc_wait() {
  local st=$1 ev=$2 n=${3:-1} secs=${4:-120} i
  for ((i = 0; i < secs * 10; i++)); do
    [ "$(ftc_count "$st" "$ev")" -ge "$n" ] && return 0
    kill -0 "$FTC_SUP" 2>/dev/null || break
    sleep 0.1
  done
  [ "$(ftc_count "$st" "$ev")" -ge "$n" ] || fail "no $ev (x$n) within ${secs}s"
}

# ftc_wait_event STATE PYEXPR [SECONDS]: until an event e with PYEXPR true
# has appeared (default 120 s); fails if supervise ends first.
ftc_wait_event() {
  local st=$1 cond=$2 secs=${3:-120} i
  for ((i = 0; i < secs * 4; i++)); do
    python3 - "$st/events.jsonl" "$cond" <<'PY' && return 0
import json, sys
try:
    ev = [json.loads(l) for l in open(sys.argv[1])]
except (OSError, ValueError):
    sys.exit(1)
sys.exit(0 if any(eval(sys.argv[2], {}, {"e": e}) for e in ev) else 1)
PY
    kill -0 "$FTC_SUP" 2>/dev/null || break
    sleep 0.25
  done
  fail "no event with $cond within ${secs}s"
}

# ftc_finish: waits for supervise; fails unless it exited 0.
ftc_finish() {
  local rc=0
  wait "$FTC_SUP" || rc=$?
  [ $rc -eq 0 ] || fail "supervise exited $rc"
}

# ftc_events STATE PYTHON: runs PYTHON with ev = the list of events (dicts)
# and h = run_started's hosts; it asserts what it must.
ftc_events() {
  python3 - "$1/events.jsonl" "$2" <<'PY' || fail "events check failed (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
h = next(e for e in ev if e["event"] == "run_started").get("hosts", [])
def named(name, **kw):
    return [e for e in ev if e["event"] == name and all(e.get(k) == v for k, v in kw.items())]
exec(sys.argv[2])
PY
}

# ftc_active_host STATE: a host of the current gang (its last node).
ftc_active_host() {
  ftc_events "$1" '
gen = named("generation_started")[-1]
print(h[gen["nodes"][-1]])'
}

# ftc_workers_on HOST: pids of worker processes in HOST's namespace (pids
# are not per namespace here, so look at the network namespace's members).
ftc_workers_on() {
  local p
  for p in $(ip netns pids "$(_ftc_ns "$1")" 2>/dev/null); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = worker ] && echo "$p"
  done
  return 0
}

# ftc_reference RUNFILE STEPS: the same run without faults, with the local
# launcher on this machine, into its own store; prints that store's URI.
ftc_reference() {
  local rf=$1 ref=$TMP/ref
  mkdir -p "$ref"
  sed -e 's|  launcher: slurm|  launcher: local|' -e "s|  store: .*|  store: \"local:$ref/store\"|" \
    "$rf" >"$ref/run.yaml"
  "$FT_BIN/supervise" --state "$ref/state" --worker "$FT_BIN/worker" "$ref/run.yaml" \
    >"$ref/out" 2>&1 || {
    tail -20 "$ref/out" >&2
    fail "the reference run failed"
  }
  echo "local:$ref/store"
}

# ftc_ckpt ARGS...: ckpt run in the head namespace (where the supervisor
# ran: it reaches the cluster's S3 endpoint and sees the same files).
ftc_ckpt() {
  cluster_exec head "$FT_BIN/ckpt" "$@"
}

# ftc_same_weights STORE REF_STORE STEP: the two stores' checkpoints of STEP
# restore to identical model files.
ftc_same_weights() {
  ftc_ckpt --store "$1" --run gpt2-tiny restore "$3" --to "$TMP/a.safetensors" >/dev/null ||
    fail "ckpt restore $3 from $1"
  ftc_ckpt --store "$2" --run gpt2-tiny restore "$3" --to "$TMP/b.safetensors" >/dev/null ||
    fail "ckpt restore $3 from the reference"
  cmp -s "$TMP/a.safetensors" "$TMP/b.safetensors" ||
    fail "step $3's weights differ from the fault-free reference run's"
  rm -f "$TMP/a.safetensors" "$TMP/b.safetensors"
}

# ftc_verify_all STORE: ckpt verify passes on every committed checkpoint.
ftc_verify_all() {
  local steps s
  steps=$(ftc_ckpt --store "$1" --run gpt2-tiny ls --json | python3 -c '
import json, sys
print(" ".join(str(c["step"]) for c in json.load(sys.stdin) if c["state"] in ("committed", "good")))')
  [ -n "$steps" ] || fail "no committed checkpoint in $1"
  for s in $steps; do
    ftc_ckpt --store "$1" --run gpt2-tiny verify "$s" >/dev/null || fail "ckpt verify $s"
  done
  echo "ckpt verify: $(echo "$steps" | wc -w) committed checkpoints whole"
}

# ftc_goodput STATE [FAULTS]: prints the run's goodput and per-fault times.
ftc_goodput() {
  if [ -n "${2:-}" ]; then
    python3 "$SRC/chaos/goodput.py" "$1/events.jsonl" --faults "$2"
  else
    python3 "$SRC/chaos/goodput.py" "$1/events.jsonl"
  fi
}

# ftc_fault FILE KIND: records that a fault of KIND is injected now.
ftc_fault() {
  python3 -c 'import json, sys, time; print(json.dumps({"ts": time.time(), "kind": sys.argv[1]}))' \
    "$2" >>"$1"
}

# ftc_moto: moto_server with authentication in the head namespace, on the
# head's bridge address; exports AWS_* and FT_S3_ENDPOINT=http://head:PORT
# and creates the bucket $1.
ftc_moto() {
  local port=9000 i
  python3 -c 'import moto.server, boto3' >/dev/null 2>&1 ||
    fail "moto_server cannot run here (python3 lacks moto/boto3; scripts/install-deps.sh)"
  cluster_exec head python3 "$SRC/chaos/moto_auth.py" --host 0.0.0.0 --port "$port" \
    --keys "$TMP/s3keys" >"$TMP/moto.log" 2>&1 &
  FTC_MOTO=$!
  for ((i = 0; i < 600; i++)); do
    [ -s "$TMP/s3keys" ] && break
    kill -0 "$FTC_MOTO" 2>/dev/null || break
    sleep 0.1
  done
  [ -s "$TMP/s3keys" ] || {
    cat "$TMP/moto.log" >&2
    fail "moto did not start in the head namespace"
  }
  read -r AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY <"$TMP/s3keys"
  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
  export AWS_EC2_METADATA_DISABLED=true AWS_SHARED_CREDENTIALS_FILE=/nonexistent
  export AWS_CONFIG_FILE=/nonexistent FT_S3_ENDPOINT="http://head:$port"
  cluster_exec head aws --endpoint-url "$FT_S3_ENDPOINT" s3api create-bucket --bucket "$1" \
    >/dev/null || fail "create-bucket $1"
}
