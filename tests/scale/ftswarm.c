/*
 * ftswarm: thousands of simulated workers in one process, each a real TCP
 * connection to a real `supervise`, speaking the control protocol exactly as
 * the worker does (common/ft_wire.h), so that one supervisor can be measured
 * at the rank counts of a large cluster (16,384 ranks on this 2-core
 * machine) and its protocol checked at that scale.
 *
 * Two modes:
 *
 *   ftswarm serve --socket PATH [options]     the swarm: one epoll loop
 *   ftswarm_attach PATH SLOTS WORKER_ARGV...  one simulated host
 *                                             (ftswarm_attach.c: libc only,
 *                                             so 2,048 of them start fast)
 *
 * supervise starts the hosts: its run file has the command launcher with a
 * per-node command, nodes.command: "ftswarm_attach PATH {slots} {argv}"
 * (a command naming {slots} starts a node's workers itself). The attach
 * process is the node's process for the supervisor (it waits for it, signals
 * it, kills its group); it hands its node number, slots, address and token
 * (FT_RUN_TOKEN, never argv) to the swarm over the unix socket PATH and
 * waits. The swarm then runs the node's SLOTS workers. When they have all
 * exited (STOP) it tells the attach process its exit code; when the attach
 * process dies (the supervisor killed the node), the swarm drops the node's
 * connections, as a dead host's would be.
 *
 * Each simulated worker: CHALLENGE -> HELLO (gen 0, HMAC with the token) ->
 * WELCOME; its node doctor report (a passing one, the same compute hash on
 * every node); heartbeats every WELCOME interval, each echo checked (seq,
 * step); ASSIGN -> the NCCL path's rendezvous (rank 0 KV_SET
 * "<rdzv>nccl_id", 128 bytes; the others KV_GET it and check its length);
 * once every rank of the generation is through, a step every --step-ms:
 * STEP from every rank (rank 0's with the loss), and every --ckpt-every
 * steps SHARD_SAVED from every rank with the worker's envelope around a real
 * shard manifest (ckpt_shard_to_json) for a GPT-2-shaped model of --layers x
 * --embd (default 32 x 4096: 6.7e9 parameters) sharded over the world as the
 * FSDP engine shards it (worker/shardmap.h: params, adam_m, adam_v of every
 * group), its chunks real objects of the store (zero-filled state, so the
 * store holds one object per chunk length); COMMITTED checked against the
 * steps saved; STOP -> the worker exits 0. Anything the supervisor sends
 * that the protocol does not allow (a frame that does not decode, a type a
 * supervisor may not send, an ASSIGN that does not move the generation
 * forward, an echo of a beat never sent, a KV_VALUE for no request, a
 * COMMITTED for a step nobody saved) is a conformance error: counted,
 * printed, and the swarm exits 1.
 *
 * The scenario (serve): wait for the gang (--world ranks ASSIGNed and
 * stepping); --steady seconds of steady state (and --commits checkpoints
 * committed), sampling the supervisor's
 * CPU and resident memory (--sup-pid) and the growth of --grow-paths (the
 * event log, the catalog); then --faults, one at a time, each after the
 * previous recovery (the new gang's first step): "silent" (a random rank
 * stops sending and reading: a hung process), "host" (every rank of a
 * random gang node at once: a host that lost power, its process still
 * there), "drop" (a random gang node's process is SIGKILLed: its
 * connections reset). For each: detection = injection to the earliest STOP
 * any other gang worker receives (the kernel's receive time of its bytes on
 * this host, SO_TIMESTAMPNS: when a worker process would have it, not when
 * this one loop over 16,384 sockets got to it); the spread = that STOP to
 * the last worker's (stop_spread_ms); recovery = the earliest STOP to the
 * new generation's last ASSIGN, and to its first step. Checkpoints: the last SHARD_SAVED of a
 * step written to its socket to the first COMMITTED of that step. The
 * figures go to stdout and, as JSON, to --out.
 *
 * --agents 1 (supervise's nodes.agent): each simulated host is its agent
 * (worker/agent.c) as well: one connection for the host (CHALLENGE, HELLO
 * with slot FT_WIRE_AGENT_SLOT, WELCOME, SLOT open for each slot), every
 * worker's frames inside RELAY on it (each worker still has its own
 * CHALLENGE and HMAC HELLO), one HOSTBEAT per heartbeat interval carrying
 * every slot's last beat and its age (a silent worker's age grows; the
 * beats of a new generation go at the end of the pass, the host's in one
 * HOSTBEAT of them only), the supervisor's host frames (ASSIGN, STOP
 * rejoin, COMMITTED once for the host: "host_frames" in the JSON, and
 * "relayed_frames" the same kinds that came in RELAYs) handed to each
 * slot's worker, a worker's exit told with SLOT
 * exited, and the agent's connection closed when its last worker ends. A
 * "host" fault silences the agent too; a "drop" closes its connection. Its
 * checkpoints are its agent's (worker/agent_ckpt.c): each slot's shard
 * object, one leaf naming them (a host's reference, ckpt_host_ref_build)
 * and one SHARD_SAVED of the host on the agent's connection ("host_refs"
 * in the JSON counts them); a host with a slot not in the checkpoint
 * reports rank by rank.
 *
 * Exit: 0 every fault detected and recovered, no conformance error; 1
 * otherwise; 2 usage.
 */
#include "ckpt_int.h"
#include "ckptstore.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_gpt2.h"
#include "ft_wire.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 32768
#define MAX_FAULTS 256
#define CHALLENGE_WAIT_S 5.0

/* ---- serve: the swarm ------------------------------------------------------ */

enum { W_CONNECTING, W_HELLO, W_IDLE, W_RDZV, W_READY, W_GONE };

typedef struct sw_worker {
  int fd, node, slot, st;
  int silent;     /* a hung process: sends and reads nothing */
  ft_buf in, out; /* received, not yet decoded; encoded, not yet written */
  uint64_t gen;   /* the generation its frames carry */
  uint64_t agen;  /* the generation of its last ASSIGN (0: none) */
  int rank, world;
  int64_t step; /* last completed step (-1: none) */
  uint32_t seq;
  double hb_s, next_beat;
  uint32_t kvreq; /* the KV_GET in flight (0: none) */
  char prefix[64];
  int64_t shard_step; /* a SHARD_SAVED of this step not yet written out (-1) */
  double beat_t;      /* --agents: when it last beat to its agent (0: never) */
  uint64_t beat_gen;  /* --agents: the generation of its last beat */
  int fresh;          /* --agents: that beat is of a new generation, not yet told */
} sw_worker;

/* --agents: the node's agent (worker/agent.c) as the swarm plays it */
enum { A_NONE, A_CONNECTING, A_HELLO, A_UP };

typedef struct sw_node {
  int afd; /* the attach process's socket; -1: none */
  pid_t pid;
  int slots, nexited, exit_code;
  sw_worker *w;
  /* --agents: one connection for the node's slots (fd -1: none) */
  int fd, ast, silent;
  ft_buf in, out;
  double hb_s, next_hb;
  uint32_t seq;
  int fresh; /* a slot's beat of a new generation waits for this pass's end */
} sw_node;

/* Tags of epoll events: kind in the top bits, an index below. */
#define TAG_LISTEN 0
#define TAG_ATTACH 1
#define TAG_WORKER 2
#define TAG_AGENT 3
#define TAG(kind, i) (((uint64_t)(kind) << 32) | (uint32_t)(i))

typedef struct fault {
  char kind[8]; /* silent | host | drop */
  int node, rank;
  uint64_t gen;                           /* the generation it hit */
  double t_inject, t_assigned, t_stepped; /* 0: not yet */
  double t_stop, t_told;                  /* the first and the last worker's reaction */
} fault;

static struct {
  /* options */
  const char *sock_path, *out_path, *grow[4];
  int ngrow;
  double step_s, steady_s, settle_s, timeout_s;
  int ckpt_every, world_want, layers, embd, seed;
  int min_commits; /* the steady state lasts until this many commits too */
  pid_t sup_pid;
  const char *sup_pid_file; /* read when the steady state starts */
  const char *t0_file;      /* supervise's start, wall clock s (none: the first attach) */
  /* state */
  int ep, lfd;
  char run[FT_WIRE_MAX_RUN + 1], token[FT_WIRE_TOKEN_HEX + 1], store_uri[4096];
  struct sockaddr_in sup;
  sw_node nodes[MAX_NODES];
  int nnodes_seen;
  int fresh_nodes[MAX_NODES]; /* --agents: nodes with fresh beats (agent_fresh_beats) */
  int nfresh;
  /* --agents: the supervisor's frames for every worker of a host, as host
   * frames (ft_wire.h, version 12) and as RELAYs: ASSIGN, STOP rejoin, COMMITTED */
  long host_frames[3], relayed_frames[3];
  /* the current generation */
  uint64_t gen;
  int world, nassign, nready, training;
  sw_worker **byrank;
  int64_t step;
  double next_step_t, t_first_assign, t_all_assign, t_first_step;
  /* figures */
  double t_first_attach, formation_s;
  long conformance, lost, reconnects, rejoins, saves_skipped;
  fault faults[MAX_FAULTS];
  int nfaults, cur_fault;
  int64_t saved_step[64]; /* steps saved (a ring) and their flush/commit times */
  double saved_flushed[64], saved_committed[64];
  int shard_unflushed;
  int64_t save_step; /* the checkpoint whose SHARD_SAVED are going out (-1: none) */
  int save_next;     /* its next rank */
  uint64_t save_gen;
  double commit_ms[4096];
  int ncommit, steady_commits;
  /* the model's shard layout */
  ft_gpt2_dims dims;
  ckpt_store *store;
  int inline_shards;  /* 1: SHARD_SAVED carries the whole shard (no shard objects) */
  uint64_t host_refs; /* SHARD_SAVED of a whole host sent (under agents) */
  int no_host_refs;   /* --host-refs 0: agents send their slots' reports rank by rank */
  int agents;         /* 1: one agent per node (supervise's nodes.agent) */
  int pool_fd;        /* nodes.launch_once: the pool's one attach process (-1: none) */
  struct zref {
    uint64_t len;
    ckpt_shard *sh; /* a shard of one part of len zero bytes: its chunks */
  } zrefs[512];
  int nzrefs;
} g;

