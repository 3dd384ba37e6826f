/*
 * ft_runfile: parse run.yaml (docs/design.md §2) into ft_runfile.
 *
 * What: one flat table (FIELDS) lists every leaf key by its dotted path, its
 * C type, where it lives in ft_runfile and its allowed values. Sections
 * ("train", "watchdog.loss_spike") are implied by the dotted paths. The YAML
 * tree (libfyaml document API) is walked mapping by mapping; each key is
 * looked up in the table, its scalar converted and range-checked, and the
 * position of the value remembered in rf->from (ft_runfile_set marks its
 * keys FT_RF_FROM_SET) so that the checks across keys, which run later,
 * can still point at a line and column and say where the others came from.
 * Words (K_WORD, K_BOOL) are converted here into the header's enums and
 * bools, and the codec into its level: the only place that reads them as
 * text (tests/unit/runfile_typed.py fails on a strcmp of one elsewhere).
 *
 * Why a table: the file parser, the validator (which re-checks a struct that
 * programs may have changed) and ft_runfile_set (command-line overrides) must
 * apply exactly the same type and range rules; one table keeps them equal.
 *
 * Where the checks run: each key's own in store_scalar, as it is read
 * (_parse, _set), and again on the stored values in _validate; those across
 * keys (cross_check) only in _validate/_validate_world, which a program
 * calls once after its overrides, for the world it really trains in. _parse
 * does not run them: "train: {global_batch: 4, micro_batch: 4}" is wrong at
 * the default 2 nodes but right with --set nodes.count=1 or standalone.
 *
 * Invariants:
 *  - _load starts from ft_runfile_defaults(); a key absent from the file keeps
 *    its default. Every error is one line "FILE:LINE:COL: KEY: problem" with
 *    1-based line and column of the offending node (the key for unknown and
 *    duplicate keys, the value otherwise).
 *  - Numbers must be plain YAML scalars: a quoted "5" is a string, not an int.
 *    Every numeric key has a finite range, and products of keys (world size,
 *    tokens per step, parameters, a CPU run's memory) are checked in 64-bit
 *    or double arithmetic, so no message ever shows an overflowed value.
 *  - A scalar's text is (pointer, length) into libfyaml's buffer, not a C
 *    string: every check reads within its length.
 *  - _load reads the whole file (at most FT_RUNFILE_MAX_BYTES) and hands it
 *    to _parse, which refuses NUL bytes (libfyaml would end the scalar there).
 *  - A relative data.train/data.val written in the file is relative to the
 *    file's directory: _parse prefixes it with that directory (the part of
 *    the path before its last '/'), so a run works from any directory.
 *  - Only the first error is reported; the libfyaml document, parser and
 *    diagnostic object are always freed before returning.
 *
 * libfyaml 0.7 has no public "node start mark" call: a scalar's position
 * comes from its token (fy_node_get_scalar_token + fy_token_start_mark), a
 * mapping's or sequence's from the first event a document iterator emits
 * for it (fy_event_start_mark). Both are public API.
 *
 * Threading: no global state; functions are reentrant on distinct structs.
 */
#include "ft_runfile.h"

#include "ft_err.h"
#include "ft_opts.h"

#include <cjson/cJSON.h>
#include <libfyaml.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the schema ----------------------------------------------------------- */

/* K_WORD: one of words, stored as its index (the header's enums list the
 * words in the same order); K_BOOL: true or false, stored as a bool;
 * K_CODEC: "zstd:LEVEL", stored as the level. All three read as strings. */
enum kind { K_INT, K_I64, K_U64, K_DBL, K_STR, K_HOSTS, K_WORD, K_BOOL, K_CODEC };
enum check { C_NONE, C_WORDS, C_STORE, C_RUNID };

#define LO_OPEN 1u  /* value must be > lo (not >=) */
#define HI_OPEN 2u  /* value must be < hi (not <=) */
#define EMPTY_OK 4u /* string may be "" (or null in the file) */
#define AUTO_OK 8u  /* K_DBL, K_I64: the word auto is a value too, stored as 0 */

struct field {
  const char *key; /* dotted path */
  enum kind kind;
  size_t off, size;
  long long ilo, ihi; /* K_INT, K_I64 */
  double dlo, dhi;    /* K_DBL */
  unsigned flags;
  enum check check;
  const char *const *words; /* C_WORDS, K_WORD, K_BOOL: NULL-terminated */
};

static const char *const W_SCHEDULE[] = {"cosine", "linear", "constant", NULL};
static const char *const W_PRECISION[] = {"fp32", "bf16", NULL};
static const char *const W_DEVICE[] = {"cpu", "cuda", NULL};
static const char *const W_LAUNCHER[] = {"local", "command", "ssh", "slurm", NULL};
static const char *const W_BOOL[] = {"false", "true", NULL}; /* index = the bool */
static const char *const W_REQUIRE[] = {"durable", "local", "memory", NULL};
static const char *const W_MOMENTS[] = {"exact", "bf16", "q8", NULL};
static const char *const W_ON_SPIKE[] = {"rollback", "rollback_and_skip", "warn", NULL};
static const char *const W_NO_SPARES[] = {"shrink", "wait", "fail", NULL};

#define AT(m) .off = offsetof(ft_runfile, m), .size = sizeof(((ft_runfile *)0)->m)
#define F_INT(k, m, lo, hi)                                                                        \
  { .key = k, .kind = K_INT, AT(m), .ilo = lo, .ihi = hi }
#define F_I64(k, m, lo, hi)                                                                        \
  { .key = k, .kind = K_I64, AT(m), .ilo = lo, .ihi = hi }
#define F_I64_AUTO(k, m, lo, hi)                                                                   \
  { .key = k, .kind = K_I64, AT(m), .ilo = lo, .ihi = hi, .flags = AUTO_OK }
#define F_DBL(k, m, lo, hi, fl)                                                                    \
  { .key = k, .kind = K_DBL, AT(m), .dlo = lo, .dhi = hi, .flags = fl }
#define F_STR(k, m, fl, chk, w)                                                                    \
  { .key = k, .kind = K_STR, AT(m), .flags = fl, .check = chk, .words = w }
#define F_WORD(k, m, w)                                                                            \
  { .key = k, .kind = K_WORD, AT(m), .check = C_WORDS, .words = w }
#define F_BOOL(k, m)                                                                               \
  { .key = k, .kind = K_BOOL, AT(m), .check = C_WORDS, .words = W_BOOL }

/* Step-like counters: far beyond any run, far below any overflow. */
#define STEPS_MAX 1000000000000LL
#define YEAR_S (365.0 * 86400)

/* Every numeric key has a finite range; docs/runfile.md lists them. The
 * products of several keys (world size, tokens per step, parameters, memory)
 * are checked in cross_check. */
