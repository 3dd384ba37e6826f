/*
 * test_gpt2io: GPT-2's layout and model files (common/ft_gpt2.c).
 *
 * The layout against hand-computed offsets; llm.c files: our write -> read
 * round trip is bitwise, and a file built by hand in llm.c's tensor order
 * lands every tensor at the right offset of our layout; bad files are
 * refused with the file named; safetensors: the header parsed with cJSON
 * (names, dtypes, shapes, contiguous offsets, metadata) and every tensor's
 * values checked, Conv1D weights transposed; the export reads back bitwise
 * (ft_gpt2_read_safetensors), and bad headers (sizes, dtypes, shapes,
 * offsets with gaps or overlaps, duplicates, missing tensors) are refused
 * naming the file and the tensor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ft_err.h"
#include "ft_gpt2.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* maxT 8, V 10 (Vp 128), L 2, NH 2, C 4: small, with every size distinct
 * enough that a wrong offset shows. */
static const ft_gpt2_dims D = {.max_seq_len = 8,
                               .vocab_size = 10,
                               .padded_vocab_size = 128,
                               .n_layer = 2,
                               .n_head = 2,
                               .channels = 4};

static char dir[256];

static int group_setup(void **state) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/ft_test_gpt2io.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *path_in(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}

static void assert_detail_has(const char *needle) {
  const char *d = ft_err_detail();
  if (!strstr(d, needle))
    fail_msg("detail \"%s\" lacks \"%s\"", d, needle);
}

static float *random_params(const ft_gpt2_dims *d, uint32_t seed) {
  size_t n = ft_gpt2_num_params(d);
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  uint32_t x = seed;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    p[i] = (float)((int32_t)x) / 2147483648.0f;
  }
  return p;
}

static void test_layout(void **state) {
  const size_t C = 4, L = 2;
  assert_int_equal(ft_gpt2_pad_vocab(50257), 50304);
  assert_int_equal(ft_gpt2_pad_vocab(256), 256);
  assert_int_equal(ft_gpt2_pad_vocab(10), 128);
  assert_int_equal(ft_gpt2_ngroups(&D), 5);
  char buf[16];
  assert_string_equal(ft_gpt2_group_name(&D, 0, buf, sizeof buf), "wte");
  assert_string_equal(ft_gpt2_group_name(&D, 1, buf, sizeof buf), "wpe");
  assert_string_equal(ft_gpt2_group_name(&D, 3, buf, sizeof buf), "h.1");
  assert_string_equal(ft_gpt2_group_name(&D, 4, buf, sizeof buf), "lnf");
  /* Block tensors back to back, in llm.c's per-layer order. */
  const size_t numel[FT_B_COUNT] = {C, C, 3 * C * C, 3 * C, C * C,     C,
                                    C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  size_t off = 0;
  for (int t = 0; t < FT_B_COUNT; t++) {
    assert_int_equal(ft_gpt2_block_offset(&D, t), off);
    assert_int_equal(ft_gpt2_block_numel(&D, t), numel[t]);
    off += numel[t];
  }
  assert_int_equal(off, 12 * C * C + 13 * C);
  assert_int_equal(ft_gpt2_group_numel(&D, 2), off);
  assert_int_equal(ft_gpt2_group_offset(&D, 1), 128 * C);
  assert_int_equal(ft_gpt2_group_offset(&D, 2), 128 * C + 8 * C);
  assert_int_equal(ft_gpt2_group_offset(&D, 4), 128 * C + 8 * C + L * off);
  assert_int_equal(ft_gpt2_num_params(&D), 128 * C + 8 * C + L * off + 2 * C);
  /* GPT-2 small: llm.c's count with Vp = 50304. */
  ft_gpt2_dims g = {1024, 50257, 50304, 12, 12, 768};
  assert_int_equal(ft_gpt2_num_params(&g), 124475904);
  assert_true(ft_gpt2_block_decays(FT_B_QKVW));
  assert_true(ft_gpt2_block_decays(FT_B_FCPROJW));
  assert_false(ft_gpt2_block_decays(FT_B_QKVB));
  assert_false(ft_gpt2_block_decays(FT_B_LN1W));
}

static void test_llmc_roundtrip(void **state) {
  float *p = random_params(&D, 7);
  const char *path = path_in("rt.bin");
  assert_int_equal(ft_gpt2_write_llmc(path, &D, p), FT_OK);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_size, 1024 + 4 * ft_gpt2_num_params(&D));
  ft_gpt2_dims d2;
  float *q = NULL;
  assert_int_equal(ft_gpt2_read_llmc(path, &d2, &q), FT_OK);
  assert_memory_equal(&d2, &D, sizeof D);
  assert_memory_equal(q, p, ft_gpt2_num_params(&D) * sizeof(float));
  free(q);
  free(p);
}

