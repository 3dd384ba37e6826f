/*
 * comm_int: what a comm backend implements (private to comm*.c / comm_*.cpp).
 *
 * struct comm is the same for every backend: a table of operations, the
 * backend's own state behind `impl`, and the sticky failure. comm.c checks
 * arguments and the failure state before it calls a backend, so a backend
 * only sees valid arguments on a healthy comm, and only ever returns FT_OK,
 * FT_ECOMM or FT_ETIMEDOUT (with detail); a device backend may also return
 * FT_ECUDA, FT_ENOMEM or FT_ECONFIG for local CUDA/NCCL failures. After a
 * backend failure comm.c marks the comm broken and calls ops->abort, which
 * must make peers notice quickly (close sockets, abort the NCCL
 * communicator) and must tolerate being called again.
 *
 * Device collectives live in a second table (struct comm_dev_ops, NULL for
 * host-only backends such as Gloo) so that adding them did not change the
 * layout that comm_gloo.cpp initialises positionally.
 *
 * comm_abort() is the one entry point allowed on another thread while the
 * owner thread is inside a call: it only sets c->aborted (through
 * __atomic builtins; the owner reads it the same way) and calls ops->abort,
 * which the backend must make thread-safe. Everything else in struct comm
 * (failed, failed_op, failed_why) belongs to the owner thread.
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
  /* bytes from send to rank (r + dist) % W, into recv from rank (r - dist) % W;
   * *recv_s: seconds until the receive completed; NULL: not supported
   * (comm_shift answers FT_ESTATE) */
  int (*shift)(void *impl, const void *send, void *recv, size_t bytes, int dist, double *recv_s);
};

/* Collectives on device buffers, enqueued on a CUDA stream (void * is a
 * cudaStream_t). Same rules as above: valid arguments, healthy comm. */
struct comm_dev_ops {
  int (*allgather_bf16)(void *impl, const void *send, void *recv, size_t count, void *stream);
  int (*reduce_scatter_f32)(void *impl, const float *send, float *recv, size_t count, void *stream);
  int (*allreduce_f32)(void *impl, float *buf, size_t n, void *stream);
  int (*allreduce_f64)(void *impl, double *buf, size_t n, void *stream);
  /* Non-blocking: FT_OK, or the asynchronous error the backend saw. */
  int (*poll)(void *impl);
  /* Waits for all work on stream; timeout_ms <= 0 means the comm's timeout. */
  int (*wait)(void *impl, void *stream, int timeout_ms);
};

struct comm {
  const struct comm_ops *ops;
  const struct comm_dev_ops *dev; /* NULL: no device collectives */
  void *impl;
  int rank, world;
  int failed;           /* 0, or the code of the first failure */
  char failed_op[32];   /* the collective that failed */
  char failed_why[256]; /* its detail */
  int aborted;          /* 1 once comm_abort ran; atomic (any thread) */
};

/* Wraps a backend's state; on FT_ENOMEM the caller still owns impl. */
int comm__wrap(const struct comm_ops *ops, void *impl, int rank, int world, comm **out);
/* The same for a backend with device collectives. */
int comm__wrap_dev(const struct comm_ops *ops, const struct comm_dev_ops *dev, void *impl, int rank,
                   int world, comm **out);

#ifdef __cplusplus
}
#endif

#endif
