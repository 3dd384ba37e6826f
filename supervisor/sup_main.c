/*
 * supervise: runs a training run and keeps it running through failures
 * (docs/design.md). This file: the command line, the run's resources
 * (state dir, checkpoint store, event log, control port, token, signals),
 * the loop's own health (the stall timer, accept errors), the wiring of
 * the few calls up a layer (wire_hooks, sup_int.h) and the exit codes: the
 * top layer (sup_int.h lists the layers). The logic is below it: the
 * detectors (sup_run.c, sup_watch.c, sup_doctor.c, sup_timers.c), the
 * recovery (sup_recovery.c) and what acts (sup_act.c, sup_nodes.c). main
 * reads as its phases:
 * parse_args, load_runfile, prepare_paths, open_store, snapshot, alloc_pool,
 * load_run_state, open_loop, run, cleanup.
 *
 * Decisions where the spec is silent (see also the top of each module):
 *  - The store is --store if given, else the run file's checkpoint.store:
 *    s3:// as it is, local:DIR relative to the run file's directory (as
 *    its data globs are), except the default "local:state/store", which
 *    means "local:DIR/store" (the store with the run state, where the
 *    default --state puts it). run_started says which and why (store,
 *    store_from).
 *  - The run file is copied to DIR/run.yaml at every start and the workers
 *    get that copy (editing or deleting the original mid-run changes
 *    nothing); its relative data globs, which mean the original's
 *    directory, are passed as absolute --set overrides. The copy is sealed
 *    (sup_seal.c): checked before every launch round, an edit fails the
 *    run; a start with a run file other than the sealed one is refused
 *    (exit 2) unless --accept-runfile-change.
 *  - The generation continues after the highest one used, from the
 *    catalog's run state or DIR/generation (sup_seal.c), whichever is
 *    higher: a catalog rebuilt from the manifests never restarts it at 1.
 *  - A run that is done is done again, with "nothing to do", unless --steps
 *    goes beyond its final checkpoint: then it trains on from there (a new
 *    generation; the learning-rate schedule follows the new train.steps).
 *    A --steps that does not is said to change nothing.
 *  - A catalog that lists less than the store holds for this run
 *    (ckpt_store_catalog_behind: an old copy put back, a lost catalog
 *    recreated) is refused with exit 4, naming the catalog and
 *    `ckpt rebuild-catalog STORE`; --from-scratch goes on from the
 *    catalog's newest checkpoint. A catalog the store cannot open is exit
 *    4 with the store's message, --from-scratch or not: never a run from
 *    step 0 on a damaged catalog.
 *  - --unquarantine NODE|all rewrites the persisted run state (same gen
 *    and status) without running anything; quarantine is otherwise
 *    permanent for the run.
 *  - Every terminal state ends the process: a run that fails before the
 *    loop runs (too few usable nodes) never enters it, and a periodic
 *    check ends a loop whose run is over with no process left.
 *  - Stalls of the supervisor itself (the loop did not run: SIGSTOP, a long
 *    callback, an overloaded host; or a suspend) are measured (sup_stall.c)
 *    from a highest-priority timer here: event supervisor_stall {seconds,
 *    cause}, and
 *    s->stall_end_s for the hang checks. No store I/O of a commit, a GC
 *    or a record of the supervisor's own runs on the loop (sup_commitq,
 *    every store).
 *  - Peers on the control port: RLIMIT_NOFILE is raised to its hard limit;
 *    connections without an accepted HELLO are closed after
 *    SUP_CONN_HELLO_TIMEOUT_S and capped (the oldest is evicted; the cap is
 *    an eighth of the descriptors, at most SUP_CONN_MAX_UNAUTH, at least
 *    twice the workers); accept errors (EMFILE) pause the listener 100 ms
 *    doubling to 1 s; lines a peer can cause are rate limited.
 *  - An s3:// store (bucket + local cache tier) keeps its catalog,
 *    and so the run state, in its cache, <FT_S3_CACHE>/catalog. When
 *    FT_S3_CACHE is unset supervise sets it to DIR/s3cache before opening
 *    the store, and local workers inherit it (they open the same URI as
 *    shard writers, sharing the cache). The bucket alone is enough to go
 *    on: a lost cache is rebuilt from the bucket's manifests at open. Its
 *    commits and retention GC run off the loop (sup_commitq.c): with
 *    FT_S3_REQUIRE=both a commit waits for the bucket (at most
 *    FT_S3_RETRY_BUDGET_S), and GC lists it; the loop must keep serving
 *    heartbeats meanwhile.
 *  - A run whose persisted status is "failed" is resumed when supervise is
 *    run again, with its restart count reset (an operator who runs it again
 *    wants another try); quarantined nodes stay quarantined.
 *  - If the final step's checkpoint is already committed at start (the
 *    supervisor died between that commit and recording "done"), the run is
 *    marked done and supervise exits 0 without launching anything.
 *  - The command and ssh launchers put every node on "localhost" when
 *    nodes.hosts is empty; a list shorter than nodes + spares is refused
 *    at start (exit 2). The slurm launcher fills nodes.hosts from the
 *    allocation (slurm_hosts; a nodes.hosts of the run file is refused).
 *    The command launcher exports
 *    FT_RUN_TOKEN into sh's environment (a template that crosses machines
 *    must forward it itself); the ssh launcher writes it to ssh's stdin
 *    instead (sup_launch.h, docs/multihost.md).
 *  - s3:// data (data_listing_env, restore_listing, sup_listing.h): the
 *    workers get FT_DATA_LISTING=DIR/data_listing.json unless the
 *    environment names one; every checkpoint carries that file's JSON, and
 *    at start, before any worker, a resume whose checkpoint carries a
 *    listing writes it there when DIR has none or a different one (the old
 *    kept as .old, a warning); --relist-data moves the file aside instead
 *    so the workers list again. run_started carries data_listing {file,
 *    source, step, replaced}. A checkpoint whose listing cannot be read is
 *    exit 4 (the store's), never a run on another listing.
 *  - The control port is also written to DIR/control.port (for tools and
 *    tests) and carried by the run_started event.
 *  - Addresses (bind_control): the control port binds --listen >
 *    supervisor.listen > loopback (local launcher) or 0.0.0.0 (any other);
 *    ":PORT" keeps that default host. Workers dial --advertise >
 *    supervisor.advertise > the bound address > for a wildcard bind this
 *    host's address on the route to nodes.hosts[0] (loopback when there
 *    is none). An advertised name is passed as it is (workers resolve it).
 *    The advertised HOST:PORT goes to DIR/supervisor.addr (written whole,
 *    renamed in) and, with the bound one, to run_started (listen,
 *    advertise). A bind that fails (in use, not this host's) is exit 2.
 *  - Events beyond the spec's list: supervisor_stall {seconds, cause,
 *    gen, last_step}; run_started carries store_from, runfile (the
 *    snapshot) and runfile_sha256 (its seal), launcher and hosts (node i's
 *    host, when there is a list); runfile_changed and
 *    runfile_change_accepted (sup_seal.c); checkpoint_failed carries cause
 *    and checkpoint_mark_failed says a mark failed (sup_ckpt_events.c);
 *    connection_closed of peers without HELLO carries "suppressed" when
 *    rate limiting left some out; worker_launched carries role;
 *    run_interrupted {signal, gen, last_step} on SIGINT/SIGTERM;
 *    waiting_for_spare {reason} once when when_no_spares: wait blocks;
 *    waiting_on_storage {attempt, wait_s, step} and storage_retry
 *    {attempt, waited_s} around a storage hang's wait (sup_recovery.c);
 *    generation_started carries the skip list; worker_launched,
 *    fault_detected, node_quarantined and straggler carry "host" when the
 *    run has a host list (nodes.hosts or the Slurm allocation). The
 *    watchdog's events (loss_spike, checkpoint_bad, checkpoint_good,
 *    rollback, xid, straggler, straggler_cleared) are described in
 *    sup_watch.c, and the slurm launcher's (node_drained, drain_failed,
 *    node_unreachable, steps_unanswered) in sup_nodes.c and sup_timers.c.
 */
#include "sup_int.h"
#include "sup_launch.h"
#include "sup_listing.h"

#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "ft_file.h"
#include "ft_net.h"
#include "ft_opts.h"
#include "ft_version.h"
#include "sup_commitq.h"
#include "sup_shardq.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The control port's accept queue: a gang of thousands connects at once,
 * and while the loop is busy (launching nodes) the kernel holds what it has
 * not accepted yet; a short queue drops SYNs, which come back only after
 * 1, 3, 7... s of TCP retry (tests/scale). The kernel caps it at
 * net.core.somaxconn. */
#define SUP_LISTEN_BACKLOG 65535
/* The fewest descriptors beside the workers' connections (RocksDB's files,
 * the event log, the ports, a launch's log and pipe): a run refused for
 * want of descriptors surely lacks them (sup_idle trains 3 workers in 27). */
#define SUP_FD_RESERVE 16

extern char **environ;

