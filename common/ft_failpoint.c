/*
 * ft_failpoint: parses FT_FAILPOINTS once (thread-safe through pthread_once)
 * into a small table; lookups are linear over at most a handful of entries.
 * A variable that does not parse enables nothing (all or nothing), and
 * ft_failpoint_check hands its error to the program, which refuses to start.
 */
#include "ft_failpoint.h"

#include "ft_clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The catalogue (docs/failpoints.md): every name a program looks up, and
 * for a word-valued one its words ("|"-separated). A name missing here is
 * refused at start: add it with its row in docs/failpoints.md. */
static const struct {
  const char *name;
  const char *words; /* NULL: an integer argument (or none) */
  const char *needs; /* a modifier: the failpoint it modifies, or NULL */
} fp_known[] = {
    {"crash_at_step", NULL, NULL},
    {"hang_at_step", NULL, NULL},
    {"hang_node", NULL, "hang_at_step"},
    {"hang_rank", NULL, "hang_at_step"},
    {"hang_in", "compute|data|collective|checkpoint|rendezvous|cuda", "hang_at_step"},
    {"hang_gen", NULL, "hang_at_step"},
    {"hang_gens", NULL, "hang_at_step"},
    {"poison_batch", NULL, NULL},
    {"nan_batch", NULL, NULL},
    {"oom_above_micro", NULL, NULL},
    {"slow_rank", NULL, NULL},
    {"min_step_ms", NULL, NULL},
    {"rejoin_delay_ms", NULL, NULL},
    {"corrupt_memory_chunk", NULL, NULL},
    {"corrupt_replica_chunk", NULL, NULL},
    {"fail_reduce_once", NULL, NULL},
    {"kill_node_at_step", NULL, NULL},
    {"doctor_flip_bit", NULL, NULL},
    {"doctor_mem_flip", NULL, NULL},
    {"doctor_gpu_flip_bit", NULL, NULL},
    {"sdc_corrupt_node", NULL, NULL},
    {"sdc_corrupt_from", NULL, "sdc_corrupt_node"},
    {"kill_after_commit", NULL, NULL},
    {"kill_gang_position", NULL, NULL},
    {"status_workers_max", NULL, NULL},
    {"chaos_kill_spares", NULL, NULL},
    {"gc_pause_ms", NULL, NULL},
    {"agent_host_ref_fail", NULL, NULL},
    {"launch_slice_ms", NULL, NULL},
};
#define FP_NKNOWN ((int)(sizeof fp_known / sizeof fp_known[0]))

typedef struct {
  char name[48];
  char word[16];
  int64_t arg;
} fp_entry;

static fp_entry fp_tab[FT_FAILPOINT_MAX];
static int fp_n;
static char fp_err[512];
static int fp_bad;
static pthread_once_t fp_once = PTHREAD_ONCE_INIT;

static int known(const char *name) {
  for (int i = 0; i < FP_NKNOWN; i++)
    if (!strcmp(fp_known[i].name, name))
      return i;
  return -1;
}

/* Whether word is one of the '|'-separated words. */
static int one_of(const char *words, const char *word) {
  size_t n = strlen(word);
  for (const char *p = words; *p;) {
    const char *e = strchr(p, '|');
    size_t k = e ? (size_t)(e - p) : strlen(p);
    if (k == n && !strncmp(p, word, n))
      return 1;
    p += k + (e ? 1 : 0);
  }
  return 0;
}

