/*
 * doctor: the node doctor's checks (see doctor.h).
 */
#include "doctor.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "ft_gpt2.h"
#include "ft_hex.h"
#include "gpt2.h"
#include "kernels.h"

/* ---- the platform: what fixes the kernels' bits ------------------------------------ */

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0)
      continue;
    char *v = strchr(line, ':');
    if (!v)
      break;
    v++;
    while (*v == ' ' || *v == '\t')
      v++;
    v[strcspn(v, "\n")] = 0;
    snprintf(buf, len, "%s", v);
    break;
  }
  fclose(f);
}

/* ---- compute ----------------------------------------------------------------------- */

void doctor_fill(float *x, size_t n, uint64_t *st, float scale) {
  for (size_t i = 0; i < n; i++)
    x[i] = ((float)(gpt2_rng_next(st) >> 40) / 16777216.0f - 0.5f) * 2.0f * scale;
}

const int DOCTOR_GEMMS[DOCTOR_NGEMMS][3] = {{64, 768, 768}, {64, 768, 3072}, {64, 3072, 768}};

/* One compute round: the GEMMs and the training step, hashed into hex.
 * NULL, or what went wrong. */
static const char *compute_once(const doctor_opts *o, char hex[65], double *flops, double *gemm_s,
                                float *loss, char *why, size_t wl) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  const char *fail = NULL;
  gpt2 *m = NULL;
  int32_t *tok = NULL;
  if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
    fail = "cannot start SHA-256";
    goto out;
  }
  uint64_t st = DOCTOR_SEED;
  for (int g = 0; g < DOCTOR_NGEMMS && !fail; g++) {
    int N = DOCTOR_GEMMS[g][0], C = DOCTOR_GEMMS[g][1], OC = DOCTOR_GEMMS[g][2];
    float *x = malloc(sizeof(float) * (size_t)N * C), *w = malloc(sizeof(float) * (size_t)OC * C);
    float *b = malloc(sizeof(float) * (size_t)OC), *y = malloc(sizeof(float) * (size_t)N * OC);
    if (x && w && b && y) {
      doctor_fill(x, (size_t)N * C, &st, 1.0f);
      doctor_fill(w, (size_t)OC * C, &st, 0.05f);
      doctor_fill(b, (size_t)OC, &st, 0.1f);
      double g0 = ft_now_s();
      k_matmul_fwd(y, x, w, b, N, C, OC);
      *gemm_s += ft_now_s() - g0;
      *flops += 2.0 * N * C * OC;
      if (g == 0 && ft_failpoint_at("doctor_flip_bit", o->node)) {
        uint32_t u;
        memcpy(&u, &y[1234], 4);
        u ^= 1u << 3; /* one low mantissa bit: the loss barely moves */
        memcpy(&y[1234], &u, 4);
      }
      EVP_DigestUpdate(md, y, sizeof(float) * (size_t)N * OC);
    } else {
      fail = "out of memory for the GEMMs";
    }
    free(x), free(w), free(b), free(y);
  }
  if (fail)
    goto out;
  /* one training step of a tiny GPT-2 on fixed tokens */
  ft_gpt2_dims d = {.max_seq_len = 64,
                    .vocab_size = 256,
                    .padded_vocab_size = ft_gpt2_pad_vocab(256),
                    .n_layer = 2,
                    .n_head = 4,
                    .channels = 64};
  enum { B = 4, T = 64 };
  tok = malloc(sizeof(int32_t) * (B * T + 1));
  if (!tok || gpt2_new(&d, B, T, &m)) {
    fail = "cannot allocate the tiny model";
    goto out;
  }
  for (int i = 0; i < B * T + 1; i++)
    tok[i] = (int32_t)(gpt2_rng_next(&st) % 256);
  gpt2_init_weights(m, 20261126);
  gpt2_zero_grad(m);
  *loss = gpt2_forward(m, tok, tok + 1);
  if (!isfinite(*loss) || gpt2_backward(m, 1.0f)) {
    snprintf(why, wl, "the tiny model's training step gave a non-finite loss (%g)", (double)*loss);
    fail = why;
    goto out;
  }
  gpt2_adamw(m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
  EVP_DigestUpdate(md, loss, sizeof *loss);
  EVP_DigestUpdate(md, m->params, sizeof(float) * m->nparams);
  unsigned char h[32];
  unsigned hl = 0;
  if (!EVP_DigestFinal_ex(md, h, &hl) || hl != 32) {
    fail = "SHA-256 failed";
    goto out;
  }
  ft_hex_encode(h, 32, hex);
out:
  gpt2_free(m);
  free(tok);
  EVP_MD_CTX_free(md);
  return fail;
}

