/*
 * data_s3: token shards that are objects of a bucket ("s3://bucket/glob").
 * See data.h and docs/data.md.
 *
 * Open: one listing (ckpt_s3_read.h: the store's S3 client, so the same
 * SigV4, endpoints, retries) under the glob's literal prefix, keys kept
 * when fnmatch(3) matches the glob (FNM_PATHNAME: '*' stays inside one
 * '/' level), sorted by strcmp as local paths are; each object's size and
 * ETag are kept. Every header is checked as a local file's (magic, version,
 * count against the size) from a ranged GET of its first 1024 bytes, or
 * from block 0 in the cache directory. With a listing file (FT_DATA_LISTING,
 * data_listing.c) the first open of a pattern records all that and later
 * opens read it instead (no LIST, no header GET), under an flock. The shard
 * table is then data.c's, so the stream and every sequence are those of
 * the same files copied locally.
 *
 * Reads: the stream's bytes are cut into aligned blocks of block_bytes per
 * object (block j = bytes [j*B, (j+1)*B), the header in block 0; B is even,
 * so no token straddles two blocks), the unit of the caches. What is read
 * of a block is a *piece* of it, its bytes [lo, hi): the whole block, or,
 * at the edges of a host's windows, only the bytes those windows hold (the
 * rest of an edge block is another host's, and a window's T+1st token
 * alone would otherwise bring a block: a host downloaded 1.5 to 2 times
 * what it read). A run of pieces that are consecutive bytes of one object
 * is read with ONE ranged GET sent with If-Match: the listed ETag, so at
 * 4 MiB one GET serves 2 Mi tokens: many steps of sequences (docs/data.md
 * has the rates). Every piece is checked when it arrives (each token <
 * vocab_size: a data fault naming the key and the token's index
 * otherwise).
 *
 * Three levels: memory (2 x prefetch_blocks + 2 slots, one per block,
 * holding a piece of it; least recently used evicted; a block the
 * prefetcher brought and nobody has read yet, or one the current hint
 * plans, is evicted by the prefetcher never, by the reader last; a read
 * outside a slot's piece fetches a wider one), the cache directory
 * (one file per piece named by bucket, hash of the key, ETag, block size
 * and index, and a piece's byte range, so a changed object or another block
 * size never reads a stale file; a block's file serves any piece of it;
 * written whole: temp + rename, the piece's SHA-256 after its bytes and no
 * fsync, so a file a crash tore fails its sum and is fetched again, and a
 * prefetch never waits on the disk's journal; its mtime is its
 * last use; before a write the least recently used files go until the new
 * one fits under cache_bytes (the directory scanned when this process's
 * count says it is full, or every 64 writes: disk_write); shared by the
 * processes of a host, whose
 * fetches of one block are serialised by a striped flock so a host GETs a
 * piece once: its processes plan the same pieces from the same hint),
 * then the bucket.
 *
 * Block size: data.block_bytes, or when it is not set the largest power of
 * two <= the bytes one host reads per micro-batch (data_block_bytes_auto;
 * the run file's geometry, so the same on every rank, restart and shrink).
 *
 * Prefetch: PREFETCH_THREADS threads of the loader's own bring blocks into
 * memory (and the cache directory) ahead of the reader, each the next run
 * of missing blocks no other has claimed (so one GET's latency hides behind
 * another's transfer). With the trainer's hint (data_hint,
 * each step: this rank's next windows) it brings the pieces of the first
 * prefetch_blocks blocks those windows overlap, in the order they will be
 * read, and no other: in a large world the blocks after a rank's window
 * are other hosts'; the reader, missing one, fetches the plan's piece.
 * Without one (ftdata, validation) the reader names, after each
 * read, the block after the last one it touched, and the thread brings the
 * next prefetch_blocks blocks of the stream whole (crossing into the next shards,
 * wrapping at the end). Its failures are dropped: the reader, reaching that
 * block, fetches it itself and gets the error in its own thread (ft_err is
 * per thread) with the detail that names the key.
 *
 * Where the reader waits (the training thread blocked on storage):
 * copy_from_block, on a block another thread loads (cv) or on its own
 * fetch_run (a GET, or a host peer's GET behind the stripe lock).
 *
 * Locking: mu guards the slots, the prefetch request and stop; it is never
 * held across a GET or a file operation. disk_mu serialises this process's
 * writes to the cache directory (and the eviction scan before each).
 */
#include "data_int.h"

#include "ckpt_s3_read.h"
#include "data_wait.h"
#include "ft_err.h"
#include "progress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HDR DATA_HEADER_BYTES
#define LOCK_STRIPES 64
/* prefetch threads of a loader: a GET's latency (a far or shaped link)
 * is hidden behind another's transfer; each takes the next run of blocks
 * the plan lacks that no other has claimed */
#define PREFETCH_THREADS 2
#define TMP_ORPHAN_S 600 /* a temp file this old is a dead writer's */

enum { B_EMPTY, B_LOADING, B_READY };

/* A piece of block j of shard k: its bytes [lo, hi) (the whole block: 0 and
 * its length). What a host needs of a block at the edges of its windows is
 * a piece, so it downloads the bytes its windows hold and not the rest of
 * the edge blocks (those are other hosts'). */
typedef struct bref {
  int k;
  uint64_t j;
  uint64_t lo, hi;
} bref;

typedef struct blk {
  int shard;
  uint64_t idx;
  int state;
  int fresh;         /* the prefetcher's: brought and not read yet, or in the hint's plan */
  uint64_t plan_gen; /* the last hint whose plan held it */
  uint64_t lo, hi;   /* data holds the block's bytes [lo, hi) */
  uint8_t *data;
  uint64_t used; /* LRU tick */
} blk;