static void usage(FILE *f) {
  fputs("usage: supervise [--spares N] [--state DIR] [--steps N] [--store URI]\n"
        "                 [--set KEY=VALUE]... [--worker PATH] [--from-scratch]\n"
        "                 [--listen HOST:PORT] [--advertise HOST[:PORT]]\n"
        "                 [--http HOST:PORT|off] [--accept-runfile-change]\n"
        "                 [--relist-data] RUN.yaml\n"
        "       supervise [--state DIR] [--store URI] --unquarantine NODE|all RUN.yaml\n"
        "       supervise status DIR [--json]   (what a run is doing; --help there)\n"
        "       supervise report DIR --out FILE (the dashboard as one HTML file)\n"
        "       supervise doctor DIR [--spares] (the nodes check themselves again now)\n"
        "\n"
        "Runs the training run described by RUN.yaml on nodes.count nodes of\n"
        "nodes.workers_per_node worker processes each, plus N warm spare nodes, and\n"
        "keeps it running: a worker that dies on a host that still answers is\n"
        "restarted in place; a node that is lost, hangs, or fails\n"
        "recovery.node_failures_to_quarantine times in the window is quarantined\n"
        "and replaced by a spare; either way the gang restarts from the last\n"
        "committed checkpoint. A full store, a bad run file or missing data, and\n"
        "the supervisor's own stalls never cost a node. Events go to\n"
        "DIR/events.jsonl, worker output to DIR/logs/.\n"
        "\n"
        "options:\n"
        "  --spares N      warm spare nodes (default 0)\n"
        "  --state DIR     run state, event log, logs, the run file's copy (run.yaml)\n"
        "                  and by default the checkpoint store live here (./state)\n"
        "  --steps N       override train.steps (forwarded to the workers); on a run\n"
        "                  that is done, a larger N trains it on to step N\n"
        "  --store URI     the checkpoint store: local:PATH or s3://BUCKET/PREFIX\n"
        "                  (default: the run file's checkpoint.store, a local:DIR\n"
        "                  relative to the run file's directory; its default,\n"
        "                  local:state/store, means local:DIR/store)\n"
        "  --set KEY=VAL   override any run-file key, e.g. --set train.lr=1e-3\n"
        "                  (repeatable; forwarded to the workers)\n"
        "  --worker PATH   the worker program (default: `worker` beside supervise)\n"
        "  --listen HOST:PORT\n"
        "                  bind the control port here (also :PORT, HOST; port 0 or\n"
        "                  none: any free port); overrides supervisor.listen. Default:\n"
        "                  loopback with the local launcher, every interface (0.0.0.0)\n"
        "                  with a remote one\n"
        "  --advertise HOST[:PORT]\n"
        "                  the address workers dial (their --connect); overrides\n"
        "                  supervisor.advertise. Default: the bound address, or for\n"
        "                  0.0.0.0 this host's address on the route to the first of\n"
        "                  nodes.hosts. Written to DIR/supervisor.addr\n"
        "  --http HOST:PORT|off\n"
        "                  the operator's read-only HTTP port: / (the dashboard),\n"
        "                  /metrics (Prometheus) and /status (JSON); overrides\n"
        "                  supervisor.http. Default:\n"
        "                  loopback, any free port, written to DIR/http.addr\n"
        "  --from-scratch  go on even though the store has checkpoints of this run\n"
        "                  that its catalog does not list (an older catalog put back):\n"
        "                  train from the catalog's newest checkpoint, or from step 0.\n"
        "                  Without it supervise refuses (exit 4); `ckpt rebuild-catalog\n"
        "                  STORE` lists them again instead\n"
        "  --unquarantine NODE|all\n"
        "                  put a quarantined node (or all) back into the run's pool:\n"
        "                  rewrites the persisted run state, says what it did, exits\n"
        "                  (0); the next run uses the node again\n"
        "  --accept-runfile-change\n"
        "                  take RUN.yaml although it differs from the run file this\n"
        "                  state directory's run was started with (DIR/run.seal.json);\n"
        "                  without it such a start is refused (exit 2)\n"
        "  --relist-data   s3:// data: list the bucket again instead of reading the\n"
        "                  listing the run recorded (DIR/data_listing.json moves to\n"
        "                  DIR/data_listing.json.old; a resume from a checkpoint\n"
        "                  that carries a listing otherwise writes the checkpoint's)\n"
        "  -h, --help      this text\n"
        "  --version       the version and the git revision it was built from\n"
        "\n"
        "examples:\n"
        "  supervise examples/demo.yaml                 # 2 nodes, no spare\n"
        "  supervise --spares 1 --state /tmp/s1 examples/demo.yaml\n"
        "  supervise --spares 1 --steps 50 --set recovery.when_no_spares=fail run.yaml\n"
        "  FT_FAILPOINTS=kill_node_at_step=60 supervise --spares 1 examples/demo.yaml\n"
        "      # kills the gang's last node at step 60 and shows the recovery\n"
        "  supervise --state /tmp/s1 examples/demo.yaml  # again: resumes the run\n"
        "  supervise --listen 0.0.0.0:7000 --advertise head.cluster run.yaml\n"
        "      # workers on other hosts dial head.cluster:7000 (nodes.launcher: ssh)\n"
        "  supervise status /tmp/s1                     # from another terminal\n"
        "  supervise report /tmp/s1 --out report.html   # loss curve, faults, nodes, timeline\n"
        "  curl -s http://$(cat /tmp/s1/http.addr)/metrics\n"
        "\n"
        "S3 stores (--store s3://BUCKET/PREFIX): chunks go to a local cache first and\n"
        "are uploaded in the background; the catalog (and the run state) live in the\n"
        "cache, FT_S3_CACHE/catalog. FT_S3_CACHE defaults to DIR/s3cache here; local\n"
        "workers inherit it and every FT_S3_* and AWS_* variable. Set FT_S3_ENDPOINT\n"
        "for MinIO/moto, FT_S3_REQUIRE=local (commit once on local disk) or both (the\n"
        "default: commit once in the bucket too). `ckpt --store s3://BUCKET/PREFIX`\n"
        "with the same FT_S3_CACHE lists the run's checkpoints; with an empty cache it\n"
        "rebuilds the catalog from the bucket. Example:\n"
        "  FT_S3_ENDPOINT=http://localhost:9000 supervise --store s3://ckpts/run1 run.yaml\n"
        "\n"
        "If supervise itself dies, run the same command again with the same --state:\n"
        "it resumes from the last committed checkpoint with a new generation.\n"
        "The run file is copied to DIR/run.yaml at start and the workers read that\n"
        "copy, so editing or removing RUN.yaml mid-run changes nothing until the\n"
        "next start. The copy is sealed (its SHA-256 in DIR/run.seal.json): an edit of\n"
        "DIR/run.yaml mid-run is found before the next launch, which does not happen:\n"
        "the run fails (exit 1, event runfile_changed naming the keys). A change is\n"
        "applied only at a start, through RUN.yaml and --accept-runfile-change.\n"
        "\n"
        "exit codes:\n"
        "  0    run done (also: the run in DIR was already done; it says so, and\n"
        "       whether --steps changed anything)\n"
        "  1    run failed (recovery.max_restarts exceeded, no nodes left,\n"
        "       the run file's copy DIR/run.yaml changed mid-run,\n"
        "       recovery.when_no_spares: fail, a global batch the world can't divide,\n"
        "       too few usable nodes: see --unquarantine)\n"
        "  2    usage or run-file error (also: RUN.yaml differs from the run file the\n"
        "       run was started with: see --accept-runfile-change)\n"
        "  4    checkpoint store / catalog error (another supervisor holds it, a\n"
        "       damaged catalog, a catalog behind the store: see --from-scratch;\n"
        "       the store refused the final checkpoint: run again to resume)\n"
        "  130  interrupted (SIGINT/SIGTERM): the gang was stopped first\n",
        f);
}

static int mkdir_p(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0755) && errno != EEXIST)
        return -1;
      *p = '/';
    }
  if (mkdir(tmp, 0755) && errno != EEXIST)
    return -1;
  return 0;
}

static int write_port_file(const sup *s) {
  char path[4200], tmp[4210];
  snprintf(path, sizeof path, "%s/control.port", s->state_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f)
    return -1;
  fprintf(f, "%d\n", s->port);
  if (fclose(f) || rename(tmp, path))
    return -1;
  return 0;
}

/* ---- the loop's own health: accept backoff, stalls ------------------------ */

/* Lines about the control port that a peer can cause at will go through
 * this limit: one a second, with the count left out. */
static sup_ratelimit g_port_rl = {.window_s = 1.0, .burst = 1};

static void port_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void port_log(const char *fmt, ...) {
  long dropped;
  if (!sup_ratelimit_allow(&g_port_rl, ft_now_s(), &dropped))
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (dropped)
    fprintf(stderr, "supervise: %s (%ld similar line(s) left out)\n", line, dropped);
  else
    fprintf(stderr, "supervise: %s\n", line);
}

/* accept() failing (EMFILE, ENFILE, ENOBUFS...) leaves the connection in
 * the backlog, so the listener would fire again at once: it pauses instead,
 * 100 ms doubling to 1 s while the error lasts. */
#define ACCEPT_BACKOFF_MIN_S 0.1
#define ACCEPT_BACKOFF_MAX_S 1.0
static struct event *g_accept_resume;
static double g_accept_backoff_s = ACCEPT_BACKOFF_MIN_S;

/* Connections accepted before the listener yields the loop for a turn:
 * with thousands queued it would otherwise take them all (and their
 * HELLOs and doctor reports) before the launches and heartbeats waiting
 * behind them; at 16,384 ranks formation took 15-21 s that way, 9 s with
 * this (tests/scale, bench_scale.sh). */
