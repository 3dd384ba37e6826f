/*
 * cuemu_nccl: the NCCL calls worker/comm_nccl.c makes, for ranks that are
 * separate processes, each with its own emulated device (cuemu_rt.cpp), on
 * the CPU. A test tool, as the rest of cuemu: it checks the logic of the
 * code that drives NCCL (stream order, waits, timeouts, abort), not NCCL.
 *
 * Rendezvous: ncclGetUniqueId makes an id naming a POSIX shared-memory
 * object; every rank's ncclCommInitRankConfig maps it (creating it if it
 * comes first) and marks its rank present. A non-blocking communicator
 * stays ncclInProgress (ncclCommGetAsyncError) until every rank is present;
 * then the name is unlinked, so nothing is left in /dev/shm by a run that
 * formed, whatever happens to it later. A rank that never joins leaves the
 * others in progress until their own timeout aborts them, as with NCCL.
 *
 * The object: a header (per rank: present, the last round published, the
 * last round finished) and one slot of CUEMU_NCCL_SLOT_KB (default 1024)
 * per rank. A collective is enqueued on the caller's stream like any other
 * operation (cuemu_enqueue_coll) and runs, when it reaches the head of its
 * stream, in rounds of at most one slot per rank:
 *   publish  once every peer has finished the previous round (so it no
 *            longer reads our slot): copy this rank's part of the send
 *            buffer into its slot, then publish the round number (release);
 *   finish   once every peer has published the round: compute this rank's
 *            part of the result from the slots, in rank order 0, 1, ...
 *            (sums in that fixed order: deterministic, the same on every
 *            rank and every run), then mark the round finished. The last
 *            round finishes when the collective runs: cuemu_rt.cpp runs a
 *            ready collective only when no kernel or copy is ready on any
 *            stream (communication is slower than compute), so the result
 *            lands as late as the stream order allows.
 * Neither step blocks: the stream's head polls (cuemu_rt.cpp's runnable),
 * so the device is blocked at the collective exactly as a GPU is behind a
 * NCCL kernel whose peer has not arrived, and the host sees it only through
 * cudaStreamQuery / ncclCommGetAsyncError. The send buffer is read when the
 * collective starts and the receive buffer written when it finishes, in
 * stream order: a missing event wait between a compute stream and the
 * communication stream sends or reads data that is not there yet (NaN in
 * fresh cuemu memory), as on a GPU.
 *
 * A peer that dies mid-collective never publishes: the others stay blocked
 * until comm_nccl's timeout calls ncclCommAbort, after which that
 * communicator's queued collectives complete without doing anything (as
 * NCCL's kernels exit on abort) and the streams drain.
 *
 * Supported: sum over float, double, int32, int64, uint8 (reductions);
 * any type for all-gather and broadcast; group calls (ncclGroupStart/End:
 * each collective is queued as it is called, in the same order on every
 * rank, which is what NCCL requires).
 */
#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <mutex>

/* cuemu_rt.cpp */
void cuemu_enqueue_coll(cudaStream_t st, const char *name, std::function<bool()> poll,
                        std::function<void()> land);
void cuemu_check_dev(const void *p, size_t n, const char *what);
std::recursive_mutex &cuemu_lock(void);

namespace {

enum { MAX_RANKS = 64, MAGIC = 0x63756e63 /* "cunc" */ };

struct rank_slot {
  uint32_t present; /* the rank has joined */
  uint32_t pad;
  uint64_t published; /* last round whose data is in the slot */
  uint64_t finished;  /* last round whose result this rank has computed */
  char pad2[40];      /* one cache line each */
};

struct shm_header {
  uint32_t magic, world;
  uint64_t slot_bytes;
  rank_slot r[MAX_RANKS];
};

struct emu_comm {
  char name[sizeof(ncclUniqueId)];
  int rank = 0, world = 0;
  size_t slot_bytes = 0, map_bytes = 0;
  shm_header *h = NULL;
  unsigned char *slots = NULL;
  bool joined = false; /* every rank present (the name is unlinked then) */
  bool aborted = false;
  uint64_t round = 0; /* rounds this rank has enqueued the data for */
  ~emu_comm() {
    if (h)
      munmap(h, map_bytes);
  }
  unsigned char *slot(int r) {
    return slots + (size_t)r * slot_bytes;
  }
};

} // namespace