static cJSON *check_compute(const doctor_opts *o) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "name", "compute");
  double t0 = ft_now_s(), flops = 0, gemm_s = 0;
  float loss = NAN;
  char first[65] = "", hex[65], why[256];
  const char *fail = NULL;
  int rounds = o->rounds > 1 ? o->rounds : 1, r = 0;
  for (; r < rounds && !fail; r++) {
    fail = compute_once(o, hex, &flops, &gemm_s, &loss, why, sizeof why);
    if (fail)
      break;
    if (!r) {
      memcpy(first, hex, sizeof first);
    } else if (strcmp(first, hex) != 0) {
      snprintf(
          why, sizeof why,
          "round %d's result (hash %.16s...) differs from round 1's (%.16s...): this node does "
          "not compute the same bits twice",
          r + 1, hex, first);
      fail = why;
    }
  }
  if (first[0])
    cJSON_AddStringToObject(c, "hash", first);
  cJSON_AddBoolToObject(c, "ok", fail == NULL);
  if (rounds > 1)
    cJSON_AddNumberToObject(c, "rounds", r);
  if (gemm_s > 0)
    cJSON_AddNumberToObject(c, "gemm_gflops", round(flops / gemm_s / 1e9 * 10) / 10);
  if (isfinite(loss))
    cJSON_AddNumberToObject(c, "loss", loss);
  cJSON_AddNumberToObject(c, "ms", round((ft_now_s() - t0) * 1e4) / 10);
  if (fail)
    cJSON_AddStringToObject(c, "detail", fail);
  return c;
}

/* ---- memory ------------------------------------------------------------------------ */

#define MEM_MIX 0x9E3779B97F4A7C15ull

static int mem_verify(const uint64_t *a, size_t n, uint64_t flip, char *why, size_t wl) {
  for (size_t i = 0; i < n; i++) {
    uint64_t want = ((uint64_t)i * MEM_MIX) ^ flip;
    if (a[i] != want) {
      snprintf(why, wl,
               "word %zu (byte offset %zu of %zu) read 0x%016llx, wrote 0x%016llx (bits 0x%016llx "
               "differ)",
               i, i * 8, n * 8, (unsigned long long)a[i], (unsigned long long)want,
               (unsigned long long)(a[i] ^ want));
      return 1;
    }
  }
  return 0;
}

static cJSON *check_memory(const doctor_opts *o) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "name", "memory");
  double t0 = ft_now_s();
  size_t n = ((size_t)o->mem_mb << 20) / 8;
  uint64_t *a = malloc(n * 8);
  char why[256] = "";
  int bad = 0;
  if (!a) {
    snprintf(why, sizeof why, "cannot allocate %d MiB", o->mem_mb);
    bad = 1;
  }
  /* each word its own index mixed, then the complement: every bit is written
   * 0 and 1, and a word read from the wrong address differs */
  for (int pass = 0; pass < 2 && !bad; pass++) {
    uint64_t flip = pass ? ~0ull : 0;
    for (size_t i = 0; i < n; i++)
      a[i] = ((uint64_t)i * MEM_MIX) ^ flip;
    if (pass == 0 && ft_failpoint_at("doctor_mem_flip", o->node))
      a[n / 3] ^= 1ull << 17;
    __asm__ volatile("" ::: "memory"); /* read back what is in memory */
    bad = mem_verify(a, n, flip, why, sizeof why);
  }
  double s = ft_now_s() - t0;
  cJSON_AddBoolToObject(c, "ok", !bad);
  cJSON_AddNumberToObject(c, "mb", o->mem_mb);
  if (!bad && s > 0) /* two passes, each a write and a read */
    cJSON_AddNumberToObject(c, "gb_s", round(4.0 * (double)n * 8 / s / 1e9 * 100) / 100);
  cJSON_AddNumberToObject(c, "ms", round(s * 1e4) / 10);
  if (bad)
    cJSON_AddStringToObject(c, "detail", why);
  free(a);
  return c;
}