struct data_s3 {
  ckpt_s3_reader *rd;
  const data_loader *dl;
  char uri[1100];
  data_obj *ob; /* ob[k]: shard k */
  int nob, cap;
  int vocab;
  uint64_t bs;
  int depth;
  int64_t cache_bytes;
  char cache_dir[PATH_MAX];
  char listing[1024]; /* the recorded listing's file, or "" */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  blk *slot;
  int nslot;
  uint64_t tick;
  pthread_mutex_t disk_mu;
  int warned_disk;
  uint64_t disk_known, disk_writes; /* disk_write's (under disk_mu) */
  pthread_t th[PREFETCH_THREADS];
  int th_on, stop; /* th_on: the threads started */
  int want_k;
  uint64_t want_j, want_gen;
  int hinted;      /* the trainer hints (data_hint): no more "after each read" */
  data_reads hint; /* its latest */
  uint64_t hint_gen;
  bref plan[DATA_PREFETCH_MAX + 1]; /* the latest hint's pieces (plan_blocks), for the reader */
  int nplan;
  uint64_t block_gets, blocks_fetched, header_gets, disk_hits, evictions; /* atomics */
};

/* ---- options ----------------------------------------------------------------- */

static int env_i64(const char *name, int64_t lo, int64_t hi, int64_t *v) {
  const char *s = getenv(name);
  if (!s || !s[0])
    return FT_OK;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || *end || x < lo || x > hi)
    return ft_err_set(FT_ECONFIG, "%s='%s': expected an integer in %lld..%lld", name, s,
                      (long long)lo, (long long)hi);
  *v = x;
  return FT_OK;
}

/* o's values, each replaced by its environment variable when that is set. */
static int resolve_opts(data_s3 *s, const data_opts *o, char *endpoint, size_t en) {
  int64_t cb = o->cache_bytes, pf = o->prefetch_blocks;
  int64_t bb = o->block_bytes ? o->block_bytes : data_block_bytes_auto(o->window_bytes);
  int rc;
  if ((rc = env_i64("FT_DATA_CACHE_BYTES", 0, 1LL << 50, &cb)) ||
      (rc = env_i64("FT_DATA_BLOCK_BYTES", DATA_BLOCK_BYTES_MIN, DATA_BLOCK_BYTES_MAX, &bb)) ||
      (rc = env_i64("FT_DATA_PREFETCH_BLOCKS", 0, DATA_PREFETCH_MAX, &pf)))
    return rc;
  if (bb < DATA_BLOCK_BYTES_MIN || bb > DATA_BLOCK_BYTES_MAX || bb % 2)
    return ft_err_set(FT_ECONFIG, "data.block_bytes %lld: expected an even number in %lld..%lld",
                      (long long)bb, DATA_BLOCK_BYTES_MIN, DATA_BLOCK_BYTES_MAX);
  if (cb < 0 || pf < 0 || pf > DATA_PREFETCH_MAX)
    return ft_err_set(FT_ECONFIG, "data.cache_bytes %lld or data.prefetch_blocks %lld out of range",
                      (long long)cb, (long long)pf);
  s->cache_bytes = cb;
  s->bs = (uint64_t)bb;
  s->depth = (int)pf;
  const char *dir = getenv("FT_DATA_CACHE"), *s3c = getenv("FT_S3_CACHE"), *home = getenv("HOME");
  int w;
  if (dir && dir[0])
    w = snprintf(s->cache_dir, sizeof s->cache_dir, "%s", dir);
  else if (o->cache_dir[0])
    w = snprintf(s->cache_dir, sizeof s->cache_dir, "%s", o->cache_dir);
  else if (s3c && s3c[0])
    w = snprintf(s->cache_dir, sizeof s->cache_dir, "%s/data", s3c);
  else if (home && home[0])
    w = snprintf(s->cache_dir, sizeof s->cache_dir, "%s/.cache/ftsup/data", home);
  else if (cb > 0)
    return ft_err_set(FT_ECONFIG, "no data cache directory: set data.cache_dir or FT_DATA_CACHE "
                                  "(HOME is not set), or data.cache_bytes: 0");
  else
    w = 0;
  if (w < 0 || (size_t)w >= sizeof s->cache_dir)
    return ft_err_set(FT_ECONFIG, "the data cache directory's path is too long");
  const char *ep = getenv("FT_DATA_S3_ENDPOINT"), *li = getenv("FT_DATA_LISTING");
  snprintf(endpoint, en, "%s", ep && ep[0] ? ep : o->s3_endpoint);
  snprintf(s->listing, sizeof s->listing, "%s", li && li[0] ? li : o->listing);
  return FT_OK;
}

/* ---- the listing ------------------------------------------------------------- */

typedef struct listing {
  data_s3 *s;
  const char *pattern; /* the key glob */
  uint64_t seen;
} listing;

size_t data_s3_glob_prefix(const char *keyglob) {
  return strcspn(keyglob, "*?[\\");
}

int data_s3_key_matches(const char *keyglob, const char *key) {
  return fnmatch(keyglob, key, FNM_PATHNAME) == 0;
}