/* Value of element i of llm.c tensor k (0..15) for layer l: exact in fp32. */
static float marker(int k, int l, size_t i) {
  return (float)(k * 100000 + l * 10000 + (int)i);
}

static void test_llmc_handbuilt(void **state) {
  const int C = 4, L = 2, V = 10, Vp = 128, T = 8;
  /* llm.c's fill_in_parameter_sizes, per layer for the 12 layered ones. */
  const size_t sizes[16] = {
      (size_t)Vp * C, (size_t)T * C, C,         C, 3 * C * C, 3 * C, C * C, C, C, C,
      4 * C * C,      4 * C,         4 * C * C, C, C,         C};
  const char *path = path_in("hand.bin");
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  int32_t h[256] = {20240326, 3, T, V, L, 2, C, Vp};
  fwrite(h, sizeof h, 1, fp);
  for (int k = 0; k < 16; k++) {
    int layered = k >= 2 && k < 14;
    for (int l = 0; l < (layered ? L : 1); l++)
      for (size_t i = 0; i < sizes[k]; i++) {
        float v = marker(k, l, i);
        fwrite(&v, sizeof v, 1, fp);
      }
  }
  assert_int_equal(fclose(fp), 0);

  ft_gpt2_dims d;
  float *p = NULL;
  assert_int_equal(ft_gpt2_read_llmc(path, &d, &p), FT_OK);
  assert_int_equal(d.max_seq_len, T);
  assert_int_equal(d.vocab_size, V);
  assert_int_equal(d.padded_vocab_size, Vp);
  assert_int_equal(d.n_layer, L);
  assert_int_equal(d.n_head, 2);
  assert_int_equal(d.channels, C);
  /* Our layout by hand: wte, wpe, then per block the 12 tensors, then lnf. */
  size_t blk = 12 * C * C + 13 * C, base_blocks = (size_t)Vp * C + (size_t)T * C;
  for (size_t i = 0; i < sizes[0]; i++)
    assert_true(p[i] == marker(0, 0, i));
  for (size_t i = 0; i < sizes[1]; i++)
    assert_true(p[Vp * C + i] == marker(1, 0, i));
  for (int l = 0; l < L; l++) {
    size_t off = base_blocks + l * blk;
    for (int k = 2; k < 14; k++) {
      for (size_t i = 0; i < sizes[k]; i++)
        if (p[off + i] != marker(k, l, i))
          fail_msg("layer %d tensor %d elem %zu: got %g want %g", l, k, i, p[off + i],
                   marker(k, l, i));
      off += sizes[k];
    }
  }
  size_t lnf = base_blocks + L * blk;
  for (size_t i = 0; i < (size_t)C; i++) {
    assert_true(p[lnf + i] == marker(14, 0, i));
    assert_true(p[lnf + C + i] == marker(15, 0, i));
  }
  assert_int_equal(lnf + 2 * C, ft_gpt2_num_params(&d));
  /* Writing it back gives the same bytes. */
  const char *path2 = path_in("hand2.bin");
  assert_int_equal(ft_gpt2_write_llmc(path2, &d, p), FT_OK);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, path2);
  assert_int_equal(system(cmd), 0);
  free(p);
}

static void write_header_only(const char *path, int32_t magic, int32_t version) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  int32_t h[256] = {magic, version, 8, 10, 2, 2, 4, 128};
  fwrite(h, sizeof h, 1, fp);
  float z[64] = {0};
  fwrite(z, sizeof z, 1, fp);
  fclose(fp);
}

