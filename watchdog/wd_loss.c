/*
 * wd_loss: rolling robust z-score over accepted losses. See wd_loss.h.
 *
 * Storage: a ring of `window` doubles plus a scratch array of the same size
 * for the median/MAD computation (a sort of a copy: O(w log w) per step; the
 * window is tens to hundreds of values, so this costs microseconds).
 */
#include "wd_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"

#define MAD_TO_SIGMA 1.4826 /* MAD of a normal distribution is 0.6745 sigma */
#define SCALE_ABS_FLOOR 1e-12

struct wd_loss {
  wd_loss_cfg cfg;
  double *ring;    /* [window] */
  double *scratch; /* [window] */
  int n;           /* values in the ring (<= window) */
  int head;        /* next slot to write */
  int64_t accepted;
};

void wd_loss_cfg_default(wd_loss_cfg *cfg) {
  cfg->window = 50;
  cfg->zscore = 6.0;
  cfg->min_steps = 20;
  cfg->mad_floor_rel = 0.01;
}

int wd_loss_new(const wd_loss_cfg *cfg, wd_loss **out) {
  if (!cfg || !out)
    return ft_err_set(FT_EINVAL, "wd_loss_new: NULL argument");
  *out = NULL;
  if (cfg->window < 2 || cfg->window > (1 << 24))
    return ft_err_set(FT_EINVAL, "loss_spike.window must be 2..16777216 (got %d)", cfg->window);
  if (!(cfg->zscore > 0) || !isfinite(cfg->zscore))
    return ft_err_set(FT_EINVAL, "loss_spike.zscore must be finite and > 0");
  if (cfg->min_steps < 0)
    return ft_err_set(FT_EINVAL, "loss_spike.min_steps must be >= 0 (got %d)", cfg->min_steps);
  if (!(cfg->mad_floor_rel >= 0) || !isfinite(cfg->mad_floor_rel))
    return ft_err_set(FT_EINVAL, "loss_spike mad_floor_rel must be finite and >= 0");
  wd_loss *d = calloc(1, sizeof *d);
  if (!d)
    return ft_err_set(FT_ENOMEM, "wd_loss_new: out of memory");
  d->cfg = *cfg;
  d->ring = calloc((size_t)cfg->window, sizeof *d->ring);
  d->scratch = calloc((size_t)cfg->window, sizeof *d->scratch);
  if (!d->ring || !d->scratch) {
    wd_loss_free(d);
    return ft_err_set(FT_ENOMEM, "wd_loss_new: out of memory for a window of %d", cfg->window);
  }
  *out = d;
  return FT_OK;
}

void wd_loss_free(wd_loss *d) {
  if (!d)
    return;
  free(d->ring);
  free(d->scratch);
  free(d);
}

void wd_loss_reset(wd_loss *d) {
  if (!d)
    return;
  d->n = 0;
  d->head = 0;
  d->accepted = 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of a sorted array of n >= 1 values. */
static double median_sorted(const double *v, int n) {
  if (n & 1)
    return v[n / 2];
  return 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void window_stats(wd_loss *d, double *median, double *mad) {
  int n = d->n;
  memcpy(d->scratch, d->ring, (size_t)n * sizeof *d->scratch);
  qsort(d->scratch, (size_t)n, sizeof *d->scratch, cmp_double);
  double m = median_sorted(d->scratch, n);
  for (int i = 0; i < n; i++)
    d->scratch[i] = fabs(d->scratch[i] - m);
  qsort(d->scratch, (size_t)n, sizeof *d->scratch, cmp_double);
  *median = m;
  *mad = median_sorted(d->scratch, n);
}

static void accept(wd_loss *d, double x) {
  d->ring[d->head] = x;
  d->head = (d->head + 1) % d->cfg.window;
  if (d->n < d->cfg.window)
    d->n++;
  d->accepted++;
}

int wd_loss_push(wd_loss *d, int64_t step, double loss, double grad_norm, wd_loss_event *ev) {
  if (!d || !ev)
    return ft_err_set(FT_EINVAL, "wd_loss_push: NULL argument");
  memset(ev, 0, sizeof *ev);
  ev->step = step;
  ev->value = loss;
  ev->grad_norm = grad_norm;
  ev->median = NAN;
  ev->mad = NAN;
  ev->z = NAN;
  if (d->n > 0)
    window_stats(d, &ev->median, &ev->mad);

  if (!isfinite(loss) || !isfinite(grad_norm)) {
    ev->verdict = WD_LOSS_NONFINITE;
    return FT_OK;
  }
  int64_t need = d->cfg.min_steps > 3 ? d->cfg.min_steps : 3;
  if (d->accepted < need) {
    ev->verdict = WD_LOSS_WARMUP;
    accept(d, loss);
    return FT_OK;
  }
  double scale = MAD_TO_SIGMA * ev->mad;
  double floor_rel = d->cfg.mad_floor_rel * fabs(ev->median);
  if (scale < floor_rel)
    scale = floor_rel;
  if (scale < SCALE_ABS_FLOOR)
    scale = SCALE_ABS_FLOOR;
  ev->z = (loss - ev->median) / scale;
  if (ev->z > d->cfg.zscore) {
    ev->verdict = WD_LOSS_SPIKE;
    return FT_OK;
  }
  ev->verdict = WD_LOSS_OK;
  accept(d, loss);
  return FT_OK;
}

int wd_loss_stats(wd_loss *d, double *median, double *mad) {
  if (!d || !median || !mad)
    return ft_err_set(FT_EINVAL, "wd_loss_stats: NULL argument");
  if (d->n == 0)
    return ft_err_set(FT_ESTATE, "wd_loss_stats: the window is empty");
  window_stats(d, median, mad);
  return FT_OK;
}

const char *wd_loss_verdict_name(int verdict) {
  switch (verdict) {
  case WD_LOSS_OK:
    return "ok";
  case WD_LOSS_WARMUP:
    return "warmup";
  case WD_LOSS_SPIKE:
    return "spike";
  case WD_LOSS_NONFINITE:
    return "nonfinite";
  }
  return "unknown";
}
