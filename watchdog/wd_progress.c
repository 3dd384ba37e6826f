/*
 * wd_progress: hangs where the processes stay alive. See wd_progress.h.
 *
 * One pass to find the highest collective count and whether every joined
 * rank is past its deadline, then the classes in the header's order. O(n).
 * wd_progress_behind: one pass over the ranks behind the timed-out
 * collective, or (no collective yet: absent) over the ranks that never
 * joined the rendezvous; O(n) too.
 */
#include "wd_progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ft_err.h"
#include "ft_wire.h"

void wd_progress_cfg_default(wd_progress_cfg *cfg, double heartbeat_timeout_s) {
  cfg->timeout_s = 0;
  cfg->heartbeat_timeout_s = heartbeat_timeout_s;
  cfg->multiple = 10;
  cfg->floor_s = 60;
  cfg->ceiling_s = 1800;
  cfg->first_step_s = 600;
  cfg->restore_s = 600;
  cfg->validation_s = 300;
  cfg->checkpoint_s = 600;
  cfg->storage_wait_s = 0;
}

const char *wd_prog_class_name(int cls) {
  switch (cls) {
  case WD_PROG_NONE:
    return "none";
  case WD_PROG_BEHIND:
    return "behind";
  case WD_PROG_STORAGE:
    return "storage";
  case WD_PROG_NETWORK:
    return "network";
  case WD_PROG_RENDEZVOUS:
    return "rendezvous";
  case WD_PROG_GANG:
    return "gang";
  }
  return "?";
}

static double pos(double x) {
  return isfinite(x) && x > 0 ? x : 0;
}

double wd_progress_deadline(const wd_progress_cfg *c, int phase, const double *step_s, int nsteps,
                            int first_step) {
  double floor_s =
      pos(c->floor_s) > pos(c->heartbeat_timeout_s) ? pos(c->floor_s) : pos(c->heartbeat_timeout_s);
  double base;
  if (pos(c->timeout_s) > 0) {
    base = c->timeout_s;
  } else {
    double slowest = 0;
    for (int i = 0; step_s && i < nsteps; i++)
      if (pos(step_s[i]) > slowest)
        slowest = step_s[i];
    base = pos(c->multiple) * slowest;
    if (base > pos(c->ceiling_s) && pos(c->ceiling_s) > 0)
      base = c->ceiling_s;
    if (first_step || slowest == 0)
      base = base > pos(c->first_step_s) ? base : pos(c->first_step_s);
  }
  if (base < floor_s)
    base = floor_s;
  switch (phase) {
  case FT_PHASE_RESTORE:
  case FT_PHASE_RENDEZVOUS:
    return base > pos(c->restore_s) ? base : pos(c->restore_s);
  case FT_PHASE_VALIDATION:
    return base + pos(c->validation_s);
  case FT_PHASE_SNAPSHOT:
  case FT_PHASE_CKPT_WRITE:
    return base + pos(c->checkpoint_s);
  case FT_PHASE_STORAGE_WAIT:
    return base > pos(c->storage_wait_s) ? base : pos(c->storage_wait_s);
  default:
    return base;
  }
}

static int joined(const wd_prog_rank *r) {
  return r->in_gen && (r->phase != FT_PHASE_IDLE || r->coll_seq > 0);
}

/* idle after its part (joined): done, or waiting for a STOP */
static int idle_done(const wd_prog_rank *r) {
  return joined(r) && r->phase == FT_PHASE_IDLE;
}

static void blame(wd_prog_verdict *v, const wd_prog_rank *ranks, int r) {
  if (v->nculprits < WD_PROG_MAX_CULPRITS)
    v->culprits[v->nculprits] = r;
  v->nculprits++;
  for (int i = 0; i < v->nnodes; i++)
    if (v->nodes[i] == ranks[r].node)
      return;
  if (v->nnodes < WD_PROG_MAX_CULPRITS)
    v->nodes[v->nnodes++] = ranks[r].node;
}

