/*
 * worker: the training process. Standalone (one process, world size 1), or
 * one rank of a gang launched by `supervise` (--connect), directly or
 * through the per-host agent ftagent (--connect fd:K, worker/agent.h).
 *
 * The run token of a gang comes in FT_RUN_TOKEN, or, with --token-stdin
 * (the ssh launcher, which has no environment to pass it in without
 * SendEnv), as the first line of stdin: never on the command line.
 * Kernel threads of a gang worker: --threads, else nodes.threads, else this
 * host's online cores / nodes.workers_per_node (the launcher of a remote
 * host cannot know its cores); a standalone worker uses all cores.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "doctor.h"
#include "engine.h"
#include "ft_failpoint.h"
#include "ft_runfile.h"
#include "ft_wire.h"
#include "ft_err.h"
#include "ft_gpt2.h"
#include "ft_opts.h"
#include "ft_version.h"
#include "kernels.h"
#include "stackdump.h"
#include "train.h"

static void usage(FILE *f) {
  fprintf(f, "usage: worker --standalone RUN.yaml [options]\n"
             "       worker --connect HOST:PORT --node N --slot S --runfile RUN.yaml [options]\n"
             "\n"
             "       worker --doctor [RUN.yaml] [--json] [--expect HASH] [--rounds N]\n"
             "       worker --gpus\n"
             "\n"
             "Trains GPT-2 from a run file: as one process (--standalone), or as one rank\n"
             "of a gang that `supervise` launches (--connect; the run's token comes in the\n"
             "environment variable FT_RUN_TOKEN, never on the command line). nodes.device\n"
             "picks the backend: cpu (fp32, Gloo) or cuda (bf16 compute with fp32 master\n"
             "weights, NCCL; GPU = FT_CUDA_DEVICE, else rank modulo the visible GPUs).\n"
             "On a GPU out of memory the micro-batch is halved and the accumulation\n"
             "doubled (the global batch stays), and the supervisor is told.\n"
             "\n"
             "options:\n"
             "  --steps N           train until step N (overrides train.steps)\n"
             "  --set KEY=VALUE     override any run-file key, e.g. --set train.lr=3e-4\n"
             "  --log-json PATH     append one JSON object per step: step, loss (%%.9g), lr,\n"
             "                      grad_norm, ms, tok_s, compute_ms (ms less the time\n"
             "                      waiting in collectives) (+ ckpt_stall_ms, ckpt_bytes on\n"
             "                      checkpoint steps, ckpt_fence_ms when the update waited\n"
             "                      for a snapshot's copy); a last line with val_loss\n"
             "  --store URI         write checkpoints to URI (e.g. local:state/store);\n"
             "                      default with --ckpt-every: checkpoint.store of the run file\n"
             "  --ckpt-every K      checkpoint every K steps (and at the last step);\n"
             "                      default with --store: checkpoint.every_steps\n"
             "  --resume            continue from the newest committed checkpoint of the run\n"
             "                      in the store (exact: same bits as an uninterrupted run)\n"
             "  --init-from FILE    start from an llm.c model file (fp32, version 3)\n"
             "  --export PATH       write the final model as Hugging Face GPT-2 safetensors;\n"
             "                      PATH an existing folder or ending in '/': a model\n"
             "                      directory (model.safetensors + config.json) that\n"
             "                      GPT2LMHeadModel.from_pretrained(PATH) loads\n"
             "  --threads N         threads for the kernels (default: all cores; in a gang\n"
             "                      nodes.threads, else cores / nodes.workers_per_node)\n"
             "  --quiet             no per-step lines\n"
             "  --gpus              print the number of visible CUDA devices and exit\n"
             "  --doctor            check this node and exit (the checks a gang worker runs\n"
             "                      before it may join, doctor.* keys): a compute check whose\n"
             "                      hash must equal a healthy node's of the same platform,\n"
             "                      a memory pattern test, a disk write/fsync/read-back;\n"
             "                      exit 0 healthy, 1 a check failed (the node's fault),\n"
             "                      4 the disk check's folder is unusable (not the node's);\n"
             "                      the disk check writes in doctor.dir, else in the store's\n"
             "                      folder: --store, else the run file's checkpoint.store as\n"
             "                      supervise resolves it (relative to the run file's folder;\n"
             "                      the default in ./state/store)\n"
             "  --json              with --doctor: the report as one JSON object\n"
             "  --expect HASH       with --doctor: fail unless the compute hash is HASH\n"
             "  --rounds N          with --doctor: the compute check N times, failing unless\n"
             "                      every round gives the first one's bits (a burn-in)\n"
             "  -h, --help          this text\n"
             "  --version           the version and the git revision it was built from\n"
             "gang mode (set by supervise):\n"
             "  --connect HOST:PORT the supervisor's control port (a name or an address;\n"
             "                      Gloo binds FT_IFACE, else nodes.iface, else this\n"
             "                      host's address on the route to it)\n"
             "  --connect fd:K      under ftagent (the per-host agent): the control\n"
             "                      connection is the socket already open on fd K, which\n"
             "                      the agent relays; the address on the route to the\n"
             "                      supervisor comes in FT_CTL_LOCAL_ADDR\n"
             "  --node N --slot S   this worker's node and slot in the pool\n"
             "  --runfile PATH      the run file\n"
             "  --token-stdin       read the run token from the first line of stdin when\n"
             "                      FT_RUN_TOKEN is not set (the ssh launcher)\n"
             "several standalone ranks without a supervisor (tests, debugging; no checkpoints):\n"
             "  --world W --rank R --rdzv DIR   rank R of W, meeting through folder DIR\n"
             "\n"
             "examples:\n"
             "  worker --standalone examples/demo.yaml --steps 40 --log-json /tmp/loss.jsonl\n"
             "  worker --standalone examples/demo.yaml --store local:/tmp/st --ckpt-every 10\n"
             "  worker --standalone examples/demo.yaml --store local:/tmp/st --resume\n"
             "  worker --doctor --json        # on two nodes: the compute hashes must match\n"
             "\n"
             "signals:\n"
             "  SIGUSR1   write the training thread's stack and its last progress to stderr\n"
             "            and go on (supervise asks a hung worker before it stops it: by\n"
             "            this signal, or by a DUMP message where ssh, srun or a command\n"
             "            started the worker)\n"
             "\n"
             "exit codes:\n"
             "  0 done (or stopped by the supervisor)   1 training failed (non-finite loss,\n"
             "  internal error)   2 usage or run-file error   3 bad or missing data\n"
             "  4 checkpoint store error   5 a collective failed (a peer died or hung)\n"
             "  6 the supervisor was lost (no training without a supervisor)\n");
}

/* The run token from the first line of stdin ("HEX\n", or HEX and end of
 * file): FT_EINVAL when stdin is empty or the line is not a token. */