#define ACCEPT_PER_TURN 64
static int g_accepted_this_turn;

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *a, int alen,
                      void *arg) {
  sup *s = arg;
  sup_conn *c;
  g_accept_backoff_s = ACCEPT_BACKOFF_MIN_S;
  if (++g_accepted_this_turn >= ACCEPT_PER_TURN) { /* the rest after a turn */
    g_accepted_this_turn = 0;
    evconnlistener_disable(l);
    struct timeval now = {0, 0};
    evtimer_add(g_accept_resume, &now);
  }
  if (s->state >= SUP_FINISHING) {
    close(fd);
    return;
  }
  if (sup_conn_new(s->base, fd, s->rf.run, s->token, &sup_run_conn_ops, s, &c))
    port_log("cannot accept a connection: %s", ft_err_detail());
}

static void accept_error_cb(struct evconnlistener *l, void *arg) {
  int e = EVUTIL_SOCKET_ERROR();
  double b = g_accept_backoff_s;
  evconnlistener_disable(l);
  struct timeval tv = {(long)b, (long)((b - (long)b) * 1e6)};
  evtimer_add(g_accept_resume, &tv);
  g_accept_backoff_s = b * 2 > ACCEPT_BACKOFF_MAX_S ? ACCEPT_BACKOFF_MAX_S : b * 2;
  port_log("accept on the control port: %s; not accepting for %.0f ms (%d connection(s) "
           "without HELLO)",
           strerror(e), b * 1e3, sup_conn_unauth_count());
}

static void accept_resume_cb(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  evconnlistener_enable(s->lis);
}

/* The loop-stall timer (sup_stall.c measures; this is its callback): at
 * the loop's highest priority every SUP_STALL_PERIOD_S. The same timer ends
 * a loop whose run is over with no process left (a safety net: every
 * terminal state exits) and flushes rate-limited logs. */
static struct event *g_stall_ev;

static int any_process_alive(const sup *s) {
  for (int n = 0; n < s->nnodes; n++)
    for (int j = 0; j < s->G; j++)
      if (s->nodes[n].w[j].alive)
        return 1;
  return 0;
}

static void stall_cb(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  sup_loop_stall_check(s);
  sup_run_flush_log(s);
  long k = sup_ratelimit_flush(&g_port_rl, ft_now_s());
  if (k)
    fprintf(stderr, "supervise: %ld more line(s) about the control port left out\n", k);
  /* every terminal state ends the loop, even one reached before it ran */
  if (s->state >= SUP_FINISHING && !any_process_alive(s))
    event_base_loopbreak(s->base);
}

/* The store: --store, else the run file's checkpoint.store: an s3:// URI
 * as it is, a local:DIR relative to the run file's directory; its default,
 * local:state/store, means DIR/store (the store lives with the run state,
 * as the default --state, ./state, makes it). An s3:// store's cache (and
 * so its catalog, <cache>/catalog) is FT_S3_CACHE, set to DIR/s3cache when
 * the environment has none; the workers the local launcher starts inherit
 * it, so they share the cache. *from: where the choice came from. */
static int resolve_store(sup *s, const char *store_arg, const char **from) {
  const char *uri = store_arg, *rs = s->rf.checkpoint.store;
  *from = "--store";
  if (!uri && ft_runfile_store_kind(rs) == FT_RF_STORE_S3) {
    uri = rs;
    *from = "the run file's checkpoint.store";
  }
  if (!uri) { /* the default: STATE/store; a local:DIR of the run file: relative to its folder */
    int dflt = ft_runfile_store_kind(rs) == FT_RF_STORE_STATE;
    *from = dflt ? "the state directory" : "the run file's checkpoint.store";
    if (ft_runfile_store_uri(rs, s->runfile_path, s->state_dir, s->store_uri,
                             sizeof s->store_uri)) {
      fprintf(stderr, "supervise: %s\n",
              dflt ? "--state path too long" : "checkpoint.store: path too long");
      return -1;
    }
    return 0;
  }
  if (snprintf(s->store_uri, sizeof s->store_uri, "%s", uri) >= (int)sizeof s->store_uri) {
    fprintf(stderr, "supervise: store URI too long: %s\n", uri);
    return -1;
  }
  if (strncmp(uri, "s3://", 5))
    return 0;
  const char *cache = getenv("FT_S3_CACHE");
  if (cache && cache[0])
    return 0;
  char dir[4200];
  if (snprintf(dir, sizeof dir, "%s/s3cache", s->state_dir) >= (int)sizeof dir ||
      setenv("FT_S3_CACHE", dir, 1)) {
    fprintf(stderr, "supervise: cannot set FT_S3_CACHE=%s/s3cache\n", s->state_dir);
    return -1;
  }
  return 0;
}

/* Training data in a bucket (data.train/val s3://...): every rank must read
 * the same listing, however the bucket changes while they list, restart or
 * resume. The first to open a pattern records its listing (keys, sizes,
 * ETags) in FT_DATA_LISTING and the others read it (docs/data.md), so the
 * workers get STATE/data_listing.json unless the environment names one;
 * every checkpoint carries the file's JSON and a resume without the file
 * gets it back from its checkpoint (sup_listing.h, restore_listing).
 * *from_env: FT_DATA_LISTING came from the environment. */
static int data_listing_env(sup *s, int *from_env) {
  *from_env = 0;
  if (!ft_runfile_is_s3(s->rf.data.train) && !ft_runfile_is_s3(s->rf.data.val))
    return 0;
  const char *set = getenv("FT_DATA_LISTING");
  char path[4200];
  if (set && set[0])
    *from_env = 1;
  else if (snprintf(path, sizeof path, "%s/data_listing.json", s->state_dir) >= (int)sizeof path ||
           setenv("FT_DATA_LISTING", path, 1)) {
    fprintf(stderr, "supervise: cannot set FT_DATA_LISTING=%s/data_listing.json\n", s->state_dir);
    return -1;
  }
  if (sup_listing_new(getenv("FT_DATA_LISTING"), &s->listing)) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    return -1;
  }
  return 0;
}

/* ---- main, in phases ------------------------------------------------------- */

/* What main's phases share. Each phase returns GO to go on, or the exit
 * code; cleanup runs whatever the last phase reached. */
#define GO (-1)
typedef struct main_ctx {
  sup *s;
  /* the command line */
  const char *state_dir, *store_arg, *worker, *steps, *runfile, *unquarantine;
  const char *listen_arg, *advertise_arg; /* --listen, --advertise */
  const char *http_arg;                   /* --http */
  int spares, spares_given, from_scratch;
  int accept_runfile;          /* --accept-runfile-change */
  int relist_data;             /* --relist-data */
  int listing_env;             /* FT_DATA_LISTING came from the environment */
  sup_listing_outcome listing; /* what restore_listing did (run_started) */
  const char **sets;           /* the --set arguments (point into argv), then pin_data's */
  int nsets;
  char set_train[1200], set_val[1200]; /* pin_data's --set arguments */
  const char *store_from;              /* what chose the store (resolve_store) */
  /* what the phases found */
  char evpath[4200];
  char listen[300], advertise[300]; /* the bound and the advertised HOST:PORT */
  int64_t latest;                   /* the newest committed checkpoint at start; -1: none */
} main_ctx;

static int parse_args(main_ctx *m, int argc, char **argv) {
  static const struct option opts[] = {
      {"spares", 1, 0, 'p'},       {"state", 1, 0, 'd'},
      {"steps", 1, 0, 'n'},        {"store", 1, 0, 's'},
      {"set", 1, 0, 'S'},          {"worker", 1, 0, 'w'},
      {"help", 0, 0, 'h'},         {"unquarantine", 1, 0, 'U'},
      {"from-scratch", 0, 0, 'F'}, {"version", 0, 0, 'V'},
      {"listen", 1, 0, 'L'},       {"advertise", 1, 0, 'A'},
      {"http", 1, 0, 'H'},         {"accept-runfile-change", 0, 0, 'R'},
      {"relist-data", 0, 0, 'D'},  {0, 0, 0, 0},
  };
  int ch;
  char oerr[192];
  if (ft_opts_check(argc, argv, opts, oerr, sizeof oerr)) {
    fprintf(stderr, "supervise: %s\n", oerr);
    return SUP_EXIT_USAGE;
  }
  m->state_dir = "state";
  while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (ch) {
    case 'p': {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*end || v < 0 || v > SUP_MAX_NODES) {
        fprintf(stderr, "supervise: --spares: '%s' is not a count 0..%d\n", optarg, SUP_MAX_NODES);
        return SUP_EXIT_USAGE;
      }
      m->spares = (int)v;
      m->spares_given = 1;
      break;
    }
    case 'd':
      m->state_dir = optarg;
      break;
    case 'n':
      m->steps = optarg;
      break;
    case 's':
      m->store_arg = optarg;
      break;
    case 'S':
      if (!strchr(optarg, '=')) {
        fprintf(stderr, "supervise: --set wants KEY=VALUE, got '%s'\n", optarg);
        return SUP_EXIT_USAGE;
      }
      m->sets[m->nsets++] = optarg;
      break;
    case 'w':
      m->worker = optarg;
      break;
    case 'U': {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (strcmp(optarg, "all") && (!optarg[0] || *end || v < 0 || v >= SUP_MAX_NODES)) {
        fprintf(stderr, "supervise: --unquarantine: '%s' is neither a node 0..%d nor 'all'\n",
                optarg, SUP_MAX_NODES - 1);
        return SUP_EXIT_USAGE;
      }
      m->unquarantine = optarg;
      break;
    }
    case 'F':
      m->from_scratch = 1;
      break;
    case 'R':
      m->accept_runfile = 1;
      break;
    case 'D':
      m->relist_data = 1;
      break;
    case 'H':
      m->http_arg = optarg;
      break;
    case 'L':
    case 'A': {
      ft_hostport hp;
      if (ft_net_parse(optarg, &hp)) {
        fprintf(stderr, "supervise: --%s: %s\n", ch == 'L' ? "listen" : "advertise",
                ft_err_detail());
        return SUP_EXIT_USAGE;
      }
      if (ch == 'A' && !hp.host[0]) {
        fprintf(stderr, "supervise: --advertise: '%s' has no host\n", optarg);
        return SUP_EXIT_USAGE;
      }
      *(ch == 'L' ? &m->listen_arg : &m->advertise_arg) = optarg;
      break;
    }
    case 'h':
      usage(stdout);
      return SUP_EXIT_DONE;
    case 'V':
      ft_version_print("supervise");
      return SUP_EXIT_DONE;
    default:
      usage(stderr);
      return SUP_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    usage(stderr);
    return SUP_EXIT_USAGE;
  }
  m->runfile = argv[optind];
  return GO;
}

