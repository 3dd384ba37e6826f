/*
 * ckpt_chunk: raw bytes <-> chunk object; SHA-256 names; the shuffle filter.
 *
 * A chunk is named by the SHA-256 of its raw (uncompressed, unfiltered)
 * bytes, so the same bytes always get the same name whatever codec, level or
 * filter wrote them, and a chunk is verified end to end by decoding it and
 * hashing the result. The stored object is:
 *
 *   0  "FTCK"          magic
 *   4  u8 version = 1
 *   5  u8 codec        0 raw, 1 zstd
 *   6  u8 filter       0 none, 1 byte shuffle (element size at 7)
 *   7  u8 esize
 *   8  u64 raw_len     little endian
 *   16 u64 payload_len
 *   24 8 bytes zero
 *   32 payload
 *
 * The shuffle filter (bytes of equal significance grouped together) helps
 * float data: exponents and high mantissa bytes compress, noise does not. It
 * is chosen per chunk: both ways are compressed on a sample of the chunk
 * (its first 256 KiB) and the smaller wins; a chunk that zstd cannot shrink is
 * stored raw. Pure functions; thread-safe.
 */
#include "ckpt_int.h"

#include "ft_err.h"
#include "ft_hex.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define HDR 32
#define SAMPLE (256u * 1024u)

int ckpt_sha256(const void *data, size_t len, uint8_t out[CKPT_HASH_LEN]) {
  unsigned int n = 0;
  if (!EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) || n != CKPT_HASH_LEN)
    return ft_err_set(FT_EIO, "SHA-256 failed (OpenSSL EVP_Digest)");
  return FT_OK;
}

void ckpt_hex(const uint8_t h[CKPT_HASH_LEN], char out[CKPT_HEX_LEN + 1]) {
  ft_hex_encode(h, CKPT_HASH_LEN, out);
}

int ckpt_unhex(const char *hex, uint8_t out[CKPT_HASH_LEN]) {
  if (!hex || strlen(hex) != CKPT_HEX_LEN)
    return FT_EFORMAT;
  return ft_hex_decode(hex, CKPT_HASH_LEN, out, FT_HEX_LOWER);
}

int ckpt_dtype_size(const char *dtype) {
  static const struct {
    const char *n;
    int s;
  } t[] = {{"f32", 4}, {"bf16", 2}, {"f16", 2}, {"i32", 4},
           {"i64", 8}, {"u8", 1},   {"u64", 8}, {"f64", 8}};
  for (size_t i = 0; dtype && i < sizeof t / sizeof t[0]; i++)
    if (strcmp(dtype, t[i].n) == 0)
      return t[i].s;
  return 0;
}

int ckpt_dtype_is_float(const char *dtype) {
  return dtype && (!strcmp(dtype, "f32") || !strcmp(dtype, "bf16") || !strcmp(dtype, "f16") ||
                   !strcmp(dtype, "f64"));
}

void ckpt_shuffle(uint8_t *dst, const uint8_t *src, size_t len, int esize) {
  size_t n = len / (size_t)esize;
  if (esize == 4) {
    for (size_t i = 0; i < n; i++) {
      dst[i] = src[4 * i];
      dst[n + i] = src[4 * i + 1];
      dst[2 * n + i] = src[4 * i + 2];
      dst[3 * n + i] = src[4 * i + 3];
    }
    return;
  }
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < esize; k++)
      dst[(size_t)k * n + i] = src[i * (size_t)esize + (size_t)k];
}

void ckpt_unshuffle(uint8_t *dst, const uint8_t *src, size_t len, int esize) {
  size_t n = len / (size_t)esize;
  if (esize == 4) {
    for (size_t i = 0; i < n; i++) {
      dst[4 * i] = src[i];
      dst[4 * i + 1] = src[n + i];
      dst[4 * i + 2] = src[2 * n + i];
      dst[4 * i + 3] = src[3 * n + i];
    }
    return;
  }
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < esize; k++)
      dst[i * (size_t)esize + (size_t)k] = src[(size_t)k * n + i];
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Compressed size of a sample, shuffled or not; SIZE_MAX on error. */
static size_t sample_size(ZSTD_CCtx *cc, const uint8_t *raw, size_t len, int esize, int level,
                          uint8_t *tmp, uint8_t *out, size_t outcap) {
  const uint8_t *src = raw;
  if (esize > 1) {
    ckpt_shuffle(tmp, raw, len, esize);
    src = tmp;
  }
  size_t r = ZSTD_compressCCtx(cc, out, outcap, src, len, level);
  return ZSTD_isError(r) ? SIZE_MAX : r;
}