static const struct field FIELDS[] = {
    F_STR("run", run, 0, C_RUNID, NULL),
    F_INT("model.n_layer", model.n_layer, 1, FT_RUNFILE_MAX_LAYER),
    F_INT("model.n_head", model.n_head, 1, FT_RUNFILE_MAX_HEAD),
    F_INT("model.n_embd", model.n_embd, 1, FT_RUNFILE_MAX_EMBD),
    F_INT("model.vocab_size", model.vocab_size, 1, FT_RUNFILE_MAX_VOCAB),
    F_INT("model.seq_len", model.seq_len, 1, FT_RUNFILE_MAX_SEQ),
    F_I64("train.steps", train.steps, 1, STEPS_MAX),
    F_INT("train.global_batch", train.global_batch, 1, FT_RUNFILE_MAX_GLOBAL_BATCH),
    F_INT("train.micro_batch", train.micro_batch, 1, FT_RUNFILE_MAX_MICRO_BATCH),
    F_DBL("train.lr", train.lr, 0, 10, LO_OPEN),
    F_I64("train.warmup", train.warmup, 0, STEPS_MAX),
    F_WORD("train.schedule", train.schedule, W_SCHEDULE),
    F_DBL("train.min_lr_frac", train.min_lr_frac, 0, 1, 0),
    F_DBL("train.weight_decay", train.weight_decay, 0, 10, 0),
    F_DBL("train.grad_clip", train.grad_clip, 0, 1e6, 0),
    F_DBL("train.beta1", train.beta1, 0, 1, HI_OPEN),
    F_DBL("train.beta2", train.beta2, 0, 1, HI_OPEN),
    F_DBL("train.eps", train.eps, 0, 1, LO_OPEN),
    {.key = "train.seed", .kind = K_U64, AT(train.seed)},
    F_WORD("train.precision", train.precision, W_PRECISION),
    F_I64("train.val_every", train.val_every, 0, STEPS_MAX),
    F_STR("data.train", data.train, 0, C_NONE, NULL),
    F_STR("data.val", data.val, EMPTY_OK, C_NONE, NULL),
    F_STR("data.cache_dir", data.cache_dir, EMPTY_OK, C_NONE, NULL),
    F_I64("data.cache_bytes", data.cache_bytes, 0, 1LL << 50),
    F_I64_AUTO("data.block_bytes", data.block_bytes, 4096, 1LL << 30),
    F_INT("data.prefetch_blocks", data.prefetch_blocks, 0, 64),
    F_STR("data.s3_endpoint", data.s3_endpoint, EMPTY_OK, C_NONE, NULL),
    F_INT("nodes.count", nodes.count, 1, FT_RUNFILE_MAX_NODES),
    F_INT("nodes.workers_per_node", nodes.workers_per_node, 1, FT_RUNFILE_MAX_WORKERS_PER_NODE),
    F_WORD("nodes.device", nodes.device, W_DEVICE),
    F_WORD("nodes.launcher", nodes.launcher, W_LAUNCHER),
    F_STR("nodes.command", nodes.command, EMPTY_OK, C_NONE, NULL),
    {.key = "nodes.hosts", .kind = K_HOSTS, AT(nodes.hosts)},
    F_STR("nodes.iface", nodes.iface, EMPTY_OK, C_NONE, NULL),
    F_INT("nodes.threads", nodes.threads, 0, 4096),
    F_STR("nodes.workdir", nodes.workdir, EMPTY_OK, C_NONE, NULL),
    F_STR("nodes.srun_args", nodes.srun_args, EMPTY_OK, C_NONE, NULL),
    F_BOOL("nodes.agent", nodes.agent),
    F_BOOL("nodes.launch_once", nodes.launch_once),
    F_DBL("nodes.peak_tflops", nodes.peak_tflops, 0, 1e6, 0),
    F_STR("supervisor.listen", supervisor.listen, EMPTY_OK, C_NONE, NULL),
    F_STR("supervisor.advertise", supervisor.advertise, EMPTY_OK, C_NONE, NULL),
    F_STR("supervisor.http", supervisor.http, EMPTY_OK, C_NONE, NULL),
    F_I64("supervisor.step_events_every", supervisor.step_events_every, 0, STEPS_MAX),
    F_I64("checkpoint.every_steps", checkpoint.every_steps, 0, STEPS_MAX),
    F_DBL("checkpoint.every_seconds", checkpoint.every_seconds, 0, YEAR_S, 0),
    F_STR("checkpoint.store", checkpoint.store, 0, C_STORE, NULL),
    F_INT("checkpoint.keep_last", checkpoint.keep_last, 1, 1000000),
    F_INT("checkpoint.keep_every", checkpoint.keep_every, 0, 1000000000),
    F_INT("checkpoint.chunk_mib", checkpoint.chunk_mib, 1, 1024),
    {.key = "checkpoint.codec", .kind = K_CODEC, AT(checkpoint.codec_level)},
    F_BOOL("checkpoint.replicate", checkpoint.replicate),
    F_I64("checkpoint.persist_every", checkpoint.persist_every, 1, STEPS_MAX),
    F_WORD("checkpoint.require", checkpoint.require, W_REQUIRE),
    F_INT("checkpoint.full_every", checkpoint.full_every, 1, 64),
    F_WORD("checkpoint.moments", checkpoint.moments, W_MOMENTS),
    F_DBL("watchdog.heartbeat_timeout_s", watchdog.heartbeat_timeout_s, 0, 3600, LO_OPEN),
    F_DBL("watchdog.start_timeout_s", watchdog.start_timeout_s, 0, 3600, LO_OPEN),
    F_DBL("watchdog.collective_timeout_s", watchdog.collective_timeout_s, 0, 86400, LO_OPEN),
    F_DBL("watchdog.progress_timeout_s", watchdog.progress_timeout_s, 0, 86400, LO_OPEN | AUTO_OK),
    F_DBL("watchdog.storage_backoff_s", watchdog.storage_backoff_s, 0, 3600, 0),
    F_INT("watchdog.loss_spike.window", watchdog.spike_window, 2, 100000),
    F_DBL("watchdog.loss_spike.zscore", watchdog.spike_zscore, 0, 1000, LO_OPEN),
    F_INT("watchdog.loss_spike.min_steps", watchdog.spike_min_steps, 0, 1000000000),
    F_STR("watchdog.xid_source", watchdog.xid_source, EMPTY_OK, C_NONE, NULL),
    F_STR("watchdog.xid_actions", watchdog.xid_actions, EMPTY_OK, C_NONE, NULL),
    F_I64("watchdog.sdc_every", watchdog.sdc_every, 0, 1000000000),
    F_INT("recovery.max_restarts", recovery.max_restarts, 0, 1000000),
    F_WORD("recovery.on_loss_spike", recovery.on_loss_spike, W_ON_SPIKE),
    F_I64("recovery.skip_batches", recovery.skip_batches, 0, STEPS_MAX),
    F_WORD("recovery.when_no_spares", recovery.when_no_spares, W_NO_SPARES),
    F_INT("recovery.node_failures_to_quarantine", recovery.node_failures_to_quarantine, 1, 1000),
    F_DBL("recovery.node_failure_window_s", recovery.node_failure_window_s, 0, YEAR_S, LO_OPEN),
    F_BOOL("recovery.drain", recovery.drain),
    F_BOOL("recovery.in_process", recovery.in_process),
    F_DBL("recovery.rejoin_timeout_s", recovery.rejoin_timeout_s, 0, YEAR_S, LO_OPEN),
    F_BOOL("doctor.on_join", doctor.on_join),
    F_INT("doctor.mem_mb", doctor.mem_mb, 0, 1 << 20),
    F_INT("doctor.disk_mb", doctor.disk_mb, 0, 1 << 20),
    F_STR("doctor.dir", doctor.dir, EMPTY_OK, C_NONE, NULL),
    F_INT("doctor.link_mb", doctor.link_mb, 0, 4096),
    F_DBL("doctor.link_min_frac", doctor.link_min_frac, 0, 1, LO_OPEN | HI_OPEN),
    F_DBL("doctor.spare_every_s", doctor.spare_every_s, 0, YEAR_S, 0),
    F_I64("chaos.kill_node_at_step", chaos.kill_node_at_step, 0, STEPS_MAX),
};
#define NFIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))
_Static_assert(NFIELDS == FT_RUNFILE_NKEYS, "FT_RUNFILE_NKEYS is the number of FIELDS");
/* K_WORD is stored through an int: every enum of the header is int-sized */
_Static_assert(sizeof(ft_rf_schedule) == sizeof(int) && sizeof(ft_rf_precision) == sizeof(int) &&
                   sizeof(ft_rf_device) == sizeof(int) && sizeof(ft_rf_launcher) == sizeof(int) &&
                   sizeof(ft_rf_require) == sizeof(int) && sizeof(ft_rf_moments) == sizeof(int) &&
                   sizeof(ft_rf_on_spike) == sizeof(int) && sizeof(ft_rf_no_spares) == sizeof(int),
               "the run file's enums are int-sized");

#define HOSTS_MAX                                                                                  \
  ((int)(sizeof(((ft_nodes_cfg *)0)->hosts) / sizeof(((ft_nodes_cfg *)0)->hosts[0])))
#define HOST_LEN sizeof(((ft_nodes_cfg *)0)->hosts[0])

enum { MSG = 512, KEYLEN = 160 };

/* ---- defaults --------------------------------------------------------------- */

#define SETS(dst, s) snprintf((dst), sizeof(dst), "%s", (s))

void ft_runfile_defaults(ft_runfile *rf) {
  memset(rf, 0, sizeof *rf);
  SETS(rf->run, "gpt2-tiny");
  rf->model =
      (ft_model_cfg){.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 256, .seq_len = 64};
  ft_train_cfg *t = &rf->train;
  t->steps = 300;
  t->global_batch = 16;
  t->micro_batch = 8;
  t->lr = 1e-3;
  t->warmup = 20;
  t->schedule = FT_RF_SCHEDULE_COSINE;
  t->min_lr_frac = 0.1;
  t->weight_decay = 0.1;
  t->grad_clip = 1.0;
  t->beta1 = 0.9;
  t->beta2 = 0.95;
  t->eps = 1e-8;
  t->seed = 1337;
  t->precision = FT_RF_PRECISION_FP32;
  SETS(rf->data.train, "data/synth_train_*.bin");
  SETS(rf->data.val, "data/synth_val_*.bin");
  rf->data.cache_bytes = 4LL << 30; /* worker/data.h's DATA_*_DEFAULT */
  rf->data.block_bytes = 0;         /* auto: from the geometry (data_block_bytes_auto) */
  rf->data.prefetch_blocks = 4;
  rf->nodes.count = 2;
  rf->nodes.workers_per_node = 1;
  rf->nodes.device = FT_RF_DEVICE_CPU;
  rf->nodes.launcher = FT_RF_LAUNCHER_LOCAL;
  rf->nodes.nhosts = 0;
  rf->supervisor.step_events_every = 1;
  ft_ckpt_cfg *c = &rf->checkpoint;
  c->every_steps = 25;
  c->every_seconds = 0;
  SETS(c->store, "local:state/store");
  c->keep_last = 5;
  c->keep_every = 0;
  c->chunk_mib = 4;
  c->codec_level = 1;
  ft_watchdog_cfg *w = &rf->watchdog;
  w->heartbeat_timeout_s = 10;
  w->start_timeout_s = 60;
  w->sdc_every = 100;
  w->collective_timeout_s = 30;
  w->progress_timeout_s = 0; /* auto */
  w->storage_backoff_s = 10;
  w->spike_window = 50;
  w->spike_zscore = 6.0;
  w->spike_min_steps = 20;
  SETS(w->xid_source, "/dev/kmsg");
  rf->recovery.max_restarts = 20;
  rf->recovery.on_loss_spike = FT_RF_SPIKE_ROLLBACK_AND_SKIP;
  rf->recovery.skip_batches = 200;
  rf->recovery.when_no_spares = FT_RF_NO_SPARES_SHRINK;
  rf->recovery.node_failures_to_quarantine = 2;
  rf->recovery.node_failure_window_s = 600;
  rf->recovery.drain = true;
  rf->recovery.in_process = false;
  rf->nodes.agent = false;
  rf->nodes.launch_once = false;
  rf->checkpoint.replicate = false;
  rf->checkpoint.persist_every = 1;
  rf->checkpoint.require = FT_RF_REQUIRE_DURABLE;
  rf->checkpoint.full_every = 2;
  rf->checkpoint.moments = FT_RF_MOMENTS_EXACT;
  rf->recovery.rejoin_timeout_s = 10;
  rf->doctor.on_join = true;
  rf->doctor.mem_mb = 64;
  rf->doctor.disk_mb = 8;
  rf->doctor.link_mb = 4;
  rf->doctor.link_min_frac = 0.25;
  rf->doctor.spare_every_s = 300;
}

/* ---- words ------------------------------------------------------------------ */

/* The word of value v in NULL-terminated words; "?" if v is not an index. */
static const char *word_of(const char *const *words, int v) {
  for (int i = 0; words[i]; i++)
    if (i == v)
      return words[i];
  return "?";
}

