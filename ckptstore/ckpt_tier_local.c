/*
 * ckpt_tier_local: the "local:DIR" tier, objects as files in a directory.
 *
 * Layout of a store directory (everything a store needs is in it; the
 * catalog can be rebuilt from chunks/ and manifests/ alone):
 *
 *   DIR/chunks/ab/abcdef...          one chunk object, named by the SHA-256
 *                                    (64 hex) of its raw bytes; the 256
 *                                    fan-out folders 00..ff are made at open
 *   DIR/manifests/<run>/<step>.json  one checkpoint manifest (step as 20
 *                                    digits, so names sort by step)
 *   DIR/catalog/                     the RocksDB catalog (unless
 *                                    opts->catalog_dir says elsewhere)
 *   DIR/catalog.lock                 the writer lock (ckpt_catalog.c)
 *   DIR/.clock                       touched to read the file system's clock
 *
 * Writes are crash-safe: a temp file "<name>.tmp.<pid>.<tid>.<n>" beside the
 * final name, write, fsync, rename over the final name, fsync the folder.
 * A crash leaves at most a temp file, which GC removes once it is old.
 * Objects are immutable; a chunk rewritten is rewritten with the same bytes.
 *
 * Threads: no shared mutable state besides an atomic counter for temp names.
 */
#include "ckpt_tier_int.h"

#include "ft_err.h"
#include "ft_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct local_tier {
  ckpt_tier t;
  char *dir;
} local_tier;

static unsigned long tmp_counter;

static int errno_err(int e, const char *what, const char *path) {
  return ft_err_set(ft_err_from_errno(e), "%s %s: %s", what, path, strerror(e));
}

/* Maps a key to a path: chunks get a two-hex-digit fan-out folder. */
static int key_path(local_tier *lt, const char *key, char *buf, size_t n) {
  int w;
  if (strstr(key, "..") || key[0] == '/')
    return ft_err_set(FT_EINVAL, "local tier: bad key '%s'", key);
  const char *hex = ckpt_objkey_chunk_name(key);
  if (hex && strlen(hex) >= 2)
    w = snprintf(buf, n, "%s/" CKPT_OBJ_CHUNKS "%.2s/%s", lt->dir, hex, hex);
  else
    w = snprintf(buf, n, "%s/%s", lt->dir, key);
  if (w < 0 || (size_t)w >= n)
    return ft_err_set(FT_EINVAL, "local tier: path too long for key '%s'", key);
  return FT_OK;
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errno_err(errno, "open folder", dir);
  int rc = FT_OK;
  if (fsync(fd) != 0)
    rc = errno_err(errno, "fsync folder", dir);
  close(fd);
  return rc;
}

static int parent_of(const char *path, char *buf, size_t n) {
  const char *slash = strrchr(path, '/');
  size_t len = slash ? (size_t)(slash - path) : 0;
  if (len == 0 || len >= n)
    return ft_err_set(FT_EINVAL, "no parent folder in '%s'", path);
  memcpy(buf, path, len);
  buf[len] = 0;
  return FT_OK;
}

/* mkdir -p for the parent of path; fsyncs each parent of a folder it made. */
static int make_parents(const char *path) {
  char dir[PATH_MAX];
  int rc = parent_of(path, dir, sizeof dir);
  if (rc)
    return rc;
  struct stat st;
  if (stat(dir, &st) == 0)
    return FT_OK;
  rc = make_parents(dir);
  if (rc)
    return rc;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return errno_err(errno, "mkdir", dir);
  char up[PATH_MAX];
  if (parent_of(dir, up, sizeof up) == FT_OK)
    return fsync_dir(up);
  return FT_OK;
}

