/*
 * comm_gloo: the CPU backend of comm.h, Gloo over TCP.
 *
 * What: comm_gloo_new() builds a gloo::rendezvous::Context whose rendezvous
 * goes through the caller's C key/value store (class CStore below, a thin
 * gloo::rendezvous::Store that calls comm_kv), then maps each collective onto
 * Gloo:
 *   allgather      gloo::allgather (ring; pure copies)
 *   allreduce      gloo::allreduce, RING algorithm, sum of float / double
 *   broadcast      gloo::broadcast (bytes)
 *   barrier        gloo::barrier
 *   reduce_scatter our own ring on Gloo's unbound buffers: Gloo's options
 *                  API has no reduce-scatter, and allreduce-then-slice would
 *                  move twice the bytes.
 *
 * Determinism: every sum is formed in one fixed order that depends only on
 * the world size and the counts (a ring), and then copied to the other ranks,
 * so all ranks hold the same bits and reruns give the same bits. For the
 * reduce-scatter, chunk c is summed as
 *   (((x[c+1] + x[c+2]) + x[c+3]) + ...) + x[c]      (rank indices mod W).
 *
 * Errors: Gloo reports everything by throwing. Every entry point runs its body
 * inside guard(), the ONE place that catches exceptions and translates them:
 * a timeout ("Timed out ...", "... timeout") -> FT_ETIMEDOUT; any other Gloo
 * or standard exception -> FT_ECOMM; std::bad_alloc -> FT_ENOMEM; an error
 * from the C store -> the store's own code. No exception leaves this file.
 * After a failure comm.c calls gloo_abort(), which closes all connections so
 * that peers blocked on us fail at once rather than at their timeout; called
 * from another thread (comm_abort), it also fails the operations our own
 * collective is waiting for, so that collective throws at once.
 *
 * SIGPIPE: Gloo writes its sockets with writev(2), which raises SIGPIPE when
 * the peer has died; the default action would kill this process instead of
 * letting the collective fail. comm_gloo_new therefore sets SIGPIPE to
 * SIG_IGN if (and only if) its disposition is still SIG_DFL.
 *
 * Threading: Gloo's TCP device runs its own event-loop thread; the comm
 * itself is driven by one caller thread at a time.
 */
#include "comm_int.h"

extern "C" {
#include "ft_err.h"
}

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

/* Slot prefix for our reduce-scatter; Gloo's own collectives use 0x01..0x08. */
constexpr uint8_t kReduceScatterSlotPrefix = 0x21;
constexpr uint8_t kShiftSlotPrefix = 0x22;

/* An error returned by the C store, carried through Gloo as an exception. */
struct StoreError : std::runtime_error {
  int code;
  StoreError(int code, const std::string &msg) : std::runtime_error(msg), code(code) {}
};

class CStore : public gloo::rendezvous::Store {
public:
  CStore(const comm_kv &kv, std::string prefix, ms timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    std::string k = prefix_ + key;
    check(kv_.set(kv_.ud, k.c_str(), data.data(), data.size()), "set", k);
  }

  std::vector<char> get(const std::string &key) override {
    wait({key}, timeout_); /* Gloo's get blocks until the key exists. */
    std::string k = prefix_ + key;
    void *val = nullptr;
    size_t len = 0;
    check(kv_.get(kv_.ud, k.c_str(), &val, &len), "get", k);
    std::vector<char> out;
    try {
      out.assign(static_cast<char *>(val), static_cast<char *>(val) + len);
    } catch (...) {
      free(val);
      throw;
    }
    free(val);
    return out;
  }

  void wait(const std::vector<std::string> &keys) override {
    wait(keys, timeout_);
  }

