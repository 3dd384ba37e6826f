/*
 * doctor: the checks a worker runs on its own node before it may join a
 * gang (and `worker --doctor` by hand). Each check gives a verdict and its
 * figures:
 *
 *   compute  a fixed set of GEMMs through the training kernels and one
 *            training step (forward, backward, AdamW) of a tiny GPT-2, all
 *            on fixed data; the SHA-256 of every result. The kernels are
 *            bit-deterministic for a given CPU model and BLAS kernel (the
 *            report's "platform"), so two healthy nodes of one platform
 *            report the same hash: the supervisor compares them, and a node
 *            whose hash differs from the others' computes wrong numbers.
 *            Its own verdict fails only on a non-finite loss, or when
 *            rounds > 1 and a round's hash differs from the first's.
 *   memory   mem_mb written with patterns (each word its own address mixed
 *            with a seed, then the complement) and read back.
 *   disk     disk_mb written to a new file in dir, fsync'd, read back and
 *            compared, removed. A full, read-only, missing or forbidden
 *            folder is the storage's fault, not the node's ("blame":
 *            "storage"); an I/O error or different bytes are the node's.
 *
 * The report (JSON text):
 *   {"ok": bool (no check failed by the node's own fault), "platform": str,
 *    "ms": total, "checks": [
 *      {"name": "compute", "ok", "hash": hex, "rounds"?, "gemm_gflops", "loss", "ms",
 *       "detail"?},
 *      {"name": "memory", "ok", "mb", "gb_s", "ms", "detail"?},
 *      {"name": "disk", "ok", "blame"?: "node"|"storage", "dir", "mb",
 *       "write_mb_s", "read_mb_s", "ms", "detail"?},
 *      {"name": "gpu", ...} (doctor_gpu_check, where device >= 0)]}
 * A check sized 0 is left out.
 *
 * Failpoints (docs/failpoints.md), stand-ins for a bad chip: doctor_flip_bit=N
 * flips one bit of a GEMM result on node N; doctor_mem_flip=N one bit of the
 * memory test's buffer between its write and its read.
 */
#ifndef DOCTOR_H
#define DOCTOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct doctor_opts {
  int mem_mb;      /* 0: no memory check */
  int disk_mb;     /* 0: no disk check */
  const char *dir; /* the disk check's folder */
  int node;        /* this worker's node (failpoints); -1: standalone */
  int rounds;      /* the compute check this many times, each the same bits
                      as the first or it fails (a burn-in); 0 or 1: once */
  int device;      /* the CUDA device of the GPU check; -1: no GPU check */
} doctor_opts;

/* The GPU check (doctor_gpu.c; with device >= 0): the compute check's
 * GEMMs on the device, hashed, and NVML's memory health. Returns its
 * report object {"name": "gpu", "ok", "device", "model", "pci", "hash",
 * "tflops", "nvml": {...} or why not, "ms", "detail"?}; appends " | GPU
 * model sm_XY | CUDA and cuBLASLt versions" to plat (len bytes). With it,
 * the compute check's "hash" covers both (its CPU part is "cpu_hash"), so
 * the supervisor compares nodes of one CPU and GPU platform as before. */
struct cJSON;
struct cJSON *doctor_gpu_check(const doctor_opts *o, char *plat, size_t len);
/* For both checks: the GEMM shapes (N, C, OC: a GPT-2 124M block's
 * projections on 64 tokens), the data's seed and its values. */
#define DOCTOR_NGEMMS 3
extern const int DOCTOR_GEMMS[DOCTOR_NGEMMS][3];
#define DOCTOR_SEED 0x5eed0d0c7012ull
void doctor_fill(float *x, size_t n, uint64_t *st, float scale);

/* Runs every check. *report: malloc'd JSON text as above; *ok: the
 * report's "ok". FT_OK when the checks ran (whatever they found); FT_ENOMEM
 * when the report cannot be built. */
int doctor_run(const doctor_opts *o, char **report, int *ok);

/* The link check, a collective every rank of a gang calls with the same
 * bytes before the first step: an all-reduce of known data checked element
 * by element, then each link of the ring timed in both directions
 * (comm_shift, distance 1 and W-1, each rank timing its receive: the link
 * into it; the best of 3 of `bytes` each), every
 * rank's times summed into rank 0's by one more all-reduce. *report (rank
 * 0 only; NULL elsewhere), JSON text:
 *   {"kind": "links", "world", "bytes", "allreduce_ok": bool,
 *    "links": [{"from": rank, "to": rank, "mb_s"}, ...]}
 * report may be NULL on every rank but 0. FT_ESTATE when the comm has no
 * point-to-point shift (NCCL); a collective's error otherwise. */
struct comm;
int doctor_links(struct comm *c, size_t bytes, char **report);

/* The folder the disk check uses: dir (doctor.dir) when set, else a
 * "local:DIR" store's DIR, else TMPDIR, else /tmp. Into buf. store is the
 * URI as this process opens it (a relative DIR is this process's current
 * directory's, as ckpt_store_open takes it): a gang worker's --store from
 * the supervisor, never the run file's raw checkpoint.store (relative to
 * the run file's folder, or the state directory's for the default). */
const char *doctor_dir(const char *dir, const char *store, char *buf, unsigned len);

#endif
