/*
 * doctor_gpu: the node doctor's GPU check (doctor.h), where the worker
 * trains on a GPU (nodes.device: cuda):
 *
 *   the compute check's GEMMs (the same shapes and data as the CPU's) on
 *   the device through the training kernels (bf16 operands, cuBLASLt),
 *   their bf16 results SHA-256'd: bit-reproducible for one GPU model, CUDA
 *   runtime and cuBLASLt, which the platform string gets;
 *   NVML's memory health of the device (wd_nvml_health_of): uncorrected
 *   ECC errors since the driver loaded, pages pending retirement, rows
 *   pending remapping or a failed remapping each fail the check (the
 *   node's fault). Without NVML (no driver library; cuemu) that part says
 *   so and passes.
 *
 * Built with the CUDA kernels (FT_WITH_CUDA: the GPU build, and cuemu's
 * worker); elsewhere the check fails saying the worker has no CUDA.
 */
#include "doctor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "ft_hex.h"
#ifdef FT_WITH_CUDA
#include "kernels_cuda.h"
#include "wd_nvml.h"
#endif

static cJSON *failed(cJSON *c, const char *why) {
  cJSON_AddBoolToObject(c, "ok", 0);
  cJSON_AddStringToObject(c, "blame", "node");
  cJSON_AddStringToObject(c, "detail", why);
  return c;
}

#ifndef FT_WITH_CUDA
cJSON *doctor_gpu_check(const doctor_opts *o, char *plat, size_t len) {
  (void)o, (void)plat, (void)len;
  return failed(cJSON_CreateObject(), "this worker was built without CUDA");
}
#else

/* The GEMMs on the device into md; NULL or what went wrong (why). */
static const char *gemms(const doctor_opts *o, kc_ctx *ctx, EVP_MD_CTX *md, double *flops,
                         double *secs, char *why, size_t wl) {
  const char *fail = NULL;
  uint64_t st = DOCTOR_SEED;
  for (int g = 0; g < DOCTOR_NGEMMS && !fail; g++) {
    int N = DOCTOR_GEMMS[g][0], C = DOCTOR_GEMMS[g][1], OC = DOCTOR_GEMMS[g][2];
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *h = malloc(sizeof(float) * nw);
    uint16_t *hy = malloc(sizeof(uint16_t) * ny);
    float *d32 = NULL;
    kc_bf16 *dx = NULL, *dw = NULL, *db = NULL, *dy = NULL;
    int rc = !h || !hy ? FT_ENOMEM : FT_OK;
    if (!rc)
      rc = kc_malloc((void **)&d32, sizeof(float) * nw);
    if (!rc)
      rc = kc_malloc((void **)&dx, 2 * nx);
    if (!rc)
      rc = kc_malloc((void **)&dw, 2 * nw);
    if (!rc)
      rc = kc_malloc((void **)&db, 2 * (size_t)OC);
    if (!rc)
      rc = kc_malloc((void **)&dy, 2 * ny);
    /* x, w, b: the CPU check's values, rounded to bf16 on the device */
    struct {
      kc_bf16 *d;
      size_t n;
      float scale;
    } in[3] = {{dx, nx, 1.0f}, {dw, nw, 0.05f}, {db, (size_t)OC, 0.1f}};
    for (int k = 0; k < 3 && !rc; k++) {
      doctor_fill(h, in[k].n, &st, in[k].scale);
      rc = kc_memcpy_h2d(d32, h, sizeof(float) * in[k].n);
      if (!rc)
        rc = kc_f32_to_bf16(in[k].d, d32, in[k].n, NULL);
    }
    if (!rc)
      rc = kc_sync();
    double t0 = ft_now_s();
    if (!rc)
      rc = kc_matmul_fwd(ctx, dy, NULL, dx, dw, db, N, C, OC, NULL);
    if (!rc)
      rc = kc_sync();
    *secs += ft_now_s() - t0;
    *flops += 2.0 * N * C * OC;
    if (!rc)
      rc = kc_memcpy_d2h(hy, dy, 2 * ny);
    if (rc) {
      snprintf(why, wl, "GEMM %d (%dx%dx%d) on the GPU: %s", g, N, C, OC, ft_err_detail());
      fail = why;
    } else {
      if (g == 0 && ft_failpoint_at("doctor_gpu_flip_bit", o->node))
        hy[123] ^= 1u << 2; /* one low mantissa bit of the bf16 result */
      EVP_DigestUpdate(md, hy, 2 * ny);
    }
    kc_free(d32), kc_free(dx), kc_free(dw), kc_free(db), kc_free(dy);
    free(h), free(hy);
  }
  return fail;
}

