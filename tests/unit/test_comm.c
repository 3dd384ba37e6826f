/*
 * test_comm: the collectives of worker/comm.h with the Gloo backend, driven
 * by real processes over TCP on 127.0.0.1.
 *
 * Each test forks W rank processes (W = 2 and 4). Each rank builds its comm
 * over a comm_filestore in a fresh temporary directory, runs one scenario,
 * and reports through its exit status (0 = all its checks passed; the
 * reason for anything else is printed on stderr). The parent asserts on the
 * statuses, and kills every rank if the group is not done within
 * GROUP_DEADLINE_S (a hang is a failure, never a stuck test).
 *
 * Scenarios:
 *   collectives  integer-valued inputs, so every sum is exact: allgather,
 *                reduce_scatter (counts 1, 7, 1000, 300001), allreduce f32
 *                and f64, broadcast from every root, barrier (every rank's
 *                file exists once the barrier returns), argument errors.
 *   determinism  random non-integer inputs, run twice in fresh groups: the
 *                results are bitwise identical run to run and (allreduce)
 *                rank to rank; reduce_scatter equals the documented ring
 *                order bit for bit; allreduce is a sum within rounding.
 *   peer death   one rank SIGKILLs itself while all loop over collectives
 *                (mixed, or only reduce_scatter); every survivor's
 *                collective fails with FT_ECOMM or FT_ETIMEDOUT within
 *                timeout_ms plus slack, and the next call is refused with
 *                FT_ECOMM at once.
 *   peer hang    one rank SIGSTOPs itself (sockets stay open): a survivor
 *                sees FT_ETIMEDOUT, the rest fail with it.
 *   no peers     a rank alone: comm_gloo_new gives FT_ETIMEDOUT.
 *   no device    a Gloo comm (world 1) has no device collectives: every
 *                comm_dev_* is FT_EINVAL and leaves it healthy; after
 *                comm_abort every call is FT_ECOMM.
 *   nccl options comm_nccl_new refuses bad options with FT_EINVAL before
 *                touching CUDA; in a build without NCCL it is FT_ECONFIG.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm.h"
#include "comm_filestore.h"
#include "ft_err.h"
#include "test_ranks.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAXW = 8, GROUP_DEADLINE_S = 40 };

typedef int (*rank_fn)(comm *c, int rank, int world, const char *scratch, void *arg);

/* ---- running a group of rank processes ---------------------------------- */

typedef test_group group_opts;

static void rank_main(const char *kvdir, int rank, const test_rank_ctx *x) {
  comm_kv kv;
  comm_opts o;
  comm *c = NULL;
  test_ranks_setup(kvdir, rank, x->g, "127.0.0.1", &kv, &o);
  int rc = comm_gloo_new(&o, &kv, &c);
  comm_filestore_release(&kv);
  if (rc) {
    fprintf(stderr, "rank %d: comm_gloo_new: %s: %s\n", rank, ft_strerror(rc), ft_err_detail());
    _exit(rc == FT_ETIMEDOUT ? RX_DIED_ETIMEDOUT : RX_SETUP);
  }
  rc = ((rank_fn)x->fn)(c, rank, x->g->world, x->scratch, x->arg);
  comm_free(c);
  exit(rc);
}

/* Runs fn on g->spawn rank processes; status[r] = exit code, 128+signal, or HUNG. */
static void run_group(const group_opts *g, rank_fn fn, void *arg, int status[MAXW]) {
  char scratch[256];
  if (g->scratch) {
    snprintf(scratch, sizeof scratch, "%s", g->scratch);
  } else {
    snprintf(scratch, sizeof scratch, "%s/ft_test_comm_s.XXXXXX", test_ranks_tmpbase());
    assert_non_null(mkdtemp(scratch));
  }
  test_ranks_run("comm", g, scratch, GROUP_DEADLINE_S, rank_main, (void (*)(void))fn, arg, status);
  if (!g->scratch)
    test_ranks_rm_tree(scratch);
}

/* ---- scenario: collectives with exact, integer-valued results ------------ */