/* ---- disk -------------------------------------------------------------------------- */

/* errors of the folder, not of the node's hardware */
static int storage_errno(int e) {
  return e == ENOSPC || e == EDQUOT || e == EROFS || e == EACCES || e == EPERM || e == ENOENT ||
         e == ENOTDIR || e == ENAMETOOLONG;
}

static void fill_block(unsigned char *b, size_t len, uint64_t *st) {
  for (size_t i = 0; i + 8 <= len; i += 8) {
    uint64_t v = gpt2_rng_next(st);
    memcpy(b + i, &v, 8);
  }
}

static cJSON *check_disk(const doctor_opts *o) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "name", "disk");
  const size_t BLK = 1u << 20;
  double t0 = ft_now_s(), tw = 0, tr = 0;
  char path[1200], why[1500] = "";
  int blame_storage = 0, bad = 0, fd = -1;
  unsigned char *buf = malloc(BLK), *got = malloc(BLK);
  snprintf(path, sizeof path, "%s/.ftsup-doctor-%ld-%d", o->dir, (long)getpid(), o->node);
  if (!buf || !got) {
    snprintf(why, sizeof why, "out of memory");
    bad = 1;
    goto out;
  }
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    blame_storage = storage_errno(errno);
    snprintf(why, sizeof why, "cannot create %s: %s", path, strerror(errno));
    bad = 1;
    goto out;
  }
  uint64_t st = 0xd15cd15cull;
  for (int i = 0; i < o->disk_mb && !bad; i++) {
    fill_block(buf, BLK, &st);
    for (size_t off = 0; off < BLK;) {
      ssize_t w = write(fd, buf + off, BLK - off);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0) {
        int e = w < 0 ? errno : ENOSPC;
        blame_storage = storage_errno(e);
        snprintf(why, sizeof why, "writing %s at %zu bytes: %s", path, (size_t)i * BLK + off,
                 strerror(e));
        bad = 1;
        break;
      }
      off += (size_t)w;
    }
  }
  if (!bad && fsync(fd) != 0) {
    blame_storage = storage_errno(errno);
    snprintf(why, sizeof why, "fsync of %s: %s", path, strerror(errno));
    bad = 1;
  }
  if (!bad) /* the read-back comes from the disk, not the page cache */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  fd = -1;
  tw = ft_now_s() - t0;
  if (bad)
    goto out;
  double r0 = ft_now_s();
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, sizeof why, "cannot reopen %s: %s", path, strerror(errno));
    bad = 1;
    goto out;
  }
  st = 0xd15cd15cull;
  for (int i = 0; i < o->disk_mb && !bad; i++) {
    fill_block(buf, BLK, &st);
    size_t have = 0;
    while (have < BLK) {
      ssize_t r = read(fd, got + have, BLK - have);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0) {
        snprintf(why, sizeof why, "reading %s back at %zu bytes: %s", path, (size_t)i * BLK + have,
                 r < 0 ? strerror(errno) : "the file is shorter than written");
        bad = 1;
        break;
      }
      have += (size_t)r;
    }
    if (!bad && memcmp(buf, got, BLK) != 0) {
      size_t k = 0;
      while (buf[k] == got[k])
        k++;
      snprintf(why, sizeof why, "%s read back different bytes from offset %zu", path,
               (size_t)i * BLK + k);
      bad = 1;
    }
  }
  tr = ft_now_s() - r0;
