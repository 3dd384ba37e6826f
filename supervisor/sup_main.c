/*
 * supervise: runs a training run and keeps it running through failures
 * (DESIGN sections 2, 9). This file: the command line, the run's resources
 * (state dir, checkpoint store, event log, control port, token, signals)
 * and the exit codes. The logic is in sup_run.c and sup_recovery.c.
 *
 * Decisions where the spec is silent (see also the top of each module):
 *  - The store is --store if given, else the run file's checkpoint.store
 *    when that is an s3:// URI, else "local:DIR/store" (absolute): a local
 *    checkpoint.store (default "local:state/store", relative to wherever
 *    supervise runs) is not used, so that local run state and the catalog
 *    always live under --state DIR.
 *  - An s3:// store (DESIGN: bucket + local cache tier) keeps its catalog,
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
 *  - The command launcher substitutes "localhost" for {host} when
 *    nodes.hosts has no entry for a node. FT_RUN_TOKEN is exported into
 *    sh's environment; a template that crosses machines (ssh) must forward
 *    it itself (e.g. ssh -o SendEnv=FT_RUN_TOKEN).
 *  - The control port is also written to DIR/control.port (for tools and
 *    tests) and carried by the run_started event.
 *  - Events beyond the spec's list: worker_launched carries role;
 *    run_interrupted {signal, gen, last_step} on SIGINT/SIGTERM;
 *    waiting_for_spare {reason} once when when_no_spares: wait blocks;
 *    generation_started carries the skip list. The watchdog's events
 *    (loss_spike, checkpoint_bad, checkpoint_good, rollback, xid,
 *    straggler, straggler_cleared) are described in sup_watch.c and
 *    sup_recovery.c.
 */
#include "sup_int.h"

#include "ft_clock.h"
#include "ft_err.h"
#include "sup_commitq.h"

