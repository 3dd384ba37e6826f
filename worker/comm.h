/*
 * comm: collectives between the ranks of one training generation, behind a
 * backend-neutral C interface.
 *
 * What: all-gather, reduce-scatter, all-reduce (fp32 and fp64 sums),
 * broadcast and barrier on host buffers, as FSDP needs them (docs/design.md §4): each
 * transformer block is one flat fp32 buffer, padded to a multiple of the
 * world size and split evenly, so rank r owns elements [r*count, (r+1)*count).
 *
 * Why this shape: the trainer must not know which backend it runs on. The
 * CPU backend is Gloo over TCP (comm_gloo.cpp); a NCCL backend can slot in
 * behind the same functions (struct comm carries a table of operations,
 * comm_int.h). No C++ type or exception ever crosses this header.
 *
 * Rendezvous: the caller provides the key/value store (comm_kv) in C. In
 * production the supervisor serves it over its control channel; tests and
 * standalone runs use a directory (comm_filestore.h). Keys are prefixed with
 * opts->prefix so two generations never read each other's addresses.
 *
 * Determinism: for a fixed world size and fixed counts, the same inputs give
 * the same result bits on every run and on every rank (each sum is formed in
 * a fixed ring order, then copied, never recomputed per rank).
 *
 * Failure model: every collective either completes on all ranks or fails.
 * A peer that dies makes the survivors' current (or next) collective fail
 * with FT_ECOMM at once (a closed socket) or FT_ETIMEDOUT after
 * opts->timeout_ms. The first failure breaks the comm for good: the backend
 * closes its connections (so peers waiting on us fail quickly too) and
 * every later call returns FT_ECOMM without communicating. The only way on
 * is comm_free and a new comm (a new generation, in the supervisor's terms).
 * The detail text of every error is in ft_err_detail().
 *
 * Threading: a comm is used by one thread at a time; collectives are
 * blocking. Every rank must call the same collectives, with the same counts,
 * in the same order.
 */
#ifndef FT_COMM_H
#define FT_COMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct comm comm;

/* The rendezvous key/value store, provided by the caller in C. Each function
 * returns FT_OK or a negative FT_E* (with ft_err_set detail). Keys are
 * NUL-terminated strings of any bytes but NUL; values are opaque bytes. A key
 * is set once and never changes. */
typedef struct comm_kv {
  void *ud;
  int (*set)(void *ud, const char *key, const void *val, size_t len);
  /* Blocks until every key is present, or timeout_ms passes (FT_ETIMEDOUT).
   * timeout_ms < 0 waits without limit. */
  int (*wait)(void *ud, const char *const *keys, int nkeys, int timeout_ms);
  /* Gets a present key's value: *val is malloc'd (caller frees; may be
   * NULL when *len is 0). FT_ENOENT if the key is absent. */
  int (*get)(void *ud, const char *key, void **val, size_t *len);
} comm_kv;

typedef struct comm_opts {
  int rank, world;        /* 0 <= rank < world */
  const char *bind_addr;  /* an address of this host, e.g. "10.0.0.2" (train.c
                             picks it: FT_IFACE, nodes.iface, the route to the
                             supervisor); the listening port is chosen by
                             the kernel */
  const char *prefix;     /* key prefix, e.g. "gen3/"; NULL means "" */
  int timeout_ms;         /* per collective (> 0): one older than this fails
                             with FT_ETIMEDOUT */
  int connect_timeout_ms; /* rendezvous and connection setup; 0 means
                             max(timeout_ms, 60000) */
} comm_opts;

/* Creates a Gloo (TCP) comm: publishes this rank's address in kv, waits for
 * every other rank's, connects the full mesh. Blocks until all `world` ranks
 * have called it or connect_timeout_ms passes (FT_ETIMEDOUT). kv and the
 * strings in o are borrowed for the duration of the call only.
 * Errors: FT_EINVAL (bad options), FT_ENOMEM, FT_ETIMEDOUT, FT_ECOMM, or the
 * store's own error. On failure *out is NULL.
 * Side effect: sets SIGPIPE to SIG_IGN for the process if it is SIG_DFL
 * (Gloo's socket writes would otherwise kill the process when a peer dies). */
int comm_gloo_new(const comm_opts *o, const comm_kv *kv, comm **out);

/* Closes the connections and frees the comm. comm_free(NULL) is a no-op. */
void comm_free(comm *c);

int comm_rank(const comm *c);
int comm_world(const comm *c);
/* "gloo" (or later "nccl"). Static string. */
const char *comm_backend(const comm *c);