static void test_llmc_bad(void **state) {
  ft_gpt2_dims d;
  float *p = (float *)1;
  const char *path = path_in("badmagic.bin");
  write_header_only(path, 20240520, 1);
  assert_int_equal(ft_gpt2_read_llmc(path, &d, &p), FT_EFORMAT);
  assert_null(p);
  assert_detail_has(path);
  assert_detail_has("20240326");
  assert_detail_has("token shard");

  path = path_in("bf16.bin");
  write_header_only(path, 20240326, 5);
  assert_int_equal(ft_gpt2_read_llmc(path, &d, &p), FT_EFORMAT);
  assert_detail_has(path);
  assert_detail_has("bf16");
  assert_detail_has("version 3");

  path = path_in("v9.bin");
  write_header_only(path, 20240326, 9);
  assert_int_equal(ft_gpt2_read_llmc(path, &d, &p), FT_EFORMAT);
  assert_detail_has(path);
  assert_detail_has("version 9");

  path = path_in("short.bin"); /* right header, too few parameters */
  write_header_only(path, 20240326, 3);
  assert_int_equal(ft_gpt2_read_llmc(path, &d, &p), FT_EFORMAT);
  assert_detail_has(path);
  assert_detail_has("bytes");

  path = path_in("missing.bin");
  assert_int_equal(ft_gpt2_read_llmc(path, &d, &p), FT_EIO);
  assert_detail_has(path);

  ft_gpt2_dims bad = D;
  bad.padded_vocab_size = 4;
  float x = 0;
  assert_int_equal(ft_gpt2_write_llmc(path_in("bad.bin"), &bad, &x), FT_EINVAL);
  assert_int_equal(access(path_in("bad.bin"), F_OK), -1);
}

/* The expected safetensors contents, written out by hand in HF's names. */
typedef struct {
  char name[48];
  size_t rows, cols; /* cols 0: 1-D */
  size_t src;        /* offset of the source tensor in our layout */
  int transpose;     /* src is (cols, rows) */
} want_t;

static int build_want(want_t *w) {
  const size_t C = 4;
  int n = 0;
  w[n++] = (want_t){"wte.weight", 10, C, 0, 0};
  w[n++] = (want_t){"wpe.weight", 8, C, 128 * C, 0};
  static const struct {
    const char *s;
    int t;
    size_t r, c;
    int tr;
  } b[] = {{"ln_1.weight", FT_B_LN1W, 4, 0, 0},
           {"ln_1.bias", FT_B_LN1B, 4, 0, 0},
           {"attn.c_attn.weight", FT_B_QKVW, 4, 12, 1},
           {"attn.c_attn.bias", FT_B_QKVB, 12, 0, 0},
           {"attn.c_proj.weight", FT_B_ATTPROJW, 4, 4, 1},
           {"attn.c_proj.bias", FT_B_ATTPROJB, 4, 0, 0},
           {"ln_2.weight", FT_B_LN2W, 4, 0, 0},
           {"ln_2.bias", FT_B_LN2B, 4, 0, 0},
           {"mlp.c_fc.weight", FT_B_FCW, 4, 16, 1},
           {"mlp.c_fc.bias", FT_B_FCB, 16, 0, 0},
           {"mlp.c_proj.weight", FT_B_FCPROJW, 16, 4, 1},
           {"mlp.c_proj.bias", FT_B_FCPROJB, 4, 0, 0}};
  for (int l = 0; l < 2; l++)
    for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) {
      want_t *x = &w[n++];
      snprintf(x->name, sizeof x->name, "h.%d.%s", l, b[k].s);
      x->rows = b[k].r;
      x->cols = b[k].c;
      x->src = ft_gpt2_group_offset(&D, 2 + l) + ft_gpt2_block_offset(&D, b[k].t);
      x->transpose = b[k].tr;
    }
  w[n++] = (want_t){"ln_f.weight", C, 0, ft_gpt2_group_offset(&D, 4), 0};
  w[n++] = (want_t){"ln_f.bias", C, 0, ft_gpt2_group_offset(&D, 4) + C, 0};
  return n;
}