  void wait(const std::vector<std::string> &keys, const ms &timeout) override {
    std::vector<std::string> full;
    std::vector<const char *> ptrs;
    full.reserve(keys.size());
    for (const auto &k : keys)
      full.push_back(prefix_ + k);
    for (const auto &k : full)
      ptrs.push_back(k.c_str());
    long t = timeout.count() > 0 ? (long)timeout.count() : (long)timeout_.count();
    if (t > (long)timeout_.count())
      t = (long)timeout_.count();
    check(kv_.wait(kv_.ud, ptrs.data(), (int)ptrs.size(), (int)t), "wait",
          full.empty() ? std::string() : full[0]);
  }

private:
  void check(int rc, const char *what, const std::string &key) {
    if (rc != FT_OK)
      throw StoreError(rc, std::string("rendezvous store ") + what + " '" + key +
                               "': " + ft_strerror(rc) + ": " + ft_err_detail());
  }

  comm_kv kv_;
  std::string prefix_;
  ms timeout_;
};

struct GlooComm {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  ms timeout;
  int rank = 0, world = 0;
  std::vector<float> acc, in; /* reduce-scatter scratch, grown on demand */
};

bool contains_ci(const std::string &s, const char *needle) {
  std::string a(s), b(needle);
  auto low = [](unsigned char ch) { return (char)std::tolower(ch); };
  std::transform(a.begin(), a.end(), a.begin(), low);
  std::transform(b.begin(), b.end(), b.begin(), low);
  return a.find(b) != std::string::npos;
}

int io_code(const std::string &msg) {
  return contains_ci(msg, "timed out") || contains_ci(msg, "timeout") ? FT_ETIMEDOUT : FT_ECOMM;
}

/* The one place where C++ exceptions become FT_E* codes. */
template <typename F> int guard(const char *op, F &&body) {
  try {
    body();
    return FT_OK;
  } catch (const StoreError &e) {
    return ft_err_set(e.code, "gloo %s: %s", op, e.what());
  } catch (const gloo::IoException &e) {
    return ft_err_set(io_code(e.what()), "gloo %s: %s", op, e.what());
  } catch (const gloo::Exception &e) {
    return ft_err_set(io_code(e.what()), "gloo %s: %s", op, e.what());
  } catch (const gloo::EnforceNotMet &e) {
    return ft_err_set(FT_ECOMM, "gloo %s: %s", op, e.what());
  } catch (const std::bad_alloc &) {
    return ft_err_set(FT_ENOMEM, "gloo %s: out of memory", op);
  } catch (const std::exception &e) {
    return ft_err_set(FT_ECOMM, "gloo %s: %s", op, e.what());
  } catch (...) {
    return ft_err_set(FT_ECOMM, "gloo %s: unknown exception", op);
  }
}

GlooComm *G(void *impl) {
  return static_cast<GlooComm *>(impl);
}

void sum_f32(void *c, const void *a, const void *b, size_t n) {
  float *o = static_cast<float *>(c);
  const float *x = static_cast<const float *>(a), *y = static_cast<const float *>(b);
  for (size_t i = 0; i < n; i++)
    o[i] = x[i] + y[i];
}

void sum_f64(void *c, const void *a, const void *b, size_t n) {
  double *o = static_cast<double *>(c);
  const double *x = static_cast<const double *>(a), *y = static_cast<const double *>(b);
  for (size_t i = 0; i < n; i++)
    o[i] = x[i] + y[i];
}

/* Time left before deadline, at least 1 ms (0 would mean "no timeout"). */
ms remaining(steady::time_point deadline) {
  auto d = std::chrono::duration_cast<ms>(deadline - steady::now());
  return d.count() < 1 ? ms(1) : d;
}

void wait_or_throw(bool ok, const char *what) {
  if (!ok)
    throw gloo::IoException(std::string("reduce_scatter: ") + what + " aborted");
}

void gloo_destroy(void *impl) {
  GlooComm *g = G(impl);
  guard("close", [&] {
    if (g->ctx)
      g->ctx->closeConnections();
  });
  guard("free", [&] { delete g; });
}

/* tcp::Pair::signalExceptionExternal is protected (Gloo's own buffers call it
 * when a wait times out); a pointer to it formed through a derived class may
 * be applied to any Pair. Never instantiated. */
