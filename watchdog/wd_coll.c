/*
 * wd_coll: collective-operation timer shared by the training thread and the
 * watchdog thread. See wd_coll.h for the contract.
 *
 * Storage: an unordered array of outstanding ops guarded by a pthread mutex.
 * Only a few collectives are in flight at once (FSDP prefetch overlaps one or
 * two), so linear scans are the cheapest correct structure; end() swaps the
 * last element into the hole.
 */
#include "wd_coll.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"

struct wd_coll {
  pthread_mutex_t mu;
  double timeout_s;
  wd_coll_op *ops; /* [0, n) outstanding; age_s unused here */
  int n, cap;
};

int wd_coll_new(double timeout_s, wd_coll **out) {
  if (!out || !(timeout_s > 0) || !isfinite(timeout_s))
    return ft_err_set(FT_EINVAL, "wd_coll_new: need a finite timeout_s > 0");
  *out = NULL;
  wd_coll *c = calloc(1, sizeof *c);
  if (!c)
    return ft_err_set(FT_ENOMEM, "wd_coll_new: out of memory");
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    free(c);
    return ft_err_set(FT_ENOMEM, "wd_coll_new: pthread_mutex_init failed");
  }
  c->timeout_s = timeout_s;
  *out = c;
  return FT_OK;
}

void wd_coll_free(wd_coll *c) {
  if (!c)
    return;
  pthread_mutex_destroy(&c->mu);
  free(c->ops);
  free(c);
}

static int find_locked(const wd_coll *c, uint64_t seq) {
  for (int i = 0; i < c->n; i++)
    if (c->ops[i].seq == seq)
      return i;
  return -1;
}

int wd_coll_begin(wd_coll *c, double t, const char *op_name, uint64_t seq) {
  if (!c || !isfinite(t))
    return ft_err_set(FT_EINVAL, "wd_coll_begin: bad arguments");
  int rc = FT_OK;
  pthread_mutex_lock(&c->mu);
  if (find_locked(c, seq) >= 0) {
    rc = ft_err_set(FT_EEXIST, "wd_coll_begin: op seq %llu is already outstanding",
                    (unsigned long long)seq);
    goto out;
  }
  if (c->n == c->cap) {
    if (c->cap >= WD_COLL_MAX_OUTSTANDING) {
      rc = ft_err_set(FT_ENOMEM, "wd_coll_begin: more than %d collectives outstanding",
                      WD_COLL_MAX_OUTSTANDING);
      goto out;
    }
    int ncap = c->cap ? c->cap * 2 : 8;
    if (ncap > WD_COLL_MAX_OUTSTANDING)
      ncap = WD_COLL_MAX_OUTSTANDING;
    wd_coll_op *nops = realloc(c->ops, (size_t)ncap * sizeof *nops);
    if (!nops) {
      rc = ft_err_set(FT_ENOMEM, "wd_coll_begin: out of memory");
      goto out;
    }
    c->ops = nops;
    c->cap = ncap;
  }
  wd_coll_op *op = &c->ops[c->n++];
  memset(op, 0, sizeof *op);
  if (op_name) {
    size_t len = strnlen(op_name, WD_COLL_NAME_MAX - 1);
    memcpy(op->name, op_name, len);
    op->name[len] = '\0';
  }
  op->seq = seq;
  op->begin = t;
out:
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int wd_coll_end(wd_coll *c, uint64_t seq) {
  if (!c)
    return ft_err_set(FT_EINVAL, "wd_coll_end: NULL tracker");
  int rc = FT_OK;
  pthread_mutex_lock(&c->mu);
  int i = find_locked(c, seq);
  if (i < 0) {
    rc = ft_err_set(FT_ENOENT, "wd_coll_end: op seq %llu is not outstanding",
                    (unsigned long long)seq);
  } else {
    c->ops[i] = c->ops[--c->n];
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void wd_coll_reset(wd_coll *c) {
  if (!c)
    return;
  pthread_mutex_lock(&c->mu);
  c->n = 0;
  pthread_mutex_unlock(&c->mu);
}

int wd_coll_check(wd_coll *c, double t, wd_coll_op *op) {
  if (!c || !op || !isfinite(t))
    return ft_err_set(FT_EINVAL, "wd_coll_check: bad arguments");
  int found = 0;
  pthread_mutex_lock(&c->mu);
  int oldest = -1;
  for (int i = 0; i < c->n; i++) {
    /* Ties (same begin time): the lower seq is the older op. */
    if (oldest < 0 || c->ops[i].begin < c->ops[oldest].begin ||
        (c->ops[i].begin == c->ops[oldest].begin && c->ops[i].seq < c->ops[oldest].seq))
      oldest = i;
  }
  if (oldest >= 0 && t - c->ops[oldest].begin > c->timeout_s) {
    *op = c->ops[oldest];
    op->age_s = t - op->begin;
    found = 1;
  }
  pthread_mutex_unlock(&c->mu);
  return found;
}

int wd_coll_outstanding(wd_coll *c) {
  if (!c)
    return 0;
  pthread_mutex_lock(&c->mu);
  int n = c->n;
  pthread_mutex_unlock(&c->mu);
  return n;
}
