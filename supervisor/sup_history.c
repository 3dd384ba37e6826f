/*
 * sup_history: every step's loss in STATE/history.bin (sup_history.h).
 */
#include "sup_history.h"

#include "ft_err.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR_LEN 16
#define VERSION 2
#define REC_LEN 40    /* version 2's */
#define REC_LEN_V1 32 /* version 1's: no grad_norm, lr */
#define BUF_RECS 256
static const char MAGIC[8] = {'F', 'T', 'H', 'I', 'S', 'T', 0, 0};

struct sup_history {
  char path[4200];
  int fd;         /* -1: read only, or the file given up after an error */
  int version;    /* the file's record format */
  size_t rec_len; /* its record size */
  char err[4400]; /* why the file was given up */
  sup_hist_rec *mem;
  size_t n, cap, mem_cap;
  uint64_t stride, added; /* keep every stride-th record in memory */
  uint64_t total;
  uint8_t buf[BUF_RECS * REC_LEN];
  size_t nbuf;
};

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static void put_f32(uint8_t *p, float f) {
  uint32_t v;
  memcpy(&v, &f, 4);
  put_u32(p, v);
}
static float get_f32(const uint8_t *p) {
  uint32_t v = get_u32(p);
  float f;
  memcpy(&f, &v, 4);
  return f;
}

/* a version 1 record is the first 32 bytes of a version 2 one */
static void encode(uint8_t *p, const sup_hist_rec *r, int version) {
  uint64_t ts;
  memcpy(&ts, &r->ts, 8);
  put_u64(p, ts);
  put_u64(p + 8, (uint64_t)r->step);
  put_f32(p + 16, r->loss);
  put_f32(p + 20, r->val_loss);
  put_f32(p + 24, r->step_ms);
  put_f32(p + 28, r->tokens_per_s);
  if (version >= 2) {
    put_f32(p + 32, r->grad_norm);
    put_f32(p + 36, r->lr);
  }
}

static void decode(const uint8_t *p, sup_hist_rec *r, int version) {
  uint64_t ts = get_u64(p);
  memcpy(&r->ts, &ts, 8);
  r->step = (int64_t)get_u64(p + 8);
  r->loss = get_f32(p + 16);
  r->val_loss = get_f32(p + 20);
  r->step_ms = get_f32(p + 24);
  r->tokens_per_s = get_f32(p + 28);
  r->grad_norm = version >= 2 ? get_f32(p + 32) : NAN;
  r->lr = version >= 2 ? get_f32(p + 36) : NAN;
}

/* Halves the memory copy: every second record stays, and every one with a
 * validation loss. */
static void thin(sup_history *h) {
  size_t k = 0;
  for (size_t i = 0; i < h->n; i++)
    if (i % 2 == 0 || isfinite(h->mem[i].val_loss))
      h->mem[k++] = h->mem[i];
  h->n = k;
  h->stride *= 2;
}

static void keep(sup_history *h, const sup_hist_rec *r) {
  h->total++;
  int val = isfinite(r->val_loss);
  if (h->added++ % h->stride != 0 && !val)
    return;
  if (h->n == h->mem_cap)
    thin(h);
  if (h->n == h->cap) {
    size_t nc = h->cap ? 2 * h->cap : 1024;
    if (nc > h->mem_cap)
      nc = h->mem_cap;
    sup_hist_rec *m = realloc(h->mem, nc * sizeof *m);
    if (!m)
      return; /* out of memory: this record is only in the file */
    h->mem = m;
    h->cap = nc;
  }
  h->mem[h->n++] = *r;
}

static int give_up(sup_history *h, int e, const char *what) {
  if (h->fd >= 0) {
    snprintf(h->err, sizeof h->err, "%s %s: %s", what, h->path, strerror(e));
    close(h->fd);
    h->fd = -1;
  }
  return ft_err_set(ft_err_from_errno(e), "%s", h->err);
}

/* the formats this build reads (and appends to) */
static int known_format(uint32_t version, uint32_t rec_len) {
  return (version == VERSION && rec_len == REC_LEN) || (version == 1 && rec_len == REC_LEN_V1);
}

static int read_all(int fd, uint8_t *p, size_t n, off_t at) {
  while (n) {
    ssize_t k = pread(fd, p, n, at);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return k < 0 ? -1 : 0;
    p += k, n -= (size_t)k, at += k;
  }
  return 1;
}