static int on_object(void *ud, const char *key, uint64_t size, const char *etag) {
  listing *l = ud;
  data_s3 *s = l->s;
  l->seen++;
  if (!data_s3_key_matches(l->pattern, key))
    return FT_OK;
  if (s->nob == s->cap) {
    int cap = s->cap ? s->cap * 2 : 16;
    data_obj *o = realloc(s->ob, (size_t)cap * sizeof *o);
    if (!o)
      return ft_err_set(FT_ENOMEM, "out of memory");
    s->ob = o;
    s->cap = cap;
  }
  data_obj *o = &s->ob[s->nob];
  o->tokens = 0;
  o->key = strdup(key);
  o->etag = strdup(etag);
  o->size = size;
  if (!o->key || !o->etag) {
    free(o->key);
    free(o->etag);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  s->nob++;
  return FT_OK;
}

static int obj_cmp(const void *a, const void *b) {
  return strcmp(((const data_obj *)a)->key, ((const data_obj *)b)->key);
}

/* Lists the objects the key glob matches, sorted by key. */
static int list_shards(data_s3 *s, const char *keyglob) {
  char prefix[1024];
  size_t lit = data_s3_glob_prefix(keyglob);
  snprintf(prefix, sizeof prefix, "%.*s", (int)lit, keyglob);
  listing l = {s, keyglob, 0};
  int rc = ckpt_s3_reader_list(s->rd, prefix, on_object, &l);
  if (rc)
    return rc;
  if (s->nob == 0)
    return ft_err_set(FT_ENOENT,
                      "%s: no token shards match this pattern (%" PRIu64
                      " object(s) under the prefix '%s' at %s)",
                      s->uri, l.seen, prefix, ckpt_s3_reader_where(s->rd));
  qsort(s->ob, (size_t)s->nob, sizeof *s->ob, obj_cmp);
  return FT_OK;
}

/* ---- block geometry ------------------------------------------------------------ */

static uint64_t nblocks(const data_s3 *s, int k) {
  return (s->ob[k].size + s->bs - 1) / s->bs;
}

static size_t block_len(const data_s3 *s, int k, uint64_t j) {
  uint64_t off = j * s->bs, left = s->ob[k].size - off;
  return (size_t)(left < s->bs ? left : s->bs);
}

/* Block (k, j) whole, as a piece. */
static bref whole(const data_s3 *s, int k, uint64_t j) {
  return (bref){k, j, 0, block_len(s, k, j)};
}

static int is_whole(const data_s3 *s, const bref *pc) {
  return pc->lo == 0 && pc->hi == block_len(s, pc->k, pc->j);
}

/* The block after (k, j) in the stream, wrapping to the first shard. */
static void next_block(const data_s3 *s, int *k, uint64_t *j) {
  if (++*j < nblocks(s, *k))
    return;
  *j = 0;
  *k = (*k + 1) % s->nob;
}

/* Every token of piece pc (its bytes in d) < vocab: else a data fault
 * naming the key and the token's index in the shard. */
static int check_tokens(const data_s3 *s, const bref *pc, const uint8_t *d) {
  int k = pc->k;
  uint64_t base = pc->j * s->bs + pc->lo, first = base < HDR ? HDR - base : 0,
           len = pc->hi - pc->lo;
  for (uint64_t b = first; b + 1 < len; b += 2) {
    uint16_t t;
    memcpy(&t, d + b, sizeof t);
    if (t >= s->vocab)
      return ft_err_set(
          FT_EFORMAT,
          "s3://%s/%s: token %u at index %" PRIu64 " (byte %" PRIu64 ") is >= vocab_size %d",
          ckpt_s3_reader_bucket(s->rd), s->ob[k].key, t, (base + b - HDR) / 2, base + b, s->vocab);
  }
  return FT_OK;
}

/* ---- the cache directory ---------------------------------------------------------- */

static int disk_on(const data_s3 *s) {
  return s->cache_bytes > 0 && s->cache_dir[0];
}

/* <dir>/<bucket>_<sha256(key):16>_<etag>_<block bytes>_<index>.blk, and for a
 * piece that is not the whole block ..._<index>.<lo>-<hi>.blk */
static void block_path(const data_s3 *s, const bref *pc, char *out, size_t n) {
  int k = pc->k;
  unsigned char md[32];
  unsigned int ml = 0;
  char kh[17], et[65];
  EVP_Digest(s->ob[k].key, strlen(s->ob[k].key), md, &ml, EVP_sha256(), NULL);
  for (int i = 0; i < 8; i++)
    snprintf(kh + 2 * i, 3, "%02x", md[i]);
  size_t e = 0;
  for (const char *p = s->ob[k].etag; *p && e + 1 < sizeof et; p++)
    if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
        *p == '-')
      et[e++] = *p;
  et[e] = 0;
  int w = snprintf(out, n, "%s/%s_%s_%s_%" PRIu64 "_%" PRIu64, s->cache_dir,
                   ckpt_s3_reader_bucket(s->rd), kh, et, s->bs, pc->j);
  if (w < 0 || (size_t)w >= n)
    return;
  if (is_whole(s, pc))
    snprintf(out + w, n - (size_t)w, ".blk");
  else
    snprintf(out + w, n - (size_t)w, ".%" PRIu64 "-%" PRIu64 ".blk", pc->lo, pc->hi);
}

/* A cache file is the piece's bytes and then their SHA-256 (SUM bytes):
 * it is written without fsync (a cache: a crash may leave a file short or
 * holding garbage, and its sum then refuses it), so a host's prefetch
 * never waits on the disk's journal, nor makes the training thread's own
 * writes wait behind it. */
#define SUM 32

static void sum_of(const uint8_t *d, size_t len, unsigned char *md) {
  unsigned int ml = 0;
  EVP_Digest(d, len, md, &ml, EVP_sha256(), NULL);
}

/* The file of piece f into *d, its bytes [pc->lo, pc->hi) (f covers pc;
 * its use time freshened). 0 if absent, short or failing its sum (then
 * removed). */