static int local_put(ckpt_tier *t, const char *key, const void *data, size_t len) {
  local_tier *lt = (local_tier *)t;
  char path[PATH_MAX], tmp[PATH_MAX + 64], dir[PATH_MAX];
  int rc = key_path(lt, key, path, sizeof path);
  if (rc)
    return rc;
  rc = make_parents(path);
  if (rc)
    return rc;
  rc = parent_of(path, dir, sizeof dir);
  if (rc)
    return rc;
  snprintf(tmp, sizeof tmp, "%s.tmp.%d.%ld.%lu", path, (int)getpid(), (long)syscall(SYS_gettid),
           __atomic_add_fetch(&tmp_counter, 1, __ATOMIC_RELAXED));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return errno_err(errno, "create", tmp);
  if (ft_write_all(fd, data, len, tmp)) {
    rc = errno_err(errno, "write", tmp); /* errno is the write's */
    goto fail;
  }
  if (fsync(fd) != 0) {
    rc = errno_err(errno, "fsync", tmp);
    goto fail;
  }
  if (close(fd) != 0) {
    fd = -1;
    rc = errno_err(errno, "close", tmp);
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    rc = errno_err(errno, "rename", tmp);
    goto fail;
  }
  return fsync_dir(dir);
fail:
  if (fd >= 0)
    close(fd);
  unlink(tmp);
  return rc;
}

static int local_get(ckpt_tier *t, const char *key, uint8_t **data, size_t *len) {
  local_tier *lt = (local_tier *)t;
  char path[PATH_MAX];
  *data = NULL;
  *len = 0;
  int rc = key_path(lt, key, path, sizeof path);
  if (rc)
    return rc;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno_err(errno, "open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = errno_err(errno, "stat", path);
    close(fd);
    return rc;
  }
  size_t n = (size_t)st.st_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return ft_err_set(FT_ENOMEM, "out of memory reading %s (%zu bytes)", path, n);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      rc = r < 0 ? errno_err(errno, "read", path)
                 : ft_err_set(FT_EIO, "read %s: file shrank while reading", path);
      free(buf);
      close(fd);
      return rc;
    }
    got += (size_t)r;
  }
  close(fd);
  *data = buf;
  *len = n;
  return FT_OK;
}