static int bad(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t len, const char *fmt, ...) {
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Whether a is a whole decimal integer: an optional '-', then digits only. */
static int whole_integer(const char *a) {
  const char *p = a + (*a == '-');
  if (!*p)
    return 0;
  for (; *p; p++)
    if (*p < '0' || *p > '9')
      return 0;
  return 1;
}

/* Parses spec into tab (n entries); -1 and err on the first error. Empty
 * items (",,", a trailing comma) are skipped. */
static int parse_into(const char *spec, fp_entry *tab, int *n, char *err, size_t len) {
  *n = 0;
  if (!spec || !*spec)
    return 0;
  size_t sl = strlen(spec);
  char *buf = malloc(sl + 1);
  if (!buf)
    return bad(err, len, "FT_FAILPOINTS: out of memory");
  memcpy(buf, spec, sl + 1);
  int rc = 0;
  for (char *tok = buf, *next; tok && !rc; tok = next) {
    next = strchr(tok, ',');
    if (next)
      *next++ = 0;
    if (!*tok)
      continue;
    char *eq = strchr(tok, '=');
    if (eq)
      *eq = 0;
    const char *a = eq ? eq + 1 : NULL;
    long long v = 0;
    int k = known(tok);
    if (k < 0) {
      rc = bad(err, len, "FT_FAILPOINTS: unknown failpoint '%s' (docs/failpoints.md lists them)",
               tok);
    } else if (*n >= FT_FAILPOINT_MAX) {
      rc = bad(err, len, "FT_FAILPOINTS: too many failpoints (at most %d) at '%s'",
               FT_FAILPOINT_MAX, tok);
    } else if (fp_known[k].words) { /* a word: one of the catalogue's */
      if (!a || !one_of(fp_known[k].words, a))
        rc = bad(err, len, "failpoint %s: argument '%s' is not one of %s", tok, a ? a : "",
                 fp_known[k].words);
    } else if (a) { /* a whole integer, nothing before or after it, that fits */
      errno = 0;
      if (whole_integer(a))
        v = strtoll(a, NULL, 10);
      if (!whole_integer(a) || errno == ERANGE)
        rc = bad(err, len, "failpoint %s: argument '%s' is not a whole integer%s", tok, a,
                 errno == ERANGE ? " that fits in 64 bits" : "");
    }
    if (rc)
      break;
    fp_entry *e = &tab[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", tok);
    if (fp_known[k].words)
      snprintf(e->word, sizeof e->word, "%s", a);
    e->arg = v;
  }
  for (int i = 0; !rc && i < *n; i++) { /* modifiers need what they modify */
    const char *need = fp_known[known(tab[i].name)].needs;
    int found = !need;
    for (int j = 0; need && j < *n && !found; j++)
      found = !strcmp(tab[j].name, need);
    if (!found)
      rc = bad(err, len, "failpoint %s: needs %s", tab[i].name, need);
  }
  free(buf);
  if (rc)
    *n = 0;
  return rc;
}

static void fp_parse(void) {
  if (parse_into(getenv("FT_FAILPOINTS"), fp_tab, &fp_n, fp_err, sizeof fp_err))
    fp_bad = 1;
}

int ft_failpoint_parse(const char *spec, char *err, size_t len) {
  fp_entry tab[FT_FAILPOINT_MAX];
  int n;
  return parse_into(spec, tab, &n, err, len);
}

int ft_failpoint_check(char *err, size_t len) {
  pthread_once(&fp_once, fp_parse);
  if (fp_bad && err && len)
    snprintf(err, len, "%s", fp_err);
  return fp_bad ? -1 : 0;
}

static const fp_entry *find(const char *name) {
  pthread_once(&fp_once, fp_parse);
  for (int i = 0; i < fp_n; i++)
    if (strcmp(fp_tab[i].name, name) == 0)
      return &fp_tab[i];
  return NULL;
}

int ft_failpoint(const char *name, int64_t *arg) {
  const fp_entry *e = find(name);
  if (e && arg)
    *arg = e->arg;
  return e != NULL;
}

int ft_failpoint_at(const char *name, int64_t value) {
  int64_t arg;
  return ft_failpoint(name, &arg) && arg == value;
}

const char *ft_failpoint_word(const char *name) {
  const fp_entry *e = find(name);
  return e ? e->word : NULL;
}

/* ---- the hang (per thread: only the training thread arms it) ---- */

static const char *const hang_names[] = {"after",      "compute",    "data", "collective",
                                         "checkpoint", "rendezvous", "cuda"};
static __thread int hang_armed; /* 0, or 1 + the ft_hang_where */
static __thread int hang_node, hang_rank;

void ft_failpoint_hang_arm(int node, int rank, uint64_t gen, int64_t step) {
  int64_t at, n, r, g;
  hang_armed = 0;
  if (!ft_failpoint("hang_at_step", &at))
    return;
  if ((ft_failpoint("hang_node", &n) && n != node) || (ft_failpoint("hang_rank", &r) && r != rank))
    return;
  if (ft_failpoint("hang_gen", &g) && (g < 0 || (uint64_t)g != gen))
    return; /* another generation: a restarted gang trains on */
  if (ft_failpoint("hang_gens", &g) && (g < 0 || gen > (uint64_t)g))
    return; /* past the first g generations */
  const char *in = ft_failpoint_word("hang_in");
  int where = FT_HANG_AFTER;
  for (int i = 0; in && i < (int)(sizeof hang_names / sizeof hang_names[0]); i++)
    if (!strcmp(in, hang_names[i]))
      where = i;
  /* checkpoint: the first one at or after S; rendezvous: a generation that
   * is to train S (its first step, `step`, not after it); else step S */
  int hit = where == FT_HANG_CHECKPOINT   ? step >= at
            : where == FT_HANG_RENDEZVOUS ? step <= at
                                          : step == at;
  if (hit) {
    hang_armed = 1 + where;
    hang_node = node;
    hang_rank = rank;
  }
}

int ft_failpoint_hang_take(ft_hang_where where) {
  if (hang_armed != 1 + (int)where)
    return 0;
  int64_t at = 0;
  ft_failpoint("hang_at_step", &at);
  int64_t now_ms = ft_wall_ms(); /* the wall clock, as the supervisor's events' ts */
  fprintf(stderr,
          "worker: failpoint hang_at_step=%lld (node %d, rank %d, %s%s): hanging (ts %lld.%03ld)\n",
          (long long)at, hang_node, hang_rank, where == FT_HANG_AFTER ? "" : "in ",
          where == FT_HANG_AFTER ? "after the step" : hang_names[where], (long long)(now_ms / 1000),
          (long)(now_ms % 1000));
  fflush(stderr);
  hang_armed = 0; /* taken: the caller stalls (a second take says nothing) */
  return 1;
}

/* Never inlined: its name is the frame a hung worker's stack shows
 * (worker/stackdump.h), which the hang tests look for. */
__attribute__((noinline)) void ft_failpoint_hang_here(ft_hang_where where) {
  if (!ft_failpoint_hang_take(where))
    return;
  for (;;) { /* a real stall of this thread; signals only wake the sleep */
    struct timespec ts = {3600, 0};
    nanosleep(&ts, NULL);
  }
}