/* Collectives on host buffers; every rank calls them in the same order with
 * the same sizes. All return FT_OK, FT_EINVAL (NULL buffer with a non-zero
 * size, root out of range), FT_ECOMM or FT_ETIMEDOUT (detail from the
 * backend). A count of 0 is a no-op that returns FT_OK on a healthy comm.
 * Buffers are borrowed for the call; send and recv must not overlap. */

/* recv[world*count]: rank r's send[count] lands at recv + r*count. */
int comm_allgather(comm *c, const float *send, float *recv, size_t count);
/* send[world*count]; recv[count] = sum over ranks of send[rank*count .. +count]
 * for this rank. */
int comm_reduce_scatter(comm *c, const float *send, float *recv, size_t count);
/* buf[n] = sum over ranks of buf[n], in place; identical bits on all ranks. */
int comm_allreduce(comm *c, float *buf, size_t n);
/* The same in double (losses, norms). */
int comm_allreduce_f64(comm *c, double *buf, size_t n);
/* buf[bytes] on every rank = root's buf. */
int comm_broadcast(comm *c, void *buf, size_t bytes, int root);
/* Returns once every rank has entered the barrier. */
int comm_barrier(comm *c);
/* Every rank r sends bytes from send to rank (r + dist) mod W and receives
 * as many into recv from rank (r - dist) mod W (1 <= dist < W): one hop of
 * a ring, each link used once in one direction. *recv_s (may be NULL): the
 * seconds until this rank's receive completed, which times the link from
 * (r - dist) alone (its own send, on another link, may still be going; the
 * node doctor's link check). FT_ESTATE on a backend without it (NCCL). */
int comm_shift(comm *c, const void *send, void *recv, size_t bytes, int dist, double *recv_s);

/* ---- NCCL: device buffers (docs/design.md §4) ---------------------------------------
 *
 * comm_nccl_new creates a NCCL communicator on CUDA device `device`: rank 0
 * makes the unique id and publishes it in kv (under opts->prefix +
 * "nccl_id"; the supervisor relays it), the others wait for it; the
 * communicator is non-blocking (ncclConfig_t.blocking = 0), and every call
 * that could block is polled with ncclCommGetAsyncError against
 * opts->timeout_ms, so a hung peer surfaces as FT_ETIMEDOUT instead of a
 * wedged process. Built only where CUDA is (FT_ECONFIG otherwise, with a
 * message that says so).
 *
 * The comm_dev_* collectives ENQUEUE on `stream` (a kc_stream, i.e. a
 * cudaStream_t) and return; completion is observed through stream order
 * (events) or comm_dev_wait. They fail fast with FT_ECOMM when the
 * communicator already reported an asynchronous error. Host collectives
 * (comm_allreduce_f64 and the others above) work on a NCCL comm too: they
 * stage through device memory and wait.
 *
 * Watchdog hooks: comm_dev_poll reports an asynchronous NCCL error
 * (FT_ECOMM) without blocking; comm_dev_wait waits for a stream while
 * polling, and on timeout aborts the communicator (ncclCommAbort) and
 * returns FT_ETIMEDOUT; comm_abort aborts it from any thread (the only call
 * allowed concurrently with another on the same comm), after which every
 * call fails with FT_ECOMM.
 *
 * Details of the NCCL comm: opts->bind_addr is ignored (may be NULL);
 * comm_nccl_new and every call on the owner thread make `device` current;
 * comm_dev_wait with timeout_ms <= 0 uses opts->timeout_ms, and a NULL
 * stream is the default stream; device calls may also return FT_ECUDA,
 * FT_ENOMEM or FT_ECONFIG; comm_abort must not race comm_free.
 * Determinism: NCCL picks its own algorithm (ring, tree, NVLS), so its sums
 * are not Gloo's ring order; for a fixed world size, topology and NCCL
 * version they are the same run to run (set NCCL_ALGO to pin it). */
int comm_nccl_new(const comm_opts *o, const comm_kv *kv, int device, comm **out);
/* 1 if c is a device (NCCL) comm, else 0. */
int comm_is_device(const comm *c);
/* recv[world*count] (bf16 as uint16 bits) = all ranks' send[count], in rank order. */
int comm_dev_allgather_bf16(comm *c, const void *send, void *recv, size_t count, void *stream);
/* recv[count] = sum over ranks of send[rank*count .. +count], fp32. */
int comm_dev_reduce_scatter_f32(comm *c, const float *send, float *recv, size_t count,
                                void *stream);
/* In-place sums over ranks. */
int comm_dev_allreduce_f32(comm *c, float *buf, size_t n, void *stream);
int comm_dev_allreduce_f64(comm *c, double *buf, size_t n, void *stream);
int comm_dev_poll(comm *c);
int comm_dev_wait(comm *c, void *stream, int timeout_ms);
void comm_abort(comm *c);

#ifdef __cplusplus
}
#endif

#endif
