/*
 * wd_straggler: per-rank step-time outliers. See wd_straggler.h.
 *
 * Each rank keeps a 64-bit shift register of outlier bits (bit 0 = the
 * latest observed step), a count of consecutive good steps and a flag.
 * The median of the others is computed for all ranks at once from one sorted
 * copy of the observed times: removing the element at sorted position p
 * shifts the indexes above p down by one, so each rank's median is two
 * array reads. O(n log n) per step.
 */
#include "wd_straggler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"

typedef struct tr {
  double t;
  int rank;
} tr;

struct wd_straggler {
  wd_straggler_cfg cfg;
  uint64_t *bits;
  int *good_run;
  unsigned char *flagged;
  tr *sorted; /* scratch [nranks] */
  int *pos;   /* scratch: rank -> position in sorted, -1 unobserved */
};

void wd_straggler_cfg_default(wd_straggler_cfg *cfg, int nranks) {
  cfg->nranks = nranks;
  cfg->ratio = 1.5;
  cfg->window = 20;
  cfg->min_hits = 10;
}

int wd_straggler_new(const wd_straggler_cfg *cfg, wd_straggler **out) {
  if (!cfg || !out)
    return ft_err_set(FT_EINVAL, "wd_straggler_new: NULL argument");
  *out = NULL;
  if (cfg->nranks < 2 || cfg->nranks > (1 << 20))
    return ft_err_set(FT_EINVAL, "straggler detector needs 2..1048576 ranks (got %d)", cfg->nranks);
  if (!(cfg->ratio > 1) || !isfinite(cfg->ratio))
    return ft_err_set(FT_EINVAL, "straggler ratio must be finite and > 1");
  if (cfg->window < 1 || cfg->window > 64 || cfg->min_hits < 1 || cfg->min_hits > cfg->window)
    return ft_err_set(FT_EINVAL, "straggler needs 1 <= min_hits <= window <= 64 (got %d, %d)",
                      cfg->min_hits, cfg->window);
  wd_straggler *s = calloc(1, sizeof *s);
  if (!s)
    return ft_err_set(FT_ENOMEM, "wd_straggler_new: out of memory");
  size_t n = (size_t)cfg->nranks;
  s->cfg = *cfg;
  s->bits = calloc(n, sizeof *s->bits);
  s->good_run = calloc(n, sizeof *s->good_run);
  s->flagged = calloc(n, 1);
  s->sorted = calloc(n, sizeof *s->sorted);
  s->pos = calloc(n, sizeof *s->pos);
  if (!s->bits || !s->good_run || !s->flagged || !s->sorted || !s->pos) {
    wd_straggler_free(s);
    return ft_err_set(FT_ENOMEM, "wd_straggler_new: out of memory for %d ranks", cfg->nranks);
  }
  *out = s;
  return FT_OK;
}

void wd_straggler_free(wd_straggler *s) {
  if (!s)
    return;
  free(s->bits);
  free(s->good_run);
  free(s->flagged);
  free(s->sorted);
  free(s->pos);
  free(s);
}

static int cmp_tr(const void *a, const void *b) {
  const tr *x = a, *y = b;
  if (x->t != y->t)
    return (x->t > y->t) - (x->t < y->t);
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Element j of the sorted array with position p removed. */
static double without(const tr *v, int p, int j) {
  return v[j < p ? j : j + 1].t;
}

int wd_straggler_step(wd_straggler *s, int64_t step, const double *times, wd_strag_event *out,
                      int cap) {
  if (!s || !times || cap < 0 || (cap > 0 && !out))
    return ft_err_set(FT_EINVAL, "wd_straggler_step: bad arguments");
  int nr = s->cfg.nranks, m = 0;
  for (int r = 0; r < nr; r++) {
    s->pos[r] = -1;
    if (isfinite(times[r]) && times[r] >= 0) {
      s->sorted[m].t = times[r];
      s->sorted[m].rank = r;
      m++;
    }
  }
  if (m < 2)
    return 0;
  qsort(s->sorted, (size_t)m, sizeof *s->sorted, cmp_tr);
  for (int i = 0; i < m; i++)
    s->pos[s->sorted[i].rank] = i;

  uint64_t mask = s->cfg.window == 64 ? ~0ULL : ((1ULL << s->cfg.window) - 1);
  int k = 0;
  for (int r = 0; r < nr; r++) {
    int p = s->pos[r];
    if (p < 0)
      continue;
    int o = m - 1; /* the others */
    double med = (o & 1) ? without(s->sorted, p, o / 2)
                         : 0.5 * (without(s->sorted, p, o / 2 - 1) + without(s->sorted, p, o / 2));
    double ratio = med > 0 ? times[r] / med : (times[r] > 0 ? INFINITY : 1.0);
    int hit = ratio > s->cfg.ratio;
    s->bits[r] = ((s->bits[r] << 1) | (uint64_t)hit) & mask;
    s->good_run[r] = hit ? 0 : s->good_run[r] + 1;
    int hits = __builtin_popcountll(s->bits[r]);
    wd_strag_kind kind = 0;
    if (!s->flagged[r] && hits >= s->cfg.min_hits) {
      s->flagged[r] = 1;
      kind = WD_STRAG_FLAGGED;
    } else if (s->flagged[r] && s->good_run[r] >= s->cfg.min_hits) {
      s->flagged[r] = 0;
      s->bits[r] = 0;
      s->good_run[r] = 0;
      kind = WD_STRAG_CLEARED;
    }
    if (kind && k < cap) {
      out[k].kind = kind;
      out[k].rank = r;
      out[k].step = step;
      out[k].ratio = ratio;
      out[k].hits = hits;
      k++;
    }
  }
  return k;
}

int wd_straggler_flagged(const wd_straggler *s, int rank) {
  if (!s || rank < 0 || rank >= s->cfg.nranks)
    return -1;
  return s->flagged[rank];
}