const char *ft_rf_schedule_name(ft_rf_schedule v) {
  return word_of(W_SCHEDULE, (int)v);
}
const char *ft_rf_precision_name(ft_rf_precision v) {
  return word_of(W_PRECISION, (int)v);
}
const char *ft_rf_device_name(ft_rf_device v) {
  return word_of(W_DEVICE, (int)v);
}
const char *ft_rf_launcher_name(ft_rf_launcher v) {
  return word_of(W_LAUNCHER, (int)v);
}
const char *ft_rf_require_name(ft_rf_require v) {
  return word_of(W_REQUIRE, (int)v);
}
const char *ft_rf_moments_name(ft_rf_moments v) {
  return word_of(W_MOMENTS, (int)v);
}
const char *ft_rf_on_spike_name(ft_rf_on_spike v) {
  return word_of(W_ON_SPIKE, (int)v);
}
const char *ft_rf_no_spares_name(ft_rf_no_spares v) {
  return word_of(W_NO_SPARES, (int)v);
}

/* ---- small helpers --------------------------------------------------------- */

static void *field_ptr(const struct field *f, const ft_runfile *rf) {
  return (char *)rf + f->off;
}

static int find_field(const char *key) {
  for (int i = 0; i < NFIELDS; i++)
    if (strcmp(FIELDS[i].key, key) == 0)
      return i;
  return -1;
}

/* A section is a proper prefix of some leaf, ending at a '.'. */
static bool is_section(const char *key) {
  size_t n = strlen(key);
  for (int i = 0; i < NFIELDS; i++)
    if (strncmp(FIELDS[i].key, key, n) == 0 && FIELDS[i].key[n] == '.')
      return true;
  return false;
}

/* The closest known name for `name` under section `prefix` ("" = top level):
 * a sibling within distance 2, else a leaf elsewhere whose last component is
 * `name` (e.g. "steps" at the top level -> "train.steps"). Writes "" if none. */
static void suggest(const char *prefix, const char *name, char *out, size_t outlen) {
  size_t pl = strlen(prefix), nl = strlen(name);
  int best = 3;
  out[0] = 0;
  for (int i = 0; i < NFIELDS; i++) {
    const char *k = FIELDS[i].key;
    if (pl) {
      if (strncmp(k, prefix, pl) != 0 || k[pl] != '.')
        continue;
      k += pl + 1;
    }
    const char *dot = strchr(k, '.');
    size_t cl = dot ? (size_t)(dot - k) : strlen(k);
    int d = ft_edit_distance(name, nl, k, cl);
    if (d < best) {
      best = d;
      snprintf(out, outlen, "%.*s", (int)cl, k);
    }
  }
  if (out[0])
    return;
  for (int i = 0; i < NFIELDS; i++) {
    const char *last = strrchr(FIELDS[i].key, '.');
    if (last && strcmp(last + 1, name) == 0) {
      snprintf(out, outlen, "%s", FIELDS[i].key);
      return;
    }
  }
}

/* Whole-key suggestion for ft_runfile_set. */
static void suggest_dotted(const char *key, char *out, size_t outlen) {
  int best = 3;
  out[0] = 0;
  for (int i = 0; i < NFIELDS; i++) {
    int d = ft_edit_distance(key, strlen(key), FIELDS[i].key, strlen(FIELDS[i].key));
    if (d < best) {
      best = d;
      snprintf(out, outlen, "%s", FIELDS[i].key);
    }
  }
  if (!out[0]) {
    const char *dot = strrchr(key, '.');
    suggest("", dot ? dot + 1 : key, out, outlen);
    if (!strchr(out, '.'))
      out[0] = 0;
  }
}

/* A short printable excerpt of a value for messages. */
static void excerpt(const char *s, size_t len, char *out, size_t outlen) {
  size_t n = 0, max = outlen > 48 ? 40 : outlen / 2;
  for (size_t i = 0; i < len && n < max && n + 1 < outlen; i++)
    out[n++] = isprint((unsigned char)s[i]) ? s[i] : '?';
  if (len > max && n + 4 < outlen) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = 0;
}

static bool is_null_word(const char *s) {
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static bool is_bool_word(const char *s) {
  static const char *const w[] = {"true", "false", "True", "False", "TRUE", "FALSE", NULL};
  for (int i = 0; w[i]; i++)
    if (!strcmp(s, w[i]))
      return true;
  return false;
}

static bool is_int_text(const char *s) {
  if (*s == '-' || *s == '+')
    s++;
  if (!isdigit((unsigned char)*s))
    return false;
  while (isdigit((unsigned char)*s))
    s++;
  return *s == 0;
}

/* Decimal floating point (no hex, no inf/nan spelled the C way). */
static bool is_float_text(const char *s, double *out) {
  if (!*s || strspn(s, "0123456789+-.eE") != strlen(s) || !strpbrk(s, "0123456789"))
    return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end)
    return false;
  *out = v;
  return true;
}

static bool is_yaml_special_float(const char *s) {
  static const char *const w[] = {".inf",  ".Inf",  ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
                                  "-.Inf", "-.INF", ".nan", ".NaN",  ".NAN",  NULL};
  for (int i = 0; w[i]; i++)
    if (!strcmp(s, w[i]))
      return true;
  return false;
}

/* "a float (1.5)", "a string ('abc')", ... for type errors. */
static void describe(const char *s, bool quoted, char *out, size_t outlen) {
  char ex[64];
  double d;
  excerpt(s, strlen(s), ex, sizeof ex);
  if (quoted)
    snprintf(out, outlen, "a string ('%s')", ex);
  else if (is_null_word(s))
    snprintf(out, outlen, "null");
  else if (is_bool_word(s))
    snprintf(out, outlen, "a boolean (%s)", ex);
  else if (is_int_text(s))
    snprintf(out, outlen, "an integer (%s)", ex);
  else if (is_float_text(s, &d) || is_yaml_special_float(s))
    snprintf(out, outlen, "a float (%s)", ex);
  else
    snprintf(out, outlen, "a string ('%s')", ex);
}

static const char *kind_name(const struct field *f) {
  switch (f->kind) {
  case K_INT:
  case K_I64:
    return f->flags & AUTO_OK ? "an integer or auto" : "an integer";
  case K_U64:
    return "a non-negative integer";
  case K_DBL:
    return f->flags & AUTO_OK ? "a number or auto" : "a number";
  case K_STR:
  case K_WORD:
  case K_BOOL:
  case K_CODEC:
    return "a string";
  case K_HOSTS:
    return "a sequence of host names";
  }
  return "a value";
}

/* ---- checks on values (shared by the parser, _set and _validate) ------------ */

static int check_int(const struct field *f, long long v, char *msg, size_t n) {
  if (v < f->ilo)
    return snprintf(msg, n, "must be >= %lld, got %lld", f->ilo, v), -1;
  if (v > f->ihi)
    return snprintf(msg, n, "must be <= %lld, got %lld", f->ihi, v), -1;
  return 0;
}

static int check_dbl(const struct field *f, double v, char *msg, size_t n) {
  if (!isfinite(v))
    return snprintf(msg, n, "must be a finite number, got %g", v), -1;
  if ((f->flags & LO_OPEN) ? !(v > f->dlo) : !(v >= f->dlo))
    return snprintf(msg, n, "must be %s %g, got %g", (f->flags & LO_OPEN) ? ">" : ">=", f->dlo, v),
           -1;
  if ((f->flags & HI_OPEN) ? !(v < f->dhi) : !(v <= f->dhi))
    return snprintf(msg, n, "must be %s %g, got %g", (f->flags & HI_OPEN) ? "<" : "<=", f->dhi, v),
           -1;
  return 0;
}

/* The level of "zstd:LEVEL", LEVEL 1..19; -1 for anything else. s holds
 * len bytes and need not be NUL-terminated (a scalar's text in the YAML
 * buffer). */
static int codec_level(const char *s, size_t len) {
  if (len < 6 || len > 7 || memcmp(s, "zstd:", 5) != 0)
    return -1;
  int lvl = 0;
  for (size_t i = 5; i < len; i++) {
    if (!isdigit((unsigned char)s[i]))
      return -1;
    lvl = lvl * 10 + (s[i] - '0');
  }
  return lvl >= 1 && lvl <= 19 ? lvl : -1;
}

static int bad_codec(const char *ex, char *msg, size_t n) {
  return snprintf(msg, n, "'%s' is not a known codec (expected zstd:LEVEL, LEVEL 1..19)", ex), -1;
}

/* The index of the len bytes at s in NULL-terminated words; -1 if none. */
static int word_index(const char *const *words, const char *s, size_t len) {
  for (int i = 0; words[i]; i++)
    if (strlen(words[i]) == len && !memcmp(words[i], s, len))
      return i;
  return -1;
}

/* "'X' is not one of a, b, c" (W_BOOL as true, false: the words' usual order). */
static int not_one_of(const struct field *f, const char *ex, char *msg, size_t n) {
  size_t o = (size_t)snprintf(msg, n, "'%s' is not one of", ex);
  if (f->words == W_BOOL) {
    snprintf(msg + o, n - o, " true, false");
    return -1;
  }
  for (int i = 0; f->words[i] && o < n; i++)
    o += (size_t)snprintf(msg + o, n - o, "%s %s", i ? "," : "", f->words[i]);
  return -1;
}

/* The stored index of a K_WORD or K_BOOL value of len bytes at s; -1 with
 * msg if it is not one of the field's words. */
static int check_word(const struct field *f, const char *s, size_t len, char *msg, size_t n) {
  char ex[64];
  excerpt(s, len, ex, sizeof ex);
  if (memchr(s, 0, len))
    return snprintf(msg, n, "must not contain a NUL byte"), -1;
  if (!len)
    return snprintf(msg, n, "must not be empty"), -1;
  int i = word_index(f->words, s, len);
  return i >= 0 ? i : not_one_of(f, ex, msg, n);
}

static int check_host(const char *h, char *msg, size_t n) {
  char ex[64];
  excerpt(h, strlen(h), ex, sizeof ex);
  if (!*h)
    return snprintf(msg, n, "a host name must not be empty"), -1;
  for (const char *p = h; *p; p++)
    if (isspace((unsigned char)*p) || !isprint((unsigned char)*p))
      return snprintf(msg, n, "host name '%s' contains whitespace or a control character", ex), -1;
  return 0;
}

