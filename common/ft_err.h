/*
 * ft_err: the one error space of the project.
 *
 * Every library function that can fail returns an int: 0 (FT_OK) on success,
 * or a negative FT_E* value below. Each dependency's own error (errno,
 * RocksDB's errptr, zstd codes, CURLcode, cudaError_t, ncclResult_t) is
 * translated in exactly one wrapper, which keeps the detail text for the log
 * through ft_err_set(). ft_err_detail() returns the last detail set on this
 * thread (thread-local, valid until the next ft_err_set on the same thread).
 *
 * Programs map errors to exit codes; libraries never exit().
 */
#ifndef FT_ERR_H
#define FT_ERR_H

#include <stdarg.h>

#define FT_ERRORS(X)                                                                               \
  X(FT_OK, 0, "success")                                                                           \
  X(FT_EINVAL, -1, "invalid argument")                                                             \
  X(FT_ENOMEM, -2, "out of memory")                                                                \
  X(FT_EIO, -3, "input/output error")                                                              \
  X(FT_ENOENT, -4, "not found")                                                                    \
  X(FT_EEXIST, -5, "already exists")                                                               \
  X(FT_ECORRUPT, -6, "data is corrupt (hash or checksum mismatch)")                                \
  X(FT_EFORMAT, -7, "bad file format")                                                             \
  X(FT_EBUSY, -8, "resource is locked by another process")                                         \
  X(FT_ECONFIG, -9, "bad configuration")                                                           \
  X(FT_EDB, -10, "catalog database error")                                                         \
  X(FT_ECODEC, -11, "compression codec error")                                                     \
  X(FT_ENET, -12, "network error")                                                                 \
  X(FT_ETIMEDOUT, -13, "operation timed out")                                                      \
  X(FT_ESTATE, -14, "operation not allowed in the current state")                                  \
  X(FT_ECOMM, -15, "collective communication failed")                                              \
  X(FT_ECUDA, -16, "CUDA error")                                                                   \
  X(FT_ENOSPC, -17, "no space left on device")                                                     \
  X(FT_EPROTO, -18, "protocol error")                                                              \
  X(FT_ECANCELED, -19, "operation canceled")

enum ft_err {
#define FT_ERR_ENUM(name, val, msg) name = val,
  FT_ERRORS(FT_ERR_ENUM)
#undef FT_ERR_ENUM
};

/* Static message for an error code; never NULL. */
const char *ft_strerror(int err);

/* Record a detail message for the current thread; returns err so callers
 * can write `return ft_err_set(FT_EIO, "open %s: %s", path, strerror(errno));` */
int ft_err_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ft_err_setv(int err, const char *fmt, va_list ap);

/* The last detail recorded on this thread, or "" if none. Borrowed. */
const char *ft_err_detail(void);

/* Translate an errno value to FT_E* (ENOENT->FT_ENOENT, ENOSPC->FT_ENOSPC, ...). */
int ft_err_from_errno(int e);

#endif