static int disk_read_file(data_s3 *s, const bref *f, const bref *pc, uint8_t **d) {
  char path[PATH_MAX + 200];
  block_path(s, f, path, sizeof path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  struct stat st;
  size_t flen = (size_t)(f->hi - f->lo), want = (size_t)(pc->hi - pc->lo),
         at = (size_t)(pc->lo - f->lo);
  uint8_t *p = NULL;
  int ok = fstat(fd, &st) == 0 && (uint64_t)st.st_size == flen + SUM && (p = malloc(flen + SUM));
  size_t got = 0;
  while (ok && got < flen + SUM) {
    ssize_t r = pread(fd, p + got, flen + SUM - got, (off_t)got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      ok = 0;
    else
      got += (size_t)r;
  }
  unsigned char md[SUM];
  if (ok) {
    sum_of(p, flen, md);
    ok = memcmp(md, p + flen, SUM) == 0;
  }
  if (ok)
    futimens(fd, NULL); /* last use: what eviction orders by */
  close(fd);
  if (!ok) {
    free(p);
    unlink(path);
    return 0;
  }
  memmove(p, p + at, want);
  __atomic_add_fetch(&s->disk_hits, 1, __ATOMIC_RELAXED);
  *d = p;
  return 1;
}

/* Piece pc from the cache directory: from its block's file, else from its
 * own (a piece: the host's processes plan the same pieces). */
static int disk_read(data_s3 *s, const bref *pc, uint8_t **d) {
  bref w = whole(s, pc->k, pc->j);
  return disk_read_file(s, &w, pc, d) || (!is_whole(s, pc) && disk_read_file(s, pc, pc, d));
}

typedef struct centry {
  char name[256];
  uint64_t size;
  struct timespec mtime;
} centry;

static int centry_cmp(const void *a, const void *b) {
  const centry *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec)
    return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec)
    return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

uint64_t data_cache_make_room(const char *cache_dir, uint64_t bound, uint64_t need,
                              uint64_t *evicted) {
  DIR *dir = opendir(cache_dir);
  if (!dir)
    return 0;
  centry *e = NULL;
  size_t n = 0, cap = 0;
  uint64_t total = 0;
  time_t now = time(NULL);
  for (struct dirent *de; (de = readdir(dir));) {
    size_t l = strlen(de->d_name);
    int blk = l > 4 && !strcmp(de->d_name + l - 4, ".blk");
    int tmp = strstr(de->d_name, ".blk.tmp.") != NULL;
    struct stat st;
    if ((!blk && !tmp) || fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    if (tmp && now - st.st_mtim.tv_sec > TMP_ORPHAN_S) {
      unlinkat(dirfd(dir), de->d_name, 0);
      continue;
    }
    total += (uint64_t)st.st_size;
    if (tmp)
      continue; /* a writer's, live: counted, never removed */
    if (n == cap) {
      size_t c2 = cap ? cap * 2 : 64;
      centry *q = realloc(e, c2 * sizeof *q);
      if (!q)
        break;
      e = q;
      cap = c2;
    }
    snprintf(e[n].name, sizeof e[n].name, "%s", de->d_name);
    e[n].size = (uint64_t)st.st_size;
    e[n++].mtime = st.st_mtim;
  }
  if (total + need > bound && n) {
    qsort(e, n, sizeof *e, centry_cmp);
    for (size_t i = 0; i < n && total + need > bound; i++)
      if (unlinkat(dirfd(dir), e[i].name, 0) == 0 || errno == ENOENT) {
        total -= e[i].size;
        if (evicted)
          (*evicted)++;
      }
  }
  closedir(dir);
  free(e);
  return total;
}

/* Writes piece pc (its bytes d) into the cache directory: a temp file
 * (data, then its sum), renamed; no fsync (SUM). Before it, room under
 * cache_bytes: the directory is scanned when what this process knows of
 * its size (the last scan, and what it wrote since) would pass the bound,
 * or after 64 writes (the host's other processes write too), not at every
 * write. A failure only costs the cache (said once). */
static void disk_write(data_s3 *s, const bref *pc, const uint8_t *d) {
  size_t len = (size_t)(pc->hi - pc->lo);
  if ((uint64_t)s->cache_bytes < len + SUM)
    return;
  char path[PATH_MAX + 200], tmp[PATH_MAX + 260];
  block_path(s, pc, path, sizeof path);
  pthread_mutex_lock(&s->disk_mu);
  if (s->disk_known + len + SUM > (uint64_t)s->cache_bytes || s->disk_writes % 64 == 0) {
    uint64_t ev = 0;
    s->disk_known = data_cache_make_room(s->cache_dir, (uint64_t)s->cache_bytes, len + SUM, &ev);
    __atomic_add_fetch(&s->evictions, ev, __ATOMIC_RELAXED);
  }
  s->disk_writes++;
  snprintf(tmp, sizeof tmp, "%s.tmp.%d.%" PRIu64, path, (int)getpid(), s->disk_writes);
  unsigned char md[SUM];
  sum_of(d, len, md);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc = fd < 0 ? -1 : 0;
  for (int part = 0; part < 2 && !rc; part++) {
    const uint8_t *b = part ? md : d;
    size_t n = part ? SUM : len, w = 0;
    while (w < n && !rc) {
      ssize_t r = write(fd, b + w, n - w);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        rc = -1;
      else
        w += (size_t)r;
    }
  }
  int err = rc ? errno : 0;
  if (fd >= 0 && close(fd) != 0 && !rc) {
    rc = -1;
    err = errno;
  }
  if (!rc && rename(tmp, path) != 0) {
    rc = -1;
    err = errno;
  }
  if (rc) {
    if (fd >= 0)
      unlink(tmp);
    if (!s->warned_disk) {
      s->warned_disk = 1;
      fprintf(stderr,
              "data: warning: the data cache directory: %s: %s (blocks are read from the "
              "bucket without it)\n",
              tmp, strerror(err ? err : EIO));
    }
  } else {
    s->disk_known += len + SUM;
  }
  pthread_mutex_unlock(&s->disk_mu);
}

/* Striped locks, shared by the processes of the host, under which one of
 * them fetches a block while the others wait and then read its file. The
 * stripe of block (k, j): */
static unsigned stripe_of(const data_s3 *s, int k, uint64_t j) {
  uint64_t h = 1469598103934665603ULL;
  for (const char *p = s->ob[k].key; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  h = (h ^ j) * 1099511628211ULL;
  return (unsigned)(h % LOCK_STRIPES);
}

/* Locks the stripes of blocks (k, j0 .. j0+n-1), each once, in ascending
 * order (so two processes locking overlapping runs never deadlock; a
 * holder waits on nothing else). fd[] gets the descriptors (-1: that lock
 * failed: the fetch goes on without it); returns how many. */
static int stripes_lock(const data_s3 *s, int k, uint64_t j0, int n, int *fd) {
  int held[LOCK_STRIPES] = {0}, m = 0;
  for (int i = 0; i < n; i++)
    held[stripe_of(s, k, j0 + (uint64_t)i)] = 1;
  for (unsigned st = 0; st < LOCK_STRIPES; st++) {
    if (!held[st])
      continue;
    char path[PATH_MAX + 200];
    snprintf(path, sizeof path, "%s/.lock.%02u", s->cache_dir, st);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f >= 0 && flock(f, LOCK_EX) != 0) {
      close(f);
      f = -1;
    }
    fd[m++] = f;
  }
  return m;
}

/* mkdir -p; failures show at the first write (said once). */
static void mkdirs(const char *dir) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", dir);
  for (char *c = p + 1; *c; c++)
    if (*c == '/') {
      *c = 0;
      mkdir(p, 0777);
      *c = '/';
    }
  mkdir(p, 0777);
}

/* ---- fetching blocks ------------------------------------------------------------------- */

#define RUN_MAX 8 /* blocks one coalesced GET brings at most */

/* Pieces pc[0..n-1] of one object, consecutive bytes (blocks j0, j0+1, ..:
 * each but the last ends its block, each but the first starts its block),
 * with ONE ranged GET (If-Match: the listed ETag) into d[0..n-1], each
 * malloc'd. */
static int fetch_remote(data_s3 *s, const bref *pc, int n, uint8_t **d) {
  int k = pc[0].k;
  uint64_t from = pc[0].j * s->bs + pc[0].lo, to = pc[n - 1].j * s->bs + pc[n - 1].hi;
  size_t want = (size_t)(to - from), got = 0;
  uint8_t *buf = NULL;
  int rc = ckpt_s3_reader_get_range(s->rd, s->ob[k].key, from, want, s->ob[k].etag, &buf, &got);
  if (rc == FT_OK) { /* one that a close cancelled brought nothing: not counted */
    __atomic_add_fetch(&s->block_gets, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->blocks_fetched, (uint64_t)n, __ATOMIC_RELAXED);
  }
  if (rc == FT_OK && got != want)
    rc = ft_err_set(FT_ESTATE,
                    "s3://%s/%s: bytes %" PRIu64 "..%" PRIu64
                    " came as %zu bytes, expected %zu (the "
                    "object is not the one listed)",
                    ckpt_s3_reader_bucket(s->rd), s->ob[k].key, from, to, got, want);
  for (int i = 0; rc == FT_OK && i < n; i++) {
    size_t len = (size_t)(pc[i].hi - pc[i].lo), at = (size_t)(pc[i].j * s->bs + pc[i].lo - from);
    if (!(d[i] = malloc(len ? len : 1)))
      rc = ft_err_set(FT_ENOMEM, "out of memory");
    else
      memcpy(d[i], buf + at, len);
  }
  free(buf);
  return rc;
}

/* Pieces pc[0..n-1] of one object (n <= RUN_MAX; consecutive as
 * fetch_remote's), checked, each from the cache directory or else from the
 * bucket: each run of consecutive ones missing with one GET (then written
 * to the directory, under the stripe locks, so the host's other processes
 * read them there and the host GETs each piece once). d[i] malloc'd; on an
 * error none. */
static int fetch_run(data_s3 *s, const bref *pc, int n, uint8_t **d) {
  int lk[RUN_MAX], nlk = 0, rc = FT_OK, remote[RUN_MAX] = {0};
  for (int i = 0; i < n; i++)
    d[i] = NULL;
  if (disk_on(s)) {
    int miss = 0;
    for (int i = 0; i < n; i++)
      miss |= !disk_read(s, &pc[i], &d[i]);
    if (miss) {
      nlk = stripes_lock(s, pc[0].k, pc[0].j, n, lk);
      for (int i = 0; i < n; i++) /* another process may have brought them */
        if (!d[i])
          disk_read(s, &pc[i], &d[i]);
    }
  }
  for (int a = 0; a < n && !rc;) { /* [a, z): a run of missing pieces */
    int z = a;
    while (z < n && !d[z])
      remote[z++] = 1;
    if (z > a)
      rc = fetch_remote(s, pc + a, z - a, d + a);
    a = z + 1;
  }
  for (int i = 0; !rc && i < n; i++)
    rc = check_tokens(s, &pc[i], d[i]);
  for (int i = 0; !rc && i < n && disk_on(s); i++)
    if (remote[i])
      disk_write(s, &pc[i], d[i]);
  for (int i = 0; i < nlk; i++)
    if (lk[i] >= 0)
      close(lk[i]); /* releases the flock */
  for (int i = 0; rc && i < n; i++) {
    free(d[i]);
    d[i] = NULL;
  }
  return rc;
}

/* ---- the memory slots ----------------------------------------------------------------- */

static blk *find_slot(data_s3 *s, int k, uint64_t j) {
  for (int i = 0; i < s->nslot; i++)
    if (s->slot[i].state != B_EMPTY && s->slot[i].shard == k && s->slot[i].idx == j)
      return &s->slot[i];
  return NULL;
}

/* A slot for (k, j), marked loading; NULL if none is free (the prefetcher
 * never evicts a fresh block; the reader does, oldest last). Holding mu. */
static blk *claim(data_s3 *s, int k, uint64_t j, int prefetcher) {
  blk *best = NULL;
  for (int i = 0; i < s->nslot; i++) {
    blk *b = &s->slot[i];
    if (b->state == B_EMPTY) {
      best = b;
      break;
    }
    if (b->state != B_READY || (prefetcher && b->fresh))
      continue;
    if (!best || (best->fresh && !b->fresh) || (best->fresh == b->fresh && b->used < best->used))
      best = b;
  }
  if (!best)
    return NULL;
  free(best->data);
  *best = (blk){.shard = k, .idx = j, .state = B_LOADING, .fresh = prefetcher};
  return best;
}

/* 1 if slot b is ready with the bytes [lo, hi) of its block. */
static int covers(const blk *b, uint64_t lo, uint64_t hi) {
  return b->state == B_READY && b->lo <= lo && hi <= b->hi;
}

/* Widens the piece pc to hold what ready slot b holds too (b's block),
 * and marks b loading again (its data dropped: readers wait for the wider
 * piece). Holding mu. */
static void regrow(blk *b, bref *pc) {
  if (b->lo < pc->lo)
    pc->lo = b->lo;
  if (b->hi > pc->hi)
    pc->hi = b->hi;
  free(b->data);
  b->data = NULL;
  b->state = B_LOADING;
}

/* Ends a load of piece pc into b: ready with d, or empty again. Holding mu. */
static void finish(data_s3 *s, blk *b, int rc, uint8_t *d, const bref *pc) {
  if (rc) {
    b->state = B_EMPTY;
  } else {
    b->data = d;
    b->lo = pc->lo;
    b->hi = pc->hi;
    b->state = B_READY;
    b->used = ++s->tick;
  }
  pthread_cond_broadcast(&s->cv);
}

/* What the reader fetches of block (k, j) to read its bytes [lo, hi): the
 * latest plan's piece of it when that holds them (what the host reads of
 * the block), else the whole block. Holding mu. */
static bref reader_piece(const data_s3 *s, int k, uint64_t j, uint64_t lo, uint64_t hi) {
  for (int p = 0; p < s->nplan; p++) {
    const bref *pc = &s->plan[p];
    if (pc->k == k && pc->j == j && pc->lo <= lo && hi <= pc->hi)
      return *pc;
  }
  return whole(s, k, j);
}

/* Copies m tokens at byte off of block (k, j) into out. */
static int copy_from_block(data_s3 *s, int k, uint64_t j, uint64_t off, uint64_t m, uint16_t *out) {
  ft_phase was = FT_PHASE_COUNT; /* storage_wait (progress.h) while the bytes are not in memory */
  uint64_t end = off + 2 * m;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    blk *b = find_slot(s, k, j);
    if (b && covers(b, off, end)) {
      memcpy(out, b->data + (off - b->lo), m * sizeof *out);
      b->used = ++s->tick;
      b->fresh = 0;
      pthread_mutex_unlock(&s->mu);
      progress_wait_end(&was);
      return FT_OK;
    }
    if (b ? b->state != B_READY
          : !(b = claim(s, k, j, 0))) { /* loading elsewhere, or every slot is */
      progress_wait_begin(&was, 0);
      pthread_cond_wait(&s->cv, &s->mu);
      continue;
    }
    bref pc = reader_piece(s, k, j, off, end);
    if (b->state == B_READY) /* a piece without these bytes: a wider one */
      regrow(b, &pc);
    pthread_mutex_unlock(&s->mu);
    progress_wait_begin(&was, 1); /* its own request: the wait's clock restarts */
    uint8_t *d;
    int rc = fetch_run(s, &pc, 1, &d);
    pthread_mutex_lock(&s->mu);
    finish(s, b, rc, d, &pc);
    if (rc) {
      pthread_mutex_unlock(&s->mu);
      progress_wait_end(&was);
      return rc;
    }
  }
}

