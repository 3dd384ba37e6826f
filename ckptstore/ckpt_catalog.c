/*
 * ckpt_catalog: the RocksDB catalog and its writer lock.
 *
 * The only file that includes rocksdb/c.h; RocksDB's errptr strings are
 * translated to FT_EDB (or FT_ENOENT / FT_EBUSY) here, with the text kept as
 * the detail.
 *
 * One writer at a time. The writer first takes an advisory flock on
 * "<catalog>.lock" (released by the kernel when the process dies, so a
 * SIGKILLed writer never leaves a stale lock) and writes who it is into the
 * file: a second writer fails at once with FT_EBUSY and that text. RocksDB's
 * own LOCK would also stop it, but with a message nobody can act on.
 * Readers open the database read-only (rocksdb_open_for_read_only), which
 * takes no lock and works while a writer holds it; a reader sees the catalog
 * as of its open (what was synced by then).
 *
 * Every write is a WriteBatch written with sync=true: after
 * ckpt_catalog_write returns, the whole batch survives a crash, and a crash
 * before leaves none of it.
 *
 * Failures are returned, never fatal. RocksDB (the 7.x packages are built
 * with assertions) aborts the process when a file writer that already failed
 * is written again: on a full disk its info LOG is the first such file (one
 * failed append, then the next line asserts). So the info LOG is off (level
 * above HEADER: RocksDB creates an empty LOG and writes nothing to it; the
 * C API of 7.x cannot install a logger of ours instead); the
 * WAL and MANIFEST stop at their first error (RocksDB's background error).
 * After a failed write the database refuses writes until resumed, which the
 * C API of 7.x cannot do, so the next write reopens it here (under the
 * writer lock we still hold): once space is back, that write succeeds
 * without anyone reopening by hand. Write errors come back as FT_ENOSPC /
 * FT_EIO naming the file and the errno text RocksDB reports.
 *
 * Damage is reported, never skipped: paranoid checks, checksums verified on
 * every read, and WAL recovery in absolute consistency (any bad WAL record
 * fails the open: dropping the records after it would silently lose
 * commits). A write cut short by a full disk leaves no partial record (the
 * failed batch is not retried in that file; the reopen starts a new WAL);
 * one cut by a power loss would, and then the open fails like any other
 * damage: the manifests are the truth and `ckpt rebuild-catalog` restores
 * the checkpoints and their marks. A checksum mismatch in the WAL, an SST
 * or the MANIFEST fails the open or the read with FT_EDB naming
 * the file and saying to run `ckpt rebuild-catalog`; a writer reads the
 * whole catalog once at open, so damage anywhere in it stops the open rather
 * than some later read (ckpt_store.c rebuilds
 * from the manifests, which are the truth). A writer never creates a catalog
 * unless asked to (ckpt_store_open decides: a store that has manifests but
 * no catalog is damaged, not new).
 *
 * Threads: RocksDB handles are thread-safe; a reopen swaps the handle, so
 * every use holds a read lock on it and the reopen the write lock.
 */
#include "ckpt_int.h"

#include "ft_err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

struct ckpt_catalog {
  pthread_rwlock_t rw; /* read: any use of db; write: reopen */
  rocksdb_t *db;       /* NULL after a reopen that failed */
  rocksdb_options_t *opts;
  rocksdb_writeoptions_t *wopts;
  rocksdb_readoptions_t *ropts;
  int lock_fd;
  int read_only; /* opened as a reader (no lock) */
  int db_ro;     /* the handle is read-only: a writer whose open could not
                    write (a full disk) reads until a reopen can */
  int broken;    /* a write failed or could not start: reopen before the
                    next one (under rw; atomic) */
  char *dir;
};

/* RocksDB's WALRecoveryMode::kAbsoluteConsistency (kTolerateCorruptedTail-
 * Records took a flipped length byte for a torn tail and silently dropped
 * the commits after it), and an info-log level above HEADER_LEVEL (5),
 * which turns the info LOG off. */
#define CAT_WAL_ABSOLUTE 1
#define CAT_WAL_SKIP_ANY 3 /* kSkipAnyCorruptedRecords: salvage only */
#define CAT_INFO_LOG_OFF 6