static const size_t counts[] = {1, 7, 1000, 300001};
enum { NCOUNTS = sizeof counts / sizeof counts[0] };

static int check_allgather(comm *c, int rank, int W, size_t n) {
  float *send = malloc(n * sizeof *send), *recv = malloc(W * n * sizeof *recv);
  if (!send || !recv)
    return RX_NOMEM;
  for (size_t i = 0; i < n; i++)
    send[i] = (float)(rank * 131071 + (long)i);
  for (size_t i = 0; i < W * n; i++)
    recv[i] = -1.0f;
  CALL(comm_allgather(c, send, recv, n));
  for (int r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++)
      CHECK(recv[r * n + i] == (float)(r * 131071 + (long)i), "count %zu: recv[%d*n+%zu] = %g", n,
            r, i, recv[r * n + i]);
  free(send);
  free(recv);
  return RX_OK;
}

static int check_reduce_scatter(comm *c, int rank, int W, size_t n) {
  float *send = malloc(W * n * sizeof *send), *recv = malloc(n * sizeof *recv);
  if (!send || !recv)
    return RX_NOMEM;
  for (size_t j = 0; j < W * n; j++)
    send[j] = (float)((rank + 1) * (long)(j % 97) + rank);
  for (size_t i = 0; i < n; i++)
    recv[i] = -1.0f;
  CALL(comm_reduce_scatter(c, send, recv, n));
  for (size_t i = 0; i < n; i++) {
    size_t j = rank * n + i;
    float want = (float)((long)(j % 97) * W * (W + 1) / 2 + W * (W - 1) / 2);
    CHECK(recv[i] == want, "count %zu: recv[%zu] = %g, want %g", n, i, recv[i], want);
  }
  free(send);
  free(recv);
  return RX_OK;
}

static int check_allreduce(comm *c, int rank, int W, size_t n) {
  float *buf = malloc(n * sizeof *buf);
  double *dbuf = malloc(n * sizeof *dbuf);
  if (!buf || !dbuf)
    return RX_NOMEM;
  for (size_t i = 0; i < n; i++) {
    buf[i] = (float)((rank + 1) * (long)(i % 1000));
    dbuf[i] = rank * 1e6 + (double)i + 0.5;
  }
  CALL(comm_allreduce(c, buf, n));
  CALL(comm_allreduce_f64(c, dbuf, n));
  for (size_t i = 0; i < n; i++) {
    float want = (float)((long)(i % 1000) * W * (W + 1) / 2);
    CHECK(buf[i] == want, "n %zu: f32 buf[%zu] = %g, want %g", n, i, buf[i], want);
    double dwant = 1e6 * W * (W - 1) / 2 + W * ((double)i + 0.5);
    CHECK(dbuf[i] == dwant, "n %zu: f64 buf[%zu] = %.17g, want %.17g", n, i, dbuf[i], dwant);
  }
  free(buf);
  free(dbuf);
  return RX_OK;
}

static int check_broadcast(comm *c, int rank, int W) {
  static const size_t sizes[] = {1, 13, 100000};
  for (int root = 0; root < W; root++) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t len = sizes[s];
      unsigned char *b = malloc(len);
      if (!b)
        return RX_NOMEM;
      for (size_t i = 0; i < len; i++)
        b[i] = rank == root ? (unsigned char)(root * 31 + i * 7) : 0xEE;
      CALL(comm_broadcast(c, b, len, root));
      for (size_t i = 0; i < len; i++)
        CHECK(b[i] == (unsigned char)(root * 31 + i * 7), "root %d len %zu: b[%zu] = %u", root, len,
              i, b[i]);
      free(b);
    }
  }
  return RX_OK;
}

static int check_barrier(comm *c, int rank, int W, const char *scratch) {
  char path[512];
  for (int round = 0; round < 3; round++) {
    /* Rank r arrives late by r*50 ms: a barrier that does not wait shows. */
    usleep((useconds_t)rank * 50 * 1000);
    snprintf(path, sizeof path, "%s/arrived-%d-%d", scratch, round, rank);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "create %s", path);
    fclose(f);
    CALL(comm_barrier(c));
    for (int r = 0; r < W; r++) {
      snprintf(path, sizeof path, "%s/arrived-%d-%d", scratch, round, r);
      CHECK(access(path, F_OK) == 0, "round %d: rank %d had not arrived", round, r);
    }
  }
  return RX_OK;
}

