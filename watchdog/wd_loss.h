/*
 * wd_loss: loss-spike and NaN/Inf detector over the STEP stream
 * (docs/watchdog.md, "loss spike / NaN").
 *
 * WHAT: feed it one (step, loss, grad_norm) per optimizer step; it answers
 * OK, WARMUP, SPIKE or NONFINITE. A spike is a loss whose robust z-score
 * against a rolling window of recent accepted losses exceeds the threshold:
 *
 *     median = median(window)          MAD = median(|x_i - median|)
 *     scale  = max(1.4826 * MAD, mad_floor_rel * |median|, 1e-12)
 *     z      = (loss - median) / scale
 *     SPIKE  iff  z > zscore  (upward only: a sudden drop is not a fault)
 *
 * WHY robust statistics: a mean/stddev window is dragged by the very outliers
 * it should detect and by the steep start of a loss curve; median and MAD
 * ignore up to half the window being odd. The floor keeps a flat (MAD == 0)
 * or extremely smooth window from turning a 0.1% wiggle into "infinitely many
 * sigmas"; with the default 1% floor, a jump must be at least ~9% above the
 * median to fire at z = 6.
 *
 * INVARIANTS
 *   - NaN or +-Inf in loss or grad_norm is NONFINITE at once, also in warm-up;
 *     such values never enter the window.
 *   - A SPIKE value is not added to the window (one spike does not raise the
 *     baseline, so the next normal step is judged against the same baseline).
 *     A permanent level shift therefore keeps firing until wd_loss_reset():
 *     the supervisor rolls back anyway.
 *   - Until min_steps values (and at least 3) have been accepted, the answer
 *     is WARMUP (never SPIKE); the value is accepted into the window.
 *   - The window holds the last `window` accepted values (a ring).
 *
 * THREADING: none (one owner). FAILURE: FT_EINVAL on bad config; never aborts.
 */
#ifndef WD_LOSS_H
#define WD_LOSS_H

#include <stdint.h>

typedef struct wd_loss_cfg {
  int window;           /* >= 2; run file watchdog.loss_spike.window (50) */
  double zscore;        /* > 0; watchdog.loss_spike.zscore (6.0) */
  int min_steps;        /* >= 0; watchdog.loss_spike.min_steps (20) */
  double mad_floor_rel; /* >= 0; scale floor relative to |median| (0.01) */
} wd_loss_cfg;

typedef enum wd_loss_verdict {
  WD_LOSS_OK = 0,        /* accepted into the window */
  WD_LOSS_WARMUP = 1,    /* accepted; too few values to judge */
  WD_LOSS_SPIKE = 2,     /* fault FT_FAULT_LOSS_SPIKE; not accepted */
  WD_LOSS_NONFINITE = 3, /* fault FT_FAULT_NAN; not accepted */
} wd_loss_verdict;

typedef struct wd_loss_event {
  wd_loss_verdict verdict;
  int64_t step;
  double value;     /* the loss pushed */
  double grad_norm; /* the grad norm pushed */
  double median;    /* of the window before this value (NAN if empty) */
  double mad;       /* raw MAD, before the 1.4826 factor and the floor */
  double z;         /* robust z (NAN when not computed: warm-up, nonfinite) */
} wd_loss_event;

/* Defaults: window 50, zscore 6.0, min_steps 20, mad_floor_rel 0.01. */
void wd_loss_cfg_default(wd_loss_cfg *cfg);

typedef struct wd_loss wd_loss;

/* *out owned by the caller (wd_loss_free). FT_EINVAL names the bad field. */
int wd_loss_new(const wd_loss_cfg *cfg, wd_loss **out);
void wd_loss_free(wd_loss *d); /* NULL: no-op */

/* Empties the window and the warm-up count (after a rollback). */
void wd_loss_reset(wd_loss *d);

/* Judges one step. grad_norm: pass 0 when the caller has none. Fills *ev
 * (every field) and returns FT_OK; FT_EINVAL on NULL arguments. */
int wd_loss_push(wd_loss *d, int64_t step, double loss, double grad_norm, wd_loss_event *ev);

/* Current window statistics (median and raw MAD); FT_ESTATE when empty. */
int wd_loss_stats(wd_loss *d, double *median, double *mad);

const char *wd_loss_verdict_name(int verdict);

#endif
