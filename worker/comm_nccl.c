/*
 * comm_nccl: the GPU backend of comm.h, NCCL on one CUDA device per rank.
 *
 * What: comm_nccl_new() rendezvouses through the caller's comm_kv (rank 0
 * makes the ncclUniqueId and sets prefix+"nccl_id"; the others wait for it)
 * and creates a NON-BLOCKING communicator (ncclConfig_t.blocking = 0). Two
 * kinds of collective sit on it:
 *   device  comm_dev_*: ncclAllGather (bf16), ncclReduceScatter and
 *           ncclAllReduce (sum, fp32/fp64) enqueued on the caller's stream;
 *           they return once NCCL has accepted the work, not when it is done.
 *   host    comm_allgather & co.: copy the host buffer into a device staging
 *           buffer on a private stream, run the NCCL collective in place
 *           there, wait (polling, below), copy back. Meant for small things
 *           (losses, norms, flags), not for bulk data.
 *
 * Why non-blocking and polled: a blocking NCCL call, or cudaStreamSynchronize
 * behind a NCCL kernel, waits forever for a peer that hangs. Here no call
 * blocks on a peer: every NCCL call returns at once (ncclSuccess, an error,
 * or ncclInProgress, after which ncclCommGetAsyncError is polled until the
 * state leaves ncclInProgress), and every wait for a stream is a loop of
 * cudaStreamQuery + ncclCommGetAsyncError with short sleeps against a
 * deadline:
 *   init       connect_timeout_ms (0: max(timeout_ms, 60000)) for the key
 *              wait plus the NCCL init; on timeout ncclCommAbort, FT_ETIMEDOUT.
 *   enqueue    timeout_ms for an ncclInProgress to settle.
 *   host coll  timeout_ms for the private stream to drain.
 *   dev_wait   its own timeout_ms argument (<= 0: the comm's timeout_ms).
 *   finalize   timeout_ms (comm_free); on timeout abort instead of destroy.
 * A failure or timeout goes back to comm.c, which marks the comm broken and
 * calls nccl_abort (ncclCommAbort), so the peers' NCCL kernels fail too.
 *
 * Threading and abort: the owner thread makes every call but comm_abort,
 * which may come from a watchdog thread at any time. ncclCommAbort frees the
 * communicator, so it must never run while the owner is inside a NCCL call
 * on it. Invariants:
 *   - n->lock is held around every NCCL call on n->nc (each returns at once,
 *     the comm being non-blocking) and never across a sleep or CUDA wait;
 *   - n->nc is NULL once the communicator is aborted or destroyed, and only
 *     changes under n->lock;
 *   - n->abort_req (atomic) is set by nccl_abort before it tries the lock;
 *     whoever holds the lock next (nccl_abort itself, or the owner in
 *     nc_lock/nc_unlock) performs the abort. nccl_abort waits for the lock
 *     at most ABORT_LOCK_MS: if the owner is stuck inside a NCCL call (a
 *     kernel launch behind a full launch queue, say), the abort happens
 *     when that call returns.
 * Entry points of the owner thread make the comm's device current on that
 * thread (a worker process uses one device, so this is a no-op after init).
 *
 * Errors: every cudaError_t goes through cuda_err() (allocation failure ->
 * FT_ENOMEM, the rest FT_ECUDA) and every ncclResult_t through nccl_err()
 * (synchronous: ncclUnhandledCudaError -> FT_ECUDA, ncclInvalidArgument and
 * ncclInvalidUsage -> FT_ECONFIG, the rest FT_ECOMM; asynchronous errors,
 * those reported by ncclCommGetAsyncError, are FT_ECOMM as comm.h promises).
 * Timeouts are FT_ETIMEDOUT; the store's own errors pass through.
 *
 * opts->bind_addr is not used: NCCL picks its interfaces itself
 * (NCCL_SOCKET_IFNAME and friends).
 */