/* Runs argv (PATH searched) and reads its stdout into out (NUL-terminated;
 * what does not fit is cut). Its stderr stays ours. Returns its wait
 * status, or -1 with errno when it could not be run. Used at start only,
 * before the loop and the store's threads exist. */
static int run_capture(char *const argv[], char *out, size_t cap) {
  int p[2];
  if (pipe2(p, O_CLOEXEC))
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (err) {
    close(p[0]);
    errno = err;
    return -1;
  }
  size_t got = 0;
  for (;;) {
    char sink[512];
    char *dst = got + 1 < cap ? out + got : sink;
    size_t room = got + 1 < cap ? cap - 1 - got : sizeof sink;
    ssize_t r = read(p[0], dst, room);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    if (dst != sink)
      got += (size_t)r;
  }
  out[got] = 0;
  close(p[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return status;
}

/* The slurm launcher's hosts: the allocation's nodes (SLURM_JOB_NODELIST,
 * expanded by `scontrol show hostnames`), in Slurm's order, into
 * nodes.hosts: the first nodes.count are the active nodes, the rest warm
 * spares (all of them unless --spares says fewer). */
static int slurm_hosts(main_ctx *m) {
  sup *s = m->s;
  const char *job = getenv("SLURM_JOB_ID"), *list = getenv("SLURM_JOB_NODELIST");
  if (!job || !*job || !list || !*list) {
    fprintf(stderr,
            "supervise: nodes.launcher is slurm but %s is not set: run supervise inside "
            "an allocation (sbatch or salloc; see docs/multihost.md)\n",
            !job || !*job ? "SLURM_JOB_ID" : "SLURM_JOB_NODELIST");
    return SUP_EXIT_USAGE;
  }
  if (s->rf.nodes.nhosts) {
    fprintf(stderr,
            "%s: nodes.hosts is set, but the slurm launcher takes its hosts from the "
            "allocation (SLURM_JOB_NODELIST=%s); remove nodes.hosts\n",
            m->runfile, list);
    return SUP_EXIT_USAGE;
  }
  static char out[64 * 1024];
  char *argv[] = {"scontrol", "show", "hostnames", (char *)list, NULL};
  int st = run_capture(argv, out, sizeof out);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
    fprintf(stderr, "supervise: scontrol show hostnames %s: %s\n", list,
            st < 0 ? strerror(errno) : "failed (its message is above)");
    return SUP_EXIT_USAGE;
  }
  int max = (int)(sizeof s->rf.nodes.hosts / sizeof s->rf.nodes.hosts[0]), n = 0;
  char *save = NULL;
  for (char *h = strtok_r(out, " \t\r\n", &save); h; h = strtok_r(NULL, " \t\r\n", &save)) {
    if (strlen(h) >= sizeof s->rf.nodes.hosts[0]) {
      fprintf(stderr, "supervise: the allocation's node name '%.40s...' is too long\n", h);
      return SUP_EXIT_USAGE;
    }
    if (n < max)
      snprintf(s->rf.nodes.hosts[n], sizeof s->rf.nodes.hosts[0], "%s", h);
    n++;
  }
  if (n < s->N) {
    fprintf(stderr,
            "supervise: the allocation (job %s) has %d node(s), %s, but nodes.count is %d: "
            "ask for at least %d (sbatch/salloc -N)\n",
            job, n, list, s->N, s->N);
    return SUP_EXIT_USAGE;
  }
  int spare = (n < max ? n : max) - s->N;
  if (m->spares_given && m->spares > spare) {
    fprintf(stderr,
            "supervise: --spares %d: the allocation (job %s, %s) has %d node(s) beyond "
            "nodes.count %d\n",
            m->spares, job, list, n - s->N, s->N);
    return SUP_EXIT_USAGE;
  }
  s->S = m->spares_given ? m->spares : spare;
  s->rf.nodes.nhosts = s->N + s->S;
  return GO;
}

/* The run file, the overrides, and what follows from them. */
static int load_runfile(main_ctx *m) {
  sup *s = m->s;
  char err[2048];
  if (ft_runfile_load(m->runfile, &s->rf, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return SUP_EXIT_USAGE;
  }
  if (m->steps && ft_runfile_set(&s->rf, "train.steps", m->steps, err, sizeof err)) {
    fprintf(stderr, "supervise: --steps: %s\n", err);
    return SUP_EXIT_USAGE;
  }
  for (int i = 0; i < m->nsets; i++) {
    char key[256];
    const char *eq = strchr(m->sets[i], '=');
    snprintf(key, sizeof key, "%.*s", (int)(eq - m->sets[i]), m->sets[i]);
    if (ft_runfile_set(&s->rf, key, eq + 1, err, sizeof err)) {
      fprintf(stderr, "supervise: --set %s: %s\n", m->sets[i], err);
      return SUP_EXIT_USAGE;
    }
  }
  if (ft_runfile_validate(&s->rf, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return SUP_EXIT_USAGE;
  }
  s->steps_override = m->steps ? (long long)s->rf.train.steps : -1;
  s->sets = m->sets;
  s->nsets = m->nsets;
  s->N = s->rf.nodes.count;
  s->S = m->spares;
  s->G = s->rf.nodes.workers_per_node;
  if (s->rf.nodes.launcher == FT_RF_LAUNCHER_COMMAND) {
    s->command_launcher = 1;
    s->node_step = strstr(s->rf.nodes.command, "{slots}") != NULL;
  } else if (s->rf.nodes.launcher == FT_RF_LAUNCHER_SSH)
    s->command_launcher = s->ssh_launcher = 1;
  else if (s->rf.nodes.launcher == FT_RF_LAUNCHER_SLURM)
    s->command_launcher = s->slurm_launcher = s->node_step = 1;
  else if (s->rf.nodes.launcher != FT_RF_LAUNCHER_LOCAL) {
    fprintf(stderr, "supervise: nodes.launcher: unknown '%s' (local | command | ssh | slurm)\n",
            ft_rf_launcher_name(s->rf.nodes.launcher));
    return SUP_EXIT_USAGE;
  }
  if (s->command_launcher && !s->ssh_launcher && !s->slurm_launcher && !s->rf.nodes.command[0]) {
    fprintf(stderr, "supervise: nodes.launcher is command but nodes.command is empty\n");
    return SUP_EXIT_USAGE;
  }
  if (s->slurm_launcher) {
    int ex = slurm_hosts(m);
    if (ex != GO)
      return ex;
  }
  s->nnodes = s->N + s->S;
  s->final_step = s->rf.train.steps;
  s->run.last_step = -1;
  s->run.newest_committed = -1;
  if (s->nnodes > SUP_MAX_NODES) {
    fprintf(stderr, "supervise: %d nodes + %d spares is more than %d\n", s->N, s->S, SUP_MAX_NODES);
    return SUP_EXIT_USAGE;
  }
  /* a short host list would put the last nodes on "localhost" */
  if (s->command_launcher && s->rf.nodes.nhosts > 0 && s->rf.nodes.nhosts < s->nnodes) {
    fprintf(stderr,
            "%s: nodes.hosts lists %d host(s) but the run needs %d (nodes.count %d + %d "
            "spare(s)); list one host per node, or none for localhost\n",
            m->runfile, s->rf.nodes.nhosts, s->nnodes, s->N, s->S);
    return SUP_EXIT_USAGE;
  }
  s->no_spares = s->rf.recovery.when_no_spares == FT_RF_NO_SPARES_WAIT   ? SUP_NOSPARE_WAIT
                 : s->rf.recovery.when_no_spares == FT_RF_NO_SPARES_FAIL ? SUP_NOSPARE_FAIL
                                                                         : SUP_NOSPARE_SHRINK;
  if (s->rf.train.global_batch % (s->N * s->G)) {
    fprintf(stderr,
            "%s: train.global_batch %d is not divisible by the world size %d "
            "(nodes.count x nodes.workers_per_node)\n",
            m->runfile, s->rf.train.global_batch, s->N * s->G);
    return SUP_EXIT_USAGE;
  }
  return GO;
}

/* The run file's relative data globs are relative to its directory, which
 * the snapshot (in DIR) does not share: the workers get them as absolute
 * --set overrides, resolved as supervise resolved them. */
static int pin_data(main_ctx *m) {
  sup *s = m->s;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) {
    fprintf(stderr, "supervise: getcwd: %s\n", strerror(errno));
    return -1;
  }
  struct {
    const char *key, *glob;
    char *out;
    size_t n;
  } d[2] = {{"data.train", s->rf.data.train, m->set_train, sizeof m->set_train},
            {"data.val", s->rf.data.val, m->set_val, sizeof m->set_val}};
  for (int i = 0; i < 2; i++) {
    if (!d[i].glob[0])
      continue;
    int abs = d[i].glob[0] == '/' || ft_runfile_is_s3(d[i].glob); /* a bucket's: as it is */
    if (snprintf(d[i].out, d[i].n, "%s=%s%s%s", d[i].key, abs ? "" : cwd, abs ? "" : "/",
                 d[i].glob) >= (int)d[i].n) {
      fprintf(stderr, "supervise: %s: path too long\n", d[i].key);
      return -1;
    }
    m->sets[m->nsets++] = d[i].out;
  }
  s->sets = m->sets;
  s->nsets = m->nsets;
  return 0;
}

/* The state dir, logs/, the store's URI, the worker program. */
static int prepare_paths(main_ctx *m) {
  sup *s = m->s;
  struct stat st;
  if (m->unquarantine && stat(m->state_dir, &st)) {
    fprintf(stderr, "supervise: --state %s: %s\n", m->state_dir, strerror(errno));
    return SUP_EXIT_USAGE;
  }
  if (mkdir_p(m->state_dir)) {
    fprintf(stderr, "supervise: cannot create --state %s: %s\n", m->state_dir, strerror(errno));
    return SUP_EXIT_USAGE;
  }
  if (!realpath(m->state_dir, s->state_dir) || !realpath(m->runfile, s->runfile_path)) {
    fprintf(stderr, "supervise: %s: %s\n", m->state_dir, strerror(errno));
    return SUP_EXIT_USAGE;
  }
  if (resolve_store(s, m->store_arg, &m->store_from) || data_listing_env(s, &m->listing_env))
    return SUP_EXIT_USAGE;
  if (m->unquarantine)
    return GO; /* nothing is launched */
  char logs[4200];
  if (snprintf(logs, sizeof logs, "%s/logs", s->state_dir) >= (int)sizeof logs || mkdir_p(logs)) {
    fprintf(stderr, "supervise: cannot create %s: %s\n", logs, strerror(errno));
    return SUP_EXIT_USAGE;
  }
  if (m->worker)
    snprintf(s->worker_path, sizeof s->worker_path, "%s", m->worker);
  else
    sup_default_worker(s->worker_path, sizeof s->worker_path);
  if (strchr(s->worker_path, '/') && access(s->worker_path, X_OK) != 0) {
    fprintf(stderr, "supervise: the worker program %s is not executable: %s\n", s->worker_path,
            strerror(errno));
    return SUP_EXIT_USAGE;
  }
  if (s->rf.nodes.agent) {
    /* the node's one process is its agent, which starts the workers (and
     * adds their --connect and --slot); both paths absolute: the agent may
     * run in another directory or on another host */
    s->agent_mode = s->node_step = 1;
    const char *env = getenv("FT_AGENT");
    if (env && env[0])
      snprintf(s->agent_path, sizeof s->agent_path, "%s", env);
    else if (strchr(s->worker_path, '/')) {
      char dir[4096];
      snprintf(dir, sizeof dir, "%s", s->worker_path);
      snprintf(s->agent_path, sizeof s->agent_path, "%s/ftagent", dirname(dir));
    } else
      snprintf(s->agent_path, sizeof s->agent_path, "ftagent");
    char abs[PATH_MAX];
    if (strchr(s->agent_path, '/') &&
        (access(s->agent_path, X_OK) != 0 || !realpath(s->agent_path, abs))) {
      fprintf(stderr, "supervise: nodes.agent: the agent program %s is not executable: %s\n",
              s->agent_path, strerror(errno));
      return SUP_EXIT_USAGE;
    }
    if (strchr(s->agent_path, '/'))
      snprintf(s->agent_path, sizeof s->agent_path, "%s", abs);
    if (strchr(s->worker_path, '/') && realpath(s->worker_path, abs))
      snprintf(s->worker_path, sizeof s->worker_path, "%s", abs);
  }
  return GO;
}

/* Where the catalog of s->store_uri lives, for messages. */
static void catalog_path(const sup *s, char *out, size_t n) {
  if (!strncmp(s->store_uri, "s3://", 5))
    snprintf(out, n, "%s/catalog", getenv("FT_S3_CACHE") ? getenv("FT_S3_CACHE") : "FT_S3_CACHE");
  else
    snprintf(out, n, "%s/catalog", s->store_uri + (strncmp(s->store_uri, "local:", 6) ? 0 : 6));
}

/* The store, as the catalog's writer; a catalog that lost checkpoints of
 * this run is refused (a damaged catalog never silently restarts a run). */
static int open_store(main_ctx *m) {
  sup *s = m->s;
  char cat[4300];
  catalog_path(s, cat, sizeof cat);
  ckpt_store_opts so = {0};
  ft_runfile_store_env(&s->rf, s->store_uri);
  int rc = ckpt_store_open(s->store_uri, &so, &s->store);
  if (rc) {
    if (rc == FT_EBUSY)
      fprintf(stderr, "supervise: another supervisor holds the catalog of %s: %s\n", s->store_uri,
              ft_err_detail());
    else
      fprintf(stderr, "supervise: cannot open the store %s (catalog %s): %s: %s\n", s->store_uri,
              cat, ft_strerror(rc), ft_err_detail());
    return SUP_EXIT_STORE;
  }
  if (m->unquarantine)
    return GO;
  int64_t newest = -1, known = -1;
  int behind = ckpt_store_catalog_behind(s->store, s->rf.run, &newest);
  if (behind < 0 && strncmp(s->store_uri, "s3://", 5)) {
    fprintf(stderr, "supervise: cannot compare the catalog %s with the store %s: %s\n", cat,
            s->store_uri, ft_err_detail());
    return SUP_EXIT_STORE;
  }
  if (behind < 0) /* the bucket is away: its uploads catch up later */
    fprintf(stderr,
            "supervise: warning: cannot compare the catalog %s with the bucket (%s); going on "
            "with the catalog\n",
            cat, ft_err_detail());
  /* checkpoints that lived in the memory of an earlier supervisor's workers
   * are gone with them */
  int dropped = 0;
  rc = ckpt_store_drop_memory(s->store, s->rf.run, 0, &dropped);
  if (rc) {
    fprintf(stderr, "supervise: cannot update the catalog %s: %s\n", cat, ft_err_detail());
    return SUP_EXIT_STORE;
  }
  if (dropped)
    fprintf(stderr,
            "supervise: %d checkpoint(s) of run %s lived only in the memory of an earlier run's "
            "workers: dropped from the catalog\n",
            dropped, s->rf.run);
  rc = ckpt_store_latest(s->store, s->rf.run, INT64_MAX, &known);
  if (rc && rc != FT_ENOENT) {
    fprintf(stderr, "supervise: cannot read the catalog %s: %s\n", cat, ft_err_detail());
    return SUP_EXIT_STORE;
  }
  if (rc)
    known = -1;
  if (behind == 1 && !m->from_scratch) {
    fprintf(stderr,
            "supervise: the catalog %s is behind the store %s: run %s has a checkpoint at step "
            "%" PRId64 " that the catalog does not list (the newest it would restore: %" PRId64
            "); starting now would train from an older step.\n"
            "  to recover it:  ckpt rebuild-catalog %s\n"
            "  to go on from the catalog's newest anyway: supervise --from-scratch ...\n",
            cat, s->store_uri, s->rf.run, newest, known, s->store_uri);
    return SUP_EXIT_STORE;
  }
  if (behind == 1)
    fprintf(stderr,
            "supervise: --from-scratch: the catalog lacks checkpoints up to step %" PRId64
            "; going on from %s\n",
            newest, known >= 0 ? "its newest" : "step 0");
  m->latest = known;
  return GO;
}

/* The run file's snapshot, sealed (sup_seal.c), once the catalog's lock is
 * ours (a second supervisor, refused, must not replace the running one's). */
static int snapshot(main_ctx *m) {
  if (m->unquarantine)
    return GO;
  if (sup_seal_snapshot(m->s, m->s->runfile_path, m->accept_runfile) || pin_data(m))
    return SUP_EXIT_USAGE;
  return GO;
}

/* The node pool, every node as configured (persisted roles come next). */
static int alloc_pool(main_ctx *m) {
  sup *s = m->s;
  if (m->unquarantine)
    s->nnodes = SUP_MAX_NODES; /* keep every quarantined node the state lists */
  s->nodes = calloc((size_t)s->nnodes, sizeof *s->nodes);
  if (!s->nodes)
    return SUP_EXIT_FAILED;
  for (int n = 0; n < s->nnodes; n++) {
    s->nodes[n].role = n < s->N ? SUP_ROLE_ACTIVE : SUP_ROLE_SPARE;
    s->nodes[n].w = calloc((size_t)s->G, sizeof *s->nodes[n].w);
    if (!s->nodes[n].w)
      return SUP_EXIT_FAILED;
    for (int j = 0; j < s->G; j++) {
      s->nodes[n].w[j].node = n;
      s->nodes[n].w[j].slot = j;
      s->nodes[n].w[j].rank = -1;
    }
  }
  return GO;
}

/* Why node n was quarantined, from the recovery notes sup_recovery.c keeps
 * under "<run>/recovery" ({"nodes": [{"node", "reason"}...]}); "" if none. */
static void quarantine_reason(sup *s, int n, char *out, size_t len) {
  char key[256], *txt = NULL;
  out[0] = 0;
  snprintf(key, sizeof key, "%s/recovery", s->rf.run);
  if (ckpt_store_get_meta(s->store, key, &txt))
    return;
  cJSON *o = cJSON_Parse(txt), *it;
  free(txt);
  cJSON *nodes = cJSON_GetObjectItem(o, "nodes"); /* NULL-safe */
  cJSON_ArrayForEach(it, nodes) {
    cJSON *nn = cJSON_GetObjectItem(it, "node"), *r = cJSON_GetObjectItem(it, "reason");
    if (cJSON_IsNumber(nn) && nn->valueint == n && cJSON_IsString(r))
      snprintf(out, len, "%s", r->valuestring);
  }
  cJSON_Delete(o);
}

/* --unquarantine: nodes back into the pool in the persisted state. */
static int unquarantine(main_ctx *m, uint64_t pgen, const char *pstatus, int prestarts) {
  sup *s = m->s;
  int all = !strcmp(m->unquarantine, "all"), node = all ? -1 : atoi(m->unquarantine), k = 0;
  char list[1024] = "";
  size_t len = 0;
  for (int n = 0; n < s->nnodes; n++) {
    if (s->nodes[n].role != SUP_ROLE_QUARANTINED || !(all || n == node))
      continue;
    s->nodes[n].role = SUP_ROLE_ACTIVE; /* not persisted: only quarantine is */
    k++;
    char why[512];
    quarantine_reason(s, n, why, sizeof why);
    printf("supervise: node %d was quarantined%s%s\n", n, why[0] ? ": " : "", why);
    if (len < sizeof list)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", len ? ", " : "", n);
  }
  if (!k) {
    printf("supervise: run %s: %s quarantined; nothing changed\n", s->rf.run,
           all ? "no node is" : "that node is not");
    return SUP_EXIT_DONE;
  }
  s->gen = pgen;
  s->restarts = prestarts;
  if (sup_persist(s, pstatus)) {
    fprintf(stderr, "supervise: cannot write the run state: %s\n", ft_err_detail());
    return SUP_EXIT_STORE;
  }
  printf("supervise: run %s: node(s) %s taken out of quarantine (state %s, generation %" PRIu64
         "); the next run uses them\n",
         s->rf.run, list, pstatus, pgen);
  return SUP_EXIT_DONE;
}

/* The persisted run state: resume, a finished run, or --unquarantine. */
static int load_run_state(main_ctx *m) {
  sup *s = m->s;
  uint64_t pgen = 0;
  char *pstatus = NULL;
  int prestarts = 0, ex = GO;
  int rc = sup_persist_load(s, &pgen, &pstatus, &prestarts);
  if (rc && rc != FT_ENOENT) {
    fprintf(stderr, "supervise: cannot read the run state: %s\n", ft_err_detail());
    return SUP_EXIT_STORE;
  }
  if (m->unquarantine) {
    if (!pstatus) {
      fprintf(stderr, "supervise: run %s has no state in %s (is --state/--store right?)\n",
              s->rf.run, s->store_uri);
      return SUP_EXIT_USAGE;
    }
    ex = unquarantine(m, pgen, pstatus, prestarts);
    free(pstatus);
    return ex;
  }
  uint64_t floor = 0;
  if (sup_gen_floor_read(s, &floor)) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    free(pstatus);
    return SUP_EXIT_STORE;
  }
  if (pstatus && !strcmp(pstatus, "done")) {
    /* --steps beyond the final checkpoint extends a finished run; else
     * nothing to do, saying what was not done */
    if (!m->steps || m->latest >= s->final_step) {
      printf("supervise: run %s in %s is already done (generation %" PRIu64
             ", %d restart(s)); nothing to do\n",
             s->rf.run, s->state_dir, pgen, prestarts);
      if (m->steps)
        printf("supervise: --steps %s changes nothing: the run's final checkpoint is step "
               "%" PRId64 " already; a larger --steps trains the run further\n",
               m->steps, m->latest);
      free(pstatus);
      return SUP_EXIT_DONE;
    }
    fprintf(stderr,
            "supervise: run %s was done at step %" PRId64 "; --steps %s extends it: training "
            "on from that checkpoint (the learning-rate schedule follows the new train.steps)\n",
            s->rf.run, m->latest, m->steps);
  }
  /* the generation after every one used: the catalog's, or DIR/generation's
   * when the catalog lost its record (rebuilt from the manifests) */
  uint64_t last = pstatus && pgen > floor ? pgen : floor;
  if (!pstatus && floor)
    fprintf(stderr,
            "supervise: the catalog has no run state of run %s (rebuilt from the manifests?), "
            "but %s/generation says generation %" PRIu64 " was used: going on with %" PRIu64 "\n",
            s->rf.run, s->state_dir, floor, floor + 1);
  else if (pstatus && floor > pgen)
    fprintf(stderr,
            "supervise: the catalog's run state of run %s is at generation %" PRIu64
            ", but %s/generation says %" PRIu64 " was used (an older catalog put back): "
            "going on with %" PRIu64 "\n",
            s->rf.run, pgen, s->state_dir, floor, floor + 1);
  s->gen = last + 1;
  s->restarts = pstatus && strcmp(pstatus, "failed") && strcmp(pstatus, "done") ? prestarts : 0;
  if (pstatus)
    fprintf(stderr, "supervise: resuming run %s (was %s at generation %" PRIu64 ")\n", s->rf.run,
            pstatus, pgen);
  free(pstatus);
  if (sup_watch_init(s)) {
    fprintf(stderr, "supervise: watchdog.loss_spike: %s\n", ft_err_detail());
    return SUP_EXIT_USAGE;
  }
  if (m->latest >= s->final_step) {
    if (sup_persist(s, "done") == 0)
      printf("supervise: run %s: the final checkpoint (step %" PRId64 ") is committed; done\n",
             s->rf.run, m->latest);
    return SUP_EXIT_DONE;
  }
  return GO;
}

/* s3:// data: the listing the workers read, from the checkpoint the run
 * resumes from when the state directory has none (a fresh --state) or a
 * different one; --relist-data moves it aside instead (sup_listing.h). Not
 * with FT_DATA_LISTING from the environment (its file is the operator's).
 * Before any worker starts. */
static int restore_listing(main_ctx *m) {
  sup *s = m->s;
  m->listing = (sup_listing_outcome){.source = "env", .step = m->latest};
  if (!s->listing || m->listing_env)
    return GO;
  if (sup_listing_restore(s->listing, s->store, s->rf.run, m->latest, m->relist_data, stderr,
                          &m->listing)) {
    fprintf(stderr, "supervise: the data listing of checkpoint %" PRId64 ": %s\n", m->latest,
            ft_err_detail());
    return SUP_EXIT_STORE;
  }
  return GO;
}

/* The control port. Bound to --listen, else supervisor.listen, else
 * loopback (local launcher) or every interface (a remote one); a bind that
 * fails is a usage error (exit 2) naming the address and where it came
 * from. Workers are told (--connect) --advertise, else
 * supervisor.advertise, else the bound address, else (a wildcard) this
 * host's address on the route to the first of nodes.hosts; that address is
 * written to DIR/supervisor.addr. */
static int bind_control(main_ctx *m) {
  sup *s = m->s;
  const char *spec = m->listen_arg ? m->listen_arg : s->rf.supervisor.listen;
  int remote = s->rf.nodes.launcher != FT_RF_LAUNCHER_LOCAL;
  const char *from = m->listen_arg ? "--listen"
                     : spec[0]     ? "supervisor.listen"
                     : remote      ? "the default of a remote launcher"
                                   : "the default of the local launcher";
  ft_hostport hp = {.port = 0};
  ft_sockaddr sa, bound;
  char a[320];
  int fd = -1, one = 1;
  if (spec[0] && ft_net_parse(spec, &hp)) {
    fprintf(stderr, "supervise: %s: %s\n", from, ft_err_detail());
    return SUP_EXIT_USAGE;
  }
  int port = hp.port < 0 ? 0 : hp.port;
  if (hp.host[0] || remote) {
    if (ft_net_resolve(hp.host, port, 1, &sa)) {
      fprintf(stderr, "supervise: %s: %s\n", from, ft_err_detail());
      return SUP_EXIT_USAGE;
    }
  } else
    ft_net_loopback(port, &sa);
  ft_net_format(&sa, 1, a, sizeof a);
  fd = socket(sa.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(fd, (struct sockaddr *)&sa.ss, sa.len) || listen(fd, SUP_LISTEN_BACKLOG)) {
    int e = errno;
    fprintf(stderr, "supervise: cannot listen on %s (from %s): %s%s\n", a, from, strerror(e),
            e == EADDRNOTAVAIL ? " (not an address of this host)" : "");
    if (fd >= 0)
      close(fd);
    return SUP_EXIT_USAGE;
  }
  /* backlog 0: the socket listens already, with SUP_LISTEN_BACKLOG (-1
   * made libevent listen() again with 128: at 1,024 ranks hundreds of
   * connections overflowed it, and some waited out the worker's 5 s
   * challenge timeout) */
  s->lis = evconnlistener_new(s->base, accept_cb, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                              0, fd);
  if (!s->lis) {
    close(fd);
    return SUP_EXIT_FAILED;
  }
  evconnlistener_set_error_cb(s->lis, accept_error_cb);
  bound.len = sizeof bound.ss;
  getsockname(fd, (struct sockaddr *)&bound.ss, &bound.len);
  s->port = ft_net_port(&bound);
  ft_net_format(&bound, 1, m->listen, sizeof m->listen);

  const char *aspec = m->advertise_arg ? m->advertise_arg : s->rf.supervisor.advertise;
  const char *afrom = m->advertise_arg ? "--advertise" : "supervisor.advertise";
  if (aspec[0]) {
    ft_hostport ap;
    if (ft_net_parse(aspec, &ap) || !ap.host[0]) {
      fprintf(stderr, "supervise: %s: %s\n", afrom,
              ap.host[0] ? ft_err_detail() : "an address to advertise needs a host");
      return SUP_EXIT_USAGE;
    }
    snprintf(m->advertise, sizeof m->advertise, strchr(ap.host, ':') ? "[%s]:%d" : "%s:%d", ap.host,
             ap.port < 0 ? s->port : ap.port);
  } else if (!ft_net_is_wildcard(&bound)) {
    snprintf(m->advertise, sizeof m->advertise, "%s", m->listen);
  } else {
    /* every interface: the one the first host's packets would come back to */
    ft_sockaddr peer, mine;
    const char *first = s->rf.nodes.nhosts ? s->rf.nodes.hosts[0] : "";
    if (first[0] && ft_net_resolve(first, 0, 0, &peer)) {
      fprintf(stderr,
              "supervise: nodes.hosts[0]: %s; set supervisor.advertise (or --advertise) to the "
              "address workers dial\n",
              ft_err_detail());
      return SUP_EXIT_USAGE;
    }
    if (!first[0])
      ft_net_loopback(0, &peer);
    if (ft_net_route_to(&peer, &mine)) {
      fprintf(stderr, "supervise: %s; set supervisor.advertise (or --advertise)\n",
              ft_err_detail());
      return SUP_EXIT_USAGE;
    }
    if (mine.ss.ss_family == AF_INET6)
      ((struct sockaddr_in6 *)&mine.ss)->sin6_port = htons((uint16_t)s->port);
    else
      ((struct sockaddr_in *)&mine.ss)->sin_port = htons((uint16_t)s->port);
    ft_net_format(&mine, 1, m->advertise, sizeof m->advertise);
  }
  if (strlen(m->advertise) >= sizeof s->connect_addr) {
    fprintf(stderr, "supervise: %s: '%s' is too long\n", afrom, m->advertise);
    return SUP_EXIT_USAGE;
  }
  snprintf(s->connect_addr, sizeof s->connect_addr, "%s", m->advertise);
  char path[4300], line[340];
  ft_afile af;
  int n = snprintf(line, sizeof line, "%s\n", m->advertise);
  snprintf(path, sizeof path, "%s/supervisor.addr", s->state_dir);
  if (ft_afile_open(&af, path) || ft_afile_write(&af, line, (size_t)n) || ft_afile_commit(&af)) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    return SUP_EXIT_FAILED;
  }
  return GO;
}