/* ---- prefetch ---------------------------------------------------------------------
 *
 * Two sources of what to bring. Without a hint: the prefetch_blocks blocks
 * of the stream after the last one read (want_*). With the trainer's hint
 * (data_hint, every step: the windows after the step being read) plan_blocks
 * lists the blocks that the next windows overlap, in the order they will be
 * read, whole windows up to prefetch_blocks blocks; the slots holding them
 * are marked fresh (the prefetcher keeps them; those of the plan before
 * stay fresh until read: the step being read now), a fresh one that
 * neither wants loses it (a stale hint's blocks may go), then the
 * ones missing are fetched in that order, each run of consecutive blocks
 * of one object with one GET (a host's window is one run: one GET per
 * window for the host). A newer hint ends the walk. */

#define PLAN_WINDOWS 1024 /* windows looked at per plan: bounds its cost per step */

/* Adds the pieces of blocks that hold stream tokens [p, q) to plan, each
 * block once (a block met again: its piece widened to hold both), up to
 * max. */
static int plan_range(const data_s3 *s, uint64_t p, uint64_t q, bref *plan, int n, int max) {
  const data_loader *dl = s->dl;
  for (int k = data_find_shard(dl, p); p < q && n < max; k++) {
    const data_shard *sh = &dl->sh[k];
    uint64_t e = q < sh->start + sh->n ? q : sh->start + sh->n;
    if (e <= p)
      continue; /* an empty shard */
    uint64_t from = HDR + 2 * (p - sh->start), to = HDR + 2 * (e - sh->start);
    for (uint64_t j = from / s->bs; j <= (to - 1) / s->bs && n < max; j++) {
      uint64_t b0 = j * s->bs, lo = from > b0 ? from - b0 : 0, hi = to - b0;
      if (hi > block_len(s, k, j))
        hi = block_len(s, k, j);
      int i = n - 1;
      while (i >= 0 && !(plan[i].k == k && plan[i].j == j))
        i--;
      if (i < 0) {
        plan[n++] = (bref){k, j, lo, hi};
        continue;
      }
      if (lo < plan[i].lo)
        plan[i].lo = lo;
      if (hi > plan[i].hi)
        plan[i].hi = hi;
    }
    p = e;
  }
  return n;
}

