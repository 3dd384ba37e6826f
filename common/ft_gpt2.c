/*
 * ft_gpt2: GPT-2's parameter layout (groups), llm.c model files and
 * Hugging Face safetensors export. See ft_gpt2.h for the layout.
 *
 * Why: the trainer shards parameters per group (one flat buffer per block),
 * while llm.c stores each tensor kind for all layers back to back and
 * Hugging Face stores Conv1D weights as (in, out). This file is the only
 * place that knows those orders, so import and export permute here.
 *
 * Invariants: offsets are in fp32 elements; group g starts where group g-1
 * ends; a block's 12 tensors follow enum ft_gpt2_btensor in order, which is
 * also llm.c's per-layer tensor order.
 *
 * Failure model: every writer goes through a temp file in the target's
 * directory, fsync, rename, fsync of the directory: a crash leaves either
 * the old file or the new one, never a torn one (plus, at worst, a stray
 * "*.tmp.XXXXXX" file). Readers validate the header and the file size
 * before trusting any count. Host byte order must be little-endian (both
 * formats are little-endian on disk). Thread-safe: no shared state.
 */
#include "ft_gpt2.h"

#include "ft_file.h"

#include "ft_err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ft_gpt2 reads and writes little-endian files with the host's byte order"
#endif

#define LLMC_MODEL_MAGIC 20240326
#define LLMC_MODEL_FP32 3
#define LLMC_MODEL_BF16 5
#define LLMC_DATA_MAGIC 20240520
#define LLMC_HEADER_INTS 256

/* ---- layout ------------------------------------------------------------ */

int ft_gpt2_pad_vocab(int V) {
  return (V + 127) / 128 * 128;
}

int ft_gpt2_ngroups(const ft_gpt2_dims *d) {
  return d->n_layer + 3;
}

char *ft_gpt2_group_name(const ft_gpt2_dims *d, int g, char *buf, size_t len) {
  if (g == 0)
    snprintf(buf, len, "wte");
  else if (g == 1)
    snprintf(buf, len, "wpe");
  else if (g >= 2 && g < 2 + d->n_layer)
    snprintf(buf, len, "h.%d", g - 2);
  else if (g == 2 + d->n_layer)
    snprintf(buf, len, "lnf");
  else
    snprintf(buf, len, "?%d", g);
  return buf;
}

size_t ft_gpt2_block_numel(const ft_gpt2_dims *d, int t) {
  size_t C = (size_t)d->channels;
  switch (t) {
  case FT_B_LN1W:
  case FT_B_LN1B:
  case FT_B_ATTPROJB:
  case FT_B_LN2W:
  case FT_B_LN2B:
  case FT_B_FCPROJB:
    return C;
  case FT_B_QKVW:
    return 3 * C * C;
  case FT_B_QKVB:
    return 3 * C;
  case FT_B_ATTPROJW:
    return C * C;
  case FT_B_FCW:
  case FT_B_FCPROJW:
    return 4 * C * C;
  case FT_B_FCB:
    return 4 * C;
  default:
    return 0;
  }
}

size_t ft_gpt2_block_offset(const ft_gpt2_dims *d, int t) {
  size_t off = 0;
  for (int k = 0; k < t && k < FT_B_COUNT; k++)
    off += ft_gpt2_block_numel(d, k);
  return off;
}

int ft_gpt2_block_decays(int t) {
  return t == FT_B_QKVW || t == FT_B_ATTPROJW || t == FT_B_FCW || t == FT_B_FCPROJW;
}

size_t ft_gpt2_group_numel(const ft_gpt2_dims *d, int g) {
  size_t C = (size_t)d->channels;
  if (g == 0)
    return (size_t)d->padded_vocab_size * C;
  if (g == 1)
    return (size_t)d->max_seq_len * C;
  if (g >= 2 && g < 2 + d->n_layer)
    return ft_gpt2_block_offset(d, FT_B_COUNT);
  if (g == 2 + d->n_layer)
    return 2 * C;
  return 0;
}

