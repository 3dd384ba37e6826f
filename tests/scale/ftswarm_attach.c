/*
 * ftswarm_attach: one simulated host of ftswarm (ftswarm.c), the process
 * supervise starts for a node when nodes.command is
 *   ftswarm_attach SOCKET {slots} {argv}
 * It passes its node, slots, pid, the supervisor's address, the store and
 * the run token (from FT_RUN_TOKEN, never argv) to the swarm over the unix
 * socket SOCKET, and waits for the swarm's word: "exit C" (its workers
 * exited; C is the node's exit code) or "kill" (the host dies: SIGKILL).
 * When the swarm goes away it exits 1. Under nodes.launch_once it is the
 * pool's one process, nodes.command
 *   ftswarm_attach SOCKET {slots} --pool {nodes} {argv}
 * ({argv} the agent's, with --node-env instead of --node): it hands the
 * swarm node -{nodes}, and the swarm plays every host's agent. Linked with libc alone: a large gang
 * starts thousands of these on this machine's two cores, and a binary with
 * the store's libraries spent ~20 ms each in the dynamic loader.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *arg_after(int argc, char **argv, const char *name) {
  for (int i = 0; i + 1 < argc; i++)
    if (!strcmp(argv[i], name))
      return argv[i + 1];
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ftswarm_attach SOCKET SLOTS WORKER_ARGV...\n");
    return 2;
  }
  const char *node = arg_after(argc, argv, "--node"), *conn = arg_after(argc, argv, "--connect");
  char pool[32];
  if (arg_after(argc, argv, "--node-env") && arg_after(argc, argv, "--pool")) {
    snprintf(pool, sizeof pool, "-%s", arg_after(argc, argv, "--pool"));
    node = pool;
  }
  const char *store = arg_after(argc, argv, "--store"), *tok = getenv("FT_RUN_TOKEN");
  if (!node || !conn || !store || !tok || strlen(tok) != 64) {
    fprintf(stderr, "ftswarm_attach: needs --node, --connect, --store and %s\n", "FT_RUN_TOKEN");
    return 2;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", argv[1]);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
    fprintf(stderr, "ftswarm_attach: cannot reach the swarm at %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  char line[8192];
  int n = snprintf(line, sizeof line, "%s %s %d %d %s %s %s\n", node, argv[2], (int)getpid(),
                   (int)getppid(), conn, tok, store); /* (the parent: for diagnostics) */
  if (n <= 0 || (size_t)n >= sizeof line || write(fd, line, (size_t)n) != n)
    return 1;
  /* the swarm's word: "exit C" or "kill"; its end: we end with it */
  char buf[64];
  size_t have = 0;
  for (;;) {
    ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
    if (r <= 0)
      return 1;
    have += (size_t)r;
    buf[have] = 0;
    if (strchr(buf, '\n')) {
      if (!strncmp(buf, "kill", 4))
        raise(SIGKILL);
      return atoi(buf + 5);
    }
  }
}
