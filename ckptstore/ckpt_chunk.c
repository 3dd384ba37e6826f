/*
 * ckpt_chunk: raw bytes <-> chunk object; SHA-256 names; the shuffle and
 * delta filters.
 *
 * A chunk is named by the SHA-256 of its raw (uncompressed, unfiltered)
 * bytes, so the same bytes always get the same name whatever codec, level or
 * filter wrote them, and a chunk is verified end to end by decoding it and
 * hashing the result. The stored object is:
 *
 *   0  "FTCK"          magic
 *   4  u8 version = 1
 *   5  u8 codec        0 raw, 1 zstd, 2 planes (a delta's: each byte plane
 *                      apart, zstd or raw; planes_compress), 3 a lossy form
 *                      of f32 values (byte 25: which; see "lossy forms")
 *   6  u8 filter       0 none, 1 byte shuffle, 2 delta (element size at 7)
 *   7  u8 esize
 *   8  u64 raw_len     little endian
 *   16 u64 payload_len
 *   24 u8 depth        delta: length of its chain (1..CKPT_MAX_CHAIN); else 0
 *   25 7 bytes zero
 *   32 delta only: its chain, depth SHA-256 names (its base first, then the
 *      base's base, ...), then its seal: the SHA-256 of the whole object
 *      but the seal, so a delta object can be checked without its base
 *   .. payload
 *
 * The shuffle filter (bytes of equal significance grouped together) helps
 * float data: exponents and high mantissa bytes compress, noise does not.
 * The delta filter encodes a chunk against its base, the same byte range of
 * an earlier checkpoint (ckpt_writer.c picks it): each element's integer
 * difference from the base's, zigzag-mapped, in byte planes. Between close
 * checkpoints most values keep their sign, exponent and top mantissa bits,
 * so the high planes are mostly zero. Decoding needs the base's raw bytes; the name
 * is still the SHA-256 of the chunk's own raw bytes, checked after decoding.
 * The filter is chosen per chunk: each way (none, shuffle, and delta when
 * there is a base) is compressed on a sample of the chunk (its first
 * 256 KiB) and the smallest wins; a chunk that zstd cannot shrink is stored
 * raw. Pure functions; thread-safe.
 */
#include "ckpt_int.h"

#include "ft_err.h"
#include "ft_hex.h"

#include <math.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define HDR 32
#define SAMPLE (256u * 1024u)

/* OpenSSL cleans itself up in an atexit handler by default. A process that
 * ends while a store's threads still hash (an error path returning from
 * main with an s3 store open: its uploaders hash every chunk they send)
 * then crashes in those threads, on a lock the cleanup freed
 * (EVP_MD_fetch -> CRYPTO_THREAD_read_lock: SIGSEGV instead of the exit
 * code; found by ckpt_property under ASan, 1 run in 6). So OpenSSL is told
 * not to clean up at exit, before main: the first initialisation decides,
 * and libcurl or the wire's HMAC may come first otherwise. */