/* Checks a string value for field f (length, emptiness, words, formats). */
static int check_str(const struct field *f, const char *s, size_t len, char *msg, size_t n) {
  char ex[64];
  excerpt(s, len, ex, sizeof ex);
  if (memchr(s, 0, len))
    return snprintf(msg, n, "must not contain a NUL byte"), -1;
  if (len >= f->size)
    return snprintf(msg, n, "is too long (%zu bytes, at most %zu)", len, f->size - 1), -1;
  if (!len && !(f->flags & EMPTY_OK))
    return snprintf(msg, n, "must not be empty"), -1;
  switch (f->check) {
  case C_NONE:
    return 0;
  case C_WORDS:
    return word_index(f->words, s, len) >= 0 ? 0 : not_one_of(f, ex, msg, n);
  case C_STORE:
    /* s holds len bytes, not NUL-terminated: compare within len only. */
    if (len >= 6 && !memcmp(s, "local:", 6)) {
      if (len == 6)
        return snprintf(msg, n, "'%s' names no directory (expected local:DIR)", ex), -1;
      return 0;
    }
    if (len >= 5 && !memcmp(s, "s3://", 5)) {
      if (len == 5 || s[5] == '/')
        return snprintf(msg, n, "'%s' names no bucket (expected s3://BUCKET/PREFIX)", ex), -1;
      return 0;
    }
    return snprintf(msg, n,
                    "'%s' has an unknown store scheme (expected local:DIR or s3://BUCKET/PREFIX)",
                    ex),
           -1;
  case C_RUNID:
    for (size_t i = 0; i < len; i++)
      if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
        return snprintf(msg, n, "'%s' may hold only letters, digits, '.', '_' and '-'", ex), -1;
    return 0;
  }
  return 0;
}

/* Re-checks the value currently stored for field f (used by _validate). */
static int check_stored(const struct field *f, const ft_runfile *rf, char *msg, size_t n) {
  const void *p = field_ptr(f, rf);
  switch (f->kind) {
  case K_INT:
    return check_int(f, *(const int *)p, msg, n);
  case K_I64:
    if ((f->flags & AUTO_OK) && *(const int64_t *)p == 0)
      return 0; /* auto */
    return check_int(f, *(const int64_t *)p, msg, n);
  case K_U64:
    return 0;
  case K_DBL:
    if ((f->flags & AUTO_OK) && *(const double *)p == 0)
      return 0; /* auto */
    return check_dbl(f, *(const double *)p, msg, n);
  case K_STR: {
    size_t len = strnlen(p, f->size);
    return check_str(f, p, len, msg, n);
  }
  case K_WORD: {
    int v = *(const int *)p, nw = 0;
    while (f->words[nw])
      nw++;
    if (v >= 0 && v < nw)
      return 0;
    char ex[32];
    snprintf(ex, sizeof ex, "%d", v);
    return not_one_of(f, ex, msg, n);
  }
  case K_BOOL:
    return 0;
  case K_CODEC: {
    int lvl = *(const int *)p;
    char ex[32];
    snprintf(ex, sizeof ex, "zstd:%d", lvl);
    return lvl >= 1 && lvl <= 19 ? 0 : bad_codec(ex, msg, n);
  }
  case K_HOSTS:
    if (rf->nodes.nhosts < 0 || rf->nodes.nhosts > HOSTS_MAX)
      return snprintf(msg, n, "holds %d hosts, at most %d", rf->nodes.nhosts, HOSTS_MAX), -1;
    for (int i = 0; i < rf->nodes.nhosts; i++) {
      if (strnlen(rf->nodes.hosts[i], HOST_LEN) >= HOST_LEN)
        return snprintf(msg, n, "host %d is not terminated", i), -1;
      if (check_host(rf->nodes.hosts[i], msg, n))
        return -1;
    }
    return 0;
  }
  return 0;
}

/* Converts the text of one scalar into field f of rf, with type and range
 * checks. quoted: the scalar was quoted or a block scalar (so a string). */
static int store_scalar(const struct field *f, ft_runfile *rf, const char *s, size_t len,
                        bool quoted, char *msg, size_t n) {
  char buf[72], what[96], ex[64];
  void *p = field_ptr(f, rf);
  int v;
  switch (f->kind) {
  case K_STR:
    goto str;
  case K_WORD:
  case K_BOOL:
    if ((v = check_word(f, s, len, msg, n)) < 0)
      return -1;
    if (f->kind == K_BOOL)
      *(bool *)p = v != 0;
    else
      *(int *)p = v;
    return 0;
  case K_CODEC:
    if (memchr(s, 0, len))
      return snprintf(msg, n, "must not contain a NUL byte"), -1;
    if (!len)
      return snprintf(msg, n, "must not be empty"), -1;
    if ((v = codec_level(s, len)) < 0) {
      excerpt(s, len, ex, sizeof ex);
      return bad_codec(ex, msg, n);
    }
    *(int *)p = v;
    return 0;
  default:
    break;
  }
  if (len >= sizeof buf)
    return snprintf(msg, n, "expected %s, got a %zu-byte value", kind_name(f), len), -1;
  memcpy(buf, s, len);
  buf[len] = 0;
  describe(buf, quoted, what, sizeof what);
  switch (f->kind) {
  case K_INT:
  case K_I64: {
    if (f->kind == K_I64 && (f->flags & AUTO_OK) && !strcmp(buf, "auto")) {
      *(int64_t *)p = 0; /* auto */
      return 0;
    }
    if (quoted || !is_int_text(buf))
      return snprintf(msg, n, "expected %s, got %s", kind_name(f), what), -1;
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE)
      return snprintf(msg, n, "%s is out of range", buf), -1;
    if (check_int(f, v, msg, n))
      return -1;
    if (f->kind == K_INT)
      *(int *)p = (int)v;
    else
      *(int64_t *)p = v;
    return 0;
  }
  case K_U64: {
    if (quoted || !is_int_text(buf))
      return snprintf(msg, n, "expected a non-negative integer, got %s", what), -1;
    if (buf[0] == '-') {
      if (strspn(buf + 1, "0") != strlen(buf + 1))
        return snprintf(msg, n, "must be >= 0, got %s", buf), -1;
    }
    errno = 0;
    unsigned long long v = strtoull(buf[0] == '-' ? buf + 1 : buf, NULL, 10);
    if (errno == ERANGE || v > UINT64_MAX)
      return snprintf(msg, n, "%s is out of range (at most %" PRIu64 ")", buf, UINT64_MAX), -1;
    *(uint64_t *)p = (uint64_t)v;
    return 0;
  }
  case K_DBL: {
    double v;
    if ((f->flags & AUTO_OK) && !strcmp(buf, "auto")) {
      *(double *)p = 0; /* auto */
      return 0;
    }
    if (!quoted && is_yaml_special_float(buf))
      return snprintf(msg, n, "must be a finite number, got %s", buf), -1;
    if (quoted || !is_float_text(buf, &v))
      return snprintf(msg, n, "expected %s, got %s", kind_name(f), what), -1;
    if (check_dbl(f, v, msg, n))
      return -1;
    *(double *)p = v;
    return 0;
  }
  default:
    return snprintf(msg, n, "expected %s", kind_name(f)), -1;
  }
str:
  if (check_str(f, s, len, msg, n))
    return -1;
  memcpy(p, s, len);
  ((char *)p)[len] = 0;
  return 0;
}

/* ---- the YAML walk ---------------------------------------------------------- */

struct pos {
  int line, col; /* 1-based; line 0: unknown */
};

struct ctx {
  const char *path;
  ft_runfile *rf; /* rf->from: where each field's value is in the file */
  char *err;
  size_t errlen;
};

static int fail_at(struct ctx *c, struct pos p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_at(struct ctx *c, struct pos p, const char *key, const char *fmt, ...) {
  char msg[MSG];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p.line > 0)
    snprintf(c->err, c->errlen, "%s:%d:%d: %s: %s", c->path, p.line, p.col, key, msg);
  else
    snprintf(c->err, c->errlen, "%s: %s: %s", c->path, key, msg);
  return FT_ECONFIG;
}

/* Start position of a node; `fallback` if libfyaml has none (e.g. the empty
 * value of "key:"). */
static struct pos node_pos(struct fy_node *n, struct pos fallback) {
  const struct fy_mark *m = NULL;
  struct pos p = fallback;
  if (!n)
    return p;
  if (fy_node_is_scalar(n)) {
    struct fy_token *t = fy_node_get_scalar_token(n);
    m = t ? fy_token_start_mark(t) : NULL;
    if (m && !fy_node_is_null(n)) {
      /* The token marks the content: step back over the opening quote or
       * the '*' of an alias, which sit right before it on the same line. */
      enum fy_node_style st = fy_node_get_style(n);
      if (st == FYNS_LITERAL || st == FYNS_FOLDED)
        return fallback; /* marks the content lines, not the '|' or '>' */
      int back = (st == FYNS_SINGLE_QUOTED || st == FYNS_DOUBLE_QUOTED || st == FYNS_ALIAS) &&
                 m->column > 0;
      p = (struct pos){m->line + 1, m->column + 1 - back};
    }
    return p;
  }
  struct fy_document_iterator *it = fy_document_iterator_create();
  if (!it)
    return p;
  fy_document_iterator_node_start(it, n);
  struct fy_event *e = fy_document_iterator_body_next(it);
  if (e) {
    m = fy_event_start_mark(e);
    if (m)
      p = (struct pos){m->line + 1, m->column + 1};
    fy_document_iterator_event_free(it, e);
  }
  fy_document_iterator_destroy(it);
  return p;
}

/* What a node is, for "expected X, got Y". */
static void node_what(struct fy_node *n, char *out, size_t outlen) {
  if (!n) {
    snprintf(out, outlen, "null");
  } else if (fy_node_is_mapping(n)) {
    snprintf(out, outlen, "a mapping");
  } else if (fy_node_is_sequence(n)) {
    snprintf(out, outlen, "a sequence");
  } else if (fy_node_is_alias(n)) {
    snprintf(out, outlen, "an alias");
  } else {
    size_t len;
    const char *s = fy_node_get_scalar(n, &len);
    char buf[128];
    excerpt(s ? s : "", s ? len : 0, buf, sizeof buf);
    describe(buf, fy_node_get_style(n) != FYNS_PLAIN, out, outlen);
  }
}