/* The pieces of the blocks that the windows of h overlap (of each block
 * the bytes those windows read), in reading order, whole windows only
 * while they fit in max (the first one cut to max): so that a window's
 * pieces are one run, one GET of the window's own bytes. plan has room
 * for max + 1. */
static int plan_blocks(const data_s3 *s, const data_reads *h, bref *plan, int max) {
  uint64_t nseq = data_num_sequences(s->dl, h->T), T = (uint64_t)h->T;
  int n = 0;
  if (!nseq || h->windows <= 0 || !h->count)
    return 0;
  for (uint64_t w = 0; w < PLAN_WINDOWS; w++) {
    uint64_t step = w / (uint64_t)h->windows, m = w % (uint64_t)h->windows;
    uint64_t i = h->seq + step * h->stride + h->first + m * h->gap, c = h->count;
    int was = n;
    while (c > 0 && n <= max) { /* the sequences wrap at nseq */
      uint64_t a = i % nseq, run = c < nseq - a ? c : nseq - a;
      n = plan_range(s, a * T, (a + run) * T + 1, plan, n, max + 1);
      i += run;
      c -= run;
    }
    if (n > max)
      return was ? was : max;
  }
  return n;
}

/* Brings block (k, j) whole unless memory has it (or a piece of it); 0 to
 * go on, 1 to stop (memory full of blocks not read yet, or a fetch failed:
 * the reader meets it and says why). Holding mu, released around the
 * fetch. */
static int prefetch_one(data_s3 *s, int k, uint64_t j) {
  if (find_slot(s, k, j))
    return 0;
  blk *b = claim(s, k, j, 1);
  if (!b)
    return 1;
  bref pc = whole(s, k, j);
  pthread_mutex_unlock(&s->mu);
  uint8_t *d;
  int rc = fetch_run(s, &pc, 1, &d);
  pthread_mutex_lock(&s->mu);
  finish(s, b, rc, d, &pc);
  return rc != FT_OK;
}