static void bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ftswarm: conformance: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  g.conformance++;
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void ep_mod_node(sw_node *nd) {
  if (nd->fd < 0)
    return;
  struct epoll_event e = {.events = (nd->silent ? 0u : EPOLLIN) | (nd->out.len ? EPOLLOUT : 0u),
                          .data.u64 = TAG(TAG_AGENT, (int)(nd - g.nodes))};
  epoll_ctl(g.ep, EPOLL_CTL_MOD, nd->fd, &e);
}

static void ep_mod(sw_worker *w) {
  if (g.agents) /* a silent worker's agent still reads: the agent is not hung */
    return;
  if (w->fd < 0)
    return;
  struct epoll_event e = {.events = (w->silent ? 0u : EPOLLIN) | (w->out.len ? EPOLLOUT : 0u),
                          .data.u64 = TAG(TAG_WORKER, w->node * 256 + w->slot)};
  epoll_ctl(g.ep, EPOLL_CTL_MOD, w->fd, &e);
}

static void flush_out(sw_worker *w);
static void flush_node(sw_node *nd);

/* Its connection is up: its own, or its agent's. */
static int linked(const sw_worker *w) {
  return g.agents ? g.nodes[w->node].fd >= 0 && w->st != W_GONE : w->fd >= 0;
}

static void encode_or_die(const ft_msg *m, ft_buf *b) {
  if (ft_wire_encode(m, b)) {
    fprintf(stderr, "ftswarm: encode %s: %s\n", ft_msg_type_name(m->type), ft_err_detail());
    exit(1);
  }
}

/* A frame of the agent's own on its connection. */
static void agent_send(sw_node *nd, ft_msg *m) {
  if (nd->fd < 0 || nd->silent)
    return;
  snprintf(m->run, sizeof m->run, "%s", g.run);
  size_t before = nd->out.len;
  encode_or_die(m, &nd->out);
  if (!before)
    flush_node(nd);
}

/* A worker's frame: on its own connection, or inside a RELAY on its
 * agent's. */
static void send_msg(sw_worker *w, ft_msg *m) {
  sw_node *nd = &g.nodes[w->node];
  if ((g.agents ? nd->fd : w->fd) < 0 || w->silent)
    return;
  snprintf(m->run, sizeof m->run, "%s", g.run);
  if (m->type != FT_MSG_HELLO)
    m->gen = w->gen;
  if (g.agents) {
    static ft_buf inner;
    ft_buf_reset(&inner);
    encode_or_die(m, &inner);
    ft_msg r;
    ft_msg_init(&r, FT_MSG_RELAY);
    r.relay.slot = (uint32_t)w->slot;
    r.relay.frame = inner.data;
    r.relay.frame_len = (uint32_t)inner.len;
    agent_send(nd, &r);
    return;
  }
  size_t before = w->out.len;
  encode_or_die(m, &w->out);
  if (!before)
    flush_out(w);
}

/* ---- the node's workers exit ---- */

static void worker_close(sw_worker *w) {
  if (w->fd >= 0) {
    epoll_ctl(g.ep, EPOLL_CTL_DEL, w->fd, NULL);
    close(w->fd);
    w->fd = -1;
  }
  if (w->shard_step >= 0) {
    w->shard_step = -1;
    g.shard_unflushed--;
  }
  ft_buf_release(&w->in);
  ft_buf_release(&w->out);
}

static void tell_attach(sw_node *nd, const char *line) {
  if (nd->afd < 0)
    return;
  ssize_t r = write(nd->afd, line, strlen(line));
  (void)r;
  epoll_ctl(g.ep, EPOLL_CTL_DEL, nd->afd, NULL);
  close(nd->afd);
  nd->afd = -1;
}

/* The supervisor's reaction to the fault in progress, at each other gang
 * worker of the generation the fault hit: a STOP, a closed connection or a
 * killed node process (whichever comes first; the STOP may still be unread
 * in a socket when the node's process is killed). t_stop is the earliest
 * and t_told the latest over those workers. The earliest is a minimum, not
 * the first one this loop handles: the loop reads its sockets in epoll's
 * order, not in the order the STOPs arrived, and the supervisor's STOPs to
 * 16,384 workers go out over tens of milliseconds. */
/* When the bytes being handled reached this host (the kernel's receive
 * timestamp, SO_TIMESTAMPNS, on our clock), or 0 outside a read: a worker
 * is a process of its own that reads its socket at once, where this one
 * loop reads 16,384 in turn, so the STOP's arrival is what a worker would
 * see, not when the swarm's loop came to it (150-300 ms later at 16,384
 * ranks on two cores). */
static double g_rx_s;

static void reaction(const sw_worker *w) {
  if (g.cur_fault >= g.nfaults)
    return;
  fault *f = &g.faults[g.cur_fault];
  if (!f->t_inject || f->t_assigned || w->gen != f->gen || w->node == f->node)
    return;
  double t = g_rx_s > 0 ? g_rx_s : ft_now_s();
  if (!f->t_stop || t < f->t_stop)
    f->t_stop = t;
  if (t > f->t_told)
    f->t_told = t;
}

/* Worker w ends with code: its node's process ends with the first non-zero
 * code once every slot has. */
static void agent_close(sw_node *nd) {
  if (nd->fd >= 0) {
    epoll_ctl(g.ep, EPOLL_CTL_DEL, nd->fd, NULL);
    close(nd->fd);
    nd->fd = -1;
  }
  nd->ast = A_NONE;
  ft_buf_release(&nd->in);
  ft_buf_release(&nd->out);
}

/* Worker w ends with wait status st (exit code code << 8, or a signal). */
static void worker_end(sw_worker *w, int st) {
  if (w->st == W_GONE)
    return;
  reaction(w);
  worker_close(w);
  w->st = W_GONE;
  sw_node *nd = &g.nodes[w->node];
  int code = (st & 0x7f) ? 128 + (st & 0x7f) : (st >> 8) & 0xff;
  if (g.agents) { /* its agent reaps it and says so at once */
    ft_msg sl;
    ft_msg_init(&sl, FT_MSG_SLOT);
    sl.slot.slot = (uint32_t)w->slot;
    sl.slot.event = FT_SLOT_EXITED;
    sl.slot.status = st;
    sl.slot.pid = (uint32_t)nd->pid + 1 + (uint32_t)w->slot;
    agent_send(nd, &sl);
  }
  if (code && !nd->exit_code)
    nd->exit_code = code;
  /* an agent outlives its workers (the next ones start on it): the node's
   * process ends with the agent (agent-level STOP) */
  if (++nd->nexited == nd->slots && !g.agents) {
    char line[32];
    snprintf(line, sizeof line, "exit %d\n", nd->exit_code);
    tell_attach(nd, line);
  }
}

static void worker_exit(sw_worker *w, int code) {
  worker_end(w, code << 8);
}

static void worker_start(sw_node *nd, int j);

/* The node's process died (killed by the supervisor, or by a "drop"): its
 * connections go with it. */
static void node_dead(sw_node *nd) {
  if (nd->afd >= 0) {
    epoll_ctl(g.ep, EPOLL_CTL_DEL, nd->afd, NULL);
    close(nd->afd);
    nd->afd = -1;
  }
  agent_close(nd);
  for (int j = 0; j < nd->slots; j++)
    if (nd->w[j].st != W_GONE) {
      reaction(&nd->w[j]);
      worker_close(&nd->w[j]);
      nd->w[j].st = W_GONE;
    }
}

/* ---- shard manifests ---- */

/* The chunks of len zero bytes, written to the store once. */
static const ckpt_shard *zero_chunks(uint64_t len) {
  for (int i = 0; i < g.nzrefs; i++)
    if (g.zrefs[i].len == len)
      return g.zrefs[i].sh;
  if (g.nzrefs == (int)(sizeof g.zrefs / sizeof g.zrefs[0]))
    return NULL;
  if (!g.store) {
    ckpt_store_opts o = {.shard_writer = 1};
    if (ckpt_store_open(g.store_uri, &o, &g.store)) {
      fprintf(stderr, "ftswarm: store %s: %s\n", g.store_uri, ft_err_detail());
      exit(1);
    }
  }
  void *zero = calloc(1, len ? len : 1);
  ckpt_part p = {.tensor = "zeros",
                 .dtype = "u8",
                 .ndim = 1,
                 .shape = {(int64_t)len},
                 .offset = 0,
                 .len = len,
                 .data = zero};
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  if (!zero || ckpt_store_submit(g.store, "ftswarm-zeros", 0, 0, 1, &p, 1, &j) ||
      ckpt_job_wait(j, &sh)) {
    fprintf(stderr, "ftswarm: writing a zero chunk of %" PRIu64 " bytes: %s\n", len,
            ft_err_detail());
    exit(1);
  }
  ckpt_job_free(j);
  free(zero);
  g.zrefs[g.nzrefs].len = len;
  g.zrefs[g.nzrefs].sh = sh;
  return g.zrefs[g.nzrefs++].sh;
}

static const char *const KINDS[3] = {"param", "adam_m", "adam_v"};

/* What ckpt_store_put_shard does on a worker's host, for the swarm's
 * store ("local:DIR"): the shard's text as the object shards/<its SHA-256>
 * (temp file and rename, no fsync: on a real gang 16,384 hosts write their
 * own; here one process would write them all), then sh becomes a stored
 * shard, whose JSON is its reference. Its chunks (the zero chunks) were
 * written (and so freshened) at the swarm's start, well within the GC's
 * grace. 0, or -1 with a message (the swarm then sends the shard itself). */
