/*
 * fuzz_manifest: libFuzzer harness for the checkpoint store's manifest
 * parsers (ckptstore/ckpt_manifest.c): the checkpoint manifest (an object
 * beside the chunks, read back by load and by rebuild-catalog), the shard
 * manifest (JSON a worker sends the committing process) and the catalog's
 * per-checkpoint record.
 *
 * Every text is sealed by a SHA-256 "checksum" member, which random bytes
 * almost never get right; so each input is parsed twice by each parser: as
 * it is, and resealed (the text before its last "checksum" member, or all of
 * it, with a correct checksum member appended), which takes the fuzzer into
 * the JSON decoding and the checks after it.
 *
 * Properties: only FT_OK, FT_ECORRUPT, FT_EFORMAT, FT_EINVAL or FT_ENOMEM;
 * whatever is accepted holds the invariants the store relies on (a valid
 * run name; every tensor's chunks tile its byte range in order; nbytes is
 * dtype size x shape; a checkpoint's tensors sorted by unique name, so
 * ckpt_manifest_find finds each; a shard's rank below its world) and round-
 * trips: to_json, from_json, to_json gives the same text (and the same
 * "data" text, when the manifest has one).
 */
#include "fuzz_common.h"

#include "ckpt_int.h"
#include "ft_err.h"

static int allowed(int rc) {
  return rc == FT_OK || rc == FT_ECORRUPT || rc == FT_EFORMAT || rc == FT_EINVAL || rc == FT_ENOMEM;
}

/* The text with a correct checksum member in place of its last one. */
static char *reseal(const char *text) {
  size_t n = strlen(text);
  const char *p = NULL, *q = text;
  while ((q = strstr(q, "\"checksum\"")) != NULL)
    p = q++;
  if (p) {
    const char *comma = p;
    while (comma > text && comma[-1] != ',')
      comma--;
    if (comma > text)
      n = (size_t)(comma - 1 - text);
  }
  uint8_t h[CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1];
  if (ckpt_sha256(text, n, h))
    return NULL;
  ckpt_hex(h, hex);
  char *out = malloc(n + 100);
  if (!out)
    return NULL;
  memcpy(out, text, n);
  snprintf(out + n, 100, ",\"checksum\":\"%s\"}", hex);
  return out;
}

static void check_tensor(const ckpt_tensor *t, int shard) {
  FUZZ_CHECK(t->name != NULL);
  uint64_t nbytes = ckpt_tensor_nbytes(t->dtype, t->ndim, t->shape);
  FUZZ_CHECK(ckpt_dtype_size(t->dtype) > 0);
  if (shard)
    FUZZ_CHECK(t->offset <= nbytes && t->len <= nbytes - t->offset);
  else
    FUZZ_CHECK(t->offset == 0 && t->len == nbytes);
  uint64_t at = t->offset;
  for (int c = 0; c < t->nchunks; c++) {
    FUZZ_CHECK(t->chunks[c].offset == at && t->chunks[c].len > 0);
    at += t->chunks[c].len;
  }
  FUZZ_CHECK(at == t->offset + t->len);
}

static void one_manifest(const char *text) {
  ckpt_manifest *m = NULL;
  int rc = ckpt_manifest_from_json(text, &m);
  FUZZ_CHECK(allowed(rc));
  FUZZ_CHECK((rc == FT_OK) == (m != NULL));
  if (rc)
    return;
  const ckpt_info *i = ckpt_manifest_info(m);
  FUZZ_CHECK(ckpt_run_name_ok(i->run) && i->step >= 0 && i->parent_step >= -1 && i->world >= 1);
  FUZZ_CHECK(ckpt_manifest_ntensors(m) == i->ntensors);
  int nchunks = 0;
  for (int k = 0; k < m->ntensors; k++) {
    check_tensor(&m->tensors[k], 0);
    if (k > 0)
      FUZZ_CHECK(strcmp(m->tensors[k - 1].name, m->tensors[k].name) < 0);
    FUZZ_CHECK(ckpt_manifest_find(m, m->tensors[k].name) == k);
    ckpt_tensor_info ti;
    FUZZ_CHECK(ckpt_manifest_tensor(m, k, &ti) == FT_OK && ti.nbytes == m->tensors[k].len);
    nchunks += m->tensors[k].nchunks;
  }
  FUZZ_CHECK(nchunks == i->nchunks);
  char *a = ckpt_manifest_to_json(m);
  ckpt_manifest *m2 = NULL;
  if (a) {
    FUZZ_CHECK(ckpt_manifest_from_json(a, &m2) == FT_OK);
    char *b = ckpt_manifest_to_json(m2);
    FUZZ_CHECK(!b || strcmp(a, b) == 0);
    free(b);
    /* the opaque "data" text (a run's data listing) survives, verbatim */
    const char *d = ckpt_manifest_data_json(m), *d2 = ckpt_manifest_data_json(m2);
    FUZZ_CHECK((d == NULL) == (d2 == NULL) && (!d || strcmp(d, d2) == 0));
  }
  free(a);
  ckpt_manifest_free(m2);
  ckpt_manifest_free(m);
}

static void one_shard(const char *text) {
  ckpt_shard *sh = NULL;
  int rc = ckpt_shard_from_json(text, &sh);
  FUZZ_CHECK(allowed(rc));
  FUZZ_CHECK((rc == FT_OK) == (sh != NULL));
  if (rc)
    return;
  FUZZ_CHECK(ckpt_run_name_ok(sh->run) && sh->step >= 0);
  FUZZ_CHECK(sh->world >= 1 && ckpt_shard_rank(sh) >= 0 && ckpt_shard_rank(sh) < sh->world);
  for (int k = 0; k < sh->nparts; k++)
    check_tensor(&sh->parts[k], 1);
  char *a = ckpt_shard_to_json(sh);
  ckpt_shard *sh2 = NULL;
  if (a) {
    FUZZ_CHECK(ckpt_shard_from_json(a, &sh2) == FT_OK);
    char *b = ckpt_shard_to_json(sh2);
    FUZZ_CHECK(!b || strcmp(a, b) == 0);
    free(b);
  }
  free(a);
  ckpt_shard_free(sh2);
  ckpt_shard_free(sh);
}

static void one_info(const char *text) {
  ckpt_info i;
  int rc = ckpt_info_from_json(text, &i);
  FUZZ_CHECK(allowed(rc));
  if (rc)
    return;
  FUZZ_CHECK(ckpt_run_name_ok(i.run) && i.state >= CKPT_PENDING && i.state <= CKPT_BAD);
  FUZZ_CHECK(i.pinned == 0 || i.pinned == 1);
  char *a = ckpt_info_to_json(&i);
  ckpt_info i2;
  if (a) {
    FUZZ_CHECK(ckpt_info_from_json(a, &i2) == FT_OK);
    char *b = ckpt_info_to_json(&i2);
    FUZZ_CHECK(!b || strcmp(a, b) == 0);
    free(b);
  }
  free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the parsers take C strings: an exact-size copy plus the NUL */
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  if (size)
    memcpy(text, data, size);
  text[size] = 0;
  char *sealed = reseal(text);
  const char *inputs[2] = {text, sealed};
  for (int k = 0; k < 2; k++) {
    if (!inputs[k])
      continue;
    one_manifest(inputs[k]);
    one_shard(inputs[k]);
    one_info(inputs[k]);
  }
  free(sealed);
  free(text);
  return 0;
}