static int scenario_collectives(comm *c, int rank, int W, const char *scratch, void *arg) {
  int rc;
  CHECK(comm_rank(c) == rank && comm_world(c) == W, "rank %d world %d", comm_rank(c),
        comm_world(c));
  CHECK(strcmp(comm_backend(c), "gloo") == 0, "backend %s", comm_backend(c));
  struct sigaction sa;
  CHECK(sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN, "SIGPIPE not ignored");
  for (int k = 0; k < NCOUNTS; k++) {
    if ((rc = check_allgather(c, rank, W, counts[k])))
      return rc;
    if ((rc = check_reduce_scatter(c, rank, W, counts[k])))
      return rc;
    if ((rc = check_allreduce(c, rank, W, counts[k])))
      return rc;
  }
  if ((rc = check_broadcast(c, rank, W)))
    return rc;
  if ((rc = check_barrier(c, rank, W, scratch)))
    return rc;
  /* Argument errors are refused locally and leave the comm healthy. */
  float x[4] = {0};
  CHECK(comm_broadcast(c, x, sizeof x, W) == FT_EINVAL, "root out of range");
  CHECK(comm_broadcast(c, x, sizeof x, -1) == FT_EINVAL, "negative root");
  CHECK(comm_allreduce(c, NULL, 3) == FT_EINVAL, "NULL buffer");
  CHECK(comm_allreduce(c, x, 0) == FT_OK, "zero count");
  CALL(comm_barrier(c));
  return RX_OK;
}

static void run_collectives(int W) {
  int status[MAXW];
  group_opts g = {.world = W, .timeout_ms = 20000};
  run_group(&g, scenario_collectives, NULL, status);
  test_ranks_expect_ok(W, status);
}

static void test_collectives_w2(void **state) {
  run_collectives(2);
}
static void test_collectives_w4(void **state) {
  run_collectives(4);
}

/* ---- scenario: determinism with random non-integer inputs --------------- */

enum { DET_RS = 1001, DET_AR = 100003, DET_AR64 = 1001 };

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1), with a random exponent spread so sums round often. */
static double rnd(uint64_t *s) {
  double u = (double)(splitmix(s) >> 11) / 9007199254740992.0;
  double scale = ldexp(1.0, (int)(splitmix(s) % 12) - 6);
  return (2.0 * u - 1.0) * scale;
}

typedef struct {
  float *rs;    /* [W*DET_RS] */
  float *ar;    /* [DET_AR] */
  double *ar64; /* [DET_AR64] */
} det_inputs;

static int det_make(int rank, int W, det_inputs *in) {
  uint64_t s = 0x5EED0000ull + (uint64_t)rank * 7919;
  in->rs = malloc((size_t)W * DET_RS * sizeof(float));
  in->ar = malloc(DET_AR * sizeof(float));
  in->ar64 = malloc(DET_AR64 * sizeof(double));
  if (!in->rs || !in->ar || !in->ar64)
    return -1;
  for (size_t i = 0; i < (size_t)W * DET_RS; i++)
    in->rs[i] = (float)rnd(&s);
  for (size_t i = 0; i < DET_AR; i++)
    in->ar[i] = (float)rnd(&s);
  for (size_t i = 0; i < DET_AR64; i++)
    in->ar64[i] = rnd(&s) * 1e3;
  return 0;
}

static void det_free(det_inputs *in) {
  free(in->rs);
  free(in->ar);
  free(in->ar64);
}

static int write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  size_t w = fwrite(p, 1, n, f);
  return fclose(f) == 0 && w == n ? 0 : -1;
}

static void *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc(len > 0 ? (size_t)len : 1);
  if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *n = (size_t)len;
  return p;
}

typedef struct {
  int run;
  const char *outdir;
} det_arg;