static int put_object(const uint8_t *hash, const char *text) {
  if (strncmp(g.store_uri, "local:", 6) != 0)
    return -1;
  size_t n = strlen(text);
  char hex[CKPT_HEX_LEN + 1], path[4400], tmp[4500];
  const char *dir = g.store_uri + 6;
  if (strlen(dir) > 4000)
    return -1;
  ckpt_hex(hash, hex);
  snprintf(path, sizeof path, "%.4000s/" CKPT_OBJ_SHARDS, dir);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%.4000s/" CKPT_OBJ_SHARDS "%s", dir, hex);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  int ok = f && fwrite(text, 1, n, f) == n;
  if (f && fclose(f) != 0)
    ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    fprintf(stderr, "ftswarm: writing %s: %s\n", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

static int put_shard_object(ckpt_shard *sh, const char *text) {
  if (ckpt_sha256(text, strlen(text), sh->object) || put_object(sh->object, text))
    return -1;
  ckpt_shard_add_up(sh);
  sh->sum.base_step = -1;
  sh->sum.new_bytes = 0;
  sh->has_object = 1;
  return 0;
}

/* Rank r's shard manifest at step: its object's reference once the object
 * is written (as a gang worker's, worker/snap.c), the shard itself with
 * --inline-shards or when the write failed. malloc'd. The layout is
 * worker/shardmap.h's: group g padded to a multiple of the world, rank r
 * owns [r*S, (r+1)*S) of it, the real part of that is its part of
 * "param/<g>", "adam_m/<g>" and "adam_v/<g>". */
static char *shard_text(int rank, int world, int64_t step) {
  int ng = ft_gpt2_ngroups(&g.dims);
  ckpt_tensor parts[3 * 1100];
  char names[3 * 1100][40];
  int np = 0;
  for (int k = 0; k < 3; k++)
    for (int gi = 0; gi < ng; gi++) {
      size_t n = ft_gpt2_group_numel(&g.dims, gi), S = (n + (size_t)world - 1) / (size_t)world;
      size_t b = (size_t)rank * S, cnt = b >= n ? 0 : (n - b < S ? n - b : S);
      if (!cnt)
        continue;
      char gname[32];
      ft_gpt2_group_name(&g.dims, gi, gname, sizeof gname);
      snprintf(names[np], sizeof names[np], "%s/%s", KINDS[k], gname);
      const ckpt_shard *z = zero_chunks(cnt * 4);
      ckpt_tensor *t = &parts[np];
      memset(t, 0, sizeof *t);
      t->name = names[np];
      snprintf(t->dtype, sizeof t->dtype, "f32");
      t->ndim = 1;
      t->shape[0] = (int64_t)n;
      t->offset = b * 4;
      t->len = cnt * 4;
      t->nchunks = t->cap = z->parts[0].nchunks;
      t->chunks = malloc(sizeof *t->chunks * (size_t)t->nchunks);
      for (int c = 0; c < t->nchunks; c++) {
        t->chunks[c] = z->parts[0].chunks[c];
        t->chunks[c].offset += t->offset;
        t->chunks[c].chain = NULL;
        t->chunks[c].depth = 0;
      }
      np++;
    }
  ckpt_shard sh = {
      .run = g.run, .step = step, .rank = rank, .world = world, .parts = parts, .nparts = np};
  char *sj = ckpt_shard_to_json(&sh);
  if (sj && !g.inline_shards && put_shard_object(&sh, sj) == 0) {
    free(sj); /* the reference travels, as a gang worker's does (worker/snap.c) */
    sj = ckpt_shard_report_to_json(&sh);
  }
  for (int i = 0; i < np; i++)
    free(parts[i].chunks);
  return sj;
}

/* The worker's SHARD_SAVED envelope around a shard's text (rank 0's holds
 * the state and config). malloc'd. */
static char *wrap_envelope(const char *sj, int rank, int64_t step) {
  cJSON *o = cJSON_CreateObject();
  char state[96];
  snprintf(state, sizeof state, "{\"step\":%" PRId64 ",\"swarm\":true}", step);
  cJSON_AddStringToObject(o, "shard", sj);
  cJSON_AddStringToObject(o, "state", rank == 0 ? state : "{}");
  cJSON_AddStringToObject(o, "config", rank == 0 ? "{\"swarm\":true}" : "{}");
  cJSON_AddStringToObject(o, "metrics", "{}");
  cJSON_AddNumberToObject(o, "loss", 3.0);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

/* Rank r's SHARD_SAVED text at step. malloc'd. */
static char *envelope(int rank, int world, int64_t step) {
  char *sj = shard_text(rank, world, step);
  char *txt = sj ? wrap_envelope(sj, rank, step) : NULL;
  free(sj);
  return txt;
}

/* ---- the protocol, per worker ---- */

static void send_doctor(sw_worker *w) {
  ft_msg d;
  ft_msg_init(&d, FT_MSG_DOCTOR);
  d.doctor.report = "{\"ok\":true,\"platform\":\"swarm CPU\",\"ms\":1,\"checks\":["
                    "{\"name\":\"compute\",\"ok\":true,\"hash\":"
                    "\"5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a\","
                    "\"gemm_gflops\":1}]}";
  send_msg(w, &d);
}

static void beat(sw_worker *w, double now) {
  if (g.agents) {
    /* to its agent, which echoes it and tells the supervisor in its next
     * HOSTBEAT; one of a new generation (a rejoin's acknowledgement) the
     * agent tells at the end of this pass, its host's in one HOSTBEAT
     * (agent_fresh_beats) */
    w->beat_t = now;
    w->seq++;
    w->next_beat = now + w->hb_s;
    if (w->gen != w->beat_gen) {
      sw_node *nd = &g.nodes[w->node];
      w->beat_gen = w->gen;
      w->fresh = 1;
      if (!nd->fresh++)
        g.fresh_nodes[g.nfresh++] = w->node;
    }
    return;
  }
  w->beat_t = now;
  w->beat_gen = w->gen;
  ft_msg hb;
  ft_msg_init(&hb, FT_MSG_HEARTBEAT);
  hb.heartbeat.step = w->step;
  hb.heartbeat.seq = ++w->seq;
  send_msg(w, &hb);
  w->next_beat = now + w->hb_s;
}

/* A new generation's first ASSIGN seen: it replaces the current one. */
static void new_gen(uint64_t gen, int world, double now) {
  free(g.byrank);
  g.byrank = calloc((size_t)world, sizeof *g.byrank);
  g.gen = gen;
  g.world = world;
  g.nassign = g.nready = g.training = 0;
  g.t_first_assign = now;
  g.t_all_assign = g.t_first_step = 0;
}

static void ready(sw_worker *w, double now) {
  w->st = W_READY;
  if (w->gen == g.gen && ++g.nready == g.world) {
    g.training = 1;
    g.next_step_t = now + g.step_s;
    g.step = g.byrank[0] ? g.byrank[0]->step : -1;
  }
}

static void on_assign(sw_worker *w, const ft_msg *m, double now) {
  /* a rejoined worker already carries the new generation (STOP rejoin) */
  if (m->gen <= w->agen || m->gen < w->gen || m->assign.rank >= m->assign.world) {
    bad("node %d slot %d: ASSIGN of generation %" PRIu64 " after %" PRIu64, w->node, w->slot,
        m->gen, w->agen > w->gen ? w->agen : w->gen);
    return;
  }
  if (m->gen > g.gen)
    new_gen(m->gen, (int)m->assign.world, now);
  if (m->gen != g.gen || (int)m->assign.world != g.world || g.byrank[m->assign.rank]) {
    bad("node %d slot %d: ASSIGN rank %u world %u of generation %" PRIu64
        " clashes with the generation's others",
        w->node, w->slot, m->assign.rank, m->assign.world, m->gen);
    return;
  }
  g.byrank[m->assign.rank] = w;
  w->gen = w->agen = m->gen;
  w->rank = (int)m->assign.rank;
  w->world = (int)m->assign.world;
  w->step = m->assign.restore_step;
  snprintf(w->prefix, sizeof w->prefix, "%.*s", (int)m->assign.rdzv_len,
           (const char *)m->assign.rdzv);
  if (++g.nassign == g.world) {
    g.t_all_assign = now;
    if (g.cur_fault < g.nfaults && g.faults[g.cur_fault].t_inject &&
        !g.faults[g.cur_fault].t_assigned)
      g.faults[g.cur_fault].t_assigned = now;
    if (!g.formation_s && g.gen == 1)
      g.formation_s = now - g.t_first_attach;
  }
  char key[128];
  snprintf(key, sizeof key, "%snccl_id", w->prefix);
  if (w->rank == 0) {
    uint8_t id[128];
    for (int i = 0; i < 128; i++)
      id[i] = (uint8_t)(w->gen * 131 + (uint64_t)i);
    ft_msg s;
    ft_msg_init(&s, FT_MSG_KV_SET);
    s.kv_set.key = key;
    s.kv_set.value = id;
    s.kv_set.value_len = sizeof id;
    send_msg(w, &s);
    ready(w, now);
  } else {
    const char *keys[1] = {key};
    ft_msg q;
    ft_msg_init(&q, FT_MSG_KV_GET);
    q.kv_get.req = w->kvreq = (uint32_t)w->gen * 7 + 1;
    q.kv_get.timeout_ms = 120000;
    q.kv_get.keys = keys;
    q.kv_get.nkeys = 1;
    send_msg(w, &q);
    w->st = W_RDZV;
  }
}

/* STOP rejoin (recovery.in_process): the worker leaves its generation in
 * process, says so at once with a heartbeat of the new one (a real worker
 * after freeing its comm) and waits for that generation's ASSIGN. */
static void on_rejoin(sw_worker *w, uint64_t gen, double now) {
  if (gen <= w->agen) {
    bad("node %d slot %d: STOP rejoin into generation %" PRIu64 ", not past its %" PRIu64, w->node,
        w->slot, gen, w->agen);
    return;
  }
  if (gen <= w->gen) /* asked again: already out */
    return;
  reaction(w);
  w->gen = gen;
  w->st = W_IDLE;
  w->kvreq = 0;
  g.rejoins++;
  beat(w, now);
}

static void on_committed(sw_worker *w, int64_t step, double now) {
  for (int i = 0; i < 64; i++)
    if (g.saved_step[i] == step) {
      if (!g.saved_committed[i]) {
        g.saved_committed[i] = now;
        if (g.saved_flushed[i] && g.ncommit < 4096)
          g.commit_ms[g.ncommit++] = (now - g.saved_flushed[i]) * 1e3;
      }
      return;
    }
  bad("node %d slot %d: COMMITTED step %" PRId64 ", which no rank saved", w->node, w->slot, step);
}

static void on_msg(sw_worker *w, ft_msg *m, double now) {
  if (!(ft_wire_sender(m->type) & FT_WIRE_FROM_SUPERVISOR)) {
    bad("node %d slot %d: a supervisor sent %s", w->node, w->slot, ft_msg_type_name(m->type));
    return;
  }
  if (m->type != FT_MSG_CHALLENGE && strcmp(m->run, g.run)) {
    bad("node %d slot %d: %s of run '%s', not '%s'", w->node, w->slot, ft_msg_type_name(m->type),
        m->run, g.run);
    return;
  }
  switch (m->type) {
  case FT_MSG_CHALLENGE: {
    if (w->st != W_CONNECTING) {
      bad("node %d slot %d: a second CHALLENGE", w->node, w->slot);
      return;
    }
    if (!g.run[0])
      snprintf(g.run, sizeof g.run, "%s", m->run);
    ft_msg h;
    ft_msg_init(&h, FT_MSG_HELLO);
    snprintf(h.run, sizeof h.run, "%s", g.run);
    h.hello.node = (uint32_t)w->node;
    h.hello.slot = (uint32_t)w->slot;
    h.hello.pid = (uint32_t)g.nodes[w->node].pid;
    if (ft_wire_hello_sign(&h, g.token, m->challenge.nonce)) {
      fprintf(stderr, "ftswarm: HELLO: %s\n", ft_err_detail());
      exit(1);
    }
    send_msg(w, &h);
    w->st = W_HELLO;
    return;
  }
  case FT_MSG_WELCOME:
    if (w->st != W_HELLO) {
      bad("node %d slot %d: WELCOME out of turn", w->node, w->slot);
      return;
    }
    w->st = W_IDLE;
    w->hb_s = m->welcome.heartbeat_ms / 1000.0;
    w->next_beat = now + w->hb_s;
    send_doctor(w);
    return;
  case FT_MSG_ASSIGN:
    on_assign(w, m, now);
    return;
  case FT_MSG_HEARTBEAT:
    if (m->heartbeat.seq == 0 || m->heartbeat.seq > w->seq)
      bad("node %d slot %d: echo of beat %u, never sent (last %u)", w->node, w->slot,
          m->heartbeat.seq, w->seq);
    return;
  case FT_MSG_KV_VALUE:
    if (w->st != W_RDZV || m->kv_value.req != w->kvreq) {
      bad("node %d slot %d: KV_VALUE for request %u, none asked", w->node, w->slot,
          m->kv_value.req);
      return;
    }
    if (m->kv_value.status != FT_KV_OK || m->kv_value.nvals != 1 ||
        m->kv_value.vals[0].len != 128) {
      bad("node %d slot %d: rendezvous answer %s with %u values", w->node, w->slot,
          ft_kv_status_name(m->kv_value.status), m->kv_value.nvals);
      return;
    }
    w->kvreq = 0;
    ready(w, now);
    return;
  case FT_MSG_COMMITTED:
    on_committed(w, m->committed.step, now);
    return;
  case FT_MSG_STOP:
    if (m->stop.reason == FT_STOP_REJOIN) {
      on_rejoin(w, m->gen, now);
      return;
    }
    worker_exit(w, FT_EXIT_OK);
    return;
  case FT_MSG_DOCTOR: /* check again */
    send_doctor(w);
    return;
  case FT_MSG_REPLICA:
    return;
  case FT_MSG_DUMP: /* a hung worker's stack asked for (agents: no SIGUSR1); none here */
    return;
  default:
    bad("node %d slot %d: unexpected %s", w->node, w->slot, ft_msg_type_name(m->type));
  }
}

/* Every rank's SHARD_SAVED of step built and written out: the commit's
 * clock starts. */
static void shards_flushed(int64_t step) {
  if (g.shard_unflushed || g.save_step == step)
    return;
  for (int i = 0; i < 64; i++)
    if (g.saved_step[i] == step && !g.saved_flushed[i])
      g.saved_flushed[i] = ft_now_s();
}

static void flush_out(sw_worker *w) {
  while (w->out.len && w->fd >= 0) {
    ssize_t n = send(w->fd, w->out.data, w->out.len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    if (n <= 0) { /* the supervisor closed it: it lost us, or we were fenced */
      g.lost++;
      worker_exit(w, FT_EXIT_LOST);
      return;
    }
    ft_buf_consume(&w->out, (size_t)n);
  }
  if (!w->out.len && w->shard_step >= 0) {
    g.shard_unflushed--;
    shards_flushed(w->shard_step);
    w->shard_step = -1;
  }
  ep_mod(w);
}

/* Reads what fd holds into in, a frame at a time, and hands each whole
 * frame (at most max bytes) to frame(ctx, ...), which returns 0 to go on.
 * Returns 0 (nothing more to read now), 1 (frame() said stop), -1 (the
 * peer closed or the socket failed), -2 (a bad frame header: the reason in
 * ft_err_detail()). */
static int sock_read(int fd, ft_buf *in, size_t max, int (*frame)(void *, const uint8_t *, size_t),
                     void *ctx) {
  for (;;) {
    /* up to the end of the frame being read, no further: the receive time
     * of a read (for TCP, of the last segment it took) is then that of the
     * frame it completes, not of a later one that came behind it */
    size_t want = 4;
    if (in->len >= 4) {
      const uint8_t *d = in->data;
      size_t flen = ((size_t)d[0] << 24 | (size_t)d[1] << 16 | (size_t)d[2] << 8 | d[3]) + 4;
      want = flen > in->len ? flen - in->len : 0;
      if (flen > max + 4 || !want) /* the frame check below says what */
        want = 65536;
    } else {
      want -= in->len;
    }
    if (ft_buf_reserve(in, want))
      exit(1);
    struct iovec iov = {in->data + in->len, want};
    union {
      char buf[CMSG_SPACE(sizeof(struct timespec))];
      struct cmsghdr align;
    } cm;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
    ssize_t n = recvmsg(fd, &mh, 0);
    g_rx_s = 0;
    for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(c), sizeof ts);
        double age = wall_s() - ((double)ts.tv_sec + ts.tv_nsec * 1e-9);
        g_rx_s = ft_now_s() - (age > 0 ? age : 0);
      }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return 0;
    if (n <= 0)
      return -1;
    in->len += (size_t)n;
    size_t flen;
    int r;
    while ((r = ft_wire_frame_len_max(in->data, in->len, max, &flen)) == 1 && in->len >= flen) {
      if (frame(ctx, in->data, flen))
        return 1;
      ft_buf_consume(in, flen);
    }
    if (r < 0)
      return -2;
  }
}

static double g_now; /* the loop pass's clock, for the frame handlers */

/* One frame of a worker's own connection; 1 once it is gone. */
static int worker_frame(void *ctx, const uint8_t *f, size_t len) {
  sw_worker *w = ctx;
  ft_msg m;
  if (ft_wire_decode(f, len, &m)) {
    bad("node %d slot %d: %s", w->node, w->slot, ft_err_detail());
    worker_exit(w, FT_EXIT_FAIL);
    return 1;
  }
  on_msg(w, &m, g_now);
  ft_msg_release(&m);
  return w->fd < 0;
}

static void read_frames(sw_worker *w, double now) {
  g_now = now;
  int r = sock_read(w->fd, &w->in, FT_WIRE_MAX_FRAME, worker_frame, w);
  if (r == -1) {
    g.lost++;
    worker_exit(w, FT_EXIT_LOST);
  } else if (r == -2) {
    bad("node %d slot %d: %s", w->node, w->slot, ft_err_detail());
    worker_exit(w, FT_EXIT_FAIL);
  }
}

/* Reads and handles what w's socket holds, a frame at a time. A frame is
 * stamped with the receive time of the read that completed it (for TCP the
 * kernel's stamp of that read's last segment: the one that brought the
 * frame's last byte). */
static void on_readable(sw_worker *w, double now) {
  read_frames(w, now);
  g_rx_s = 0;
}

/* A connection to the supervisor from node's own loopback address, in
 * epoll with tag. */
static int sock_connect(int node, uint64_t tag) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    fprintf(stderr, "ftswarm: socket: %s (raise the descriptor limit)\n", strerror(errno));
    exit(1);
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one); /* reaction() */
  if ((ntohl(g.sup.sin_addr.s_addr) >> 24) == 127) {
    /* each simulated host connects from its own loopback address, as each
     * host of a cluster has its own: 16,384 connections from 127.0.0.1 to
     * one port made every connect search the ephemeral ports for a free
     * 4-tuple (__inet_hash_connect: a quarter of the machine's CPU while a
     * gang of 16,384 formed). The port is picked at connect
     * (IP_BIND_ADDRESS_NO_PORT); if the bind fails, the default address. */
    struct sockaddr_in src = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(0x7F000000u | (uint32_t)(node + 2))};
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    (void)bind(fd, (struct sockaddr *)&src, sizeof src);
  }
  if (connect(fd, (struct sockaddr *)&g.sup, sizeof g.sup) && errno != EINPROGRESS) {
    fprintf(stderr, "ftswarm: connect: %s\n", strerror(errno));
    exit(1);
  }
  struct epoll_event e = {.events = EPOLLIN, .data.u64 = tag};
  epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &e);
  return fd;
}

