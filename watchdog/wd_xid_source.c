/*
 * wd_xid_source: /dev/kmsg reader and `tail -f` of a regular file. See
 * wd_xid_source.h for the contract.
 *
 * Tail mode keeps a buffer [start, fill) of bytes read but not yet returned.
 * A line is returned in place (its '\n' is overwritten with NUL for the
 * caller's convenience); the buffer is compacted before each read. When the
 * buffer is full without a newline, the buffer is returned as one cut line
 * and bytes are dropped up to the next newline (`skipping`).
 */
#include "wd_xid_source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ft_err.h"

struct wd_xid_source {
  int fd;
  int kmsg;
  char *path;
  dev_t dev;
  ino_t ino;
  off_t pos; /* tail mode: file offset of buf[fill] */
  char buf[WD_XID_SOURCE_LINE_MAX];
  size_t start, fill;
  int skipping; /* tail mode: dropping the rest of an over-long line */
  uint64_t lost;
};

static int open_error(const char *path, int e) {
  if (e == ENOENT)
    return ft_err_set(FT_ENOENT,
                      "Xid source %s does not exist; set watchdog.xid_source to an existing "
                      "kernel log, or to \"\" to turn Xid detection off",
                      path);
  if (e == EACCES || e == EPERM)
    return ft_err_set(FT_EBUSY,
                      "cannot read Xid source %s: %s. Xid detection is OFF. To enable it: run with "
                      "CAP_SYSLOG (or as root), or set kernel.dmesg_restrict=0 for /dev/kmsg, or "
                      "point watchdog.xid_source at a readable copy of the kernel log (e.g. "
                      "/var/log/kern.log with read access)",
                      path, strerror(e));
  return ft_err_set(ft_err_from_errno(e) ? ft_err_from_errno(e) : FT_EIO, "open %s: %s", path,
                    strerror(e));
}

