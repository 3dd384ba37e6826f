/*
 * fake_worker: a stand-in for the real worker, built only for tests: it
 * speaks the control protocol exactly as common/ft_wire.h describes, so it
 * doubles as the supervisor's protocol conformance test, without training.
 *
 *   fake_worker --connect HOST:PORT|fd:K --node I --slot J --store URI
 *               --runfile PATH [--steps N] [--set KEY=VALUE]... [--threads T]
 *
 * (the real worker's supervised command line). Behaviour: CHALLENGE ->
 * HELLO(gen 0, signed with $FT_RUN_TOKEN) -> WELCOME; heartbeats every
 * heartbeat_ms; waits for ASSIGN; a KV rendezvous (KV_SET "<rdzv>rank<r>",
 * KV_GET of every rank's key); steps restore_step+1 .. train.steps, rank 0
 * sending STEP; every checkpoint.every_steps steps and at the last one a real
 * shard (tensor "param/fake", f32, world x 16 elements, this rank's 16)
 * written with ckpt_store_submit (shard_writer) and reported by SHARD_SAVED
 * with the worker's envelope; then waits for STOP.
 *
 * Environment knobs (tests only):
 *   FAKE_STEP_MS=N        sleep per step (default 20)
 *   FAKE_DIE_NODE=I, FAKE_DIE_STEP=S [, FAKE_DIE_SIGNAL=SIG (default 9)]
 *                         node I's workers kill themselves at step S
 *   FAKE_HANG_NODE=I, FAKE_HANG_STEP=S
 *                         node I's workers stop sending anything at step S
 *   FAKE_SPIKE_BATCH=B    rank 0 reports 5x the loss at the step that
 *                         consumes global batch B (the skip rule of ASSIGN's
 *                         skips is applied, so a skipped batch never spikes)
 *   FAKE_NAN_BATCH=B      every rank sends FAULT nan at the step consuming
 *                         batch B and waits for STOP (as the real worker)
 *   FAKE_SAVE_FIRST=1     at checkpoint steps rank 0 saves its shard, waits
 *                         0.5 s, then sends STEP (a commit can precede STEP)
 *   FAKE_XID_NODE=I, FAKE_XID_STEP=S, FAKE_XID_ACTION=A [, FAKE_XID=N (79)]
 *                         node I slot 0 sends FAULT xid "xid=N action=A
 *                         pci=0000:II:00: ..." at step S and goes on
 *   FAKE_COLL_NODE=I, FAKE_COLL_STEP=S [, FAKE_COLL_DELAY_MS=D (2000)]
 *                         node I's workers wait D ms at step S (heartbeating),
 *                         send FAULT collective_timeout and exit 5
 *   FAKE_SLOW_RANK=R      rank R reports 5x step_ms (a straggler)
 *   FAKE_SKIP_SAVE_RANK=R, FAKE_SKIP_SAVE_STEP=S  rank R never reports its
 *                         shard of checkpoint step S (it trains on)
 *   FAKE_FORGE_HOST_STEP=S  rank 0 reports its shard of checkpoint step
 *                         S as a host's reference of its rank and the next
 *                         (both written): what only an agent may send
 *   FAKE_START_EXIT=C [, FAKE_START_EXIT_NODE=I]
 *                         after WELCOME, every worker (or node I's) sends FAULT
 *                         data (C = 3) or config and exits with code C,
 *                         saying "data.train: /fake/nodeI/...: no token
 *                         shards match" (a bad local disk, or the run's data)
 *   FAKE_GATE=FILE        no step is taken while FILE does not exist (the
 *                         worker heartbeats meanwhile): a test orders its
 *                         own action before a step-driven fault
 *   FAKE_DOCTOR_BAD=I[,J] node I's (and J's) doctor report another compute
 *                         hash than everyone else's (a node computing wrong bits)
 *   FAKE_DOCTOR_TURN_BAD=I  node I's reports after the first (the supervisor
 *                         asked again: doctor.spare_every_s) carry another hash
 *   FAKE_DOCTOR_HANG=I    node I never sends its first doctor report
 *   FAKE_DOCTOR_FAIL=I    node I's doctor report fails its memory check
 *   FAKE_DOCTOR_PLATFORM_NODE=I  node I reports another platform
 *   FAKE_FLOOD_NODE=I, FAKE_FLOOD_STEP=S [, FAKE_FLOOD_GETS=N (30)]
 *                         node I slot 0 at step S: KV_SET one 1 MiB key,
 *                         then N KV_GETs of it 15 times over (15 MiB an
 *                         answer) and 1 s without reading (a peer that asks
 *                         and never reads); then it goes on
 *   FAKE_ONCE_DIR=DIR     the xid, collective, nan and flood faults fire once
 *                         per test: a marker file DIR/<fault> records it
 * Every rank sends STEP (rank 0's carries the loss, the others' NaN; at
 * train.val_every steps rank 0's carries a validation loss, loss + 0.25);
 * rank 0 logs "fake_worker: step K batch B" for each step.
 *
 * Also: fake_worker --meta-get URI KEY prints the catalog record KEY (the
 * supervisor's persisted state) of store URI.
 *
 * Exit: 0 on STOP; 5 if the rendezvous times out (after FAULT); 6 when the
 * supervisor is lost (closed, or silent for heartbeat_timeout_s); 2 usage;
 * 1 other errors.
 */