static int scenario_determinism(comm *c, int rank, int W, const char *scratch, void *arg) {
  det_arg *a = arg;
  det_inputs in;
  char path[512];
  float *rs = malloc(DET_RS * sizeof(float));
  if (!rs || det_make(rank, W, &in))
    return RX_NOMEM;
  CALL(comm_reduce_scatter(c, in.rs, rs, DET_RS));
  CALL(comm_allreduce(c, in.ar, DET_AR));
  CALL(comm_allreduce_f64(c, in.ar64, DET_AR64));
  snprintf(path, sizeof path, "%s/rs-%d-%d", a->outdir, a->run, rank);
  CHECK(write_file(path, rs, DET_RS * sizeof(float)) == 0, "write %s", path);
  snprintf(path, sizeof path, "%s/ar-%d-%d", a->outdir, a->run, rank);
  CHECK(write_file(path, in.ar, DET_AR * sizeof(float)) == 0, "write %s", path);
  snprintf(path, sizeof path, "%s/ar64-%d-%d", a->outdir, a->run, rank);
  CHECK(write_file(path, in.ar64, DET_AR64 * sizeof(double)) == 0, "write %s", path);
  det_free(&in);
  free(rs);
  return RX_OK;
}

static void *load(const char *outdir, const char *what, int run, int rank, size_t want) {
  char path[512];
  size_t n = 0;
  snprintf(path, sizeof path, "%s/%s-%d-%d", outdir, what, run, rank);
  void *p = read_file(path, &n);
  assert_non_null(p);
  assert_int_equal(n, want);
  return p;
}

static void run_determinism(int W) {
  char outdir[256];
  int status[MAXW];
  snprintf(outdir, sizeof outdir, "%s/ft_test_comm_det.XXXXXX", test_ranks_tmpbase());
  assert_non_null(mkdtemp(outdir));
  for (int run = 0; run < 2; run++) {
    det_arg a = {.run = run, .outdir = outdir};
    group_opts g = {.world = W, .timeout_ms = 20000};
    run_group(&g, scenario_determinism, &a, status);
    test_ranks_expect_ok(W, status);
  }
  det_inputs in[MAXW];
  for (int r = 0; r < W; r++)
    assert_int_equal(det_make(r, W, &in[r]), 0);
  float *ar0 = load(outdir, "ar", 0, 0, DET_AR * sizeof(float));
  double *ar64_0 = load(outdir, "ar64", 0, 0, DET_AR64 * sizeof(double));
  for (int r = 0; r < W; r++) {
    float *rs[2], *ar[2];
    double *ar64[2];
    for (int run = 0; run < 2; run++) {
      rs[run] = load(outdir, "rs", run, r, DET_RS * sizeof(float));
      ar[run] = load(outdir, "ar", run, r, DET_AR * sizeof(float));
      ar64[run] = load(outdir, "ar64", run, r, DET_AR64 * sizeof(double));
    }
    /* the same bits on every run ... */
    assert_memory_equal(rs[0], rs[1], DET_RS * sizeof(float));
    assert_memory_equal(ar[0], ar[1], DET_AR * sizeof(float));
    assert_memory_equal(ar64[0], ar64[1], DET_AR64 * sizeof(double));
    /* ... and, for allreduce, on every rank */
    assert_memory_equal(ar[0], ar0, DET_AR * sizeof(float));
    assert_memory_equal(ar64[0], ar64_0, DET_AR64 * sizeof(double));
    /* reduce_scatter: chunk r summed in ring order r+1, r+2, ..., r (comm_gloo.cpp) */
    for (size_t i = 0; i < DET_RS; i++) {
      size_t j = (size_t)r * DET_RS + i;
      float want = in[(r + 1) % W].rs[j];
      for (int k = 2; k <= W; k++)
        want = want + in[(r + k) % W].rs[j];
      uint32_t wb, gb;
      memcpy(&wb, &want, 4);
      memcpy(&gb, &rs[0][i], 4);
      if (wb != gb)
        fail_msg("rank %d rs[%zu] = %a, ring order gives %a", r, i, rs[0][i], want);
    }
    for (int run = 0; run < 2; run++) {
      free(rs[run]);
      free(ar[run]);
      free(ar64[run]);
    }
  }
  /* allreduce is a sum (in some fixed order): within rounding of the true sum */
  for (size_t i = 0; i < DET_AR; i++) {
    double sum = 0, mag = 0;
    for (int r = 0; r < W; r++) {
      sum += in[r].ar[i];
      mag += fabs(in[r].ar[i]);
    }
    if (fabs(ar0[i] - sum) > 1e-6 * mag + 1e-30)
      fail_msg("ar[%zu] = %.9g, true sum %.9g", i, ar0[i], sum);
  }
  for (size_t i = 0; i < DET_AR64; i++) {
    double sum = 0, mag = 0;
    for (int r = 0; r < W; r++) {
      sum += in[r].ar64[i];
      mag += fabs(in[r].ar64[i]);
    }
    if (fabs(ar64_0[i] - sum) > 1e-14 * mag)
      fail_msg("ar64[%zu] = %.17g, true sum %.17g", i, ar64_0[i], sum);
  }
  free(ar0);
  free(ar64_0);
  for (int r = 0; r < W; r++)
    det_free(&in[r]);
  test_ranks_rm_tree(outdir);
}