struct ckpt_batch {
  rocksdb_writebatch_t *wb;
};

void ckpt_key_info(char *buf, size_t n, const char *run, int64_t step) {
  snprintf(buf, n, "ckpt/info/%s/%020" PRId64, run, step);
}

void ckpt_key_man(char *buf, size_t n, const char *run, int64_t step) {
  snprintf(buf, n, "ckpt/man/%s/%020" PRId64, run, step);
}

void ckpt_key_chunk(char *buf, size_t n, const char hex[CKPT_HEX_LEN + 1]) {
  snprintf(buf, n, "ckpt/chunk/%s", hex);
}

void ckpt_key_info_prefix(char *buf, size_t n, const char *run) {
  if (run)
    snprintf(buf, n, "ckpt/info/%s/", run);
  else
    snprintf(buf, n, "ckpt/info/");
}

void ckpt_key_man_prefix(char *buf, size_t n) {
  snprintf(buf, n, "ckpt/man/");
}

static int take_lock(const char *dir, int *fd_out) {
  char path[4096];
  snprintf(path, sizeof path, "%s.lock", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return ft_err_set(ft_err_from_errno(errno), "cannot open the catalog lock %s: %s", path,
                      strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char who[512] = "";
    ssize_t r = pread(fd, who, sizeof who - 1, 0);
    who[r > 0 ? r : 0] = 0;
    char *nl = strchr(who, '\n');
    if (nl)
      *nl = 0;
    close(fd);
    if (e == EWOULDBLOCK)
      return ft_err_set(FT_EBUSY,
                        "the catalog %s is locked by another writer (%s); wait for it to "
                        "finish, or open it read-only",
                        dir, who[0] ? who : "holder unknown");
    return ft_err_set(ft_err_from_errno(e), "cannot lock %s: %s", path, strerror(e));
  }
  char host[256] = "?", comm[64] = "?", when[64] = "?";
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  FILE *f = fopen("/proc/self/comm", "r");
  if (f) {
    if (fgets(comm, sizeof comm, f))
      comm[strcspn(comm, "\n")] = 0;
    fclose(f);
  }
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  char who[512];
  int n = snprintf(who, sizeof who, "pid %d on %s, program %s, since %s\n", (int)getpid(), host,
                   comm, when);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, who, (size_t)n, 0) != n) {
    /* the lock holds without the text; only the message gets poorer */
  }
  *fd_out = fd;
  return FT_OK;
}

/* Translates a RocksDB error text: FT_ENOSPC / FT_EIO for I/O errors (the
 * text names the file and the errno text), FT_EDB naming the catalog and
 * saying how to repair it for corruption, FT_ENOENT / FT_EBUSY for a
 * missing or locked database. Frees err. */
static int db_err(char *err, const char *what, const char *dir) {
  int code = FT_EDB;
  if (strstr(err, "No space left") || strstr(err, "Disk quota"))
    code = FT_ENOSPC;
  else if (strstr(err, "Corruption") || strstr(err, "checksum mismatch") || strstr(err, "corrupt"))
    code = FT_EDB;
  else if (strstr(err, "does not exist") || strstr(err, "No such file"))
    code = FT_ENOENT;
  else if (strstr(err, "lock") && strstr(err, "unavailable"))
    code = FT_EBUSY;
  else if (strstr(err, "IO error"))
    code = FT_EIO;
  if (code == FT_EDB)
    ft_err_set(code,
               "catalog %s: %s: %s (the catalog is damaged; run 'ckpt rebuild-catalog' to "
               "rebuild it from the manifests)",
               dir, what, err);
  else
    ft_err_set(code, "catalog %s: %s: %s", dir, what, err);
  rocksdb_free(err);
  return code;
}

/* With the info LOG off RocksDB cannot serialise its options (the level is
 * out of its enum's range), so each writable open leaves a stub
 * OPTIONS-<n>.dbtmp (informational only: nothing reads it back). Removed. */