static bool node_is_null(struct fy_node *n) {
  if (!n)
    return true;
  if (!fy_node_is_scalar(n) || fy_node_is_alias(n) || fy_node_get_style(n) != FYNS_PLAIN)
    return false;
  size_t len;
  const char *s = fy_node_get_scalar(n, &len);
  char buf[8];
  if (!s || len == 0)
    return true;
  if (len >= sizeof buf)
    return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  return is_null_word(buf);
}

static int parse_hosts(struct ctx *c, const struct field *f, struct fy_node *v, struct pos vp) {
  char msg[MSG], what[96];
  ft_nodes_cfg *nc = &c->rf->nodes;
  if (node_is_null(v)) {
    nc->nhosts = 0;
    return 0;
  }
  if (!fy_node_is_sequence(v)) {
    node_what(v, what, sizeof what);
    return fail_at(c, vp, f->key, "expected a sequence of host names, got %s", what);
  }
  void *it = NULL;
  struct fy_node *e;
  int nh = 0;
  while ((e = fy_node_sequence_iterate(v, &it))) {
    struct pos ep = node_pos(e, vp);
    if (!fy_node_is_scalar(e) || fy_node_is_alias(e) || node_is_null(e)) {
      node_what(e, what, sizeof what);
      return fail_at(c, ep, f->key, "expected a host name, got %s", what);
    }
    if (nh >= HOSTS_MAX)
      return fail_at(c, ep, f->key, "too many hosts (at most %d)", HOSTS_MAX);
    size_t len;
    const char *s = fy_node_get_scalar(e, &len);
    if (len >= HOST_LEN || memchr(s, 0, len))
      return fail_at(c, ep, f->key, "host name is too long or holds a NUL (at most %zu bytes)",
                     HOST_LEN - 1);
    memcpy(nc->hosts[nh], s, len);
    nc->hosts[nh][len] = 0;
    if (check_host(nc->hosts[nh], msg, sizeof msg))
      return fail_at(c, ep, f->key, "%s", msg);
    nh++;
  }
  nc->nhosts = nh;
  return 0;
}

static int parse_leaf(struct ctx *c, int idx, struct fy_node *v, struct pos kp) {
  const struct field *f = &FIELDS[idx];
  struct pos vp = node_pos(v, kp);
  char msg[MSG], what[96];
  c->rf->from[idx] = (ft_rf_origin){vp.line, vp.col};
  if (v && fy_node_is_alias(v))
    return fail_at(c, vp, f->key, "aliases are not supported in a run file");
  if (f->kind == K_HOSTS)
    return parse_hosts(c, f, v, vp);
  if (node_is_null(v)) {
    if (f->kind == K_STR && (f->flags & EMPTY_OK)) {
      ((char *)field_ptr(f, c->rf))[0] = 0;
      return 0;
    }
    return fail_at(c, vp, f->key, "expected %s, got null", kind_name(f));
  }
  if (!fy_node_is_scalar(v)) {
    node_what(v, what, sizeof what);
    return fail_at(c, vp, f->key, "expected %s, got %s", kind_name(f), what);
  }
  size_t len;
  const char *s = fy_node_get_scalar(v, &len);
  if (!s)
    return fail_at(c, vp, f->key, "cannot read the value");
  if (store_scalar(f, c->rf, s, len, fy_node_get_style(v) != FYNS_PLAIN, msg, sizeof msg))
    return fail_at(c, vp, f->key, "%s", msg);
  return 0;
}

static int walk_mapping(struct ctx *c, struct fy_node *map, const char *prefix, struct pos mp) {
  enum { SEEN_MAX = 64 };
  const char *seen[SEEN_MAX];
  size_t seen_len[SEEN_MAX];
  struct pos seen_at[SEEN_MAX];
  int nseen = 0, rc;
  void *it = NULL;
  struct fy_node_pair *pair;
  char full[KEYLEN], what[96], hint[KEYLEN];
  const char *here = *prefix ? prefix : "(top level)";

  while ((pair = fy_node_mapping_iterate(map, &it))) {
    struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
    struct pos kp = node_pos(k, mp);
    if (!k || !fy_node_is_scalar(k) || fy_node_is_alias(k) || node_is_null(k)) {
      node_what(k, what, sizeof what);
      return fail_at(c, kp, here, "a key must be a plain name, got %s", what);
    }
    size_t len;
    const char *name = fy_node_get_scalar(k, &len);
    char ex[64];
    excerpt(name, len, ex, sizeof ex);
    bool printable = true;
    for (size_t i = 0; i < len; i++)
      printable &= isprint((unsigned char)name[i]) != 0;
    if (len > 64 || !printable || memchr(name, '.', len)) {
      snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", ex);
      if (find_field(full) >= 0 || is_section(full))
        return fail_at(c, kp, full, "unknown key; dotted keys are not expanded, nest it instead");
      return fail_at(c, kp, full, "unknown key");
    }
    snprintf(full, sizeof full, "%s%s%.*s", prefix, *prefix ? "." : "", (int)len, name);

    for (int i = 0; i < nseen; i++)
      if (seen_len[i] == len && !memcmp(seen[i], name, len))
        return fail_at(c, kp, full, "duplicate key (first at line %d, column %d)", seen_at[i].line,
                       seen_at[i].col);
    if (nseen < SEEN_MAX) {
      seen[nseen] = name;
      seen_len[nseen] = len;
      seen_at[nseen++] = kp;
    }

    int idx = find_field(full);
    if (idx >= 0) {
      rc = parse_leaf(c, idx, v, kp);
      if (rc)
        return rc;
      continue;
    }
    if (is_section(full)) {
      struct pos vp = node_pos(v, kp);
      if (v && fy_node_is_alias(v))
        return fail_at(c, vp, full, "aliases are not supported in a run file");
      if (node_is_null(v))
        continue;
      if (!fy_node_is_mapping(v)) {
        node_what(v, what, sizeof what);
        return fail_at(c, vp, full, "expected a mapping, got %s", what);
      }
      rc = walk_mapping(c, v, full, vp);
      if (rc)
        return rc;
      continue;
    }
    char nm[72];
    snprintf(nm, sizeof nm, "%.*s", (int)len, name);
    suggest(prefix, nm, hint, sizeof hint);
    if (hint[0])
      return fail_at(c, kp, full, "unknown key, did you mean '%s'?", hint);
    return fail_at(c, kp, full, "unknown key");
  }
  return 0;
}

/* ---- checks across keys ----------------------------------------------------- */

/* One problem found across keys: the key blamed (its message follows
 * "KEY: ") and the others involved, whose origins end the message. */
struct verdict {
  int idx;
  int also[4], nalso;
  char msg[MSG];
};

static int blame(struct verdict *v, int i, const int *also, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* also: the other keys involved, ending at -1 (NULL: none). */
static int blame(struct verdict *v, int i, const int *also, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->msg, sizeof v->msg, fmt, ap);
  va_end(ap);
  v->idx = i;
  v->nalso = 0;
  for (int k = 0; also && also[k] >= 0 && v->nalso < 4; k++)
    if (also[k] != i)
      v->also[v->nalso++] = also[k];
  return -1;
}

/* mem_estimate for a world of `world` ranks. */
static double mem_estimate(const ft_runfile *rf, double world, double *params) {
  const ft_model_cfg *m = &rf->model;
  double C = m->n_embd, L = m->n_layer, T = m->seq_len, NH = m->n_head;
  double Vp = ceil(m->vocab_size / 128.0) * 128; /* ft_gpt2_pad_vocab */
  double B = rf->train.micro_batch, N = B * T;
  /* wte, wpe, L blocks of 12 C^2 + 13 C, lnf (ft_gpt2's layout) */
  double P = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  /* worker/gpt2.c's activation arena: per layer 18 N C + 4 N + 2 B NH T^2,
   * plus the embeddings, the final LayerNorm, logits and probabilities. */
  double acts =
      N * C + L * (18 * N * C + 4 * N + 2 * B * NH * T * T) + N * C + 2 * N + 2 * N * Vp + N;
  if (params)
    *params = P;
  if (world < 1)
    world = 1;
  return 4.0 * (4 * P + 4 * P / world + 2 * acts);
}

double ft_runfile_mem_estimate(const ft_runfile *rf, double *params) {
  return mem_estimate(rf, (double)rf->nodes.count * rf->nodes.workers_per_node, params);
}

/* Physical memory of this machine in bytes (0: unknown). */
static double machine_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
}

/* The largest micro-batch <= max for which micro x world divides global (the
 * worker's choice at run time): the largest divisor <= max of
 * global / world; 0 if global is not a multiple of world. */
static int micro_that_works(int global, long long world, int max) {
  if (world < 1 || global % world)
    return 0;
  long long q = global / world, best = 1;
  for (long long d = 1; d * d <= q; d++)
    if (q % d == 0) {
      if (d <= max && d > best)
        best = d;
      if (q / d <= max && q / d > best)
        best = q / d;
    }
  return (int)best;
}

/* Keys the run wrote (in the file or by _set) are blamed before defaults. */
#define WRITTEN(i) (rf->from[i].line != FT_RF_FROM_DEFAULT)
#define BLAME_FIRST(a, b) (!WRITTEN(b) || WRITTEN(a))

/* The world's checks: at most FT_RUNFILE_MAX_WORLD ranks, and micro_batch x
 * world divides global_batch. wkeys: the keys that set the world (none for
 * a program's own world), ending at -1. */