static void test_determinism_w2(void **state) {
  run_determinism(2);
}
static void test_determinism_w4(void **state) {
  run_determinism(4);
}

/* ---- scenario: a peer dies mid-collective ------------------------------- */

enum { DEATH_TIMEOUT_MS = 3000, DEATH_SLACK_MS = 5000, DEATH_CHUNK = 1 << 18 };

typedef struct {
  int victim;
  int delay_ms;
  int sig; /* SIGKILL: the victim dies; SIGSTOP: it hangs with its sockets open */
  int op;  /* -1: cycle through allreduce, reduce_scatter, allgather; else only op */
} death_arg;

static void *suicide(void *p) {
  death_arg *a = p;
  usleep((useconds_t)a->delay_ms * 1000);
  kill(getpid(), a->sig);
  return NULL;
}

static int scenario_death(comm *c, int rank, int W, const char *scratch, void *arg) {
  death_arg *a = arg;
  float *send = calloc((size_t)W * DEATH_CHUNK, sizeof(float));
  float *recv = calloc((size_t)W * DEATH_CHUNK, sizeof(float));
  if (!send || !recv)
    return RX_NOMEM;
  if (rank == a->victim) {
    pthread_t t;
    if (pthread_create(&t, NULL, suicide, a) != 0)
      return RX_SETUP;
  }
  long long start = ft_now_ms();
  for (long it = 0;; it++) {
    long long t0 = ft_now_ms();
    int rc;
    switch (a->op >= 0 ? a->op : it % 3) {
    case 0:
      rc = comm_allreduce(c, send, (size_t)W * DEATH_CHUNK);
      break;
    case 1:
      rc = comm_reduce_scatter(c, send, recv, DEATH_CHUNK);
      break;
    default:
      rc = comm_allgather(c, send, recv, DEATH_CHUNK);
      break;
    }
    if (rc == FT_OK) {
      if (ft_now_ms() - start > 20000)
        return RX_NOFAIL; /* nobody died? */
      continue;
    }
    long long took = ft_now_ms() - t0;
    fprintf(stderr, "rank %d: iteration %ld failed after %lld ms: %s: %s\n", rank, it, took,
            ft_strerror(rc), ft_err_detail());
    CHECK(rc == FT_ECOMM || rc == FT_ETIMEDOUT, "rc %d", rc);
    if (took > DEATH_TIMEOUT_MS + DEATH_SLACK_MS)
      return RX_SLOW;
    /* the comm is now broken: refused at once, without the network */
    long long t1 = ft_now_ms();
    int rc2 = comm_barrier(c);
    CHECK(rc2 == FT_ECOMM, "after failure: rc %d", rc2);
    CHECK(strstr(ft_err_detail(), "failed earlier") != NULL, "detail: %s", ft_err_detail());
    CHECK(ft_now_ms() - t1 < 1000, "refusal took %lld ms", ft_now_ms() - t1);
    free(send);
    free(recv);
    return rc == FT_ECOMM ? RX_DIED_ECOMM : RX_DIED_ETIMEDOUT;
  }
}

