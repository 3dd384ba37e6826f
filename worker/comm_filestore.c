/*
 * comm_filestore: a comm_kv over a directory. See comm_filestore.h.
 *
 * Invariants: a key's file appears only by rename(2) of a fully written and
 * closed temporary file, so its presence means its value is complete; keys
 * never change once set (a second set of a key replaces the file whole).
 * Threading: the store keeps no mutable state besides a counter for
 * temporary names; any number of processes may share the directory.
 */
#include "comm_filestore.h"

#include "ft_clock.h"
#include "ft_err.h"
#include "ft_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  char *dir;
  atomic_uint seq;
} filestore;

enum { POLL_MS = 5 };

/* dir + "/" + percent-encoded key; malloc'd. */
static char *key_path(const filestore *fs, const char *key) {
  size_t dl = strlen(fs->dir), kl = strlen(key);
  char *p = malloc(dl + 1 + 3 * kl + 1), *q;
  if (!p)
    return NULL;
  memcpy(p, fs->dir, dl);
  q = p + dl;
  *q++ = '/';
  for (const unsigned char *k = (const unsigned char *)key; *k; k++) {
    if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
        *k == '_' || *k == '-') {
      *q++ = (char)*k;
    } else {
      snprintf(q, 4, "%%%02X", *k);
      q += 3;
    }
  }
  *q = 0;
  return p;
}

static int fs_set(void *ud, const char *key, const void *val, size_t len) {
  filestore *fs = ud;
  int rc = FT_OK, fd = -1;
  char *path = NULL, *tmp = NULL;
  if (!key || !*key || (len && !val))
    return ft_err_set(FT_EINVAL, "filestore set: empty key or NULL value");
  path = key_path(fs, key);
  tmp = malloc(strlen(fs->dir) + 64);
  if (!path || !tmp) {
    rc = ft_err_set(FT_ENOMEM, "filestore set: out of memory");
    goto out;
  }
  sprintf(tmp, "%s/.tmp.%ld.%u", fs->dir, (long)getpid(), atomic_fetch_add(&fs->seq, 1));
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = ft_err_set(ft_err_from_errno(errno), "filestore set: open %s: %s", tmp, strerror(errno));
    goto out;
  }
  /* Closed whether or not the write failed. */
  rc = ft_write_all(fd, val, len, tmp);
  int e = errno;
  if (close(fd) != 0 && rc == FT_OK) {
    e = errno;
    rc = FT_EIO;
  }
  fd = -1;
  if (rc != FT_OK) {
    rc = ft_err_set(ft_err_from_errno(e), "filestore set: write %s: %s", tmp, strerror(e));
    unlink(tmp);
    goto out;
  }
  if (rename(tmp, path) != 0) {
    rc = ft_err_set(ft_err_from_errno(errno), "filestore set: rename to %s: %s", path,
                    strerror(errno));
    unlink(tmp);
    goto out;
  }
out:
  if (fd >= 0)
    close(fd);
  free(tmp);
  free(path);
  return rc;
}

static int fs_wait(void *ud, const char *const *keys, int nkeys, int timeout_ms) {
  filestore *fs = ud;
  long long deadline = ft_now_ms() + timeout_ms;
  int i = 0;
  if (nkeys < 0 || (nkeys && !keys))
    return ft_err_set(FT_EINVAL, "filestore wait: bad key list");
  /* Keys are never removed, so once key i is present we move on for good. */
  while (i < nkeys) {
    struct stat st;
    char *path = key_path(fs, keys[i]);
    if (!path)
      return ft_err_set(FT_ENOMEM, "filestore wait: out of memory");
    int found = stat(path, &st) == 0;
    int e = errno;
    free(path);
    if (found) {
      i++;
      continue;
    }
    if (e != ENOENT)
      return ft_err_set(ft_err_from_errno(e), "filestore wait: stat key '%s': %s", keys[i],
                        strerror(e));
    if (timeout_ms >= 0 && ft_now_ms() >= deadline)
      return ft_err_set(FT_ETIMEDOUT, "filestore wait: key '%s' (%d of %d) absent after %d ms",
                        keys[i], i + 1, nkeys, timeout_ms);
    struct timespec ts = {0, POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  return FT_OK;
}

static int fs_get(void *ud, const char *key, void **val, size_t *len) {
  filestore *fs = ud;
  int rc = FT_OK;
  char *path = key_path(fs, key), *buf = NULL;
  FILE *f = NULL;
  long n;
  *val = NULL;
  *len = 0;
  if (!path)
    return ft_err_set(FT_ENOMEM, "filestore get: out of memory");
  f = fopen(path, "rbe");
  if (!f) {
    rc = ft_err_set(ft_err_from_errno(errno), "filestore get: key '%s': %s", key, strerror(errno));
    goto out;
  }
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    rc = ft_err_set(FT_EIO, "filestore get: key '%s': cannot size %s", key, path);
    goto out;
  }
  buf = malloc(n ? (size_t)n : 1);
  if (!buf) {
    rc = ft_err_set(FT_ENOMEM, "filestore get: out of memory");
    goto out;
  }
  if (n && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    rc = ft_err_set(FT_EIO, "filestore get: key '%s': short read of %s", key, path);
    goto out;
  }
  *val = buf;
  *len = (size_t)n;
  buf = NULL;
out:
  free(buf);
  if (f)
    fclose(f);
  free(path);
  return rc;
}

int comm_filestore_init(comm_kv *kv, const char *dir) {
  struct stat st;
  filestore *fs;
  if (!kv || !dir || !*dir)
    return ft_err_set(FT_EINVAL, "comm_filestore_init: no directory");
  memset(kv, 0, sizeof *kv);
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return ft_err_set(FT_ENOENT, "comm_filestore_init: %s is not a directory", dir);
  fs = calloc(1, sizeof *fs);
  if (!fs || !(fs->dir = strdup(dir))) {
    free(fs);
    return ft_err_set(FT_ENOMEM, "comm_filestore_init: out of memory");
  }
  kv->ud = fs;
  kv->set = fs_set;
  kv->wait = fs_wait;
  kv->get = fs_get;
  return FT_OK;
}

void comm_filestore_release(comm_kv *kv) {
  if (!kv || !kv->ud)
    return;
  filestore *fs = kv->ud;
  free(fs->dir);
  free(fs);
  memset(kv, 0, sizeof *kv);
}