#include "ckptstore.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_file.h"
#include "ft_runfile.h"
#include "ft_wire.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int g_fd = -1;
static ft_buf g_in;
static char g_run[128];
static uint64_t g_gen;
static double g_last_rx, g_last_hb, g_hb_s = 1.0, g_timeout_s = 10;
static int64_t g_last_step = -1;
static int g_hung;

static void die(int code, const char *what) {
  fprintf(stderr, "fake_worker: %s\n", what);
  exit(code);
}

static void send_msg(ft_msg *m) {
  if (g_hung)
    return;
  ft_buf b;
  ft_buf_init(&b);
  snprintf(m->run, sizeof m->run, "%s", g_run);
  if (m->type != FT_MSG_HELLO)
    m->gen = g_gen; /* 0 until ASSIGN: an idle spare */
  if (ft_wire_encode(m, &b))
    die(FT_EXIT_FAIL, ft_err_detail());
  if (ft_send_all(g_fd, b.data, b.len, "supervisor"))
    die(FT_EXIT_LOST, "supervisor lost (send)");
  ft_buf_release(&b);
}

/* Reads one message, waiting at most timeout_s; 1 got one, 0 none. Sends
 * heartbeats while waiting. */
static int recv_msg(ft_msg *m, double timeout_s) {
  double until = ft_now_s() + timeout_s;
  for (;;) {
    size_t flen;
    int r = ft_wire_frame_len(g_in.data, g_in.len, &flen);
    if (r < 0)
      die(FT_EXIT_FAIL, "bad frame from the supervisor");
    if (r == 1 && g_in.len >= flen) {
      if (ft_wire_decode(g_in.data, flen, m))
        die(FT_EXIT_FAIL, ft_err_detail());
      ft_buf_consume(&g_in, flen);
      g_last_rx = ft_now_s();
      return 1;
    }
    double now = ft_now_s();
    if (!g_hung && now - g_last_hb >= g_hb_s && g_last_rx > 0) {
      ft_msg hb;
      ft_msg_init(&hb, FT_MSG_HEARTBEAT);
      hb.heartbeat.step = g_last_step;
      send_msg(&hb);
      g_last_hb = now;
    }
    if (now - g_last_rx > g_timeout_s && g_last_rx > 0 && !g_hung)
      die(FT_EXIT_LOST, "supervisor silent for heartbeat_timeout_s");
    if (now >= until)
      return 0;
    double wait = until - now;
    if (wait > 0.05)
      wait = 0.05;
    struct pollfd p = {.fd = g_fd, .events = POLLIN};
    int pr = poll(&p, 1, (int)(wait * 1000) + 1);
    if (pr > 0) {
      if (ft_buf_reserve(&g_in, 65536))
        die(FT_EXIT_FAIL, "out of memory");
      ssize_t n = recv(g_fd, g_in.data + g_in.len, 65536, 0);
      if (n == 0)
        die(FT_EXIT_LOST, "supervisor closed the connection");
      if (n < 0 && errno != EINTR && errno != EAGAIN)
        die(FT_EXIT_LOST, "supervisor lost (recv)");
      if (n > 0)
        g_in.len += (size_t)n;
    }
  }
}