static void test_safetensors(void **state) {
  float *p = random_params(&D, 99);
  const char *keys[] = {"step", "note"}, *vals[] = {"42", "say \"hi\""};
  const char *path = path_in("model.safetensors");
  assert_int_equal(ft_gpt2_write_safetensors(path, &D, p, keys, vals, 2), FT_OK);

  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  long fsize = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *file = malloc((size_t)fsize);
  assert_int_equal(fread(file, 1, (size_t)fsize, fp), (size_t)fsize);
  fclose(fp);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = hlen << 8 | file[i];
  assert_true(hlen > 2 && 8 + hlen <= (uint64_t)fsize);
  assert_int_equal((8 + hlen) % 8, 0);
  cJSON *root = cJSON_ParseWithLength((const char *)file + 8, (size_t)hlen);
  assert_non_null(root);
  const float *data = (const float *)(file + 8 + hlen);
  size_t data_bytes = (size_t)fsize - 8 - hlen;

  cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  assert_non_null(meta);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "format")), "pt");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "step")), "42");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "note")),
                      "say \"hi\"");

  want_t want[64];
  int nw = build_want(want);
  assert_int_equal(cJSON_GetArraySize(root), nw + 1);
  /* Offsets: sorted by begin they tile [0, data_bytes) with no gap. */
  size_t *begins = calloc((size_t)nw, sizeof *begins), *ends = calloc((size_t)nw, sizeof *ends);
  for (int k = 0; k < nw; k++) {
    cJSON *o = cJSON_GetObjectItemCaseSensitive(root, want[k].name);
    if (!o)
      fail_msg("missing tensor %s", want[k].name);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "dtype")), "F32");
    cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    assert_int_equal(cJSON_GetArraySize(shape), want[k].cols ? 2 : 1);
    assert_int_equal((size_t)cJSON_GetArrayItem(shape, 0)->valuedouble, want[k].rows);
    if (want[k].cols)
      assert_int_equal((size_t)cJSON_GetArrayItem(shape, 1)->valuedouble, want[k].cols);
    cJSON *offs = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
    assert_int_equal(cJSON_GetArraySize(offs), 2);
    size_t b = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
    size_t e = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
    size_t numel = want[k].cols ? want[k].rows * want[k].cols : want[k].rows;
    assert_int_equal(e - b, numel * 4);
    assert_int_equal(b % 4, 0);
    assert_true(e <= data_bytes);
    begins[k] = b;
    ends[k] = e;
    /* Values: Conv1D weights are the transpose of our (out, in). */
    const float *got = data + b / 4;
    const float *src = p + want[k].src;
    for (size_t i = 0; i < want[k].rows; i++)
      for (size_t j = 0; j < (want[k].cols ? want[k].cols : 1); j++) {
        size_t c = want[k].cols ? want[k].cols : 1;
        float g = got[i * c + j];
        float s = want[k].transpose ? src[j * want[k].rows + i] : src[i * c + j];
        if (memcmp(&g, &s, sizeof g) != 0)
          fail_msg("%s[%zu][%zu] = %g, want %g", want[k].name, i, j, g, s);
      }
  }
  size_t pos = 0;
  for (int seen = 0; seen < nw; seen++) {
    int hit = -1;
    for (int k = 0; k < nw; k++)
      if (begins[k] == pos)
        hit = k;
    if (hit < 0)
      fail_msg("no tensor starts at data offset %zu", pos);
    pos = ends[hit];
  }
  assert_int_equal(pos, data_bytes);
  /* And the order in the header is the order in the file. */
  size_t prev_end = 0;
  cJSON *it;
  cJSON_ArrayForEach(it, root) {
    if (!strcmp(it->string, "__metadata__"))
      continue;
    cJSON *offs = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    assert_int_equal((size_t)cJSON_GetArrayItem(offs, 0)->valuedouble, prev_end);
    prev_end = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
  }
  /* Spot-check one transposition by name, as a reader would. */
  cJSON *ca = cJSON_GetObjectItemCaseSensitive(root, "h.1.attn.c_attn.weight");
  const float *caw =
      data + (size_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ca, "data_offsets"), 0)
                     ->valuedouble /
                 4;
  const float *qkvw = p + ft_gpt2_group_offset(&D, 3) + ft_gpt2_block_offset(&D, FT_B_QKVW);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 12; j++)
      assert_true(caw[i * 12 + j] == qkvw[j * 4 + i]);
  free(begins);
  free(ends);
  cJSON_Delete(root);
  free(file);
  free(p);
}

