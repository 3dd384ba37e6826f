/*
 * ckpt_replica: chunks pushed into a buddy's memory (see ckpt_replica.h).
 *
 * Memory per connection: the server answers each request before reading
 * the next, with blocking sends under the socket's deadline, so nothing
 * queues in this process beyond one chunk's buffer: a peer that pushes or
 * requests and never reads fills the kernel's buffers, the next send waits
 * CKPT_REPLICA_IO_TIMEOUT_S and the connection is dropped. A 'G' buffer is
 * only grown for a chunk the memory holds (so at most the largest chunk
 * held), and there are at most CKPT_REPLICA_MAX_CONN connections.
 *
 * Threads: the server has one acceptor thread (poll on the listening
 * socket, so a stop is seen within POLL_MS) and one detached thread per
 * connection; the connections' sockets are listed under mu so that a stop
 * shuts them down and waits until every connection thread has left. A push
 * runs on the caller's thread.
 */
#include "ckpt_replica.h"

#include "ckpt_int.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "ft_file.h"
#include "ft_net.h"
#include "ft_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAGIC "FTREPL01"
#define MAGIC_LEN 8
#define LABEL "ftsup-replica-v1"
#define POLL_MS 200
#define CONNECT_TIMEOUT_MS 3000

struct ckpt_replica {
  ckpt_store *store;
  char token[FT_WIRE_TOKEN_HEX + 1];
  char run[FT_WIRE_MAX_RUN + 1];
  char addr[300];
  int lfd;
  pthread_t acceptor;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stopping;
  int conns[CKPT_REPLICA_MAX_CONN]; /* -1: free */
  int nconns;
  int64_t served; /* chunks served (failpoint corrupt_replica_chunk) */
  ckpt_replica_stats st;
};

static void put64be(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8)
    p[i] = (uint8_t)v;
}

static uint64_t get64be(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | p[i];
  return v;
}

/* Reads exactly n bytes (the socket's deadline applies to each wait). */
static int recv_all(int fd, void *buf, size_t n, const char *what) {
  uint8_t *p = buf;
  while (n) {
    ssize_t r = recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= (size_t)r;
    } else if (r == 0) {
      return ft_err_set(FT_ENET, "%s: the peer closed the connection", what);
    } else if (errno != EINTR) {
      return ft_err_set(FT_ENET, "%s: %s", what,
                        errno == EAGAIN || errno == EWOULDBLOCK ? "no answer in time"
                                                                : strerror(errno));
    }
  }
  return FT_OK;
}

