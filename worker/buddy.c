/*
 * buddy: pushes this rank's shards into other hosts' memory (see buddy.h).
 *
 * Threads: buddy_offer runs on snap's committer thread and only swaps the
 * pending shard (its JSON text, a deep copy) under mu; the pusher thread
 * takes it, parses it back and pushes it to each buddy in turn.
 */
#include "buddy.h"

#include "ckpt_replica.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_wire.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BUDDIES 64

struct buddy {
  snap *sn;
  ctl *c;
  char run[FT_WIRE_MAX_RUN + 1];
  uint32_t node, slot;
  ckpt_replica *srv;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *pending;                  /* the newest shard not yet pushed (JSON), or NULL */
  char *report;                   /* its SHARD_SAVED text once a buddy holds it, or NULL */
  uint64_t report_gen;            /* the generation that took it */
  int busy;                       /* a push in flight */
  int stop;                       /* read by pushes in flight too (atomically) */
  char failing[MAX_BUDDIES][300]; /* buddies whose last push failed */
  int nfailing;
  /* buddies a fetch could not reach (under mu): skipped until then */
  char down[MAX_BUDDIES][300];
  double down_until[MAX_BUDDIES];
  int ndown;
  int pushed_any;
};

static int is_failing(buddy *b, const char *addr) {
  for (int i = 0; i < b->nfailing; i++)
    if (!strcmp(b->failing[i], addr))
      return i;
  return -1;
}

/* Reports a buddy's failure once, and its recovery once. */
static void note(buddy *b, const char *addr, int64_t step, int rc, const ckpt_push_stats *ps,
                 double ms) {
  int i = is_failing(b, addr);
  if (rc && i < 0) {
    fprintf(stderr, "worker: node %u slot %u: replica of checkpoint %" PRId64 " to %s: %s\n",
            b->node, b->slot, step, addr, ft_err_detail());
    if (b->nfailing < MAX_BUDDIES)
      snprintf(b->failing[b->nfailing++], sizeof b->failing[0], "%s", addr);
  } else if (!rc && i >= 0) {
    fprintf(stderr, "worker: node %u slot %u: replica to %s works again\n", b->node, b->slot, addr);
    memmove(b->failing[i], b->failing[i + 1], (size_t)(b->nfailing - i - 1) * sizeof b->failing[0]);
    b->nfailing--;
  } else if (!rc && !b->pushed_any) {
    fprintf(stderr,
            "worker: node %u slot %u: checkpoint %" PRId64 " in the memory of %s (%.2f MiB sent, "
            "%" PRIu64 " chunks it had, in %.0f ms)\n",
            b->node, b->slot, step, addr, (double)ps->bytes_sent / 1048576.0, ps->chunks_had, ms);
  }
}

static void push_all(buddy *b, const char *json, const char *report, uint64_t gen) {
  ckpt_shard *sh = NULL;
  if (ckpt_shard_from_json(json, &sh)) {
    fprintf(stderr, "worker: replica: %s\n", ft_err_detail());
    return;
  }
  char list[FT_WIRE_MAX_ADDRS + 1];
  ctl_buddies(b->c, list, sizeof list);
  int any = 0;
  for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
    if (__atomic_load_n(&b->stop, __ATOMIC_RELAXED))
      break;
    ckpt_push_stats ps = {0};
    uint64_t t0 = ft_now_ns();
    int rc = ckpt_replica_push(snap_store(b->sn), sh, a, ctl_token(b->c), b->run, &b->stop, &ps);
    note(b, a, ckpt_shard_step(sh), rc, &ps, (double)(ft_now_ns() - t0) * 1e-6);
    any |= rc == FT_OK;
  }
  b->pushed_any |= any;
  /* a memory-level checkpoint: in two hosts' memory now, so it may commit */
  if (any && report && !__atomic_load_n(&b->stop, __ATOMIC_RELAXED) &&
      ctl_send_shard_of(b->c, gen, ckpt_shard_step(sh), ckpt_shard_rank(sh), report))
    fprintf(stderr, "worker: node %u slot %u: checkpoint %" PRId64 " (memory level): %s\n", b->node,
            b->slot, ckpt_shard_step(sh), ft_err_detail());
  ckpt_shard_free(sh);
}

static void *pusher_main(void *arg) {
  buddy *b = arg;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->pending && !b->stop)
      pthread_cond_wait(&b->cv, &b->mu);
    if (b->stop)
      break;
    char list[8];
    if (!ctl_buddies(b->c, list, sizeof list)) { /* no list yet: look again soon */
      struct timespec ts = ft_wall_deadline(200);
      pthread_cond_timedwait(&b->cv, &b->mu, &ts);
      continue;
    }
    char *json = b->pending, *report = b->report;
    uint64_t gen = b->report_gen;
    b->pending = b->report = NULL;
    b->busy = 1;
    pthread_mutex_unlock(&b->mu);
    push_all(b, json, report, gen);
    free(json);
    free(report);
    pthread_mutex_lock(&b->mu);
    b->busy = 0;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