/* The export reads back: same dims (n_head given), every parameter the
 * same bits, the padding rows of wte zero. */
static void test_safetensors_roundtrip(void **state) {
  float *p = random_params(&D, 5), *q = NULL;
  const char *path = path_in("rt.safetensors");
  ft_gpt2_dims d;
  assert_int_equal(ft_gpt2_write_safetensors(path, &D, p, NULL, NULL, 0), FT_OK);
  assert_int_equal(ft_gpt2_read_safetensors(path, D.n_head, &d, &q), FT_OK);
  assert_memory_equal(&d, &D, sizeof d);
  size_t n = ft_gpt2_num_params(&D), C = (size_t)D.channels;
  for (size_t i = 0; i < n; i++) {
    int pad = i >= (size_t)D.vocab_size * C && i < (size_t)D.padded_vocab_size * C;
    float want = pad ? 0.0f : p[i];
    if (memcmp(&q[i], &want, sizeof want) != 0)
      fail_msg("parameter %zu: %g, want %g", i, q[i], want);
  }
  free(q);
  /* n_head that does not divide C is refused, naming the file */
  assert_int_equal(ft_gpt2_read_safetensors(path, 3, &d, &q), FT_EFORMAT);
  assert_detail_has("rt.safetensors: channels 4 not divisible by n_head 3");
  assert_null(q);
  free(p);
}

/* A safetensors file from bytes: the header JSON, padded, then data_len
 * bytes of data. Returns the file's size; buf must hold it. */
static size_t st_build(unsigned char *buf, const char *json, size_t data_len) {
  size_t j = strlen(json);
  uint64_t h = j;
  memcpy(buf, &h, 8);
  memcpy(buf + 8, json, j);
  memset(buf + 8 + j, 0x5a, data_len);
  return 8 + j + data_len;
}

static void st_bad(const char *json, size_t data_len, const char *needle) {
  unsigned char buf[1024];
  ft_st_tensor *ts = (ft_st_tensor *)1;
  int n = -1;
  size_t len = st_build(buf, json, data_len);
  int rc = ft_st_parse_header("x.st", buf, len, len, &ts, &n, NULL);
  if (rc != FT_EFORMAT || !strstr(ft_err_detail(), needle))
    fail_msg("%s: rc %d, detail \"%s\" lacks \"%s\"", json, rc, ft_err_detail(), needle);
  assert_null(ts);
  assert_int_equal(n, 0);
}

static void test_safetensors_header(void **state) {
  unsigned char buf[1024];
  ft_st_tensor *ts;
  int n;
  uint64_t off;
  const char *good = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                     "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                     "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]}}   ";
  size_t len = st_build(buf, good, 16);
  assert_int_equal(ft_st_parse_header("x.st", buf, len, len, &ts, &n, &off), FT_OK);
  assert_int_equal(n, 3);
  assert_int_equal(off, 8 + strlen(good));
  assert_string_equal(ts[0].name, "a"); /* sorted by begin */
  assert_string_equal(ts[0].dtype, "BF16");
  assert_int_equal(ts[0].ndim, 2);
  assert_string_equal(ts[1].name, "b");
  assert_int_equal(ts[1].begin, 8);
  assert_int_equal(ts[1].end, 16);
  free(ts);
  /* the header must be all there */
  assert_int_equal(ft_st_parse_header("x.st", buf, 20, len, &ts, &n, &off), FT_EINVAL);

  st_bad("{", 0, "x.st: safetensors header size 1 does not fit");
  len = st_build(buf, "{}", 0); /* no tensors: a valid, empty file */
  assert_int_equal(ft_st_parse_header("x.st", buf, len, len, &ts, &n, &off), FT_OK);
  assert_int_equal(n, 0);
  free(ts);
  uint64_t huge = 1000;
  memcpy(buf, &huge, 8);
  assert_int_equal(ft_st_parse_header("x.st", buf, 16, 16, &ts, &n, NULL), FT_EFORMAT);
  assert_detail_has("header size 1000 does not fit (file 16 bytes");
  st_bad("[1,2]", 0, "not a JSON object");
  st_bad("{} x", 0, "bytes after the safetensors header's JSON object");
  st_bad("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value of 'k' is not a string");
  st_bad("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensor a needs a known dtype");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "bad shape");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "bad shape");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
         "\"data_offsets\":[0,4]}}",
         4, "bad shape");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         "shape and dtype give 2 elements of 4 bytes, its data_offsets hold 4 bytes");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 4,
         "data_offsets are not within the 4-byte data section");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
         "data_offsets are not within");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, "tensor b starts at byte 8 of the data, expected 4 (a gap or an overlap)");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "(a gap or an overlap)");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
         "the tensors end at byte 4 of a 8-byte data section");
  st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "tensor a appears twice");
}