static int read_token(char *buf, size_t n) {
  size_t len = 0;
  while (len + 1 < n) { /* byte by byte: nothing after the line is consumed */
    ssize_t r = read(0, buf + len, 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return ft_err_set(FT_EIO, "read stdin: %s", strerror(errno));
    if (r == 0 || buf[len] == '\n')
      break;
    len++;
  }
  buf[len] = 0;
  if (len && buf[len - 1] == '\r')
    buf[--len] = 0;
  if (!len)
    return ft_err_set(FT_EINVAL, "no run token on stdin (%s is not set either)", FT_WIRE_TOKEN_ENV);
  if (ft_wire_token_check(buf))
    return ft_err_set(FT_EINVAL, "the line on stdin is not a run token (%u hex digits)",
                      FT_WIRE_TOKEN_HEX);
  return FT_OK;
}

/* A gang worker's kernel threads (see the top of this file), logged. */
static int gang_threads(int threads, const ft_runfile *rf, long node, long slot) {
  const char *why = "--threads";
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (!threads && rf->nodes.threads > 0) {
    threads = rf->nodes.threads;
    why = "nodes.threads";
  } else if (!threads) {
    threads = (int)(cores / rf->nodes.workers_per_node);
    if (threads < 1)
      threads = 1;
    why = "cores / nodes.workers_per_node";
  }
  fprintf(stderr, "worker: node %ld slot %ld: %d kernel threads (%s; %ld cores online)\n", node,
          slot, threads, why, cores);
  return threads;
}

/* The run file with --steps (NULL: none) and --set overrides, validated
 * across keys once they are all in (path NULL: the embedded defaults), for
 * a world of `world` ranks (0: nodes.count x nodes.workers_per_node, the
 * supervisor's) that `who` names; FT_EXIT_USAGE with the message printed. */
static int load_runfile(const char *path, const char *steps, const char *const *sets, int nsets,
                        int world, const char *who, ft_runfile *rf) {
  char err[1024];
  if (!path)
    ft_runfile_defaults(rf);
  else if (ft_runfile_load(path, rf, err, sizeof err)) {
    fprintf(stderr, "worker: %s\n", err);
    return FT_EXIT_USAGE;
  }
  if (steps && ft_runfile_set(rf, "train.steps", steps, err, sizeof err)) {
    fprintf(stderr, "worker: --steps: %s\n", err);
    return FT_EXIT_USAGE;
  }
  for (int i = 0; i < nsets; i++) {
    char key[128];
    const char *eq = strchr(sets[i], '=');
    if (!eq || eq == sets[i] || (size_t)(eq - sets[i]) >= sizeof key) {
      fprintf(stderr, "worker: --set wants KEY=VALUE, got '%s'\n", sets[i]);
      return FT_EXIT_USAGE;
    }
    memcpy(key, sets[i], (size_t)(eq - sets[i]));
    key[eq - sets[i]] = 0;
    if (ft_runfile_set(rf, key, eq + 1, err, sizeof err)) {
      fprintf(stderr, "worker: --set: %s\n", err);
      return FT_EXIT_USAGE;
    }
  }
  if (ft_runfile_validate_world(rf, world, who, err, sizeof err)) {
    fprintf(stderr, "worker: %s\n", err);
    return FT_EXIT_USAGE;
  }
  return 0;
}

/* The GPU the doctor checks: none on the CPU; FT_CUDA_DEVICE, else the
 * slot's (slot modulo the visible devices, as the trainer places ranks). */
static int doctor_device(const ft_runfile *rf, long slot) {
  if (rf->nodes.device != FT_RF_DEVICE_CUDA)
    return -1;
  const char *env = getenv("FT_CUDA_DEVICE");
  if (env && *env)
    return atoi(env);
  int n = engine_cuda_devices();
  return n > 0 ? (int)(slot % n) : 0;
}

/* store: the store's URI as this process would open it (the disk check
 * writes in a local store's own folder, unless doctor.dir says otherwise). */
static doctor_opts doctor_opts_of(const ft_runfile *rf, const char *store, long node, long slot,
                                  char *dir, unsigned dlen) {
  return (doctor_opts){.mem_mb = rf->doctor.mem_mb,
                       .disk_mb = rf->doctor.disk_mb,
                       .dir = doctor_dir(rf->doctor.dir, store, dir, dlen),
                       .node = (int)node,
                       .device = doctor_device(rf, slot)};
}

/* A gang worker's doctor: the report goes to the supervisor, which decides
 * (it compares the compute hash with other nodes'); a line to the log. */
static struct {
  const ft_runfile *rf;
  const char *store;
  ctl *c;
  long node, slot;
} g_doctor;
static int gang_doctor(const ft_runfile *rf, const char *store, ctl *c, long node, long slot);
static void doctor_again(void *ud) {
  (void)ud;
  gang_doctor(g_doctor.rf, g_doctor.store, g_doctor.c, g_doctor.node, g_doctor.slot);
}

/* store: the supervisor's --store (resolved by it: the run file's
 * checkpoint.store may be relative to the run file's folder or be the
 * state directory's, neither of them this process's current directory). */
static int gang_doctor(const ft_runfile *rf, const char *store, ctl *c, long node, long slot) {
  char dir[4200], *report = NULL;
  int ok = 0;
  if (!g_doctor.c) { /* the first time: the supervisor may ask again */
    g_doctor.rf = rf;
    g_doctor.store = store;
    g_doctor.c = c;
    g_doctor.node = node;
    g_doctor.slot = slot;
    ctl_set_doctor(c, doctor_again, NULL);
  }
  doctor_opts d = doctor_opts_of(rf, store, node, slot, dir, sizeof dir);
  if (doctor_run(&d, &report, &ok)) {
    fprintf(stderr, "worker: node %ld: doctor: %s\n", node, ft_err_detail());
    return 1;
  }
  fprintf(stderr, "worker: node %ld: doctor %s: %s\n", node, ok ? "passed" : "FAILED", report);
  int rc = ctl_send_doctor(c, report);
  free(report);
  if (rc)
    fprintf(stderr, "worker: node %ld: cannot send the doctor's report: %s\n", node,
            ft_err_detail());
  return rc != 0;
}

static void print_check(const cJSON *c) {
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
  int ok = cJSON_IsTrue(cJSON_GetObjectItem(c, "ok"));
  const char *blame = cJSON_GetStringValue(cJSON_GetObjectItem(c, "blame"));
  printf("%-8s %-6s", name ? name : "?",
         ok                                   ? "ok"
         : blame && !strcmp(blame, "storage") ? "UNUSABLE"
                                              : "FAILED");
  const char *h = cJSON_GetStringValue(cJSON_GetObjectItem(c, "hash"));
  if (h)
    printf(" hash %.16s...", h);
  static const char *const fig[][2] = {{"gemm_gflops", "GEMM %.1f GFLOP/s"},
                                       {"tflops", "GEMM %.3f TFLOP/s"},
                                       {"loss", "loss %.4f"},
                                       {"mb", "%.0f MiB"},
                                       {"gb_s", "%.2f GB/s"},
                                       {"write_mb_s", "write %.0f MB/s"},
                                       {"read_mb_s", "read %.0f MB/s"},
                                       {"ms", "(%.0f ms)"}};
  for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
    const cJSON *v = cJSON_GetObjectItem(c, fig[i][0]);
    if (cJSON_IsNumber(v)) {
      printf(" ");
      printf(fig[i][1], v->valuedouble);
    }
  }
  const char *dir = cJSON_GetStringValue(cJSON_GetObjectItem(c, "dir"));
  if (dir)
    printf(" in %s", dir);
  const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(c, "model"));
  if (model)
    printf(" on %s", model);
  printf("\n");
  const char *det = cJSON_GetStringValue(cJSON_GetObjectItem(c, "detail"));
  if (det)
    printf("         %s\n", det);
}