static void worker_connect(sw_worker *w) {
  w->st = W_CONNECTING;
  w->next_beat = ft_now_s() + CHALLENGE_WAIT_S; /* until then, the CHALLENGE */
  if (g.agents)                                 /* its agent opens its slot once the agent is in */
    return;
  w->fd = sock_connect(w->node, TAG(TAG_WORKER, w->node * 256 + w->slot));
}

/* ---- --agents: the node's agent ---- */

static void agent_connect(sw_node *nd) {
  nd->fd = sock_connect((int)(nd - g.nodes), TAG(TAG_AGENT, (int)(nd - g.nodes)));
  nd->ast = A_CONNECTING;
  nd->next_hb = ft_now_s() + CHALLENGE_WAIT_S; /* until then, the CHALLENGE */
  ft_buf_init(&nd->in);
  ft_buf_init(&nd->out);
}

static void flush_node(sw_node *nd) {
  while (nd->out.len && nd->fd >= 0) {
    ssize_t n = send(nd->fd, nd->out.data, nd->out.len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    if (n <= 0) { /* the supervisor closed it: its workers lost us */
      for (int j = 0; j < nd->slots; j++)
        if (nd->w[j].st != W_GONE) {
          g.lost++;
          worker_exit(&nd->w[j], FT_EXIT_LOST);
        }
      agent_close(nd);
      return;
    }
    ft_buf_consume(&nd->out, (size_t)n);
  }
  for (int j = 0; nd->fd >= 0 && !nd->out.len && j < nd->slots; j++) {
    sw_worker *w = &nd->w[j];
    if (w->shard_step >= 0) {
      g.shard_unflushed--;
      shards_flushed(w->shard_step);
      w->shard_step = -1;
    }
  }
  ep_mod_node(nd);
}

/* The agent's HOSTBEAT: every slot's last beat to it, with its age (a
 * silent worker's ages on, as a real agent's would). */
static void host_beat(sw_node *nd, double now, int fresh_only) {
  ft_wire_beat b[256];
  uint32_t n = 0;
  for (int j = 0; j < nd->slots; j++) {
    sw_worker *w = &nd->w[j];
    if (w->st == W_GONE || !w->beat_t || (fresh_only && !w->fresh))
      continue;
    w->fresh = 0;
    double age = (now - w->beat_t) * 1e3;
    b[n++] = (ft_wire_beat){.slot = (uint32_t)j,
                            .gen = w->gen,
                            .age_ms = age < 0 ? 0 : (uint32_t)age,
                            .step = w->step,
                            .seq = w->seq,
                            .phase = FT_PHASE_IDLE};
  }
  ft_msg hb;
  ft_msg_init(&hb, FT_MSG_HOSTBEAT);
  hb.hostbeat.seq = ++nd->seq;
  hb.hostbeat.beats = b;
  hb.hostbeat.nbeats = n;
  agent_send(nd, &hb);
}

static void agent_beat(sw_node *nd, double now) {
  host_beat(nd, now, 0);
  nd->next_hb = now + nd->hb_s;
}

/* The end of a pass: each host's beats of a new generation, in one
 * HOSTBEAT of those beats only (worker/agent.c does the same). */
static void agent_fresh_beats(double now) {
  for (int i = 0; i < g.nfresh; i++) {
    sw_node *nd = &g.nodes[g.fresh_nodes[i]];
    if (nd->fresh && nd->fd >= 0 && !nd->silent)
      host_beat(nd, now, 1);
    nd->fresh = 0;
  }
  g.nfresh = 0;
}

/* A host frame (ft_wire.h): the frame each slot's worker would have had in
 * a RELAY, ASSIGN's rank slot 0's. */
static void host_frame(sw_node *nd, ft_msg *m, double now) {
  uint32_t rank0 = m->type == FT_MSG_ASSIGN ? m->assign.rank : 0;
  for (int j = 0; j < nd->slots; j++) {
    sw_worker *w = &nd->w[j];
    if (w->st < W_IDLE || w->st == W_GONE || w->silent)
      continue;
    if (m->type == FT_MSG_ASSIGN)
      m->assign.rank = rank0 + (uint32_t)j;
    on_msg(w, m, now);
  }
}

/* Which of the three a frame is (host_frames, relayed_frames); -1: none. */
static int host_kind(const ft_msg *m) {
  return m->type == FT_MSG_ASSIGN                                     ? 0
         : m->type == FT_MSG_STOP && m->stop.reason == FT_STOP_REJOIN ? 1
         : m->type == FT_MSG_COMMITTED                                ? 2
                                                                      : -1;
}

/* One frame on the agent's connection; 1 once it is gone. */
static int agent_frame(void *ctx, const uint8_t *f, size_t len) {
  sw_node *nd = ctx;
  int node = (int)(nd - g.nodes);
  ft_msg m;
  if (ft_wire_decode(f, len, &m)) {
    bad("node %d agent: %s", node, ft_err_detail());
    node_dead(nd);
    return 1;
  }
  double now = g_now;
  switch (m.type) {
  case FT_MSG_CHALLENGE: {
    if (nd->ast != A_CONNECTING) {
      bad("node %d agent: a second CHALLENGE", node);
      break;
    }
    if (!g.run[0])
      snprintf(g.run, sizeof g.run, "%s", m.run);
    ft_msg h;
    ft_msg_init(&h, FT_MSG_HELLO);
    snprintf(h.run, sizeof h.run, "%s", g.run);
    h.hello.node = (uint32_t)node;
    h.hello.slot = FT_WIRE_AGENT_SLOT;
    h.hello.pid = (uint32_t)nd->pid;
    if (ft_wire_hello_sign(&h, g.token, m.challenge.nonce)) {
      fprintf(stderr, "ftswarm: HELLO: %s\n", ft_err_detail());
      exit(1);
    }
    agent_send(nd, &h);
    nd->ast = A_HELLO;
    break;
  }
  case FT_MSG_WELCOME:
    if (nd->ast != A_HELLO) {
      bad("node %d agent: WELCOME out of turn", node);
      break;
    }
    nd->ast = A_UP;
    nd->hb_s = m.welcome.heartbeat_ms / 1000.0;
    nd->next_hb = now + nd->hb_s;
    for (int j = 0; j < nd->slots; j++) { /* its workers start */
      ft_msg sl;
      ft_msg_init(&sl, FT_MSG_SLOT);
      sl.slot.slot = (uint32_t)j;
      sl.slot.event = FT_SLOT_OPEN;
      sl.slot.pid = (uint32_t)nd->pid + 1 + (uint32_t)j;
      agent_send(nd, &sl);
    }
    break;
  case FT_MSG_RELAY: {
    sw_worker *w = m.relay.slot < (uint32_t)nd->slots ? &nd->w[m.relay.slot] : NULL;
    if (!w) {
      bad("node %d agent: RELAY for slot %u of %d", node, m.relay.slot, nd->slots);
      break;
    }
    if (w->st == W_GONE || w->silent)
      break;
    ft_msg in;
    if (ft_wire_decode(m.relay.frame, m.relay.frame_len, &in)) {
      bad("node %d slot %d: relayed: %s", node, w->slot, ft_err_detail());
      worker_exit(w, FT_EXIT_FAIL);
      break;
    }
    if (host_kind(&in) >= 0)
      g.relayed_frames[host_kind(&in)]++;
    on_msg(w, &in, now);
    ft_msg_release(&in);
    break;
  }
  case FT_MSG_HOSTBEAT:
    if (m.hostbeat.seq == 0 || m.hostbeat.seq > nd->seq || m.hostbeat.nbeats)
      bad("node %d agent: echo of HOSTBEAT %u (last %u, %u beats)", node, m.hostbeat.seq, nd->seq,
          m.hostbeat.nbeats);
    break;
  case FT_MSG_SLOT: {
    if (m.slot.slot == FT_WIRE_AGENT_SLOT && m.slot.status == SIGKILL) {
      /* the host itself killed (the supervisor's chaos kill): as a drop */
      printf("ftswarm: node %d: killed by the supervisor (its agent, SIGKILL)\n", node);
      tell_attach(nd, "kill\n");
      node_dead(nd);
      break;
    }
    sw_worker *w = m.slot.slot < (uint32_t)nd->slots ? &nd->w[m.slot.slot] : NULL;
    if (!w || m.slot.event == FT_SLOT_OPEN || m.slot.event == FT_SLOT_EXITED) {
      bad("node %d agent: SLOT %u %s from the supervisor", node, m.slot.slot,
          ft_slot_event_name(m.slot.event));
      break;
    }
    if (m.slot.event == FT_SLOT_CLOSED && w->st != W_GONE) { /* its socket closed: it lost us */
      g.lost++;
      worker_exit(w, FT_EXIT_LOST);
    } else if (m.slot.event == FT_SLOT_SIGNAL && w->st != W_GONE) {
      worker_end(w, m.slot.status & 0x7f); /* killed by it */
    } else if (m.slot.event == FT_SLOT_START) {
      if (w->st != W_GONE) {
        bad("node %d agent: SLOT %u start while its worker runs", node, m.slot.slot);
        break;
      }
      nd->nexited--;
      worker_start(nd, (int)m.slot.slot);
      ft_msg sl;
      ft_msg_init(&sl, FT_MSG_SLOT);
      sl.slot.slot = m.slot.slot;
      sl.slot.event = FT_SLOT_OPEN;
      sl.slot.pid = (uint32_t)nd->pid + 1 + m.slot.slot;
      agent_send(nd, &sl);
    }
    break;
  }
  case FT_MSG_ASSIGN:
  case FT_MSG_COMMITTED:
    g.host_frames[host_kind(&m)]++;
    host_frame(nd, &m, now);
    break;
  case FT_MSG_STOP: {
    if (m.stop.reason == FT_STOP_REJOIN) { /* a host frame */
      g.host_frames[1]++;
      host_frame(nd, &m, now);
      break;
    }
    /* the agent ends (the run is over, or its node out of the pool) */
    for (int j = 0; j < nd->slots; j++)
      worker_exit(&nd->w[j], FT_EXIT_OK);
    char line[32];
    snprintf(line, sizeof line, "exit %d\n", nd->exit_code);
    agent_close(nd);
    tell_attach(nd, line);
    break;
  }
  default:
    bad("node %d agent: unexpected %s", node, ft_msg_type_name(m.type));
  }
  ft_msg_release(&m);
  return nd->fd < 0;
}

static void agent_readable(sw_node *nd, double now) {
  g_now = now;
  int r = sock_read(nd->fd, &nd->in, FT_WIRE_MAX_RELAY_FRAME, agent_frame, nd);
  if (r == -2)
    bad("node %d agent: %s", (int)(nd - g.nodes), ft_err_detail());
  if (r < 0) {
    for (int j = 0; j < nd->slots; j++)
      if (nd->w[j].st != W_GONE) {
        g.lost++;
        worker_exit(&nd->w[j], FT_EXIT_LOST);
      }
    agent_close(nd);
  }
  g_rx_s = 0;
}

/* As the worker (worker/ctl.c): no CHALLENGE within CHALLENGE_WAIT_S of the
 * connect (the supervisor's accept queue overflowed and a SYN cookie
 * completed our side only), connect again. */
static void reconnect(sw_worker *w) {
  epoll_ctl(g.ep, EPOLL_CTL_DEL, w->fd, NULL);
  close(w->fd);
  w->fd = -1;
  ft_buf_reset(&w->in);
  ft_buf_reset(&w->out);
  g.reconnects++;
  worker_connect(w);
}

/* ---- attach connections ---- */

/* Slot j of nd: a new worker process (it connects, or its agent opens its
 * slot). */
static void worker_start(sw_node *nd, int j) {
  sw_worker *w = &nd->w[j];
  worker_close(w);
  memset(w, 0, sizeof *w);
  w->node = (int)(nd - g.nodes);
  w->slot = j;
  w->fd = -1;
  w->rank = -1;
  w->step = -1;
  w->shard_step = -1;
  ft_buf_init(&w->in);
  ft_buf_init(&w->out);
  worker_connect(w);
}

static void attach_node(int fd, const char *line);

static void on_attach(int fd) {
  char line[8192];
  ssize_t n = 0, r;
  /* the attach process writes its one line at once; wait for it briefly */
  for (int tries = 0; tries < 200; tries++) {
    r = read(fd, line + n, sizeof line - 1 - (size_t)n);
    if (r > 0)
      n += r;
    if (n > 0 && line[n - 1] == '\n')
      break;
    if (r == 0)
      break;
    usleep(1000);
  }
  line[n > 0 ? n : 0] = 0;
  int node, slots, pid, ppid;
  char addr[256], tok[128], store[4096];
  if (sscanf(line, "%d %d %d %d %255s %127s %4095s", &node, &slots, &pid, &ppid, addr, tok,
             store) != 7 ||
      node < -MAX_NODES || node >= MAX_NODES || slots < 1 || slots > 256 ||
      (node < 0 && !g.agents)) {
    fprintf(stderr, "ftswarm: a bad attach line\n");
    close(fd);
    return;
  }
  if (node < 0) {
    /* nodes.launch_once: one attach process for the pool of -node hosts
     * (as one srun over every host): each host's agent is played here, and
     * the process ends when the swarm does */
    g.pool_fd = fd;
    for (int k = 0; k < -node; k++) {
      char one[8192];
      snprintf(one, sizeof one, "%d %d %d %d %s %s %s\n", k, slots, pid, ppid, addr, tok, store);
      attach_node(-1, one);
    }
    return;
  }
  attach_node(fd, line);
}

/* Host `node` of the attach line, on attach socket fd (-1: the pool's). */
static void attach_node(int fd, const char *line) {
  int node, slots, pid, ppid;
  char addr[256], tok[128], store[4096];
  sscanf(line, "%d %d %d %d %255s %127s %4095s", &node, &slots, &pid, &ppid, addr, tok, store);
  sw_node *nd = &g.nodes[node];
  if (nd->afd >= 0) {
    fprintf(stderr, "ftswarm: node %d attached twice\n", node);
    close(fd);
    return;
  }
  if (!g.token[0]) {
    snprintf(g.token, sizeof g.token, "%.64s", tok);
    snprintf(g.store_uri, sizeof g.store_uri, "%.4095s", store);
    char *colon = strrchr(addr, ':');
    if (!colon)
      exit(2);
    *colon = 0;
    g.sup.sin_family = AF_INET;
    g.sup.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, addr, &g.sup.sin_addr) != 1) {
      fprintf(stderr, "ftswarm: the supervisor's address %s is not IPv4\n", addr);
      exit(2);
    }
    (void)ppid;
    g.t_first_attach = ft_now_s();
    double t0 = 0;
    FILE *f = g.t0_file ? fopen(g.t0_file, "r") : NULL;
    if (f && fscanf(f, "%lf", &t0) == 1 && t0 > 0) /* measure from supervise's start */
      g.t_first_attach -= wall_s() - t0;
    if (f)
      fclose(f);
  }
  if (node >= g.nnodes_seen)
    g.nnodes_seen = node + 1;
  if (!nd->w) {
    if (!(nd->w = calloc(256, sizeof *nd->w)))
      exit(1);
    for (int j = 0; j < 256; j++) {
      nd->w[j].fd = -1;
      nd->w[j].shard_step = -1;
    }
  }
  nd->afd = fd;
  nd->pid = pid;
  nd->slots = slots;
  nd->nexited = 0;
  nd->exit_code = 0;
  if (fd >= 0) {
    struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = TAG(TAG_ATTACH, node)};
    fcntl(fd, F_SETFL, O_NONBLOCK);
    epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &e);
  }
  for (int j = 0; j < slots; j++)
    worker_start(nd, j);
  if (g.agents) {
    agent_close(nd);
    nd->silent = 0;
    nd->seq = 0;
    agent_connect(nd);
  }
}