static void drop_options_stubs(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (strncmp(e->d_name, "OPTIONS-", 8) == 0 && n > 6 && strcmp(e->d_name + n - 6, ".dbtmp") == 0)
      unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

static int open_db(ckpt_catalog *c, int create) {
  char *err = NULL;
  c->db_ro = c->read_only;
  rocksdb_options_set_create_if_missing(c->opts, create && !c->read_only);
  if (c->read_only)
    c->db = rocksdb_open_for_read_only(c->opts, c->dir, 0, &err);
  else
    c->db = rocksdb_open(c->opts, c->dir, &err);
  if (err) {
    c->db = NULL;
    int rc = db_err(err, c->read_only ? "open read-only" : "open", c->dir);
    if (rc == FT_ENOENT)
      ft_err_set(FT_ENOENT,
                 "no catalog at %s (nothing has been written to this store yet; check "
                 "--store / CKPT_STORE)",
                 c->dir);
    return rc;
  }
  if (!c->read_only)
    drop_options_stubs(c->dir);
  return FT_OK;
}

/* Takes the read lock on a usable handle: reopens first (under the write
 * lock) when a write failed or a reopen did. On error no lock is held. */
static int use_db(ckpt_catalog *c, int for_write) {
  pthread_rwlock_rdlock(&c->rw);
  if (c->db && !(for_write && __atomic_load_n(&c->broken, __ATOMIC_RELAXED)))
    return FT_OK;
  pthread_rwlock_unlock(&c->rw);
  pthread_rwlock_wrlock(&c->rw);
  int rc = FT_OK;
  if (!c->db || (for_write && c->broken)) {
    if (c->db)
      rocksdb_close(c->db);
    c->db = NULL;
    rc = open_db(c, 0);
    if (rc)
      ckpt_err_wrap(rc, "the catalog cannot be written");
    else
      c->broken = 0;
    if (rc && !c->read_only) {
      /* keep reading: hold the lock and the data as they are */
      char saved[1024];
      snprintf(saved, sizeof saved, "%s", ft_err_detail());
      c->read_only = 1;
      if (open_db(c, 0) == FT_OK)
        c->broken = 1;
      c->read_only = 0;
      ft_err_set(rc, "%s", saved);
    }
  }
  pthread_rwlock_unlock(&c->rw);
  if (rc)
    return rc;
  return use_db(c, for_write);
}

int ckpt_catalog_refresh(ckpt_catalog *c) {
  pthread_rwlock_wrlock(&c->rw);
  int rc = FT_OK;
  if (c->read_only && c->db_ro) {
    if (c->db)
      rocksdb_close(c->db);
    c->db = NULL;
    rc = open_db(c, 0); /* on failure the next use tries again */
  }
  pthread_rwlock_unlock(&c->rw);
  return rc;
}

/* Reads every key and value once, so every data block's checksum is
 * checked now rather than when some later read happens to reach it. */
static int verify_all(ckpt_catalog *c) {
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_verify_checksums(ro, 1);
  rocksdb_readoptions_set_fill_cache(ro, 0);
  rocksdb_iterator_t *it = rocksdb_create_iterator(c->db, ro);
  for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    (void)rocksdb_iter_key(it, &kl);
    (void)rocksdb_iter_value(it, &vl);
  }
  char *err = NULL;
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
  return err ? db_err(err, "verify", c->dir) : FT_OK;
}

