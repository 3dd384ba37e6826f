/*
 * sup_history: every step's loss, in the state directory, compactly
 * (docs/operate.md).
 *
 * STATE/history.bin: a 16-byte header ("FTHIST\0\0", u32 version 2, u32
 * record size 40, little-endian) and one 40-byte record per step rank 0
 * reported, in the order they came: ts f64 (unix seconds), step i64, loss,
 * val_loss, step_ms, tokens_per_s, grad_norm, lr as f32 (NaN: none),
 * little-endian. A run that rolls back or restores trains some steps
 * again: both records stay, the later one is the surviving timeline. 100k
 * steps take 4 MB (the events log keeps every every_steps-th step only).
 *
 * Version 1 files (32-byte records: no grad_norm, lr) still open, those
 * two read as NaN; a supervisor started again on one appends version 1
 * records to it (one file, one record size), so its new steps chart
 * without the norm and the lr until the state directory is new.
 *
 * Writes are buffered and go out with sup_history_flush (the supervisor's
 * one-second tick, and the end); a failed write is reported once through
 * sup_history_error and then only the memory copy goes on: the history
 * never stops a run. A supervisor that is started again appends to the
 * file; a torn last record (a crash mid-write) is cut off at open.
 *
 * The memory copy (what the dashboard draws) holds at most SUP_HISTORY_MEM
 * records: past that it keeps every second step (and every validation
 * loss), then every fourth, and so on; the file keeps everything.
 *
 * Single-threaded. Pure but for the file.
 */
#ifndef SUP_HISTORY_H
#define SUP_HISTORY_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define SUP_HISTORY_MEM (1u << 20)

typedef struct sup_hist_rec {
  double ts;
  int64_t step;
  float loss, val_loss, step_ms, tokens_per_s; /* NaN: none */
  float grad_norm, lr;                         /* NaN: none (or a version 1 file) */
} sup_hist_rec;

typedef struct sup_history sup_history;

/* Opens path, reading the records already there. writable: creates it if
 * absent and appends; else read only (supervise report; FT_ENOENT when
 * absent). FT_EFORMAT, naming the file, when the header is not a history's.
 * mem_cap: 0 for SUP_HISTORY_MEM (tests pass small ones). */
int sup_history_open(const char *path, int writable, size_t mem_cap, sup_history **out);
void sup_history_free(sup_history *h); /* flushes; NULL is a no-op */

void sup_history_add(sup_history *h, const sup_hist_rec *r);
/* Writes what is buffered. FT_OK, or the first write error (then the file
 * is left alone from there on: sup_history_error says why). */
int sup_history_flush(sup_history *h);
const char *sup_history_error(const sup_history *h); /* NULL: none */

size_t sup_history_count(const sup_history *h); /* records in memory */
const sup_hist_rec *sup_history_recs(const sup_history *h);
uint64_t sup_history_total(const sup_history *h); /* records ever added or read */

/* The record format of the open file (2, or 1 for an older one). */
int sup_history_version(const sup_history *h);

/* The chart data: {"total": records, "rows": [[step, loss, val_loss,
 * rolled_back, step_ms, tokens_per_s, grad_norm, lr, ts], ...]} in step
 * order, null for none (grad_norm, lr and ts with the loss: the surviving
 * record's).
 * loss, step_ms and tokens_per_s are the surviving timeline's (for each
 * step its last record; step_ms the time since the step before when that
 * is the record before, which counts communication, else the worker's); rolled_back is the loss of
 * a record a later one replaced (trained, then rolled back or lost in a recovery). At most about 2
 * x max_points rows: per step bucket the lowest and highest loss are kept, so a spike survives the
 * thinning; every validation loss is kept while there are at most max_points of them. */
cJSON *sup_history_series(const sup_history *h, int max_points);

#endif