/* STATE/history.bin, every step's loss (sup_history.h). One that is not a
 * history is kept aside under another name, never overwritten; without a
 * history the run goes on (the dashboard then draws from now on). */
static void open_history(sup *s) {
  char path[4300], aside[4400];
  snprintf(path, sizeof path, "%s/history.bin", s->state_dir);
  int rc = sup_history_open(path, 1, 0, &s->hist);
  if (rc == FT_EFORMAT) {
    snprintf(aside, sizeof aside, "%s.damaged.%lld", path, (long long)(ft_wall_ms() / 1000));
    if (rename(path, aside) == 0) {
      fprintf(stderr, "supervise: warning: %s; kept as %s, a new history starts\n", ft_err_detail(),
              aside);
      rc = sup_history_open(path, 1, 0, &s->hist);
    }
  }
  if (rc) {
    fprintf(stderr, "supervise: warning: no step history (the run goes on): %s\n", ft_err_detail());
    s->hist = NULL;
  }
}

/* The event log, the token, the loop with its listener, signals and timers,
 * and the commit threads. */
static int open_loop(main_ctx *m) {
  sup *s = m->s;
  if (snprintf(m->evpath, sizeof m->evpath, "%s/events.jsonl", s->state_dir) >=
          (int)sizeof m->evpath ||
      sup_events_open(m->evpath, stderr, &s->ev)) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    return SUP_EXIT_USAGE;
  }
  open_history(s);
  if (ft_wire_token_new(s->token)) {
    fprintf(stderr, "supervise: cannot make a run token: %s\n", ft_err_detail());
    return SUP_EXIT_FAILED;
  }
  signal(SIGPIPE, SIG_IGN);
  s->base = event_base_new();
  /* two priorities: the stall timer (0) runs before everything else (1) */
  if (!s->base || event_base_priority_init(s->base, 2) || sup_kv_reply_init(s))
    return SUP_EXIT_FAILED;
  if (sup_run_commitq_start(s)) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    return SUP_EXIT_FAILED;
  }
  /* every worker's connection is a descriptor (the limit was raised to its
   * hard limit at start): a run that cannot have them all is refused now,
   * not found out when the last nodes cannot connect */
  struct rlimit rl;
  /* one connection per worker, or per node's agent (its workers' are
   * virtual) */
  long need = (long)s->nnodes * (s->agent_mode ? 1 : s->G) + SUP_FD_RESERVE;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      (long)rl.rlim_cur < need) {
    fprintf(stderr,
            "supervise: %d nodes x %d workers need at least %ld open files (one connection "
            "%s, %d for the store and the rest), but this process may have %ld (the hard limit, "
            "ulimit -Hn): raise it (limits.conf, LimitNOFILE= of a systemd unit), run "
            "fewer workers%s\n",
            s->nnodes, s->G, need, s->agent_mode ? "per node's agent" : "each", SUP_FD_RESERVE,
            (long)rl.rlim_cur, s->agent_mode ? "" : ", or one agent per node (nodes.agent: true)");
    return SUP_EXIT_USAGE;
  }
  /* unauthenticated connections: a share of the descriptors, never fewer
   * than twice the workers that may say HELLO at once */
  long cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                 ? (long)rl.rlim_cur / 8
                 : SUP_CONN_MAX_UNAUTH;
  if (cap > SUP_CONN_MAX_UNAUTH)
    cap = SUP_CONN_MAX_UNAUTH;
  if (cap < 2L * s->nnodes * s->G + 4)
    cap = 2L * s->nnodes * s->G + 4;
  sup_conn_set_limits(SUP_CONN_HELLO_TIMEOUT_S, (int)cap);
  int rc = bind_control(m);
  if (rc != GO)
    return rc;
  if (write_port_file(s))
    fprintf(stderr, "supervise: cannot write %s/control.port: %s\n", s->state_dir, strerror(errno));
  if (sup_http_open(s, m->http_arg ? m->http_arg : s->rf.supervisor.http,
                    m->http_arg ? "--http" : "supervisor.http")) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    return SUP_EXIT_USAGE;
  }
  s->sig_chld = evsignal_new(s->base, SIGCHLD, sup_on_sigchld, s);
  s->sig_int = evsignal_new(s->base, SIGINT, sup_on_signal, s);
  s->sig_term = evsignal_new(s->base, SIGTERM, sup_on_signal, s);
  s->tick = event_new(s->base, -1, EV_PERSIST, sup_on_tick, s);
  s->grace = evtimer_new(s->base, sup_on_grace, s);
  s->waitpoll = evtimer_new(s->base, sup_on_waitpoll, s);
  s->launch_ev = evtimer_new(s->base, sup_recovery_launch_more, s);
  s->rejoin_timer = evtimer_new(s->base, sup_on_rejoin_timeout, s);
  s->coll_timer = evtimer_new(s->base, sup_on_coll_timer, s);
  s->teardown = evtimer_new(s->base, sup_on_teardown, s);
  s->deadline_tick = evtimer_new(s->base, sup_on_tick, s);
  g_accept_resume = evtimer_new(s->base, accept_resume_cb, s);
  g_stall_ev = event_new(s->base, -1, EV_PERSIST, stall_cb, s);
  if (!s->sig_chld || !s->sig_int || !s->sig_term || !s->tick || !s->grace || !s->waitpoll ||
      !s->launch_ev || !s->rejoin_timer || !s->coll_timer || !s->teardown || !s->deadline_tick ||
      !g_accept_resume || !g_stall_ev || event_priority_set(g_stall_ev, 0))
    return SUP_EXIT_FAILED;
  event_add(s->sig_chld, NULL);
  event_add(s->sig_int, NULL);
  event_add(s->sig_term, NULL);
  /* the tick finds silent workers: every 50 ms (TICK_S in sup_timers.c;
   * the gang's whole pass every 250 ms: ~4 ms at 131,072 workers), and
   * again when a silence reaches the heartbeat timeout between two looks */
  struct timeval tick = {0, 50000}, stall = {0, (long)(SUP_STALL_PERIOD_S * 1e6)};
  event_add(s->tick, &tick);
  sup_stall_restart();
  event_add(g_stall_ev, &stall);
  return GO;
}

