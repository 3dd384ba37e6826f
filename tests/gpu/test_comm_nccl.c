/*
 * test_comm_nccl: the NCCL backend of worker/comm.h (comm_nccl.c) on real
 * GPUs, one process per rank. Label "gpu": exits 77 (skipped) when no CUDA
 * device is visible.
 *
 * Why every CUDA call happens in a child process: the CUDA driver does not
 * survive fork() once initialised, and the multi-rank tests fork. So even
 * the device count is probed in a child, and each scenario runs in forked
 * rank processes (rank r on device r), which report through their exit
 * status (0 = all checks passed; the reason for anything else is on
 * stderr). The parent kills every rank still running after
 * GROUP_DEADLINE_S: a hang is a failure, never a stuck test.
 *
 * Scenarios:
 *   single rank   world 1 on device 0: device all-gather (bf16 bits),
 *                 reduce-scatter, all-reduce f32/f64 with known values;
 *                 the host collectives on the same comm; comm_dev_poll and
 *                 comm_dev_wait on an idle stream; argument errors; then
 *                 comm_abort, after which every call is FT_ECOMM.
 *   rendezvous    world 2, only rank 0 started: comm_nccl_new gives
 *                 FT_ETIMEDOUT within connect_timeout_ms plus slack (the
 *                 NCCL init is polled and aborted).
 *   two ranks     (>= 2 devices, else skipped) the same collectives with
 *                 exact integer-valued sums, counts 1 .. 300001.
 *   peer death    (>= 2 devices) rank 1 SIGKILLs itself while rank 0 loops
 *                 over all-reduce + comm_dev_wait: rank 0 fails with
 *                 FT_ECOMM or FT_ETIMEDOUT within timeout_ms plus slack,
 *                 is refused at once afterwards, and comm_free returns.
 *   abort         (>= 2 devices) rank 1 SIGSTOPs itself; a second thread of
 *                 rank 0 calls comm_abort while the main thread waits in
 *                 comm_dev_wait with a long timeout: the wait ends with
 *                 FT_ECOMM long before that timeout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm.h"
#include "comm_filestore.h"
#include "ft_err.h"
#include "../unit/test_ranks.h"

#include <cuda_runtime_api.h>

#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAXW = 2, GROUP_DEADLINE_S = 90, SLACK_MS = 5000 };

static int ndev; /* visible CUDA devices, probed in a child */

typedef int (*rank_fn)(comm *c, int rank, int world, void *arg);

/* A CUDA runtime call the test itself makes (not the code under test). */
#define CU(expr)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (expr);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #expr, cudaGetErrorString(e_));                   \
      return RX_SETUP;                                                                             \
    }                                                                                              \
  } while (0)

/* Visible CUDA devices, counted in a child so that this process never
 * initialises CUDA (0 on any error: no driver, no device). */
static int probe_devices(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return 0;
  if (pid == 0) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    _exit(n > 100 ? 100 : n);
  }
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return 0;
  return WEXITSTATUS(st);
}

/* ---- running a group of rank processes ---------------------------------- */

typedef test_group group_opts;

static void rank_main(const char *kvdir, int rank, const test_rank_ctx *x) {
  const group_opts *g = x->g;
  comm_kv kv;
  comm_opts o;
  comm *c = NULL;
  /* bind_addr is not used by NCCL */
  test_ranks_setup(kvdir, rank, g, NULL, &kv, &o);
  long long t0 = ft_now_ms();
  int rc = comm_nccl_new(&o, &kv, rank % ndev, &c);
  long long took = ft_now_ms() - t0;
  comm_filestore_release(&kv);
  if (rc) {
    fprintf(stderr, "rank %d: comm_nccl_new after %lld ms: %s: %s\n", rank, took, ft_strerror(rc),
            ft_err_detail());
    if (c != NULL)
      _exit(RX_WRONG);
    if (rc == FT_ETIMEDOUT && g->connect_timeout_ms > 0 && took > g->connect_timeout_ms + SLACK_MS)
      _exit(RX_SLOW);
    _exit(rc == FT_ETIMEDOUT ? RX_DIED_ETIMEDOUT : RX_SETUP);
  }
  rc = ((rank_fn)x->fn)(c, rank, g->world, x->arg);
  long long t1 = ft_now_ms();
  comm_free(c);
  if (rc == RX_OK || rc >= RX_DIED_ECOMM)
    fprintf(stderr, "rank %d: comm_free took %lld ms\n", rank, ft_now_ms() - t1);
  exit(rc);
}