size_t ft_gpt2_group_offset(const ft_gpt2_dims *d, int g) {
  size_t off = 0;
  for (int k = 0; k < g && k < ft_gpt2_ngroups(d); k++)
    off += ft_gpt2_group_numel(d, k);
  return off;
}

size_t ft_gpt2_num_params(const ft_gpt2_dims *d) {
  return ft_gpt2_group_offset(d, ft_gpt2_ngroups(d));
}

/* Sane dims: all positive, Vp >= V, C divisible by NH, and small enough
 * that no product overflows a size_t (limits far above any GPT-2). */
static int dims_check(const ft_gpt2_dims *d, char *why, size_t len) {
  if (d->max_seq_len <= 0 || d->vocab_size <= 0 || d->padded_vocab_size <= 0 || d->n_layer <= 0 ||
      d->n_head <= 0 || d->channels <= 0) {
    snprintf(why, len, "every dimension must be positive (maxT=%d V=%d Vp=%d L=%d NH=%d C=%d)",
             d->max_seq_len, d->vocab_size, d->padded_vocab_size, d->n_layer, d->n_head,
             d->channels);
    return -1;
  }
  if (d->padded_vocab_size < d->vocab_size) {
    snprintf(why, len, "padded vocab %d is smaller than vocab %d", d->padded_vocab_size,
             d->vocab_size);
    return -1;
  }
  if (d->channels % d->n_head) {
    snprintf(why, len, "channels %d not divisible by n_head %d", d->channels, d->n_head);
    return -1;
  }
  if (d->channels > 65536 || d->n_layer > 4096 || d->max_seq_len > (1 << 24) ||
      d->padded_vocab_size > (1 << 24)) {
    snprintf(why, len, "dimensions implausibly large (maxT=%d Vp=%d L=%d C=%d)", d->max_seq_len,
             d->padded_vocab_size, d->n_layer, d->channels);
    return -1;
  }
  return 0;
}

/* ---- llm.c model files ----------------------------------------------------- */

/* fread exactly n floats; errors name the file and what was being read. */
static int read_floats(FILE *fp, const char *path, float *dst, size_t n, const char *what) {
  if (fread(dst, sizeof(float), n, fp) != n)
    return ft_err_set(ferror(fp) ? FT_EIO : FT_EFORMAT, "%s: short read in tensor %s", path, what);
  return FT_OK;
}

static const char *const llmc_block_names[FT_B_COUNT] = {
    "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw",  "fcprojb"};