/* "ranks 3, 5 (nodes 1, 2)" of the culprits, at most a few named */
static void culprit_text(const wd_prog_verdict *v, char *buf, size_t len) {
  size_t o = 0;
  int shown = v->nculprits < WD_PROG_MAX_CULPRITS ? v->nculprits : WD_PROG_MAX_CULPRITS;
  o += (size_t)snprintf(buf + o, len - o, "rank%s", v->nculprits > 1 ? "s" : "");
  for (int i = 0; i < shown && i < 8 && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s %d", i ? "," : "", v->culprits[i]);
  if (v->nculprits > 8 && o < len)
    o += (size_t)snprintf(buf + o, len - o, " and %d more", v->nculprits - 8);
  if (o < len)
    o += (size_t)snprintf(buf + o, len - o, " (node%s", v->nnodes > 1 ? "s" : "");
  for (int i = 0; i < v->nnodes && i < 8 && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s %d", i ? "," : "", v->nodes[i]);
  if (v->nnodes > 8 && o < len)
    o += (size_t)snprintf(buf + o, len - o, " and %d more", v->nnodes - 8);
  if (o < len)
    snprintf(buf + o, len - o, ")");
}

int wd_progress_judge(const wd_progress_cfg *cfg, const wd_prog_rank *ranks, int n,
                      const double *step_s, int nsteps, int first_step, wd_prog_verdict *v) {
  if (!v)
    return ft_err_set(FT_EINVAL, "wd_progress_judge: NULL verdict");
  memset(v, 0, sizeof *v);
  v->phase = -1;
  if (!cfg || !ranks || n < 1 || nsteps < 0 || (nsteps > 0 && !step_s))
    return ft_err_set(FT_EINVAL, "wd_progress_judge: bad arguments (n %d, nsteps %d)", n, nsteps);
  v->deadline_s = wd_progress_deadline(cfg, FT_PHASE_FORWARD, step_s, nsteps, first_step);

  int njoined = 0, nidle = 0;
  uint64_t top = 0;
  double least = INFINITY;
  for (int r = 0; r < n; r++) {
    const wd_prog_rank *x = &ranks[r];
    if (!joined(x))
      continue;
    njoined++;
    nidle += x->phase == FT_PHASE_IDLE;
    if (x->coll_seq > top)
      top = x->coll_seq;
    double stuck = isfinite(x->stuck_s) ? x->stuck_s : 0;
    if (stuck < least)
      least = stuck;
    /* one joined rank within its deadline: the gang moves */
    if (!(stuck > wd_progress_deadline(cfg, x->phase, step_s, nsteps, first_step)))
      return FT_OK;
  }
  if (njoined == 0 || nidle == njoined)
    return FT_OK; /* not started, or nothing left for the workers to do */
  v->stuck_s = least;
  char who[200];

  /* (d) some ranks never joined */
  if (njoined < n) {
    v->cls = WD_PROG_RENDEZVOUS;
    v->phase = FT_PHASE_RENDEZVOUS;
    for (int r = 0; r < n; r++)
      if (!joined(&ranks[r]))
        blame(v, ranks, r);
    culprit_text(v, who, sizeof who);
    snprintf(v->why, sizeof v->why,
             "%s never joined the generation's rendezvous; the other %d rank(s) stuck for %.0f s "
             "(deadline %.0f s)",
             who, njoined, v->stuck_s, v->deadline_s);
    return FT_OK;
  }

  /* (b) every rank in data, storage_wait or checkpoint_write (or done with
   * its part) */
  int storage = 1, first_io = -1;
  for (int r = 0; r < n && storage; r++) {
    int ph = ranks[r].phase;
    if (ph == FT_PHASE_DATA || ph == FT_PHASE_CKPT_WRITE || ph == FT_PHASE_STORAGE_WAIT) {
      if (first_io < 0)
        first_io = r;
    } else if (!idle_done(&ranks[r])) {
      storage = 0;
    }
  }
  if (storage && first_io >= 0) {
    v->cls = WD_PROG_STORAGE;
    v->phase = ranks[first_io].phase;
    snprintf(v->why, sizeof v->why,
             "every rank stuck in data, storage_wait or checkpoint_write for %.0f s (rank %d in "
             "%s): the store or the data's storage; nobody blamed",
             v->stuck_s, first_io, ft_phase_name(v->phase));
    return FT_OK;
  }

  /* waiting = in collective `top` (or idle after its part); in storage_wait
   * = waiting on the data's bucket (never behind); the rest behind */
  int nwait = 0, nbehind = 0, nstore = 0, first_store = -1;
  for (int r = 0; r < n; r++) {
    const wd_prog_rank *x = &ranks[r];
    if ((x->phase == FT_PHASE_COLLECTIVE && x->coll_seq == top) || idle_done(x)) {
      nwait++;
    } else if (x->phase == FT_PHASE_STORAGE_WAIT) {
      if (!nstore++)
        first_store = r;
    } else {
      nbehind++;
    }
  }
  v->coll_seq = top;

  /* (b') some ranks wait on their data's bucket, the others for them */
  if (nstore > 0 && nbehind == 0) {
    v->cls = WD_PROG_STORAGE;
    v->phase = FT_PHASE_STORAGE_WAIT;
    snprintf(v->why, sizeof v->why,
             "%d rank(s) stuck in storage_wait (rank %d, step %lld) for %.0f s while %d rank(s) "
             "wait in collective %llu: the data's storage; nobody blamed",
             nstore, first_store, (long long)ranks[first_store].step, v->stuck_s, nwait,
             (unsigned long long)top);
    return FT_OK;
  }

  /* (c) every rank in the same collective */
  if (nbehind == 0 && nwait == n && nidle == 0) {
    v->cls = WD_PROG_NETWORK;
    v->phase = FT_PHASE_COLLECTIVE;
    snprintf(v->why, sizeof v->why,
             "every rank stuck in collective %llu for %.0f s, nobody behind: the network or the "
             "collectives; nobody blamed",
             (unsigned long long)top, v->stuck_s);
    return FT_OK;
  }

  /* (a) a few ranks behind the others, who wait in collective `top` */
  if (nbehind > 0 && nwait > 0 && 2 * nbehind <= n) {
    v->cls = WD_PROG_BEHIND;
    for (int r = 0; r < n; r++) {
      const wd_prog_rank *x = &ranks[r];
      if (!((x->phase == FT_PHASE_COLLECTIVE && x->coll_seq == top) || idle_done(x) ||
            x->phase == FT_PHASE_STORAGE_WAIT)) {
        if (v->phase < 0)
          v->phase = x->phase;
        blame(v, ranks, r);
      }
    }
    culprit_text(v, who, sizeof who);
    snprintf(v->why, sizeof v->why,
             "%s stuck in %s (step %lld, collective %llu) for %.0f s while %d rank(s) wait in "
             "collective %llu (deadline %.0f s)",
             who, ft_phase_name(v->phase), (long long)ranks[v->culprits[0]].step,
             (unsigned long long)ranks[v->culprits[0]].coll_seq, v->stuck_s, nwait,
             (unsigned long long)top, v->deadline_s);
    return FT_OK;
  }

  v->cls = WD_PROG_GANG;
  v->phase = ranks[0].phase;
  snprintf(v->why, sizeof v->why,
           "every rank stuck for %.0f s (rank 0 in %s at step %lld, collective %llu; %d of %d "
           "behind collective %llu): a common cause; nobody blamed",
           v->stuck_s, ft_phase_name(v->phase), (long long)ranks[0].step,
           (unsigned long long)ranks[0].coll_seq, nbehind, n, (unsigned long long)top);
  return FT_OK;
}

/* wd_progress_behind with seq 0: the reporter timed out before the
 * generation's first collective, in its rendezvous. The culprits are the
 * ranks that never joined (in the generation, idle, nothing counted). */
static int absent(const wd_prog_rank *ranks, int n, double min_stuck_s, wd_prog_verdict *v) {
  int nabsent = 0;
  double least = INFINITY;
  for (int r = 0; r < n; r++) {
    if (!ranks[r].in_gen)
      return FT_OK; /* a rank we cannot see in this generation: name nobody */
    double st = isfinite(ranks[r].stuck_s) && ranks[r].stuck_s > 0 ? ranks[r].stuck_s : 0;
    if (joined(&ranks[r])) {
      if (st < least)
        least = st;
      continue;
    }
    if (!(ranks[r].stuck_s >= min_stuck_s))
      return FT_OK; /* it moved lately (a worker just past its start): not hung */
    nabsent++;
  }
  if (nabsent < 1 || 2 * nabsent > n)
    return FT_OK; /* everyone joined (the network), or most never did: a common cause */
  v->cls = WD_PROG_RENDEZVOUS;
  v->phase = FT_PHASE_RENDEZVOUS;
  v->stuck_s = least; /* how long the others have waited in the rendezvous */
  for (int r = 0; r < n; r++)
    if (!joined(&ranks[r]))
      blame(v, ranks, r);
  char who[120];
  culprit_text(v, who, sizeof who);
  snprintf(v->why, sizeof v->why,
           "%s never joined the generation's rendezvous (heartbeating in it, idle, no progress "
           "for %.0f s) while %d rank(s) waited in it until it timed out",
           who, ranks[v->culprits[0]].stuck_s, n - nabsent);
  return FT_OK;
}

int wd_progress_behind(const wd_prog_rank *ranks, int n, uint64_t seq, double min_stuck_s,
                       wd_prog_verdict *v) {
  if (!v)
    return ft_err_set(FT_EINVAL, "wd_progress_behind: NULL verdict");
  memset(v, 0, sizeof *v);
  v->phase = -1;
  if (!ranks || n < 1)
    return ft_err_set(FT_EINVAL, "wd_progress_behind: bad arguments (n %d)", n);
  if (seq < 1)
    return absent(ranks, n, min_stuck_s, v);
  int nbehind = 0, nstore = 0, first_store = -1;
  for (int r = 0; r < n; r++) {
    if (!ranks[r].in_gen)
      return FT_OK; /* a rank we cannot see in this generation: name nobody */
    if (ranks[r].coll_seq >= seq)
      continue;
    if (ranks[r].phase == FT_PHASE_STORAGE_WAIT) { /* waits on its bucket: never a culprit */
      if (!nstore++)
        first_store = r;
      continue;
    }
    if (!(ranks[r].stuck_s >= min_stuck_s))
      return FT_OK; /* behind but it moved: crashed or slow, not hung */
    nbehind++;
  }
  if (nbehind == 0 && nstore > 0) {
    /* the ranks behind all wait on their data's bucket: the storage's */
    v->cls = WD_PROG_STORAGE;
    v->phase = FT_PHASE_STORAGE_WAIT;
    v->coll_seq = seq;
    v->stuck_s = isfinite(ranks[first_store].stuck_s) && ranks[first_store].stuck_s > 0
                     ? ranks[first_store].stuck_s
                     : 0;
    snprintf(v->why, sizeof v->why,
             "%d rank(s) never started collective %llu: in storage_wait (rank %d, step %lld, for "
             "%.0f s) while %d rank(s) waited in it until it timed out: the data's storage; "
             "nobody blamed",
             nstore, (unsigned long long)seq, first_store, (long long)ranks[first_store].step,
             v->stuck_s, n - nstore);
    return FT_OK;
  }
  if (nbehind < 1 || 2 * nbehind > n)
    return FT_OK; /* nobody behind (the network), or most: a common cause */
  v->cls = WD_PROG_BEHIND;
  v->coll_seq = seq;
  v->stuck_s = INFINITY;
  for (int r = 0; r < n; r++) {
    if (ranks[r].coll_seq >= seq || ranks[r].phase == FT_PHASE_STORAGE_WAIT)
      continue;
    if (v->phase < 0)
      v->phase = ranks[r].phase;
    double st = isfinite(ranks[r].stuck_s) && ranks[r].stuck_s > 0 ? ranks[r].stuck_s : 0;
    if (st < v->stuck_s)
      v->stuck_s = st;
    blame(v, ranks, r);
  }
  char who[120];
  culprit_text(v, who, sizeof who);
  snprintf(v->why, sizeof v->why,
           "%s never started collective %llu (in %s at step %lld, collective %llu, no progress "
           "for %.0f s) while %d rank(s) waited in it until it timed out",
           who, (unsigned long long)seq, ft_phase_name(v->phase),
           (long long)ranks[v->culprits[0]].step,
           (unsigned long long)ranks[v->culprits[0]].coll_seq, v->stuck_s, n - nbehind - nstore);
  return FT_OK;
}