/* ---- the gang's clock: a step every step_s once every rank is ready ---- */

static int gang_stalled(void) {
  for (int r = 0; r < g.world; r++) {
    sw_worker *w = g.byrank[r];
    if (!w || w->silent || w->st != W_READY || w->gen != g.gen)
      return 1;
  }
  return 0;
}

/* SHARD_SAVED of the checkpoint in progress, for SAVE_SLICE_S per loop
 * turn: a real worker builds its manifest on a thread of its own while its
 * heartbeats go on, and 16,384 of them (~21 KB each) take the swarm seconds
 * to build, which must not stop the other ranks' heartbeats. */
#define SAVE_SLICE_S 0.02

/* A shard of the checkpoint in progress is about to go out from w. */
static void shard_pending(sw_worker *w) {
  if (w->shard_step < 0) {
    w->shard_step = g.save_step;
    g.shard_unflushed++;
  }
}

/* Under agents, the host of ranks lo.. as its agent reports it
 * (worker/agent_ckpt.c): every slot's shard object, one leaf naming them
 * (the object shards/<its SHA-256>) with the time before the first was
 * written, and one SHARD_SAVED of the host in lo's envelope. 0: not made
 * (a slot not in the checkpoint, --inline-shards, --host-refs 0, a failed
 * write): its
 * ranks report one by one. */