/* ncclComm_t is a pointer to this: the emulated communicator, shared with
 * the collectives still queued on streams (they outlive a destroy or an
 * abort, and then do nothing). */
struct ncclComm {
  std::shared_ptr<emu_comm> c;
};

static char g_last_error[256];
static int g_group_depth;

static ncclResult_t fail(ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  return r;
}

static size_t type_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

static bool summable(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclFloat64 || t == ncclInt32 || t == ncclInt64 || t == ncclUint8;
}

/* dst[i] = sum over ranks r in order of src(r)[i], i < n */
template <typename T>
static void sum_rows(void *dst, const std::function<const void *(int)> &src, int world, size_t n) {
  T *d = (T *)dst;
  for (size_t i = 0; i < n; i++) {
    T acc = ((const T *)src(0))[i];
    for (int r = 1; r < world; r++)
      acc += ((const T *)src(r))[i];
    d[i] = acc;
  }
}

static void sum_into(ncclDataType_t t, void *dst, const std::function<const void *(int)> &src,
                     int world, size_t n) {
  switch (t) {
  case ncclFloat32:
    sum_rows<float>(dst, src, world, n);
    break;
  case ncclFloat64:
    sum_rows<double>(dst, src, world, n);
    break;
  case ncclInt32:
    sum_rows<int32_t>(dst, src, world, n);
    break;
  case ncclInt64:
    sum_rows<int64_t>(dst, src, world, n);
    break;
  default:
    sum_rows<uint8_t>(dst, src, world, n);
    break;
  }
}