/* Runs fn on g->spawn rank processes; status[r] = exit code, 128+signal, or HUNG. */
static void run_group(const group_opts *g, rank_fn fn, void *arg, int status[MAXW]) {
  test_ranks_run("comm_nccl", g, NULL, GROUP_DEADLINE_S, rank_main, (void (*)(void))fn, arg,
                 status);
}

/* ---- device collectives with exact results ------------------------------ */

static uint16_t bf16_bits(int r, size_t i) {
  return (uint16_t)(r * 7919 + (long)i * 3);
}

static int dev_allgather(comm *c, int rank, int W, size_t n, cudaStream_t s) {
  uint16_t *h = malloc(W * n * sizeof *h);
  void *dsend = NULL, *drecv = NULL;
  CHECK(h != NULL, "malloc");
  for (size_t i = 0; i < n; i++)
    h[i] = bf16_bits(rank, i);
  CU(cudaMalloc(&dsend, n * 2));
  CU(cudaMalloc(&drecv, W * n * 2));
  CU(cudaMemcpy(dsend, h, n * 2, cudaMemcpyHostToDevice));
  CU(cudaMemset(drecv, 0xEE, W * n * 2));
  CALL(comm_dev_allgather_bf16(c, dsend, drecv, n, s));
  CALL(comm_dev_wait(c, s, 0));
  CU(cudaMemcpy(h, drecv, W * n * 2, cudaMemcpyDeviceToHost));
  for (int r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++)
      CHECK(h[r * n + i] == bf16_bits(r, i), "count %zu: recv[%d*n+%zu] = 0x%04x", n, r, i,
            h[r * n + i]);
  cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  return RX_OK;
}

