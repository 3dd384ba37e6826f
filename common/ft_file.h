/*
 * ft_file: crash-safe whole-file writes.
 *
 * A file is written to a temp file beside it, fsync'ed, renamed over the
 * destination and the directory fsync'ed: a crash at any instant leaves
 * either the old file or the whole new one, never a torn one. Used for data
 * shards, model files and anything else written in one go (the checkpoint
 * store's tiers keep their own writer: they also freshen and never
 * overwrite chunks).
 *
 * Usage: ft_afile_open, ft_afile_write as often as needed, then
 * ft_afile_commit (or ft_afile_abort on an error of the caller's). Errors
 * name the path; FT_ENOSPC for a full disk. Commit and abort always release
 * the temp file.
 *
 * Also the project's one "write every byte" loop: ft_write_all for files and
 * pipes, ft_send_all for stream sockets. Both retry on EINTR and on short
 * writes, so a signal or a full pipe never loses the tail of a buffer.
 */
#ifndef FT_FILE_H
#define FT_FILE_H

#include <stddef.h>

typedef struct ft_afile {
  const char *path; /* borrowed until commit/abort */
  char *tmp;
  int fd;
} ft_afile;

int ft_afile_open(ft_afile *f, const char *path);
int ft_afile_write(ft_afile *f, const void *buf, size_t n);
/* fsync, close, rename over path, fsync the directory. Always releases f. */
int ft_afile_commit(ft_afile *f);
void ft_afile_abort(ft_afile *f);

/* Writes all n bytes of buf to fd with write(2), retrying on EINTR and short
 * writes. On failure: FT_ENOSPC for a full disk or quota, FT_EIO otherwise,
 * detail "WHAT: write: strerror"; errno is left as the failing write set it. */
int ft_write_all(int fd, const void *buf, size_t n, const char *what);
/* The same over a stream socket with send(2) and MSG_NOSIGNAL: a peer that
 * has gone is FT_ENET ("send to WHAT: strerror"), never a SIGPIPE. */
int ft_send_all(int fd, const void *buf, size_t n, const char *what);

/* What a st_mode is, for messages that refuse to replace it: "a folder",
 * "a character device", "a FIFO", "a symbolic link", ... */
const char *ft_file_kind(unsigned mode);

#endif