static void set_deadlines(int fd) {
  struct timeval tv = {CKPT_REPLICA_IO_TIMEOUT_S, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- server ---------------------------------------------------------------- */

typedef struct conn_arg {
  ckpt_replica *r;
  int fd;
} conn_arg;

static void count(ckpt_replica *r, uint64_t *field, uint64_t by) {
  pthread_mutex_lock(&r->mu);
  *field += by;
  pthread_mutex_unlock(&r->mu);
}

/* One pushing peer, until it closes or breaks the protocol. */
static void serve_conn(ckpt_replica *r, int fd) {
  uint8_t hello[MAGIC_LEN + FT_WIRE_NONCE_LEN], mac[FT_WIRE_MAC_LEN], want[FT_WIRE_MAC_LEN];
  memcpy(hello, MAGIC, MAGIC_LEN);
  if (ft_wire_nonce_new(hello + MAGIC_LEN) ||
      ft_send_all(fd, hello, sizeof hello, "replica client") ||
      recv_all(fd, mac, sizeof mac, "replica client") ||
      ft_wire_hmac_label(r->token, LABEL, hello + MAGIC_LEN, FT_WIRE_NONCE_LEN, r->run, want) ||
      !ft_wire_mac_equal(mac, want)) {
    count(r, &r->st.conns_refused, 1);
    return;
  }
  if (ft_send_all(fd, "K", 1, "replica client"))
    return;
  uint8_t *buf = NULL;
  uint64_t cap = 0;
  for (;;) {
    uint8_t op, hdr[CKPT_HASH_LEN + 8];
    if (recv_all(fd, &op, 1, "replica client"))
      break; /* the client is done (or gone) */
    if ((op != 'P' && op != 'G') || recv_all(fd, hdr, sizeof hdr, "replica client")) {
      count(r, &r->st.conns_refused, 1);
      break;
    }
    uint64_t len = get64be(hdr + CKPT_HASH_LEN);
    if (len > CKPT_REPLICA_MAX_CHUNK) {
      (void)ft_send_all(fd, "R", 1, "replica client");
      count(r, &r->st.conns_refused, 1);
      break;
    }
    if (op == 'G' && !ckpt_mem_has(r->store->mem, hdr, len)) {
      /* not held: no buffer of len bytes for it (any len up to the cap
       * would otherwise be allocated per request) */
      if (ft_send_all(fd, "N", 1, "replica client"))
        break;
      continue;
    }
    if (op == 'G' && len > cap) {
      uint8_t *nb = realloc(buf, len ? len : 1);
      if (!nb)
        break;
      buf = nb;
      cap = len;
    }
    if (op == 'G') {
      int have = ckpt_mem_copy(r->store->mem, hdr, buf, len);
      int64_t nth; /* failpoint: the nth chunk served is damaged on its way */
      if (have && ft_failpoint("corrupt_replica_chunk", &nth) &&
          __atomic_add_fetch(&r->served, 1, __ATOMIC_RELAXED) == nth && len)
        buf[len / 2] ^= 0x40;
      if (have)
        count(r, &r->st.chunks_served, 1);
      if (ft_send_all(fd, have ? "Y" : "N", 1, "replica client") ||
          (have && ft_send_all(fd, buf, len, "replica client")))
        break;
      continue;
    }
    if (ckpt_mem_has(r->store->mem, hdr, len)) {
      count(r, &r->st.chunks_had, 1);
      if (ft_send_all(fd, "H", 1, "replica client"))
        break;
      continue;
    }
    /* received straight into a buffer the memory then keeps (no copy) */
    uint8_t *in = ckpt_mem_buffer(r->store->mem, len);
    if (!in)
      break;
    if (ft_send_all(fd, "W", 1, "replica client") || recv_all(fd, in, len, "replica client")) {
      ckpt_mem_release(r->store->mem, in, len);
      break;
    }
    uint8_t got[CKPT_HASH_LEN];
    int ok = ckpt_sha256(in, len, got) == FT_OK && memcmp(got, hdr, CKPT_HASH_LEN) == 0;
    if (!ok)
      ckpt_mem_release(r->store->mem, in, len);
    if (ok) {
      ckpt_mem_adopt(r->store->mem, hdr, in, len);
      pthread_mutex_lock(&r->mu);
      r->st.chunks_kept++;
      r->st.bytes_kept += len;
      pthread_mutex_unlock(&r->mu);
    } else {
      count(r, &r->st.chunks_rejected, 1);
    }
    if (ft_send_all(fd, ok ? "K" : "X", 1, "replica client"))
      break;
  }
  free(buf);
}

static void *conn_main(void *arg) {
  conn_arg a = *(conn_arg *)arg;
  free(arg);
  serve_conn(a.r, a.fd);
  pthread_mutex_lock(&a.r->mu);
  for (int i = 0; i < CKPT_REPLICA_MAX_CONN; i++)
    if (a.r->conns[i] == a.fd)
      a.r->conns[i] = -1;
  close(a.fd);
  a.r->nconns--;
  pthread_cond_broadcast(&a.r->cv);
  pthread_mutex_unlock(&a.r->mu);
  return NULL;
}

static void *acceptor_main(void *arg) {
  ckpt_replica *r = arg;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    int stop = r->stopping;
    pthread_mutex_unlock(&r->mu);
    if (stop)
      break;
    struct pollfd p = {.fd = r->lfd, .events = POLLIN};
    if (poll(&p, 1, POLL_MS) <= 0)
      continue;
    int fd = accept(r->lfd, NULL, NULL);
    if (fd < 0)
      continue;
    set_deadlines(fd);
    pthread_mutex_lock(&r->mu);
    int slot = -1;
    for (int i = 0; i < CKPT_REPLICA_MAX_CONN && slot < 0 && !r->stopping; i++)
      if (r->conns[i] < 0)
        slot = i;
    conn_arg *a = slot >= 0 ? malloc(sizeof *a) : NULL;
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (a) {
      *a = (conn_arg){r, fd};
      r->conns[slot] = fd;
      r->nconns++;
      if (pthread_create(&th, &at, conn_main, a) != 0) {
        r->conns[slot] = -1;
        r->nconns--;
        free(a);
        a = NULL;
      }
    }
    pthread_attr_destroy(&at);
    if (!a) {
      r->st.conns_refused++;
      close(fd);
    }
    pthread_mutex_unlock(&r->mu);
  }
  return NULL;
}

int ckpt_replica_serve(ckpt_store *s, const char *host, const char *token, const char *run,
                       ckpt_replica **out) {
  *out = NULL;
  if (!s->mem)
    return ft_err_set(FT_EINVAL, "replica server: the store keeps no chunks in memory");
  if (ft_wire_token_check(token))
    return FT_EINVAL;
  ft_sockaddr a;
  int rc = ft_net_resolve(host, 0, 0, &a);
  if (rc)
    return rc;
  ckpt_replica *r = calloc(1, sizeof *r);
  if (!r)
    return ft_err_set(FT_ENOMEM, "replica server: out of memory");
  r->store = s;
  snprintf(r->token, sizeof r->token, "%s", token);
  snprintf(r->run, sizeof r->run, "%s", run);
  for (int i = 0; i < CKPT_REPLICA_MAX_CONN; i++)
    r->conns[i] = -1;
  r->lfd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len = sizeof a.ss;
  if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&a.ss, a.len) != 0 ||
      listen(r->lfd, CKPT_REPLICA_MAX_CONN) != 0 ||
      getsockname(r->lfd, (struct sockaddr *)&a.ss, &len) != 0) {
    rc = ft_err_set(FT_ENET, "replica server on %s: %s", host, strerror(errno));
    if (r->lfd >= 0)
      close(r->lfd);
    free(r);
    return rc;
  }
  a.len = len;
  ft_net_format(&a, 1, r->addr, sizeof r->addr);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  if (pthread_create(&r->acceptor, NULL, acceptor_main, r) != 0) {
    close(r->lfd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
    return ft_err_set(FT_ENOMEM, "replica server: no thread");
  }
  *out = r;
  return FT_OK;
}