/* run_started, the first gang, the loop until a terminal state, the last
 * line. */
static int run(main_ctx *m) {
  sup *s = m->s;
  s->t_start_s = ft_now_s();
  s->run.last_val_loss = NAN;                   /* none before the first train.val_every step */
  s->run.last_grad_norm = s->run.last_lr = NAN; /* none before the first step */
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "run", s->rf.run);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(f, "world", s->N * s->G);
  cJSON_AddNumberToObject(f, "spares", s->S);
  cJSON_AddStringToObject(f, "launcher", ft_rf_launcher_name(s->rf.nodes.launcher));
  if (s->rf.nodes.nhosts) { /* node i's host: actives, then spares */
    cJSON *h = cJSON_AddArrayToObject(f, "hosts");
    for (int i = 0; i < s->rf.nodes.nhosts && i < s->nnodes; i++)
      cJSON_AddItemToArray(h, cJSON_CreateString(s->rf.nodes.hosts[i]));
  }
  cJSON_AddStringToObject(f, "store", s->store_uri);
  cJSON_AddStringToObject(f, "store_from", m->store_from);
  if (!strncmp(s->store_uri, "s3://", 5))
    cJSON_AddStringToObject(f, "s3_cache", getenv("FT_S3_CACHE"));
  cJSON_AddStringToObject(f, "runfile", s->runfile_path);
  cJSON_AddStringToObject(f, "runfile_sha256", s->seal.sha256);
  cJSON_AddNumberToObject(f, "pid", getpid());
  cJSON_AddNumberToObject(f, "port", s->port);
  cJSON_AddStringToObject(f, "listen", m->listen);
  cJSON_AddStringToObject(f, "advertise", m->advertise);
  if (sup_http_addr(s))
    cJSON_AddStringToObject(f, "http", sup_http_addr(s));
  cJSON_AddNumberToObject(f, "steps", (double)s->final_step);
  cJSON_AddNumberToObject(f, "restore_step", (double)m->latest);
  if (s->listing) { /* s3:// data: where the workers' listing comes from */
    cJSON *d = cJSON_AddObjectToObject(f, "data_listing");
    cJSON_AddStringToObject(d, "file", getenv("FT_DATA_LISTING"));
    cJSON_AddStringToObject(d, "source", m->listing.source);
    cJSON_AddNumberToObject(d, "step", (double)m->listing.step);
    cJSON_AddBoolToObject(d, "replaced", m->listing.replaced);
  }
  sup_events_emit(s->ev, "run_started", f,
                  "run %s gen %" PRIu64 ": %d node(s) x %d worker(s) + %d spare(s), store %s "
                  "(from %s), control port %d on %s, workers dial %s%s%s%s",
                  s->rf.run, s->gen, s->N, s->G, s->S, s->store_uri, m->store_from, s->port,
                  m->listen, m->advertise, sup_http_addr(s) ? "; dashboard http://" : "",
                  sup_http_addr(s) ? sup_http_addr(s) : "", sup_http_addr(s) ? "/" : "");
  if (s->seal.accepted[0]) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "path", s->runfile_path);
    cJSON_AddStringToObject(a, "sha256", s->seal.sha256);
    cJSON_AddStringToObject(a, "changed", s->seal.accepted);
    sup_events_emit(s->ev, "runfile_change_accepted", a,
                    "--accept-runfile-change: the workers read the new run file (%s)",
                    s->seal.accepted);
  }
  if (sup_persist(s, "running")) {
    fprintf(stderr, "supervise: cannot persist the run state: %s\n", ft_err_detail());
    return SUP_EXIT_STORE;
  }
  /* the first launch round, as every later one, checks the sealed copy */
  char why[4700];
  if (sup_seal_check(s, why, sizeof why)) {
    sup_recovery_fail(s, why);
  } else if (sup_recovery_start(s)) {
    snprintf(why, sizeof why, "cannot launch workers: %s", ft_err_detail());
    sup_recovery_fail(s, why);
  }
  /* A run can end before the loop runs (too few usable nodes): a
   * loopbreak then would be lost, so the loop runs only while something
   * is left to do. */
  if (s->state < SUP_FINISHING || any_process_alive(s)) {
    sup_stall_restart(); /* the launch above is not a stall */
    event_base_dispatch(s->base);
  }
  sup_events_progress(s->ev, NULL); /* the summary below replaces it */
  int ex = s->exit_code;
  if (ex == SUP_EXIT_DONE)
    printf("supervise: run %s done: %" PRId64 " steps, %d restart(s), generation %" PRIu64
           ", %.1f s; events in %s\n",
           s->rf.run, s->final_step, s->restarts, s->gen, ft_now_s() - s->t_start_s, m->evpath);
  else if (ex == SUP_EXIT_FAILED)
    printf("supervise: run %s FAILED: %s (events in %s)\n", s->rf.run, s->fail_reason, m->evpath);
  else if (ex == SUP_EXIT_STORE)
    printf("supervise: run %s stopped by its store: %s (events in %s); run the same command "
           "to resume from the last committed checkpoint\n",
           s->rf.run, s->fail_reason, m->evpath);
  else if (ex == SUP_EXIT_INTERRUPTED)
    printf("supervise: run %s interrupted at step %" PRId64 "; run the same command to resume\n",
           s->rf.run, s->run.last_step);
  return ex;
}