/* Returns how many survivors saw FT_ETIMEDOUT. */
static int run_death(int W, int victim, int sig, int op) {
  int status[MAXW], timeouts = 0;
  death_arg a = {.victim = victim, .delay_ms = 400, .sig = sig, .op = op};
  group_opts g = {.world = W,
                  .timeout_ms = DEATH_TIMEOUT_MS,
                  .connect_timeout_ms = 20000,
                  .straggler = victim + 1};
  run_group(&g, scenario_death, &a, status);
  for (int r = 0; r < W; r++) {
    fprintf(stderr, "%s W=%d op=%d: rank %d status %d\n", sig == SIGKILL ? "kill" : "stop", W, op,
            r, status[r]);
    if (r == victim) {
      assert_int_equal(status[r], 128 + SIGKILL);
    } else {
      assert_true(status[r] == RX_DIED_ECOMM || status[r] == RX_DIED_ETIMEDOUT);
      timeouts += status[r] == RX_DIED_ETIMEDOUT;
    }
  }
  return timeouts;
}

static void test_peer_death_w2(void **state) {
  run_death(2, 1, SIGKILL, -1);
}
static void test_peer_death_w4(void **state) {
  run_death(4, 2, SIGKILL, -1);
}
/* The same, while only our own ring reduce-scatter runs. */
static void test_peer_death_reduce_scatter_w4(void **state) {
  run_death(4, 1, SIGKILL, 1);
}
/* A peer that hangs (stopped, sockets open) is only noticed by the timeout:
 * at least one survivor must report FT_ETIMEDOUT. */
static void test_peer_hang_w4(void **state) {
  assert_true(run_death(4, 3, SIGSTOP, -1) >= 1);
}

/* ---- scenario: nobody else shows up ------------------------------------- */

static int scenario_never(comm *c, int rank, int W, const char *scratch, void *arg) {
  return RX_WRONG; /* comm_gloo_new must not succeed */
}

static void test_rendezvous_timeout(void **state) {
  int status[MAXW];
  group_opts g = {.world = 2, .spawn = 1, .timeout_ms = 1000, .connect_timeout_ms = 500};
  run_group(&g, scenario_never, NULL, status);
  assert_int_equal(status[0], RX_DIED_ETIMEDOUT);
}

static void test_bad_options(void **state) {
  comm_kv kv = {0};
  comm *c = (comm *)1;
  comm_opts o = {.rank = 2, .world = 2, .bind_addr = "127.0.0.1", .timeout_ms = 100};
  char dir[256];
  snprintf(dir, sizeof dir, "%s/ft_test_comm_bad.XXXXXX", test_ranks_tmpbase());
  assert_non_null(mkdtemp(dir));
  assert_int_equal(comm_filestore_init(&kv, dir), FT_OK);
  assert_int_equal(comm_gloo_new(&o, &kv, &c), FT_EINVAL);
  assert_null(c);
  o.rank = 0;
  o.timeout_ms = 0;
  assert_int_equal(comm_gloo_new(&o, &kv, &c), FT_EINVAL);
  o.timeout_ms = 100;
  o.bind_addr = NULL;
  assert_int_equal(comm_gloo_new(&o, &kv, &c), FT_EINVAL);
  comm_free(NULL);
  comm_filestore_release(&kv);
  test_ranks_rm_tree(dir);
}

/* ---- the device half of comm.h on a Gloo comm, and comm_nccl_new -------- */

