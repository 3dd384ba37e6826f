/*
 * sup_events: the run's event log, DIR/events.jsonl (docs/design.md).
 *
 * One JSON object per line: {"ts": unix seconds (ms precision), "event":
 * NAME, ...fields}. Each line is written with one write(2) on an O_APPEND
 * descriptor (it survives a crash of the supervisor) and fsync'ed by a
 * thread of the log's own, in batches (sup_events.c: it survives a crash of
 * the machine but for the last milliseconds' lines).
 * Each event also prints one human line on a stream (stderr in supervise):
 * "[  12.345s] NAME: text", time since sup_events_open.
 *
 * Failure model: a failed write is reported once on the human stream and
 * then ignored: losing the log must never stop a training run.
 * Threads: called from one thread (the supervisor's loop); the fsync
 * thread is internal.
 */
#ifndef SUP_EVENTS_H
#define SUP_EVENTS_H

#include <cjson/cJSON.h>
#include <stdio.h>

typedef struct sup_events sup_events;

/* Opens (creating, appending) path. human: where the human lines go (may be
 * NULL: none; borrowed, must outlive the log). */
int sup_events_open(const char *path, FILE *human, sup_events **out);
void sup_events_free(sup_events *ev); /* NULL is a no-op */

/* Appends one event. fields: a JSON object of the event's fields, or NULL;
 * OWNED: taken (and freed) even on failure. "ts" and "event" are put first.
 * human_fmt: printf text for the human line (NULL: the fields as JSON). */
int sup_events_emit(sup_events *ev, const char *name, cJSON *fields, const char *human_fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Calls fn(arg, ts, name, line) after each event is written: line is the
 * whole event (ts, event, fields), borrowed for the call. One hook; NULL
 * removes it. For the operator's view (sup_http.c), which folds events
 * into metrics and the status. */
typedef void (*sup_events_hook)(void *arg, double ts, const char *name, const cJSON *event);
void sup_events_set_hook(sup_events *ev, sup_events_hook fn, void *arg);

/* The progress line: on a terminal (the human stream is a TTY) line is
 * drawn in place at the bottom ("\r", erase to the end of the line), taken
 * away before each event's human line and drawn again after it, cut to
 * the terminal's width (its last " | " fields first); NULL takes it away
 * for good. Elsewhere it does nothing: the "step" events are the
 * plain progress lines there. line is copied. */
void sup_events_progress(sup_events *ev, const char *line);
/* A note drawn before the progress line ("waiting on data storage ...",
 * sup_watch.c) while the line itself cannot move; NULL or "" removes it.
 * Redrawn only when it changes. note is copied. */
void sup_events_progress_note(sup_events *ev, const char *note);

/* The same line as emit would write, without writing it (for tests):
 * malloc'd, caller frees; NULL on allocation failure. fields is borrowed. */
char *sup_events_format(double ts, const char *name, const cJSON *fields);

/* A rate limit for lines a peer can cause at will (refused connections,
 * accept errors): at most `burst` lines per `window_s` seconds; the rest
 * are counted, and the count is handed to the next line allowed (or to a
 * periodic flush) so the log says how many it left out. Zero-initialise,
 * then set window_s and burst. Pure: the caller passes the time. */
typedef struct sup_ratelimit {
  double window_s; /* > 0 */
  int burst;       /* >= 1 */
  double start;    /* when the current window began */
  int n;           /* lines allowed in it */
  long suppressed; /* dropped since the last line allowed */
} sup_ratelimit;

/* 1: write this line; *suppressed gets how many were dropped before it
 * (then cleared). 0: drop it (counted). */
int sup_ratelimit_allow(sup_ratelimit *rl, double now, long *suppressed);
/* For a periodic timer: once the window of the last line is over, returns
 * (and clears) the count dropped since; else 0. */
long sup_ratelimit_flush(sup_ratelimit *rl, double now);

#endif