static int64_t mtime_ns(const struct stat *st) {
  return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

static int local_exists(ckpt_tier *t, const char *key, int freshen, uint64_t *size,
                        int64_t *mtime) {
  local_tier *lt = (local_tier *)t;
  char path[PATH_MAX];
  int rc = key_path(lt, key, path, sizeof path);
  if (rc)
    return rc;
  if (freshen && utimensat(AT_FDCWD, path, NULL, 0) != 0)
    return errno_err(errno, "touch", path);
  struct stat st;
  if (stat(path, &st) != 0)
    return errno_err(errno, "stat", path);
  if (size)
    *size = (uint64_t)st.st_size;
  if (mtime)
    *mtime = mtime_ns(&st);
  return FT_OK;
}

static int local_del(ckpt_tier *t, const char *key) {
  local_tier *lt = (local_tier *)t;
  char path[PATH_MAX], dir[PATH_MAX];
  int rc = key_path(lt, key, path, sizeof path);
  if (rc)
    return rc;
  if (unlink(path) != 0)
    return errno_err(errno, "delete", path);
  if (parent_of(path, dir, sizeof dir) == FT_OK)
    return fsync_dir(dir);
  return FT_OK;
}

/* Rename aside, re-check, then unlink or put back: a freshen that happened
 * before the rename is seen by the re-check; one after it fails with ENOENT
 * and its writer writes the chunk again. */
static int local_del_if_older(ckpt_tier *t, const char *key, int64_t cutoff_ns, uint64_t *freed) {
  local_tier *lt = (local_tier *)t;
  char path[PATH_MAX], aside[PATH_MAX + 64], dir[PATH_MAX];
  struct stat st;
  if (freed)
    *freed = 0;
  int rc = key_path(lt, key, path, sizeof path);
  if (rc)
    return rc;
  if (stat(path, &st) != 0)
    return errno_err(errno, "stat", path);
  if (mtime_ns(&st) >= cutoff_ns)
    return FT_EEXIST;
  snprintf(aside, sizeof aside, "%s.gc.%d", path, (int)getpid());
  if (rename(path, aside) != 0)
    return errno_err(errno, "rename", path);
  if (stat(aside, &st) != 0)
    return errno_err(errno, "stat", aside);
  if (mtime_ns(&st) >= cutoff_ns) {
    if (rename(aside, path) != 0)
      return errno_err(errno, "rename back", aside);
    return FT_EEXIST;
  }
  if (unlink(aside) != 0)
    return errno_err(errno, "delete", aside);
  if (freed)
    *freed = (uint64_t)st.st_size;
  if (parent_of(path, dir, sizeof dir) == FT_OK)
    return fsync_dir(dir);
  return FT_OK;
}

static int list_dir(const char *dir, const char *keyprefix, int depth,
                    int (*fn)(void *ud, const char *key), void *ud) {
  DIR *d = opendir(dir);
  if (!d)
    return errno == ENOENT ? FT_OK : errno_err(errno, "open folder", dir);
  int rc = FT_OK;
  struct dirent *e;
  while (rc == FT_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char sub[PATH_MAX], key[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    if (depth > 0) {
      /* chunk fan-out folders are not part of the key */
      snprintf(key, sizeof key, "%s", keyprefix);
      rc = list_dir(sub, key, depth - 1, fn, ud);
    } else {
      snprintf(key, sizeof key, "%s%s", keyprefix, e->d_name);
      rc = fn(ud, key);
    }
  }
  closedir(d);
  return rc;
}

static int local_list(ckpt_tier *t, const char *prefix, int (*fn)(void *ud, const char *key),
                      void *ud) {
  local_tier *lt = (local_tier *)t;
  char dir[PATH_MAX];
  if (strcmp(prefix, CKPT_OBJ_CHUNKS) == 0) {
    snprintf(dir, sizeof dir, "%s/" CKPT_OBJ_CHUNKS, lt->dir);
    return list_dir(dir, CKPT_OBJ_CHUNKS, 1, fn, ud);
  }
  int rc = key_path(lt, prefix, dir, sizeof dir);
  if (rc)
    return rc;
  size_t n = strlen(dir);
  if (n > 0 && dir[n - 1] == '/')
    dir[n - 1] = 0;
  return list_dir(dir, prefix, 0, fn, ud);
}

static int local_now(ckpt_tier *t, int64_t *now_ns) {
  local_tier *lt = (local_tier *)t;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/.clock", lt->dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return errno_err(errno, "create", path);
  struct stat st;
  int rc = FT_OK;
  if (futimens(fd, NULL) != 0 || fstat(fd, &st) != 0)
    rc = errno_err(errno, "touch", path);
  else
    *now_ns = mtime_ns(&st);
  close(fd);
  return rc;
}

static void local_free(ckpt_tier *t) {
  local_tier *lt = (local_tier *)t;
  if (!lt)
    return;
  free(lt->dir);
  free(lt);
}

int ckpt_tier_local_open(const char *dir, int create, ckpt_tier **out) {
  *out = NULL;
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (!create || errno != ENOENT)
      return ft_err_set(errno == ENOENT ? FT_ENOENT : ft_err_from_errno(errno),
                        "store folder %s: %s", dir, strerror(errno));
    char probe[PATH_MAX];
    snprintf(probe, sizeof probe, "%s/x", dir);
    int rc = make_parents(probe);
    if (rc)
      return rc;
  } else if (!S_ISDIR(st.st_mode)) {
    return ft_err_set(FT_EINVAL, "store path %s is not a folder", dir);
  }
  if (create) {
    char sub[PATH_MAX];
    const char *tops[] = {"chunks", "manifests"};
    for (int i = 0; i < 2; i++) {
      snprintf(sub, sizeof sub, "%s/%s", dir, tops[i]);
      if (mkdir(sub, 0755) != 0 && errno != EEXIST)
        return errno_err(errno, "mkdir", sub);
    }
    for (int i = 0; i < 256; i++) {
      snprintf(sub, sizeof sub, "%s/chunks/%02x", dir, i);
      if (mkdir(sub, 0755) != 0 && errno != EEXIST)
        return errno_err(errno, "mkdir", sub);
    }
    snprintf(sub, sizeof sub, "%s/chunks", dir);
    int rc = fsync_dir(sub);
    if (rc == FT_OK)
      rc = fsync_dir(dir);
    if (rc)
      return rc;
  }
  local_tier *lt = calloc(1, sizeof *lt);
  if (!lt || !(lt->dir = strdup(dir))) {
    free(lt);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  lt->t = (ckpt_tier){.name = "local",
                      .put = local_put,
                      .get = local_get,
                      .exists = local_exists,
                      .del = local_del,
                      .del_if_older = local_del_if_older,
                      .list = local_list,
                      .now = local_now,
                      .free = local_free,
                      .desc = lt->dir};
  *out = &lt->t;
  return FT_OK;
}
