/*
 * ftagent: the per-host agent's program (worker/agent.h): its command line,
 * its run token (FT_RUN_TOKEN, or with --token-stdin the first line of
 * stdin: never argv), and --help. Everything else is agent_run's.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "ft_failpoint.h"
#include "ft_opts.h"
#include "ft_version.h"
#include "ft_wire.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ftagent --connect HOST:PORT (--node N | --node-env VAR) --slots G\n"
          "               [--store URI] [--token-stdin] -- WORKER [WORKER ARGS...]\n"
          "\n"
          "The per-host agent of a supervised run: `supervise` starts one per node\n"
          "instead of G workers. It holds the node's one control connection to the\n"
          "supervisor, starts G workers (slots 0..G-1) on its own, each as\n"
          "  WORKER [WORKER ARGS...] --connect fd:K --node N --slot J\n"
          "with its end of a unix socket pair on fd K, and relays every worker's frames\n"
          "to the supervisor and back unchanged (each worker still proves the run\n"
          "token itself). Workers' heartbeats stop here: the agent echoes them while it\n"
          "hears the supervisor, and sends one HOSTBEAT per heartbeat interval for the\n"
          "host; it reports each worker's start and exit (its wait status). Workers\n"
          "share the agent's process group, stdout and stderr, get FT_RUN_TOKEN and\n"
          "FT_CTL_LOCAL_ADDR (this host's address on the route to the supervisor) in\n"
          "their environment and /dev/null as stdin, and die with the agent.\n"
          "\n"
          "arguments:\n"
          "  --connect HOST:PORT the supervisor's control port (a name or an address)\n"
          "  --node N            this host's node index in the pool\n"
          "  --node-env VAR      ... read from the environment variable VAR (one launch\n"
          "                      for the whole pool, nodes.launch_once: SLURM_NODEID\n"
          "                      under srun, FT_NODE under a command template)\n"
          "  --slots G           workers to start, 1..%u\n"
          "  --store URI         the checkpoint store (as the workers'): when every\n"
          "                      worker of the host has reported its shard of a\n"
          "                      checkpoint, the agent writes the host's part of the\n"
          "                      checkpoint's index there and reports the host once\n"
          "                      (the supervisor then checks one object per host);\n"
          "                      anything else, and everything without it, goes to\n"
          "                      the supervisor as the workers sent it\n"
          "  --token-stdin       read the run token from the first line of stdin when\n"
          "                      FT_RUN_TOKEN is not set (the ssh launcher)\n"
          "  -- WORKER ARGS...   the worker's command (without --connect, --node, --slot)\n"
          "  -h, --help          this text\n"
          "  --version           the version and the git revision it was built from\n"
          "\n"
          "The agent outlives its workers: when one ends, the supervisor may start\n"
          "another on its slot through the agent (no launch). It stops every worker\n"
          "(SIGTERM, SIGKILL after 5 s), reporting each exit, and exits on a STOP from\n"
          "the supervisor, on SIGTERM or SIGINT, or when the supervisor is lost (its\n"
          "connection closed, or nothing heard from it for 4 heartbeat intervals).\n"
          "\n"
          "exit codes:\n"
          "  0 done (stopped)   1 failure (refused by the\n"
          "  supervisor, internal error)   2 usage (bad arguments, a missing or\n"
          "  malformed run token)   6 the supervisor was lost (or never reached)\n",
          FT_WIRE_MAX_SLOTS);
}

/* The run token from the first line of stdin, as worker --token-stdin reads
 * it (byte by byte: nothing after the line is consumed). */
static int read_token(char *buf, size_t n) {
  size_t len = 0;
  while (len + 1 < n) {
    ssize_t r = read(0, buf + len, 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      fprintf(stderr, "ftagent: --token-stdin: read stdin: %s\n", strerror(errno));
      return -1;
    }
    if (r == 0 || buf[len] == '\n')
      break;
    len++;
  }
  buf[len] = 0;
  if (len && buf[len - 1] == '\r')
    buf[--len] = 0;
  return 0;
}

