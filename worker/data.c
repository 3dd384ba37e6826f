/*
 * data: the token-shard loader (llm.c's .bin format). See data.h.
 *
 * Why this shape: the loader's whole state is one integer (the sequence
 * index), so a checkpoint saves it and a resume needs no replay. Shards are
 * memory-mapped read-only, so opening a large corpus costs page-table
 * entries, not copies, and any number of threads may read sequences at once.
 *
 * Invariants after data_open succeeds:
 *   - shards[] are in strcmp order of their paths (not locale order);
 *   - shards[k].start is the sum of the token counts of shards 0..k-1, so
 *     the concatenated stream is tokens [0, total);
 *   - every token is < vocab_size, every file's size is 1024 + 2 * count.
 *
 * Failure model: a bad shard fails the whole open (no partial loaders);
 * the detail names the file, what was found and what was expected.
 * data_write_shard is crash-safe: temp file, fsync, rename, fsync dir.
 *
 * An "s3://" pattern is data_s3.c's: the same shard table and stream (so
 * the same sequences), its tokens read by blocks instead of mapped.
 */
#include "data_int.h"

#include "ft_file.h"

#include "ft_err.h"
#include "ft_failpoint.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data reads little-endian shards with the host's byte order"
#endif

#define LLMC_MODEL_MAGIC 20240326
#define HEADER_BYTES DATA_HEADER_BYTES

typedef data_shard shard;

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Hint for a file whose first bytes are not a token-shard header. */
const char *data_magic_hint(const unsigned char *p, size_t len) {
  int32_t m;
  memcpy(&m, p, sizeof m);
  if (m == LLMC_MODEL_MAGIC)
    return " (this is an llm.c model file, not a token shard)";
  if (m == DATA_MAGIC)
    return " (a token-shard header cut short: truncated?)";
  size_t k = len < 64 ? len : 64, text = 0;
  for (size_t i = 0; i < k; i++)
    text += isprint(p[i]) || isspace(p[i]);
  if (k && text == k)
    return " (this looks like a raw text file: convert it with `ftdata encode --in FILE --out "
           "PREFIX`)";
  return " (is this an llm.c model file or a raw text file?)";
}

int data_check_header(const char *name, const int32_t *h, uint64_t size, uint64_t *n) {
  if (h[0] != DATA_MAGIC)
    return ft_err_set(
        FT_EFORMAT, "%s: bad magic %d (0x%08x), expected %d for an llm.c token shard%s", name, h[0],
        (unsigned)h[0], DATA_MAGIC, data_magic_hint((const unsigned char *)h, HEADER_BYTES));
  if (h[1] != DATA_VERSION)
    return ft_err_set(FT_EFORMAT, "%s: token-shard version %d, expected %d (uint16 tokens)%s", name,
                      h[1], DATA_VERSION,
                      h[1] == 2 ? " (version 2 is llm.c's uint32 format, unsupported)" : "");
  if (h[2] < 0)
    return ft_err_set(FT_EFORMAT, "%s: header token count %d is negative", name, h[2]);
  *n = (uint64_t)h[2];
  uint64_t want = HEADER_BYTES + 2 * *n;
  if (size != want)
    return ft_err_set(FT_EFORMAT,
                      "%s: the shard is %llu bytes, but the header's token count %llu implies %llu "
                      "bytes (%zu header + 2 per token)%s",
                      name, (unsigned long long)size, (unsigned long long)*n,
                      (unsigned long long)want, HEADER_BYTES, size < want ? ": truncated?" : "");
  return FT_OK;
}

