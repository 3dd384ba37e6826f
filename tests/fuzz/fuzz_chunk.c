/*
 * fuzz_chunk: libFuzzer harness for chunk objects (ckptstore/ckpt_chunk.c:
 * headers, the shuffle filter, delta objects with their chains and seals,
 * the lossy forms), the bytes a store reads back from a disk or a bucket.
 *
 * The input is one chunk object. Properties: its chain parses or is
 * FT_ECORRUPT, and a parsed chain lies inside the object and is at most
 * CKPT_MAX_CHAIN long; ckpt_chunk_check_alone and ckpt_chunk_decode (with
 * a base of the right length when it names one) return only documented
 * codes, and a decode that succeeds wrote bytes that hash to the name
 * asked for (the name of what it decoded). Then round trips on the input
 * read as f32 values: encoded alone, as a delta on a perturbed copy, and in
 * each lossy form, every object decodes back to its name's bytes.
 */
#include "fuzz_common.h"

#include "ckpt_int.h"
#include "ft_err.h"

#include <stdlib.h>
#include <string.h>

#define MAX_RAW (1u << 20)

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static void decode_any(const uint8_t *obj, size_t size) {
  int depth = -1;
  const uint8_t *chain = NULL;
  int rc = ckpt_chunk_chain(obj, size, &depth, &chain);
  FUZZ_CHECK(rc == FT_OK || rc == FT_ECORRUPT);
  if (rc == FT_OK) {
    FUZZ_CHECK(depth >= 0 && depth <= CKPT_MAX_CHAIN);
    FUZZ_CHECK(!depth || (chain >= obj && chain + (size_t)depth * CKPT_HASH_LEN <= obj + size));
  }
  if (size < 32 || get64(obj + 8) > MAX_RAW)
    return; /* a header asking for more is refused by size elsewhere */
  size_t raw = (size_t)get64(obj + 8);
  uint8_t name[CKPT_HASH_LEN] = {0};
  rc = ckpt_chunk_check_alone(obj, size, name);
  FUZZ_CHECK(rc == FT_OK || rc == FT_ECORRUPT);
  uint8_t *base = calloc(1, raw ? raw : 1), *dst = malloc(raw ? raw : 1);
  FUZZ_CHECK(base && dst);
  rc = ckpt_chunk_decode(obj, size, name, depth > 0 ? base : NULL, dst, raw);
  FUZZ_CHECK(rc == FT_ECORRUPT); /* nothing hashes to all zeros */
  uint8_t tmp_name[CKPT_HASH_LEN];
  uint8_t *tmp = malloc(raw ? raw : 1);
  FUZZ_CHECK(tmp);
  if (ckpt_chunk_apply(obj, size, name, dst, tmp, raw) == FT_OK) {
    /* what it decodes to, named: decoding again under that name succeeds */
    ckpt_sha256(dst, raw, tmp_name);
    if (depth == 0)
      FUZZ_CHECK(ckpt_chunk_decode(obj, size, tmp_name, NULL, tmp, raw) == FT_OK);
  }
  free(tmp);
  free(base);
  free(dst);
}

static void round_trip(const uint8_t *data, size_t size) {
  size_t len = size / 4 * 4;
  if (len == 0 || len > MAX_RAW)
    return;
  uint8_t *base = malloc(len), *out = malloc(len), *deq = malloc(len), *obj = NULL;
  FUZZ_CHECK(base && out && deq);
  for (size_t i = 0; i < len; i++)
    base[i] = (uint8_t)(data[i] ^ (i % 7 == 0 ? 1 : 0));
  uint8_t h[CKPT_HASH_LEN], hb[CKPT_HASH_LEN];
  ckpt_sha256(data, len, h);
  ckpt_sha256(base, len, hb);
  size_t objlen = 0;
  FUZZ_CHECK(ckpt_chunk_encode(data, len, 4, 1, NULL, &obj, &objlen) == FT_OK);
  FUZZ_CHECK(ckpt_chunk_decode(obj, objlen, h, NULL, out, len) == FT_OK);
  FUZZ_CHECK(memcmp(out, data, len) == 0);
  free(obj);
  ckpt_chunk_base b = {.raw = base, .chain = hb, .depth = 1};
  FUZZ_CHECK(ckpt_chunk_encode(data, len, 4, 1, &b, &obj, &objlen) == FT_OK);
  FUZZ_CHECK(ckpt_chunk_decode(obj, objlen, h, base, out, len) == FT_OK);
  FUZZ_CHECK(memcmp(out, data, len) == 0);
  free(obj);
  for (int k = CKPT_LOSSY_BF16; k <= CKPT_LOSSY_Q8LOG; k++) {
    FUZZ_CHECK(ckpt_chunk_encode_lossy(data, len, k, 1, deq, &obj, &objlen) == FT_OK);
    if (!obj)
      continue; /* a value the form cannot hold */
    uint8_t hd[CKPT_HASH_LEN];
    ckpt_sha256(deq, len, hd);
    FUZZ_CHECK(ckpt_chunk_decode(obj, objlen, hd, NULL, out, len) == FT_OK);
    FUZZ_CHECK(memcmp(out, deq, len) == 0);
    FUZZ_CHECK(ckpt_chunk_check_alone(obj, objlen, hd) == FT_OK);
    free(obj);
  }
  free(base);
  free(out);
  free(deq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *obj = (uint8_t *)fuzz_copy(data, size); /* exact size: overreads trap */
  decode_any(obj, size);
  round_trip(obj, size);
  free(obj);
  return 0;
}