static int parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (!*s || *s == '-' || *end || errno || v < lo || v > hi) {
    fprintf(stderr, "ftagent: --%s wants an integer in %u..%u, got '%s'\n", opt, lo, hi, s);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"connect", required_argument, 0, 'C'},
                                       {"node", required_argument, 0, 'N'},
                                       {"node-env", required_argument, 0, 'E'},
                                       {"slots", required_argument, 0, 'G'},
                                       {"token-stdin", no_argument, 0, 'T'},
                                       {"help", no_argument, 0, 'h'},
                                       {"store", required_argument, 0, 'S'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
  agent_opts o = {0};
  int have_node = 0, token_stdin = 0, c;
  char oerr[192];
  if (ft_opts_check(argc, argv, opts, oerr, sizeof oerr)) {
    fprintf(stderr, "ftagent: %s\n", oerr);
    return FT_EXIT_USAGE;
  }
  if (ft_failpoint_check(oerr, sizeof oerr)) { /* FT_FAILPOINTS: docs/failpoints.md */
    fprintf(stderr, "ftagent: %s\n", oerr);
    return FT_EXIT_USAGE;
  }
  /* "+": options end at the first non-option, so none of the worker's is taken */
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
    case 'C':
      o.connect = optarg;
      break;
    case 'N':
      if (parse_u32("node", optarg, 0, UINT32_MAX - 1, &o.node))
        return FT_EXIT_USAGE;
      have_node = 1;
      break;
    case 'E': {
      const char *v = getenv(optarg);
      if (!v || !*v) {
        fprintf(stderr, "ftagent: --node-env %s: the variable is not set\n", optarg);
        return FT_EXIT_USAGE;
      }
      if (parse_u32("node-env", v, 0, UINT32_MAX - 1, &o.node))
        return FT_EXIT_USAGE;
      have_node = 1;
      break;
    }
    case 'G':
      if (parse_u32("slots", optarg, 1, FT_WIRE_MAX_SLOTS, &o.slots))
        return FT_EXIT_USAGE;
      break;
    case 'T':
      token_stdin = 1;
      break;
    case 'S':
      o.store = optarg;
      break;
    case 'h':
      usage(stdout);
      return 0;
    case 'V':
      ft_version_print("ftagent");
      return 0;
    default:
      usage(stderr);
      return FT_EXIT_USAGE;
    }
  }
  if (!o.connect || !have_node || !o.slots || optind >= argc ||
      strcmp(argv[optind - 1], "--") != 0) {
    fprintf(stderr, "ftagent: %s\n\n",
            !o.connect || !have_node || !o.slots
                ? "--connect, --node (or --node-env) and --slots are required"
                : "the worker's command goes after --");
    usage(stderr);
    return FT_EXIT_USAGE;
  }
  for (int i = optind + 1; i < argc; i++) {
    if (!strcmp(argv[i], "--connect") || !strncmp(argv[i], "--connect=", 10) ||
        !strcmp(argv[i], "--node") || !strncmp(argv[i], "--node=", 7) ||
        !strcmp(argv[i], "--slot") || !strncmp(argv[i], "--slot=", 7)) {
      fprintf(stderr, "ftagent: the worker's arguments must not hold %s: the agent adds it\n",
              argv[i]);
      return FT_EXIT_USAGE;
    }
  }
  o.argv = argv + optind;

  const char *token = getenv(FT_WIRE_TOKEN_ENV);
  char tokbuf[FT_WIRE_TOKEN_HEX + 64];
  if ((!token || !*token) && token_stdin) {
    if (read_token(tokbuf, sizeof tokbuf))
      return FT_EXIT_USAGE;
    token = tokbuf;
  }
  if (!token || ft_wire_token_check(token)) {
    fprintf(stderr, "ftagent: the run token is %s (%s%s: %u hex digits)\n",
            !token || !*token ? "missing" : "malformed", FT_WIRE_TOKEN_ENV,
            token_stdin ? ", or the first line of stdin" : "", FT_WIRE_TOKEN_HEX);
    return FT_EXIT_USAGE;
  }
  o.token = token;
  return agent_run(&o);
}