/* A GPT-2 file missing a tensor, or with a wrong dtype or shape, is refused
 * naming the file and the tensor. */
static void test_safetensors_not_gpt2(void **state) {
  unsigned char buf[1024];
  const char *path = path_in("bad.safetensors");
  ft_gpt2_dims d;
  float *q = (float *)1;
  size_t len =
      st_build(buf,
               "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
               "\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[32,64]}}",
               64);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(buf, 1, len, fp), len);
  fclose(fp);
  assert_int_equal(ft_gpt2_read_safetensors(path, 2, &d, &q), FT_EFORMAT);
  assert_detail_has("bad.safetensors: every dimension must be positive"); /* no layers */
  assert_null(q);

  /* a real export with one tensor renamed */
  float *p = random_params(&D, 3);
  assert_int_equal(ft_gpt2_write_safetensors(path, &D, p, NULL, NULL, 0), FT_OK);
  fp = fopen(path, "r+b");
  char head[4096];
  assert_int_equal(fread(head, 1, sizeof head, fp), sizeof head);
  char *hit = strstr(head + 8, "h.1.mlp.c_proj.bias");
  assert_non_null(hit);
  hit[2] = '7'; /* h.7.mlp.c_proj.bias: an extra tensor, ignored */
  fseek(fp, hit + 2 - head, SEEK_SET);
  fwrite(hit + 2, 1, 1, fp);
  fclose(fp);
  assert_int_equal(ft_gpt2_read_safetensors(path, 2, &d, &q), FT_EFORMAT);
  assert_detail_has("bad.safetensors: tensor h.1.mlp.c_proj.bias is missing");

  assert_int_equal(ft_gpt2_write_safetensors(path, &D, p, NULL, NULL, 0), FT_OK);
  fp = fopen(path, "r+b");
  assert_int_equal(fread(head, 1, sizeof head, fp), sizeof head);
  hit = strstr(head + 8, "\"F32\"");
  memcpy(hit, "\"I32\"", 5);
  fseek(fp, hit - head, SEEK_SET);
  fwrite(hit, 1, 5, fp);
  fclose(fp);
  assert_int_equal(ft_gpt2_read_safetensors(path, 2, &d, &q), FT_EFORMAT);
  assert_detail_has("bad.safetensors: tensor wte.weight is I32 with 2 dims, expected F32 (10, 4)");
  assert_int_equal(ft_gpt2_read_safetensors(path_in("nope.safetensors"), 2, &d, &q), FT_EIO);
  assert_detail_has("nope.safetensors: cannot open safetensors file");
  free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_llmc_roundtrip),
      cmocka_unit_test(test_llmc_handbuilt),
      cmocka_unit_test(test_llmc_bad),
      cmocka_unit_test(test_safetensors),
      cmocka_unit_test(test_safetensors_roundtrip),
      cmocka_unit_test(test_safetensors_header),
      cmocka_unit_test(test_safetensors_not_gpt2),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