#include "comm_int.h"

#include "ft_clock.h"
#include "ft_err.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
  ABORT_LOCK_MS = 5000,   /* longest nccl_abort waits for the owner's NCCL call */
  STAGE_MIN = 1 << 20,    /* first staging buffer, bytes */
  CONNECT_MIN_MS = 60000, /* connect_timeout_ms 0: max(timeout_ms, this) */
};

typedef struct nccl_comm {
  pthread_mutex_t lock; /* held around every NCCL call on nc */
  ncclComm_t nc;        /* NULL once aborted or destroyed */
  int abort_req;        /* atomic: an abort was asked for */
  int rank, world, device;
  int timeout_ms;
  cudaStream_t stream; /* private, non-blocking: host collectives only */
  void *stage;         /* device staging buffer of stage_cap bytes, on stream */
  size_t stage_cap;
} nccl_comm;

typedef enum { K_ALLGATHER, K_REDUCE_SCATTER, K_ALLREDUCE, K_BROADCAST } coll_kind;

/* The i-th sleep of a polling loop: 50 us for the first ms, then 1 ms. */
static void nap(int i) {
  struct timespec ts = {0, i < 20 ? 50 * 1000 : 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* ---- the two error translations ----------------------------------------- */

/* The one place a cudaError_t becomes an FT_E* code. Clears the runtime's
 * last error (if it is not sticky) so that it does not surface later in an
 * unrelated cudaGetLastError. */
static int cuda_err(const char *op, cudaError_t e) {
  if (e == cudaSuccess)
    return FT_OK;
  (void)cudaGetLastError();
  return ft_err_set(e == cudaErrorMemoryAllocation ? FT_ENOMEM : FT_ECUDA, "nccl %s: CUDA %s: %s",
                    op, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* The one place an ncclResult_t becomes an FT_E* code. async: r is a state
 * from ncclCommGetAsyncError (ncclInProgress must be handled by the caller). */
static int nccl_err(const char *op, ncclResult_t r, int async) {
  int code;
  switch (r) {
  case ncclSuccess:
    return FT_OK;
  case ncclUnhandledCudaError:
    code = async ? FT_ECOMM : FT_ECUDA;
    break;
  case ncclInvalidArgument:
  case ncclInvalidUsage:
    code = async ? FT_ECOMM : FT_ECONFIG;
    break;
  default: /* ncclSystemError, ncclInternalError, ncclRemoteError, ... */
    code = FT_ECOMM;
    break;
  }
  const char *last = ncclGetLastError(NULL);
  return ft_err_set(code, "nccl %s: %s%s%s%s", op, async ? "asynchronous error: " : "",
                    ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

/* ---- the communicator lock and abort ------------------------------------ */

/* With n->lock held: aborts and forgets the communicator, if any. */
static void abort_locked(nccl_comm *n) {
  ncclComm_t nc = n->nc;
  n->nc = NULL;
  if (nc)
    (void)ncclCommAbort(nc); /* nothing to do about a failure; the handle is gone either way */
}

/* Takes n->lock for one NCCL call: FT_OK with the lock held, or FT_ECOMM
 * (lock released) when the communicator is gone. Performs a pending abort. */
static int nc_lock(nccl_comm *n, const char *op) {
  pthread_mutex_lock(&n->lock);
  if (__atomic_load_n(&n->abort_req, __ATOMIC_ACQUIRE))
    abort_locked(n);
  if (!n->nc) {
    pthread_mutex_unlock(&n->lock);
    return ft_err_set(FT_ECOMM, "nccl %s: the communicator was aborted", op);
  }
  return FT_OK;
}

static void nc_unlock(nccl_comm *n) {
  if (__atomic_load_n(&n->abort_req, __ATOMIC_ACQUIRE))
    abort_locked(n);
  pthread_mutex_unlock(&n->lock);
}

/* Any thread; idempotent. */
static void nccl_abort(void *impl) {
  nccl_comm *n = impl;
  __atomic_store_n(&n->abort_req, 1, __ATOMIC_RELEASE);
  long long deadline = ft_now_ms() + ABORT_LOCK_MS;
  for (int i = 0;; i++) {
    if (pthread_mutex_trylock(&n->lock) == 0) {
      abort_locked(n);
      pthread_mutex_unlock(&n->lock);
      return;
    }
    if (ft_now_ms() >= deadline)
      return; /* the owner aborts in nc_unlock when its call returns */
    nap(i);
  }
}

/* ---- polling ------------------------------------------------------------ */

/* *st = the communicator's state (ncclSuccess, ncclInProgress or an
 * asynchronous error). */
static int get_state(nccl_comm *n, const char *op, ncclResult_t *st) {
  int rc = nc_lock(n, op);
  if (rc)
    return rc;
  *st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(n->nc, st);
  nc_unlock(n);
  return nccl_err(op, r, 0);
}

/* Polls until the state leaves ncclInProgress (an init, enqueue or finalize
 * finishing in the background): FT_OK, the asynchronous error, or
 * FT_ETIMEDOUT at deadline (what says what was awaited). */
static int settle(nccl_comm *n, const char *op, long long deadline, int limit_ms,
                  const char *what) {
  for (int i = 0;; i++) {
    ncclResult_t st;
    int rc = get_state(n, op, &st);
    if (rc)
      return rc;
    if (st != ncclInProgress)
      return nccl_err(op, st, 1);
    if (ft_now_ms() >= deadline)
      return ft_err_set(FT_ETIMEDOUT, "nccl %s: %s after %d ms", op, what, limit_ms);
    nap(i);
  }
}

/* Waits until all work on stream s is done, polling the communicator for
 * asynchronous errors: FT_OK, FT_ECOMM, FT_ECUDA or FT_ETIMEDOUT. */
static int wait_stream(nccl_comm *n, const char *op, cudaStream_t s, int timeout_ms) {
  long long deadline = ft_now_ms() + timeout_ms;
  for (int i = 0;; i++) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaErrorNotReady)
      (void)cudaGetLastError(); /* not an error: keep it out of the last-error slot */
    else if (q != cudaSuccess)
      return cuda_err(op, q);
    ncclResult_t st;
    int rc = get_state(n, op, &st);
    if (rc)
      return rc;
    if (st != ncclSuccess && st != ncclInProgress)
      return nccl_err(op, st, 1);
    if (q == cudaSuccess)
      return FT_OK;
    if (ft_now_ms() >= deadline)
      return ft_err_set(FT_ETIMEDOUT, "nccl %s: stream not done after %d ms (a peer hangs?)", op,
                        timeout_ms);
    nap(i);
  }
}

/* ---- enqueueing --------------------------------------------------------- */

/* Makes the comm's device current on the calling thread. */
static int use_device(nccl_comm *n, const char *op) {
  int cur = -1;
  int rc = cuda_err(op, cudaGetDevice(&cur));
  if (rc == FT_OK && cur != n->device)
    rc = cuda_err(op, cudaSetDevice(n->device));
  return rc;
}

/* Enqueues one collective on s and returns once NCCL has taken it (settling
 * an ncclInProgress). Refuses with FT_ECOMM if the communicator already
 * reported an asynchronous error. */
static int enqueue(nccl_comm *n, const char *op, coll_kind k, const void *send, void *recv,
                   size_t count, ncclDataType_t t, int root, cudaStream_t s) {
  ncclResult_t st, r = ncclSuccess;
  int rc = use_device(n, op);
  if (rc)
    return rc;
  if ((rc = get_state(n, op, &st)))
    return rc;
  if (st == ncclInProgress && (rc = settle(n, op, ft_now_ms() + n->timeout_ms, n->timeout_ms,
                                           "earlier call still in progress")))
    return rc;
  if (st != ncclSuccess && st != ncclInProgress)
    return nccl_err(op, st, 1);
  if ((rc = nc_lock(n, op)))
    return rc;
  switch (k) {
  case K_ALLGATHER:
    r = ncclAllGather(send, recv, count, t, n->nc, s);
    break;
  case K_REDUCE_SCATTER:
    r = ncclReduceScatter(send, recv, count, t, ncclSum, n->nc, s);
    break;
  case K_ALLREDUCE:
    r = ncclAllReduce(send, recv, count, t, ncclSum, n->nc, s);
    break;
  case K_BROADCAST:
    r = ncclBroadcast(send, recv, count, t, root, n->nc, s);
    break;
  }
  nc_unlock(n);
  if (r == ncclInProgress)
    return settle(n, op, ft_now_ms() + n->timeout_ms, n->timeout_ms, "enqueue still in progress");
  return nccl_err(op, r, 0);
}

/* ---- device collectives ------------------------------------------------- */

static int nccl_dev_allgather_bf16(void *impl, const void *send, void *recv, size_t count,
                                   void *stream) {
  return enqueue(impl, "dev_allgather_bf16", K_ALLGATHER, send, recv, count, ncclBfloat16, 0,
                 (cudaStream_t)stream);
}

static int nccl_dev_reduce_scatter_f32(void *impl, const float *send, float *recv, size_t count,
                                       void *stream) {
  return enqueue(impl, "dev_reduce_scatter_f32", K_REDUCE_SCATTER, send, recv, count, ncclFloat32,
                 0, (cudaStream_t)stream);
}

static int nccl_dev_allreduce_f32(void *impl, float *buf, size_t n, void *stream) {
  return enqueue(impl, "dev_allreduce_f32", K_ALLREDUCE, buf, buf, n, ncclFloat32, 0,
                 (cudaStream_t)stream);
}

static int nccl_dev_allreduce_f64(void *impl, double *buf, size_t n, void *stream) {
  return enqueue(impl, "dev_allreduce_f64", K_ALLREDUCE, buf, buf, n, ncclFloat64, 0,
                 (cudaStream_t)stream);
}

static int nccl_dev_poll(void *impl) {
  ncclResult_t st;
  int rc = get_state(impl, "dev_poll", &st);
  if (rc || st == ncclInProgress)
    return rc;
  return nccl_err("dev_poll", st, 1);
}

static int nccl_dev_wait(void *impl, void *stream, int timeout_ms) {
  nccl_comm *n = impl;
  return wait_stream(n, "dev_wait", (cudaStream_t)stream,
                     timeout_ms > 0 ? timeout_ms : n->timeout_ms);
}

/* ---- host collectives, staged through device memory --------------------- */

/* Makes the staging buffer at least bytes long. Stream-ordered allocation on
 * the private stream: cudaFree would synchronize the whole device, i.e.
 * wait (without a timeout) for NCCL kernels on the caller's streams. */
static int stage_reserve(nccl_comm *n, const char *op, size_t bytes) {
  if (bytes <= n->stage_cap)
    return FT_OK;
  size_t cap = n->stage_cap ? n->stage_cap : STAGE_MIN;
  while (cap < bytes)
    cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
  if (n->stage) {
    void *old = n->stage;
    n->stage = NULL;
    n->stage_cap = 0;
    int rc = cuda_err(op, cudaFreeAsync(old, n->stream));
    if (rc)
      return rc;
  }
  void *p = NULL;
  int rc = cuda_err(op, cudaMallocAsync(&p, cap, n->stream));
  if (rc)
    return rc;
  n->stage = p;
  n->stage_cap = cap;
  return FT_OK;
}

/* Copies host[bytes] to the staging buffer at offset off (the private
 * stream is idle here, so a pageable copy does not wait on anything). */
static int stage_in(nccl_comm *n, const char *op, size_t off, const void *host, size_t bytes) {
  return cuda_err(
      op, cudaMemcpyAsync((char *)n->stage + off, host, bytes, cudaMemcpyHostToDevice, n->stream));
}

/* Waits for the collective, then copies staging[off, off+bytes) to host. The
 * copy comes only after the polled wait: a device-to-pageable copy blocks
 * the host until it is done, i.e. until the collective before it is. */
static int stage_out(nccl_comm *n, const char *op, void *host, size_t off, size_t bytes) {
  int rc = wait_stream(n, op, n->stream, n->timeout_ms);
  if (rc || !bytes)
    return rc;
  if ((rc = cuda_err(op, cudaMemcpyAsync(host, (char *)n->stage + off, bytes,
                                         cudaMemcpyDeviceToHost, n->stream))))
    return rc;
  return wait_stream(n, op, n->stream, n->timeout_ms);
}

static int nccl_allgather(void *impl, const float *send, float *recv, size_t count) {
  nccl_comm *n = impl;
  const char *op = "allgather";
  size_t bytes = count * sizeof(float), mine = (size_t)n->rank * bytes;
  int rc = use_device(n, op);
  if (!rc)
    rc = stage_reserve(n, op, bytes * (size_t)n->world);
  if (!rc)
    rc = stage_in(n, op, mine, send, bytes);
  if (!rc) /* in place: sendbuff == recvbuff + rank * count */
    rc = enqueue(n, op, K_ALLGATHER, (char *)n->stage + mine, n->stage, count, ncclFloat32, 0,
                 n->stream);
  if (!rc)
    rc = stage_out(n, op, recv, 0, bytes * (size_t)n->world);
  return rc;
}

static int nccl_reduce_scatter(void *impl, const float *send, float *recv, size_t count) {
  nccl_comm *n = impl;
  const char *op = "reduce_scatter";
  size_t bytes = count * sizeof(float), mine = (size_t)n->rank * bytes;
  int rc = use_device(n, op);
  if (!rc)
    rc = stage_reserve(n, op, bytes * (size_t)n->world);
  if (!rc)
    rc = stage_in(n, op, 0, send, bytes * (size_t)n->world);
  if (!rc) /* in place: recvbuff == sendbuff + rank * count */
    rc = enqueue(n, op, K_REDUCE_SCATTER, n->stage, (char *)n->stage + mine, count, ncclFloat32, 0,
                 n->stream);
  if (!rc)
    rc = stage_out(n, op, recv, mine, bytes);
  return rc;
}

static int allreduce_host(nccl_comm *n, const char *op, void *buf, size_t count, ncclDataType_t t,
                          size_t elem) {
  size_t bytes = count * elem;
  int rc = use_device(n, op);
  if (!rc)
    rc = stage_reserve(n, op, bytes);
  if (!rc)
    rc = stage_in(n, op, 0, buf, bytes);
  if (!rc)
    rc = enqueue(n, op, K_ALLREDUCE, n->stage, n->stage, count, t, 0, n->stream);
  if (!rc)
    rc = stage_out(n, op, buf, 0, bytes);
  return rc;
}

static int nccl_allreduce_f32(void *impl, float *buf, size_t n) {
  return allreduce_host(impl, "allreduce", buf, n, ncclFloat32, sizeof(float));
}

static int nccl_allreduce_f64(void *impl, double *buf, size_t n) {
  return allreduce_host(impl, "allreduce_f64", buf, n, ncclFloat64, sizeof(double));
}

static int nccl_broadcast(void *impl, void *buf, size_t bytes, int root) {
  nccl_comm *n = impl;
  const char *op = "broadcast";
  int rc = use_device(n, op);
  if (!rc)
    rc = stage_reserve(n, op, bytes);
  if (!rc && n->rank == root)
    rc = stage_in(n, op, 0, buf, bytes);
  if (!rc)
    rc = enqueue(n, op, K_BROADCAST, n->stage, n->stage, bytes, ncclUint8, root, n->stream);
  if (!rc)
    rc = stage_out(n, op, buf, 0, n->rank == root ? 0 : bytes);
  return rc;
}

/* NCCL has no barrier: a one-element all-reduce completes on a rank only
 * once every rank has contributed. */
static int nccl_barrier(void *impl) {
  nccl_comm *n = impl;
  const char *op = "barrier";
  int rc = use_device(n, op);
  if (!rc)
    rc = stage_reserve(n, op, sizeof(float));
  if (!rc)
    rc = cuda_err(op, cudaMemsetAsync(n->stage, 0, sizeof(float), n->stream));
  if (!rc)
    rc = enqueue(n, op, K_ALLREDUCE, n->stage, n->stage, 1, ncclFloat32, 0, n->stream);
  if (!rc)
    rc = stage_out(n, op, NULL, 0, 0);
  return rc;
}

/* ---- lifetime ----------------------------------------------------------- */

/* Frees everything but the communicator, which must be gone already. */
static void free_rest(nccl_comm *n) {
  if (n->stage)
    (void)cudaFreeAsync(n->stage, n->stream);
  if (n->stream) /* returns at once; released when the stream drains */
    (void)cudaStreamDestroy(n->stream);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&n->lock);
  free(n);
}

/* A healthy communicator is finalized (polled against timeout_ms) and
 * destroyed; a failed one, or one whose finalize fails or times out, is
 * aborted. Keeps the thread's error detail. */
static void nccl_destroy(void *impl) {
  nccl_comm *n = impl;
  char keep[1024]; /* ft_err detail size */
  snprintf(keep, sizeof keep, "%s", ft_err_detail());
  int rc = use_device(n, "free");
  if (!rc && (rc = nc_lock(n, "finalize")) == FT_OK) {
    ncclResult_t r = ncclCommFinalize(n->nc);
    nc_unlock(n);
    if (r == ncclInProgress)
      rc = settle(n, "finalize", ft_now_ms() + n->timeout_ms, n->timeout_ms, "not quiescent");
    else
      rc = nccl_err("finalize", r, 0);
  }
  pthread_mutex_lock(&n->lock);
  if (n->nc && rc == FT_OK) {
    (void)ncclCommDestroy(n->nc);
    n->nc = NULL;
  }
  abort_locked(n); /* no-op unless finalize failed */
  pthread_mutex_unlock(&n->lock);
  free_rest(n);
  ft_err_set(FT_OK, "%s", keep);
}

static const struct comm_ops nccl_ops = {
    .name = "nccl",
    .destroy = nccl_destroy,
    .abort = nccl_abort,
    .allgather = nccl_allgather,
    .reduce_scatter = nccl_reduce_scatter,
    .allreduce_f32 = nccl_allreduce_f32,
    .allreduce_f64 = nccl_allreduce_f64,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
};

static const struct comm_dev_ops nccl_dev_ops = {
    .allgather_bf16 = nccl_dev_allgather_bf16,
    .reduce_scatter_f32 = nccl_dev_reduce_scatter_f32,
    .allreduce_f32 = nccl_dev_allreduce_f32,
    .allreduce_f64 = nccl_dev_allreduce_f64,
    .poll = nccl_dev_poll,
    .wait = nccl_dev_wait,
};

/* Gets the ncclUniqueId: rank 0 makes and publishes it, the others wait for
 * it (at most wait_ms) and read it. */
static int rendezvous(const comm_opts *o, const comm_kv *kv, int wait_ms, ncclUniqueId *id) {
  const char *prefix = o->prefix ? o->prefix : "";
  size_t klen = strlen(prefix) + sizeof "nccl_id";
  char *key = malloc(klen);
  void *val = NULL;
  size_t len = 0;
  int rc;
  if (!key)
    return ft_err_set(FT_ENOMEM, "comm_nccl_new: out of memory");
  snprintf(key, klen, "%snccl_id", prefix);
  memset(id, 0, sizeof *id);
  if (o->rank == 0) {
    if ((rc = nccl_err("get unique id", ncclGetUniqueId(id), 0)))
      goto out;
    rc = kv->set(kv->ud, key, id, sizeof *id);
    goto out;
  }
  const char *keys[1] = {key};
  if ((rc = kv->wait(kv->ud, keys, 1, wait_ms)))
    goto out;
  if ((rc = kv->get(kv->ud, key, &val, &len)))
    goto out;
  if (len != sizeof *id) {
    rc =
        ft_err_set(FT_ECOMM, "comm_nccl_new: key '%s' holds %zu bytes, not a %zu-byte ncclUniqueId",
                   key, len, sizeof *id);
    goto out;
  }
  memcpy(id, val, sizeof *id);
out:
  free(val);
  free(key);
  return rc;
}

int comm_nccl_new(const comm_opts *o, const comm_kv *kv, int device, comm **out) {
  if (!out)
    return ft_err_set(FT_EINVAL, "comm_nccl_new: NULL out");
  *out = NULL;
  if (!o || !kv || !kv->set || !kv->wait || !kv->get)
    return ft_err_set(FT_EINVAL, "comm_nccl_new: NULL options or store");
  if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
    return ft_err_set(FT_EINVAL, "comm_nccl_new: rank %d not in [0, world=%d)", o->rank, o->world);
  if (o->timeout_ms <= 0 || o->connect_timeout_ms < 0)
    return ft_err_set(FT_EINVAL, "comm_nccl_new: timeout_ms %d / connect_timeout_ms %d",
                      o->timeout_ms, o->connect_timeout_ms);
  if (device < 0)
    return ft_err_set(FT_EINVAL, "comm_nccl_new: device %d", device);
  int connect_ms = o->connect_timeout_ms            ? o->connect_timeout_ms
                   : o->timeout_ms > CONNECT_MIN_MS ? o->timeout_ms
                                                    : CONNECT_MIN_MS;
  long long deadline = ft_now_ms() + connect_ms;

  nccl_comm *n = calloc(1, sizeof *n);
  if (!n)
    return ft_err_set(FT_ENOMEM, "comm_nccl_new: out of memory");
  pthread_mutex_init(&n->lock, NULL);
  n->rank = o->rank;
  n->world = o->world;
  n->device = device;
  n->timeout_ms = o->timeout_ms;

  ncclUniqueId id;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclComm_t nc = NULL;
  int rc = cuda_err("init", cudaSetDevice(device));
  if (!rc)
    rc = cuda_err("init", cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
  if (!rc) { /* one budget for the whole setup: what CUDA left of it */
    long long left = deadline - ft_now_ms();
    rc = rendezvous(o, kv, left > 1 ? (int)left : 1, &id);
  }
  if (rc)
    goto out;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&nc, o->world, id, o->rank, &cfg);
  n->nc = nc;
  if (r != ncclSuccess && r != ncclInProgress) {
    rc = nccl_err("init", r, 0);
    goto out;
  }
  if (!n->nc) {
    rc = ft_err_set(FT_ECOMM, "nccl init: no communicator returned");
    goto out;
  }
  /* Each rank's init finishes only once all `world` ranks have joined. */
  if ((rc = settle(n, "init", deadline, connect_ms, "not all ranks joined")))
    goto out;
  rc = comm__wrap_dev(&nccl_ops, &nccl_dev_ops, n, o->rank, o->world, out);
out:
  if (rc) {
    char keep[1024]; /* ft_err detail size */
    snprintf(keep, sizeof keep, "%s", ft_err_detail());
    pthread_mutex_lock(&n->lock);
    abort_locked(n);
    pthread_mutex_unlock(&n->lock);
    free_rest(n);
    ft_err_set(rc, "%s", keep);
  }
  return rc;
}
