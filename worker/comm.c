/*
 * comm: the backend-neutral half of the collectives interface (comm.h).
 *
 * Checks every call's arguments, keeps the sticky failure state, and
 * dispatches to the backend's table (comm_int.h). Invariants:
 *   - a backend is called only with valid arguments, on a comm that has not
 *     failed;
 *   - after the first backend failure, c->failed holds its code, the backend
 *     has been aborted, and every later collective returns FT_ECOMM naming
 *     the first failure, without touching the network;
 *   - after comm_abort (any thread), c->aborted is 1 and every later call
 *     returns FT_ECOMM the same way;
 *   - comm_dev_* on a comm without device collectives (Gloo) is FT_EINVAL
 *     and leaves the comm healthy; a failure of comm_dev_poll or
 *     comm_dev_wait breaks the comm like any collective's.
 * Threading: none of its own; one thread per comm at a time, except
 * comm_abort, which may run on another thread: it touches only the atomic
 * c->aborted and the backend's (thread-safe) abort.
 *
 * Progress (progress.h): every collective that reaches the backend is
 * counted (coll_seq) and, while it runs, is the training thread's phase; a
 * device collective is counted when enqueued and comm_dev_wait is the
 * phase collective. Every rank issues the same collectives in the same
 * order, so coll_seq names the same collective on every rank.
 *
 * Builds without NCCL (FT_HAVE_NCCL undefined: no CUDA, or no libnccl) get a
 * comm_nccl_new here that fails with FT_ECONFIG.
 */
#include "comm_int.h"

#include "ft_err.h"
#include "ft_failpoint.h"
#include "progress.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int comm__wrap(const struct comm_ops *ops, void *impl, int rank, int world, comm **out) {
  return comm__wrap_dev(ops, NULL, impl, rank, world, out);
}

int comm__wrap_dev(const struct comm_ops *ops, const struct comm_dev_ops *dev, void *impl, int rank,
                   int world, comm **out) {
  comm *c = calloc(1, sizeof *c);
  if (!c)
    return ft_err_set(FT_ENOMEM, "comm: out of memory");
  c->ops = ops;
  c->dev = dev;
  c->impl = impl;
  c->rank = rank;
  c->world = world;
  *out = c;
  return FT_OK;
}

void comm_free(comm *c) {
  if (!c)
    return;
  c->ops->destroy(c->impl);
  free(c);
}

int comm_rank(const comm *c) {
  return c->rank;
}
int comm_world(const comm *c) {
  return c->world;
}
const char *comm_backend(const comm *c) {
  return c->ops->name;
}

/* Refuses work on a failed comm. */
static int check_healthy(comm *c, const char *op) {
  if (!c)
    return ft_err_set(FT_EINVAL, "comm_%s: NULL comm", op);
  if (c->failed)
    return ft_err_set(FT_ECOMM, "comm_%s: refused, the comm failed earlier in %s: %s", op,
                      c->failed_op, c->failed_why);
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
    return ft_err_set(FT_ECOMM, "comm_%s: refused, the comm failed earlier: aborted (comm_abort)",
                      op);
  ft_failpoint_hang_here(FT_HANG_COLLECTIVE); /* failpoint hang_in=collective: inside it */
  return FT_OK;
}

/* Records a backend failure (rc != 0) and aborts the backend; returns rc. */
static int after(comm *c, const char *op, int rc) {
  if (rc == FT_OK)
    return rc;
  c->failed = rc;
  snprintf(c->failed_op, sizeof c->failed_op, "%s", op);
  snprintf(c->failed_why, sizeof c->failed_why, "%s", ft_err_detail());
  c->ops->abort(c->impl);
  /* abort may have overwritten the thread's detail: put ours back. */
  ft_err_set(rc, "%s", c->failed_why);
  return rc;
}

/* count * world * elem must fit a size_t. */
static int check_size(comm *c, const char *op, size_t count, size_t mult, size_t elem) {
  if (mult && count > SIZE_MAX / mult / elem)
    return ft_err_set(FT_EINVAL, "comm_%s: count %zu too large", op, count);
  return FT_OK;
}