/* worker --doctor: exit 0 healthy, 1 the node failed a check, 4 only the
 * disk check's folder is unusable (storage, not the node). store: --store
 * or NULL (then the run file's, as supervise resolves it). node: --node
 * (-1 unless `supervise doctor --hosts` numbers the hosts: the failpoints'
 * node), slot: --slot (the GPU). */
static int doctor_main(const char *path, const char *store, const char *const *sets, int nsets,
                       int threads, int json, const char *expect, int rounds, long node,
                       long slot) {
  static ft_runfile rf;
  int rc = load_runfile(path, NULL, sets, nsets, 0, NULL, &rf);
  if (rc)
    return rc;
  if (threads)
    k_set_threads(threads);
  char dir[4200], uri[4200], *text = NULL;
  int ok = 0;
  /* the store a supervised run of this run file would use (--store wins) */
  if (!store && path) {
    if (ft_runfile_store_uri(rf.checkpoint.store, path, "state", uri, sizeof uri)) {
      fprintf(stderr, "worker: doctor: checkpoint.store: path too long\n");
      return FT_EXIT_USAGE;
    }
    store = uri;
  }
  doctor_opts d = doctor_opts_of(&rf, store, node, slot < 0 ? 0 : slot, dir, sizeof dir);
  d.rounds = rounds;
  if (!path && !rf.doctor.dir[0]) /* no run file: no store folder either */
    d.dir = doctor_dir(NULL, NULL, dir, sizeof dir);
  if (doctor_run(&d, &text, &ok)) {
    fprintf(stderr, "worker: doctor: %s\n", ft_err_detail());
    return FT_EXIT_FAIL;
  }
  cJSON *r = cJSON_Parse(text);
  if (!r) {
    free(text);
    fprintf(stderr, "worker: doctor: out of memory\n");
    return FT_EXIT_FAIL;
  }
  const cJSON *checks = cJSON_GetObjectItem(r, "checks"), *c;
  const char *hash = NULL;
  int storage = 0;
  cJSON_ArrayForEach(c, checks) {
    const char *h = cJSON_GetStringValue(cJSON_GetObjectItem(c, "hash"));
    const char *bl = cJSON_GetStringValue(cJSON_GetObjectItem(c, "blame"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    if (h && name && !strcmp(name, "compute")) /* with a GPU check, it covers both */
      hash = h;
    if (bl && !strcmp(bl, "storage"))
      storage = 1;
  }
  int mismatch = expect && (!hash || strcmp(hash, expect) != 0);
  if (mismatch) {
    ok = 0;
    cJSON_ReplaceItemInObject(r, "ok", cJSON_CreateFalse());
    cJSON_AddStringToObject(r, "detail", "the compute hash differs from --expect");
  }
  if (json) {
    char *t = cJSON_PrintUnformatted(r);
    printf("%s\n", t ? t : text);
    free(t);
  } else {
    cJSON_ArrayForEach(c, checks) print_check(c);
    printf("platform %s\n", cJSON_GetStringValue(cJSON_GetObjectItem(r, "platform")));
    if (hash)
      printf("compute hash %s\n", hash);
    if (mismatch)
      printf("doctor: FAILED: the compute hash differs from --expect %s: this node computes "
             "different bits from the one that gave it (same platform only)\n",
             expect);
    else if (!ok)
      printf("doctor: FAILED\n");
    else if (storage)
      printf("doctor: the node is healthy, but the disk check's folder is unusable\n");
    else
      printf("doctor: healthy%s\n", expect ? " (the compute hash matches)"
                                           : "; compare the compute hash with another node of "
                                             "the same platform (--expect HASH)");
  }
  cJSON_Delete(r);
  free(text);
  return !ok ? FT_EXIT_FAIL : storage ? FT_EXIT_STORE : 0;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"standalone", required_argument, 0, 'S'},
                                       {"steps", required_argument, 0, 's'},
                                       {"set", required_argument, 0, 'o'},
                                       {"log-json", required_argument, 0, 'l'},
                                       {"store", required_argument, 0, 'r'},
                                       {"ckpt-every", required_argument, 0, 'k'},
                                       {"resume", no_argument, 0, 'R'},
                                       {"init-from", required_argument, 0, 'i'},
                                       {"export", required_argument, 0, 'e'},
                                       {"threads", required_argument, 0, 't'},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {"connect", required_argument, 0, 'C'},
                                       {"node", required_argument, 0, 'N'},
                                       {"slot", required_argument, 0, 'L'},
                                       {"runfile", required_argument, 0, 'F'},
                                       {"world", required_argument, 0, 'W'},
                                       {"rank", required_argument, 0, 'K'},
                                       {"rdzv", required_argument, 0, 'Z'},
                                       {"gpus", no_argument, 0, 'G'},
                                       {"version", no_argument, 0, 'V'},
                                       {"token-stdin", no_argument, 0, 'T'},
                                       {"doctor", no_argument, 0, 'D'},
                                       {"json", no_argument, 0, 'j'},
                                       {"expect", required_argument, 0, 'x'},
                                       {"rounds", required_argument, 0, 'n'},
                                       {0, 0, 0, 0}};
  const char *connect_to = NULL;
  long node = -1, slot = -1;
  const char *runfile = NULL, *steps = NULL, *sets[32];
  int nsets = 0, threads = 0, token_stdin = 0, doctor = 0, json = 0, rounds = 1;
  const char *expect = NULL;
  train_opts o = {0};
  char *end;
  int c;
  char oerr[192];
  if (ft_opts_check(argc, argv, opts, oerr, sizeof oerr)) {
    fprintf(stderr, "worker: %s\n", oerr);
    return FT_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'S':
      runfile = optarg;
      break;
    case 's':
      steps = optarg;
      break;
    case 'o':
      if (nsets == 32) {
        fprintf(stderr, "worker: at most 32 --set options\n");
        return FT_EXIT_USAGE;
      }
      sets[nsets++] = optarg;
      break;
    case 'l':
      o.log_json = optarg;
      break;
    case 'r':
      o.store_uri = optarg;
      break;
    case 'k':
      o.ckpt_every = strtoll(optarg, &end, 10);
      if (*end || o.ckpt_every <= 0) {
        fprintf(stderr, "worker: --ckpt-every wants a positive integer, got '%s'\n", optarg);
        return FT_EXIT_USAGE;
      }
      break;
    case 'R':
      o.resume = 1;
      break;
    case 'i':
      o.init_from = optarg;
      break;
    case 'e':
      o.export_path = optarg;
      break;
    case 't':
      threads = (int)strtol(optarg, &end, 10);
      if (*end || threads <= 0) {
        fprintf(stderr, "worker: --threads wants a positive integer, got '%s'\n", optarg);
        return FT_EXIT_USAGE;
      }
      break;
    case 'q':
      o.quiet = 1;
      break;
    case 'C':
      connect_to = optarg;
      break;
    case 'N':
    case 'L': {
      long *dst = c == 'N' ? &node : &slot;
      *dst = strtol(optarg, &end, 10);
      if (*end || *dst < 0) {
        fprintf(stderr, "worker: --%s wants a non-negative integer, got '%s'\n",
                c == 'N' ? "node" : "slot", optarg);
        return FT_EXIT_USAGE;
      }
      break;
    }
    case 'F':
      runfile = optarg;
      break;
    case 'W':
    case 'K': {
      int *dst = c == 'W' ? &o.world : &o.rank;
      *dst = (int)strtol(optarg, &end, 10);
      if (*end || *dst < 0) {
        fprintf(stderr, "worker: --%s wants a non-negative integer, got '%s'\n",
                c == 'W' ? "world" : "rank", optarg);
        return FT_EXIT_USAGE;
      }
      break;
    }
    case 'Z':
      o.rdzv_dir = optarg;
      break;
    case 'T':
      token_stdin = 1;
      break;
    case 'D':
      doctor = 1;
      break;
    case 'j':
      json = 1;
      break;
    case 'x':
      expect = optarg;
      break;
    case 'n':
      rounds = (int)strtol(optarg, &end, 10);
      if (*end || rounds <= 0 || rounds > 1000000) {
        fprintf(stderr, "worker: --rounds wants a positive integer, got '%s'\n", optarg);
        return FT_EXIT_USAGE;
      }
      break;
    case 'G':
      printf("%d\n", engine_cuda_devices());
      return 0;
    case 'h':
      usage(stdout);
      return 0;
    case 'V':
      ft_version_print("worker");
      return 0;
    default:
      usage(stderr);
      return FT_EXIT_USAGE;
    }
  }
  char fperr[600]; /* a failpoint that does not parse: refused, never ignored */
  if (ft_failpoint_check(fperr, sizeof fperr)) {
    fprintf(stderr, "worker: %s\n", fperr);
    return FT_EXIT_USAGE;
  }
  if (doctor && !runfile && optind + 1 == argc)
    runfile = argv[optind++];
  if (doctor && !connect_to) {
    if (optind != argc) {
      fprintf(stderr, "worker: --doctor takes at most one run file\n");
      return FT_EXIT_USAGE;
    }
    return doctor_main(runfile, o.store_uri, sets, nsets, threads, json, expect, rounds, node,
                       slot);
  }
  if ((json || expect || rounds != 1) && !doctor) {
    fprintf(stderr, "worker: --json, --expect and --rounds go with --doctor\n");
    return FT_EXIT_USAGE;
  }
  if (!runfile || optind != argc || (connect_to && (node < 0 || slot < 0)) ||
      (token_stdin && !connect_to)) {
    fprintf(stderr, "worker: %s\n\n",
            !runfile ? "--standalone RUN.yaml (or --connect ... --runfile RUN.yaml) is required"
            : token_stdin && !connect_to ? "--token-stdin needs --connect"
            : connect_to                 ? "--connect needs --node and --slot"
                                         : "unexpected argument");
    usage(stderr);
    return FT_EXIT_USAGE;
  }

  if (o.export_path) { /* refuse a device or FIFO before hours of training */
    char model[4096], config[4096];
    if (ft_gpt2_export_paths(o.export_path, model, sizeof model, config, sizeof config)) {
      fprintf(stderr, "worker: --export %s\n", ft_err_detail());
      return FT_EXIT_USAGE;
    }
  }

  /* checked for the world it trains in: standalone, 1; a gang's worker and
   * a rank of --world W, the configured one (nodes.count x
   * nodes.workers_per_node), whose micro-batch the trainer lowers at run
   * time for the gang it meets, as for a gang shrunk by a lost node */
  static ft_runfile rf;
  int world = connect_to || o.world > 1 ? 0 : 1;
  int lrc = load_runfile(runfile, steps, sets, nsets, world, "worker --standalone", &rf);
  if (lrc)
    return lrc;
  if (o.ckpt_every && !o.store_uri)
    o.store_uri = rf.checkpoint.store;
  if (o.store_uri && !o.ckpt_every)
    o.ckpt_every = rf.checkpoint.every_steps;
  if (o.resume && !o.store_uri)
    o.store_uri = rf.checkpoint.store;
  if (o.store_uri && strncmp(o.store_uri, "local:", 6) != 0 &&
      strncmp(o.store_uri, "s3://", 5) != 0) {
    fprintf(stderr, "worker: store '%s': use local:DIR or s3://BUCKET/PREFIX\n", o.store_uri);
    return FT_EXIT_USAGE;
  }
  if (o.world > 1 && (!o.rdzv_dir || o.rank >= o.world || o.store_uri || connect_to)) {
    fprintf(stderr, "worker: --world W needs --rank R < W and --rdzv DIR, and takes no store\n");
    return FT_EXIT_USAGE;
  }
  const char *token = getenv(FT_WIRE_TOKEN_ENV);
  char tokbuf[FT_WIRE_TOKEN_HEX + 64];
  if (connect_to && !token && token_stdin) {
    if (read_token(tokbuf, sizeof tokbuf)) {
      fprintf(stderr, "worker: --token-stdin: %s\n", ft_err_detail());
      return FT_EXIT_USAGE;
    }
    token = tokbuf;
  }
  /* this (main) thread trains: SIGUSR1 writes its stack to the log (the
   * supervisor asks it, tgkill to the process's main thread, before it
   * stops a hung worker); before the first thread starts and before
   * HELLO, after which the supervisor may ask */
  if (stackdump_init(connect_to ? (int)node : -1, connect_to ? (int)slot : -1))
    fprintf(stderr, "worker: no stack dumps on SIGUSR1: %s\n", strerror(errno));
  if (connect_to)
    threads = gang_threads(threads, &rf, node, slot);
  if (threads)
    k_set_threads(threads);
  o.rf = &rf;
  if (connect_to) {
    o.node = (uint32_t)node;
    o.slot = (uint32_t)slot;
    if (ctl_connect(connect_to, rf.run, token, o.node, o.slot, rf.watchdog.heartbeat_timeout_s,
                    &o.ctl)) {
      fprintf(stderr, "worker: node %ld slot %ld: %s\n", node, slot, ft_err_detail());
      return FT_EXIT_LOST;
    }
    o.resume = 1; /* the supervisor decides what to restore (ASSIGN) */
    if (rf.doctor.on_join && gang_doctor(&rf, o.store_uri, o.ctl, node, slot))
      return FT_EXIT_LOST;
  }
  return train_main(&o);
}
