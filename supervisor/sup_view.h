/*
 * sup_view: what the dashboard and the report show (docs/operate.md).
 *
 * Both draw the same page (supervisor/dash/dashboard.html, with Debian's
 * dygraphs inlined: compiled into supervise, no files, no network) from the
 * same data, the "view" JSON:
 *
 *   {"run", "live": bool, "now": unix s, "status": {.. as /status ..},
 *    "goodput": share of the wall time since the first step spent on steps
 *               that survive (null before two steps),
 *    "history": {"total", "rows": [[step, loss, val_loss, rolled_back,
 *               step_ms, tokens_per_s, grad_norm, lr, ts]]}
 *               (sup_history_series),
 *    "events": [the notable events, verbatim, oldest first],
 *    "checkpoints": [{"step", "state", "ts"[, "reason"]}]: committed, good,
 *               bad or failed (checkpoint_failed); a checkpoint the store
 *               deleted (checkpoint_deleted: retention, gc) is not listed,
 *    "config": {"global_batch", "seq_len", "tokens_per_step", "n_layer",
 *               "n_embd", "vocab_size", "params", "flops_per_token",
 *               "world", "device", "peak_flops": the gang's, from
 *               nodes.peak_tflops x world, null when unknown} read from
 *               run_started's sealed run file (null when it cannot be read),
 *    "started": the first run_started's ts, "ended": the run's last word's
 *               ts after the last run_started (null: none)}
 *
 * Live, the supervisor folds its events as they are written and serves the
 * view at /view.json, which the page at / polls; `supervise report` folds
 * events.jsonl and history.bin and writes the page with the view in it.
 * The page derives the rest: markers on the loss curve (faults, recoveries,
 * rollbacks and skipped ranges, checkpoints; log scale and smoothing), the
 * grad norm and lr chart, the x axis in steps, tokens or wall time, MFU,
 * the node map (run_started's hosts, generations, quarantines, drains,
 * promotions, losses; live, each rank's step time and heartbeat age from
 * /status) and the timeline.
 *
 * Bounded: the last SUP_VIEW_EVENTS notable events and SUP_VIEW_CKPTS
 * checkpoints. Single-threaded.
 */
#ifndef SUP_VIEW_H
#define SUP_VIEW_H

#include "sup_history.h"

#include <cjson/cJSON.h>
#include <stddef.h>

#define SUP_VIEW_EVENTS 2000
#define SUP_VIEW_CKPTS 5000

typedef struct sup_view sup_view;

sup_view *sup_view_new(void); /* NULL: out of memory */
void sup_view_free(sup_view *v);
/* One event of the log (the hook's arguments). */
void sup_view_fold(sup_view *v, double ts, const char *name, const cJSON *event);
/* Whether the timeline shows this event. */
int sup_view_notable(const char *name);

/* The share of the time since the first record spent on records that
 * survive (NaN with fewer than two). */
double sup_view_goodput(const sup_history *h);

/* The view JSON; status is taken (may be NULL). */
cJSON *sup_view_json(const sup_view *v, const sup_history *h, cJSON *status, int live, int points);

/* The page, through w: live (view NULL: it polls /view.json) or the report
 * (view: embedded, "</" written "<\/" so no text in it can end the script). */
typedef void (*sup_view_writer)(void *ud, const void *p, size_t n);
void sup_view_page(sup_view_writer w, void *ud, const cJSON *view);

#endif