static int save_host(int lo) {
  sw_worker *w0 = g.byrank[lo];
  sw_node *nd = &g.nodes[w0->node];
  int G = nd->slots,
      ok = !g.inline_shards && !g.no_host_refs && G > 1 && lo + G <= g.world && G <= 256;
  for (int j = 0; ok && j < G; j++) {
    sw_worker *w = g.byrank[lo + j];
    ok = w && w->node == w0->node && linked(w) && !w->silent && w->gen == g.save_gen;
  }
  if (!ok)
    return 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t t0 = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  ckpt_shard *refs[256] = {0}, *h = NULL;
  char *leaf = NULL;
  for (int j = 0; ok && j < G; j++) {
    char *sj = shard_text(lo + j, g.world, g.save_step);
    ok = sj && ckpt_shard_from_json(sj, &refs[j]) == 0 && ckpt_shard_is_ref(refs[j]);
    free(sj);
  }
  ok = ok && ckpt_host_ref_build(refs, G, &leaf, &h) == 0 && put_object(h->object, leaf) == 0;
  char *rj = NULL, *env = NULL;
  if (ok) {
    h->oldest = t0;
    ok = (rj = ckpt_shard_report_to_json(h)) && (env = wrap_envelope(rj, lo, g.save_step));
  }
  if (ok) {
    ft_msg m;
    ft_msg_init(&m, FT_MSG_SHARD_SAVED);
    m.gen = g.save_gen;
    m.shard_saved.step = g.save_step;
    m.shard_saved.rank = (uint32_t)lo;
    m.shard_saved.manifest = env;
    for (int j = 0; j < G; j++)
      shard_pending(&nd->w[j]);
    agent_send(nd, &m);
    g.host_refs++;
  }
  for (int j = 0; j < G; j++)
    ckpt_shard_free(refs[j]);
  ckpt_shard_free(h);
  free(leaf);
  free(rj);
  free(env);
  return ok;
}

static void save_more(void) {
  if (g.save_step < 0)
    return;
  double until = ft_now_s() + SAVE_SLICE_S;
  while (g.save_next < g.world && ft_now_s() < until) {
    int r = g.save_next++;
    sw_worker *w = g.gen == g.save_gen ? g.byrank[r] : NULL;
    if (g.agents && w && r % g.nodes[w->node].slots == 0 && save_host(r)) {
      g.save_next = r + g.nodes[w->node].slots;
      continue;
    }
    if (!w || !linked(w) || w->gen != g.save_gen)
      continue;
    char *txt = envelope(r, g.world, g.save_step);
    ft_msg m;
    ft_msg_init(&m, FT_MSG_SHARD_SAVED);
    m.shard_saved.step = g.save_step;
    m.shard_saved.rank = (uint32_t)r;
    m.shard_saved.manifest = txt;
    shard_pending(w);
    send_msg(w, &m);
    free(txt);
  }
  if (g.save_next >= g.world || g.gen != g.save_gen) {
    int64_t step = g.save_step;
    g.save_step = -1;
    shards_flushed(step);
  }
}

static void gang_step(double now) {
  if (!g.training || now < g.next_step_t || gang_stalled())
    return;
  g.next_step_t += g.step_s;
  if (g.next_step_t < now)
    g.next_step_t = now + g.step_s;
  g.step++;
  int save = g.ckpt_every > 0 && g.step > 0 && g.step % g.ckpt_every == 0;
  if (save && g.save_step >= 0) {
    /* the last one's reports are still being built: a real worker's
     * snapshot would wait for its checkpoint in flight, so this one is
     * skipped (starting it would strand the last one half reported) */
    save = 0;
    g.saves_skipped++;
  }
  if (save) {
    int i = (int)(g.step / g.ckpt_every % 64);
    g.saved_step[i] = g.step;
    g.saved_flushed[i] = g.saved_committed[i] = 0;
  }
  for (int r = 0; r < g.world; r++) {
    sw_worker *w = g.byrank[r];
    w->step = g.step;
    ft_msg s;
    ft_msg_init(&s, FT_MSG_STEP);
    s.step.step = g.step;
    s.step.loss = r == 0 ? 3.0 + 1.0 / (double)(g.step + 1) : NAN;
    s.step.grad_norm = 1.0;
    s.step.tokens_per_s = 1e5;
    s.step.step_ms = g.step_s * 1e3;
    s.step.val_loss = NAN;
    send_msg(w, &s);
  }
  if (save) { /* the shards go out from save_more, a slice per loop turn */
    g.save_step = g.step;
    g.save_next = 0;
    g.save_gen = g.gen;
  }
  if (!g.t_first_step) {
    g.t_first_step = now;
    if (g.cur_fault < g.nfaults) {
      fault *f = &g.faults[g.cur_fault];
      if (f->t_inject && f->t_assigned && !f->t_stepped)
        f->t_stepped = now;
    }
  }
}