__attribute__((constructor)) static void crypto_no_atexit(void) {
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

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

/* The delta filter (filter 2): element i (an unsigned integer of esize
 * bytes, 2 or 4) minus element i of the base, wrapping, zigzag-mapped so a
 * small change either way has its high bits zero, then split into byte
 * planes. Exact for any bytes (NaNs included): the inverse adds back. */
static void delta_fwd(uint8_t *restrict dst, const uint8_t *restrict raw,
                      const uint8_t *restrict base, size_t len, int esize) {
  size_t n = len / (size_t)esize;
  if (esize == 4) {
    for (size_t i = 0; i < n; i++) {
      uint32_t a, b;
      memcpy(&a, raw + 4 * i, 4);
      memcpy(&b, base + 4 * i, 4);
      uint32_t d = a - b;
      uint32_t z = (d << 1) ^ (0u - (d >> 31));
      dst[i] = (uint8_t)z;
      dst[n + i] = (uint8_t)(z >> 8);
      dst[2 * n + i] = (uint8_t)(z >> 16);
      dst[3 * n + i] = (uint8_t)(z >> 24);
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    uint16_t a, b;
    memcpy(&a, raw + 2 * i, 2);
    memcpy(&b, base + 2 * i, 2);
    uint16_t d = (uint16_t)(a - b);
    uint16_t z = (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)(0u - (d >> 15)));
    dst[i] = (uint8_t)z;
    dst[n + i] = (uint8_t)(z >> 8);
  }
}

/* The inverse, in place: dst holds the base and gets the chunk; pl[k] is
 * byte plane k of the differences. */
static void delta_inv(uint8_t *dst, const uint8_t *const *pl, size_t len, int esize) {
  size_t n = len / (size_t)esize;
  if (esize == 4) {
    const uint8_t *p0 = pl[0], *p1 = pl[1], *p2 = pl[2], *p3 = pl[3];
    for (size_t i = 0; i < n; i++) {
      uint32_t z =
          (uint32_t)p0[i] | (uint32_t)p1[i] << 8 | (uint32_t)p2[i] << 16 | (uint32_t)p3[i] << 24;
      uint32_t b, a = (z >> 1) ^ (0u - (z & 1));
      memcpy(&b, dst + 4 * i, 4);
      a += b;
      memcpy(dst + 4 * i, &a, 4);
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    uint16_t z = (uint16_t)(pl[0][i] | pl[1][i] << 8);
    uint16_t b, a = (uint16_t)((z >> 1) ^ (uint16_t)(0u - (z & 1)));
    memcpy(&b, dst + 2 * i, 2);
    a = (uint16_t)(a + b);
    memcpy(dst + 2 * i, &a, 2);
  }
}

/* A delta's planes (codec 2), where they are: raw ones in the object, the
 * others decompressed into tmp. */
static int planes_open(const uint8_t *payload, uint64_t plen, size_t len, int esize, uint8_t *tmp,
                       const uint8_t **pl, const char *hex) {
  size_t n = len / (size_t)esize, at = 4 * (size_t)esize;
  if (plen < at)
    return ft_err_set(FT_ECORRUPT, "chunk %s: a delta's payload is too short", hex);
  for (int k = 0; k < esize; k++) {
    uint64_t c = 0;
    for (int b = 3; b >= 0; b--)
      c = c << 8 | payload[4 * k + b];
    if (c > plen - at)
      return ft_err_set(FT_ECORRUPT, "chunk %s: plane %d runs past the object", hex, k);
    if (c == n) {
      pl[k] = payload + at;
    } else {
      size_t r = ZSTD_decompress(tmp + (size_t)k * n, n, payload + at, c);
      if (ZSTD_isError(r) || r != n)
        return ft_err_set(FT_ECORRUPT, "chunk %s: plane %d does not decompress (%s)", hex, k,
                          ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short output");
      pl[k] = tmp + (size_t)k * n;
    }
    at += c;
  }
  if (at != plen)
    return ft_err_set(FT_ECORRUPT, "chunk %s: %llu bytes after a delta's planes", hex,
                      (unsigned long long)(plen - at));
  return FT_OK;
}

int ckpt_chunk_delta_ok(size_t len, int esize) {
  return (esize == 2 || esize == 4) && len % (size_t)esize == 0;
}

/* Compressed size of the first len bytes filtered one way; SIZE_MAX on
 * error. */
static size_t sample_size(ZSTD_CCtx *cc, const uint8_t *raw, const uint8_t *base, size_t len,
                          int esize, int filter, int level, uint8_t *tmp, uint8_t *out,
                          size_t outcap) {
  const uint8_t *src = raw;
  if (filter == 1) {
    ckpt_shuffle(tmp, raw, len, esize);
    src = tmp;
  } else if (filter == 2) {
    delta_fwd(tmp, raw, base, len, esize);
    src = tmp;
  }
  size_t r = ZSTD_compressCCtx(cc, out, outcap, src, len, level);
  return ZSTD_isError(r) ? SIZE_MAX : r;
}

/* The seal of a delta object: SHA-256 of its header, chain and payload. */
static int delta_seal(const uint8_t *obj, size_t objlen, int depth, uint8_t out[CKPT_HASH_LEN]) {
  size_t pre = HDR + (size_t)depth * CKPT_HASH_LEN;
  EVP_MD_CTX *x = EVP_MD_CTX_new();
  unsigned int n = 0;
  int ok = x && EVP_DigestInit_ex(x, EVP_sha256(), NULL) && EVP_DigestUpdate(x, obj, pre) &&
           EVP_DigestUpdate(x, obj + pre + CKPT_HASH_LEN, objlen - pre - CKPT_HASH_LEN) &&
           EVP_DigestFinal_ex(x, out, &n) && n == CKPT_HASH_LEN;
  EVP_MD_CTX_free(x);
  return ok ? FT_OK : ft_err_set(FT_EIO, "SHA-256 failed (OpenSSL EVP_Digest)");
}

/* A delta's payload (codec 2): its esize byte planes, each stored apart
 * (u32 little-endian length each, then the planes): zstd where that
 * saves more than 3%, else raw (the low planes of a difference are mostly
 * noise, and a raw plane costs nothing to decode). Returns the payload's
 * length, or 0 on a zstd error. */
static size_t planes_compress(ZSTD_CCtx *cc, uint8_t *out, size_t cap, const uint8_t *planes,
                              size_t len, int esize, int level) {
  size_t n = len / (size_t)esize, at = 4 * (size_t)esize;
  for (int k = 0; k < esize; k++) {
    const uint8_t *p = planes + (size_t)k * n;
    size_t c = ZSTD_compressCCtx(cc, out + at, cap - at, p, n, level);
    if (ZSTD_isError(c))
      return 0;
    if (c >= n - n / 32) { /* not worth it: raw */
      memcpy(out + at, p, n);
      c = n;
    }
    for (int b = 0; b < 4; b++)
      out[4 * k + b] = (uint8_t)(c >> (8 * b));
    at += c;
  }
  return at;
}

int ckpt_chunk_encode(const void *raw, size_t len, int esize, int zstd_level,
                      const ckpt_chunk_base *base, uint8_t **obj, size_t *objlen) {
  int rc = FT_OK;
  uint8_t *out = NULL, *filt = NULL, *tmp = NULL, *sout = NULL;
  ZSTD_CCtx *cc = NULL;
  *obj = NULL;
  *objlen = 0;
  if (base && (!ckpt_chunk_delta_ok(len, esize) || base->depth < 1 || base->depth > CKPT_MAX_CHAIN))
    base = NULL; /* no delta for this chunk: it is encoded alone */
  size_t pre = base ? HDR + (size_t)(base->depth + 1) * CKPT_HASH_LEN : HDR;
  size_t bound = ZSTD_compressBound(len) + 64; /* + a delta's plane lengths */
  out = malloc(pre + bound);
  cc = ZSTD_createCCtx();
  if (!out || !cc) {
    rc = ft_err_set(FT_ENOMEM, "out of memory compressing a chunk of %zu bytes", len);
    goto out;
  }
  int filter = 0;
  if (esize > 1 && len % (size_t)esize == 0 && (len >= (size_t)esize * 64 || base)) {
    /* each way on a sample; the smallest wins */
    size_t slen = len < SAMPLE ? len : SAMPLE - SAMPLE % (size_t)esize;
    size_t scap = ZSTD_compressBound(slen);
    tmp = malloc(slen);
    sout = malloc(scap);
    if (!tmp || !sout) {
      rc = ft_err_set(FT_ENOMEM, "out of memory compressing a chunk");
      goto out;
    }
    const uint8_t *b = base ? base->raw : NULL;
    size_t best = sample_size(cc, raw, b, slen, esize, 0, zstd_level, tmp, sout, scap);
    for (int f = 1; f <= (base ? 2 : 1); f++) {
      size_t sz = sample_size(cc, raw, b, slen, esize, f, zstd_level, tmp, sout, scap);
      if (sz < best) {
        best = sz;
        filter = f;
      }
    }
  }
  const uint8_t *src = raw;
  if (filter) {
    filt = malloc(len);
    if (!filt) {
      rc = ft_err_set(FT_ENOMEM, "out of memory compressing a chunk");
      goto out;
    }
    if (filter == 1)
      ckpt_shuffle(filt, raw, len, esize);
    else
      delta_fwd(filt, raw, base->raw, len, esize);
    src = filt;
  }
  if (filter != 2)
    pre = HDR;
  size_t clen = filter == 2 ? planes_compress(cc, out + pre, bound, src, len, esize, zstd_level)
                            : ZSTD_compressCCtx(cc, out + pre, bound, src, len, zstd_level);
  if (ZSTD_isError(clen) || clen == 0) {
    rc = ft_err_set(FT_ECODEC, "zstd compress: %s",
                    clen ? ZSTD_getErrorName(clen) : "a delta's plane failed");
    goto out;
  }
  int codec = filter == 2 ? 2 : 1;
  if (clen >= len) { /* incompressible: store the raw bytes, alone */
    codec = 0;
    filter = 0;
    pre = HDR;
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
  if (filter == 2) {
    int depth = base->depth;
    out[24] = (uint8_t)depth;
    memcpy(out + HDR, base->chain, (size_t)depth * CKPT_HASH_LEN);
    if ((rc = delta_seal(out, pre + clen, depth, out + pre - CKPT_HASH_LEN)))
      goto out;
  }
  *obj = out;
  *objlen = pre + clen;
  out = NULL;
out:
  ZSTD_freeCCtx(cc);
  free(out);
  free(filt);
  free(tmp);
  free(sout);
  return rc;
}

/* ---- lossy forms (ckpt_part.lossy) -------------------------------------------
 *
 * codec 3: the chunk's f32 values in a lossy form (byte 25 says which, byte
 * 26 is 1 when the payload is zstd'd), decoded by exact arithmetic only (no
 * libm), so every machine decodes the same bytes and the name (the SHA-256
 * of the decoded values) checks everywhere:
 *   bf16    each value's top 16 bits, rounded to nearest even;
 *   q8      blocks of QBLOCK values: an f32 scale (max |x| / 127), then a
 *           signed 8-bit code per value (x = code * scale);
 *   q8log   blocks of QBLOCK non-negative values: the block's top exponent
 *           E (a byte), then a byte per value: 0 for 0, else 1 + 16e + m
 *           (at most 255) for 2^(E-15+e) * (1 + m/16) (16 binades, 4
 *           mantissa bits; smaller values are raised to the smallest step,
 *           never to 0: a second moment is a denominator).
 * Values a form cannot hold (NaN, infinity; negative ones for q8log) make
 * the chunk exact instead. */
#define QBLOCK 256

static uint64_t lossy_len(uint64_t raw_len, int kind) {
  uint64_t n = raw_len / 4, nb = (n + QBLOCK - 1) / QBLOCK;
  return kind == CKPT_LOSSY_BF16 ? 2 * n : kind == CKPT_LOSSY_Q8 ? 4 * nb + n : nb + n;
}

/* The lossy form of n values into q (lossy_len bytes) and what it decodes
 * to into deq; 0 when some value cannot be held. */
static int quantize(const uint8_t *raw, size_t n, int kind, uint8_t *q, uint8_t *deq) {
  size_t nb = (n + QBLOCK - 1) / QBLOCK;
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * QBLOCK, hi = lo + QBLOCK < n ? lo + QBLOCK : n;
    uint32_t top = 0; /* the largest magnitude's bits */
    for (size_t i = lo; i < hi; i++) {
      uint32_t x;
      memcpy(&x, raw + 4 * i, 4);
      if ((x & 0x7f800000u) == 0x7f800000u || (kind == CKPT_LOSSY_Q8LOG && x > 0x80000000u))
        return 0; /* not finite; or negative for a log form */
      if ((x & 0x7fffffffu) > top)
        top = x & 0x7fffffffu;
    }
    if (kind == CKPT_LOSSY_BF16) {
      for (size_t i = lo; i < hi; i++) {
        uint32_t x;
        memcpy(&x, raw + 4 * i, 4);
        uint32_t r = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
        if ((r & 0x7f80u) == 0x7f80u)
          return 0; /* rounded up to infinity */
        q[2 * i] = (uint8_t)r;
        q[2 * i + 1] = (uint8_t)(r >> 8);
        uint32_t d = r << 16;
        memcpy(deq + 4 * i, &d, 4);
      }
    } else if (kind == CKPT_LOSSY_Q8) {
      float amax, scale;
      memcpy(&amax, &top, 4);
      scale = amax / 127.0f;
      memcpy(q + 4 * b, &scale, 4);
      int8_t *codes = (int8_t *)(q + 4 * nb);
      for (size_t i = lo; i < hi; i++) {
        float x;
        memcpy(&x, raw + 4 * i, 4);
        long c = scale > 0 ? lrintf(x / scale) : 0;
        c = c > 127 ? 127 : c < -127 ? -127 : c;
        codes[i] = (int8_t)c;
        float d = (float)codes[i] * scale;
        memcpy(deq + 4 * i, &d, 4);
      }
    } else {
      uint32_t E = top >> 23;
      if (top && E < 16)
        return 0; /* below 2^-111: not worth a form of its own */
      q[b] = (uint8_t)E;
      uint8_t *codes = q + nb;
      for (size_t i = lo; i < hi; i++) {
        uint32_t x, d = 0;
        memcpy(&x, raw + 4 * i, 4);
        x &= 0x7fffffffu; /* -0 is 0 */
        uint8_t c = 0;
        if (x) {
          int e = (int)(x >> 23) - (int)(E - 15);
          int m = (int)(((x & 0x7fffffu) + (1u << 18)) >> 19);
          if (m == 16)
            m = 0, e++;
          if (e < 0)
            e = 0, m = 0;
          if (16 * e + m > 254) /* 255 codes: the top binade's last step is its own top */
            e = 15, m = 14;
          c = (uint8_t)(1 + 16 * e + m);
          d = (E - 15 + (uint32_t)e) << 23 | (uint32_t)m << 19;
        }
        codes[i] = c;
        memcpy(deq + 4 * i, &d, 4);
      }
    }
  }
  return 1;
}

static void dequantize(const uint8_t *q, size_t n, int kind, uint8_t *dst) {
  size_t nb = (n + QBLOCK - 1) / QBLOCK;
  for (size_t i = 0; i < n; i++) {
    uint32_t d;
    if (kind == CKPT_LOSSY_BF16) {
      d = (uint32_t)(q[2 * i] | q[2 * i + 1] << 8) << 16;
    } else if (kind == CKPT_LOSSY_Q8) {
      float scale, f;
      memcpy(&scale, q + 4 * (i / QBLOCK), 4);
      f = (float)(int8_t)q[4 * nb + i] * scale;
      memcpy(&d, &f, 4);
    } else {
      uint32_t E = q[i / QBLOCK], c = q[nb + i];
      d = c ? (E - 15 + (c - 1) / 16) << 23 | ((c - 1) % 16) << 19 : 0;
    }
    memcpy(dst + 4 * i, &d, 4);
  }
}

int ckpt_chunk_encode_lossy(const void *raw, size_t len, int kind, int zstd_level, uint8_t *deq,
                            uint8_t **obj, size_t *objlen) {
  *obj = NULL;
  *objlen = 0;
  if (len % 4 || kind < CKPT_LOSSY_BF16 || kind > CKPT_LOSSY_Q8LOG)
    return ft_err_set(FT_EINVAL, "a lossy form is for f32 values only");
  size_t ql = (size_t)lossy_len(len, kind);
  uint8_t *q = malloc(ql ? ql : 1), *out = malloc(HDR + ZSTD_compressBound(ql) + ql);
  int rc = FT_OK;
  if (!q || !out) {
    rc = ft_err_set(FT_ENOMEM, "out of memory quantizing a chunk");
    goto out;
  }
  if (!quantize(raw, len / 4, kind, q, deq))
    goto out; /* FT_OK, no object: the caller stores the chunk exactly */
  size_t c = ZSTD_compress(out + HDR, ZSTD_compressBound(ql), q, ql, zstd_level);
  int z = !ZSTD_isError(c) && c < ql && ql <= len; /* decoded in a len-byte buffer */
  if (!z) {
    memcpy(out + HDR, q, ql);
    c = ql;
  }
  memcpy(out, "FTCK", 4);
  out[4] = 1;
  out[5] = 3;
  out[6] = 0;
  out[7] = 4;
  put64(out + 8, len);
  put64(out + 16, c);
  memset(out + 24, 0, 8);
  out[25] = (uint8_t)kind;
  out[26] = (uint8_t)z;
  *obj = out;
  *objlen = HDR + c;
  out = NULL;
out:
  free(q);
  free(out);
  return rc;
}

/* Parses and checks the header: codec, filter, esize, raw length, depth
 * and where the payload starts. */
typedef struct hdr {
  int codec, filter, esize, depth, lossy;
  uint64_t raw_len, plen;
  size_t pre; /* header, chain and seal */
} hdr;

static int parse_hdr(const uint8_t *obj, size_t objlen, const char *hex, hdr *h) {
  if (objlen < HDR || memcmp(obj, "FTCK", 4) != 0 || obj[4] != 1)
    return ft_err_set(FT_ECORRUPT, "chunk %s: bad header (not a chunk object, or damaged)", hex);
  h->codec = obj[5];
  h->filter = obj[6];
  h->esize = obj[7];
  h->raw_len = get64(obj + 8);
  h->plen = get64(obj + 16);
  h->depth = h->filter == 2 ? obj[24] : 0;
  h->pre = HDR + (h->filter == 2 ? (size_t)(h->depth + 1) * CKPT_HASH_LEN : 0);
  h->lossy = h->codec == 3 ? obj[25] : 0;
  int bad_delta = h->filter == 2 && (h->depth < 1 || h->depth > CKPT_MAX_CHAIN || h->codec != 2 ||
                                     !ckpt_chunk_delta_ok(h->raw_len, h->esize));
  int bad_lossy = h->codec == 3 && (h->filter != 0 || h->esize != 4 || h->raw_len % 4 ||
                                    h->lossy < CKPT_LOSSY_BF16 || h->lossy > CKPT_LOSSY_Q8LOG ||
                                    obj[26] > 1 || h->plen > lossy_len(h->raw_len, h->lossy));
  if (h->codec > 3 || (h->codec == 2) != (h->filter == 2) || h->filter > 2 || h->esize < 1 ||
      bad_delta || bad_lossy || objlen < h->pre || h->plen != objlen - h->pre ||
      (h->codec == 0 && h->plen != h->raw_len) || /* raw: the payload is the bytes */
      (h->filter && h->raw_len % (uint64_t)h->esize))
    return ft_err_set(FT_ECORRUPT,
                      "chunk %s: damaged header (codec %d, filter %d, raw %llu bytes; payload "
                      "%llu, the object has %zu)",
                      hex, h->codec, h->filter, (unsigned long long)h->raw_len,
                      (unsigned long long)h->plen, objlen);
  return FT_OK;
}

int ckpt_chunk_chain(const uint8_t *obj, size_t objlen, int *depth, const uint8_t **chain) {
  hdr h;
  *depth = 0;
  *chain = NULL;
  int rc = parse_hdr(obj, objlen, "(object)", &h);
  if (rc)
    return rc;
  *depth = h.depth;
  *chain = h.depth ? obj + HDR : NULL;
  return FT_OK;
}

int ckpt_chunk_check_alone(const uint8_t *obj, size_t objlen, const uint8_t hash[CKPT_HASH_LEN]) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(hash, hex);
  hdr h;
  int rc = parse_hdr(obj, objlen, hex, &h);
  if (rc)
    return rc;
  if (h.filter != 2) {
    if (h.raw_len > ((uint64_t)2 << 30))
      return ft_err_set(FT_ECORRUPT, "chunk %s: damaged header (%llu raw bytes)", hex,
                        (unsigned long long)h.raw_len);
    uint8_t *dst = malloc(h.raw_len ? h.raw_len : 1);
    if (!dst)
      return ft_err_set(FT_ENOMEM, "out of memory checking chunk %s", hex);
    rc = ckpt_chunk_decode(obj, objlen, hash, NULL, dst, h.raw_len);
    free(dst);
    return rc;
  }
  uint8_t seal[CKPT_HASH_LEN];
  if ((rc = delta_seal(obj, objlen, h.depth, seal)))
    return rc;
  if (memcmp(seal, obj + h.pre - CKPT_HASH_LEN, CKPT_HASH_LEN) != 0)
    return ft_err_set(FT_ECORRUPT, "chunk %s: delta object damaged (its seal does not match)", hex);
  return FT_OK;
}

int ckpt_chunk_apply(const uint8_t *obj, size_t objlen, const uint8_t hash[CKPT_HASH_LEN],
                     uint8_t *dst, uint8_t *tmp, size_t expect_len) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(hash, hex);
  hdr h;
  int rc = parse_hdr(obj, objlen, hex, &h);
  if (rc)
    return rc;
  if (h.raw_len != expect_len)
    return ft_err_set(FT_ECORRUPT, "chunk %s: header says %llu raw bytes, expected %zu", hex,
                      (unsigned long long)h.raw_len, expect_len);
  if (h.codec == 3) { /* a lossy form: decoded into tmp if zstd'd, then expanded */
    const uint8_t *q = obj + h.pre;
    size_t ql = (size_t)lossy_len(h.raw_len, h.lossy);
    if (obj[26]) {
      size_t r = ql <= expect_len ? ZSTD_decompress(tmp, expect_len, q, h.plen) : 0;
      if (ZSTD_isError(r) || r != ql)
        return ft_err_set(FT_ECORRUPT, "chunk %s: does not decompress (%s)", hex,
                          ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong length");
      q = tmp;
    } else if (h.plen != ql) {
      return ft_err_set(FT_ECORRUPT, "chunk %s: %llu bytes of values, expected %zu", hex,
                        (unsigned long long)h.plen, ql);
    }
    dequantize(q, expect_len / 4, h.lossy, dst);
    return FT_OK;
  }
  if (h.codec == 2) { /* a delta: added element by element, in place over the base */
    const uint8_t *pl[4];
    rc = planes_open(obj + h.pre, h.plen, expect_len, h.esize, tmp, pl, hex);
    if (rc == FT_OK)
      delta_inv(dst, pl, expect_len, h.esize);
    return rc;
  }
  uint8_t *target = h.filter ? tmp : dst;
  if (h.codec == 0) {
    memcpy(target, obj + h.pre, expect_len);
  } else {
    size_t r = ZSTD_decompress(target, expect_len, obj + h.pre, h.plen);
    if (ZSTD_isError(r) || r != expect_len)
      return ft_err_set(FT_ECORRUPT, "chunk %s: does not decompress (%s)", hex,
                        ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short output");
  }
  if (h.filter == 1)
    ckpt_unshuffle(dst, tmp, expect_len, h.esize);
  return FT_OK;
}

int ckpt_chunk_decode(const uint8_t *obj, size_t objlen, const uint8_t hash[CKPT_HASH_LEN],
                      const void *base, void *dst, size_t expect_len) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(hash, hex);
  hdr h;
  int rc = parse_hdr(obj, objlen, hex, &h);
  if (rc)
    return rc;
  int depth = h.depth;
  if (depth && !base)
    return ft_err_set(FT_EINVAL, "chunk %s: a delta, decoded without its base", hex);
  uint8_t *tmp = malloc(expect_len ? expect_len : 1);
  if (!tmp)
    return ft_err_set(FT_ENOMEM, "out of memory decoding chunk %s", hex);
  if (depth)
    memmove(dst, base, expect_len);
  rc = ckpt_chunk_apply(obj, objlen, hash, dst, tmp, expect_len);
  free(tmp);
  if (rc)
    return rc;
  return ckpt_chunk_check_hash(dst, expect_len, hash);
}

int ckpt_chunk_check_hash(const void *raw, size_t len, const uint8_t hash[CKPT_HASH_LEN]) {
  uint8_t got[CKPT_HASH_LEN];
  int rc = ckpt_sha256(raw, len, got);
  if (rc)
    return rc;
  if (memcmp(got, hash, CKPT_HASH_LEN) != 0) {
    char hex[CKPT_HEX_LEN + 1], ghex[CKPT_HEX_LEN + 1];
    ckpt_hex(hash, hex);
    ckpt_hex(got, ghex);
    return ft_err_set(FT_ECORRUPT, "chunk %s: SHA-256 of its bytes is %s (the data is damaged)",
                      hex, ghex);
  }
  return FT_OK;
}