int ckpt_chunk_encode(const void *raw, size_t len, int esize, int zstd_level, uint8_t **obj,
                      size_t *objlen) {
  int rc = FT_OK;
  uint8_t *out = NULL, *shuf = NULL, *tmp = NULL, *sout = NULL;
  ZSTD_CCtx *cc = NULL;
  *obj = NULL;
  *objlen = 0;
  size_t bound = ZSTD_compressBound(len);
  out = malloc(HDR + bound);
  cc = ZSTD_createCCtx();
  if (!out || !cc) {
    rc = ft_err_set(FT_ENOMEM, "out of memory compressing a chunk of %zu bytes", len);
    goto out;
  }
  int filter = 0;
  if (esize > 1 && len % (size_t)esize == 0 && len >= (size_t)esize * 64) {
    size_t slen = len < SAMPLE ? len : SAMPLE - SAMPLE % (size_t)esize;
    size_t scap = ZSTD_compressBound(slen);
    tmp = malloc(slen);
    sout = malloc(scap);
    if (!tmp || !sout) {
      rc = ft_err_set(FT_ENOMEM, "out of memory compressing a chunk");
      goto out;
    }
    size_t plain = sample_size(cc, raw, slen, 1, zstd_level, tmp, sout, scap);
    size_t shuffled = sample_size(cc, raw, slen, esize, zstd_level, tmp, sout, scap);
    filter = shuffled < plain;
  }
  const uint8_t *src = raw;
  if (filter) {
    shuf = malloc(len);
    if (!shuf) {
      rc = ft_err_set(FT_ENOMEM, "out of memory compressing a chunk");
      goto out;
    }
    ckpt_shuffle(shuf, raw, len, esize);
    src = shuf;
  }
  size_t clen = ZSTD_compressCCtx(cc, out + HDR, bound, src, len, zstd_level);
  if (ZSTD_isError(clen)) {
    rc = ft_err_set(FT_ECODEC, "zstd compress: %s", ZSTD_getErrorName(clen));
    goto out;
  }
  int codec = 1;
  if (clen >= len) { /* incompressible: store the raw bytes */
    codec = 0;
    filter = 0;
    memcpy(out + HDR, raw, len);
    clen = len;
  }
  memcpy(out, "FTCK", 4);
  out[4] = 1;
  out[5] = (uint8_t)codec;
  out[6] = (uint8_t)filter;
  out[7] = (uint8_t)(filter ? esize : 1);
  put64(out + 8, len);
  put64(out + 16, clen);
  memset(out + 24, 0, 8);
  *obj = out;
  *objlen = HDR + clen;
  out = NULL;
out:
  ZSTD_freeCCtx(cc);
  free(out);
  free(shuf);
  free(tmp);
  free(sout);
  return rc;
}

int ckpt_chunk_decode(const uint8_t *obj, size_t objlen, const uint8_t hash[CKPT_HASH_LEN],
                      void *dst, size_t expect_len) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(hash, hex);
  if (objlen < HDR || memcmp(obj, "FTCK", 4) != 0 || obj[4] != 1)
    return ft_err_set(FT_ECORRUPT, "chunk %s: bad header (not a chunk object, or damaged)", hex);
  int codec = obj[5], filter = obj[6], esize = obj[7];
  uint64_t raw_len = get64(obj + 8), plen = get64(obj + 16);
  if (codec > 1 || filter > 1 || esize < 1 || plen != objlen - HDR || raw_len != expect_len ||
      (filter && raw_len % (uint64_t)esize))
    return ft_err_set(FT_ECORRUPT,
                      "chunk %s: header does not match (raw %llu bytes, expected %zu; "
                      "payload %llu, file has %zu)",
                      hex, (unsigned long long)raw_len, expect_len, (unsigned long long)plen,
                      objlen - HDR);
  uint8_t *tmp = NULL;
  uint8_t *target = dst;
  if (filter) {
    tmp = malloc(expect_len ? expect_len : 1);
    if (!tmp)
      return ft_err_set(FT_ENOMEM, "out of memory decoding chunk %s", hex);
    target = tmp;
  }
  int rc = FT_OK;
  if (codec == 0) {
    memcpy(target, obj + HDR, expect_len);
  } else {
    size_t r = ZSTD_decompress(target, expect_len, obj + HDR, plen);
    if (ZSTD_isError(r) || r != expect_len) {
      rc = ft_err_set(FT_ECORRUPT, "chunk %s: does not decompress (%s)", hex,
                      ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short output");
      goto out;
    }
  }
  if (filter)
    ckpt_unshuffle(dst, tmp, expect_len, esize);
  uint8_t got[CKPT_HASH_LEN];
  rc = ckpt_sha256(dst, expect_len, got);
  if (rc)
    goto out;
  if (memcmp(got, hash, CKPT_HASH_LEN) != 0) {
    char ghex[CKPT_HEX_LEN + 1];
    ckpt_hex(got, ghex);
    rc = ft_err_set(FT_ECORRUPT, "chunk %s: SHA-256 of its bytes is %s (the data is damaged)", hex,
                    ghex);
  }
out:
  free(tmp);
  return rc;
}