int comm_allgather(comm *c, const float *send, float *recv, size_t count) {
  int rc = check_healthy(c, "allgather");
  if (rc)
    return rc;
  if ((rc = check_size(c, "allgather", count, (size_t)c->world, sizeof(float))))
    return rc;
  if (count == 0)
    return FT_OK;
  if (!send || !recv)
    return ft_err_set(FT_EINVAL, "comm_allgather: NULL buffer");
  ft_phase before = progress_coll_begin();
  rc = after(c, "allgather", c->ops->allgather(c->impl, send, recv, count));
  progress_coll_end(before);
  return rc;
}

int comm_reduce_scatter(comm *c, const float *send, float *recv, size_t count) {
  int rc = check_healthy(c, "reduce_scatter");
  if (rc)
    return rc;
  if ((rc = check_size(c, "reduce_scatter", count, (size_t)c->world, sizeof(float))))
    return rc;
  if (count == 0)
    return FT_OK;
  if (!send || !recv)
    return ft_err_set(FT_EINVAL, "comm_reduce_scatter: NULL buffer");
  ft_phase before = progress_coll_begin();
  rc = after(c, "reduce_scatter", c->ops->reduce_scatter(c->impl, send, recv, count));
  progress_coll_end(before);
  return rc;
}

int comm_allreduce(comm *c, float *buf, size_t n) {
  int rc = check_healthy(c, "allreduce");
  if (rc)
    return rc;
  if ((rc = check_size(c, "allreduce", n, 1, sizeof(float))))
    return rc;
  if (n == 0)
    return FT_OK;
  if (!buf)
    return ft_err_set(FT_EINVAL, "comm_allreduce: NULL buffer");
  ft_phase before = progress_coll_begin();
  rc = after(c, "allreduce", c->ops->allreduce_f32(c->impl, buf, n));
  progress_coll_end(before);
  return rc;
}

int comm_allreduce_f64(comm *c, double *buf, size_t n) {
  int rc = check_healthy(c, "allreduce_f64");
  if (rc)
    return rc;
  if ((rc = check_size(c, "allreduce_f64", n, 1, sizeof(double))))
    return rc;
  if (n == 0)
    return FT_OK;
  if (!buf)
    return ft_err_set(FT_EINVAL, "comm_allreduce_f64: NULL buffer");
  ft_phase before = progress_coll_begin();
  rc = after(c, "allreduce_f64", c->ops->allreduce_f64(c->impl, buf, n));
  progress_coll_end(before);
  return rc;
}

int comm_broadcast(comm *c, void *buf, size_t bytes, int root) {
  int rc = check_healthy(c, "broadcast");
  if (rc)
    return rc;
  if (root < 0 || root >= c->world)
    return ft_err_set(FT_EINVAL, "comm_broadcast: root %d not in [0, %d)", root, c->world);
  if (bytes == 0)
    return FT_OK;
  if (!buf)
    return ft_err_set(FT_EINVAL, "comm_broadcast: NULL buffer");
  ft_phase before = progress_coll_begin();
  rc = after(c, "broadcast", c->ops->broadcast(c->impl, buf, bytes, root));
  progress_coll_end(before);
  return rc;
}

int comm_shift(comm *c, const void *send, void *recv, size_t bytes, int dist, double *recv_s) {
  double ignored;
  if (!recv_s)
    recv_s = &ignored;
  *recv_s = 0;
  int rc = check_healthy(c, "shift");
  if (rc)
    return rc;
  if (!c->ops->shift)
    return ft_err_set(FT_ESTATE, "comm_shift: the %s backend has no point-to-point shift",
                      c->ops->name);
  if (dist < 1 || dist >= c->world)
    return ft_err_set(FT_EINVAL, "comm_shift: distance %d not in [1, %d)", dist, c->world);
  if (bytes == 0)
    return FT_OK;
  if (!send || !recv)
    return ft_err_set(FT_EINVAL, "comm_shift: NULL buffer");
  ft_phase before = progress_coll_begin();
  rc = after(c, "shift", c->ops->shift(c->impl, send, recv, bytes, dist, recv_s));
  progress_coll_end(before);
  return rc;
}

int comm_barrier(comm *c) {
  int rc = check_healthy(c, "barrier");
  if (rc)
    return rc;
  ft_phase before = progress_coll_begin();
  rc = after(c, "barrier", c->ops->barrier(c->impl));
  progress_coll_end(before);
  return rc;
}

/* ---- device collectives (NCCL) ------------------------------------------ */

int comm_is_device(const comm *c) {
  return c && c->dev ? 1 : 0;
}