out:
  if (fd >= 0)
    close(fd);
  unlink(path);
  free(buf);
  free(got);
  cJSON_AddBoolToObject(c, "ok", !bad);
  if (bad)
    cJSON_AddStringToObject(c, "blame", blame_storage ? "storage" : "node");
  cJSON_AddStringToObject(c, "dir", o->dir);
  cJSON_AddNumberToObject(c, "mb", o->disk_mb);
  if (!bad && tw > 0 && tr > 0) {
    cJSON_AddNumberToObject(c, "write_mb_s", round(o->disk_mb / tw * 10) / 10);
    cJSON_AddNumberToObject(c, "read_mb_s", round(o->disk_mb / tr * 10) / 10);
  }
  cJSON_AddNumberToObject(c, "ms", round((ft_now_s() - t0) * 1e4) / 10);
  if (bad)
    cJSON_AddStringToObject(c, "detail", why);
  return c;
}

/* ---- the report -------------------------------------------------------------------- */

/* With a GPU check: the compute check's "hash" becomes the SHA-256 of its
 * own ("cpu_hash") and the GPU's, so one hash per node still says whether
 * it computes what the others of its (CPU and GPU) platform do. */
static void both_hashes(cJSON *compute, const cJSON *gpu) {
  const char *ch = cJSON_GetStringValue(cJSON_GetObjectItem(compute, "hash"));
  const char *gh = cJSON_GetStringValue(cJSON_GetObjectItem(gpu, "hash"));
  unsigned char h[32];
  unsigned hl = 0;
  char both[130], hex[65];
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  if (!ch || !gh || !md)
    goto out;
  snprintf(both, sizeof both, "%s%s", ch, gh);
  if (!EVP_DigestInit_ex(md, EVP_sha256(), NULL) || !EVP_DigestUpdate(md, both, strlen(both)) ||
      !EVP_DigestFinal_ex(md, h, &hl) || hl != 32)
    goto out;
  ft_hex_encode(h, 32, hex);
  cJSON_AddStringToObject(compute, "cpu_hash", ch);
  cJSON_ReplaceItemInObject(compute, "hash", cJSON_CreateString(hex));
out:
  EVP_MD_CTX_free(md);
}

int doctor_run(const doctor_opts *o, char **report, int *ok) {
  double t0 = ft_now_s();
  cJSON *r = cJSON_CreateObject(), *checks = cJSON_CreateArray();
  if (!r || !checks) {
    cJSON_Delete(r);
    cJSON_Delete(checks);
    return ft_err_set(FT_ENOMEM, "doctor: out of memory");
  }
  char cpu[256], plat[512];
  cpu_model(cpu, sizeof cpu);
  snprintf(plat, sizeof plat, "%s | %s", cpu, k_blas_config());
  int good = 1;
  cJSON *compute = check_compute(o), *c = compute;
  good &= cJSON_IsTrue(cJSON_GetObjectItem(c, "ok"));
  cJSON_AddItemToArray(checks, c);
  if (o->mem_mb > 0) {
    c = check_memory(o);
    good &= cJSON_IsTrue(cJSON_GetObjectItem(c, "ok"));
    cJSON_AddItemToArray(checks, c);
  }
  if (o->disk_mb > 0 && o->dir && *o->dir) {
    c = check_disk(o);
    const cJSON *bl = cJSON_GetObjectItem(c, "blame");
    if (cJSON_IsString(bl) && !strcmp(bl->valuestring, "node"))
      good = 0;
    cJSON_AddItemToArray(checks, c);
  }
  if (o->device >= 0) {
    cJSON *g = doctor_gpu_check(o, plat, sizeof plat);
    good &= cJSON_IsTrue(cJSON_GetObjectItem(g, "ok"));
    cJSON_AddItemToArray(checks, g);
    both_hashes(compute, g);
  }
  cJSON_AddBoolToObject(r, "ok", good);
  cJSON_AddStringToObject(r, "platform", plat);
  cJSON_AddNumberToObject(r, "ms", round((ft_now_s() - t0) * 1e4) / 10);
  cJSON_AddItemToObject(r, "checks", checks);
  *report = cJSON_PrintUnformatted(r);
  cJSON_Delete(r);
  if (!*report)
    return ft_err_set(FT_ENOMEM, "doctor: out of memory");
  *ok = good;
  return FT_OK;
}

