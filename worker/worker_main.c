/*
 * worker: the training process. For now it runs standalone (one process,
 * world size 1); the supervisor's gang mode joins it in a later change.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_runfile.h"
#include "kernels.h"
#include "train.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: worker --standalone RUN.yaml [options]\n"
          "\n"
          "Trains GPT-2 on the CPU from a run file, as one process.\n"
          "\n"
          "options:\n"
          "  --steps N           train until step N (overrides train.steps)\n"
          "  --set KEY=VALUE     override any run-file key, e.g. --set train.lr=3e-4\n"
          "  --log-json PATH     append one JSON object per step: step, loss (%%.9g), lr,\n"
          "                      grad_norm, ms, tok_s; a last line with val_loss\n"
          "  --store URI         write checkpoints to URI (e.g. local:state/store);\n"
          "                      default with --ckpt-every: checkpoint.store of the run file\n"
          "  --ckpt-every K      checkpoint every K steps (and at the last step);\n"
          "                      default with --store: checkpoint.every_steps\n"
          "  --resume            continue from the newest committed checkpoint of the run\n"
          "                      in the store (exact: same bits as an uninterrupted run)\n"
          "  --init-from FILE    start from an llm.c model file (fp32, version 3)\n"
          "  --export PATH       write the final model as Hugging Face GPT-2 safetensors\n"
          "  --threads N         threads for the kernels (default: all cores)\n"
          "  --quiet             no per-step lines\n"
          "  -h, --help          this text\n"
          "\n"
          "examples:\n"
          "  worker --standalone examples/demo.yaml --steps 40 --log-json /tmp/loss.jsonl\n"
          "  worker --standalone examples/demo.yaml --store local:/tmp/st --ckpt-every 10\n"
          "  worker --standalone examples/demo.yaml --store local:/tmp/st --resume\n"
          "\n"
          "exit codes:\n"
          "  0 done   1 training failed (non-finite loss, internal error)   2 usage or\n"
          "  run-file error   3 bad or missing data   4 checkpoint store error\n");
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"standalone", required_argument, 0, 'S'}, {"steps", required_argument, 0, 's'},
      {"set", required_argument, 0, 'o'},        {"log-json", required_argument, 0, 'l'},
      {"store", required_argument, 0, 'r'},      {"ckpt-every", required_argument, 0, 'k'},
      {"resume", no_argument, 0, 'R'},           {"init-from", required_argument, 0, 'i'},
      {"export", required_argument, 0, 'e'},     {"threads", required_argument, 0, 't'},
      {"quiet", no_argument, 0, 'q'},            {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *runfile = NULL, *steps = NULL, *sets[32];
  int nsets = 0, threads = 0;
  train_opts o = {0};
  char *end;
  int c;
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
        return TRAIN_EXIT_USAGE;
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
        return TRAIN_EXIT_USAGE;
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
        return TRAIN_EXIT_USAGE;
      }
      break;
    case 'q':
      o.quiet = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return TRAIN_EXIT_USAGE;
    }
  }
  if (!runfile || optind != argc) {
    fprintf(stderr, "worker: %s\n\n", runfile ? "unexpected argument" : "--standalone RUN.yaml is required");
    usage(stderr);
    return TRAIN_EXIT_USAGE;
  }

  static ft_runfile rf;
  char err[1024];
  if (ft_runfile_load(runfile, &rf, err, sizeof err)) {
    fprintf(stderr, "worker: %s\n", err);
    return TRAIN_EXIT_USAGE;
  }
  if (steps && ft_runfile_set(&rf, "train.steps", steps, err, sizeof err)) {
    fprintf(stderr, "worker: --steps: %s\n", err);
    return TRAIN_EXIT_USAGE;
  }
  for (int i = 0; i < nsets; i++) {
    char key[128];
    const char *eq = strchr(sets[i], '=');
    if (!eq || eq == sets[i] || (size_t)(eq - sets[i]) >= sizeof key) {
      fprintf(stderr, "worker: --set wants KEY=VALUE, got '%s'\n", sets[i]);
      return TRAIN_EXIT_USAGE;
    }
    memcpy(key, sets[i], (size_t)(eq - sets[i]));
    key[eq - sets[i]] = 0;
    if (ft_runfile_set(&rf, key, eq + 1, err, sizeof err)) {
      fprintf(stderr, "worker: --set: %s\n", err);
      return TRAIN_EXIT_USAGE;
    }
  }
  if (ft_runfile_validate(&rf, err, sizeof err)) {
    fprintf(stderr, "worker: %s\n", err);
    return TRAIN_EXIT_USAGE;
  }
  if (o.ckpt_every && !o.store_uri)
    o.store_uri = rf.checkpoint.store;
  if (o.store_uri && !o.ckpt_every)
    o.ckpt_every = rf.checkpoint.every_steps;
  if (o.resume && !o.store_uri)
    o.store_uri = rf.checkpoint.store;
  if (o.store_uri && strncmp(o.store_uri, "local:", 6) != 0) {
    fprintf(stderr, "worker: store '%s': only local:DIR stores are supported so far\n",
            o.store_uri);
    return TRAIN_EXIT_USAGE;
  }
  if (threads)
    k_set_threads(threads);
  o.rf = &rf;
  return train_main(&o);
}