/* NVML's memory health of the device at pci into c; 0, or 1 when it is bad
 * (why filled). */
static int nvml_health(cJSON *c, const char *pci, char *why, size_t wl) {
  wd_nvml_health hl;
  int rc = wd_nvml_health_of(getenv("FT_NVML_LIB"), pci, &hl);
  if (rc) {
    cJSON_AddStringToObject(c, "nvml", ft_err_detail());
    return 0;
  }
  cJSON *n = cJSON_AddObjectToObject(c, "nvml");
  cJSON_AddNumberToObject(n, "ecc_uncorrected", (double)hl.ecc_uncorrected);
  cJSON_AddNumberToObject(n, "retired_pending", hl.retired_pending);
  cJSON_AddNumberToObject(n, "remap_pending", hl.remap_pending);
  cJSON_AddNumberToObject(n, "remap_failed", hl.remap_failed);
  if (hl.ecc_uncorrected > 0)
    snprintf(why, wl, "NVML: %lld uncorrected ECC error(s) on %s since the driver loaded",
             hl.ecc_uncorrected, pci);
  else if (hl.remap_failed > 0)
    snprintf(why, wl, "NVML: a row remapping failed on %s (the board needs service)", pci);
  else if (hl.retired_pending > 0 || hl.remap_pending > 0)
    snprintf(why, wl, "NVML: %s on %s wait for a GPU reset",
             hl.retired_pending > 0 ? "retired pages" : "remapped rows", pci);
  else
    return 0;
  return 1;
}

cJSON *doctor_gpu_check(const doctor_opts *o, char *plat, size_t len) {
  double t0 = ft_now_s();
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "name", "gpu");
  cJSON_AddNumberToObject(c, "device", o->device);
  char name[128] = "", vers[96] = "", pci[32] = "", why[400];
  int maj = 0, min = 0, n = kc_device_count();
  if (o->device >= n) {
    snprintf(why, sizeof why, "device %d: the node has %d usable GPU(s)", o->device, n);
    return failed(c, why);
  }
  if (kc_set_device(o->device) ||
      kc_device_info(o->device, name, sizeof name, NULL, NULL, &maj, &min) ||
      kc_versions(vers, sizeof vers) || kc_device_pci(o->device, pci, sizeof pci)) {
    snprintf(why, sizeof why, "device %d: %s", o->device, ft_err_detail());
    return failed(c, why);
  }
  size_t pl = strlen(plat);
  snprintf(plat + pl, len > pl ? len - pl : 0, " | %s sm_%d%d | %s", name, maj, min, vers);
  cJSON_AddStringToObject(c, "model", name);
  cJSON_AddStringToObject(c, "pci", pci);
  kc_ctx *ctx = NULL;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  double flops = 0, secs = 0;
  const char *fail = NULL;
  if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL))
    fail = "cannot start SHA-256";
  else if (kc_ctx_new(&ctx)) {
    snprintf(why, sizeof why, "cuBLASLt: %s", ft_err_detail());
    fail = why;
  } else
    fail = gemms(o, ctx, md, &flops, &secs, why, sizeof why);
  unsigned char h[32];
  unsigned hl = 0;
  char hex[65];
  if (!fail && (!EVP_DigestFinal_ex(md, h, &hl) || hl != 32))
    fail = "SHA-256 failed";
  kc_ctx_free(ctx);
  EVP_MD_CTX_free(md);
  if (fail)
    return failed(c, fail);
  ft_hex_encode(h, 32, hex);
  cJSON_AddStringToObject(c, "hash", hex);
  cJSON_AddNumberToObject(c, "tflops", secs > 0 ? round(flops / secs / 1e9) / 1e3 : 0);
  int bad = nvml_health(c, pci, why, sizeof why);
  cJSON_AddNumberToObject(c, "ms", round((ft_now_s() - t0) * 1e4) / 10);
  if (bad)
    return failed(c, why);
  cJSON_AddBoolToObject(c, "ok", 1);
  return c;
}
#endif