const char *ckpt_replica_addr(const ckpt_replica *r) {
  return r->addr;
}

void ckpt_replica_stats_get(ckpt_replica *r, ckpt_replica_stats *st) {
  pthread_mutex_lock(&r->mu);
  *st = r->st;
  pthread_mutex_unlock(&r->mu);
}

void ckpt_replica_stop(ckpt_replica *r) {
  if (!r)
    return;
  pthread_mutex_lock(&r->mu);
  r->stopping = 1;
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->acceptor, NULL);
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < CKPT_REPLICA_MAX_CONN; i++)
    if (r->conns[i] >= 0)
      shutdown(r->conns[i], SHUT_RDWR);
  while (r->nconns)
    pthread_cond_wait(&r->cv, &r->mu);
  pthread_mutex_unlock(&r->mu);
  close(r->lfd);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

/* ---- client ---------------------------------------------------------------- */

static int dial(const char *addr, int *out) {
  ft_hostport hp;
  ft_sockaddr a;
  int rc = ft_net_parse(addr, &hp);
  if (!rc && hp.port <= 0)
    rc = ft_err_set(FT_EINVAL, "replica address '%s' has no port", addr);
  if (!rc)
    rc = ft_net_resolve(hp.host, hp.port, 0, &a);
  if (rc)
    return rc;
  int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return ft_err_set(FT_ENET, "replica %s: socket: %s", addr, strerror(errno));
  if (connect(fd, (struct sockaddr *)&a.ss, a.len) != 0 && errno != EINPROGRESS) {
    rc = ft_err_set(FT_ENET, "replica %s: connect: %s", addr, strerror(errno));
  } else {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t el = sizeof err;
    int n = poll(&p, 1, CONNECT_TIMEOUT_MS);
    if (n <= 0)
      rc = ft_err_set(FT_ENET, "replica %s: connect: no answer in %d ms", addr, CONNECT_TIMEOUT_MS);
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err)
      rc = ft_err_set(FT_ENET, "replica %s: connect: %s", addr, strerror(err ? err : errno));
  }
  if (rc) {
    close(fd);
    return rc;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  set_deadlines(fd);
  *out = fd;
  return FT_OK;
}

/* A connection to the replica server at addr, past its MAC check. */
static int open_session(const char *addr, const char *token, const char *run, int *out) {
  int fd = -1;
  int rc = dial(addr, &fd);
  if (rc)
    return rc;
  uint8_t hello[MAGIC_LEN + FT_WIRE_NONCE_LEN], mac[FT_WIRE_MAC_LEN];
  char ok = 0;
  rc = recv_all(fd, hello, sizeof hello, addr);
  if (!rc && memcmp(hello, MAGIC, MAGIC_LEN) != 0)
    rc = ft_err_set(FT_EPROTO, "%s is not a checkpoint replica server", addr);
  if (!rc)
    rc = ft_wire_hmac_label(token, LABEL, hello + MAGIC_LEN, FT_WIRE_NONCE_LEN, run, mac);
  if (!rc)
    rc = ft_send_all(fd, mac, sizeof mac, addr);
  if (!rc && (recv_all(fd, &ok, 1, addr) || ok != 'K'))
    rc = ft_err_set(FT_EPROTO, "replica %s refused this run's token", addr);
  if (rc) {
    close(fd);
    return rc;
  }
  *out = fd;
  return FT_OK;
}