static void test_gloo_no_device(void **state) {
  char dir[256];
  comm_kv kv;
  comm *c = NULL;
  snprintf(dir, sizeof dir, "%s/ft_test_comm_nodev.XXXXXX", test_ranks_tmpbase());
  assert_non_null(mkdtemp(dir));
  assert_int_equal(comm_filestore_init(&kv, dir), FT_OK);
  comm_opts o = {.rank = 0, .world = 1, .bind_addr = "127.0.0.1", .timeout_ms = 5000};
  assert_int_equal(comm_gloo_new(&o, &kv, &c), FT_OK);
  comm_filestore_release(&kv);
  float x[4] = {1, 2, 3, 4};
  double d[2] = {1, 2};
  assert_int_equal(comm_is_device(c), 0);
  assert_int_equal(comm_is_device(NULL), 0);
  assert_int_equal(comm_dev_allgather_bf16(c, x, x + 2, 1, NULL), FT_EINVAL);
  assert_string_equal(ft_err_detail(),
                      "comm_dev_allgather_bf16: the gloo comm has no device collectives");
  assert_int_equal(comm_dev_reduce_scatter_f32(c, x, x + 2, 1, NULL), FT_EINVAL);
  assert_int_equal(comm_dev_allreduce_f32(c, x, 4, NULL), FT_EINVAL);
  assert_int_equal(comm_dev_allreduce_f64(c, d, 2, NULL), FT_EINVAL);
  assert_int_equal(comm_dev_poll(c), FT_EINVAL);
  assert_int_equal(comm_dev_wait(c, NULL, 100), FT_EINVAL);
  assert_int_equal(comm_dev_poll(NULL), FT_EINVAL);
  /* still healthy */
  assert_int_equal(comm_allreduce(c, x, 4), FT_OK);
  assert_true(x[3] == 4.0f);
  assert_int_equal(comm_barrier(c), FT_OK);
  /* comm_abort breaks it for good */
  comm_abort(c);
  comm_abort(c);
  comm_abort(NULL);
  assert_int_equal(comm_barrier(c), FT_ECOMM);
  assert_non_null(strstr(ft_err_detail(), "aborted"));
  assert_int_equal(comm_allreduce_f64(c, d, 2), FT_ECOMM);
  assert_int_equal(comm_dev_allreduce_f32(c, x, 4, NULL), FT_ECOMM);
  comm_free(c);
  test_ranks_rm_tree(dir);
}

static void test_nccl_new_options(void **state) {
  char dir[256];
  comm_kv kv;
  comm *c = (comm *)1;
  snprintf(dir, sizeof dir, "%s/ft_test_comm_nccl.XXXXXX", test_ranks_tmpbase());
  assert_non_null(mkdtemp(dir));
  assert_int_equal(comm_filestore_init(&kv, dir), FT_OK);
  comm_opts o = {.rank = 0, .world = 1, .timeout_ms = 1000};
#ifndef FT_HAVE_NCCL
  assert_int_equal(comm_nccl_new(&o, &kv, 0, &c), FT_ECONFIG);
  assert_null(c);
  assert_string_equal(ft_err_detail(), "this build has no NCCL (built without CUDA)");
#else
  /* refused before any CUDA call, so this runs without a GPU */
  o.rank = 1;
  assert_int_equal(comm_nccl_new(&o, &kv, 0, &c), FT_EINVAL);
  assert_null(c);
  o.rank = 0;
  o.timeout_ms = 0;
  assert_int_equal(comm_nccl_new(&o, &kv, 0, &c), FT_EINVAL);
  o.timeout_ms = 1000;
  assert_int_equal(comm_nccl_new(&o, &kv, -1, &c), FT_EINVAL);
  assert_int_equal(comm_nccl_new(&o, NULL, 0, &c), FT_EINVAL);
  assert_int_equal(comm_nccl_new(&o, &kv, 0, NULL), FT_EINVAL);
#endif
  comm_filestore_release(&kv);
  test_ranks_rm_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_options),    cmocka_unit_test(test_collectives_w2),
      cmocka_unit_test(test_collectives_w4), cmocka_unit_test(test_determinism_w2),
      cmocka_unit_test(test_determinism_w4), cmocka_unit_test(test_peer_death_w2),
      cmocka_unit_test(test_peer_death_w4),  cmocka_unit_test(test_peer_death_reduce_scatter_w4),
      cmocka_unit_test(test_peer_hang_w4),   cmocka_unit_test(test_rendezvous_timeout),
      cmocka_unit_test(test_gloo_no_device), cmocka_unit_test(test_nccl_new_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
