/*
 * sup_events: the run's event log (see sup_events.h for the format).
 *
 * Why one write(2) per event and not stdio: a line must reach the file
 * whole or not at all as far as readers (tests, a tailing dashboard) can
 * see, and it is in the file (the page cache) before the supervisor acts on
 * what it says: a crash of the supervisor loses no line it emitted.
 *
 * The fsync that puts lines on the disk itself (against a crash of the
 * machine) runs on a thread of its own, once for every batch of lines
 * written since its last one: a run of 16,384 ranks logs tens of thousands
 * of events when its gang forms (each worker's launch and doctor report),
 * and an fsync per line on the loop (1-4 ms each here) blocked it for
 * seconds, past the heartbeat timeout (tests/scale). So a machine crash
 * may lose the lines of the last few milliseconds; nothing else changed.
 */
#include "sup_events.h"

#include "ft_clock.h"
#include "ft_err.h"
#include "ft_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

struct sup_events {
  int fd;
  FILE *human;
  double t0; /* ft_now_s at open */
  int write_failed;
  sup_events_hook hook;
  void *hook_arg;
  int tty;            /* human is a terminal */
  char progress[400]; /* the progress line shown ("" none): note | line */
  char line[256];     /* the last line given (sup_events_progress) */
  char note[128];     /* shown before it ("" none: sup_events_progress_note) */
  /* the fsync thread: dirty = lines written since its last fsync */
  pthread_t syncer;
  int syncer_on;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int dirty, stop, sync_errno; /* sync_errno: the first failed fsync's */
};

static void *syncer_main(void *arg) {
  sup_events *ev = arg;
  pthread_mutex_lock(&ev->mu);
  for (;;) {
    while (!ev->dirty && !ev->stop)
      pthread_cond_wait(&ev->cv, &ev->mu);
    if (!ev->dirty)
      break;
    ev->dirty = 0;
    pthread_mutex_unlock(&ev->mu);
    int e = fsync(ev->fd) ? errno : 0;
    pthread_mutex_lock(&ev->mu);
    if (e && !ev->sync_errno)
      ev->sync_errno = e;
  }
  pthread_mutex_unlock(&ev->mu);
  return NULL;
}

static void progress_erase(sup_events *ev) {
  if (ev->tty && ev->progress[0])
    fputs("\r\033[K", ev->human);
}

static void progress_draw(sup_events *ev) {
  if (ev->tty && ev->progress[0]) {
    fputs(ev->progress, ev->human);
    fflush(ev->human);
  }
}

/* The terminal's width in columns now (it may be resized at any time):
 * the window size, else $COLUMNS, else 80. */
static int term_cols(FILE *f) {
  struct winsize ws;
  if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  const char *c = getenv("COLUMNS");
  int n = c ? atoi(c) : 0;
  return n > 0 ? n : 80;
}

/* line cut to fit cols - 1 columns (a line that fills the last column
 * wraps on some terminals, and a wrapped line is not erased by the next
 * redraw: the stale copies pile up): whole " | " fields dropped from the
 * end first, the least important last, then the text cut. ASCII only. */
static void progress_fit(char *line, int cols) {
  size_t max = cols > 1 ? (size_t)cols - 1 : 1;
  while (strlen(line) > max) {
    char *sep = strstr(line, " | "), *last = NULL;
    for (; sep; sep = strstr(sep + 1, " | "))
      last = sep;
    if (!last)
      break;
    *last = 0;
  }
  if (strlen(line) > max)
    line[max] = 0;
}

/* The line shown: the note, then the line (the note's field is the last
 * to go when the terminal is narrow). */
static void progress_show(sup_events *ev) {
  progress_erase(ev);
  if (ev->note[0] && ev->line[0])
    snprintf(ev->progress, sizeof ev->progress, "%s | %s", ev->note, ev->line);
  else
    snprintf(ev->progress, sizeof ev->progress, "%s", ev->note[0] ? ev->note : ev->line);
  progress_fit(ev->progress, term_cols(ev->human));
  progress_draw(ev);
  fflush(ev->human);
}

void sup_events_progress(sup_events *ev, const char *line) {
  if (!ev || !ev->tty)
    return;
  snprintf(ev->line, sizeof ev->line, "%s", line ? line : "");
  progress_show(ev);
}

void sup_events_progress_note(sup_events *ev, const char *note) {
  if (!ev || !ev->tty || !strcmp(ev->note, note ? note : ""))
    return;
  snprintf(ev->note, sizeof ev->note, "%s", note ? note : "");
  progress_show(ev);
}

void sup_events_set_hook(sup_events *ev, sup_events_hook fn, void *arg) {
  ev->hook = fn;
  ev->hook_arg = arg;
}

int sup_events_open(const char *path, FILE *human, sup_events **out) {
  *out = NULL;
  sup_events *ev = calloc(1, sizeof *ev);
  if (!ev)
    return ft_err_set(FT_ENOMEM, "out of memory");
  ev->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (ev->fd < 0) {
    int e = errno;
    free(ev);
    return ft_err_set(ft_err_from_errno(e), "open %s: %s", path, strerror(e));
  }
  ev->human = human;
  ev->tty = human && isatty(fileno(human));
  ev->t0 = ft_now_s();
  pthread_mutex_init(&ev->mu, NULL);
  pthread_cond_init(&ev->cv, NULL);
  /* without the thread every emit fsyncs itself */
  ev->syncer_on = pthread_create(&ev->syncer, NULL, syncer_main, ev) == 0;
  *out = ev;
  return FT_OK;
}