struct PairAbort : gloo::transport::tcp::Pair {
  static void fail(gloo::transport::tcp::Pair *p, const std::string &why) {
    (p->*(&PairAbort::signalExceptionExternal))(why);
  }
};

void gloo_abort(void *impl) {
  GlooComm *g = G(impl);
  guard("abort", [&] {
    if (!g->ctx)
      return;
    /* Our own collective may be blocked on a peer that neither answers nor
     * closes (a cut link, a stopped process): closing our side does not wake
     * it. signalExceptionExternal fails every operation pending on a pair
     * (under the pair's lock: safe beside the waiting thread and the device
     * loop), so the wait throws now. */
    for (int i = 0; i < g->world; i++) {
      if (i == g->rank)
        continue;
      auto *tp = dynamic_cast<gloo::transport::tcp::Pair *>(g->ctx->getPair(i).get());
      if (tp)
        PairAbort::fail(tp, "aborted: this rank left its generation (comm_abort)");
    }
    g->ctx->closeConnections();
  });
}

int gloo_allgather(void *impl, const float *send, float *recv, size_t count) {
  GlooComm *g = G(impl);
  return guard("allgather", [&] {
    gloo::AllgatherOptions opts(g->ctx);
    opts.setInput(const_cast<float *>(send), count);
    opts.setOutput(recv, count * (size_t)g->world);
    opts.setTimeout(g->timeout);
    gloo::allgather(opts);
  });
}

/* Ring reduce-scatter. At step s (0 <= s < W-1) rank r sends its running
 * partial sum of chunk (r-s-1) to rank r+1 and receives the partial sum of
 * chunk (r-s-2) from rank r-1, adding its own contribution. After W-1 steps
 * rank r holds the full sum of chunk r. */
int gloo_reduce_scatter(void *impl, const float *send, float *recv, size_t count) {
  GlooComm *g = G(impl);
  return guard("reduce_scatter", [&] {
    const int W = g->world, r = g->rank;
    if (W == 1) {
      memcpy(recv, send, count * sizeof(float));
      return;
    }
    auto deadline = steady::now() + g->timeout;
    if (g->acc.size() < count) {
      g->acc.resize(count);
      g->in.resize(count);
    }
    float *acc = g->acc.data(), *in = g->in.data();
    const size_t bytes = count * sizeof(float);
    auto accbuf = g->ctx->createUnboundBuffer(acc, bytes);
    auto inbuf = g->ctx->createUnboundBuffer(in, bytes);
    const int right = (r + 1) % W, left = (r + W - 1) % W;
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, 0);
    memcpy(acc, send + (size_t)left * count, bytes);
    for (int s = 0; s < W - 1; s++) {
      accbuf->send(right, slot);
      inbuf->recv(left, slot);
      wait_or_throw(inbuf->waitRecv(remaining(deadline)), "recv");
      wait_or_throw(accbuf->waitSend(remaining(deadline)), "send");
      const int k = ((r - s - 2) % W + W) % W;
      float *dst = (s == W - 2) ? recv : acc;
      sum_f32(dst, in, send + (size_t)k * count, count);
    }
  });
}

int gloo_allreduce_f32(void *impl, float *buf, size_t n) {
  GlooComm *g = G(impl);
  return guard("allreduce", [&] {
    gloo::AllreduceOptions opts(g->ctx);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput(buf, n);
    opts.setReduceFunction(sum_f32);
    opts.setTimeout(g->timeout);
    gloo::allreduce(opts);
  });
}

int gloo_allreduce_f64(void *impl, double *buf, size_t n) {
  GlooComm *g = G(impl);
  return guard("allreduce_f64", [&] {
    gloo::AllreduceOptions opts(g->ctx);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput(buf, n);
    opts.setReduceFunction(sum_f64);
    opts.setTimeout(g->timeout);
    gloo::allreduce(opts);
  });
}