int ft_gpt2_read_llmc(const char *path, ft_gpt2_dims *d, float **params) {
  int rc = FT_OK;
  float *P = NULL;
  int32_t h[LLMC_HEADER_INTS];
  char why[256];
  *params = NULL;
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return ft_err_set(FT_EIO, "%s: cannot open llm.c model file: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(fp), &st) != 0) {
    rc = ft_err_set(FT_EIO, "%s: stat: %s", path, strerror(errno));
    goto out;
  }
  if (st.st_size < (off_t)sizeof h) {
    rc = ft_err_set(FT_EFORMAT,
                    "%s: file is %lld bytes, smaller than the %zu-byte llm.c model header", path,
                    (long long)st.st_size, sizeof h);
    goto out;
  }
  if (fread(h, sizeof h, 1, fp) != 1) {
    rc = ft_err_set(FT_EIO, "%s: cannot read the header", path);
    goto out;
  }
  if (h[0] != LLMC_MODEL_MAGIC) {
    rc = ft_err_set(FT_EFORMAT, "%s: bad magic %d, expected %d for an llm.c model file%s", path,
                    h[0], LLMC_MODEL_MAGIC,
                    h[0] == LLMC_DATA_MAGIC ? " (this is an llm.c token shard, not a model)" : "");
    goto out;
  }
  if (h[1] != LLMC_MODEL_FP32) {
    rc = ft_err_set(FT_EFORMAT,
                    "%s: llm.c model file version %d%s; only version %d (fp32) is supported", path,
                    h[1], h[1] == LLMC_MODEL_BF16 ? " (bf16)" : "", LLMC_MODEL_FP32);
    goto out;
  }
  ft_gpt2_dims dd = {.max_seq_len = h[2],
                     .vocab_size = h[3],
                     .n_layer = h[4],
                     .n_head = h[5],
                     .channels = h[6],
                     .padded_vocab_size = h[7]};
  if (dims_check(&dd, why, sizeof why)) {
    rc = ft_err_set(FT_EFORMAT, "%s: bad header: %s", path, why);
    goto out;
  }
  size_t n = ft_gpt2_num_params(&dd);
  unsigned long long want = sizeof h + (unsigned long long)n * sizeof(float);
  if ((unsigned long long)st.st_size != want) {
    rc = ft_err_set(FT_EFORMAT,
                    "%s: file is %lld bytes, but the header (maxT=%d V=%d Vp=%d L=%d C=%d) "
                    "implies %zu fp32 parameters = %llu bytes",
                    path, (long long)st.st_size, dd.max_seq_len, dd.vocab_size,
                    dd.padded_vocab_size, dd.n_layer, dd.channels, n, want);
    goto out;
  }
  P = malloc(n * sizeof(float));
  if (!P) {
    rc = ft_err_set(FT_ENOMEM, "%s: out of memory for %zu parameters", path, n);
    goto out;
  }
  rc = read_floats(fp, path, P + ft_gpt2_group_offset(&dd, 0), ft_gpt2_group_numel(&dd, 0), "wte");
  if (rc)
    goto out;
  rc = read_floats(fp, path, P + ft_gpt2_group_offset(&dd, 1), ft_gpt2_group_numel(&dd, 1), "wpe");
  if (rc)
    goto out;
  /* llm.c: each tensor kind for all layers, in block-tensor order. */
  for (int t = 0; t < FT_B_COUNT; t++) {
    for (int l = 0; l < dd.n_layer; l++) {
      float *dst = P + ft_gpt2_group_offset(&dd, 2 + l) + ft_gpt2_block_offset(&dd, t);
      rc = read_floats(fp, path, dst, ft_gpt2_block_numel(&dd, t), llmc_block_names[t]);
      if (rc)
        goto out;
    }
  }
  rc = read_floats(fp, path, P + ft_gpt2_group_offset(&dd, 2 + dd.n_layer),
                   ft_gpt2_group_numel(&dd, 2 + dd.n_layer), "lnfw/lnfb");
  if (rc)
    goto out;
  *d = dd;
  *params = P;
  P = NULL;
out:
  free(P);
  fclose(fp);
  return rc;
}

int ft_gpt2_write_llmc(const char *path, const ft_gpt2_dims *d, const float *params) {
  char why[256];
  if (dims_check(d, why, sizeof why))
    return ft_err_set(FT_EINVAL, "%s: %s", path, why);
  int32_t h[LLMC_HEADER_INTS] = {0};
  h[0] = LLMC_MODEL_MAGIC;
  h[1] = LLMC_MODEL_FP32;
  h[2] = d->max_seq_len;
  h[3] = d->vocab_size;
  h[4] = d->n_layer;
  h[5] = d->n_head;
  h[6] = d->channels;
  h[7] = d->padded_vocab_size;
  ft_afile f;
  int rc = ft_afile_open(&f, path);
  if (rc)
    return rc;
  rc = ft_afile_write(&f, h, sizeof h);
  for (int g = 0; g < 2 && !rc; g++)
    rc = ft_afile_write(&f, params + ft_gpt2_group_offset(d, g),
                        ft_gpt2_group_numel(d, g) * sizeof(float));
  for (int t = 0; t < FT_B_COUNT && !rc; t++)
    for (int l = 0; l < d->n_layer && !rc; l++)
      rc = ft_afile_write(&f, params + ft_gpt2_group_offset(d, 2 + l) + ft_gpt2_block_offset(d, t),
                          ft_gpt2_block_numel(d, t) * sizeof(float));
  if (!rc)
    rc = ft_afile_write(&f, params + ft_gpt2_group_offset(d, 2 + d->n_layer),
                        ft_gpt2_group_numel(d, 2 + d->n_layer) * sizeof(float));
  if (rc) {
    ft_afile_abort(&f);
    return rc;
  }
  return ft_afile_commit(&f);
}