static void cleanup(main_ctx *m) {
  sup *s = m->s;
  sup_shardq_free(s->shardq);   /* reports parsed but not filed are dropped */
  sup_commitq_free(s->commitq); /* it may still report to the log and the gang */
  sup_logprep_stop(s->logprep);
  sup_pending_clear(s);
  sup_run_known_free(s);
  sup_watch_free(s);
  sup_conn_free_all();
  if (sup_http_save_status(s))
    fprintf(stderr, "supervise: cannot save the last status (supervise status says less): %s\n",
            ft_err_detail());
  sup_http_free(s);
  sup_kv_free(s->kv);
  sup_listing_free(s->listing); /* after the commit queue: its lanes read it */
  struct event *evs[] = {s->tick,         s->grace,    s->waitpoll,  s->rejoin_timer,
                         s->coll_timer,   s->sig_chld, s->sig_int,   s->sig_term,
                         g_accept_resume, g_stall_ev,  s->launch_ev, s->deadline_tick,
                         s->teardown};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
    if (evs[i])
      event_free(evs[i]);
  if (s->lis)
    evconnlistener_free(s->lis);
  if (s->base)
    event_base_free(s->base);
  sup_history_free(s->hist); /* flushes */
  sup_seal_release(s);
  sup_events_free(s->ev);
  ckpt_store_free(s->store);
  if (s->nodes)
    for (int n = 0; n < s->nnodes; n++)
      free(s->nodes[n].w);
  free(s->nodes);
}

