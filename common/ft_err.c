/* ft_err: message table and the per-thread detail buffer. See ft_err.h. */
#include "ft_err.h"

#include <errno.h>
#include <stdio.h>

static _Thread_local char detail[1024];

const char *ft_strerror(int err) {
  switch (err) {
#define FT_ERR_CASE(name, val, msg)                                                                \
  case val:                                                                                        \
    return msg;
    FT_ERRORS(FT_ERR_CASE)
#undef FT_ERR_CASE
  }
  return "unknown error";
}

int ft_err_setv(int err, const char *fmt, va_list ap) {
  vsnprintf(detail, sizeof detail, fmt, ap);
  return err;
}

int ft_err_set(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ft_err_setv(err, fmt, ap);
  va_end(ap);
  return err;
}

const char *ft_err_detail(void) {
  return detail;
}

int ft_err_from_errno(int e) {
  switch (e) {
  case 0:
    return FT_OK;
  case ENOENT:
    return FT_ENOENT;
  case EEXIST:
    return FT_EEXIST;
  case ENOMEM:
    return FT_ENOMEM;
  case ENOSPC:
  case EDQUOT:
    return FT_ENOSPC;
  case EINVAL:
    return FT_EINVAL;
  case EAGAIN:
  case EBUSY:
    return FT_EBUSY;
  case ETIMEDOUT:
    return FT_ETIMEDOUT;
  case ECANCELED:
    return FT_ECANCELED;
  default:
    return FT_EIO;
  }
}