/* Handles a message that may come at any time; returns 1 if it was one. */
/* The node doctor's report (as the real worker's with doctor.on_join):
 * the same compute hash on every node, but FAKE_DOCTOR_BAD's (a node that
 * computes wrong numbers, or a comma-separated list of them) and, on a
 * check the supervisor asked for again, FAKE_DOCTOR_TURN_BAD's (a spare's
 * chip that went bad while it idled); FAKE_DOCTOR_FAIL=I: node I fails its
 * own memory check; FAKE_DOCTOR_PLATFORM_NODE=I: node I is of another
 * platform. */
static int g_node = -1;
static void send_msg(ft_msg *m);
static int env_int(const char *name, int dflt);
static void send_doctor(int again) {
  if (!again && env_int("FAKE_DOCTOR_HANG", -1) == g_node)
    return; /* its checks never finish (it heartbeats on) */
  char rep[1024], bads[64], me[24];
  snprintf(bads, sizeof bads, ",%s,", getenv("FAKE_DOCTOR_BAD") ? getenv("FAKE_DOCTOR_BAD") : "");
  snprintf(me, sizeof me, ",%d,", g_node);
  int bad_hash =
      strstr(bads, me) != NULL || (again && env_int("FAKE_DOCTOR_TURN_BAD", -1) == g_node);
  int mem_fail = env_int("FAKE_DOCTOR_FAIL", -1) == g_node;
  int other = env_int("FAKE_DOCTOR_PLATFORM_NODE", -1) == g_node;
  snprintf(rep, sizeof rep,
           "{\"ok\":%s,\"platform\":\"fake CPU%s\",\"ms\":1,\"checks\":["
           "{\"name\":\"compute\",\"ok\":true,\"hash\":\"%s\",\"gemm_gflops\":1},"
           "{\"name\":\"memory\",\"ok\":%s,\"mb\":1%s}]}",
           mem_fail ? "false" : "true", other ? " 2" : "",
           bad_hash ? "badbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadb"
                    : "00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee",
           mem_fail ? "false" : "true",
           mem_fail ? ",\"detail\":\"word 7 read 0x1, wrote 0x0 (fake)\"" : "");
  ft_msg d;
  ft_msg_init(&d, FT_MSG_DOCTOR);
  d.doctor.report = rep;
  send_msg(&d);
}