const char *doctor_dir(const char *dir, const char *store, char *buf, unsigned len) {
  if (dir && *dir)
    snprintf(buf, len, "%s", dir);
  else if (store && !strncmp(store, "local:", 6) && store[6])
    snprintf(buf, len, "%s", store + 6);
  else if (getenv("TMPDIR") && *getenv("TMPDIR"))
    snprintf(buf, len, "%s", getenv("TMPDIR"));
  else
    snprintf(buf, len, "/tmp");
  return buf;
}

/* ---- links (a collective) ------------------------------------------------------------ */

int doctor_links(comm *c, size_t bytes, char **report) {
  const int W = comm_world(c), r = comm_rank(c);
  if (report)
    *report = NULL;
  int dists[2] = {1, W - 1}, nd = W > 2 ? 2 : 1;
  size_t n = bytes / 4 > (1u << 18) ? (1u << 18) : bytes / 4;
  float *x = malloc(sizeof(float) * (n ? n : 1));
  unsigned char *out = malloc(bytes ? bytes : 1), *in = malloc(bytes ? bytes : 1);
  double *t = calloc((size_t)W * 2, sizeof(double));
  int rc = FT_OK, ok = 1;
  if (!x || !out || !in || !t) {
    rc = ft_err_set(FT_ENOMEM, "doctor: out of memory for the link check");
    goto out;
  }
  /* small integers: every partial sum is exact in float, so one wrong bit
   * anywhere shows */
  for (size_t i = 0; i < n; i++)
    x[i] = (float)((int)(i % 251) + r);
  rc = comm_allreduce(c, x, n);
  if (rc)
    goto out;
  for (size_t i = 0; i < n && ok; i++)
    ok = x[i] == (float)(W * (int)(i % 251) + W * (W - 1) / 2);
  for (size_t i = 0; i < bytes; i++)
    out[i] = (unsigned char)(i * 131 + (size_t)r);
  for (int k = 0; k < nd && !rc; k++) {
    double best = 1e30;
    for (int rep = 0; rep < 3 && !rc; rep++) {
      double dt = 0;
      rc = comm_barrier(c);
      if (!rc)
        rc = comm_shift(c, out, in, bytes, dists[k], &dt);
      if (!rc && dt < best)
        best = dt;
    }
    t[r * 2 + k] = best;
  }
  if (!rc) /* every rank's times, summed into everyone's copy (zeros elsewhere) */
    rc = comm_allreduce_f64(c, t, (size_t)W * 2);
  if (rc || r != 0 || !report)
    goto out;
  cJSON *o = cJSON_CreateObject(), *links = cJSON_CreateArray();
  cJSON_AddStringToObject(o, "kind", "links");
  cJSON_AddNumberToObject(o, "world", W);
  cJSON_AddNumberToObject(o, "bytes", (double)bytes);
  cJSON_AddBoolToObject(o, "allreduce_ok", ok);
  for (int q = 0; q < W; q++)
    for (int k = 0; k < nd; k++) {
      cJSON *l = cJSON_CreateObject();
      cJSON_AddNumberToObject(l, "from", (q - dists[k] % W + W) % W);
      cJSON_AddNumberToObject(l, "to", q);
      double s = t[q * 2 + k];
      cJSON_AddNumberToObject(l, "mb_s", s > 0 ? round((double)bytes / s / 1e6 * 10) / 10 : 0);
      cJSON_AddItemToArray(links, l);
    }
  cJSON_AddItemToObject(o, "links", links);
  *report = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!*report)
    rc = ft_err_set(FT_ENOMEM, "doctor: out of memory");
out:
  free(x);
  free(out);
  free(in);
  free(t);
  return rc;
}