static int check_batch(const ft_runfile *rf, long long world, const char *wdesc, const int *wkeys,
                       struct verdict *v) {
  const ft_train_cfg *t = &rf->train;
  int i_mb = find_field("train.micro_batch"), i_gb = find_field("train.global_batch");
  int all[5] = {i_gb, i_mb, -1, -1, -1};
  for (int k = 0; k < 2 && wkeys[k] >= 0; k++)
    all[2 + k] = wkeys[k];
  if (world > FT_RUNFILE_MAX_WORLD && all[2] >= 0)
    return blame(v, BLAME_FIRST(all[3], all[2]) ? all[3] : all[2], all + 2, "%s is more than %d",
                 wdesc, FT_RUNFILE_MAX_WORLD);
  if (world > FT_RUNFILE_MAX_WORLD)
    return blame(v, i_gb, NULL, "the %s is more than %d", wdesc, FT_RUNFILE_MAX_WORLD);
  if (t->global_batch % world) {
    long long lo = t->global_batch / world * world, hi = lo + world;
    if (lo > 0)
      return blame(v, i_gb, all + 2, "%d is not a multiple of the %s; %lld or %lld would be",
                   t->global_batch, wdesc, lo, hi);
    return blame(v, i_gb, all + 2, "%d is not a multiple of the %s; %lld would be", t->global_batch,
                 wdesc, hi);
  }
  if (t->global_batch % ((long long)t->micro_batch * world) == 0)
    return 0;
  int fit = micro_that_works(t->global_batch, world, t->micro_batch);
  long long step = (long long)t->micro_batch * world;
  long long up = (t->global_batch / step + 1) * step;
  if (BLAME_FIRST(i_mb, i_gb)) {
    if (world == 1)
      return blame(v, i_mb, all, "%d does not divide train.global_batch (%d); %d would",
                   t->micro_batch, t->global_batch, fit);
    return blame(v, i_mb, all,
                 "%d x the %s does not divide train.global_batch (%d); micro_batch %d would",
                 t->micro_batch, wdesc, t->global_batch, fit);
  }
  if (world == 1)
    return blame(v, i_gb, all,
                 "%d is not a multiple of train.micro_batch (%d); %lld would (or micro_batch %d)",
                 t->global_batch, t->micro_batch, up, fit);
  return blame(v, i_gb, all,
               "%d is not a multiple of train.micro_batch (%d) x the %s; %lld would (or "
               "micro_batch %d)",
               t->global_batch, t->micro_batch, wdesc, up, fit);
}

/* The model's size, and for CPU ranks on this machine its memory: blamed
 * on the first model key the run wrote. */
static int check_size(const ft_runfile *rf, long long world, bool here, struct verdict *v) {
  const ft_model_cfg *m = &rf->model;
  static const char *const MODEL_KEYS[] = {"model.n_embd",     "model.n_layer",     "model.seq_len",
                                           "model.vocab_size", "train.micro_batch", NULL};
  int i_model = find_field("model.n_embd");
  for (int k = 0; MODEL_KEYS[k]; k++)
    if (WRITTEN(find_field(MODEL_KEYS[k]))) {
      i_model = find_field(MODEL_KEYS[k]);
      break;
    }
  double params, bytes = mem_estimate(rf, (double)world, &params);
  if (params > (double)FT_RUNFILE_MAX_PARAMS)
    return blame(v, i_model, NULL, "the model has %.4g parameters, more than %.4g", params,
                 (double)FT_RUNFILE_MAX_PARAMS);
  double have = machine_bytes();
  if (rf->nodes.device == FT_RF_DEVICE_CPU && here && have > 0 && bytes * (double)world > have) {
    const double GiB = 1024.0 * 1024 * 1024;
    return blame(v, i_model, NULL,
                 "the model needs about %.1f GiB (%.4g parameters: weights, gradients and AdamW "
                 "moments, plus activations at micro_batch %d x seq_len %d: %.1f GiB per rank, "
                 "%lld ranks on this machine), more than this machine's %.1f GiB",
                 bytes * (double)world / GiB, params, rf->train.micro_batch, m->seq_len,
                 bytes / GiB, world, have / GiB);
  }
  return 0;
}

/* A checkpoint only in memory must be in two hosts' memory. */
static int check_memory_tier(const ft_runfile *rf, struct verdict *v) {
  int i_rep = find_field("checkpoint.replicate"), i_pe = find_field("checkpoint.persist_every");
  int i_req = find_field("checkpoint.require");
  if (rf->checkpoint.replicate)
    return 0;
  long long pe = (long long)rf->checkpoint.persist_every;
  int pe_rep[] = {i_pe, i_rep, -1}, req_rep[] = {i_req, i_rep, -1};
  if (pe > 1 && BLAME_FIRST(i_pe, i_rep))
    return blame(v, i_pe, pe_rep,
                 "%lld keeps the checkpoints in between in memory only, which needs "
                 "checkpoint.replicate: true (a copy in another host's memory)",
                 pe);
  if (pe > 1)
    return blame(v, i_rep, pe_rep,
                 "must be true for checkpoint.persist_every %lld (the checkpoints kept in "
                 "memory only need a copy in another host's memory)",
                 pe);
  if (rf->checkpoint.require == FT_RF_REQUIRE_MEMORY)
    return blame(v, BLAME_FIRST(i_req, i_rep) ? i_req : i_rep, req_rep, "%s",
                 BLAME_FIRST(i_req, i_rep)
                     ? "memory (committed once in two hosts' memory) needs "
                       "checkpoint.replicate: true"
                     : "must be true for checkpoint.require memory (committed once in two "
                       "hosts' memory)");
  return 0;
}

/* Finds the first problem across keys, blaming a key the run wrote (in the
 * file or by _set) before a default. world > 0: the program's own world
 * (who names it), else nodes.count x nodes.workers_per_node. On a problem
 * returns -1 with *v filled in. */
static int cross_check(const ft_runfile *rf, int pworld, const char *who, struct verdict *v) {
  const ft_model_cfg *m = &rf->model;
  const ft_train_cfg *t = &rf->train;
  int i_head = find_field("model.n_head"), i_embd = find_field("model.n_embd");
  int i_gb = find_field("train.global_batch"), i_seq = find_field("model.seq_len");
  int i_cmd = find_field("nodes.command"), i_la = find_field("nodes.launcher");
  int i_cnt = find_field("nodes.count"), i_wpn = find_field("nodes.workers_per_node");
  int heads[] = {i_head, i_embd, -1}, tok[] = {i_gb, i_seq, -1}, cmd[] = {i_cmd, i_la, -1};

  if (m->n_embd % m->n_head) {
    if (BLAME_FIRST(i_head, i_embd))
      return blame(v, i_head, heads, "%d does not divide model.n_embd (%d)", m->n_head, m->n_embd);
    return blame(v, i_embd, heads, "%d is not a multiple of model.n_head (%d)", m->n_embd,
                 m->n_head);
  }

  /* The world, in 64 bits: the program's, or nodes.count x nodes.workers_per_node. */
  long long world = (long long)rf->nodes.count * rf->nodes.workers_per_node;
  int nodes_keys[] = {i_cnt, i_wpn, -1}, none[] = {-1};
  char wdesc[192];
  if (pworld > 0) {
    world = pworld;
    snprintf(wdesc, sizeof wdesc, "world size %lld (%s)", world, who ? who : "this program's");
  } else
    snprintf(wdesc, sizeof wdesc, "world size %lld (nodes.count %d x nodes.workers_per_node %d)",
             world, rf->nodes.count, rf->nodes.workers_per_node);
  if (check_batch(rf, world, wdesc, pworld > 0 ? none : nodes_keys, v))
    return -1;
  long long tokens = (long long)t->global_batch * m->seq_len;
  if (tokens > FT_RUNFILE_MAX_TOKENS_PER_STEP)
    return blame(v, BLAME_FIRST(i_gb, i_seq) ? i_gb : i_seq, tok,
                 "train.global_batch %d x model.seq_len %d is %lld tokens per step, more than %lld",
                 t->global_batch, m->seq_len, tokens, FT_RUNFILE_MAX_TOKENS_PER_STEP);
  /* a program's own world runs here; a supervised one with the local launcher */
  if (check_size(rf, world, pworld > 0 || rf->nodes.launcher == FT_RF_LAUNCHER_LOCAL, v) ||
      check_memory_tier(rf, v))
    return -1;

  if (rf->nodes.launcher == FT_RF_LAUNCHER_COMMAND && !strstr(rf->nodes.command, "{argv}")) {
    char ex[64];
    excerpt(rf->nodes.command, strnlen(rf->nodes.command, sizeof rf->nodes.command), ex, sizeof ex);
    if (BLAME_FIRST(i_cmd, i_la))
      return blame(v, i_cmd, cmd, "launcher 'command' needs a command containing {argv}, got '%s'",
                   ex);
    return blame(v, i_la, cmd, "'command' needs nodes.command with {argv} in it");
  }
  if (rf->nodes.launch_once) {
    int i_once = find_field("nodes.launch_once"), i_ag = find_field("nodes.agent");
    int once[] = {i_once, i_ag, i_la, i_cmd, -1};
    if (!rf->nodes.agent)
      return blame(v, i_once, once, "true needs nodes.agent: true (the agents start the workers)");
    if (rf->nodes.launcher != FT_RF_LAUNCHER_SLURM &&
        !(rf->nodes.launcher == FT_RF_LAUNCHER_COMMAND && strstr(rf->nodes.command, "{nodes}")))
      return blame(v, i_once, once,
                   "true needs nodes.launcher slurm, or command with a nodes.command that names "
                   "{nodes} (run once, it starts every node's agent)");
  }
  return 0;
}
#undef BLAME_FIRST
#undef WRITTEN

/* Appends " [KEY: where, ...]" for the keys of v (the blamed one first)
 * that are not in the file, which a reader of the file cannot see: "--set",
 * or "default" (only when rf came from a file: without one every key is a
 * default, and saying so says nothing). */
static void origins(const ft_runfile *rf, const struct verdict *v, char *out, size_t n) {
  int keys[5] = {v->idx}, nk = 1, said = 0;
  size_t o = strlen(out);
  for (int k = 0; k < v->nalso; k++)
    keys[nk++] = v->also[k];
  for (int k = 0; k < nk && o < n; k++) {
    int line = rf->from[keys[k]].line;
    const char *where = line == FT_RF_FROM_SET                           ? "--set"
                        : line == FT_RF_FROM_DEFAULT && rf->path[0] != 0 ? "default"
                                                                         : NULL;
    if (where)
      o += (size_t)snprintf(out + o, n - o, "%s%s: %s", said++ ? ", " : " [", FIELDS[keys[k]].key,
                            where);
  }
  if (said && o < n)
    snprintf(out + o, n - o, "]");
}