int ckpt_catalog_open(const char *dir, int mode, ckpt_catalog **out) {
  *out = NULL;
  int read_only = mode == CKPT_CAT_READ;
  ckpt_catalog *c = calloc(1, sizeof *c);
  if (!c || !(c->dir = strdup(dir))) {
    free(c);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  pthread_rwlock_init(&c->rw, NULL);
  c->lock_fd = -1;
  c->read_only = read_only;
  int rc = FT_OK;
  if (!read_only) {
    rc = take_lock(dir, &c->lock_fd);
    if (rc)
      goto fail;
  }
  c->opts = rocksdb_options_create();
  c->wopts = rocksdb_writeoptions_create();
  c->ropts = rocksdb_readoptions_create();
  rocksdb_writeoptions_set_sync(c->wopts, 1);
  rocksdb_readoptions_set_verify_checksums(c->ropts, 1);
  rocksdb_options_set_paranoid_checks(c->opts, 1);
  rocksdb_options_set_wal_recovery_mode(c->opts, CAT_WAL_ABSOLUTE);
  rocksdb_options_set_info_log_level(c->opts, CAT_INFO_LOG_OFF);
  rocksdb_options_set_keep_log_file_num(c->opts, 2);
  rocksdb_options_set_max_open_files(c->opts, 64);
  rc = open_db(c, mode == CKPT_CAT_CREATE);
  if ((rc == FT_ENOSPC || rc == FT_EIO) && !read_only) {
    /* RocksDB writes at open (MANIFEST, OPTIONS, a flush of the WAL): on a
     * full disk it cannot. Hold the lock and read; writes reopen (and fail
     * with this error until there is space again). GC can still sweep. */
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ft_err_detail());
    c->read_only = 1;
    int rc2 = open_db(c, 0);
    c->read_only = 0;
    if (rc2 == FT_OK) {
      c->broken = 1;
      rc = FT_OK;
    } else {
      ft_err_set(rc, "%s", saved);
    }
  }
  if (rc == FT_OK && !read_only)
    rc = verify_all(c);
  if (rc)
    goto fail;
  *out = c;
  return FT_OK;
fail:
  ckpt_catalog_close(c);
  return rc;
}

void ckpt_catalog_close(ckpt_catalog *c) {
  if (!c)
    return;
  if (c->db)
    rocksdb_close(c->db);
  if (c->ropts)
    rocksdb_readoptions_destroy(c->ropts);
  if (c->wopts)
    rocksdb_writeoptions_destroy(c->wopts);
  if (c->opts)
    rocksdb_options_destroy(c->opts);
  if (c->lock_fd >= 0) {
    if (ftruncate(c->lock_fd, 0) != 0) {
      /* stale holder text is harmless: the flock is what counts */
    }
    close(c->lock_fd);
  }
  pthread_rwlock_destroy(&c->rw);
  free(c->dir);
  free(c);
}

int ckpt_catalog_get(ckpt_catalog *c, const char *key, char **val, size_t *len) {
  char *err = NULL;
  size_t n = 0;
  *val = NULL;
  int rc = use_db(c, 0);
  if (rc)
    return rc;
  char *v = rocksdb_get(c->db, c->ropts, key, strlen(key), &n, &err);
  pthread_rwlock_unlock(&c->rw);
  if (err)
    return db_err(err, "get", c->dir);
  if (!v)
    return ft_err_set(FT_ENOENT, "catalog has no key %s", key);
  char *copy = malloc(n + 1);
  if (!copy) {
    rocksdb_free(v);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  memcpy(copy, v, n);
  copy[n] = 0;
  rocksdb_free(v);
  *val = copy;
  if (len)
    *len = n;
  return FT_OK;
}

int ckpt_catalog_scan(ckpt_catalog *c, const char *prefix,
                      int (*fn)(void *ud, const char *key, const char *val, size_t vlen),
                      void *ud) {
  int rc = use_db(c, 0);
  if (rc)
    return rc;
  rocksdb_iterator_t *it = rocksdb_create_iterator(c->db, c->ropts);
  size_t plen = strlen(prefix);
  char *key = NULL, *val = NULL;
  for (rocksdb_iter_seek(it, prefix, plen); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl);
    if (kl < plen || memcmp(k, prefix, plen) != 0)
      break;
    const char *v = rocksdb_iter_value(it, &vl);
    free(key);
    free(val);
    key = malloc(kl + 1);
    val = malloc(vl + 1);
    if (!key || !val) {
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      break;
    }
    memcpy(key, k, kl);
    key[kl] = 0;
    memcpy(val, v, vl);
    val[vl] = 0;
    rc = fn(ud, key, val, vl);
    if (rc)
      break;
  }
  free(key);
  free(val);
  if (rc == FT_OK) {
    char *err = NULL;
    rocksdb_iter_get_error(it, &err);
    if (err)
      rc = db_err(err, "scan", c->dir);
  }
  rocksdb_iter_destroy(it);
  pthread_rwlock_unlock(&c->rw);
  return rc;
}