int sup_history_open(const char *path, int writable, size_t mem_cap, sup_history **out) {
  *out = NULL;
  sup_history *h = calloc(1, sizeof *h);
  if (!h)
    return ft_err_set(FT_ENOMEM, "out of memory");
  snprintf(h->path, sizeof h->path, "%s", path);
  h->mem_cap = mem_cap ? mem_cap : SUP_HISTORY_MEM;
  if (h->mem_cap < 2)
    h->mem_cap = 2;
  h->stride = 1;
  int fd = open(path, writable ? O_RDWR | O_CREAT | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    free(h);
    return ft_err_set(ft_err_from_errno(e), "%s: %s", path, strerror(e));
  }
  struct stat st;
  uint8_t hdr[HDR_LEN];
  int rc = FT_OK;
  if (fstat(fd, &st)) {
    rc = ft_err_set(ft_err_from_errno(errno), "%s: %s", path, strerror(errno));
  } else if (st.st_size == 0 && writable) {
    memcpy(hdr, MAGIC, 8);
    put_u32(hdr + 8, VERSION);
    put_u32(hdr + 12, REC_LEN);
    h->version = VERSION, h->rec_len = REC_LEN;
    if (pwrite(fd, hdr, HDR_LEN, 0) != HDR_LEN)
      rc = ft_err_set(FT_EIO, "%s: cannot write the header: %s", path, strerror(errno));
  } else if (st.st_size < HDR_LEN || read_all(fd, hdr, HDR_LEN, 0) != 1 || memcmp(hdr, MAGIC, 8) ||
             !known_format(get_u32(hdr + 8), get_u32(hdr + 12))) {
    rc = ft_err_set(FT_EFORMAT,
                    "%s: not a step history (version 2, 40-byte records, or 1, 32-byte)", path);
  } else {
    h->version = (int)get_u32(hdr + 8), h->rec_len = get_u32(hdr + 12);
    size_t rl = h->rec_len;
    uint64_t n = (uint64_t)(st.st_size - HDR_LEN) / rl;
    off_t end = HDR_LEN + (off_t)(n * rl);
    if (end != st.st_size && writable && ftruncate(fd, end)) /* a torn last record */
      rc = ft_err_set(FT_EIO, "%s: cannot cut a torn record: %s", path, strerror(errno));
    for (uint64_t i = 0; i < n && rc == FT_OK; i += BUF_RECS) {
      size_t k = n - i < BUF_RECS ? (size_t)(n - i) : BUF_RECS;
      if (read_all(fd, h->buf, k * rl, HDR_LEN + (off_t)(i * rl)) != 1) {
        rc = ft_err_set(FT_EIO, "%s: read: %s", path, strerror(errno));
        break;
      }
      for (size_t j = 0; j < k; j++) {
        sup_hist_rec r;
        decode(h->buf + j * rl, &r, h->version);
        keep(h, &r);
      }
    }
  }
  if (rc) {
    close(fd);
    free(h->mem);
    free(h);
    return rc;
  }
  if (writable && lseek(fd, 0, SEEK_END) < 0) {
    rc = ft_err_set(FT_EIO, "%s: seek: %s", path, strerror(errno));
    close(fd);
    free(h->mem);
    free(h);
    return rc;
  }
  h->fd = writable ? fd : -1;
  if (!writable)
    close(fd);
  *out = h;
  return FT_OK;
}

int sup_history_flush(sup_history *h) {
  if (!h || h->fd < 0 || !h->nbuf) {
    if (h)
      h->nbuf = 0;
    return h && h->err[0] ? FT_EIO : FT_OK;
  }
  size_t off = 0, n = h->nbuf * h->rec_len;
  while (off < n) {
    ssize_t k = write(h->fd, h->buf + off, n - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      h->nbuf = 0;
      return give_up(h, k < 0 ? errno : ENOSPC, "write");
    }
    off += (size_t)k;
  }
  h->nbuf = 0;
  return FT_OK;
}

void sup_history_add(sup_history *h, const sup_hist_rec *r) {
  keep(h, r);
  if (h->fd < 0)
    return;
  if (h->nbuf == BUF_RECS)
    sup_history_flush(h);
  if (h->fd >= 0)
    encode(h->buf + h->rec_len * h->nbuf++, r, h->version);
}

int sup_history_version(const sup_history *h) {
  return h ? h->version : 0;
}

const char *sup_history_error(const sup_history *h) {
  return h && h->err[0] ? h->err : NULL;
}

size_t sup_history_count(const sup_history *h) {
  return h ? h->n : 0;
}

const sup_hist_rec *sup_history_recs(const sup_history *h) {
  return h ? h->mem : NULL;
}

uint64_t sup_history_total(const sup_history *h) {
  return h ? h->total : 0;
}

void sup_history_free(sup_history *h) {
  if (!h)
    return;
  sup_history_flush(h);
  if (h->fd >= 0)
    close(h->fd);
  free(h->mem);
  free(h);
}

/* ---- the chart data ------------------------------------------------------ */

enum { C_LOSS, C_VAL, C_ROLLED, C_MS, C_TPS, C_GNORM, C_LR, NCOL };

typedef struct row {
  int64_t step;
  float v[NCOL];
  double ts; /* the surviving record's (NAN: a validation or rolled back row) */
} row;

static int row_cmp(const void *a, const void *b) {
  int64_t x = ((const row *)a)->step, y = ((const row *)b)->step;
  return x < y ? -1 : x > y;
}