/* ---- safetensors --------------------------------------------------------- */

/* One tensor of the export: where it lives in our layout and how it's written. */
typedef struct {
  char name[64];
  const float *src;
  size_t rows, cols; /* shape written: (rows, cols); cols 0 for 1-D */
  int transpose;     /* src is (cols, rows) and must be transposed */
} st_tensor;

static size_t st_numel(const st_tensor *t) {
  return t->cols ? t->rows * t->cols : t->rows;
}

/* Builds the export list in Hugging Face's order; returns the count. */
static int st_list(const ft_gpt2_dims *d, const float *P, st_tensor *out) {
  size_t C = (size_t)d->channels;
  int n = 0;
#define ST_ADD(nm, s, r, c, tr)                                                                    \
  do {                                                                                             \
    st_tensor *t_ = &out[n++];                                                                     \
    snprintf(t_->name, sizeof t_->name, "%s", nm);                                                 \
    t_->src = (s);                                                                                 \
    t_->rows = (r);                                                                                \
    t_->cols = (c);                                                                                \
    t_->transpose = (tr);                                                                          \
  } while (0)
  ST_ADD("wte.weight", P + ft_gpt2_group_offset(d, 0), (size_t)d->vocab_size, C, 0);
  ST_ADD("wpe.weight", P + ft_gpt2_group_offset(d, 1), (size_t)d->max_seq_len, C, 0);
  static const struct {
    const char *suffix;
    int t;
    int rmul, cmul; /* written shape in units of C; cmul 0 = 1-D */
    int tr;
  } blk[] = {
      {"ln_1.weight", FT_B_LN1W, 1, 0, 0},
      {"ln_1.bias", FT_B_LN1B, 1, 0, 0},
      {"attn.c_attn.weight", FT_B_QKVW, 1, 3, 1},
      {"attn.c_attn.bias", FT_B_QKVB, 3, 0, 0},
      {"attn.c_proj.weight", FT_B_ATTPROJW, 1, 1, 1},
      {"attn.c_proj.bias", FT_B_ATTPROJB, 1, 0, 0},
      {"ln_2.weight", FT_B_LN2W, 1, 0, 0},
      {"ln_2.bias", FT_B_LN2B, 1, 0, 0},
      {"mlp.c_fc.weight", FT_B_FCW, 1, 4, 1},
      {"mlp.c_fc.bias", FT_B_FCB, 4, 0, 0},
      {"mlp.c_proj.weight", FT_B_FCPROJW, 4, 1, 1},
      {"mlp.c_proj.bias", FT_B_FCPROJB, 1, 0, 0},
  };
  for (int l = 0; l < d->n_layer; l++) {
    const float *base = P + ft_gpt2_group_offset(d, 2 + l);
    for (size_t k = 0; k < sizeof blk / sizeof blk[0]; k++) {
      char nm[64];
      snprintf(nm, sizeof nm, "h.%d.%s", l, blk[k].suffix);
      ST_ADD(nm, base + ft_gpt2_block_offset(d, blk[k].t), blk[k].rmul * C, blk[k].cmul * C,
             blk[k].tr);
    }
  }
  const float *lnf = P + ft_gpt2_group_offset(d, 2 + d->n_layer);
  ST_ADD("ln_f.weight", lnf, C, 0, 0);
  ST_ADD("ln_f.bias", lnf + C, C, 0, 0);
#undef ST_ADD
  return n;
}