#include <errno.h>
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
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f) {
  fputs("usage: supervise [--spares N] [--state DIR] [--steps N] [--store URI]\n"
        "                 [--set KEY=VALUE]... [--worker PATH] RUN.yaml\n"
        "\n"
        "Runs the training run described by RUN.yaml on nodes.count nodes of\n"
        "nodes.workers_per_node worker processes each, plus N warm spare nodes, and\n"
        "keeps it running: a node that dies or hangs is stopped, quarantined and\n"
        "replaced by a spare, and the gang restarts from the last committed\n"
        "checkpoint. Events go to DIR/events.jsonl, worker output to DIR/logs/.\n"
        "\n"
        "options:\n"
        "  --spares N      warm spare nodes (default 0)\n"
        "  --state DIR     run state, event log, logs and the checkpoint store\n"
        "                  (local:DIR/store) live here (default ./state)\n"
        "  --steps N       override train.steps (forwarded to the workers)\n"
        "  --store URI     another checkpoint store: local:PATH or s3://BUCKET/PREFIX\n"
        "                  (default: the run file's checkpoint.store if it is s3://,\n"
        "                  else local:DIR/store)\n"
        "  --set KEY=VAL   override any run-file key, e.g. --set train.lr=1e-3\n"
        "                  (repeatable; forwarded to the workers)\n"
        "  --worker PATH   the worker program (default: `worker` beside supervise)\n"
        "  -h, --help      this text\n"
        "\n"
        "examples:\n"
        "  supervise examples/demo.yaml                 # 2 nodes, no spare\n"
        "  supervise --spares 1 --state /tmp/s1 examples/demo.yaml\n"
        "  supervise --spares 1 --steps 50 --set recovery.when_no_spares=fail run.yaml\n"
        "  FT_FAILPOINTS=kill_node_at_step=60 supervise --spares 1 examples/demo.yaml\n"
        "      # kills the gang's last node at step 60 and shows the recovery\n"
        "  supervise --state /tmp/s1 examples/demo.yaml  # again: resumes the run\n"
        "\n"
        "S3 stores (--store s3://BUCKET/PREFIX): chunks go to a local cache first and\n"
        "are uploaded in the background; the catalog (and the run state) live in the\n"
        "cache, FT_S3_CACHE/catalog. FT_S3_CACHE defaults to DIR/s3cache here; local\n"
        "workers inherit it and every FT_S3_* and AWS_* variable. Set FT_S3_ENDPOINT\n"
        "for MinIO/moto, FT_S3_REQUIRE=local (commit once on local disk) or both (the\n"
        "default: commit once in the bucket too). `ckpt --store s3://BUCKET/PREFIX`\n"
        "with the same FT_S3_CACHE lists the run's checkpoints; with an empty cache it\n"
        "rebuilds the catalog from the bucket. Example:\n"
        "  FT_S3_ENDPOINT=http://127.0.0.1:9000 supervise --store s3://ckpts/run1 run.yaml\n"
        "\n"
        "If supervise itself dies, run the same command again with the same --state:\n"
        "it resumes from the last committed checkpoint with a new generation.\n"
        "\n"
        "exit codes:\n"
        "  0    run done (also: the run in DIR was already done)\n"
        "  1    run failed (recovery.max_restarts exceeded, no nodes left,\n"
        "       recovery.when_no_spares: fail, a global batch the world can't divide)\n"
        "  2    usage or run-file error\n"
        "  4    checkpoint store / catalog error (e.g. another supervisor holds it)\n"
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

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *a, int alen,
                      void *arg) {
  sup *s = arg;
  sup_conn *c;
  if (s->state >= SUP_FINISHING) {
    close(fd);
    return;
  }
  if (sup_conn_new(s->base, fd, s->rf.run, s->token, &sup_run_conn_ops, s, &c))
    fprintf(stderr, "supervise: cannot accept a connection: %s\n", ft_err_detail());
}

static void default_worker(char *out, size_t n) {
  char exe[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k <= 0) {
    snprintf(out, n, "worker");
    return;
  }
  exe[k] = 0;
  snprintf(out, n, "%s/worker", dirname(exe));
}

/* The store: --store, else an s3:// checkpoint.store of the run file, else
 * local:DIR/store. An s3:// store's cache (and so its catalog, <cache>/catalog)
 * is FT_S3_CACHE, set to DIR/s3cache when the environment has none; the
 * workers the local launcher starts inherit it, so they share the cache. */
static int resolve_store(sup *s, const char *store_arg) {
  const char *uri = store_arg;
  if (!uri && !strncmp(s->rf.checkpoint.store, "s3://", 5))
    uri = s->rf.checkpoint.store;
  if (!uri) {
    if (snprintf(s->store_uri, sizeof s->store_uri, "local:%s/store", s->state_dir) >=
        (int)sizeof s->store_uri) {
      fprintf(stderr, "supervise: --state path too long\n");
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

int main(int argc, char **argv) {
  static sup S;
  sup *s = &S;
  const char *state_dir = "state", *store_arg = NULL, *worker = NULL, *steps = NULL;
  int spares = 0;
  const char *sets[argc + 1]; /* the --set arguments (point into argv) */
  int nsets = 0, rc = 0, ex = SUP_EXIT_USAGE;
  char err[2048];
  static const struct option opts[] = {
      {"spares", 1, 0, 'p'}, {"state", 1, 0, 'd'},  {"steps", 1, 0, 'n'}, {"store", 1, 0, 's'},
      {"set", 1, 0, 'S'},    {"worker", 1, 0, 'w'}, {"help", 0, 0, 'h'},  {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (ch) {
    case 'p': {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*end || v < 0 || v > SUP_MAX_NODES) {
        fprintf(stderr, "supervise: --spares: '%s' is not a count 0..%d\n", optarg, SUP_MAX_NODES);
        return SUP_EXIT_USAGE;
      }
      spares = (int)v;
      break;
    }
    case 'd':
      state_dir = optarg;
      break;
    case 'n':
      steps = optarg;
      break;
    case 's':
      store_arg = optarg;
      break;
    case 'S':
      if (!strchr(optarg, '=')) {
        fprintf(stderr, "supervise: --set wants KEY=VALUE, got '%s'\n", optarg);
        return SUP_EXIT_USAGE;
      }
      sets[nsets++] = optarg;
      break;
    case 'w':
      worker = optarg;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return SUP_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    usage(stderr);
    return SUP_EXIT_USAGE;
  }
  const char *runfile = argv[optind];

  /* ---- the run file, then the overrides ---- */
  if (ft_runfile_load(runfile, &s->rf, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return SUP_EXIT_USAGE;
  }
  if (steps && ft_runfile_set(&s->rf, "train.steps", steps, err, sizeof err)) {
    fprintf(stderr, "supervise: --steps: %s\n", err);
    return SUP_EXIT_USAGE;
  }
  for (int i = 0; i < nsets; i++) {
    char key[256];
    const char *eq = strchr(sets[i], '=');
    snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
    if (ft_runfile_set(&s->rf, key, eq + 1, err, sizeof err)) {
      fprintf(stderr, "supervise: --set %s: %s\n", sets[i], err);
      return SUP_EXIT_USAGE;
    }
  }
  if (ft_runfile_validate(&s->rf, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return SUP_EXIT_USAGE;
  }
  s->steps_override = steps ? (long long)s->rf.train.steps : -1;
  s->sets = sets;
  s->nsets = nsets;
  s->N = s->rf.nodes.count;
  s->S = spares;
  s->G = s->rf.nodes.workers_per_node;
  s->nnodes = s->N + s->S;
  s->final_step = s->rf.train.steps;
  s->last_step = -1;
  if (s->nnodes > SUP_MAX_NODES) {
    fprintf(stderr, "supervise: %d nodes + %d spares is more than %d\n", s->N, s->S, SUP_MAX_NODES);
    return SUP_EXIT_USAGE;
  }
  s->no_spares = sup_no_spares_parse(s->rf.recovery.when_no_spares);
  if (s->no_spares < 0) {
    fprintf(stderr, "supervise: recovery.when_no_spares: unknown '%s'\n",
            s->rf.recovery.when_no_spares);
    return SUP_EXIT_USAGE;
  }
  if (s->rf.train.global_batch % (s->N * s->G)) {
    fprintf(stderr,
            "%s: train.global_batch %d is not divisible by the world size %d "
            "(nodes.count x nodes.workers_per_node)\n",
            runfile, s->rf.train.global_batch, s->N * s->G);
    return SUP_EXIT_USAGE;
  }
  if (!strcmp(s->rf.nodes.launcher, "command"))
    s->command_launcher = 1;
  else if (strcmp(s->rf.nodes.launcher, "local")) {
    fprintf(stderr, "supervise: nodes.launcher: unknown '%s' (local | command)\n",
            s->rf.nodes.launcher);
    return SUP_EXIT_USAGE;
  }
  if (s->command_launcher && !s->rf.nodes.command[0]) {
    fprintf(stderr, "supervise: nodes.launcher is command but nodes.command is empty\n");
    return SUP_EXIT_USAGE;
  }

  /* ---- paths ---- */
  if (mkdir_p(state_dir)) {
    fprintf(stderr, "supervise: cannot create --state %s: %s\n", state_dir, strerror(errno));
    return SUP_EXIT_USAGE;
  }
  if (!realpath(state_dir, s->state_dir) || !realpath(runfile, s->runfile_path)) {
    fprintf(stderr, "supervise: %s: %s\n", state_dir, strerror(errno));
    return SUP_EXIT_USAGE;
  }
  char logs[4200];
  if (snprintf(logs, sizeof logs, "%s/logs", s->state_dir) >= (int)sizeof logs || mkdir_p(logs)) {
    fprintf(stderr, "supervise: cannot create %s: %s\n", logs, strerror(errno));
    return SUP_EXIT_USAGE;
  }
  if (resolve_store(s, store_arg))
    return SUP_EXIT_USAGE;
  if (worker)
    snprintf(s->worker_path, sizeof s->worker_path, "%s", worker);
  else
    default_worker(s->worker_path, sizeof s->worker_path);
  if (strchr(s->worker_path, '/') && access(s->worker_path, X_OK) != 0) {
    fprintf(stderr, "supervise: the worker program %s is not executable: %s\n", s->worker_path,
            strerror(errno));
    return SUP_EXIT_USAGE;
  }

  /* ---- the store (the catalog's writer) ---- */
  ckpt_store_opts so = {0};
  rc = ckpt_store_open(s->store_uri, &so, &s->store);
  if (rc) {
    if (rc == FT_EBUSY)
      fprintf(stderr, "supervise: another supervisor holds the catalog of %s: %s\n", s->store_uri,
              ft_err_detail());
    else
      fprintf(stderr, "supervise: cannot open the store %s: %s: %s\n", s->store_uri,
              ft_strerror(rc), ft_err_detail());
    return SUP_EXIT_STORE;
  }
  s->nodes = calloc((size_t)s->nnodes, sizeof *s->nodes);
  if (!s->nodes) {
    ex = SUP_EXIT_FAILED;
    goto out;
  }
  for (int n = 0; n < s->nnodes; n++) {
    s->nodes[n].role = n < s->N ? SUP_ROLE_ACTIVE : SUP_ROLE_SPARE;
    s->nodes[n].w = calloc((size_t)s->G, sizeof *s->nodes[n].w);
    if (!s->nodes[n].w) {
      ex = SUP_EXIT_FAILED;
      goto out;
    }
    for (int j = 0; j < s->G; j++) {
      s->nodes[n].w[j].node = n;
      s->nodes[n].w[j].slot = j;
      s->nodes[n].w[j].rank = -1;
    }
  }

  /* ---- persisted state: resume, or a finished run ---- */
  uint64_t pgen = 0;
  char *pstatus = NULL;
  int prestarts = 0;
  rc = sup_persist_load(s, &pgen, &pstatus, &prestarts);
  if (rc && rc != FT_ENOENT) {
    fprintf(stderr, "supervise: cannot read the run state: %s\n", ft_err_detail());
    ex = SUP_EXIT_STORE;
    goto out;
  }
  int64_t latest = -1;
  if (ckpt_store_latest(s->store, s->rf.run, INT64_MAX, &latest) != 0)
    latest = -1;
  if (pstatus && !strcmp(pstatus, "done")) {
    printf("supervise: run %s in %s is already done (generation %" PRIu64
           ", %d restart(s)); nothing to do\n",
           s->rf.run, s->state_dir, pgen, prestarts);
    free(pstatus);
    ex = SUP_EXIT_DONE;
    goto out;
  }
  s->gen = pstatus ? pgen + 1 : 1;
  s->restarts = pstatus && strcmp(pstatus, "failed") ? prestarts : 0;
  if (pstatus)
    fprintf(stderr, "supervise: resuming run %s (was %s at generation %" PRIu64 ")\n", s->rf.run,
            pstatus, pgen);
  free(pstatus);
  if (sup_watch_init(s)) {
    fprintf(stderr, "supervise: watchdog.loss_spike: %s\n", ft_err_detail());
    ex = SUP_EXIT_USAGE;
    goto out;
  }
  if (latest >= s->final_step) {
    if (sup_persist(s, "done") == 0)
      printf("supervise: run %s: the final checkpoint (step %" PRId64 ") is committed; done\n",
             s->rf.run, latest);
    ex = SUP_EXIT_DONE;
    goto out;
  }

  /* ---- event log, token, loop, listener, signals ---- */
  char evpath[4200];
  if (snprintf(evpath, sizeof evpath, "%s/events.jsonl", s->state_dir) >= (int)sizeof evpath ||
      sup_events_open(evpath, stderr, &s->ev)) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    ex = SUP_EXIT_USAGE;
    goto out;
  }
  if (ft_wire_token_new(s->token)) {
    fprintf(stderr, "supervise: cannot make a run token: %s\n", ft_err_detail());
    ex = SUP_EXIT_FAILED;
    goto out;
  }
  signal(SIGPIPE, SIG_IGN);
  s->base = event_base_new();
  if (!s->base || sup_kv_reply_init(s)) {
    ex = SUP_EXIT_FAILED;
    goto out;
  }
  if (!strncmp(s->store_uri, "s3://", 5) && sup_run_commitq_start(s)) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    ex = SUP_EXIT_FAILED;
    goto out;
  }
  struct sockaddr_in sin = {
      .sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  s->lis = evconnlistener_new_bind(
      s->base, accept_cb, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
      (struct sockaddr *)&sin, sizeof sin);
  if (!s->lis) {
    fprintf(stderr, "supervise: cannot listen on 127.0.0.1: %s\n", strerror(errno));
    ex = SUP_EXIT_FAILED;
    goto out;
  }
  struct sockaddr_in bound;
  socklen_t bl = sizeof bound;
  getsockname(evconnlistener_get_fd(s->lis), (struct sockaddr *)&bound, &bl);
  s->port = ntohs(bound.sin_port);
  snprintf(s->connect_addr, sizeof s->connect_addr, "127.0.0.1:%d", s->port);
  if (write_port_file(s))
    fprintf(stderr, "supervise: cannot write %s/control.port: %s\n", s->state_dir, strerror(errno));
  s->sig_chld = evsignal_new(s->base, SIGCHLD, sup_recovery_on_sigchld, s);
  s->sig_int = evsignal_new(s->base, SIGINT, sup_recovery_on_signal, s);
  s->sig_term = evsignal_new(s->base, SIGTERM, sup_recovery_on_signal, s);
  s->tick = event_new(s->base, -1, EV_PERSIST, sup_recovery_on_tick, s);
  s->grace = evtimer_new(s->base, sup_recovery_on_grace, s);
  s->waitpoll = evtimer_new(s->base, sup_recovery_waitpoll, s);
  if (!s->sig_chld || !s->sig_int || !s->sig_term || !s->tick || !s->grace || !s->waitpoll) {
    ex = SUP_EXIT_FAILED;
    goto out;
  }
  event_add(s->sig_chld, NULL);
  event_add(s->sig_int, NULL);
  event_add(s->sig_term, NULL);
  struct timeval tick = {0, 250000};
  event_add(s->tick, &tick);

  s->t_start_s = ft_now_s();
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "run", s->rf.run);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(f, "world", s->N * s->G);
  cJSON_AddNumberToObject(f, "spares", s->S);
  cJSON_AddStringToObject(f, "store", s->store_uri);
  if (!strncmp(s->store_uri, "s3://", 5))
    cJSON_AddStringToObject(f, "s3_cache", getenv("FT_S3_CACHE"));
  cJSON_AddNumberToObject(f, "pid", getpid());
  cJSON_AddNumberToObject(f, "port", s->port);
  cJSON_AddNumberToObject(f, "steps", (double)s->final_step);
  cJSON_AddNumberToObject(f, "restore_step", (double)latest);
  sup_events_emit(s->ev, "run_started", f,
                  "run %s gen %" PRIu64 ": %d node(s) x %d worker(s) + %d spare(s), store %s, "
                  "control port %d",
                  s->rf.run, s->gen, s->N, s->G, s->S, s->store_uri, s->port);
  if (sup_persist(s, "running")) {
    fprintf(stderr, "supervise: cannot persist the run state: %s\n", ft_err_detail());
    ex = SUP_EXIT_STORE;
    goto out;
  }
  rc = sup_recovery_start(s);
  if (rc) {
    char why[512];
    snprintf(why, sizeof why, "cannot launch workers: %s", ft_err_detail());
    sup_recovery_fail(s, why);
  }
  event_base_dispatch(s->base);
  ex = s->exit_code;
  if (ex == SUP_EXIT_DONE)
    printf("supervise: run %s done: %" PRId64 " steps, %d restart(s), generation %" PRIu64
           ", %.1f s; events in %s\n",
           s->rf.run, s->final_step, s->restarts, s->gen, ft_now_s() - s->t_start_s, evpath);
  else if (ex == SUP_EXIT_FAILED)
    printf("supervise: run %s FAILED: %s (events in %s)\n", s->rf.run, s->fail_reason, evpath);
  else if (ex == SUP_EXIT_INTERRUPTED)
    printf("supervise: run %s interrupted at step %" PRId64 "; run the same command to resume\n",
           s->rf.run, s->last_step);

out:
  sup_commitq_free(s->commitq); /* first: it may still report to the log and the gang */
  sup_pending_clear(s);
  sup_watch_free(s);
  sup_conn_free_all();
  sup_kv_free(s->kv);
  if (s->tick)
    event_free(s->tick);
  if (s->grace)
    event_free(s->grace);
  if (s->waitpoll)
    event_free(s->waitpoll);
  if (s->sig_chld)
    event_free(s->sig_chld);
  if (s->sig_int)
    event_free(s->sig_int);
  if (s->sig_term)
    event_free(s->sig_term);
  if (s->lis)
    evconnlistener_free(s->lis);
  if (s->base)
    event_base_free(s->base);
  sup_events_free(s->ev);
  ckpt_store_free(s->store);
  if (s->nodes)
    for (int n = 0; n < s->nnodes; n++)
      free(s->nodes[n].w);
  free(s->nodes);
  return ex;
}