static void num_or_null(cJSON *arr, float v) {
  cJSON_AddItemToArray(arr, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

cJSON *sup_history_series(const sup_history *h, int max_points) {
  size_t n = h ? h->n : 0;
  const sup_hist_rec *r = n ? h->mem : NULL;
  if (max_points < 2)
    max_points = 2;
  cJSON *o = cJSON_CreateObject();
  cJSON *rows = cJSON_AddArrayToObject(o, "rows");
  cJSON_AddNumberToObject(o, "total", h ? (double)h->total : 0);
  if (!o || !rows || !n)
    return o;
  /* which records survive: walking back, a record lives if its step is
   * below every later record's */
  uint8_t *live = malloc(n);
  row *out = malloc(sizeof *out * ((size_t)max_points * 5 + 8)); /* 4 per bucket, the val */
  int64_t *bl =
      malloc(sizeof *bl * (size_t)max_points * 4); /* per bucket: min, max live; min, max rolled */
  if (!live || !out || !bl) {
    free(live), free(out), free(bl);
    return o;
  }
  int64_t lo = r[0].step, hi = r[0].step, min_later = INT64_MAX;
  size_t nval = 0;
  for (size_t i = n; i-- > 0;) {
    live[i] = r[i].step < min_later;
    if (live[i])
      min_later = r[i].step;
    if (live[i] && isfinite(r[i].val_loss))
      nval++;
    lo = r[i].step < lo ? r[i].step : lo;
    hi = r[i].step > hi ? r[i].step : hi;
  }
  int64_t width = (hi - lo) / max_points + 1;
  for (int i = 0; i < 4 * max_points; i++)
    bl[i] = -1;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(r[i].loss))
      continue;
    int64_t b = (r[i].step - lo) / width;
    int64_t *s = bl + 4 * b + (live[i] ? 0 : 2);
    if (s[0] < 0 || r[i].loss < r[s[0]].loss)
      s[0] = (int64_t)i;
    if (s[1] < 0 || r[i].loss > r[s[1]].loss)
      s[1] = (int64_t)i;
  }
  size_t k = 0, val_every = nval > (size_t)max_points ? nval / (size_t)max_points + 1 : 1, vi = 0;
  for (int b = 0; b < max_points; b++)
    for (int j = 0; j < 4; j++) {
      int64_t i = bl[4 * b + j];
      if (i < 0 || (j % 2 == 1 && i == bl[4 * b + j - 1]))
        continue;
      row *w = &out[k++];
      w->step = r[i].step;
      for (int c = 0; c < NCOL; c++)
        w->v[c] = NAN;
      w->ts = NAN;
      if (j < 2) {
        w->v[C_LOSS] = r[i].loss;
        /* the step's wall time when the record before is its step's
         * predecessor (the worker's step_ms leaves out communication) */
        w->v[C_MS] = i > 0 && r[i - 1].step == r[i].step - 1 && r[i].ts > r[i - 1].ts
                         ? (float)((r[i].ts - r[i - 1].ts) * 1e3)
                         : r[i].step_ms;
        w->v[C_TPS] = r[i].tokens_per_s;
        w->v[C_GNORM] = r[i].grad_norm;
        w->v[C_LR] = r[i].lr;
        w->ts = r[i].ts;
      } else {
        w->v[C_ROLLED] = r[i].loss;
      }
    }
  /* the validation losses: all, or every val_every-th (<= max_points + 1) */
  for (size_t i = 0; i < n; i++)
    if (live[i] && isfinite(r[i].val_loss) && vi++ % val_every == 0) {
      row *w = &out[k++];
      w->step = r[i].step;
      for (int c = 0; c < NCOL; c++)
        w->v[c] = NAN;
      w->ts = NAN;
      w->v[C_VAL] = r[i].val_loss;
    }
  qsort(out, k, sizeof *out, row_cmp);
  size_t m = 0; /* one row per step: merge what the same step brought */
  for (size_t i = 0; i < k; i++) {
    if (m && out[m - 1].step == out[i].step) {
      for (int c = 0; c < NCOL; c++)
        if (!isfinite(out[m - 1].v[c]))
          out[m - 1].v[c] = out[i].v[c];
      if (!isfinite(out[m - 1].ts))
        out[m - 1].ts = out[i].ts;
    } else
      out[m++] = out[i];
  }
  for (size_t i = 0; i < m; i++) {
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)out[i].step));
    for (int c = 0; c < NCOL; c++)
      num_or_null(a, out[i].v[c]);
    /* to the millisecond: the wall-time axis needs no more */
    cJSON_AddItemToArray(a, isfinite(out[i].ts) ? cJSON_CreateNumber(round(out[i].ts * 1e3) / 1e3)
                                                : cJSON_CreateNull());
    cJSON_AddItemToArray(rows, a);
  }
  free(live), free(out), free(bl);
  return o;
}