/* ---- faults ---- */

static volatile sig_atomic_t g_term;
static void on_term(int sig) {
  (void)sig;
  g_term = 1;
}

static unsigned g_rng = 12345;
static int rnd(int n) {
  g_rng = g_rng * 1103515245u + 12345u;
  return (int)((g_rng >> 8) % (unsigned)n);
}

/* The fault's time is taken here, not from the loop's clock (now): this
 * loop may have spent 100-250 ms on the batch it read before it gets here,
 * and a fault dated to the batch's start is one the supervisor seems slow
 * to name. */
static void inject(fault *f) {
  f->gen = g.gen;
  f->t_inject = ft_now_s();
  /* never rank 0's node: its STEP is what tells a recovery done, and the
   * choice of victim is not what is measured */
  int r;
  do
    r = rnd(g.world);
  while (g.byrank[r]->node == g.byrank[0]->node);
  sw_worker *w = g.byrank[r];
  sw_node *nd = &g.nodes[w->node];
  f->rank = r;
  f->node = w->node;
  if (!strcmp(f->kind, "silent")) {
    w->silent = 1;
    ep_mod(w);
  } else if (!strcmp(f->kind, "host")) {
    for (int j = 0; j < nd->slots; j++) {
      nd->w[j].silent = 1;
      ep_mod(&nd->w[j]);
    }
    nd->silent = 1; /* its agent too: no HOSTBEAT, nothing read */
    ep_mod_node(nd);
  } else { /* drop: the host's process dies, its connections reset */
    tell_attach(nd, "kill\n");
    node_dead(nd);
  }
  /* the wall clock too: the supervisor's fault_detected says when it
   * detected (detected_at), so the two sides of a detection can be told */
  printf("ftswarm: fault %d: %s, node %d (rank %d), generation %" PRIu64 ", at %.3f\n",
         g.cur_fault + 1, f->kind, f->node, r, g.gen, (double)ft_wall_ms() / 1e3);
  fflush(stdout);
}

/* ---- measurements of the supervisor's process ---- */

static int proc_cpu(pid_t pid, double *cpu_s, double *rss_mb) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  long rss = 0;
  if (!p || sscanf(p + 2,
                   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d "
                   "%*d %*d %*u %*u %ld",
                   &ut, &st, &rss) != 3)
    return -1;
  *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
  *rss_mb = (double)rss * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
  return 0;
}

static long long du_bytes(const char *path) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "du -sb '%s' 2>/dev/null", path);
  FILE *p = popen(cmd, "r");
  long long b = -1;
  if (p) {
    if (fscanf(p, "%lld", &b) != 1)
      b = -1;
    pclose(p);
  }
  return b;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
  if (!n)
    return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  int i = (int)ceil(p / 100.0 * n) - 1;
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* ---- the loop ---- */

/* The figures: stdout and --out. Returns ok, cleared by a fault not
 * recovered or a conformance error. */
static int report(int ok, double steady_s, double steady_cpu, double rss_max,
                  const long long *grow0, const long long *grow1) {
  /* the figures */
  static const char *const KIND[3] = {"silent", "host", "drop"};
  double det[3][MAX_FAULTS], rec[MAX_FAULTS], cyc[MAX_FAULTS], told[MAX_FAULTS];
  int nd[3] = {0, 0, 0}, nrec = 0;
  for (int i = 0; i < g.cur_fault; i++) {
    fault *f = &g.faults[i];
    int k = 0;
    while (k < 2 && strcmp(f->kind, KIND[k]))
      k++;
    det[k][nd[k]++] = (f->t_stop - f->t_inject) * 1e3;
    told[nrec] = (f->t_told - f->t_stop) * 1e3;
    rec[nrec] = (f->t_assigned - f->t_stop) * 1e3;
    cyc[nrec++] = (f->t_stepped - f->t_inject) * 1e3;
  }
  if (g.cur_fault < g.nfaults)
    ok = 0;
  double cm50 = pct(g.commit_ms, g.ncommit, 50), cm99 = pct(g.commit_ms, g.ncommit, 99);
  FILE *o = g.out_path ? fopen(g.out_path, "w") : NULL;
  char json[4096];
  int jl = snprintf(json, sizeof json,
                    "{\"world\":%d,\"nodes\":%d,\"formation_s\":%.3f,\"steady_s\":%.1f,"
                    "\"sup_cores\":%.4f,\"sup_rss_mib\":%.1f,"
                    "\"detect_silent_ms\":{\"n\":%d,\"p50\":%.1f,\"p99\":%.1f},"
                    "\"detect_host_ms\":{\"n\":%d,\"p50\":%.1f,\"p99\":%.1f},"
                    "\"detect_drop_ms\":{\"n\":%d,\"p50\":%.1f,\"p99\":%.1f},"
                    "\"stop_spread_ms\":{\"n\":%d,\"p50\":%.1f,\"p99\":%.1f},"
                    "\"recover_assign_ms\":{\"n\":%d,\"p50\":%.1f,\"p99\":%.1f},"
                    "\"fault_to_step_ms\":{\"n\":%d,\"p50\":%.1f,\"p99\":%.1f},"
                    "\"commit_ms\":{\"n\":%d,\"p50\":%.1f,\"p99\":%.1f},"
                    "\"conformance_errors\":%ld,\"faults_done\":%d,\"faults_wanted\":%d,"
                    "\"steady_commits\":%d,\"ckpt_every_s\":%.1f,\"reconnects\":%ld,\"rejoins\":%"
                    "ld,\"saves_skipped\":%ld,\"host_refs\":%" PRIu64
                    ",\"host_frames\":{\"assign\":%ld,\"stop_rejoin\":%ld,\"committed\":%ld},"
                    "\"relayed_frames\":{\"assign\":%ld,\"stop_rejoin\":%ld,\"committed\":%ld}",
                    g.world, g.nnodes_seen, g.formation_s, steady_s, steady_cpu, rss_max, nd[0],
                    pct(det[0], nd[0], 50), pct(det[0], nd[0], 99), nd[1], pct(det[1], nd[1], 50),
                    pct(det[1], nd[1], 99), nd[2], pct(det[2], nd[2], 50), pct(det[2], nd[2], 99),
                    nrec, pct(told, nrec, 50), pct(told, nrec, 99), nrec, pct(rec, nrec, 50),
                    pct(rec, nrec, 99), nrec, pct(cyc, nrec, 50), pct(cyc, nrec, 99), g.ncommit,
                    cm50, cm99, g.conformance, g.cur_fault, g.nfaults, g.steady_commits,
                    g.ckpt_every * g.step_s, g.reconnects, g.rejoins, g.saves_skipped, g.host_refs,
                    g.host_frames[0], g.host_frames[1], g.host_frames[2], g.relayed_frames[0],
                    g.relayed_frames[1], g.relayed_frames[2]);
  for (int k = 0; k < g.ngrow; k++)
    jl += snprintf(json + jl, sizeof json - (size_t)jl,
                   ",\"grow_%d\":{\"path\":\"%s\",\"bytes_per_hour\":%.0f}", k, g.grow[k],
                   steady_s > 0 ? (double)(grow1[k] - grow0[k]) * 3600.0 / steady_s : NAN);
  snprintf(json + jl, sizeof json - (size_t)jl, "}");
  printf("%s\n", json);
  if (o) {
    fprintf(o, "%s\n", json);
    fclose(o);
  }
  if (g.conformance)
    ok = 0;
  printf("ftswarm: %s\n", ok ? "passed" : "FAILED");
  fflush(stdout);
  return ok;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: ftswarm serve --socket PATH --world N [--step-ms MS] [--ckpt-every K]\n"
      "         [--steady S] [--commits K] [--faults silent:A,host:B,drop:C] [--settle S]\n"
      "         [--timeout S]\n"
      "         [--sup-pid PID | --sup-pid-file F] [--t0-file F] [--grow PATH]... [--layers L] "
      "[--embd C]\n"
      "         [--seed N] [--out FILE] [--inline-shards 0|1] [--agents 0|1] [--host-refs 0|1]\n"
      "       (each host: ftswarm_attach PATH {slots} {argv}, a run file's nodes.command)\n");
}

static int parse_faults(const char *spec) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  char *save = NULL, *kinds[3] = {0};
  int counts[3] = {0}, nk = 0;
  for (char *t = strtok_r(buf, ",", &save); t && nk < 3; t = strtok_r(NULL, ",", &save)) {
    char *c = strchr(t, ':');
    if (!c || (strncmp(t, "silent:", 7) && strncmp(t, "host:", 5) && strncmp(t, "drop:", 5)))
      return -1;
    *c = 0;
    kinds[nk] = t;
    counts[nk++] = atoi(c + 1);
  }
  /* interleaved: one of each kind in turn */
  for (int round = 0; g.nfaults < MAX_FAULTS; round++) {
    int any = 0;
    for (int k = 0; k < nk; k++)
      if (round < counts[k] && g.nfaults < MAX_FAULTS) {
        snprintf(g.faults[g.nfaults++].kind, sizeof g.faults[0].kind, "%s", kinds[k]);
        any = 1;
      }
    if (!any)
      break;
  }
  return 0;
}