int ckpt_catalog_destroy(const char *dir) {
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_options_set_info_log_level(o, CAT_INFO_LOG_OFF);
  char *err = NULL;
  rocksdb_destroy_db(o, dir, &err);
  rocksdb_options_destroy(o);
  if (err)
    return db_err(err, "destroy", dir);
  char lock[4096];
  snprintf(lock, sizeof lock, "%s.lock", dir);
  unlink(lock);
  DIR *d = opendir(dir); /* what RocksDB does not count as its own (the empty LOG) */
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      unlinkat(dirfd(d), e->d_name, 0);
  if (d)
    closedir(d);
  if (rmdir(dir) != 0 && errno != ENOENT)
    return ft_err_set(ft_err_from_errno(errno), "removing the folder %s: %s", dir, strerror(errno));
  return FT_OK;
}

ckpt_batch *ckpt_batch_new(void) {
  ckpt_batch *b = calloc(1, sizeof *b);
  if (b)
    b->wb = rocksdb_writebatch_create();
  return b;
}

void ckpt_batch_put(ckpt_batch *b, const char *key, const char *val, size_t vlen) {
  rocksdb_writebatch_put(b->wb, key, strlen(key), val, vlen);
}

void ckpt_batch_del(ckpt_batch *b, const char *key) {
  rocksdb_writebatch_delete(b->wb, key, strlen(key));
}

void ckpt_batch_free(ckpt_batch *b) {
  if (!b)
    return;
  rocksdb_writebatch_destroy(b->wb);
  free(b);
}

int ckpt_catalog_write(ckpt_catalog *c, ckpt_batch *b) {
  if (!b)
    return ft_err_set(FT_ENOMEM, "out of memory");
  char *err = NULL;
  int rc = use_db(c, 1);
  if (rc) {
    ckpt_batch_free(b);
    return rc;
  }
  rocksdb_write(c->db, c->wopts, b->wb, &err);
  if (err) /* RocksDB now refuses writes until reopened */
    __atomic_store_n(&c->broken, 1, __ATOMIC_RELAXED);
  pthread_rwlock_unlock(&c->rw);
  ckpt_batch_free(b);
  if (err)
    return db_err(err, "write", c->dir);
  return FT_OK;
}

int ckpt_catalog_salvage(const char *from, ckpt_catalog *into, const char *prefix, int *copied) {
  *copied = 0;
  /* as lenient as RocksDB gets: take what still reads, stop at damage */
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_options_set_paranoid_checks(o, 0);
  rocksdb_options_set_wal_recovery_mode(o, CAT_WAL_SKIP_ANY);
  rocksdb_options_set_info_log_level(o, CAT_INFO_LOG_OFF);
  char *err = NULL;
  rocksdb_t *db = rocksdb_open_for_read_only(o, from, 0, &err);
  rocksdb_options_destroy(o);
  if (err)
    return db_err(err, "salvage: open read-only", from);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_verify_checksums(ro, 1);
  rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
  size_t plen = strlen(prefix);
  ckpt_batch *b = ckpt_batch_new();
  int rc = b ? FT_OK : ft_err_set(FT_ENOMEM, "out of memory");
  int n = 0;
  for (rocksdb_iter_seek(it, prefix, plen); rc == FT_OK && rocksdb_iter_valid(it);
       rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl);
    if (kl < plen || memcmp(k, prefix, plen) != 0)
      break;
    const char *v = rocksdb_iter_value(it, &vl);
    rocksdb_writebatch_put(b->wb, k, kl, v, vl);
    n++;
  }
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
  rocksdb_close(db);
  int scan = err ? db_err(err, "salvage: scan", from) : FT_OK;
  if (rc == FT_OK && n > 0) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ft_err_detail());
    rc = ckpt_catalog_write(into, b); /* frees b */
    b = NULL;
    if (rc == FT_OK) {
      *copied = n;
      ft_err_set(scan, "%s", saved);
    }
  }
  ckpt_batch_free(b);
  return rc ? rc : scan;
}

int ckpt_catalog_writable(ckpt_catalog *c) {
  if (c->read_only)
    return ft_err_set(FT_ESTATE, "catalog %s is open read-only", c->dir);
  int rc = use_db(c, 1);
  if (rc)
    return rc;
  pthread_rwlock_unlock(&c->rw);
  return FT_OK;
}