/* 1 if memory has piece pc, or is bringing its block. Holding mu. */
static int in_memory(data_s3 *s, const bref *pc) {
  blk *b = find_slot(s, pc->k, pc->j);
  return b && (b->state == B_LOADING || covers(b, pc->lo, pc->hi));
}

/* Walks the hint of generation gen. Holding mu. */
static void prefetch_hinted(data_s3 *s, uint64_t gen) {
  bref plan[DATA_PREFETCH_MAX + 1];
  int n = plan_blocks(s, &s->hint, plan, s->depth);
  if (s->hint_gen == gen) {
    memcpy(s->plan, plan, (size_t)n * sizeof *plan);
    s->nplan = n;
  }
  for (int i = 0; i < s->nslot; i++) {
    blk *b = &s->slot[i];
    int in = 0;
    for (int p = 0; p < n && !in; p++)
      in = b->state != B_EMPTY && b->shard == plan[p].k && b->idx == plan[p].j;
    if (in) {
      b->fresh = 1;
      b->plan_gen = gen;
    } else if (b->fresh && b->plan_gen + 1 < gen) {
      b->fresh = 0; /* neither this plan nor the one before wants it: stale */
    }
  }
  for (int p = 0; p < n && !s->stop && s->hint_gen == gen;) {
    if (in_memory(s, &plan[p])) {
      p++;
      continue;
    }
    /* the run of pieces missing from here, consecutive bytes: one GET */
    blk *b[RUN_MAX];
    bref pc[RUN_MAX];
    int r = 0;
    while (p + r < n && r < RUN_MAX) {
      const bref *q = &plan[p + r];
      if (r && (q->k != pc[0].k || q->j != pc[r - 1].j + 1 || q->lo != 0 ||
                pc[r - 1].hi != block_len(s, q->k, pc[r - 1].j)))
        break; /* not the bytes right after the run's */
      if (in_memory(s, q))
        break;
      blk *x = find_slot(s, q->k, q->j);
      pc[r] = *q;
      if (x) /* a narrower piece of this block: a wider one (its start or end stays) */
        regrow(x, &pc[r]);
      else if (!(x = claim(s, q->k, q->j, 1)))
        break;
      b[r++] = x;
    }
    if (!r)
      break; /* memory is full of blocks not read yet */
    pthread_mutex_unlock(&s->mu);
    uint8_t *d[RUN_MAX];
    int rc = fetch_run(s, pc, r, d);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < r; i++)
      finish(s, b[i], rc, d[i], &pc[i]);
    if (rc)
      break; /* the reader meets it, and says why */
    p += r;
  }
}