static int common_msg(const ft_msg *m) {
  if (m->type == FT_MSG_DOCTOR) { /* the supervisor asks again */
    send_doctor(1);
    return 1;
  }
  if (m->type == FT_MSG_STOP) {
    fprintf(stderr, "fake_worker: STOP (%s)\n", ft_stop_reason_name(m->stop.reason));
    exit(FT_EXIT_OK);
  }
  return m->type == FT_MSG_HEARTBEAT || m->type == FT_MSG_COMMITTED;
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

/* 1 the first time a one-shot fault fires in this test (FAKE_ONCE_DIR),
 * 0 afterwards; always 1 without FAKE_ONCE_DIR. */
static int once(const char *name) {
  const char *dir = getenv("FAKE_ONCE_DIR");
  if (!dir || !*dir)
    return 1;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wx");
  if (!f)
    return 0;
  fclose(f);
  return 1;
}

static void send_fault(ft_fault_kind kind, int64_t step, const char *detail) {
  ft_msg f;
  ft_msg_init(&f, FT_MSG_FAULT);
  f.fault.kind = kind;
  f.fault.step = step;
  f.fault.detail = detail;
  send_msg(&f);
}

/* FAKE_FLOOD: asks for 15 MiB n times, then reads nothing for 1 s. */
static void flood(const char *rdzv, int n) {
  static uint8_t big[FT_WIRE_MAX_VALUE];
  char key[300];
  snprintf(key, sizeof key, "%sflood", rdzv);
  ft_msg m;
  ft_msg_init(&m, FT_MSG_KV_SET);
  m.kv_set.key = key;
  m.kv_set.value = big;
  m.kv_set.value_len = sizeof big;
  send_msg(&m);
  const char *keys[15];
  for (int i = 0; i < 15; i++)
    keys[i] = key;
  for (int i = 0; i < n; i++) {
    ft_msg_init(&m, FT_MSG_KV_GET);
    m.kv_get.req = 1000u + (uint32_t)i;
    m.kv_get.timeout_ms = 1000;
    m.kv_get.keys = keys;
    m.kv_get.nkeys = 15;
    send_msg(&m);
  }
  fprintf(stderr, "fake_worker: flooding: %d KV_GETs of 15 MiB sent, reading nothing for 1 s\n", n);
  sleep(1);
}

/* The skip rule, step by step, as the real worker applies it. */
static int64_t skip_rule(const ft_wire_range *r, uint32_t n, int64_t b) {
  for (int moved = 1; moved;) {
    moved = 0;
    for (uint32_t i = 0; i < n; i++)
      if (b >= r[i].first && b < r[i].end) {
        b = r[i].end;
        moved = 1;
      }
  }
  return b;
}

/* Rank RANK's shard of STEP in the store, as an object (as the trainer,
 * worker/snap.c: the supervisor is sent its reference, and an agent makes
 * its host's of them). */
static ckpt_shard *put_shard(ckpt_store *st, int64_t step, int rank, int world) {
  float data[16];
  for (int i = 0; i < 16; i++)
    data[i] = (float)step + (float)(rank * 16 + i) * 0.001f;
  ckpt_part part = {.tensor = "param/fake",
                    .dtype = "f32",
                    .ndim = 1,
                    .shape = {(int64_t)world * 16},
                    .offset = (uint64_t)rank * 64,
                    .len = 64,
                    .data = data};
  ckpt_job *job = NULL;
  ckpt_shard *sh = NULL;
  if (ckpt_store_submit(st, g_run, step, rank, world, &part, 1, &job) || ckpt_job_wait(job, &sh) ||
      ckpt_store_put_shard(st, sh))
    die(FT_EXIT_FAIL, ft_err_detail());
  ckpt_job_free(job);
  return sh;
}

static void save_shard(ckpt_store *st, int64_t step, int rank, int world, double loss, int forge) {
  ckpt_shard *sh = put_shard(st, step, rank, world);
  if (forge && rank + 1 < world) { /* a host's reference: only an agent's is taken */
    ckpt_shard *two[2] = {sh, put_shard(st, step, rank + 1, world)}, *h = NULL;
    char *leaf = NULL;
    for (int k = 0; k < 2; k++) { /* as the agent is sent them: references */
      char *t = ckpt_shard_report_to_json(two[k]);
      ckpt_shard_free(two[k]);
      two[k] = NULL;
      if (!t || ckpt_shard_from_json(t, &two[k]))
        die(FT_EXIT_FAIL, t ? ft_err_detail() : "out of memory");
      free(t);
    }
    if (ckpt_host_ref_build(two, 2, &leaf, &h))
      die(FT_EXIT_FAIL, ft_err_detail());
    fprintf(stderr, "fake_worker: rank %d reports a host's reference of ranks %d..%d\n", rank, rank,
            rank + 1);
    free(leaf);
    ckpt_shard_free(two[0]);
    ckpt_shard_free(two[1]);
    sh = h;
  }
  char *sj = ckpt_shard_report_to_json(sh);
  char state[128];
  snprintf(state, sizeof state, "{\"step\":%" PRId64 ",\"fake\":true}", step);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "shard", sj);
  cJSON_AddStringToObject(o, "state", state);
  cJSON_AddStringToObject(o, "config", "{\"fake\":true}");
  cJSON_AddStringToObject(o, "metrics", "{}");
  cJSON_AddNumberToObject(o, "loss", loss);
  char *txt = cJSON_PrintUnformatted(o);
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SHARD_SAVED);
  m.shard_saved.step = step;
  m.shard_saved.rank = (uint32_t)rank;
  m.shard_saved.manifest = txt;
  send_msg(&m);
  free(txt);
  cJSON_Delete(o);
  free(sj);
  ckpt_shard_free(sh);
}