/* Maps and validates one shard. On error nothing stays mapped. */
static int shard_open(shard *s, int vocab_size) {
  int rc = FT_OK;
  int fd = open(s->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ft_err_set(FT_EIO, "%s: cannot open token shard: %s", s->path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = ft_err_set(FT_EIO, "%s: stat: %s", s->path, strerror(errno));
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = ft_err_set(FT_EFORMAT, "%s: not a regular file", s->path);
    goto out;
  }
  if ((size_t)st.st_size < HEADER_BYTES) {
    unsigned char head[HEADER_BYTES] = {0};
    ssize_t got = st.st_size > 0 ? pread(fd, head, (size_t)st.st_size, 0) : 0;
    rc = ft_err_set(FT_EFORMAT,
                    "%s: file is %lld bytes, smaller than the %zu-byte token-shard header%s",
                    s->path, (long long)st.st_size, HEADER_BYTES,
                    got >= 4 ? data_magic_hint(head, (size_t)got) : "");
    goto out;
  }
  s->map_len = (size_t)st.st_size;
  s->map = mmap(NULL, s->map_len, PROT_READ, MAP_SHARED, fd, 0);
  if (s->map == MAP_FAILED) {
    s->map = NULL;
    rc = ft_err_set(FT_EIO, "%s: mmap: %s", s->path, strerror(errno));
    goto out;
  }
  int32_t h[DATA_HEADER_INTS];
  memcpy(h, s->map, sizeof h);
  if (h[0] != DATA_MAGIC) { /* the hint reads the file's first bytes */
    rc = ft_err_set(FT_EFORMAT, "%s: bad magic %d (0x%08x), expected %d for an llm.c token shard%s",
                    s->path, h[0], (unsigned)h[0], DATA_MAGIC, data_magic_hint(s->map, s->map_len));
    goto out;
  }
  if ((rc = data_check_header(s->path, h, (uint64_t)st.st_size, &s->n)))
    goto out;
  s->tok = (const uint16_t *)((const char *)s->map + HEADER_BYTES);
  for (uint64_t i = 0; i < s->n; i++) {
    if (s->tok[i] >= vocab_size) {
      rc = ft_err_set(FT_EFORMAT, "%s: token %u at index %llu is >= vocab_size %d", s->path,
                      s->tok[i], (unsigned long long)i, vocab_size);
      goto out;
    }
  }
out:
  if (rc && s->map) {
    munmap(s->map, s->map_len);
    s->map = NULL;
  }
  close(fd);
  return rc;
}

int data_is_s3(const char *glob) {
  return glob && strncmp(glob, "s3://", 5) == 0;
}

int data_err_is_storage(int rc) {
  return rc != FT_OK && rc != FT_ENOENT && rc != FT_ESTATE && rc != FT_EFORMAT && rc != FT_EINVAL &&
         rc != FT_ENOMEM;
}

void data_opts_default(data_opts *o) {
  memset(o, 0, sizeof *o);
  o->cache_bytes = DATA_CACHE_BYTES_DEFAULT;
  o->block_bytes = 0; /* from window_bytes */
  o->prefetch_blocks = DATA_PREFETCH_DEFAULT;
}

void data_opts_from_runfile(const ft_data_cfg *d, data_opts *o) {
  data_opts_default(o);
  snprintf(o->cache_dir, sizeof o->cache_dir, "%s", d->cache_dir);
  o->cache_bytes = d->cache_bytes;
  o->block_bytes = d->block_bytes;
  o->prefetch_blocks = d->prefetch_blocks;
  snprintf(o->s3_endpoint, sizeof o->s3_endpoint, "%s", d->s3_endpoint);
}

int64_t data_block_bytes_auto(int64_t window_bytes) {
  if (window_bytes <= 0)
    return DATA_BLOCK_BYTES_DEFAULT;
  int64_t b = DATA_BLOCK_AUTO_MIN;
  while (b < DATA_BLOCK_BYTES_DEFAULT && b * 2 <= window_bytes)
    b *= 2;
  return b;
}

void data_hint(data_loader *dl, const data_reads *r) {
  if (dl && dl->s3 && r)
    data_s3_hint(dl, r);
}

static int open_s3(const char *pattern, int vocab_size, const data_opts *o, data_loader **out) {
  data_opts def;
  if (!o) {
    data_opts_default(&def);
    o = &def;
  }
  data_loader *dl = calloc(1, sizeof *dl);
  if (!dl)
    return ft_err_set(FT_ENOMEM, "%s: out of memory", pattern);
  int rc = data_s3_open(pattern, vocab_size, o, dl);
  if (rc) {
    data_free(dl);
    return rc;
  }
  *out = dl;
  return FT_OK;
}

int data_open(const char *pattern, int vocab_size, data_loader **out) {
  return data_open_opts(pattern, vocab_size, NULL, out);
}

int data_open_opts(const char *pattern, int vocab_size, const data_opts *o, data_loader **out) {
  int rc = FT_OK;
  *out = NULL;
  if (!pattern || !*pattern)
    return ft_err_set(FT_EINVAL, "data: empty shard pattern");
  if (vocab_size < 1 || vocab_size > 65536)
    return ft_err_set(FT_EINVAL, "data: vocab_size %d out of range 1..65536 (tokens are uint16)",
                      vocab_size);
  if (data_is_s3(pattern))
    return open_s3(pattern, vocab_size, o, out);
  glob_t g;
  int gr = glob(pattern, GLOB_NOSORT, NULL, &g);
  if (gr == GLOB_NOMATCH)
    return ft_err_set(FT_ENOENT, "%s: no token shards match this pattern", pattern);
  if (gr != 0) {
    rc = gr == GLOB_NOSPACE ? FT_ENOMEM : FT_EIO;
    ft_err_set(rc, "%s: glob failed (%s)", pattern,
               gr == GLOB_NOSPACE ? "out of memory" : "read error");
    globfree(&g);
    return rc;
  }
  qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), cmp_str);
  data_loader *dl = calloc(1, sizeof *dl);
  if (dl)
    dl->sh = calloc(g.gl_pathc, sizeof(shard));
  if (!dl || !dl->sh) {
    free(dl);
    globfree(&g);
    return ft_err_set(FT_ENOMEM, "%s: out of memory", pattern);
  }
  for (size_t k = 0; k < g.gl_pathc; k++) {
    shard *s = &dl->sh[dl->nshards];
    s->path = strdup(g.gl_pathv[k]);
    if (!s->path) {
      rc = ft_err_set(FT_ENOMEM, "%s: out of memory", pattern);
      goto out;
    }
    rc = shard_open(s, vocab_size);
    if (rc) {
      free(s->path);
      s->path = NULL;
      goto out;
    }
    s->start = dl->total;
    dl->total += s->n;
    dl->nshards++;
  }
