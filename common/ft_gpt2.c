/*
 * ft_gpt2: GPT-2's parameter layout (groups), llm.c model files and
 * Hugging Face safetensors (export, and a reader that checks every header
 * field against the file before trusting it). See ft_gpt2.h for the layout.
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
  size_t off;        /* offset (elements) of the source tensor in our layout */
  size_t rows, cols; /* shape written: (rows, cols); cols 0 for 1-D */
  int transpose;     /* the source is (cols, rows) and must be transposed */
} st_tensor;

static size_t st_numel(const st_tensor *t) {
  return t->cols ? t->rows * t->cols : t->rows;
}

/* Builds the export list in Hugging Face's order; returns the count
 * (4 + 12 L). */
static int st_list(const ft_gpt2_dims *d, st_tensor *out) {
  size_t C = (size_t)d->channels;
  int n = 0;
#define ST_ADD(nm, s, r, c, tr)                                                                    \
  do {                                                                                             \
    st_tensor *t_ = &out[n++];                                                                     \
    snprintf(t_->name, sizeof t_->name, "%s", nm);                                                 \
    t_->off = (s);                                                                                 \
    t_->rows = (r);                                                                                \
    t_->cols = (c);                                                                                \
    t_->transpose = (tr);                                                                          \
  } while (0)
  ST_ADD("wte.weight", ft_gpt2_group_offset(d, 0), (size_t)d->vocab_size, C, 0);
  ST_ADD("wpe.weight", ft_gpt2_group_offset(d, 1), (size_t)d->max_seq_len, C, 0);
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
    size_t base = ft_gpt2_group_offset(d, 2 + l);
    for (size_t k = 0; k < sizeof blk / sizeof blk[0]; k++) {
      char nm[64];
      snprintf(nm, sizeof nm, "h.%d.%s", l, blk[k].suffix);
      ST_ADD(nm, base + ft_gpt2_block_offset(d, blk[k].t), blk[k].rmul * C, blk[k].cmul * C,
             blk[k].tr);
    }
  }
  size_t lnf = ft_gpt2_group_offset(d, 2 + d->n_layer);
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
  int nt = st_list(d, ts);

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
    const float *src = params + ts[i].off;
    if (ts[i].transpose) {
      transpose(tbuf, src, ts[i].rows, ts[i].cols);
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

/* ---- Hugging Face model directory --------------------------------------- */

/* FT_OK when path is absent or a regular file. */
static int regular_or_absent(const char *to, const char *path) {
  struct stat st;
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return ft_err_set(FT_EINVAL,
                      "%s: %s exists and is %s; an export writes regular files only and will "
                      "not replace it (give a new name, an existing file, or a folder)",
                      to, path, ft_file_kind(st.st_mode));
  return FT_OK;
}

int ft_gpt2_export_paths(const char *to, char *model, size_t model_len, char *config,
                         size_t config_len) {
  size_t n = strlen(to);
  struct stat st;
  int folder = n > 0 && to[n - 1] == '/';
  if (!folder && stat(to, &st) == 0 && S_ISDIR(st.st_mode))
    folder = 1;
  int w1, w2;
  if (folder) {
    const char *sep = n > 0 && to[n - 1] == '/' ? "" : "/";
    w1 = snprintf(model, model_len, "%s%smodel.safetensors", to, sep);
    w2 = snprintf(config, config_len, "%s%sconfig.json", to, sep);
  } else {
    w1 = snprintf(model, model_len, "%s", to);
    w2 = config_len ? snprintf(config, config_len, "%s", "") : 0;
  }
  if (w1 < 0 || (size_t)w1 >= model_len || w2 < 0 || (size_t)w2 >= config_len)
    return ft_err_set(FT_EINVAL, "%s: path too long", to);
  if (folder && mkdir(to, 0777) != 0 && errno != EEXIST)
    return ft_err_set(FT_EIO, "%s: cannot make the folder: %s", to, strerror(errno));
  int rc = regular_or_absent(to, model);
  if (!rc && folder)
    rc = regular_or_absent(to, config);
  return rc;
}

int ft_gpt2_write_hf_config(const char *path, const ft_gpt2_dims *d) {
  char why[256];
  if (dims_check(d, why, sizeof why))
    return ft_err_set(FT_EINVAL, "%s: %s", path, why);
  cJSON *o = cJSON_CreateObject();
  cJSON *arch = o ? cJSON_AddArrayToObject(o, "architectures") : NULL;
  if (!arch) {
    cJSON_Delete(o);
    return ft_err_set(FT_ENOMEM, "%s: out of memory", path);
  }
  cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
  cJSON_AddStringToObject(o, "model_type", "gpt2");
  cJSON_AddNumberToObject(o, "vocab_size", d->vocab_size);
  cJSON_AddNumberToObject(o, "n_positions", d->max_seq_len);
  cJSON_AddNumberToObject(o, "n_ctx", d->max_seq_len);
  cJSON_AddNumberToObject(o, "n_embd", d->channels);
  cJSON_AddNumberToObject(o, "n_layer", d->n_layer);
  cJSON_AddNumberToObject(o, "n_head", d->n_head);
  cJSON_AddNullToObject(o, "n_inner"); /* 4 * n_embd, as trained */
  /* the kernels' GELU is the tanh approximation; LayerNorm's epsilon 1e-5 */
  cJSON_AddStringToObject(o, "activation_function", "gelu_new");
  cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
  /* trained without dropout */
  cJSON_AddNumberToObject(o, "resid_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "embd_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "attn_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "initializer_range", 0.02);
  cJSON_AddBoolToObject(o, "scale_attn_weights", 1);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", 1); /* the head is wte */
  cJSON_AddBoolToObject(o, "use_cache", 1);
  /* GPT-2's own vocabulary ends in <|endoftext|>; the byte-level one that
   * ftdata makes has no special token */
  if (d->vocab_size == 50257) {
    cJSON_AddNumberToObject(o, "bos_token_id", 50256);
    cJSON_AddNumberToObject(o, "eos_token_id", 50256);
  } else {
    cJSON_AddNullToObject(o, "bos_token_id");
    cJSON_AddNullToObject(o, "eos_token_id");
  }
  cJSON_AddStringToObject(o, "torch_dtype", "float32");
  char *json = cJSON_Print(o);
  cJSON_Delete(o);
  if (!json)
    return ft_err_set(FT_ENOMEM, "%s: out of memory", path);
  ft_afile f = {.fd = -1};
  int rc = ft_afile_open(&f, path);
  if (!rc) {
    if (!(rc = ft_afile_write(&f, json, strlen(json))) && !(rc = ft_afile_write(&f, "\n", 1)))
      rc = ft_afile_commit(&f);
    else
      ft_afile_abort(&f);
  }
  free(json);
  return rc;
}

int ft_gpt2_export(const char *to, const ft_gpt2_dims *d, const float *params,
                   const char *const *meta_keys, const char *const *meta_vals, int n_meta) {
  char model[4096], config[4096];
  int rc = ft_gpt2_export_paths(to, model, sizeof model, config, sizeof config);
  if (!rc)
    rc = ft_gpt2_write_safetensors(model, d, params, meta_keys, meta_vals, n_meta);
  if (!rc && config[0])
    rc = ft_gpt2_write_hf_config(config, d);
  return rc;
}

/* ---- safetensors: reading ------------------------------------------------ */

static const struct {
  const char *name;
  unsigned size;
} st_dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
                 {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
                 {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

static unsigned st_dtype_size(const char *s) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (!strcmp(s, st_dtypes[i].name))
      return st_dtypes[i].size;
  return 0;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int st_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j))
    return -1;
  double v = j->valuedouble;
  if (!(v >= 0 && v < 9007199254740992.0) || v != (double)(uint64_t)v)
    return -1;
  *out = (uint64_t)v;
  return 0;
}

static int st_cmp_begin(const void *a, const void *b) {
  const ft_st_tensor *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static int st_cmp_name(const void *a, const void *b) {
  return strcmp(((const ft_st_tensor *)a)->name, ((const ft_st_tensor *)b)->name);
}

int ft_st_parse_header(const char *name, const void *head, size_t head_len, uint64_t file_size,
                       ft_st_tensor **out, int *nout, uint64_t *data_off) {
  const unsigned char *h = head;
  ft_st_tensor *ts = NULL;
  cJSON *root = NULL;
  int rc = FT_OK, nt = 0;
  *out = NULL;
  *nout = 0;
  if (head_len < 8 || file_size < 8)
    return ft_err_set(FT_EFORMAT, "%s: %llu bytes, too short for a safetensors file", name,
                      (unsigned long long)file_size);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = hlen << 8 | h[i];
  if (hlen < 2 || hlen > FT_ST_MAX_HEADER || hlen > file_size - 8)
    return ft_err_set(FT_EFORMAT,
                      "%s: safetensors header size %llu does not fit (file %llu bytes, at most "
                      "%u)",
                      name, (unsigned long long)hlen, (unsigned long long)file_size,
                      FT_ST_MAX_HEADER);
  if (hlen > head_len - 8)
    return ft_err_set(FT_EINVAL, "%s: %zu bytes given, the header needs %llu", name, head_len,
                      (unsigned long long)(8 + hlen));
  uint64_t data_len = file_size - 8 - hlen;
  const char *json = (const char *)h + 8, *end = NULL;
  root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &end, 0);
  if (!root || !cJSON_IsObject(root)) {
    rc = ft_err_set(FT_EFORMAT, "%s: the safetensors header is not a JSON object", name);
    goto out;
  }
  for (const char *p = end; p < json + hlen; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      rc = ft_err_set(FT_EFORMAT, "%s: bytes after the safetensors header's JSON object", name);
      goto out;
    }
  int n = cJSON_GetArraySize(root);
  ts = calloc(n > 0 ? (size_t)n : 1, sizeof *ts);
  if (!ts) {
    rc = ft_err_set(FT_ENOMEM, "%s: out of memory for %d tensors", name, n);
    goto out;
  }
  for (const cJSON *e = root->child; e; e = e->next) {
    const char *key = e->string ? e->string : "";
    if (!strcmp(key, "__metadata__")) {
      if (!cJSON_IsObject(e)) {
        rc = ft_err_set(FT_EFORMAT, "%s: __metadata__ is not an object", name);
        goto out;
      }
      for (const cJSON *m = e->child; m; m = m->next)
        if (!cJSON_IsString(m)) {
          rc = ft_err_set(FT_EFORMAT, "%s: __metadata__ value of '%.64s' is not a string", name,
                          m->string ? m->string : "");
          goto out;
        }
      continue;
    }
    ft_st_tensor *t = &ts[nt];
    if (!*key || strlen(key) >= sizeof t->name) {
      rc = ft_err_set(FT_EFORMAT, "%s: tensor name '%.64s' is empty or too long (at most %zu)",
                      name, key, sizeof t->name - 1);
      goto out;
    }
    snprintf(t->name, sizeof t->name, "%s", key);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    unsigned esz = cJSON_IsString(dt) ? st_dtype_size(dt->valuestring) : 0;
    if (!cJSON_IsObject(e) || !esz || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
        cJSON_GetArraySize(offs) != 2 || cJSON_GetArraySize(shape) > FT_ST_MAX_DIMS) {
      rc = ft_err_set(FT_EFORMAT,
                      "%s: tensor %s needs a known dtype, a shape of at most %d dims and two "
                      "data_offsets",
                      name, t->name, FT_ST_MAX_DIMS);
      goto out;
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
    uint64_t numel = 1;
    t->ndim = 0;
    for (const cJSON *s = shape->child; s; s = s->next) {
      uint64_t v;
      if (st_uint(s, &v) || (v && numel > UINT64_MAX / v)) {
        rc = ft_err_set(FT_EFORMAT, "%s: tensor %s has a bad shape", name, t->name);
        goto out;
      }
      numel *= v;
      t->shape[t->ndim++] = v;
    }
    if (st_uint(cJSON_GetArrayItem(offs, 0), &t->begin) ||
        st_uint(cJSON_GetArrayItem(offs, 1), &t->end) || t->begin > t->end || t->end > data_len) {
      rc = ft_err_set(FT_EFORMAT,
                      "%s: tensor %s: data_offsets are not within the %llu-byte data section", name,
                      t->name, (unsigned long long)data_len);
      goto out;
    }
    if (numel > UINT64_MAX / esz || numel * esz != t->end - t->begin) {
      rc = ft_err_set(FT_EFORMAT,
                      "%s: tensor %s: shape and dtype give %llu elements of %u bytes, its "
                      "data_offsets hold %llu bytes",
                      name, t->name, (unsigned long long)numel, esz,
                      (unsigned long long)(t->end - t->begin));
      goto out;
    }
    nt++;
  }
  /* Names are unique; the tensors tile the data section: no gap, no overlap. */
  qsort(ts, (size_t)nt, sizeof *ts, st_cmp_name);
  for (int i = 1; i < nt; i++)
    if (!strcmp(ts[i - 1].name, ts[i].name)) {
      rc = ft_err_set(FT_EFORMAT, "%s: tensor %s appears twice", name, ts[i].name);
      goto out;
    }
  qsort(ts, (size_t)nt, sizeof *ts, st_cmp_begin);
  uint64_t at = 0;
  for (int i = 0; i < nt; i++) {
    if (ts[i].begin != at) {
      rc = ft_err_set(FT_EFORMAT,
                      "%s: tensor %s starts at byte %llu of the data, expected %llu "
                      "(a gap or an overlap)",
                      name, ts[i].name, (unsigned long long)ts[i].begin, (unsigned long long)at);
      goto out;
    }
    at = ts[i].end;
  }
  if (at != data_len) {
    rc = ft_err_set(FT_EFORMAT, "%s: the tensors end at byte %llu of a %llu-byte data section",
                    name, (unsigned long long)at, (unsigned long long)data_len);
    goto out;
  }
  *out = ts;
  *nout = nt;
  if (data_off)
    *data_off = 8 + hlen;
  ts = NULL;
out:
  cJSON_Delete(root);
  free(ts);
  return rc;
}

static const ft_st_tensor *st_find(const ft_st_tensor *byname, int n, const char *name) {
  ft_st_tensor key;
  snprintf(key.name, sizeof key.name, "%s", name);
  return bsearch(&key, byname, (size_t)n, sizeof key, st_cmp_name);
}

int ft_gpt2_read_safetensors(const char *path, int n_head, ft_gpt2_dims *d, float **params) {
  int rc = FT_OK, nt = 0, nw = 0;
  ft_st_tensor *ts = NULL;
  st_tensor *want = NULL;
  unsigned char *head = NULL;
  float *P = NULL, *tbuf = NULL;
  uint64_t data_off = 0;
  char why[256];
  *params = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ft_err_set(FT_EIO, "%s: cannot open safetensors file: %s", path, strerror(errno));
  struct stat st;
  unsigned char len8[8];
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = ft_err_set(FT_EIO, "%s: not a regular file", path);
    goto out;
  }
  if (st.st_size < 8 || pread(fd, len8, 8, 0) != 8) {
    rc = ft_err_set(FT_EFORMAT, "%s: %lld bytes, too short for a safetensors file", path,
                    (long long)st.st_size);
    goto out;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = hlen << 8 | len8[i];
  if (hlen > FT_ST_MAX_HEADER || hlen > (uint64_t)st.st_size - 8) {
    rc = ft_st_parse_header(path, len8, 8, (uint64_t)st.st_size, &ts, &nt, NULL);
    goto out; /* the parser words the error */
  }
  head = malloc(8 + hlen);
  if (!head) {
    rc = ft_err_set(FT_ENOMEM, "%s: out of memory for the header", path);
    goto out;
  }
  if (pread(fd, head, 8 + hlen, 0) != (ssize_t)(8 + hlen)) {
    rc = ft_err_set(FT_EIO, "%s: short read of the header", path);
    goto out;
  }
  rc = ft_st_parse_header(path, head, 8 + hlen, (uint64_t)st.st_size, &ts, &nt, &data_off);
  if (rc)
    goto out;
  qsort(ts, (size_t)nt, sizeof *ts, st_cmp_name);

  /* Dims from the shapes: wte (V, C), wpe (maxT, C), layers h.0 .. h.L-1. */
  const ft_st_tensor *wte = st_find(ts, nt, "wte.weight"), *wpe = st_find(ts, nt, "wpe.weight");
  if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] ||
      wte->shape[0] > INT32_MAX || wpe->shape[0] > INT32_MAX || wte->shape[1] > INT32_MAX) {
    rc = ft_err_set(FT_EFORMAT,
                    "%s: not a GPT-2 model: needs 2-D wte.weight (V, C) and wpe.weight (maxT, C)",
                    path);
    goto out;
  }
  int L = 0;
  for (;; L++) {
    char nm[64];
    snprintf(nm, sizeof nm, "h.%d.ln_1.weight", L);
    if (!st_find(ts, nt, nm) || L >= 4096)
      break;
  }
  ft_gpt2_dims dd = {.max_seq_len = (int)wpe->shape[0],
                     .vocab_size = (int)wte->shape[0],
                     .n_layer = L,
                     .n_head = n_head,
                     .channels = (int)wte->shape[1]};
  dd.padded_vocab_size = dd.vocab_size > 0 && dd.vocab_size <= (1 << 24)
                             ? ft_gpt2_pad_vocab(dd.vocab_size)
                             : dd.vocab_size;
  if (dims_check(&dd, why, sizeof why)) {
    rc = ft_err_set(FT_EFORMAT, "%s: %s", path, why);
    goto out;
  }
  /* Every tensor of the layout, F32, with exactly its shape; checked before
   * any allocation the size of the model. */
  want = calloc((size_t)(4 + 12 * L), sizeof *want);
  if (!want) {
    rc = ft_err_set(FT_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  nw = st_list(&dd, want);
  size_t maxbuf = 0;
  for (int i = 0; i < nw; i++) {
    const ft_st_tensor *t = st_find(ts, nt, want[i].name);
    int nd = want[i].cols ? 2 : 1;
    if (!t) {
      rc = ft_err_set(FT_EFORMAT, "%s: tensor %s is missing", path, want[i].name);
      goto out;
    }
    if (strcmp(t->dtype, "F32") || t->ndim != nd || t->shape[0] != want[i].rows ||
        (nd == 2 && t->shape[1] != want[i].cols)) {
      rc = ft_err_set(FT_EFORMAT, "%s: tensor %s is %s with %d dims, expected F32 (%zu%s%.0zu)",
                      path, want[i].name, t->dtype, t->ndim, want[i].rows, nd == 2 ? ", " : "",
                      want[i].cols);
      goto out;
    }
    if (want[i].transpose && st_numel(&want[i]) > maxbuf)
      maxbuf = st_numel(&want[i]);
  }
  P = calloc(ft_gpt2_num_params(&dd), sizeof(float));
  tbuf = maxbuf ? malloc(maxbuf * sizeof(float)) : NULL;
  if (!P || (maxbuf && !tbuf)) {
    rc = ft_err_set(FT_ENOMEM, "%s: out of memory for %zu parameters", path,
                    ft_gpt2_num_params(&dd));
    goto out;
  }
  for (int i = 0; i < nw; i++) {
    const ft_st_tensor *t = st_find(ts, nt, want[i].name);
    size_t bytes = st_numel(&want[i]) * sizeof(float);
    float *dst = want[i].transpose ? tbuf : P + want[i].off;
    if (pread(fd, dst, bytes, (off_t)(data_off + t->begin)) != (ssize_t)bytes) {
      rc = ft_err_set(FT_EIO, "%s: short read in tensor %s", path, want[i].name);
      goto out;
    }
    if (want[i].transpose) /* the file holds (in, out); our layout (out, in) */
      transpose(P + want[i].off, tbuf, want[i].cols, want[i].rows);
  }
  *d = dd;
  *params = P;
  P = NULL;
out:
  free(tbuf);
  free(P);
  free(want);
  free(head);
  free(ts);
  close(fd);
  return rc;
}