static uint64_t load_acq(const uint64_t *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store_rel(uint64_t *p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

namespace {

enum kind { K_ALLGATHER, K_REDUCE_SCATTER, K_ALLREDUCE, K_BROADCAST };

/* One collective in flight: its rounds, polled from its stream's head. */
struct coll {
  std::shared_ptr<emu_comm> c;
  kind k;
  const unsigned char *send;
  unsigned char *recv;
  size_t count, elem;
  ncclDataType_t type;
  int root;
  size_t chunk;         /* elements of each part per round */
  size_t nrounds, done; /* rounds in all, rounds finished */
  uint64_t first;       /* the communicator's round number of round 0 */
  bool published = false;

  /* what this rank contributes in round i, into its slot */
  void fill(size_t i) {
    size_t a = i * chunk, n = part(i);
    unsigned char *s = c->slot(c->rank);
    switch (k) {
    case K_ALLGATHER:
    case K_ALLREDUCE:
      memcpy(s, send + a * elem, n * elem);
      break;
    case K_REDUCE_SCATTER: /* every rank's part [a, a+n) of each destination q */
      for (int q = 0; q < c->world; q++)
        memcpy(s + (size_t)q * chunk * elem, send + ((size_t)q * count + a) * elem, n * elem);
      break;
    case K_BROADCAST:
      if (c->rank == root)
        memcpy(s, send + a * elem, n * elem);
      break;
    }
  }

  /* this rank's result of round i, from every rank's slot */
  void finish(size_t i) {
    size_t a = i * chunk, n = part(i);
    emu_comm *m = c.get();
    switch (k) {
    case K_ALLGATHER:
      for (int r = 0; r < m->world; r++)
        memcpy(recv + ((size_t)r * count + a) * elem, m->slot(r), n * elem);
      break;
    case K_ALLREDUCE:
      sum_into(
          type, recv + a * elem, [m](int r) { return (const void *)m->slot(r); }, m->world, n);
      break;
    case K_REDUCE_SCATTER: {
      size_t off = (size_t)m->rank * chunk * elem;
      sum_into(
          type, recv + a * elem, [m, off](int r) { return (const void *)(m->slot(r) + off); },
          m->world, n);
      break;
    }
    case K_BROADCAST:
      memcpy(recv + a * elem, m->slot(root), n * elem);
      break;
    }
  }

  size_t part(size_t i) const {
    size_t a = i * chunk;
    return count - a < chunk ? count - a : chunk;
  }

  /* As much progress as the peers allow; true once the last round can be
   * finished (land()). The rounds before it land as they complete. */
  bool poll() {
    emu_comm *m = c.get();
    for (;;) {
      if (m->aborted)
        return true;              /* NCCL's kernels exit on abort; the data is not defined */
      uint64_t rd = first + done; /* this round's number, from 1 */
      if (!published) {
        for (int r = 0; r < m->world; r++) /* nobody still reads our slot */
          if (load_acq(&m->h->r[r].finished) < rd - 1)
            return false;
        fill(done);
        store_rel(&m->h->r[m->rank].published, rd);
        published = true;
      }
      for (int r = 0; r < m->world; r++)
        if (load_acq(&m->h->r[r].published) < rd)
          return false;
      if (done + 1 == nrounds)
        return true;
      finish_round();
    }
  }

  void finish_round() {
    finish(done);
    store_rel(&c->h->r[c->rank].finished, first + done);
    published = false;
    done++;
  }

  /* The last round's result, written when the collective runs (after every
   * kernel that was ready before it: cuemu_rt.cpp's step). */
  void land() {
    if (!c->aborted)
      finish_round();
  }
};

} // namespace

static bool all_present(emu_comm *m) {
  for (int r = 0; r < m->world; r++)
    if (!__atomic_load_n(&m->h->r[r].present, __ATOMIC_ACQUIRE))
      return false;
  return true;
}

/* The communicator's state: in progress until every rank joined. */
static ncclResult_t state_of(emu_comm *m) {
  if (m->aborted)
    return fail(ncclInvalidUsage, "the communicator was aborted");
  if (!m->joined) {
    if (!all_present(m))
      return ncclInProgress;
    m->joined = true;
    shm_unlink(m->name); /* every rank has it mapped; ENOENT: another rank was first */
  }
  return ncclSuccess;
}

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t) {
  return g_last_error;
}

ncclResult_t ncclGetVersion(int *v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  unsigned char rnd[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  ssize_t got = fd >= 0 ? read(fd, rnd, sizeof rnd) : -1;
  if (fd >= 0)
    close(fd);
  if (got != (ssize_t)sizeof rnd)
    return fail(ncclSystemError, "ncclGetUniqueId: /dev/urandom: %s", strerror(errno));
  int n = snprintf(id->internal, sizeof id->internal, "/cuemu-nccl-%d-", (int)getpid());
  for (size_t i = 0; i < sizeof rnd; i++)
    n += snprintf(id->internal + n, sizeof id->internal - (size_t)n, "%02x", rnd[i]);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int world, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  std::lock_guard<std::recursive_mutex> lock(cuemu_lock());
  *out = NULL;
  if (world < 1 || world > MAX_RANKS || rank < 0 || rank >= world)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d (cuemu: at most %d)", rank,
                world, MAX_RANKS);
  if (strncmp(id.internal, "/cuemu-nccl-", 12) || !memchr(id.internal, 0, sizeof id.internal))
    return fail(ncclInvalidArgument, "ncclCommInitRank: not an id from ncclGetUniqueId");
  auto m = std::make_shared<emu_comm>();
  snprintf(m->name, sizeof m->name, "%s", id.internal);
  m->rank = rank;
  m->world = world;
  const char *kb = getenv("CUEMU_NCCL_SLOT_KB");
  m->slot_bytes = (size_t)(kb && atoi(kb) > 0 ? atoi(kb) : 1024) << 10;
  m->map_bytes = sizeof(shm_header) + (size_t)world * m->slot_bytes;
  int fd = shm_open(m->name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return fail(ncclSystemError, "ncclCommInitRank: shm_open %s: %s", m->name, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || ((size_t)st.st_size < m->map_bytes && ftruncate(fd, (off_t)m->map_bytes))) {
    int e = errno;
    close(fd);
    return fail(ncclSystemError, "ncclCommInitRank: size %s: %s", m->name, strerror(e));
  }
  void *p = mmap(NULL, m->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return fail(ncclSystemError, "ncclCommInitRank: mmap %s: %s", m->name, strerror(errno));
  m->h = (shm_header *)p;
  m->slots = (unsigned char *)p + sizeof(shm_header);
  /* the first rank to come sets the shape; the others must agree */
  uint32_t zero = 0;
  __atomic_compare_exchange_n(&m->h->world, &zero, (uint32_t)world, false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  uint64_t sb = 0;
  __atomic_compare_exchange_n(&m->h->slot_bytes, &sb, (uint64_t)m->slot_bytes, false,
                              __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&m->h->world, __ATOMIC_ACQUIRE) != (uint32_t)world ||
      __atomic_load_n(&m->h->slot_bytes, __ATOMIC_ACQUIRE) != m->slot_bytes)
    return fail(ncclInvalidUsage, "ncclCommInitRank: ranks disagree on the world size (%d vs %u)",
                world, m->h->world);
  if (__atomic_exchange_n(&m->h->r[rank].present, 1u, __ATOMIC_ACQ_REL))
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice", rank);
  __atomic_store_n(&m->h->magic, (uint32_t)MAGIC, __ATOMIC_RELEASE);
  ncclComm *c = new ncclComm;
  c->c = m;
  *out = c;
  if (config && !config->blocking)
    return state_of(m.get()) == ncclSuccess ? ncclSuccess : ncclInProgress;
  while (state_of(m.get()) == ncclInProgress) { /* blocking: until every rank has joined */
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int world, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, world, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *st) {
  std::lock_guard<std::recursive_mutex> lock(cuemu_lock());
  if (!comm)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL communicator");
  *st = state_of(comm->c.get());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  *count = comm->c->world;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  *rank = comm->c->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::lock_guard<std::recursive_mutex> lock(cuemu_lock());
  if (!comm)
    return fail(ncclInvalidArgument, "ncclCommFinalize: NULL communicator");
  return ncclSuccess; /* the queued collectives complete in their streams */
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::lock_guard<std::recursive_mutex> lock(cuemu_lock());
  delete comm; /* queued collectives keep the mapping until they are done */
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::lock_guard<std::recursive_mutex> lock(cuemu_lock());
  if (!comm)
    return ncclSuccess;
  comm->c->aborted = true;
  if (!comm->c->joined)
    shm_unlink(comm->c->name); /* nobody else may ever come */
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  g_group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (g_group_depth <= 0)
    return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  g_group_depth--;
  return ncclSuccess;
}

} // extern "C"

/* Checks and queues one collective: count elements of type t per part. */
static ncclResult_t queue(const char *what, kind k, const void *send, void *recv, size_t count,
                          ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t comm,
                          cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(cuemu_lock());
  if (!comm)
    return fail(ncclInvalidArgument, "%s: NULL communicator", what);
  emu_comm *m = comm->c.get();
  size_t elem = type_size(t);
  if (!elem)
    return fail(ncclInvalidArgument, "%s: data type %d", what, (int)t);
  if ((k == K_ALLREDUCE || k == K_REDUCE_SCATTER) && (op != ncclSum || !summable(t)))
    return fail(ncclInvalidArgument, "%s: cuemu reduces only ncclSum over int and float types",
                what);
  if (k == K_BROADCAST && (root < 0 || root >= m->world))
    return fail(ncclInvalidArgument, "%s: root %d", what, root);
  ncclResult_t st = state_of(m);
  if (st != ncclSuccess)
    return st == ncclInProgress
               ? fail(ncclInvalidUsage, "%s: the communicator has not finished its init", what)
               : st;
  size_t w = (size_t)m->world;
  size_t send_n = k == K_REDUCE_SCATTER ? w * count : count;
  size_t recv_n = k == K_ALLGATHER ? w * count : count;
  if (count) {
    if (k != K_BROADCAST || m->rank == root)
      cuemu_check_dev(send, send_n * elem, what);
    cuemu_check_dev(recv, recv_n * elem, what);
  }
  auto x = std::make_shared<coll>();
  x->c = comm->c;
  x->k = k;
  x->send = (const unsigned char *)send;
  x->recv = (unsigned char *)recv;
  x->count = count;
  x->elem = elem;
  x->type = t;
  x->root = root;
  size_t per = m->slot_bytes / elem / (k == K_REDUCE_SCATTER ? w : 1);
  x->chunk = per ? per : 1;
  x->nrounds = count ? (count + x->chunk - 1) / x->chunk : 1; /* an empty one still syncs */
  if (!count)
    x->chunk = 0;
  x->done = 0;
  x->first = m->round + 1;
  m->round += x->nrounds;
  cuemu_enqueue_coll(
      stream, what, [x]() { return x->poll(); }, [x]() { x->land(); });
  return ncclSuccess;
}

extern "C" {

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  return queue("ncclAllGather", K_ALLGATHER, send, recv, count, t, ncclSum, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return queue("ncclReduceScatter", K_REDUCE_SCATTER, send, recv, count, t, op, 0, comm, stream);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return queue("ncclAllReduce", K_ALLREDUCE, send, recv, count, t, op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return queue("ncclBroadcast", K_BROADCAST, send, recv, count, t, ncclSum, root, comm, stream);
}

} // extern "C"