int gloo_broadcast(void *impl, void *buf, size_t bytes, int root) {
  GlooComm *g = G(impl);
  return guard("broadcast", [&] {
    gloo::BroadcastOptions opts(g->ctx);
    opts.setOutput(static_cast<uint8_t *>(buf), bytes);
    opts.setRoot(root);
    opts.setTimeout(g->timeout);
    gloo::broadcast(opts);
  });
}

int gloo_barrier(void *impl) {
  GlooComm *g = G(impl);
  return guard("barrier", [&] {
    gloo::BarrierOptions opts(g->ctx);
    opts.setTimeout(g->timeout);
    gloo::barrier(opts);
  });
}

int gloo_shift(void *impl, const void *send, void *recv, size_t bytes, int dist, double *recv_s) {
  GlooComm *g = G(impl);
  return guard("shift", [&] {
    const int W = g->world, r = g->rank;
    auto deadline = steady::now() + g->timeout;
    auto out = g->ctx->createUnboundBuffer(const_cast<void *>(send), bytes);
    auto in = g->ctx->createUnboundBuffer(recv, bytes);
    const uint64_t slot = gloo::Slot::build(kShiftSlotPrefix, (uint32_t)dist);
    auto t0 = steady::now();
    in->recv((r - dist % W + W) % W, slot);
    out->send((r + dist) % W, slot);
    wait_or_throw(in->waitRecv(remaining(deadline)), "recv");
    *recv_s = std::chrono::duration<double>(steady::now() - t0).count();
    wait_or_throw(out->waitSend(remaining(deadline)), "send");
  });
}

const struct comm_ops gloo_ops = {
    "gloo",
    gloo_destroy,
    gloo_abort,
    gloo_allgather,
    gloo_reduce_scatter,
    gloo_allreduce_f32,
    gloo_allreduce_f64,
    gloo_broadcast,
    gloo_barrier,
    gloo_shift,
};

} // namespace

extern "C" int comm_gloo_new(const comm_opts *o, const comm_kv *kv, comm **out) {
  if (!out)
    return ft_err_set(FT_EINVAL, "comm_gloo_new: NULL out");
  *out = nullptr;
  if (!o || !kv || !kv->set || !kv->wait || !kv->get)
    return ft_err_set(FT_EINVAL, "comm_gloo_new: NULL options or store");
  if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
    return ft_err_set(FT_EINVAL, "comm_gloo_new: rank %d not in [0, world=%d)", o->rank, o->world);
  if (!o->bind_addr || !*o->bind_addr)
    return ft_err_set(FT_EINVAL, "comm_gloo_new: no bind address");
  if (o->timeout_ms <= 0 || o->connect_timeout_ms < 0)
    return ft_err_set(FT_EINVAL, "comm_gloo_new: timeout_ms %d / connect_timeout_ms %d",
                      o->timeout_ms, o->connect_timeout_ms);
  struct sigaction sa;
  if (sigaction(SIGPIPE, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL) {
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, nullptr);
  }
  int connect_ms = o->connect_timeout_ms ? o->connect_timeout_ms : std::max(o->timeout_ms, 60000);

  GlooComm *g = nullptr;
  int rc = guard("connect", [&] {
    std::unique_ptr<GlooComm> p(new GlooComm);
    p->rank = o->rank;
    p->world = o->world;
    p->timeout = ms(o->timeout_ms);
    gloo::transport::tcp::attr attr;
    attr.hostname = o->bind_addr;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    CStore store(*kv, o->prefix ? o->prefix : "", ms(connect_ms));
    p->ctx = std::make_shared<gloo::rendezvous::Context>(o->rank, o->world);
    p->ctx->setTimeout(ms(connect_ms)); /* pair connection setup */
    p->ctx->connectFullMesh(store, dev);
    p->ctx->setTimeout(p->timeout);
    g = p.release();
  });
  if (rc)
    return rc;
  rc = comm__wrap(&gloo_ops, g, o->rank, o->world, out);
  if (rc)
    gloo_destroy(g);
  return rc;
}