/* Descriptors: the soft limit up to the hard one (each worker connection,
 * each store file and each peer waiting for its HELLO takes one). */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* The calls that go up a layer (sup_int.h, sup_hooks): the recovery tells
 * the watchdog's detectors above it through these, and the record lane's
 * answer reaches the recovery through the last. */
static void wire_hooks(sup *s) {
  s->hooks = (sup_hooks){.generation = sup_watch_generation,
                         .progress_behind = sup_watch_progress_behind,
                         .recorded = sup_recovery_recorded};
}

int main(int argc, char **argv) {
  static sup S;
  const char *sets[argc + 3]; /* the --set arguments and pin_data's two */
  main_ctx m = {.s = &S, .sets = sets, .latest = -1};
  if (argc > 1 && !strcmp(argv[1], "status"))
    return sup_status_main(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "report"))
    return sup_report_main(argc - 1, argv + 1);
  char fperr[600]; /* the workers inherit FT_FAILPOINTS: refused before any launch */
  int fpbad = ft_failpoint_check(fperr, sizeof fperr);
  if (fpbad && argc > 1 && !strcmp(argv[1], "doctor")) {
    fprintf(stderr, "supervise doctor: %s\n", fperr);
    return SUP_EXIT_USAGE;
  }
  if (argc > 1 && !strcmp(argv[1], "doctor"))
    return sup_doctor_main(argc - 1, argv + 1);
  raise_fd_limit();
  wire_hooks(m.s);
  int ex = parse_args(&m, argc, argv);
  if (ex == GO && fpbad) {
    fprintf(stderr, "supervise: %s\n", fperr);
    ex = SUP_EXIT_USAGE;
  }
  if (ex == GO)
    ex = load_runfile(&m);
  if (ex == GO)
    ex = prepare_paths(&m);
  if (ex == GO)
    ex = open_store(&m);
  if (ex == GO)
    ex = snapshot(&m);
  if (ex == GO)
    ex = alloc_pool(&m);
  if (ex == GO)
    ex = load_run_state(&m);
  if (ex == GO)
    ex = restore_listing(&m);
  if (ex == GO)
    ex = open_loop(&m);
  if (ex == GO)
    ex = run(&m);
  cleanup(&m);
  return ex;
}