/* Healthy and with device collectives. */
static int check_dev(comm *c, const char *op) {
  int rc = check_healthy(c, op);
  if (rc)
    return rc;
  if (!c->dev)
    return ft_err_set(FT_EINVAL, "comm_%s: the %s comm has no device collectives", op,
                      c->ops->name);
  return FT_OK;
}

int comm_dev_allgather_bf16(comm *c, const void *send, void *recv, size_t count, void *stream) {
  int rc = check_dev(c, "dev_allgather_bf16");
  if (rc)
    return rc;
  if ((rc = check_size(c, "dev_allgather_bf16", count, (size_t)c->world, 2)))
    return rc;
  if (count == 0)
    return FT_OK;
  if (!send || !recv)
    return ft_err_set(FT_EINVAL, "comm_dev_allgather_bf16: NULL buffer");
  progress_coll_count();
  return after(c, "dev_allgather_bf16", c->dev->allgather_bf16(c->impl, send, recv, count, stream));
}

int comm_dev_reduce_scatter_f32(comm *c, const float *send, float *recv, size_t count,
                                void *stream) {
  int rc = check_dev(c, "dev_reduce_scatter_f32");
  if (rc)
    return rc;
  if ((rc = check_size(c, "dev_reduce_scatter_f32", count, (size_t)c->world, sizeof(float))))
    return rc;
  if (count == 0)
    return FT_OK;
  if (!send || !recv)
    return ft_err_set(FT_EINVAL, "comm_dev_reduce_scatter_f32: NULL buffer");
  progress_coll_count();
  return after(c, "dev_reduce_scatter_f32",
               c->dev->reduce_scatter_f32(c->impl, send, recv, count, stream));
}

int comm_dev_allreduce_f32(comm *c, float *buf, size_t n, void *stream) {
  int rc = check_dev(c, "dev_allreduce_f32");
  if (rc)
    return rc;
  if ((rc = check_size(c, "dev_allreduce_f32", n, 1, sizeof(float))))
    return rc;
  if (n == 0)
    return FT_OK;
  if (!buf)
    return ft_err_set(FT_EINVAL, "comm_dev_allreduce_f32: NULL buffer");
  progress_coll_count();
  return after(c, "dev_allreduce_f32", c->dev->allreduce_f32(c->impl, buf, n, stream));
}

int comm_dev_allreduce_f64(comm *c, double *buf, size_t n, void *stream) {
  int rc = check_dev(c, "dev_allreduce_f64");
  if (rc)
    return rc;
  if ((rc = check_size(c, "dev_allreduce_f64", n, 1, sizeof(double))))
    return rc;
  if (n == 0)
    return FT_OK;
  if (!buf)
    return ft_err_set(FT_EINVAL, "comm_dev_allreduce_f64: NULL buffer");
  progress_coll_count();
  return after(c, "dev_allreduce_f64", c->dev->allreduce_f64(c->impl, buf, n, stream));
}

/* FT_OK, or FT_ECOMM (sticky failure, abort, or a new asynchronous error,
 * which then breaks the comm). */
int comm_dev_poll(comm *c) {
  int rc = check_dev(c, "dev_poll");
  if (rc)
    return rc;
  return after(c, "dev_poll", c->dev->poll(c->impl));
}

/* timeout_ms <= 0 means the comm's own timeout_ms. A NULL stream is the
 * CUDA default stream. */
int comm_dev_wait(comm *c, void *stream, int timeout_ms) {
  int rc = check_dev(c, "dev_wait");
  if (rc)
    return rc;
  ft_phase before = progress_coll_wait_begin();
  rc = after(c, "dev_wait", c->dev->wait(c->impl, stream, timeout_ms));
  progress_coll_end(before);
  return rc;
}

/* Any thread, concurrently with one other call on c (never with comm_free).
 * Only the first call reaches the backend. */
void comm_abort(comm *c) {
  if (!c)
    return;
  if (__atomic_exchange_n(&c->aborted, 1, __ATOMIC_ACQ_REL))
    return;
  c->ops->abort(c->impl);
}

#ifndef FT_HAVE_NCCL
int comm_nccl_new(const comm_opts *o, const comm_kv *kv, int device, comm **out) {
  if (out)
    *out = NULL;
  return ft_err_set(FT_ECONFIG, "this build has no NCCL (built without CUDA)");
}
#endif