void sup_events_free(sup_events *ev) {
  if (!ev)
    return;
  if (ev->syncer_on) { /* its last fsync covers every line written */
    pthread_mutex_lock(&ev->mu);
    ev->stop = 1;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
    pthread_join(ev->syncer, NULL);
  }
  pthread_mutex_destroy(&ev->mu);
  pthread_cond_destroy(&ev->cv);
  close(ev->fd);
  free(ev);
}

/* After a line was written: the syncer's next batch has it (or, without
 * the thread, an fsync now). FT_OK or the error of a failed fsync. */
static int sync_line(sup_events *ev) {
  if (!ev->syncer_on)
    return fsync(ev->fd)
               ? ft_err_set(ft_err_from_errno(errno), "events.jsonl fsync: %s", strerror(errno))
               : FT_OK;
  pthread_mutex_lock(&ev->mu);
  ev->dirty = 1;
  int e = ev->sync_errno;
  pthread_cond_signal(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
  return e ? ft_err_set(ft_err_from_errno(e), "events.jsonl fsync: %s", strerror(e)) : FT_OK;
}

/* The whole event as an object: ts (ms precision), event, the fields. */
static cJSON *event_object(double ts, const char *name, const cJSON *fields) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  /* the ts with exactly millisecond precision */
  double ms = (double)(long long)(ts * 1000.0 + 0.5);
  cJSON_AddNumberToObject(o, "ts", ms / 1000.0);
  cJSON_AddStringToObject(o, "event", name);
  if (fields)
    for (const cJSON *f = fields->child; f; f = f->next)
      if (f->string && strcmp(f->string, "ts") && strcmp(f->string, "event"))
        cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, 1));
  return o;
}

/* o as one line with its newline (malloc'd), or NULL. */
static char *event_line(const cJSON *o) {
  char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
  if (!txt)
    return NULL;
  size_t n = strlen(txt);
  char *line = malloc(n + 2);
  if (line) {
    memcpy(line, txt, n);
    line[n] = '\n';
    line[n + 1] = 0;
  }
  free(txt);
  return line;
}

char *sup_events_format(double ts, const char *name, const cJSON *fields) {
  cJSON *o = event_object(ts, name, fields);
  char *line = event_line(o);
  cJSON_Delete(o);
  return line;
}

int sup_events_emit(sup_events *ev, const char *name, cJSON *fields, const char *human_fmt, ...) {
  int rc = FT_OK;
  double now = (double)ft_wall_ns() * 1e-9;
  cJSON *obj = event_object(now, name, fields);
  char *line = event_line(obj);
  if (!line) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  rc = ft_write_all(ev->fd, line, strlen(line), "events.jsonl");
  if (!rc)
    rc = sync_line(ev);
  if (rc && !ev->write_failed && ev->human) {
    ev->write_failed = 1;
    fprintf(ev->human, "supervise: cannot write the event log (%s); going on without it\n",
            ft_err_detail());
  }
  if (ev->human) {
    progress_erase(ev);
    fprintf(ev->human, "[%8.3fs] %s: ", ft_now_s() - ev->t0, name);
    if (human_fmt) {
      va_list ap;
      va_start(ap, human_fmt);
      vfprintf(ev->human, human_fmt, ap);
      va_end(ap);
    } else {
      /* the fields without ts/event */
      char *j = fields ? cJSON_PrintUnformatted(fields) : NULL;
      fputs(j ? j : "", ev->human);
      free(j);
    }
    fputc('\n', ev->human);
    progress_draw(ev);
    fflush(ev->human);
  }
  if (ev->hook) /* the object the line was printed from */
    ev->hook(ev->hook_arg, cJSON_GetNumberValue(cJSON_GetObjectItem(obj, "ts")), name, obj);
out:
  cJSON_Delete(obj);
  free(line);
  cJSON_Delete(fields);
  return rc;
}

/* ---- rate limit ---------------------------------------------------------- */

int sup_ratelimit_allow(sup_ratelimit *rl, double now, long *suppressed) {
  *suppressed = 0;
  if (rl->n == 0 || now - rl->start >= rl->window_s || now < rl->start) {
    rl->start = now;
    rl->n = 0;
  }
  if (rl->n >= rl->burst) {
    rl->suppressed++;
    return 0;
  }
  rl->n++;
  *suppressed = rl->suppressed;
  rl->suppressed = 0;
  return 1;
}

long sup_ratelimit_flush(sup_ratelimit *rl, double now) {
  if (rl->suppressed == 0 || now - rl->start < rl->window_s)
    return 0;
  long k = rl->suppressed;
  rl->suppressed = 0;
  rl->start = now;
  rl->n = 1; /* the flushed line counts against the new window */
  return k;
}
