#!/usr/bin/env bash
# The node doctor's GPU check (nodes.device: cuda), on cuemu: the compute
# check's GEMMs on the device through the CUDA kernels, hashed, and NVML's
# memory health of the device.
#  1. healthy: exit 0; the report has a gpu check with its hash, the
#     platform names the device, its compute capability and the CUDA and
#     cuBLASLt versions; without the driver library NVML is "not
#     available", which does not fail the node. Two runs give the same
#     bits (the compute hash covers the CPU's and the GPU's).
#  2. one bit of a GPU GEMM result flipped (failpoint doctor_gpu_flip_bit):
#     the CPU part is unchanged, the GPU hash and the node's compute hash
#     differ, --expect fails (exit 1).
#  3. NVML (a stand-in library, FT_NVML_LIB: no GPU here) reporting
#     uncorrected ECC errors, then rows waiting for a remap: exit 1, the
#     reason named.
. "$(dirname "$0")/../integration/lib.sh"
W=$FT_BIN/worker
FAKE_NVML=$FT_BUILD/tests/libfake_nvml.so
[ -f "$FAKE_NVML" ] || fail "no $FAKE_NVML (built with the watchdog tests)"
D=(--json --set nodes.device=cuda --set doctor.mem_mb=1 --set doctor.disk_mb=0)
field() { # field FILE EXPR: a value of the report
  python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
c = {x['name']: x for x in r['checks']}
print($2)" "$1"
}

"$W" --doctor "${D[@]}" >"$TMP/a.json" || fail "a healthy cuemu node failed: $(cat "$TMP/a.json")"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in r["checks"]}
g = c["gpu"]
assert r["ok"] and g["ok"] and len(g["hash"]) == 64, r
assert "cuemu" in r["platform"] and "sm_90" in r["platform"] and "CUDA " in r["platform"], r
assert "cuBLASLt" in r["platform"], r
assert g["nvml"].startswith("NVML not available"), g
assert c["compute"]["hash"] != c["compute"]["cpu_hash"], c
' "$TMP/a.json" || fail "the GPU check's report: $(cat "$TMP/a.json")"
"$W" --doctor "${D[@]}" >"$TMP/b.json" || fail "the second healthy run failed"
[ "$(field "$TMP/a.json" "c['gpu']['hash']")" = "$(field "$TMP/b.json" "c['gpu']['hash']")" ] ||
  fail "two runs of the GPU GEMMs gave different bits"
hash=$(field "$TMP/a.json" "c['compute']['hash']")
pass "cuemu: the GPU check passes, the same bits twice; NVML absent is not a failure"

rc=0
FT_FAILPOINTS=doctor_gpu_flip_bit=-1 "$W" --doctor "${D[@]}" --expect "$hash" >"$TMP/f.json" || rc=$?
[ $rc = 1 ] || fail "a flipped GPU GEMM bit: exit $rc, want 1: $(cat "$TMP/f.json")"
[ "$(field "$TMP/f.json" "c['compute']['cpu_hash']")" = "$(field "$TMP/a.json" "c['compute']['cpu_hash']")" ] ||
  fail "the CPU part changed"
[ "$(field "$TMP/f.json" "c['gpu']['hash']")" != "$(field "$TMP/a.json" "c['gpu']['hash']")" ] ||
  fail "the flipped bit did not change the GPU hash"
pass "cuemu: one flipped bit of a GPU GEMM result changes the node's compute hash (exit 1 with --expect)"

rc=0
FT_NVML_LIB=$FAKE_NVML FAKE_NVML_ECC=2 "$W" --doctor "${D[@]}" >"$TMP/e.json" || rc=$?
[ $rc = 1 ] || fail "2 uncorrected ECC errors: exit $rc, want 1"
[ "$(field "$TMP/e.json" "c['gpu']['nvml']['ecc_uncorrected']")" = 2 ] &&
  field "$TMP/e.json" "c['gpu']['detail']" | grep -q "2 uncorrected ECC error" ||
  fail "the ECC errors are not named: $(cat "$TMP/e.json")"
rc=0
FT_NVML_LIB=$FAKE_NVML FAKE_NVML_REMAP=pending "$W" --doctor "${D[@]}" >"$TMP/r.json" || rc=$?
[ $rc = 1 ] || fail "rows pending a remap: exit $rc, want 1"
field "$TMP/r.json" "c['gpu']['detail']" | grep -q "remapped rows .* wait for a GPU reset" ||
  fail "the pending remap is not named: $(cat "$TMP/r.json")"
FT_NVML_LIB=$FAKE_NVML "$W" --doctor "${D[@]}" >"$TMP/h.json" ||
  fail "a healthy board through NVML failed: $(cat "$TMP/h.json")"
pass "cuemu: NVML's uncorrected ECC errors and rows pending a remap fail the node, named"