static int dev_reduce_scatter(comm *c, int rank, int W, size_t n, cudaStream_t s) {
  float *h = malloc(W * n * sizeof *h);
  float *dsend = NULL, *drecv = NULL;
  CHECK(h != NULL, "malloc");
  for (size_t j = 0; j < W * n; j++)
    h[j] = (float)((rank + 1) * (long)(j % 97) + rank);
  CU(cudaMalloc((void **)&dsend, W * n * sizeof(float)));
  CU(cudaMalloc((void **)&drecv, n * sizeof(float)));
  CU(cudaMemcpy(dsend, h, W * n * sizeof(float), cudaMemcpyHostToDevice));
  CU(cudaMemset(drecv, 0xEE, n * sizeof(float)));
  CALL(comm_dev_reduce_scatter_f32(c, dsend, drecv, n, s));
  CALL(comm_dev_wait(c, s, 0));
  CU(cudaMemcpy(h, drecv, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    size_t j = rank * n + i;
    float want = (float)((long)(j % 97) * W * (W + 1) / 2 + W * (W - 1) / 2);
    CHECK(h[i] == want, "count %zu: recv[%zu] = %g, want %g", n, i, h[i], want);
  }
  cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  return RX_OK;
}

static int dev_allreduce(comm *c, int rank, int W, size_t n, cudaStream_t s) {
  float *h = malloc(n * sizeof *h);
  double *hd = malloc(n * sizeof *hd);
  float *d = NULL;
  double *dd = NULL;
  CHECK(h && hd, "malloc");
  for (size_t i = 0; i < n; i++) {
    h[i] = (float)((rank + 1) * (long)(i % 1000));
    hd[i] = rank * 1e6 + (double)i + 0.5;
  }
  CU(cudaMalloc((void **)&d, n * sizeof *d));
  CU(cudaMalloc((void **)&dd, n * sizeof *dd));
  CU(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dd, hd, n * sizeof *dd, cudaMemcpyHostToDevice));
  CALL(comm_dev_allreduce_f32(c, d, n, s));
  CALL(comm_dev_allreduce_f64(c, dd, n, s));
  CALL(comm_dev_wait(c, s, 0));
  CU(cudaMemcpy(h, d, n * sizeof *d, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hd, dd, n * sizeof *dd, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    float want = (float)((long)(i % 1000) * W * (W + 1) / 2);
    CHECK(h[i] == want, "n %zu: f32 buf[%zu] = %g, want %g", n, i, h[i], want);
    double dwant = 1e6 * W * (W - 1) / 2 + W * ((double)i + 0.5);
    CHECK(hd[i] == dwant, "n %zu: f64 buf[%zu] = %.17g, want %.17g", n, i, hd[i], dwant);
  }
  cudaFree(d);
  cudaFree(dd);
  free(h);
  free(hd);
  return RX_OK;
}

/* ---- host collectives on the NCCL comm ---------------------------------- */

static int host_collectives(comm *c, int rank, int W, size_t n) {
  float *send = malloc(W * n * sizeof *send), *recv = malloc(W * n * sizeof *recv);
  double *dbuf = malloc(n * sizeof *dbuf);
  CHECK(send && recv && dbuf, "malloc");
  /* allgather */
  for (size_t i = 0; i < n; i++)
    send[i] = (float)(rank * 131071 + (long)i);
  CALL(comm_allgather(c, send, recv, n));
  for (int r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++)
      CHECK(recv[r * n + i] == (float)(r * 131071 + (long)i), "allgather %zu: [%d*n+%zu] = %g", n,
            r, i, recv[r * n + i]);
  /* reduce_scatter */
  for (size_t j = 0; j < W * n; j++)
    send[j] = (float)((rank + 1) * (long)(j % 97) + rank);
  CALL(comm_reduce_scatter(c, send, recv, n));
  for (size_t i = 0; i < n; i++) {
    size_t j = rank * n + i;
    float want = (float)((long)(j % 97) * W * (W + 1) / 2 + W * (W - 1) / 2);
    CHECK(recv[i] == want, "reduce_scatter %zu: [%zu] = %g, want %g", n, i, recv[i], want);
  }
  /* allreduce f32 and f64 */
  for (size_t i = 0; i < n; i++) {
    send[i] = (float)((rank + 1) * (long)(i % 1000));
    dbuf[i] = rank * 1e6 + (double)i + 0.5;
  }
  CALL(comm_allreduce(c, send, n));
  CALL(comm_allreduce_f64(c, dbuf, n));
  for (size_t i = 0; i < n; i++) {
    float want = (float)((long)(i % 1000) * W * (W + 1) / 2);
    CHECK(send[i] == want, "allreduce %zu: [%zu] = %g", n, i, send[i]);
    double dwant = 1e6 * W * (W - 1) / 2 + W * ((double)i + 0.5);
    CHECK(dbuf[i] == dwant, "allreduce_f64 %zu: [%zu] = %.17g", n, i, dbuf[i]);
  }
  /* broadcast from every root */
  for (int root = 0; root < W; root++) {
    unsigned char *b = (unsigned char *)recv;
    size_t len = n * sizeof(float) + 3;
    if (len > W * n * sizeof(float))
      len = W * n * sizeof(float);
    for (size_t i = 0; i < len; i++)
      b[i] = rank == root ? (unsigned char)(root * 31 + i * 7) : 0xEE;
    CALL(comm_broadcast(c, b, len, root));
    for (size_t i = 0; i < len; i++)
      CHECK(b[i] == (unsigned char)(root * 31 + i * 7), "broadcast root %d: b[%zu] = %u", root, i,
            b[i]);
  }
  CALL(comm_barrier(c));
  free(send);
  free(recv);
  free(dbuf);
  return RX_OK;
}

static const size_t counts[] = {1, 7, 1000, 300001};
enum { NCOUNTS = sizeof counts / sizeof counts[0] };

static int all_collectives(comm *c, int rank, int W, cudaStream_t s) {
  int rc;
  for (int k = 0; k < NCOUNTS; k++) {
    if ((rc = dev_allgather(c, rank, W, counts[k], s)) ||
        (rc = dev_reduce_scatter(c, rank, W, counts[k], s)) ||
        (rc = dev_allreduce(c, rank, W, counts[k], s)) ||
        (rc = host_collectives(c, rank, W, counts[k])))
      return rc;
  }
  return RX_OK;
}

/* ---- scenario: one rank -------------------------------------------------- */

static int scenario_single(comm *c, int rank, int W, void *arg) {
  cudaStream_t s = NULL;
  int rc;
  CHECK(comm_is_device(c) == 1, "comm_is_device");
  CHECK(strcmp(comm_backend(c), "nccl") == 0, "backend %s", comm_backend(c));
  CHECK(comm_rank(c) == rank && comm_world(c) == W, "rank %d world %d", comm_rank(c),
        comm_world(c));
  CU(cudaStreamCreate(&s)); /* blocking: ordered after the legacy-stream copies */
  if ((rc = all_collectives(c, rank, W, s)))
    return rc;
  CALL(comm_dev_poll(c));
  CALL(comm_dev_wait(c, s, 1000)); /* idle stream */
  CALL(comm_dev_wait(c, NULL, 0)); /* the default stream */
  /* argument errors are refused locally and leave the comm healthy */
  float x = 0;
  CHECK(comm_dev_allreduce_f32(c, NULL, 3, s) == FT_EINVAL, "NULL buffer");
  CHECK(comm_dev_allreduce_f32(c, &x, 0, s) == FT_OK, "zero count");
  CHECK(comm_broadcast(c, &x, sizeof x, W) == FT_EINVAL, "root out of range");
  CALL(comm_dev_poll(c));
  /* after comm_abort every call is refused */
  comm_abort(c);
  comm_abort(c); /* a second abort is a no-op */
  double d = 1;
  long long t0 = ft_now_ms();
  CHECK(comm_dev_poll(c) == FT_ECOMM, "dev_poll after abort");
  CHECK(strstr(ft_err_detail(), "aborted") != NULL, "detail: %s", ft_err_detail());
  CHECK(comm_allreduce_f64(c, &d, 1) == FT_ECOMM, "allreduce_f64 after abort");
  CHECK(comm_dev_allreduce_f32(c, &x, 1, s) == FT_ECOMM, "dev_allreduce_f32 after abort");
  CHECK(comm_dev_wait(c, s, 0) == FT_ECOMM, "dev_wait after abort");
  CHECK(comm_barrier(c) == FT_ECOMM, "barrier after abort");
  CHECK(ft_now_ms() - t0 < 1000, "refusals took %lld ms", ft_now_ms() - t0);
  cudaStreamDestroy(s);
  return RX_OK;
}

static void test_single_rank(void **state) {
  int status[MAXW];
  group_opts g = {.world = 1, .timeout_ms = 20000};
  run_group(&g, scenario_single, NULL, status);
  test_ranks_expect_ok(1, status);
}

/* ---- scenario: nobody else shows up ------------------------------------- */

static int scenario_never(comm *c, int rank, int W, void *arg) {
  return RX_WRONG; /* comm_nccl_new must not succeed */
}

static void test_rendezvous_timeout(void **state) {
  int status[MAXW];
  group_opts g = {.world = 2, .spawn = 1, .timeout_ms = 1000, .connect_timeout_ms = 3000};
  run_group(&g, scenario_never, NULL, status);
  assert_int_equal(status[0], RX_DIED_ETIMEDOUT);
}

/* ---- scenario: two ranks ------------------------------------------------ */

static int scenario_collectives(comm *c, int rank, int W, void *arg) {
  cudaStream_t s = NULL;
  int rc;
  CU(cudaStreamCreate(&s)); /* blocking: ordered after the legacy-stream copies */
  if ((rc = all_collectives(c, rank, W, s)))
    return rc;
  CALL(comm_dev_poll(c));
  CALL(comm_barrier(c));
  cudaStreamDestroy(s);
  return RX_OK;
}

static void test_collectives_w2(void **state) {
  if (ndev < 2)
    skip();
  int status[MAXW];
  group_opts g = {.world = 2, .timeout_ms = 20000};
  run_group(&g, scenario_collectives, NULL, status);
  test_ranks_expect_ok(2, status);
}

/* ---- scenarios: a peer dies, or hangs and we abort ------------------------ */

enum { DEATH_TIMEOUT_MS = 3000, DEATH_N = 1 << 20 };

typedef struct {
  int sig;      /* what rank 1 does to itself after 400 ms */
  int abort_ms; /* > 0: rank 0 calls comm_abort from a thread after this */
} death_arg;

typedef struct {
  comm *c;
  int ms;
} aborter;

static void *suicide(void *p) {
  usleep(400 * 1000);
  kill(getpid(), *(int *)p);
  return NULL;
}

static void *abort_later(void *p) {
  aborter *a = p;
  usleep((useconds_t)a->ms * 1000);
  comm_abort(a->c);
  return NULL;
}

static int scenario_death(comm *c, int rank, int W, void *arg) {
  death_arg *a = arg;
  cudaStream_t s = NULL;
  float *d = NULL;
  pthread_t t;
  aborter ab = {.c = c, .ms = a->abort_ms};
  int wait_ms = a->abort_ms > 0 ? 60000 : 0; /* 0: the comm's timeout_ms */
  CU(cudaStreamCreate(&s));                  /* blocking: ordered after the legacy-stream copies */
  CU(cudaMalloc((void **)&d, DEATH_N * sizeof *d));
  CU(cudaMemset(d, 0, DEATH_N * sizeof *d));
  if (rank == 1 && pthread_create(&t, NULL, suicide, &a->sig) != 0)
    return RX_SETUP;
  if (rank == 0 && a->abort_ms > 0 && pthread_create(&t, NULL, abort_later, &ab) != 0)
    return RX_SETUP;
  long long start = ft_now_ms();
  for (long it = 0;; it++) {
    long long t0 = ft_now_ms();
    int rc = comm_dev_allreduce_f32(c, d, DEATH_N, s);
    if (rc == FT_OK)
      rc = comm_dev_wait(c, s, wait_ms);
    if (rc == FT_OK && it % 3 == 2) {
      double x = 1;
      rc = comm_allreduce_f64(c, &x, 1);
    }
    if (rc == FT_OK) {
      if (ft_now_ms() - start > 30000)
        return RX_NOFAIL;
      continue;
    }
    long long took = ft_now_ms() - t0;
    fprintf(stderr, "rank %d: iteration %ld failed after %lld ms: %s: %s\n", rank, it, took,
            ft_strerror(rc), ft_err_detail());
    CHECK(rc == FT_ECOMM || rc == FT_ETIMEDOUT, "rc %d", rc);
    if (a->abort_ms > 0) {
      CHECK(rc == FT_ECOMM, "after comm_abort: rc %d", rc);
      pthread_join(t, NULL);
    } else if (took > DEATH_TIMEOUT_MS + SLACK_MS) {
      return RX_SLOW;
    }
    long long t1 = ft_now_ms();
    int rc2 = comm_dev_poll(c);
    CHECK(rc2 == FT_ECOMM, "after failure: rc %d", rc2);
    CHECK(strstr(ft_err_detail(), "failed earlier") != NULL, "detail: %s", ft_err_detail());
    CHECK(ft_now_ms() - t1 < 1000, "refusal took %lld ms", ft_now_ms() - t1);
    return rc == FT_ECOMM ? RX_DIED_ECOMM : RX_DIED_ETIMEDOUT;
  }
}

static void test_peer_death_w2(void **state) {
  if (ndev < 2)
    skip();
  int status[MAXW];
  death_arg a = {.sig = SIGKILL};
  group_opts g = {
      .world = 2, .timeout_ms = DEATH_TIMEOUT_MS, .connect_timeout_ms = 30000, .straggler = 2};
  run_group(&g, scenario_death, &a, status);
  fprintf(stderr, "peer death: rank 0 status %d, rank 1 status %d\n", status[0], status[1]);
  assert_int_equal(status[1], 128 + SIGKILL);
  assert_true(status[0] == RX_DIED_ECOMM || status[0] == RX_DIED_ETIMEDOUT);
}

static void test_abort_from_thread_w2(void **state) {
  if (ndev < 2)
    skip();
  int status[MAXW];
  death_arg a = {.sig = SIGSTOP, .abort_ms = 1500};
  group_opts g = {.world = 2, .timeout_ms = 60000, .connect_timeout_ms = 30000, .straggler = 2};
  run_group(&g, scenario_death, &a, status);
  fprintf(stderr, "abort: rank 0 status %d, rank 1 status %d\n", status[0], status[1]);
  assert_int_equal(status[1], 128 + SIGKILL);
  assert_int_equal(status[0], RX_DIED_ECOMM);
}

int main(void) {
  ndev = probe_devices();
  if (ndev == 0) {
    fprintf(stderr, "test_comm_nccl: no CUDA device visible: skipped\n");
    return 77;
  }
  fprintf(stderr, "test_comm_nccl: %d CUDA device(s)\n", ndev);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_rank),          cmocka_unit_test(test_rendezvous_timeout),
      cmocka_unit_test(test_collectives_w2),       cmocka_unit_test(test_peer_death_w2),
      cmocka_unit_test(test_abort_from_thread_w2),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
