/*
 * wd_hb: heartbeat tracker. See wd_hb.h for the contract.
 *
 * Storage: two arrays of N (last sight, reported flag). A check is O(N);
 * N is the number of workers, so a linear scan per timer tick is fine.
 */
#include "wd_hb.h"

#include <math.h>
#include <stdlib.h>

#include "ft_err.h"

struct wd_hb {
  int n;
  double timeout_s;
  double *last;
  unsigned char *reported;
};

int wd_hb_new(int n, double timeout_s, double t0, wd_hb **out) {
  if (!out || n < 1 || !(timeout_s > 0) || !isfinite(timeout_s) || !isfinite(t0))
    return ft_err_set(FT_EINVAL, "wd_hb_new: need n >= 1 and a finite timeout_s > 0");
  *out = NULL;
  wd_hb *hb = calloc(1, sizeof *hb);
  if (!hb)
    return ft_err_set(FT_ENOMEM, "wd_hb_new: out of memory");
  hb->n = n;
  hb->timeout_s = timeout_s;
  hb->last = calloc((size_t)n, sizeof *hb->last);
  hb->reported = calloc((size_t)n, 1);
  if (!hb->last || !hb->reported) {
    wd_hb_free(hb);
    return ft_err_set(FT_ENOMEM, "wd_hb_new: out of memory for %d members", n);
  }
  wd_hb_reset(hb, t0);
  *out = hb;
  return FT_OK;
}

void wd_hb_free(wd_hb *hb) {
  if (!hb)
    return;
  free(hb->last);
  free(hb->reported);
  free(hb);
}

void wd_hb_reset(wd_hb *hb, double t0) {
  if (!hb)
    return;
  for (int i = 0; i < hb->n; i++) {
    hb->last[i] = t0;
    hb->reported[i] = 0;
  }
}

int wd_hb_seen(wd_hb *hb, double t, int i) {
  if (!hb || i < 0 || i >= hb->n || !isfinite(t))
    return ft_err_set(FT_EINVAL, "wd_hb_seen: member %d out of range", i);
  /* A heartbeat stamped before the last sight (reordered) changes nothing. */
  if (t >= hb->last[i]) {
    hb->last[i] = t;
    hb->reported[i] = 0;
  }
  return FT_OK;
}

int wd_hb_check(wd_hb *hb, double t, wd_hb_silent *out, int cap) {
  if (!hb || cap < 0 || (cap > 0 && !out) || !isfinite(t))
    return ft_err_set(FT_EINVAL, "wd_hb_check: bad arguments");
  int k = 0;
  for (int i = 0; i < hb->n && k < cap; i++) {
    if (hb->reported[i])
      continue;
    double silent = t - hb->last[i];
    if (silent > hb->timeout_s) {
      hb->reported[i] = 1;
      out[k].member = i;
      out[k].last_seen = hb->last[i];
      out[k].silent_s = silent;
      k++;
    }
  }
  return k;
}

double wd_hb_last_seen(const wd_hb *hb, int i) {
  if (!hb || i < 0 || i >= hb->n)
    return NAN;
  return hb->last[i];
}

int wd_hb_count(const wd_hb *hb) {
  return hb ? hb->n : 0;
}

double wd_hb_timeout(const wd_hb *hb) {
  return hb ? hb->timeout_s : NAN;
}