out:
  globfree(&g);
  if (rc) {
    data_free(dl);
    return rc;
  }
  *out = dl;
  return FT_OK;
}

void data_free(data_loader *dl) {
  if (!dl)
    return;
  data_s3_free(dl->s3);
  for (int k = 0; k < dl->nshards; k++) {
    if (dl->sh[k].map)
      munmap(dl->sh[k].map, dl->sh[k].map_len);
    free(dl->sh[k].path);
  }
  free(dl->sh);
  free(dl);
}

void data_io_stats_get(const data_loader *dl, data_io_stats *st) {
  memset(st, 0, sizeof *st);
  if (dl->s3)
    data_s3_stats(dl, st);
}

uint64_t data_num_tokens(const data_loader *dl) {
  return dl->total;
}

int data_num_shards(const data_loader *dl) {
  return dl->nshards;
}

uint64_t data_num_sequences(const data_loader *dl, int T) {
  if (T <= 0 || dl->total < (uint64_t)T + 1)
    return 0;
  return (dl->total - 1) / (uint64_t)T;
}

/* The shard holding stream position pos (< total): the last shard whose
 * start <= pos. Empty shards share their successor's start, so the last
 * such shard is never empty. */
int data_find_shard(const data_loader *dl, uint64_t pos) {
  int lo = 0, hi = dl->nshards - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (dl->sh[mid].start <= pos)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* The T+1 tokens at pos, read by data_s3.c's blocks. */
static int s3_sequence(const data_loader *dl, uint64_t pos, int T, int32_t *inp, int32_t *tgt) {
  uint16_t *tok = malloc(((size_t)T + 1) * sizeof *tok);
  if (!tok)
    return ft_err_set(FT_ENOMEM, "data: out of memory");
  int rc = data_s3_tokens(dl, pos, (uint64_t)T + 1, tok);
  for (int j = 0; rc == FT_OK && j <= T; j++) {
    if (j < T)
      inp[j] = tok[j];
    if (j > 0)
      tgt[j - 1] = tok[j];
  }
  free(tok);
  return rc;
}

int data_sequence(const data_loader *dl, uint64_t i, int T, int32_t *inp, int32_t *tgt) {
  ft_failpoint_hang_here(FT_HANG_DATA); /* failpoint hang_in=data: inside the read */
  uint64_t nseq = data_num_sequences(dl, T);
  if (nseq == 0)
    return ft_err_set(FT_EINVAL, "data: %llu tokens hold no sequence of T=%d (need T+1 tokens)",
                      (unsigned long long)dl->total, T);
  uint64_t pos = (i % nseq) * (uint64_t)T;
  if (dl->s3)
    return s3_sequence(dl, pos, T, inp, tgt);
  int k = data_find_shard(dl, pos);
  for (int j = 0; j <= T; j++, pos++) {
    while (pos >= dl->sh[k].start + dl->sh[k].n)
      k++;
    int32_t t = dl->sh[k].tok[pos - dl->sh[k].start];
    if (j < T)
      inp[j] = t;
    if (j > 0)
      tgt[j - 1] = t;
  }
  return FT_OK;
}

int data_write_shard(const char *path, const uint16_t *tokens, uint64_t n) {
  if (n > INT32_MAX)
    return ft_err_set(FT_EINVAL, "%s: %llu tokens exceed the format's int32 count", path,
                      (unsigned long long)n);
  ft_afile f;
  int rc = ft_afile_open(&f, path);
  if (rc)
    return rc;
  int32_t h[DATA_HEADER_INTS] = {DATA_MAGIC, DATA_VERSION, (int32_t)n};
  rc = ft_afile_write(&f, h, sizeof h);
  if (!rc && n)
    rc = ft_afile_write(&f, tokens, n * sizeof(uint16_t));
  if (rc) {
    ft_afile_abort(&f);
    return rc;
  }
  return ft_afile_commit(&f);
}