/* Opens path into s (fd, kmsg, dev/ino, pos); from_start: tail from 0. */
static int open_fd(wd_xid_source *s, int from_start) {
  int fd = open(s->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return open_error(s->path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return ft_err_set(FT_EIO, "fstat %s: %s", s->path, strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return ft_err_set(FT_EINVAL, "Xid source %s is a directory", s->path);
  }
  s->kmsg = S_ISCHR(st.st_mode);
  off_t pos = 0;
  if (s->kmsg || !from_start) {
    pos = lseek(fd, 0, SEEK_END);
    if (pos < 0) {
      if (s->kmsg || errno != ESPIPE) { /* a FIFO cannot seek: fine */
        int e = errno;
        close(fd);
        return ft_err_set(FT_EIO, "lseek %s to its end: %s", s->path, strerror(e));
      }
      pos = 0;
    }
  }
  s->fd = fd;
  s->dev = st.st_dev;
  s->ino = st.st_ino;
  s->pos = s->kmsg ? 0 : pos;
  s->start = s->fill = 0;
  s->skipping = 0;
  return FT_OK;
}

int wd_xid_source_open(const char *path, unsigned flags, wd_xid_source **out) {
  if (!out || !path || !*path)
    return ft_err_set(FT_EINVAL, "wd_xid_source_open: empty path (Xid detection off?)");
  *out = NULL;
  wd_xid_source *s = calloc(1, sizeof *s);
  if (!s)
    return ft_err_set(FT_ENOMEM, "wd_xid_source_open: out of memory");
  s->fd = -1;
  s->path = strdup(path);
  if (!s->path) {
    free(s);
    return ft_err_set(FT_ENOMEM, "wd_xid_source_open: out of memory");
  }
  int rc = open_fd(s, (flags & WD_XID_SOURCE_FROM_START) != 0);
  if (rc) {
    wd_xid_source_close(s);
    return rc;
  }
  *out = s;
  return FT_OK;
}

void wd_xid_source_close(wd_xid_source *s) {
  if (!s)
    return;
  if (s->fd >= 0)
    close(s->fd);
  free(s->path);
  free(s);
}

int wd_xid_source_fd(const wd_xid_source *s) {
  return s ? s->fd : -1;
}

int wd_xid_source_pollable(const wd_xid_source *s) {
  return s && s->kmsg;
}

int wd_xid_source_is_kmsg(const wd_xid_source *s) {
  return s && s->kmsg;
}

uint64_t wd_xid_source_lost(const wd_xid_source *s) {
  return s ? s->lost : 0;
}

static int kmsg_next(wd_xid_source *s, const char **line, size_t *len) {
  for (;;) {
    ssize_t n = read(s->fd, s->buf, sizeof s->buf - 1);
    if (n > 0) {
      s->buf[n] = '\0';
      char *nl = memchr(s->buf, '\n', (size_t)n);
      size_t l = nl ? (size_t)(nl - s->buf) : (size_t)n;
      s->buf[l] = '\0';
      *line = s->buf;
      *len = l;
      return 1;
    }
    if (n == 0)
      return 0;
    if (errno == EINTR)
      continue;
    if (errno == EPIPE) { /* records were overwritten before we read them */
      s->lost++;
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    return ft_err_set(FT_EIO, "read %s: %s", s->path, strerror(errno));
  }
}

/* At EOF: notice truncation (restart at 0) and rotation (reopen the new
 * file under the same path from its start). */
static int tail_check_file(wd_xid_source *s) {
  struct stat st, pst;
  if (fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < s->pos) {
    if (lseek(s->fd, 0, SEEK_SET) == 0) {
      s->pos = 0;
      s->start = s->fill = 0;
      s->skipping = 0;
      return 1;
    }
  }
  if (stat(s->path, &pst) == 0 && (pst.st_ino != s->ino || pst.st_dev != s->dev)) {
    int old = s->fd;
    s->fd = -1;
    int rc = open_fd(s, 1);
    if (rc) { /* keep following the old file until the new one opens */
      s->fd = old;
      return 0;
    }
    close(old);
    return 1;
  }
  return 0;
}

static int tail_next(wd_xid_source *s, const char **line, size_t *len) {
  for (int rounds = 0; rounds < 4; rounds++) {
    /* A complete line in the buffer? */
    char *p = s->buf + s->start;
    char *nl = memchr(p, '\n', s->fill - s->start);
    if (nl) {
      size_t l = (size_t)(nl - p);
      *nl = '\0';
      s->start += l + 1;
      if (s->skipping) { /* the tail of an over-long line */
        s->skipping = 0;
        rounds = 0;
        continue;
      }
      *line = p;
      *len = l;
      return 1;
    }
    /* Compact, then read more. */
    if (s->start > 0) {
      memmove(s->buf, s->buf + s->start, s->fill - s->start);
      s->fill -= s->start;
      s->start = 0;
    }
    if (s->fill == sizeof s->buf - 1) { /* full and no newline: cut the line */
      s->buf[s->fill] = '\0';
      int was_skipping = s->skipping;
      size_t l = s->fill;
      s->fill = 0;
      s->skipping = 1;
      if (was_skipping) {
        rounds = 0;
        continue;
      }
      *line = s->buf;
      *len = l;
      return 1;
    }
    ssize_t n = read(s->fd, s->buf + s->fill, sizeof s->buf - 1 - s->fill);
    if (n > 0) {
      s->fill += (size_t)n;
      s->pos += n;
      rounds = 0;
      continue;
    }
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return 0;
      return ft_err_set(FT_EIO, "read %s: %s", s->path, strerror(errno));
    }
    /* EOF: maybe the file was truncated or replaced. */
    if (!tail_check_file(s))
      return 0;
  }
  return 0;
}

int wd_xid_source_next_line(wd_xid_source *s, const char **line, size_t *len) {
  if (!s || !line || !len || s->fd < 0)
    return ft_err_set(FT_EINVAL, "wd_xid_source_next_line: bad arguments");
  return s->kmsg ? kmsg_next(s, line, len) : tail_next(s, line, len);
}

int wd_xid_source_read_lines(wd_xid_source *s, wd_xid_line_fn fn, void *arg) {
  if (!s || !fn)
    return ft_err_set(FT_EINVAL, "wd_xid_source_read_lines: bad arguments");
  int count = 0;
  for (;;) {
    const char *line;
    size_t len;
    int rc = wd_xid_source_next_line(s, &line, &len);
    if (rc < 0)
      return rc;
    if (rc == 0)
      break;
    count++;
    if (fn(arg, line, len))
      break;
  }
  return count;
}