/* dst (rows, cols) = transpose of src (cols, rows); blocked for the cache. */
static void transpose(float *dst, const float *src, size_t rows, size_t cols) {
  const size_t B = 32;
  for (size_t i0 = 0; i0 < rows; i0 += B)
    for (size_t j0 = 0; j0 < cols; j0 += B)
      for (size_t i = i0; i < i0 + B && i < rows; i++)
        for (size_t j = j0; j < j0 + B && j < cols; j++)
          dst[i * cols + j] = src[j * rows + i];
}

int ft_gpt2_write_safetensors(const char *path, const ft_gpt2_dims *d, const float *params,
                              const char *const *meta_keys, const char *const *meta_vals,
                              int n_meta) {
  char why[256];
  if (dims_check(d, why, sizeof why))
    return ft_err_set(FT_EINVAL, "%s: %s", path, why);
  int rc = FT_OK;
  int cap = 4 + 12 * d->n_layer;
  st_tensor *ts = calloc((size_t)cap, sizeof *ts);
  cJSON *root = NULL;
  char *json = NULL, *hdr = NULL;
  float *tbuf = NULL;
  ft_afile f = {.fd = -1};
  int opened = 0;
  if (!ts) {
    rc = ft_err_set(FT_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  int nt = st_list(d, params, ts);

  /* Header: __metadata__ first, then tensors in write order, offsets contiguous. */
  root = cJSON_CreateObject();
  cJSON *meta = root ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
  if (!meta || !cJSON_AddStringToObject(meta, "format", "pt"))
    goto nomem;
  for (int i = 0; i < n_meta; i++) {
    if (!meta_keys[i] || !meta_vals[i] || !strcmp(meta_keys[i], "format"))
      continue;
    if (!cJSON_AddStringToObject(meta, meta_keys[i], meta_vals[i]))
      goto nomem;
  }
  size_t off = 0, maxbuf = 0;
  for (int i = 0; i < nt; i++) {
    cJSON *o = cJSON_AddObjectToObject(root, ts[i].name);
    if (!o || !cJSON_AddStringToObject(o, "dtype", "F32"))
      goto nomem;
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    cJSON *offs = cJSON_AddArrayToObject(o, "data_offsets");
    if (!shape || !offs)
      goto nomem;
    cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].rows));
    if (ts[i].cols)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].cols));
    size_t bytes = st_numel(&ts[i]) * sizeof(float);
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
    if (ts[i].transpose && st_numel(&ts[i]) > maxbuf)
      maxbuf = st_numel(&ts[i]);
  }
  json = cJSON_PrintUnformatted(root);
  if (!json)
    goto nomem;
  size_t jlen = strlen(json);
  size_t hlen = (jlen + 7) / 8 * 8; /* 8 + hlen stays a multiple of 8 */
  hdr = malloc(8 + hlen);
  tbuf = maxbuf ? malloc(maxbuf * sizeof(float)) : NULL;
  if (!hdr || (maxbuf && !tbuf))
    goto nomem;
  uint64_t le = hlen;
  memcpy(hdr, &le, 8);
  memcpy(hdr + 8, json, jlen);
  memset(hdr + 8 + jlen, ' ', hlen - jlen);

  rc = ft_afile_open(&f, path);
  if (rc)
    goto out;
  opened = 1;
  rc = ft_afile_write(&f, hdr, 8 + hlen);
  for (int i = 0; i < nt && !rc; i++) {
    const float *src = ts[i].src;
    if (ts[i].transpose) {
      transpose(tbuf, ts[i].src, ts[i].rows, ts[i].cols);
      src = tbuf;
    }
    rc = ft_afile_write(&f, src, st_numel(&ts[i]) * sizeof(float));
  }
  if (!rc) {
    opened = 0;
    rc = ft_afile_commit(&f);
  }
  goto out;
nomem:
  rc = ft_err_set(FT_ENOMEM, "%s: out of memory building the safetensors header", path);
out:
  if (opened)
    ft_afile_abort(&f);
  free(tbuf);
  free(hdr);
  free(json);
  cJSON_Delete(root);
  free(ts);
  return rc;
}