/* A buddy a fetch could not reach is skipped for this long, so a restore
 * of many chunks pays its connect timeout once, not once per chunk. */
#define BUDDY_DOWN_S 30.0

static int is_down(buddy *b, const char *addr) {
  double now = ft_now_s();
  int down = 0;
  pthread_mutex_lock(&b->mu);
  for (int i = 0; i < b->ndown; i++)
    if (!strcmp(b->down[i], addr))
      down = now < b->down_until[i];
  pthread_mutex_unlock(&b->mu);
  return down;
}

static void mark_down(buddy *b, const char *addr) {
  pthread_mutex_lock(&b->mu);
  int i = 0, said = 0;
  while (i < b->ndown && strcmp(b->down[i], addr))
    i++;
  if (i < b->ndown)
    said = ft_now_s() < b->down_until[i]; /* another reader marked it meanwhile */
  else if (b->ndown < MAX_BUDDIES)
    snprintf(b->down[b->ndown++], sizeof b->down[0], "%s", addr);
  if (i < b->ndown)
    b->down_until[i] = ft_now_s() + BUDDY_DOWN_S;
  pthread_mutex_unlock(&b->mu);
  if (!said)
    fprintf(stderr,
            "worker: node %u slot %u: buddy %s unreachable (%s): not asked again for %.0f s\n",
            b->node, b->slot, addr, ft_err_detail(), BUDDY_DOWN_S);
}

/* The store's remote source: chunk (hash, len) from the first buddy that
 * holds it (the store verifies it). Called by the restore's reader threads
 * at once. */
static int fetch(void *ud, const uint8_t *hash, uint64_t len, void *buf) {
  buddy *b = ud;
  char list[FT_WIRE_MAX_ADDRS + 1];
  ctl_buddies(b->c, list, sizeof list);
  for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
    if (is_down(b, a))
      continue;
    int rc = ckpt_replica_fetch(a, ctl_token(b->c), b->run, hash, len, buf);
    if (rc == FT_OK)
      return 1;
    if (rc == FT_ENET)
      mark_down(b, a);
  }
  return 0;
}

int buddy_start(snap *sn, ctl *c, const char *host, const char *run, uint32_t node, uint32_t slot,
                buddy **out) {
  *out = NULL;
  buddy *b = calloc(1, sizeof *b);
  if (!b)
    return ft_err_set(FT_ENOMEM, "out of memory");
  b->sn = sn;
  b->c = c;
  b->node = node;
  b->slot = slot;
  snprintf(b->run, sizeof b->run, "%s", run);
  int rc = ckpt_replica_serve(snap_store(sn), host, ctl_token(c), run, &b->srv);
  if (rc) {
    free(b);
    return rc;
  }
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  if (pthread_create(&b->th, NULL, pusher_main, b) != 0) {
    ckpt_replica_stop(b->srv);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
    return ft_err_set(FT_ENOMEM, "no thread for the replica pushes");
  }
  ckpt_store_set_remote(snap_store(sn), fetch, b);
  fprintf(stderr, "worker: node %u slot %u: replica server on %s\n", node, slot,
          ckpt_replica_addr(b->srv));
  rc = ctl_send_replica(c, ckpt_replica_addr(b->srv));
  *out = b;
  return rc;
}

void buddy_offer(buddy *b, const ckpt_shard *shard, char *report) {
  char *json = b ? ckpt_shard_to_json(shard) : NULL;
  if (!json) {
    free(report);
    return;
  }
  pthread_mutex_lock(&b->mu);
  free(b->pending);
  free(b->report); /* a newer shard replaces it: that step is not committed */
  b->pending = json;
  b->report = report;
  b->report_gen = ctl_train_gen(b->c);
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

void buddy_flush(buddy *b) {
  if (!b)
    return;
  /* a push's own deadlines are 10 s; no buddy list yet: gives up */
  struct timespec until = ft_wall_deadline(15000);
  pthread_mutex_lock(&b->mu);
  while ((b->pending || b->busy) && !b->stop)
    if (pthread_cond_timedwait(&b->cv, &b->mu, &until))
      break;
  pthread_mutex_unlock(&b->mu);
}

void buddy_stop(buddy *b) {
  if (!b)
    return;
  pthread_mutex_lock(&b->mu);
  __atomic_store_n(&b->stop, 1, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  pthread_join(b->th, NULL);
  ckpt_store_set_remote(snap_store(b->sn), NULL, NULL);
  ckpt_replica_stop(b->srv);
  free(b->pending);
  free(b->report);
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b);
}