int ckpt_replica_fetch(const char *addr, const char *token, const char *run,
                       const uint8_t hash[CKPT_HASH_LEN], uint64_t len, void *buf) {
  if (len > CKPT_REPLICA_MAX_CHUNK)
    return ft_err_set(FT_EINVAL, "replica fetch: a chunk of %llu bytes is over the limit",
                      (unsigned long long)len);
  int fd = -1;
  int rc = open_session(addr, token, run, &fd);
  if (rc)
    return rc;
  uint8_t hdr[1 + CKPT_HASH_LEN + 8] = {'G'};
  memcpy(hdr + 1, hash, CKPT_HASH_LEN);
  put64be(hdr + 1 + CKPT_HASH_LEN, len);
  char ans = 0;
  rc = ft_send_all(fd, hdr, sizeof hdr, addr);
  if (!rc)
    rc = recv_all(fd, &ans, 1, addr);
  if (!rc && ans == 'N')
    rc = ft_err_set(FT_ENOENT, "replica %s does not hold the chunk", addr);
  else if (!rc && ans != 'Y')
    rc = ft_err_set(FT_EPROTO, "replica %s: unexpected answer to a fetch", addr);
  if (!rc)
    rc = recv_all(fd, buf, len, addr);
  close(fd);
  return rc;
}

static int push_chunk(int fd, ckpt_store *s, const ckpt_chunk_ref *c, uint8_t *buf,
                      const char *addr, ckpt_push_stats *st) {
  if (!ckpt_mem_copy(s->mem, c->hash, buf, c->len)) {
    st->chunks_absent++;
    return FT_OK;
  }
  uint8_t hdr[1 + CKPT_HASH_LEN + 8] = {'P'};
  memcpy(hdr + 1, c->hash, CKPT_HASH_LEN);
  put64be(hdr + 1 + CKPT_HASH_LEN, c->len);
  char ans;
  int rc = ft_send_all(fd, hdr, sizeof hdr, addr);
  if (!rc)
    rc = recv_all(fd, &ans, 1, addr);
  if (rc)
    return rc;
  if (ans == 'H') {
    st->chunks_had++;
    return FT_OK;
  }
  if (ans != 'W')
    return ft_err_set(FT_EPROTO, "replica %s refused a chunk of %llu bytes", addr,
                      (unsigned long long)c->len);
  rc = ft_send_all(fd, buf, c->len, addr);
  if (!rc)
    rc = recv_all(fd, &ans, 1, addr);
  if (rc)
    return rc;
  if (ans == 'X')
    return ft_err_set(FT_ECORRUPT, "replica %s: a chunk arrived damaged (its hash did not match)",
                      addr);
  if (ans != 'K')
    return ft_err_set(FT_EPROTO, "replica %s: unexpected answer", addr);
  st->chunks_sent++;
  st->bytes_sent += c->len;
  return FT_OK;
}

int ckpt_replica_push(ckpt_store *s, const ckpt_shard *shard, const char *addr, const char *token,
                      const char *run, const int *cancel, ckpt_push_stats *st) {
  ckpt_push_stats local = {0};
  if (!st)
    st = &local;
  if (!s->mem)
    return ft_err_set(FT_EINVAL, "replica push: the store keeps no chunks in memory");
  uint64_t maxlen = 1;
  for (int i = 0; i < shard->nparts; i++)
    for (int k = 0; k < shard->parts[i].nchunks; k++)
      if (shard->parts[i].chunks[k].len > maxlen)
        maxlen = shard->parts[i].chunks[k].len;
  if (maxlen > CKPT_REPLICA_MAX_CHUNK)
    return ft_err_set(FT_EINVAL, "replica push: a chunk of %llu bytes is over the limit",
                      (unsigned long long)maxlen);
  int fd = -1;
  int rc = open_session(addr, token, run, &fd);
  if (rc)
    return rc;
  uint8_t *buf = malloc(maxlen);
  if (!buf)
    rc = ft_err_set(FT_ENOMEM, "replica push: out of memory");
  for (int i = 0; !rc && i < shard->nparts; i++)
    for (int k = 0; !rc && k < shard->parts[i].nchunks; k++) {
      if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
        goto out;
      rc = push_chunk(fd, s, &shard->parts[i].chunks[k], buf, addr, st);
    }
out:
  free(buf);
  close(fd);
  return rc;
}