static int serve_main(int argc, char **argv) {
  g.step_s = 1.0;
  g.ckpt_every = 10;
  g.steady_s = 10;
  g.settle_s = 1.0;
  g.timeout_s = 600;
  g.layers = 32;
  g.embd = 4096;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      usage();
      return 2;
    }
    i++;
    if (!strcmp(a, "--socket"))
      g.sock_path = v;
    else if (!strcmp(a, "--world"))
      g.world_want = atoi(v);
    else if (!strcmp(a, "--step-ms"))
      g.step_s = atof(v) / 1e3;
    else if (!strcmp(a, "--ckpt-every"))
      g.ckpt_every = atoi(v);
    else if (!strcmp(a, "--steady"))
      g.steady_s = atof(v);
    else if (!strcmp(a, "--commits"))
      g.min_commits = atoi(v);
    else if (!strcmp(a, "--settle"))
      g.settle_s = atof(v);
    else if (!strcmp(a, "--timeout"))
      g.timeout_s = atof(v);
    else if (!strcmp(a, "--faults")) {
      if (parse_faults(v)) {
        usage();
        return 2;
      }
    } else if (!strcmp(a, "--sup-pid"))
      g.sup_pid = atoi(v);
    else if (!strcmp(a, "--sup-pid-file"))
      g.sup_pid_file = v;
    else if (!strcmp(a, "--t0-file"))
      g.t0_file = v;
    else if (!strcmp(a, "--grow") && g.ngrow < 4)
      g.grow[g.ngrow++] = v;
    else if (!strcmp(a, "--layers"))
      g.layers = atoi(v);
    else if (!strcmp(a, "--embd"))
      g.embd = atoi(v);
    else if (!strcmp(a, "--seed"))
      g.seed = atoi(v);
    else if (!strcmp(a, "--out"))
      g.out_path = v;
    else if (!strcmp(a, "--inline-shards"))
      g.inline_shards = atoi(v);
    else if (!strcmp(a, "--host-refs"))
      g.no_host_refs = !atoi(v);
    else if (!strcmp(a, "--agents"))
      g.agents = atoi(v);
    else {
      usage();
      return 2;
    }
  }
  if (!g.sock_path || g.world_want < 1 || g.step_s <= 0) {
    usage();
    return 2;
  }
  g_rng += (unsigned)g.seed;
  g.dims = (ft_gpt2_dims){.max_seq_len = 2048,
                          .vocab_size = 50257,
                          .padded_vocab_size = ft_gpt2_pad_vocab(50257),
                          .n_layer = g.layers,
                          .n_head = 32,
                          .channels = g.embd};
  /* every connection is a descriptor: take the hard limit, and say so when
   * it is not enough */
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  /* a connection per rank (and an attach socket per host of 8), or one
   * per host's agent (its attach sockets too, unless the pool has one) */
  long need = (long)g.world_want * (g.agents ? 1 : 9) / 8 + 256;
  if (rl.rlim_cur < (rlim_t)need) {
    fprintf(stderr,
            "ftswarm: %d ranks need about %ld descriptors, the hard limit is %llu (ulimit -Hn)\n",
            g.world_want, need, (unsigned long long)rl.rlim_cur);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  for (int n = 0; n < MAX_NODES; n++)
    g.nodes[n].afd = g.nodes[n].fd = -1;
  g.pool_fd = -1;
  for (int i = 0; i < 64; i++)
    g.saved_step[i] = -1;
  g.save_step = -1;
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  g.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", g.sock_path);
  unlink(g.sock_path);
  if (g.lfd < 0 || bind(g.lfd, (struct sockaddr *)&a, sizeof a) || listen(g.lfd, 4096)) {
    fprintf(stderr, "ftswarm: %s: %s\n", g.sock_path, strerror(errno));
    return 1;
  }
  chmod(g.sock_path, 0600);
  struct epoll_event le = {.events = EPOLLIN, .data.u64 = TAG(TAG_LISTEN, 0)};
  epoll_ctl(g.ep, EPOLL_CTL_ADD, g.lfd, &le);
  printf("ftswarm: waiting for %d ranks on %s\n", g.world_want, g.sock_path);
  fflush(stdout);

  enum { P_FORM, P_STEADY, P_FAULTS, P_DONE } phase = P_FORM;
  /* after the scenario (P_DONE, figures written) the swarm serves on until
   * SIGTERM, so that the supervisor is stopped before its workers go */
  double start = ft_now_s(), steady_t0 = 0, cpu0 = 0, rss_max = 0, settle_until = 0;
  double steady_cpu = NAN, steady_s = 0;
  long long grow0[4] = {0}, grow1[4] = {0};
  int ok = 1, reported = 0, steady_c0 = 0;
  static struct epoll_event evs[1024];
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  double next_scan = 0;
  while (!g_term) {
    int n = epoll_wait(g.ep, evs, 1024, 5);
    double now = ft_now_s();
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64;
      int kind = (int)(tag >> 32), idx = (int)(uint32_t)tag;
      if (kind == TAG_LISTEN) {
        int fd = accept4(g.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
          on_attach(fd);
      } else if (kind == TAG_ATTACH) { /* the node's process ended */
        node_dead(&g.nodes[idx]);
      } else if (kind == TAG_AGENT) {
        sw_node *nd = &g.nodes[idx];
        if (nd->fd >= 0 && (evs[i].events & EPOLLOUT))
          flush_node(nd);
        if (nd->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !nd->silent)
          agent_readable(nd, now);
      } else {
        sw_worker *w = &g.nodes[idx / 256].w[idx % 256];
        if (w->fd < 0)
          continue;
        if (evs[i].events & EPOLLOUT)
          flush_out(w);
        if (w->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !w->silent)
          on_readable(w, now);
      }
    }
    now = ft_now_s();
    if (now >= next_scan) { /* heartbeats */
      next_scan = now + 0.01;
      for (int nn = 0; nn < g.nnodes_seen; nn++) {
        sw_node *nd = &g.nodes[nn];
        for (int j = 0; nd->w && j < nd->slots; j++) {
          sw_worker *w = &nd->w[j];
          if (linked(w) && !w->silent && w->st >= W_IDLE && w->st != W_GONE && now >= w->next_beat)
            beat(w, now);
          else if (!g.agents && w->fd >= 0 && w->st == W_CONNECTING && now >= w->next_beat)
            reconnect(w);
        }
        if (g.agents && nd->fd >= 0 && !nd->silent && now >= nd->next_hb) {
          if (nd->ast == A_UP)
            agent_beat(nd, now);
          else if (nd->ast == A_CONNECTING) { /* no CHALLENGE: connect again */
            agent_close(nd);
            g.reconnects++;
            agent_connect(nd);
          }
        }
      }
    }
    gang_step(now);
    save_more();
    agent_fresh_beats(now);
    if (phase == P_DONE) {
      if (!reported++)
        ok = report(ok, steady_s, steady_cpu, rss_max, grow0, grow1);
      continue;
    }
    if (now - start > g.timeout_s) {
      fprintf(stderr,
              "ftswarm: gave up after %.0f s (phase %d, generation %" PRIu64
              ", %d of %d ranks assigned, %d ready)\n",
              g.timeout_s, (int)phase, g.gen, g.nassign, g.world, g.nready);
      ok = report(0, steady_s, steady_cpu, rss_max, grow0, grow1);
      reported = 1;
      phase = P_DONE;
      continue;
    }
    int gang_trains = g.world == g.world_want && g.nassign == g.world && g.t_first_step;
    if (phase == P_FORM && gang_trains) {
      printf("ftswarm: gang of %d ranks formed in %.2f s (first ASSIGN to last: %.2f s)\n", g.world,
             g.formation_s, g.t_all_assign - g.t_first_assign);
      fflush(stdout);
      phase = P_STEADY;
      steady_t0 = now;
      steady_c0 = g.ncommit;
      double rss;
      FILE *pf = g.sup_pid_file ? fopen(g.sup_pid_file, "r") : NULL;
      int pid = 0;
      if (pf && fscanf(pf, "%d", &pid) == 1 && pid > 0)
        g.sup_pid = pid;
      if (pf)
        fclose(pf);
      if (g.sup_pid)
        proc_cpu(g.sup_pid, &cpu0, &rss);
      for (int k = 0; k < g.ngrow; k++)
        grow0[k] = du_bytes(g.grow[k]);
    } else if (phase == P_STEADY) {
      double c, rss;
      if (g.sup_pid && !proc_cpu(g.sup_pid, &c, &rss) && rss > rss_max)
        rss_max = rss;
      if (now - steady_t0 >= g.steady_s && g.ncommit - steady_c0 >= g.min_commits) {
        steady_s = now - steady_t0;
        g.steady_commits = g.ncommit - steady_c0;
        if (g.sup_pid && !proc_cpu(g.sup_pid, &c, &rss))
          steady_cpu = (c - cpu0) / steady_s;
        for (int k = 0; k < g.ngrow; k++)
          grow1[k] = du_bytes(g.grow[k]);
        printf("ftswarm: steady %.1f s: supervisor %.3f cores, %.0f MiB resident (max)\n", steady_s,
               steady_cpu, rss_max);
        fflush(stdout);
        phase = P_FAULTS;
        settle_until = now + g.settle_s;
      }
    } else if (phase == P_FAULTS) {
      fault *f = g.cur_fault < g.nfaults ? &g.faults[g.cur_fault] : NULL;
      if (!f) {
        phase = P_DONE;
      } else if (!f->t_inject) {
        if (now >= settle_until && gang_trains && !gang_stalled())
          inject(f);
      } else if (f->t_stepped) {
        printf("ftswarm: fault %d (%s node %d): detected in %.0f ms (the last worker told %.0f ms "
               "later), new gang assigned %.0f ms after the STOP, first step %.0f ms after the "
               "fault\n",
               g.cur_fault + 1, f->kind, f->node, (f->t_stop - f->t_inject) * 1e3,
               (f->t_told - f->t_stop) * 1e3, (f->t_assigned - f->t_stop) * 1e3,
               (f->t_stepped - f->t_inject) * 1e3);
        fflush(stdout);
        g.cur_fault++;
        settle_until = now + g.settle_s;
      }
    }
  }

  ckpt_store_free(g.store);
  unlink(g.sock_path);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "serve"))
    return serve_main(argc, argv);
  usage();
  return 2;
}