int ft_runfile_validate_world(const ft_runfile *rf, int world, const char *who, char *err,
                              size_t errlen) {
  char dummy[8];
  struct verdict v = {0};
  if (!err || !errlen)
    err = dummy, errlen = sizeof dummy;
  err[0] = 0;
  if (!rf)
    return ft_err_set(FT_EINVAL, "ft_runfile_validate: rf is NULL");
  /* each key's own rules first: a program may have written into the struct */
  for (int i = 0; i < NFIELDS; i++)
    if (check_stored(&FIELDS[i], rf, v.msg, sizeof v.msg)) {
      snprintf(err, errlen, "%s: %s", FIELDS[i].key, v.msg);
      return ft_err_set(FT_ECONFIG, "%s", err);
    }
  if (cross_check(rf, world, who, &v) == 0)
    return FT_OK;
  ft_rf_origin at = rf->from[v.idx];
  if (at.line > 0 && rf->path[0])
    snprintf(err, errlen, "%s:%d:%d: %s: %s", rf->path, at.line, at.col, FIELDS[v.idx].key, v.msg);
  else
    snprintf(err, errlen, "%s: %s", FIELDS[v.idx].key, v.msg);
  origins(rf, &v, err, errlen);
  return ft_err_set(FT_ECONFIG, "%s", err);
}

int ft_runfile_validate(const ft_runfile *rf, char *err, size_t errlen) {
  return ft_runfile_validate_world(rf, 0, NULL, err, errlen);
}

/* ---- load --------------------------------------------------------------------- */

static void diag_silent(struct fy_diag *diag, void *user, const char *buf, size_t len) {}

/* True if the text holds only blank lines, comments and document markers. */
static bool only_comments(const char *text, size_t len) {
  size_t i = 0;
  while (i < len) {
    size_t e = i;
    while (e < len && text[e] != '\n')
      e++;
    size_t p = i;
    while (p < e && strchr(" \t\r", text[p]))
      p++;
    if (p < e && text[p] != '#') {
      if (e - p < 3 || (memcmp(text + p, "---", 3) && memcmp(text + p, "...", 3)))
        return false;
      p += 3;
      while (p < e && strchr(" \t\r", text[p]))
        p++;
      if (p < e && text[p] != '#')
        return false;
    }
    i = e + 1;
  }
  return true;
}

/* Formats libfyaml's first collected error as a syntax error. */
static int syntax_error(struct ctx *c, struct fy_diag *diag) {
  void *it = NULL;
  struct fy_diag_error *e;
  while ((e = fy_diag_errors_iterate(diag, &it)))
    if (e->type >= FYET_ERROR)
      return fail_at(c, (struct pos){e->line > 0 ? e->line : 1, e->column > 0 ? e->column : 1},
                     "syntax error", "%s", e->msg ? e->msg : "invalid YAML");
  return fail_at(c, (struct pos){0, 0}, "syntax error", "invalid YAML");
}

/* Checks that text is what a run file may hold: UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF) without NUL bytes or control
 * characters other than tab, LF and CR. libfyaml would end a scalar at a
 * NUL ("run: abc<NUL>def" read as "abc") and can loop forever on some
 * invalid UTF-8 (found by tests/fuzz/fuzz_runfile: tests/fuzz/crashers/).
 * On a bad byte returns -1 with its 1-based position and a description. */
static int check_text(const char *text, size_t len, struct pos *at, char *why, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  int line = 1;
  size_t bol = 0;
  for (size_t i = 0; i < len;) {
    unsigned c = s[i];
    size_t k = 0; /* continuation bytes */
    unsigned cp = 0, min = 0;
    if (c == '\n') {
      line++;
      bol = ++i;
      continue;
    }
    if (c < 0x80) {
      if (c == 0 || (c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
        *at = (struct pos){line, (int)(i - bol) + 1};
        if (c == 0)
          snprintf(why, n, "a NUL byte; a run file is text");
        else
          snprintf(why, n, "a control character (0x%02x); a run file is text", c);
        return -1;
      }
      i++;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf)
      k = 1, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
      k = 2, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
      k = 3, cp = c & 0x07, min = 0x10000;
    bool ok = k > 0;
    for (size_t j = 1; ok && j <= k; j++) {
      if (i + j >= len || (s[i + j] & 0xc0) != 0x80)
        ok = false;
      else
        cp = cp << 6 | (s[i + j] & 0x3f);
    }
    if (ok && (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)))
      ok = false;
    if (!ok) {
      *at = (struct pos){line, (int)(i - bol) + 1};
      snprintf(why, n, "invalid UTF-8 (byte 0x%02x); a run file is UTF-8 text", c);
      return -1;
    }
    i += k + 1;
  }
  return 0;
}

/* A data glob written in the file and relative is relative to the run
 * file's directory: prefix it with that directory (none for a run file in
 * the current directory, so its globs stay as written). Globs from the
 * defaults or ft_runfile_set are left relative to the current directory. */
static int resolve_data_globs(struct ctx *c) {
  const char *slash = strrchr(c->path, '/');
  if (!slash)
    return 0;
  size_t dlen = slash == c->path ? 1 : (size_t)(slash - c->path); /* "/x.yaml": "/" */
  static const char *const KEYS[] = {"data.train", "data.val"};
  for (int k = 0; k < 2; k++) {
    int i = find_field(KEYS[k]);
    char *g = field_ptr(&FIELDS[i], c->rf), buf[sizeof c->rf->data.train];
    ft_rf_origin at = c->rf->from[i];
    if (at.line <= 0 || !g[0] || g[0] == '/' || !strncmp(g, "s3://", 5))
      continue;
    int n = snprintf(buf, sizeof buf, "%.*s%s%s", (int)dlen, c->path,
                     dlen == 1 && *c->path == '/' ? "" : "/", g);
    if (n < 0 || (size_t)n >= FIELDS[i].size)
      return fail_at(c, (struct pos){at.line, at.col}, KEYS[k],
                     "'%.40s' under the run file's directory is too long (at most %zu bytes)", g,
                     FIELDS[i].size - 1);
    memcpy(g, buf, (size_t)n + 1);
  }
  return 0;
}

int ft_runfile_parse(const char *name, const char *text, size_t len, ft_runfile *rf, char *err,
                     size_t errlen) {
  char dummy[8], what[96], msg[MSG];
  struct ctx *c = NULL;
  struct fy_diag *diag = NULL;
  struct fy_parser *fyp = NULL;
  struct fy_document *fyd = NULL, *extra = NULL;
  int rc = FT_OK;

  if (!err || !errlen)
    err = dummy, errlen = sizeof dummy;
  err[0] = 0;
  if (!name || !rf || (!text && len)) {
    snprintf(err, errlen, "ft_runfile_parse: NULL argument");
    return ft_err_set(FT_EINVAL, "%s", err);
  }
  ft_runfile_defaults(rf);
  if (strlen(name) >= sizeof rf->path) {
    snprintf(err, errlen, "%.64s...: path is too long", name);
    return ft_err_set(FT_ECONFIG, "%s", err);
  }
  snprintf(rf->path, sizeof rf->path, "%s", name);

  c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "%s: out of memory", name);
    return ft_err_set(FT_ENOMEM, "%s", err);
  }
  c->path = name;
  c->rf = rf;
  c->err = err;
  c->errlen = errlen;

  if (len > FT_RUNFILE_MAX_BYTES) {
    rc = fail_at(c, (struct pos){0, 0}, "(file)",
                 "%zu bytes is too large for a run file (at most %d)", len, FT_RUNFILE_MAX_BYTES);
    goto out;
  }
  struct pos bad;
  if (check_text(text ? text : "", len, &bad, msg, sizeof msg)) {
    rc = fail_at(c, bad, "syntax error", "%s", msg);
    goto out;
  }

  struct fy_diag_cfg dcfg;
  fy_diag_cfg_default(&dcfg);
  dcfg.fp = NULL;
  dcfg.output_fn = diag_silent;
  dcfg.level = FYET_ERROR;
  dcfg.colorize = false;
  diag = fy_diag_create(&dcfg);
  if (!diag) {
    rc = fail_at(c, (struct pos){0, 0}, "yaml", "cannot create the libfyaml diagnostics");
    goto out;
  }
  fy_diag_set_collect_errors(diag, true);
  /* Duplicate keys are let through and caught by walk_mapping, which can
   * name the key's dotted path. */
  struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_ALLOW_DUPLICATE_KEYS, .diag = diag};
  fyp = fy_parser_create(&pcfg);
  if (!fyp || fy_parser_set_string(fyp, len ? text : "", len) != 0) {
    rc = fail_at(c, (struct pos){0, 0}, "yaml", "cannot set up the YAML parser");
    goto out;
  }
  fyd = fy_parse_load_document(fyp);
  if (fy_parser_get_stream_error(fyp) || fy_diag_got_error(diag)) {
    rc = syntax_error(c, diag);
    goto out;
  }
  if (fyd) {
    extra = fy_parse_load_document(fyp);
    if (fy_parser_get_stream_error(fyp) || fy_diag_got_error(diag)) {
      rc = syntax_error(c, diag);
      goto out;
    }
    if (extra) {
      struct pos p = node_pos(fy_document_root(extra), (struct pos){1, 1});
      rc = fail_at(c, p, "syntax error", "a run file holds one YAML document, found a second");
      goto out;
    }
  }

  /* An empty file (or one of only comments) leaves every default; anything
   * else that yields no document (an encoding libfyaml gave up on) is an error. */
  if (!fyd && !only_comments(text ? text : "", len)) {
    rc = fail_at(c, (struct pos){1, 1}, "syntax error", "no YAML document found");
    goto out;
  }
  struct fy_node *root = fyd ? fy_document_root(fyd) : NULL;
  if (!node_is_null(root)) {
    struct pos rp = node_pos(root, (struct pos){1, 1});
    if (!fy_node_is_mapping(root)) {
      node_what(root, what, sizeof what);
      rc = fail_at(c, rp, "(top level)", "expected a mapping of keys, got %s", what);
      goto out;
    }
    rc = walk_mapping(c, root, "", rp);
    if (rc)
      goto out;
  }
  /* the checks across keys wait for the overrides: ft_runfile_validate */
  rc = resolve_data_globs(c);

