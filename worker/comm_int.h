/*
 * comm_int: what a comm backend implements (private to comm*.c / comm_*.cpp).
 *
 * struct comm is the same for every backend: a table of operations, the
 * backend's own state behind `impl`, and the sticky failure. comm.c checks
 * arguments and the failure state before it calls a backend, so a backend
 * only sees valid arguments on a healthy comm, and only ever returns FT_OK,
 * FT_ECOMM or FT_ETIMEDOUT (with detail). After a backend failure comm.c
 * marks the comm broken and calls ops->abort once, which must make peers
 * notice quickly (close sockets, abort the NCCL communicator).
 */
#ifndef FT_COMM_INT_H
#define FT_COMM_INT_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct comm_ops {
  const char *name;
  void (*destroy)(void *impl);
  void (*abort)(void *impl);
  int (*allgather)(void *impl, const float *send, float *recv, size_t count);
  int (*reduce_scatter)(void *impl, const float *send, float *recv, size_t count);
  int (*allreduce_f32)(void *impl, float *buf, size_t n);
  int (*allreduce_f64)(void *impl, double *buf, size_t n);
  int (*broadcast)(void *impl, void *buf, size_t bytes, int root);
  int (*barrier)(void *impl);
};

struct comm {
  const struct comm_ops *ops;
  void *impl;
  int rank, world;
  int failed;           /* 0, or the code of the first failure */
  char failed_op[32];   /* the collective that failed */
  char failed_why[256]; /* its detail */
};

/* Wraps a backend's state; on FT_ENOMEM the caller still owns impl. */
int comm__wrap(const struct comm_ops *ops, void *impl, int rank, int world, comm **out);

#ifdef __cplusplus
}
#endif

#endif
