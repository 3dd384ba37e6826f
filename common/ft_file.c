/*
 * ft_file: crash-safe whole-file writes and the write-every-byte loops
 * (see ft_file.h).
 */
#include "ft_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ft_err.h"

int ft_afile_open(ft_afile *f, const char *path) {
  f->path = path;
  f->fd = -1;
  size_t n = strlen(path) + 16;
  f->tmp = malloc(n);
  if (!f->tmp)
    return ft_err_set(FT_ENOMEM, "%s: out of memory", path);
  snprintf(f->tmp, n, "%s.tmp.XXXXXX", path);
  f->fd = mkstemp(f->tmp);
  if (f->fd < 0) {
    int e = errno;
    free(f->tmp);
    f->tmp = NULL;
    return ft_err_set(ft_err_from_errno(e) == FT_ENOSPC ? FT_ENOSPC : FT_EIO,
                      "%s: cannot create temp file: %s", path, strerror(e));
  }
  /* mkstemp makes 0600; these are ordinary data files (umask applies). */
  mode_t um = umask(0);
  umask(um);
  fchmod(f->fd, 0666 & ~um);
  return FT_OK;
}

/* One write(2) or send(2) is capped at 1 GiB (Linux moves at most ~2 GiB). */
enum { WRITE_CAP = 1 << 30 };

int ft_write_all(int fd, const void *buf, size_t n, const char *what) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n > WRITE_CAP ? WRITE_CAP : n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      int e = errno;
      int rc = ft_err_set(e == ENOSPC || e == EDQUOT ? FT_ENOSPC : FT_EIO, "%s: write: %s", what,
                          strerror(e));
      errno = e;
      return rc;
    }
    p += w;
    n -= (size_t)w;
  }
  return FT_OK;
}

int ft_send_all(int fd, const void *buf, size_t n, const char *what) {
  const char *p = buf;
  while (n) {
    ssize_t w = send(fd, p, n > WRITE_CAP ? WRITE_CAP : n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EPIPE;
      int rc = ft_err_set(FT_ENET, "send to %s: %s", what, strerror(e));
      errno = e;
      return rc;
    }
    p += w;
    n -= (size_t)w;
  }
  return FT_OK;
}

int ft_afile_write(ft_afile *f, const void *buf, size_t n) {
  return ft_write_all(f->fd, buf, n, f->path);
}

void ft_afile_abort(ft_afile *f) {
  if (f->fd >= 0)
    close(f->fd);
  if (f->tmp) {
    unlink(f->tmp);
    free(f->tmp);
  }
  f->fd = -1;
  f->tmp = NULL;
}

int ft_afile_commit(ft_afile *f) {
  int rc = FT_OK;
  if (fsync(f->fd) != 0) {
    rc = ft_err_set(FT_EIO, "%s: fsync: %s", f->path, strerror(errno));
    goto out;
  }
  if (close(f->fd) != 0) {
    f->fd = -1;
    rc = ft_err_set(FT_EIO, "%s: close: %s", f->path, strerror(errno));
    goto out;
  }
  f->fd = -1;
  if (rename(f->tmp, f->path) != 0) {
    rc = ft_err_set(FT_EIO, "%s: rename from temp file: %s", f->path, strerror(errno));
    goto out;
  }
  free(f->tmp);
  f->tmp = NULL;
  char *dup = strdup(f->path);
  if (!dup)
    return ft_err_set(FT_ENOMEM, "%s: out of memory", f->path);
  int dfd = open(dirname(dup), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    if (fsync(dfd) != 0)
      rc = ft_err_set(FT_EIO, "%s: fsync of directory: %s", f->path, strerror(errno));
    close(dfd);
  }
  free(dup);
  return rc;
out:
  ft_afile_abort(f);
  return rc;
}

const char *ft_file_kind(unsigned mode) {
  if (S_ISDIR(mode))
    return "a folder";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISLNK(mode))
    return "a symbolic link";
  if (S_ISREG(mode))
    return "a regular file";
  return "not a regular file";
}