/* fake_worker --meta-get URI KEY: prints the supervisor's catalog record KEY
 * of store URI (tests read the persisted run state with it); exit 1 if absent. */
static int meta_get(const char *uri, const char *key) {
  ckpt_store *st = NULL;
  char *v = NULL;
  int rc = ckpt_store_open(uri, NULL, &st);
  if (!rc)
    rc = ckpt_store_get_meta(st, key, &v);
  if (rc)
    fprintf(stderr, "fake_worker: %s %s: %s\n", uri, key, ft_err_detail());
  else
    printf("%s\n", v);
  free(v);
  ckpt_store_free(st);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--meta-get"))
    return meta_get(argv[2], argv[3]);
  const char *connect_to = NULL, *store = NULL, *runfile = NULL, *steps = NULL;
  const char *sets[64];
  int nsets = 0, node = -1, slot = -1;
  static const struct option opts[] = {
      {"connect", 1, 0, 'c'}, {"node", 1, 0, 'n'},    {"slot", 1, 0, 's'},
      {"store", 1, 0, 'S'},   {"runfile", 1, 0, 'r'}, {"steps", 1, 0, 't'},
      {"set", 1, 0, 'e'},     {"threads", 1, 0, 'T'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'c':
      connect_to = optarg;
      break;
    case 'n':
      node = atoi(optarg);
      break;
    case 's':
      slot = atoi(optarg);
      break;
    case 'S':
      store = optarg;
      break;
    case 'r':
      runfile = optarg;
      break;
    case 't':
      steps = optarg;
      break;
    case 'e':
      if (nsets < 64)
        sets[nsets++] = optarg;
      break;
    case 'T': /* kernel threads: the fake worker computes nothing, says how many */
      fprintf(stderr, "fake worker: --threads %s\n", optarg);
      break;
    default:
      return 2;
    }
  }
  if (!connect_to || !store || !runfile || node < 0 || slot < 0)
    die(FT_EXIT_USAGE,
        "usage: fake_worker --connect H:P --node I --slot J --store URI --runfile PATH");
  ft_runfile rf;
  char err[1024];
  if (ft_runfile_load(runfile, &rf, err, sizeof err))
    die(FT_EXIT_USAGE, err);
  if (steps && ft_runfile_set(&rf, "train.steps", steps, err, sizeof err))
    die(FT_EXIT_USAGE, err);
  for (int i = 0; i < nsets; i++) {
    char key[256];
    const char *eq = strchr(sets[i], '=');
    if (!eq)
      die(FT_EXIT_USAGE, "--set KEY=VALUE");
    snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
    if (ft_runfile_set(&rf, key, eq + 1, err, sizeof err))
      die(FT_EXIT_USAGE, err);
  }
  snprintf(g_run, sizeof g_run, "%s", rf.run);
  g_timeout_s = rf.watchdog.heartbeat_timeout_s;
  const char *token = getenv(FT_WIRE_TOKEN_ENV);
  if (!token || ft_wire_token_check(token))
    die(FT_EXIT_USAGE, "no valid " FT_WIRE_TOKEN_ENV " in the environment");
  int step_ms = env_int("FAKE_STEP_MS", 20);
  int die_node = env_int("FAKE_DIE_NODE", -1), die_step = env_int("FAKE_DIE_STEP", -1);
  int die_sig = env_int("FAKE_DIE_SIGNAL", SIGKILL);
  int hang_node = env_int("FAKE_HANG_NODE", -1), hang_step = env_int("FAKE_HANG_STEP", -1);
  int spike_batch = env_int("FAKE_SPIKE_BATCH", -1), nan_batch = env_int("FAKE_NAN_BATCH", -1);
  int save_first = env_int("FAKE_SAVE_FIRST", 0);
  int xid_node = env_int("FAKE_XID_NODE", -1), xid_step = env_int("FAKE_XID_STEP", -1);
  int xid = env_int("FAKE_XID", 79);
  const char *xid_action = getenv("FAKE_XID_ACTION") ? getenv("FAKE_XID_ACTION") : "quarantine";
  int coll_node = env_int("FAKE_COLL_NODE", -1), coll_step = env_int("FAKE_COLL_STEP", -1);
  int coll_delay = env_int("FAKE_COLL_DELAY_MS", 2000), slow_rank = env_int("FAKE_SLOW_RANK", -1);
  int skip_rank = env_int("FAKE_SKIP_SAVE_RANK", -1),
      skip_step = env_int("FAKE_SKIP_SAVE_STEP", -1),
      forge_step = env_int("FAKE_FORGE_HOST_STEP", -1);
  int flood_node = env_int("FAKE_FLOOD_NODE", -1), flood_step = env_int("FAKE_FLOOD_STEP", -1);
  int flood_gets = env_int("FAKE_FLOOD_GETS", 30);

  /* connect (fd:K: the socket its agent handed it, as the worker takes it) */
  char host[64];
  const char *colon = strrchr(connect_to, ':');
  if (!strncmp(connect_to, "fd:", 3)) {
    g_fd = atoi(connect_to + 3);
    fcntl(g_fd, F_SETFD, FD_CLOEXEC);
    colon = NULL;
  } else if (!colon)
    die(FT_EXIT_USAGE, "--connect HOST:PORT");
  if (colon) {
    snprintf(host, sizeof host, "%.*s", (int)(colon - connect_to), connect_to);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
      die(FT_EXIT_USAGE, "--connect wants an IPv4 address");
    g_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (g_fd < 0 || connect(g_fd, (struct sockaddr *)&sin, sizeof sin) != 0)
      die(FT_EXIT_LOST, "cannot connect to the supervisor");
  }
  ft_buf_init(&g_in);

  /* handshake */
  ft_msg m;
  g_gen = 0;
  if (!recv_msg(&m, 10) || m.type != FT_MSG_CHALLENGE || strcmp(m.run, g_run) != 0)
    die(FT_EXIT_FAIL, "expected CHALLENGE of our run");
  uint8_t nonce[FT_WIRE_NONCE_LEN];
  memcpy(nonce, m.challenge.nonce, sizeof nonce);
  ft_msg_release(&m);
  ft_msg hello;
  ft_msg_init(&hello, FT_MSG_HELLO);
  snprintf(hello.run, sizeof hello.run, "%s", g_run);
  hello.gen = 0;
  hello.hello.node = (uint32_t)node;
  hello.hello.slot = (uint32_t)slot;
  hello.hello.pid = (uint32_t)getpid();
  if (ft_wire_hello_sign(&hello, token, nonce))
    die(FT_EXIT_FAIL, ft_err_detail());
  send_msg(&hello);
  for (;;) {
    if (!recv_msg(&m, 10))
      die(FT_EXIT_LOST, "no WELCOME");
    if (m.type == FT_MSG_WELCOME)
      break;
    common_msg(&m);
    char why[96];
    snprintf(why, sizeof why, "expected WELCOME, got %s", ft_msg_type_name(m.type));
    die(FT_EXIT_FAIL, why);
  }
  g_hb_s = m.welcome.heartbeat_ms / 1000.0;
  ft_msg_release(&m);

  /* a worker that cannot start: a data or configuration error of its own */
  const char *bad = getenv("FAKE_START_EXIT");
  int bad_node = env_int("FAKE_START_EXIT_NODE", -1);
  if (bad && *bad && (bad_node < 0 || bad_node == node)) {
    int code = atoi(bad);
    char msg[256];
    snprintf(msg, sizeof msg, "data.train: /fake/node%d/shard_*.bin: no token shards match", node);
    send_fault(code == FT_EXIT_DATA ? FT_FAULT_DATA : FT_FAULT_CONFIG, -1, msg);
    die(code, msg);
  }

  g_node = node;
  send_doctor(0);

  /* wait for ASSIGN (heartbeating at gen 0) */
  for (;;) {
    if (!recv_msg(&m, 1))
      continue;
    if (m.type == FT_MSG_ASSIGN)
      break;
    common_msg(&m);
    ft_msg_release(&m);
  }
  g_gen = m.gen;
  int rank = (int)m.assign.rank, world = (int)m.assign.world;
  int64_t restore = m.assign.restore_step;
  char rdzv[256];
  snprintf(rdzv, sizeof rdzv, "%.*s", (int)m.assign.rdzv_len, (const char *)m.assign.rdzv);
  uint32_t nskips = m.assign.nskips;
  ft_wire_range *skips = calloc(nskips + 1, sizeof *skips);
  if (!skips)
    die(FT_EXIT_FAIL, "out of memory");
  for (uint32_t i = 0; i < nskips; i++)
    skips[i] = m.assign.skips[i];
  ft_msg_release(&m);
  fprintf(stderr, "fake_worker: node %d slot %d: gen %" PRIu64 " rank %d/%d restore %" PRId64 "\n",
          node, slot, g_gen, rank, world, restore);
  for (uint32_t i = 0; i < nskips; i++)
    fprintf(stderr, "fake_worker: skip batches [%" PRId64 ", %" PRId64 ")\n", skips[i].first,
            skips[i].end);

  /* rendezvous through the KV store */
  char key[300], val[64];
  snprintf(key, sizeof key, "%srank%d", rdzv, rank);
  snprintf(val, sizeof val, "node%d.slot%d", node, slot);
  ft_msg kv;
  ft_msg_init(&kv, FT_MSG_KV_SET);
  kv.kv_set.key = key;
  kv.kv_set.value = (const uint8_t *)val;
  kv.kv_set.value_len = (uint32_t)strlen(val);
  send_msg(&kv);
  int nk = world < 64 ? world : 64;
  char(*keys)[300] = calloc((size_t)nk, sizeof *keys);
  const char **kp = calloc((size_t)nk, sizeof *kp);
  for (int r = 0; r < nk; r++) {
    snprintf(keys[r], sizeof keys[r], "%srank%d", rdzv, r);
    kp[r] = keys[r];
  }
  ft_msg_init(&kv, FT_MSG_KV_GET);
  kv.kv_get.req = 7;
  kv.kv_get.timeout_ms = 10000;
  kv.kv_get.keys = kp;
  kv.kv_get.nkeys = (uint32_t)nk;
  send_msg(&kv);
  for (;;) {
    if (!recv_msg(&m, 1))
      continue;
    if (m.type == FT_MSG_KV_VALUE)
      break;
    common_msg(&m);
    ft_msg_release(&m);
  }
  if (m.kv_value.req != 7 || m.kv_value.status != FT_KV_OK || m.kv_value.nvals != (uint32_t)nk) {
    ft_msg f;
    ft_msg_init(&f, FT_MSG_FAULT);
    f.fault.kind = FT_FAULT_COLLECTIVE_TIMEOUT;
    f.fault.step = restore;
    f.fault.detail = "rendezvous timed out";
    send_msg(&f);
    die(FT_EXIT_GANG, "rendezvous failed");
  }
  ft_msg_release(&m);
  free(keys);
  free(kp);

  /* train */
  ckpt_store *st = NULL;
  ckpt_store_opts so = {.shard_writer = 1, .threads = 1};
  if (ckpt_store_open(store, &so, &st))
    die(FT_EXIT_FAIL, ft_err_detail());
  int64_t every = rf.checkpoint.every_steps, last = rf.train.steps;
  /* the data position after the restore step: replay the rule from step 1
   * (the real worker keeps it in its checkpoint) */
  int64_t b = 0;
  for (int64_t k = 1; k <= restore; k++)
    b = skip_rule(skips, nskips, b) + 1;
  const char *gate = getenv("FAKE_GATE");
  for (int64_t step = restore < 0 ? 1 : restore + 1; step <= last; step++) {
    while (gate && *gate && access(gate, F_OK) != 0)
      if (recv_msg(&m, 0.02)) {
        common_msg(&m);
        ft_msg_release(&m);
      }
    b = skip_rule(skips, nskips, b);
    int64_t batch = b++;
    if (rank == 0)
      fprintf(stderr, "fake_worker: step %" PRId64 " batch %" PRId64 "\n", step, batch);
    if (batch == nan_batch && once("nan")) {
      send_fault(FT_FAULT_NAN, step, "non-finite loss or gradient norm");
      for (;;)
        if (recv_msg(&m, 1)) {
          common_msg(&m); /* exits on STOP */
          ft_msg_release(&m);
        }
    }
    if (node == xid_node && slot == 0 && step == xid_step && once("xid")) {
      char d[256];
      snprintf(d, sizeof d, "xid=%d action=%s pci=0000:%02x:00: fake Xid for a drill", xid,
               xid_action, node & 0xff);
      send_fault(FT_FAULT_XID, -1, d);
    }
    if (node == coll_node && step == coll_step && once(slot == 0 ? "coll" : "coll1")) {
      double until_c = ft_now_s() + coll_delay / 1000.0;
      while (ft_now_s() < until_c)
        if (recv_msg(&m, until_c - ft_now_s())) {
          common_msg(&m);
          ft_msg_release(&m);
        }
      send_fault(FT_FAULT_COLLECTIVE_TIMEOUT, step, "allreduce timed out (fake)");
      die(FT_EXIT_GANG, "collective timeout");
    }
    if (node == flood_node && slot == 0 && step == flood_step && once("flood"))
      flood(rdzv, flood_gets);
    if (node == die_node && step == die_step) {
      fprintf(stderr, "fake_worker: dying with signal %d at step %" PRId64 "\n", die_sig, step);
      raise(die_sig);
    }
    if (node == hang_node && step == hang_step) {
      fprintf(stderr, "fake_worker: hanging at step %" PRId64 "\n", step);
      g_hung = 1;
      for (;;)
        pause();
    }
    double until = ft_now_s() + step_ms / 1000.0;
    while (recv_msg(&m, until - ft_now_s() > 0 ? until - ft_now_s() : 0)) {
      common_msg(&m);
      ft_msg_release(&m);
    }
    double loss = 5.0 / (1.0 + 0.01 * (double)step);
    if (batch == spike_batch)
      loss *= 5;
    g_last_step = step;
    int ckpt = ((every > 0 && step % every == 0) || step == last) &&
               !(rank == skip_rank && step == skip_step);
    if (ckpt && save_first && rank == 0) {
      save_shard(st, step, rank, world, loss, step == forge_step && rank == 0);
      double until_s = ft_now_s() + 0.5;
      while (ft_now_s() < until_s)
        if (recv_msg(&m, until_s - ft_now_s())) {
          common_msg(&m);
          ft_msg_release(&m);
        }
    }
    ft_msg sm;
    ft_msg_init(&sm, FT_MSG_STEP);
    sm.step.step = step;
    sm.step.loss = rank == 0 ? loss : NAN;
    sm.step.grad_norm = 1.0;
    sm.step.tokens_per_s = 1000.0;
    sm.step.step_ms = rank == slow_rank ? 5.0 * step_ms : step_ms;
    int64_t ve = rf.train.val_every;
    sm.step.val_loss = rank == 0 && ve > 0 && step % ve == 0 ? loss + 0.25 : NAN;
    send_msg(&sm);
    if (ckpt && !(save_first && rank == 0))
      save_shard(st, step, rank, world, loss, step == forge_step && rank == 0);
  }
  /* wait for STOP */
  for (;;) {
    if (recv_msg(&m, 1)) {
      common_msg(&m);
      ft_msg_release(&m);
    }
  }
}