out:
  if (extra)
    fy_parse_document_destroy(fyp, extra);
  if (fyd)
    fy_parse_document_destroy(fyp, fyd);
  if (fyp)
    fy_parser_destroy(fyp);
  if (diag)
    fy_diag_destroy(diag);
  free(c);
  if (rc)
    ft_err_set(rc, "%s", err);
  return rc;
}

int ft_runfile_load(const char *path, ft_runfile *rf, char *err, size_t errlen) {
  char dummy[8];
  char *text = NULL;
  size_t len = 0;
  int rc = FT_OK;

  if (!err || !errlen)
    err = dummy, errlen = sizeof dummy;
  err[0] = 0;
  if (!path || !rf) {
    snprintf(err, errlen, "ft_runfile_load: NULL argument");
    return ft_err_set(FT_EINVAL, "%s", err);
  }
  ft_runfile_defaults(rf);
  if (strlen(path) >= sizeof rf->path) {
    snprintf(err, errlen, "%.64s...: path is too long", path);
    return ft_err_set(FT_ECONFIG, "%s", err);
  }
  FILE *fp = fopen(path, "r");
  if (!fp) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return ft_err_set(FT_EIO, "%s", err);
  }
  struct stat st;
  if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s: cannot read: is a directory", path);
    rc = ft_err_set(FT_EIO, "%s", err);
    goto out;
  }
  /* Read at most one byte more than a run file may hold: _parse refuses it. */
  text = malloc((size_t)FT_RUNFILE_MAX_BYTES + 1);
  if (!text) {
    snprintf(err, errlen, "%s: out of memory", path);
    rc = ft_err_set(FT_ENOMEM, "%s", err);
    goto out;
  }
  len = fread(text, 1, (size_t)FT_RUNFILE_MAX_BYTES + 1, fp);
  if (ferror(fp)) {
    snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
    rc = ft_err_set(FT_EIO, "%s", err);
    goto out;
  }
  rc = ft_runfile_parse(path, text, len, rf, err, errlen);
out:
  free(text);
  fclose(fp);
  return rc;
}

/* ---- command-line overrides ------------------------------------------------- */

static int set_hosts(ft_runfile *rf, const char *value, char *msg, size_t n) {
  ft_nodes_cfg *nc = &rf->nodes;
  int nh = 0;
  const char *p = value;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    const char *s = p;
    while (len && isspace((unsigned char)*s))
      s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
      len--;
    if (nh >= HOSTS_MAX)
      return snprintf(msg, n, "too many hosts (at most %d)", HOSTS_MAX), -1;
    if (len >= HOST_LEN)
      return snprintf(msg, n, "host name is too long (at most %zu bytes)", HOST_LEN - 1), -1;
    memcpy(nc->hosts[nh], s, len);
    nc->hosts[nh][len] = 0;
    if (check_host(nc->hosts[nh], msg, n))
      return -1;
    nh++;
    if (!comma)
      break;
    p = comma + 1;
    if (!*p)
      return snprintf(msg, n, "a host name must not be empty"), -1;
  }
  nc->nhosts = nh;
  return 0;
}

int ft_runfile_set(ft_runfile *rf, const char *dotted_key, const char *value, char *err,
                   size_t errlen) {
  char dummy[8], msg[MSG], hint[KEYLEN];
  ft_runfile *tmp = NULL;
  int rc = FT_OK;
  if (!err || !errlen)
    err = dummy, errlen = sizeof dummy;
  err[0] = 0;
  if (!rf || !dotted_key || !value) {
    snprintf(err, errlen, "ft_runfile_set: NULL argument");
    return ft_err_set(FT_EINVAL, "%s", err);
  }
  int idx = find_field(dotted_key);
  if (idx < 0) {
    if (is_section(dotted_key)) {
      snprintf(err, errlen, "%s: is a section, not a value; set one of its keys", dotted_key);
    } else {
      suggest_dotted(dotted_key, hint, sizeof hint);
      if (hint[0])
        snprintf(err, errlen, "%s: unknown key, did you mean '%s'?", dotted_key, hint);
      else
        snprintf(err, errlen, "%s: unknown key", dotted_key);
    }
    return ft_err_set(FT_ECONFIG, "%s", err);
  }
  const struct field *f = &FIELDS[idx];
  tmp = malloc(sizeof *tmp);
  if (!tmp) {
    snprintf(err, errlen, "%s: out of memory", f->key);
    return ft_err_set(FT_ENOMEM, "%s", err);
  }
  memcpy(tmp, rf, sizeof *tmp);
  int bad = f->kind == K_HOSTS ? set_hosts(tmp, value, msg, sizeof msg)
                               : store_scalar(f, tmp, value, strlen(value), false, msg, sizeof msg);
  if (bad) {
    snprintf(err, errlen, "%s: %s", f->key, msg);
    rc = ft_err_set(FT_ECONFIG, "%s", err);
    goto out;
  }
  tmp->from[idx] = (ft_rf_origin){FT_RF_FROM_SET, 0};
  memcpy(rf, tmp, sizeof *rf);
out:
  free(tmp);
  return rc;
}

/* ---- config JSON -------------------------------------------------------------- */

static int add_raw(cJSON *obj, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int add_raw(cJSON *obj, const char *key, const char *fmt, ...) {
  char buf[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return cJSON_AddRawToObject(obj, key, buf) ? 0 : -1;
}

#define DBL(o, k, v) add_raw(o, k, "%.17g", (double)(v))
#define INT(o, k, v) add_raw(o, k, "%lld", (long long)(v))
#define STR(o, k, v) (cJSON_AddStringToObject(o, k, v) ? 0 : -1)

char *ft_runfile_config_json(const ft_runfile *rf) {
  char seed[32];
  char *out = NULL;
  int bad = 0;
  if (!rf)
    return NULL;
  const double dbls[] = {rf->train.lr,        rf->train.min_lr_frac, rf->train.weight_decay,
                         rf->train.grad_clip, rf->train.beta1,       rf->train.beta2,
                         rf->train.eps};
  for (size_t i = 0; i < sizeof dbls / sizeof dbls[0]; i++)
    if (!isfinite(dbls[i]))
      return NULL; /* JSON has no inf/nan; _validate rejects them anyway */
  cJSON *root = cJSON_CreateObject();
  cJSON *m = cJSON_AddObjectToObject(root, "model");
  cJSON *t = cJSON_AddObjectToObject(root, "train");
  cJSON *d = cJSON_AddObjectToObject(root, "data");
  if (!root || !m || !t || !d)
    goto out;
  bad |= INT(m, "n_layer", rf->model.n_layer);
  bad |= INT(m, "n_head", rf->model.n_head);
  bad |= INT(m, "n_embd", rf->model.n_embd);
  bad |= INT(m, "vocab_size", rf->model.vocab_size);
  bad |= INT(m, "seq_len", rf->model.seq_len);
  bad |= INT(t, "global_batch", rf->train.global_batch);
  bad |= INT(t, "micro_batch", rf->train.micro_batch);
  bad |= DBL(t, "lr", rf->train.lr);
  bad |= INT(t, "warmup", rf->train.warmup);
  bad |= INT(t, "steps", rf->train.steps);
  bad |= STR(t, "schedule", ft_rf_schedule_name(rf->train.schedule));
  bad |= DBL(t, "min_lr_frac", rf->train.min_lr_frac);
  bad |= DBL(t, "weight_decay", rf->train.weight_decay);
  bad |= DBL(t, "grad_clip", rf->train.grad_clip);
  bad |= DBL(t, "beta1", rf->train.beta1);
  bad |= DBL(t, "beta2", rf->train.beta2);
  bad |= DBL(t, "eps", rf->train.eps);
  snprintf(seed, sizeof seed, "%" PRIu64, rf->train.seed);
  bad |= STR(t, "seed", seed);
  bad |= STR(t, "precision", ft_rf_precision_name(rf->train.precision));
  bad |= STR(d, "train", rf->data.train);
  bad |= STR(d, "val", rf->data.val);
  if (!bad)
    out = cJSON_PrintUnformatted(root);
out:
  cJSON_Delete(root);
  return out;
}

int ft_runfile_is_s3(const char *uri) {
  return !strncmp(uri, "s3://", 5);
}

ft_rf_store_kind ft_runfile_store_kind(const char *store) {
  if (!strncmp(store, "s3://", 5))
    return FT_RF_STORE_S3;
  if (!strcmp(store, "local:state/store") || strncmp(store, "local:", 6))
    return FT_RF_STORE_STATE;
  return FT_RF_STORE_LOCAL;
}

int ft_runfile_store_uri(const char *store, const char *runfile_path, const char *state_dir,
                         char *out, size_t n) {
  int k;
  ft_rf_store_kind kind = ft_runfile_store_kind(store);
  if (kind == FT_RF_STORE_S3 || (kind == FT_RF_STORE_LOCAL && store[6] == '/'))
    k = snprintf(out, n, "%s", store);
  else if (kind == FT_RF_STORE_STATE)
    k = snprintf(out, n, "local:%s/store", state_dir);
  else {
    const char *slash = runfile_path ? strrchr(runfile_path, '/') : NULL;
    k = slash ? snprintf(out, n, "local:%.*s/%s", (int)(slash - runfile_path), runfile_path,
                         store + 6)
              : snprintf(out, n, "%s", store);
  }
  return k < 0 || (size_t)k >= n ? -1 : 0;
}

void ft_runfile_store_env(const ft_runfile *rf, const char *store_uri) {
  if (store_uri && !strncmp(store_uri, "s3://", 5) && rf->checkpoint.require == FT_RF_REQUIRE_LOCAL)
    setenv("FT_S3_REQUIRE", "local", 1);
}

double ft_train_lr(const ft_train_cfg *t, int64_t s) {
  double lr = t->lr, min_lr = t->lr * t->min_lr_frac;
  if (s < t->warmup)
    return lr * (double)(s + 1) / (double)t->warmup;
  if (t->schedule == FT_RF_SCHEDULE_CONSTANT)
    return lr;
  int64_t span = t->steps - t->warmup;
  double p = span > 0 ? (double)(s - t->warmup) / (double)span : 1.0;
  if (p > 1.0)
    p = 1.0;
  if (t->schedule == FT_RF_SCHEDULE_LINEAR)
    return lr - (lr - min_lr) * p;
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * p));
}