static void *prefetch_main(void *arg) {
  data_s3 *s = arg;
  uint64_t done = 0, hdone = 0;
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    if (s->hinted) {
      if (s->hint_gen == hdone) {
        pthread_cond_wait(&s->cv, &s->mu);
        continue;
      }
      hdone = s->hint_gen;
      prefetch_hinted(s, hdone);
      continue;
    }
    if (s->want_gen == done) {
      pthread_cond_wait(&s->cv, &s->mu);
      continue;
    }
    done = s->want_gen;
    int k = s->want_k;
    uint64_t j = s->want_j;
    for (int n = 0; n < s->depth && !s->stop && s->want_gen == done && !s->hinted;
         n++, next_block(s, &k, &j))
      if (prefetch_one(s, k, j))
        break;
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void data_s3_hint(const data_loader *dl, const data_reads *r) {
  data_s3 *s = dl->s3;
  if (!s->th_on)
    return;
  pthread_mutex_lock(&s->mu);
  s->hint = *r;
  s->hinted = 1;
  s->hint_gen++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Asks for the blocks after (k, j). */
static void want_after(data_s3 *s, int k, uint64_t j) {
  if (!s->th_on)
    return;
  next_block(s, &k, &j);
  pthread_mutex_lock(&s->mu);
  if (s->hinted) {
    pthread_mutex_unlock(&s->mu);
    return;
  }
  if (s->want_k != k || s->want_j != j || !s->want_gen) {
    s->want_k = k;
    s->want_j = j;
    s->want_gen++;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
}

int data_s3_tokens(const data_loader *dl, uint64_t pos, uint64_t n, uint16_t *out) {
  data_s3 *s = dl->s3;
  int k = data_find_shard(dl, pos), rc = FT_OK;
  uint64_t j = 0;
  while (n > 0 && rc == FT_OK) {
    while (pos >= dl->sh[k].start + dl->sh[k].n)
      k++;
    uint64_t byte = HDR + 2 * (pos - dl->sh[k].start);
    j = byte / s->bs;
    uint64_t end = j * s->bs + block_len(s, k, j), m = (end - byte) / 2;
    if (m > n)
      m = n;
    rc = copy_from_block(s, k, j, byte - j * s->bs, m, out);
    out += m;
    pos += m;
    n -= m;
  }
  if (rc == FT_OK)
    want_after(s, k, j);
  return rc;
}

/* ---- open and free ------------------------------------------------------------------ */

/* Shard k's header: from block 0 in the cache directory, else a ranged GET
 * of its first 1024 bytes; checked as a local file's. recorded: the
 * listing's token count, checked against the size, and no read (If-Match
 * on every block still ties the reads to that version). */
static int open_shard(data_s3 *s, int k, data_shard *sh, int recorded) {
  data_obj *o = &s->ob[k];
  if (asprintf(&sh->path, "s3://%s/%s", ckpt_s3_reader_bucket(s->rd), o->key) < 0) {
    sh->path = NULL;
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  if (recorded) {
    sh->n = o->tokens;
    if (o->size != HDR + 2 * o->tokens)
      return ft_err_set(FT_EFORMAT,
                        "%s: the data listing %s records %" PRIu64 " bytes and %" PRIu64
                        " tokens, which do not agree (remove it to list the bucket again)",
                        sh->path, s->listing, o->size, o->tokens);
    return FT_OK;
  }
  if (o->size < HDR)
    return ft_err_set(FT_EFORMAT,
                      "%s: object is %" PRIu64 " bytes, smaller than the %zu-byte token-shard "
                      "header",
                      sh->path, o->size, HDR);
  int32_t h[DATA_HEADER_INTS];
  uint8_t *d = NULL;
  size_t got = 0;
  int rc = FT_OK;
  bref head = {k, 0, 0, HDR}; /* from block 0's file: the first HDR bytes */
  if (disk_on(s) && disk_read(s, &head, &d)) {
    got = HDR;
  } else {
    rc = ckpt_s3_reader_get_range(s->rd, o->key, 0, HDR, o->etag, &d, &got);
    __atomic_add_fetch(&s->header_gets, 1, __ATOMIC_RELAXED);
  }
  if (!rc && got < HDR)
    rc = ft_err_set(FT_ESTATE, "%s: the header read %zu bytes of %zu (the object changed?)",
                    sh->path, got, HDR);
  if (!rc) {
    memcpy(h, d, sizeof h);
    rc = data_check_header(sh->path, h, o->size, &sh->n);
    o->tokens = sh->n;
  }
  free(d);
  return rc;
}

/* The shards: from the recorded listing, else listed (and recorded when a
 * listing file is set), each header checked. */
static int open_shards(data_s3 *s, const char *keyglob, data_loader *dl) {
  int recorded = 0, rc = FT_OK;
  if (s->listing[0]) {
    rc = data_listing_load(s->listing, s->uri, &s->ob, &s->nob, &recorded);
    s->cap = s->nob;
  }
  if (!rc && !recorded)
    rc = list_shards(s, keyglob);
  if (!rc && !(dl->sh = calloc((size_t)s->nob, sizeof *dl->sh)))
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  for (int k = 0; !rc && k < s->nob; k++) {
    rc = open_shard(s, k, &dl->sh[k], recorded);
    dl->nshards = k + 1; /* freed by data_free, failed or not */
    dl->sh[k].start = dl->total;
    dl->total += dl->sh[k].n;
  }
  if (!rc && s->listing[0] && !recorded)
    rc = data_listing_save(s->listing, s->uri, ckpt_s3_reader_where(s->rd), s->ob, s->nob);
  return rc;
}

int data_s3_open(const char *uri, int vocab_size, const data_opts *o, data_loader *dl) {
  data_s3 *s = calloc(1, sizeof *s);
  if (!s)
    return ft_err_set(FT_ENOMEM, "out of memory");
  dl->s3 = s;
  s->dl = dl;
  s->vocab = vocab_size;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_mutex_init(&s->disk_mu, NULL);
  snprintf(s->uri, sizeof s->uri, "%s", uri);
  const char *b = uri + 5, *slash = strchr(b, '/');
  if (!slash || !slash[1])
    return ft_err_set(FT_EINVAL, "%s: expected s3://bucket/prefix/GLOB (e.g. s3://b/data/*.bin)",
                      uri);
  char endpoint[512];
  int rc = resolve_opts(s, o, endpoint, sizeof endpoint);
  if (!rc && disk_on(s))
    mkdirs(s->cache_dir);
  if (!rc)
    rc = ckpt_s3_reader_open(uri, endpoint, &s->rd);
  if (!rc) /* why the training thread waits (data_wait.h) */
    ckpt_s3_reader_on_retry(s->rd, data_wait_on_retry, NULL);
  int lk = !rc && s->listing[0] ? data_listing_lock(s->listing) : 0;
  if (lk < 0)
    rc = lk;
  if (!rc)
    rc = open_shards(s, slash + 1, dl);
  if (lk > 0)
    close(lk); /* releases the flock */
  if (rc)
    return rc;
  s->nslot = 2 * s->depth + 2; /* the step read now's, the next ones', the reader's */
  if (!(s->slot = calloc((size_t)s->nslot, sizeof *s->slot)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  for (int i = 0; s->depth > 0 && i < PREFETCH_THREADS; i++) {
    if (pthread_create(&s->th[i], NULL, prefetch_main, s) != 0)
      return ft_err_set(FT_ENOMEM, "%s: cannot start the prefetch threads", uri);
    s->th_on = i + 1;
  }
  return FT_OK;
}

void data_s3_stats(const data_loader *dl, data_io_stats *st) {
  data_s3 *s = dl->s3;
  st->block_gets = __atomic_load_n(&s->block_gets, __ATOMIC_RELAXED);
  st->blocks_fetched = __atomic_load_n(&s->blocks_fetched, __ATOMIC_RELAXED);
  st->header_gets = __atomic_load_n(&s->header_gets, __ATOMIC_RELAXED);
  st->disk_hits = __atomic_load_n(&s->disk_hits, __ATOMIC_RELAXED);
  st->evictions = __atomic_load_n(&s->evictions, __ATOMIC_RELAXED);
  if (s->rd) {
    ckpt_s3_reader_stats rs;
    ckpt_s3_reader_stats_get(s->rd, &rs);
    st->requests = rs.requests;
    st->retries = rs.retries;
    st->bytes_down = rs.bytes_down;
  }
}

void data_s3_free(data_s3 *s) {
  if (!s)
    return;
  if (s->th_on) {
    ckpt_s3_reader_cancel(s->rd); /* a prefetch GET in flight ends now */
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->th_on; i++)
      pthread_join(s->th[i], NULL);
  }
  if (s->rd && s->nob) {
    data_io_stats st = {0};
    data_s3_stats(s->dl, &st);
    fprintf(stderr,
            "data: %s: %" PRIu64 " block GETs (%" PRIu64 " blocks), %" PRIu64
            " header GETs, %" PRIu64 " requests in all (%" PRIu64 " retried, %.1f MiB), %" PRIu64
            " blocks from the cache directory, %" PRIu64 " evicted\n",
            s->uri, st.block_gets, st.blocks_fetched, st.header_gets, st.requests, st.retries,
            (double)st.bytes_down / 1048576.0, st.disk_hits, st.evictions);
  }
  for (int i = 0; i < s->nslot; i++)
    free(s->slot[i].data);
  free(s->slot);
  data_objs_free(s->ob, s->nob);
  ckpt_s3_reader_free(s->rd);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->disk_mu);
  free(s);
}
