/*
 * ckpt_cli: the `ckpt` program, an operator's view of a checkpoint store.
 *
 *   ckpt [--store URI] [--run NAME] COMMAND [ARGS]
 *
 * Read-only commands (ls, show, restore, diff) open the catalog as a reader,
 * so they work while a training run (the writer) holds it. verify opens it
 * for writing, to mark damaged checkpoints bad, and falls back to reading
 * (without marking) when a writer holds the lock. gc, pin and unpin need the
 * lock and exit 5 when someone else holds it. Exit codes: see usage().
 */
#include "ckpt_cli.h"
#include "ckpt_int.h"

#include "ft_err.h"
#include "ft_file.h"
#include "ft_opts.h"
#include "ft_version.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *usage_text =
    "usage: ckpt [--store URI] [--run NAME] COMMAND [ARGS]\n"
    "\n"
    "Inspect, restore, verify and clean up a checkpoint store written by the\n"
    "trainer (or the supervisor). The store is --store URI, or $CKPT_STORE.\n"
    "URIs: local:DIR (chunks, manifests and the catalog under DIR), or\n"
    "s3://BUCKET/PREFIX (chunks and manifests in the bucket, a local cache\n"
    "directory in front of it that also holds the catalog; see Environment).\n"
    "\n"
    "Commands:\n"
    "  ls                      list checkpoints: run, step, time, state, level\n"
    "                          (durable, local: in an s3 cache, memory: only in\n"
    "                          workers' memory), loss, logical size, stored size,\n"
    "                          bytes new in that checkpoint (not shared with an\n"
    "                          earlier one), ratio, and for delta chunks\n"
    "                          (checkpoint.full_every) the base step and the\n"
    "                          depth of the longest chain a restore reads\n"
    "  show STEP               a checkpoint's tensors: dtype, shape, chunks, sizes,\n"
    "                          encoding (full, or delta and its chain depth), and\n"
    "                          the s3:// data listing it carries (patterns,\n"
    "                          objects, tokens)\n"
    "  show STEP --to FILE     also write that listing to FILE, as the workers'\n"
    "                          FT_DATA_LISTING reads it (docs/data.md)\n"
    "  restore STEP --to PATH  write the model as Hugging Face GPT-2 safetensors;\n"
    "         [--world N --rank R]  or rank R's raw FSDP shard of every tensor\n"
    "                          (for a run of N ranks) as safetensors. PATH: a new\n"
    "                          or existing regular file, or a folder (existing, or\n"
    "                          ending in '/'): for the model a Hugging Face model\n"
    "                          directory (model.safetensors + config.json, loads\n"
    "                          with GPT2LMHeadModel.from_pretrained), for a shard\n"
    "                          rankR-of-N.safetensors in it; anything else (a\n"
    "                          device, FIFO, link), and any PATH inside the\n"
    "                          store's folder (or an s3 store's cache; links and\n"
    "                          '..' followed) is refused (exit 2).\n"
    "                          'restore latest' whose checkpoint is damaged names\n"
    "                          it and its chunk and restores the next older one\n"
    "                          (at most 3 fallbacks; exit 0 with a warning); an\n"
    "                          explicit STEP never falls back\n"
    "  verify [STEP]           re-read and re-hash every chunk of one checkpoint\n"
    "                          (or of all), delta chunks with their chains, and\n"
    "                          check that its manifest object in the store holds\n"
    "                          the catalog's copy (one overwritten is named);\n"
    "                          damaged ones are marked bad, and so are the\n"
    "                          checkpoints whose chains need a damaged chunk (not\n"
    "                          while another writer holds the catalog or the\n"
    "                          disk is full: then they are only reported)\n"
    "  gc [--dry-run] [--keep-last N] [--keep-every M] [--grace SECONDS]\n"
    "                          keep the newest N restorable checkpoints of each\n"
    "                          run, every M-th step and all pinned ones; delete\n"
    "                          the rest and every chunk (and shard object) nothing\n"
    "                          kept references.\n"
    "                          Chunks younger than --grace (default 3600 s) stay:\n"
    "                          they may belong to a checkpoint being written.\n"
    "                          Also removes temp files crashed writes left. On a\n"
    "                          full disk it still deletes the chunks nothing\n"
    "                          references, then retention if that made room;\n"
    "                          exit 4 (naming the error) if it could not.\n"
    "                          Refused (exit 4, nothing deleted, a dry run too)\n"
    "                          when the store holds manifests its catalog does\n"
    "                          not list (named): run rebuild-catalog first\n"
    "  pin STEP / unpin STEP   protect a checkpoint from gc (or stop protecting it)\n"
    "  diff A B                which tensors changed between steps A and B, and\n"
    "                          by how many bytes (at chunk granularity)\n"
    "  rebuild-catalog [URI]   record in the catalog every checkpoint whose\n"
    "                          manifest is in the store (local:DIR, or for s3://\n"
    "                          the bucket), with the good/bad mark and pin last\n"
    "                          set on it (kept beside the manifest): what a lost\n"
    "                          or damaged catalog needs. A damaged catalog is\n"
    "                          moved aside (CATALOG.damaged.TIME) and rebuilt;\n"
    "                          every manifest that cannot be used is named, with\n"
    "                          why (exit 1). Until it completes, the catalog is\n"
    "                          marked incomplete and every other command refuses\n"
    "                          it (exit 4). An s3:// cache without a catalog gets\n"
    "                          one on first use, built beside it and moved in\n"
    "                          only when whole.\n"
    "\n"
    "STEP is a step number or 'latest' (the newest committed or good one).\n"
    "\n"
    "Options:\n"
    "  --store URI     the store (default: $CKPT_STORE)\n"
    "  --run NAME      the run, when the store holds several (default: the only\n"
    "                  one); a run the store does not have is exit 3\n"
    "  --json          machine-readable output: one JSON object per command\n"
    "                  (verify, gc, diff, pin, unpin, restore, rebuild-catalog;\n"
    "                  each has \"command\"), an array for ls, an object for show.\n"
    "                  Errors still go to stderr with the exit codes below\n"
    "  -h, --help      this text\n"
    "  --version       the version and the git revision it was built from\n"
    "\n"
    "For s3:// stores, verify also checks the bucket's copy of every chunk and\n"
    "repairs whichever copy (cache or bucket) is missing or damaged from the\n"
    "other; restore reads the cache first and the bucket second.\n"
    "\n"
    "Environment (s3:// stores):\n"
    "  FT_S3_ENDPOINT     e.g. http://localhost:9000 (default AWS:\n"
    "                     https://s3.REGION.amazonaws.com)\n"
    "  AWS_REGION         or AWS_DEFAULT_REGION (default us-east-1)\n"
    "  FT_S3_ADDRESSING   path | virtual (default: path with an endpoint)\n"
    "  FT_S3_CACHE        cache directory (default ~/.cache/ftsup/BUCKET/PREFIX)\n"
    "  FT_S3_REQUIRE      both | local: where a commit must be durable\n"
    "  FT_S3_CACHE_PER_HOST 1: each host has its own cache (node-local disk):\n"
    "                     chunks count as written once in the bucket\n"
    "  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, or the\n"
    "  shared credentials file (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE)\n"
    "  FT_S3_TIMEOUT_S, FT_S3_RETRIES, FT_S3_RETRY_BUDGET_S, FT_S3_MULTIPART_MIB,\n"
    "  FT_S3_PART_MIB, FT_S3_UPLOAD_THREADS, FT_S3_DRAIN_S: tuning\n"
    "\n"
    "Examples:\n"
    "  export CKPT_STORE=local:state/store\n"
    "  ckpt ls                              # what is there, and how big\n"
    "  ckpt show latest                     # tensors of the newest checkpoint\n"
    "  ckpt restore 300 --to model.safetensors\n"
    "  ckpt restore 300 --to hf-model/          # then from_pretrained(\"hf-model\")\n"
    "  ckpt restore 300 --to r1.safetensors --world 4 --rank 1\n"
    "  ckpt verify && echo all good         # exit 1 if any chunk is damaged\n"
    "  ckpt gc --dry-run --keep-last 5 --keep-every 1000\n"
    "  ckpt --run gpt2-tiny pin 200\n"
    "  ckpt diff 275 300\n"
    "  FT_S3_CACHE=/tmp/c ckpt rebuild-catalog s3://ckpts/run1\n"
    "\n"
    "Exit codes:\n"
    "  0  success\n"
    "  1  a problem was found: verify saw a corrupt or missing chunk or a bad\n"
    "     manifest object, restore met a damaged chunk (nothing was written), or\n"
    "     rebuild-catalog skipped a manifest it could not use\n"
    "  2  usage error (bad command, option or argument; ambiguous run; restore\n"
    "     --to a path inside the store)\n"
    "  3  not found (no such store, run, checkpoint or tensor)\n"
    "  4  store or catalog error (I/O, a full disk, database, format; a damaged,\n"
    "     missing or incomplete catalog, or gc refused because the catalog lacks\n"
    "     manifests the store has: run 'ckpt rebuild-catalog')\n"
    "  5  the catalog is locked by another writer (gc, pin, unpin); try later\n";

typedef struct cli {
  const char *store;
  const char *run;
  int json, dry_run, keep_last, keep_every, world, rank;
  int64_t grace;
  const char *to;
  ckpt_store *s;
  char runbuf[128];
  cJSON *jv; /* --json: verify's per-checkpoint results */
} cli;

int ckpt_cli_exit_code(int rc) {
  switch (rc) {
  case FT_OK:
    return CKPT_EXIT_OK;
  case FT_ECORRUPT:
    return CKPT_EXIT_PROBLEM;
  case FT_EINVAL:
    return CKPT_EXIT_USAGE;
  case FT_ENOENT:
    return CKPT_EXIT_NOTFOUND;
  case FT_EBUSY:
    return CKPT_EXIT_LOCKED;
  default:
    return CKPT_EXIT_STORE;
  }
}

void ckpt_cli_progress(const char *what, uint64_t done, uint64_t total) {
  static int tty = -1;
  if (tty < 0)
    tty = isatty(STDERR_FILENO);
  if (!tty || total == 0)
    return;
  fprintf(stderr, "\r%s: %" PRIu64 "/%" PRIu64 " (%d%%)%s", what, done, total,
          (int)(100 * done / total), done == total ? "\r\033[K" : "");
  fflush(stderr);
}

static int fail(int rc, const char *what) {
  const char *d = ft_err_detail();
  fprintf(stderr, "ckpt: %s: %s\n", what, d[0] ? d : ft_strerror(rc));
  if (rc == FT_EBUSY)
    fprintf(stderr, "ckpt: this command changes the catalog; run it when the writer is done\n");
  return ckpt_cli_exit_code(rc);
}

/* --json: prints one object (the command's whole result) and frees it. */
static void emit(cJSON *o) {
  char *s = o ? cJSON_Print(o) : NULL;
  printf("%s\n", s ? s : "{}");
  free(s);
  cJSON_Delete(o);
}

static cJSON *jobj(const char *command) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "command", command);
  return o;
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "ckpt: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nckpt: see 'ckpt --help'\n");
  return CKPT_EXIT_USAGE;
}

static void human(uint64_t b, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    i++;
  }
  if (i == 0)
    snprintf(buf, n, "%" PRIu64 " B", b);
  else
    snprintf(buf, n, "%.2f %s", v, u[i]);
}

static void fmt_time(int64_t ms, char *buf, size_t n) {
  if (ms <= 0) {
    snprintf(buf, n, "-");
    return;
  }
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

static int open_store(cli *c, int writer, int rebuild) {
  ckpt_store_opts o = {.read_only = 1};
  /* A reader first: it fails (not found) where there is no store, where a
   * writer would create an empty one at a mistyped path. rebuild-catalog
   * goes on where the catalog is damaged or missing (FT_EDB). */
  int rc = ckpt_store_open(c->store, &o, &c->s);
  if (rebuild && rc == FT_EDB)
    rc = FT_OK;
  if (rc || !writer)
    return rc;
  ckpt_store_free(c->s);
  c->s = NULL;
  o.read_only = 0;
  o.rebuild_catalog = rebuild;
  return ckpt_store_open(c->store, &o, &c->s);
}

/* --run NAME must name a run the store has: a typo is an error (exit 3),
 * never "0 checkpoints, no problems". */
static int check_run(cli *c) {
  ckpt_info *v = NULL;
  size_t n = 0;
  int rc = ckpt_store_list(c->s, c->run, &v, &n);
  free(v);
  if (rc || n > 0)
    return rc;
  rc = ckpt_store_list(c->s, NULL, &v, &n);
  if (rc)
    return rc;
  char list[1024] = "";
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && strcmp(v[i].run, v[i - 1].run) == 0)
      continue;
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", v[i].run);
  }
  free(v);
  return ft_err_set(FT_ENOENT, "the store %s has no run '%s' (its runs: %s)", c->store, c->run,
                    list[0] ? list : "none yet");
}

/* Picks the run: --run, or the only run in the store. */
static int pick_run(cli *c) {
  if (c->run)
    return FT_OK;
  ckpt_info *v = NULL;
  size_t n = 0;
  int rc = ckpt_store_list(c->s, NULL, &v, &n);
  if (rc)
    return rc;
  char list[1024] = "";
  int nruns = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && strcmp(v[i].run, v[i - 1].run) == 0)
      continue;
    nruns++;
    snprintf(c->runbuf, sizeof c->runbuf, "%s", v[i].run);
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", v[i].run);
  }
  free(v);
  if (nruns == 0)
    return ft_err_set(FT_ENOENT, "the store %s has no checkpoints yet", c->store);
  if (nruns > 1)
    return ft_err_set(FT_EINVAL, "the store holds several runs (%s); choose one with --run NAME",
                      list);
  c->run = c->runbuf;
  return FT_OK;
}

static int parse_step(cli *c, const char *arg, int64_t *step) {
  if (!arg)
    return ft_err_set(FT_EINVAL, "missing STEP (a step number or 'latest')");
  int rc = pick_run(c);
  if (rc)
    return rc;
  if (strcmp(arg, "latest") == 0)
    return ckpt_store_latest_at(c->s, c->run, INT64_MAX, CKPT_LEVEL_LOCAL, step);
  char *end;
  long long v = strtoll(arg, &end, 10);
  if (*end || end == arg || v < 0)
    return ft_err_set(FT_EINVAL, "'%s' is not a step (a number >= 0, or 'latest')", arg);
  *step = v;
  return FT_OK;
}

/* ---- ls ----------------------------------------------------------------------- */

/* "yes", or the lossy forms in mask (ckpt_info.lossy) joined by '+'. */
static void lossy_str(int mask, char *buf, size_t n) {
  size_t l = 0;
  buf[0] = 0;
  for (int k = CKPT_LOSSY_BF16; k <= CKPT_LOSSY_Q8LOG && l < n; k++)
    if (mask & (1 << k))
      l += (size_t)snprintf(buf + l, n - l, "%s%s", l ? "+" : "", ckpt_lossy_name(k));
  if (!buf[0])
    snprintf(buf, n, "yes");
}

static void add_lossy_json(cJSON *o, int mask) {
  cJSON_AddBoolToObject(o, "exact", mask == 0);
  cJSON *a = cJSON_AddArrayToObject(o, "lossy");
  for (int k = CKPT_LOSSY_BF16; k <= CKPT_LOSSY_Q8LOG; k++)
    if (mask & (1 << k))
      cJSON_AddItemToArray(a, cJSON_CreateString(ckpt_lossy_name(k)));
}

static int cmd_ls(cli *c) {
  ckpt_info *v = NULL;
  size_t n = 0;
  int rc = ckpt_store_list(c->s, c->run, &v, &n);
  if (rc)
    return fail(rc, "ls");
  if (c->json) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "run", v[i].run);
      cJSON_AddNumberToObject(o, "step", (double)v[i].step);
      cJSON_AddNumberToObject(o, "parent", (double)v[i].parent_step);
      cJSON_AddNumberToObject(o, "world", v[i].world);
      cJSON_AddStringToObject(o, "state", ckpt_state_name(v[i].state));
      cJSON_AddStringToObject(o, "level", ckpt_level_name(v[i].level));
      cJSON_AddBoolToObject(o, "pinned", v[i].pinned);
      cJSON_AddNumberToObject(o, "time_ms", (double)v[i].time_ms);
      if (isfinite(v[i].loss))
        cJSON_AddNumberToObject(o, "loss", v[i].loss);
      else
        cJSON_AddNullToObject(o, "loss");
      cJSON_AddNumberToObject(o, "logical_bytes", (double)v[i].logical_bytes);
      cJSON_AddNumberToObject(o, "stored_bytes", (double)v[i].stored_bytes);
      cJSON_AddNumberToObject(o, "new_bytes", (double)v[i].new_bytes);
      cJSON_AddNumberToObject(o, "ntensors", v[i].ntensors);
      cJSON_AddNumberToObject(o, "nchunks", v[i].nchunks);
      cJSON_AddNumberToObject(o, "depth", v[i].depth);
      if (v[i].base_step >= 0)
        cJSON_AddNumberToObject(o, "base", (double)v[i].base_step);
      else
        cJSON_AddNullToObject(o, "base");
      add_lossy_json(o, v[i].lossy);
      cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(arr);
    printf("%s\n", s ? s : "[]");
    free(s);
    cJSON_Delete(arr);
    free(v);
    return 0;
  }
  if (n == 0) {
    printf("no checkpoints%s%s\n", c->run ? " of run " : "", c->run ? c->run : "");
    free(v);
    return 0;
  }
  printf("%-16s %8s  %-19s  %-9s %-7s %9s %11s %11s %11s %6s %8s %5s  %s\n", "RUN", "STEP", "TIME",
         "STATE", "LEVEL", "LOSS", "LOGICAL", "STORED", "NEW", "RATIO", "BASE", "DEPTH", "EXACT");
  for (size_t i = 0; i < n; i++) {
    char t[32], lg[32], st[32], nw[32], loss[32], state[16], ratio[16], base[24] = "-";
    if (v[i].depth > 0 && v[i].base_step >= 0)
      snprintf(base, sizeof base, "%" PRId64, v[i].base_step);
    else if (v[i].depth > 0)
      snprintf(base, sizeof base, "?");
    fmt_time(v[i].time_ms, t, sizeof t);
    human(v[i].logical_bytes, lg, sizeof lg);
    human(v[i].stored_bytes, st, sizeof st);
    human(v[i].new_bytes, nw, sizeof nw);
    if (isfinite(v[i].loss))
      snprintf(loss, sizeof loss, "%.4f", v[i].loss);
    else
      snprintf(loss, sizeof loss, "-");
    snprintf(state, sizeof state, "%s%s", ckpt_state_name(v[i].state), v[i].pinned ? "*" : "");
    if (v[i].stored_bytes)
      snprintf(ratio, sizeof ratio, "%.2fx",
               (double)v[i].logical_bytes / (double)v[i].stored_bytes);
    else
      snprintf(ratio, sizeof ratio, "-");
    char exact[64];
    lossy_str(v[i].lossy, exact, sizeof exact);
    printf("%-16s %8" PRId64 "  %-19s  %-9s %-7s %9s %11s %11s %11s %6s %8s %5d  %s\n", v[i].run,
           v[i].step, t, state, ckpt_level_name(v[i].level), loss, lg, st, nw, ratio, base,
           v[i].depth, exact);
  }
  printf("(* pinned; LEVEL = where its bytes are safe: durable (the store), local (an s3 "
         "store's cache, the upload queued), memory (two hosts' memory only, not in the "
         "store); NEW = stored bytes of chunks no earlier checkpoint had; RATIO = logical / "
         "stored; BASE = the checkpoint its delta chunks were encoded against (- none, ? one "
         "not committed); DEPTH = the longest chain of earlier chunks a restore of it reads "
         "(0: it stands alone), at most checkpoint.full_every - 1; EXACT = yes, or the lossy "
         "forms its optimizer moments were stored in (checkpoint.moments): a resume from it is "
         "not bit-exact)\n");
  free(v);
  return 0;
}

/* ---- show ----------------------------------------------------------------------- */

static void shape_str(const ckpt_tensor_info *t, char *buf, size_t n) {
  size_t l = 0;
  l += (size_t)snprintf(buf, n, "(");
  for (int d = 0; d < t->ndim && l < n; d++)
    l += (size_t)snprintf(buf + l, n - l, "%s%" PRId64, d ? ", " : "", t->shape[d]);
  if (l < n)
    snprintf(buf + l, n - l, ")");
}

/* The s3:// data listing a checkpoint carries (ckpt_meta.data_json, the
 * supervisor's docs/data.md "The listing"), in brief: per pattern its
 * objects, tokens and bytes. Text: one line per pattern on out (NULL: none);
 * JSON: an array (NULL when the checkpoint has none). */
static cJSON *data_summary(const char *data, FILE *out) {
  if (!data) {
    if (out)
      fprintf(out, "data    no recorded listing (local data, or a checkpoint older than them)\n");
    return NULL;
  }
  cJSON *root = cJSON_Parse(data), *a = cJSON_CreateArray(), *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(root, "patterns")) {
    double tokens = 0, bytes = 0;
    int n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(p, "objects")) {
      const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
      const cJSON *z = cJSON_GetObjectItemCaseSensitive(o, "size");
      tokens += cJSON_IsNumber(t) ? t->valuedouble : 0;
      bytes += cJSON_IsNumber(z) ? z->valuedouble : 0;
      n++;
    }
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "pattern", p->string ? p->string : "");
    cJSON_AddNumberToObject(x, "objects", n);
    cJSON_AddNumberToObject(x, "tokens", tokens);
    cJSON_AddNumberToObject(x, "bytes", bytes);
    cJSON_AddItemToArray(a, x);
    if (out) {
      char b[32];
      human((uint64_t)bytes, b, sizeof b);
      fprintf(out, "data    %s: %d objects, %.0f tokens, %s\n", p->string ? p->string : "?", n,
              tokens, b);
    }
  }
  if (out && !cJSON_GetArraySize(a))
    fprintf(out, "data    a listing of no pattern (%zu bytes, not a data listing?)\n",
            strlen(data));
  cJSON_Delete(root);
  return a;
}

static int cmd_show(cli *c, const char *arg) {
  int64_t step;
  int rc = parse_step(c, arg, &step);
  ckpt_manifest *m = NULL;
  if (rc == FT_OK)
    rc = ckpt_store_load(c->s, c->run, step, &m);
  if (rc)
    return fail(rc, "show");
  const ckpt_info *i = ckpt_manifest_info(m);
  int nt = ckpt_manifest_ntensors(m);
  if (c->to) { /* the listing itself, for a host's FT_DATA_LISTING */
    const char *d = ckpt_manifest_data_json(m);
    ft_afile f;
    rc = d ? ckpt_cli_restore_outside(c->to, ckpt_store_dir(c->s)) /* never into the store */
           : ft_err_set(FT_ENOENT, "checkpoint %" PRId64 " carries no data listing", i->step);
    if (rc == FT_OK && (rc = ft_afile_open(&f, c->to)) == FT_OK) {
      if ((rc = ft_afile_write(&f, d, strlen(d))) != FT_OK)
        ft_afile_abort(&f);
      else
        rc = ft_afile_commit(&f);
    }
    if (rc) {
      ckpt_manifest_free(m);
      return fail(rc, "show --to");
    }
  }
  if (c->json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", i->run);
    cJSON_AddNumberToObject(o, "step", (double)i->step);
    cJSON_AddNumberToObject(o, "parent", (double)i->parent_step);
    cJSON_AddNumberToObject(o, "world", i->world);
    cJSON_AddStringToObject(o, "state", ckpt_state_name(i->state));
    cJSON_AddStringToObject(o, "level", ckpt_level_name(i->level));
    cJSON_AddBoolToObject(o, "pinned", i->pinned);
    cJSON_AddNumberToObject(o, "logical_bytes", (double)i->logical_bytes);
    cJSON_AddNumberToObject(o, "stored_bytes", (double)i->stored_bytes);
    cJSON_AddNumberToObject(o, "new_bytes", (double)i->new_bytes);
    cJSON_AddNumberToObject(o, "depth", i->depth);
    if (i->base_step >= 0)
      cJSON_AddNumberToObject(o, "base", (double)i->base_step);
    else
      cJSON_AddNullToObject(o, "base");
    add_lossy_json(o, i->lossy);
    cJSON_AddItemToObject(o, "config", cJSON_Parse(ckpt_manifest_config_json(m)));
    cJSON_AddItemToObject(o, "state_json", cJSON_Parse(ckpt_manifest_state_json(m)));
    cJSON_AddItemToObject(o, "metrics", cJSON_Parse(ckpt_manifest_metrics_json(m)));
    cJSON *d = data_summary(ckpt_manifest_data_json(m), NULL);
    cJSON_AddItemToObject(o, "data_listing", d ? d : cJSON_CreateNull());
    cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
    for (int k = 0; k < nt; k++) {
      ckpt_tensor_info t;
      ckpt_manifest_tensor(m, k, &t);
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "name", t.name);
      cJSON_AddStringToObject(x, "dtype", t.dtype);
      cJSON *sh = cJSON_AddArrayToObject(x, "shape");
      for (int d = 0; d < t.ndim; d++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t.shape[d]));
      cJSON_AddNumberToObject(x, "nbytes", (double)t.nbytes);
      cJSON_AddNumberToObject(x, "stored_bytes", (double)t.stored_bytes);
      cJSON_AddNumberToObject(x, "nchunks", t.nchunks);
      cJSON_AddNumberToObject(x, "delta_chunks", t.delta_chunks);
      cJSON_AddStringToObject(x, "form", ckpt_lossy_name(t.lossy));
      cJSON_AddNumberToObject(x, "depth", t.depth);
      cJSON_AddItemToArray(ts, x);
    }
    char *s = cJSON_Print(o);
    printf("%s\n", s ? s : "{}");
    free(s);
    cJSON_Delete(o);
    ckpt_manifest_free(m);
    return 0;
  }
  char t[32], lg[32], st[32], nw[32];
  fmt_time(i->time_ms, t, sizeof t);
  human(i->logical_bytes, lg, sizeof lg);
  human(i->stored_bytes, st, sizeof st);
  human(i->new_bytes, nw, sizeof nw);
  printf("run %s  step %" PRId64 "  parent %" PRId64 "  world %d  state %s%s  level %s\n", i->run,
         i->step, i->parent_step, i->world, ckpt_state_name(i->state), i->pinned ? " (pinned)" : "",
         ckpt_level_name(i->level));
  char loss[32] = "-";
  if (isfinite(i->loss))
    snprintf(loss, sizeof loss, "%.6f", i->loss);
  printf("committed %s  loss %s\nlogical %s  stored %s  new %s  %d tensors  %d chunks\n", t, loss,
         lg, st, nw, i->ntensors, i->nchunks);
  if (i->depth > 0 && i->base_step >= 0)
    printf("deltas against step %" PRId64 ", chains up to %d deep\n", i->base_step, i->depth);
  else if (i->depth > 0)
    printf("deltas against chunks of an uncommitted step, chains up to %d deep\n", i->depth);
  else
    printf("every chunk stands alone (no deltas)\n");
  if (i->lossy) {
    char forms[64];
    lossy_str(i->lossy, forms, sizeof forms);
    printf("not exact: tensors stored in lossy forms (%s); a resume from it is not bit-exact\n",
           forms);
  }
  printf("config  %s\nstate   %s\nmetrics %s\n", ckpt_manifest_config_json(m),
         ckpt_manifest_state_json(m), ckpt_manifest_metrics_json(m));
  cJSON_Delete(data_summary(ckpt_manifest_data_json(m), stdout));
  printf("\n");
  printf("%-28s %-5s %-22s %7s %11s %11s  %s\n", "TENSOR", "DTYPE", "SHAPE", "CHUNKS", "SIZE",
         "STORED", "ENCODING");
  for (int k = 0; k < nt; k++) {
    ckpt_tensor_info ti;
    char sh[128], a[32], b[32], enc[64];
    ckpt_manifest_tensor(m, k, &ti);
    shape_str(&ti, sh, sizeof sh);
    human(ti.nbytes, a, sizeof a);
    human(ti.stored_bytes, b, sizeof b);
    if (ti.lossy)
      snprintf(enc, sizeof enc, "lossy %s", ckpt_lossy_name(ti.lossy));
    else if (ti.delta_chunks == 0)
      snprintf(enc, sizeof enc, "full");
    else if (ti.delta_chunks == ti.nchunks)
      snprintf(enc, sizeof enc, "delta (depth %d)", ti.depth);
    else
      snprintf(enc, sizeof enc, "delta %d/%d chunks (depth %d)", ti.delta_chunks, ti.nchunks,
               ti.depth);
    printf("%-28s %-5s %-22s %7d %11s %11s  %s\n", ti.name, ti.dtype, sh, ti.nchunks, a, b, enc);
  }
  ckpt_manifest_free(m);
  return 0;
}

/* ---- restore -------------------------------------------------------------------- */

/* `restore latest` moves on to the next older restorable checkpoint when
 * the newest is damaged (FT_ECORRUPT), at most this many times; an
 * explicit step never falls back. */
#define CKPT_RESTORE_FALLBACKS 3

static int cmd_restore(cli *c, const char *arg) {
  if (!c->to)
    return usage_error("restore needs --to PATH%s", "");
  if ((c->world > 0) != (c->rank >= 0))
    return usage_error("--world N and --rank R go together%s", "");
  if (c->world > 0 && c->rank >= c->world)
    return usage_error("--rank must be below --world%s", "");
  char to[8192], config[8192];
  int rc = ckpt_cli_restore_outside(c->to, ckpt_store_dir(c->s));
  if (rc == FT_OK)
    rc = ckpt_cli_restore_target(c->to, c->world, c->rank, to, sizeof to, config, sizeof config);
  if (rc)
    return fail(rc, "restore");
  int64_t step, newest = -1;
  int latest = arg && strcmp(arg, "latest") == 0, fallbacks = 0, ndamaged = 0;
  rc = parse_step(c, arg, &step);
  newest = step;
  ckpt_manifest *m = NULL;
  for (;;) {
    if (rc == FT_OK)
      rc = ckpt_store_load(c->s, c->run, step, &m);
    if (rc == FT_OK) {
      const ckpt_info *i = ckpt_manifest_info(m);
      if (i->state == CKPT_BAD)
        fprintf(stderr,
                "ckpt: warning: checkpoint %s step %" PRId64
                " is marked bad; restoring it anyway as asked\n",
                i->run, i->step);
      rc = ckpt_cli_restore(c->s, m, to, config, c->world > 0 ? c->world : 0, c->rank);
    }
    ndamaged += rc == FT_ECORRUPT;
    if (rc != FT_ECORRUPT || !latest || fallbacks == CKPT_RESTORE_FALLBACKS)
      break;
    /* the newest is damaged: name it and what is wrong, then the next older */
    fprintf(stderr,
            "ckpt: warning: checkpoint %s step %" PRId64 " is damaged: %s\n"
            "ckpt: nothing of it was written to %s; it is not marked bad here (restore only "
            "reads the catalog): 'ckpt verify %" PRId64 "' would mark it\n",
            c->run, step, ft_err_detail(), to, step);
    ckpt_manifest_free(m);
    m = NULL;
    fallbacks++;
    int64_t damaged = step;
    rc = damaged > 0 ? ckpt_store_latest_at(c->s, c->run, damaged - 1, CKPT_LEVEL_LOCAL, &step)
                     : FT_ENOENT;
    if (rc == FT_ENOENT) {
      rc = ft_err_set(FT_ECORRUPT,
                      "checkpoint %s step %" PRId64 " is damaged and the run has no older "
                      "restorable checkpoint",
                      c->run, damaged);
      break;
    }
    if (rc == FT_OK)
      fprintf(stderr, "ckpt: falling back to step %" PRId64 " (fallback %d of at most %d)\n", step,
              fallbacks, CKPT_RESTORE_FALLBACKS);
  }
  if (rc) {
    int code = fail(rc, "restore");
    if (rc == FT_ECORRUPT && fallbacks)
      fprintf(stderr,
              "ckpt: nothing was written to %s: %d damaged checkpoint%s from step %" PRId64
              " down; run 'ckpt verify' and restore an older one by its step ('ckpt ls')\n",
              to, ndamaged, ndamaged == 1 ? "" : "s", newest);
    else if (rc == FT_ECORRUPT)
      fprintf(stderr,
              "ckpt: nothing was written to %s; run 'ckpt verify %" PRId64
              "' and restore an older checkpoint ('ckpt ls')\n",
              to, step);
    ckpt_manifest_free(m);
    return code;
  }
  const ckpt_info *i = ckpt_manifest_info(m);
  if (fallbacks)
    fprintf(stderr,
            "ckpt: warning: restored step %" PRId64 ", not the newest (step %" PRId64
            "): %d newer checkpoint%s damaged (above)\n",
            i->step, newest, fallbacks, fallbacks == 1 ? " is" : "s are");
  if (c->json) {
    cJSON *o = jobj("restore");
    cJSON_AddStringToObject(o, "run", i->run);
    cJSON_AddNumberToObject(o, "step", (double)i->step);
    cJSON_AddStringToObject(o, "state", ckpt_state_name(i->state));
    cJSON_AddStringToObject(o, "format", c->world > 0 ? "shard" : "model");
    cJSON_AddNumberToObject(o, "world", c->world > 0 ? c->world : 0);
    cJSON_AddNumberToObject(o, "rank", c->world > 0 ? c->rank : 0);
    cJSON_AddStringToObject(o, "path", to);
    cJSON_AddNumberToObject(o, "fallbacks", fallbacks);
    if (config[0])
      cJSON_AddStringToObject(o, "config", config);
    emit(o);
  } else if (c->world > 0) {
    printf("restored %s step %" PRId64 " rank %d of %d to %s\n", i->run, i->step, c->rank, c->world,
           to);
  } else {
    printf("restored %s step %" PRId64 " (GPT-2, safetensors%s) to %s\n", i->run, i->step,
           config[0] ? " + config.json" : "", config[0] ? c->to : to);
  }
  ckpt_manifest_free(m);
  return 0;
}

/* ---- verify ---------------------------------------------------------------------- */

static void verify_progress(void *ud, uint64_t done, uint64_t total) {
  ckpt_cli_progress(ud, done, total);
}

static void verify_json(cli *c, const char *run, int64_t step, const ckpt_verify_report *rep,
                        int ok) {
  cJSON *x = cJSON_CreateObject();
  cJSON_AddStringToObject(x, "run", run);
  cJSON_AddNumberToObject(x, "step", (double)step);
  cJSON_AddBoolToObject(x, "ok", ok);
  cJSON_AddNumberToObject(x, "chunks_checked", rep->chunks_checked);
  cJSON_AddNumberToObject(x, "chunks_corrupt", rep->chunks_corrupt);
  cJSON_AddNumberToObject(x, "chunks_missing", rep->chunks_missing);
  cJSON_AddBoolToObject(x, "manifest_bad", rep->manifest_bad);
  cJSON_AddStringToObject(x, "problem", rep->first_problem);
  cJSON_AddNumberToObject(x, "dependants_marked_bad", rep->dependants_bad);
  cJSON_AddItemToArray(c->jv, x);
}

static int verify_one(cli *c, const char *run, int64_t step, int *problems) {
  ckpt_verify_report rep;
  char what[200];
  snprintf(what, sizeof what, "verify %s %" PRId64, run, step);
  int rc = ckpt_store_verify(c->s, run, step, &rep, verify_progress, what);
  if (rc == FT_OK) {
    if (c->jv)
      verify_json(c, run, step, &rep, 1);
    else
      printf("ok    %s step %" PRId64 " (%d chunks)\n", run, step, rep.chunks_checked);
    return FT_OK;
  }
  if (rc == FT_ECORRUPT) {
    (*problems)++;
    if (c->jv)
      verify_json(c, run, step, &rep, 0);
    else
      printf("BAD   %s step %" PRId64 ": %s%d corrupt, %d missing of %d chunks\n      %s\n", run,
             step, rep.manifest_bad ? "bad manifest object, " : "", rep.chunks_corrupt,
             rep.chunks_missing, rep.chunks_checked, rep.first_problem);
    if (rep.dependants_bad && !c->jv)
      printf("      %d other checkpoint(s) need those chunks (delta chains): marked bad too\n",
             rep.dependants_bad);
    return FT_OK;
  }
  return rc;
}

static int cmd_verify(cli *c, const char *arg, int marking) {
  int problems = 0, rc = FT_OK, checked = 0;
  ckpt_store_set_scrub(c->s, 1); /* s3://: check and repair both copies */
  if (c->json)
    c->jv = cJSON_CreateArray();
  if (marking && ckpt_catalog_writable(c->s->cat) != FT_OK) {
    fprintf(stderr,
            "ckpt: note: %s\nckpt: verifying read-only; damaged checkpoints will be "
            "reported but not marked bad\n",
            ft_err_detail());
    marking = 0;
  }
  if (arg) {
    int64_t step;
    rc = parse_step(c, arg, &step);
    if (rc == FT_OK)
      rc = verify_one(c, c->run, step, &problems);
    checked = 1;
  } else {
    ckpt_info *v = NULL;
    size_t n = 0;
    rc = ckpt_store_list(c->s, c->run, &v, &n);
    for (size_t i = 0; rc == FT_OK && i < n; i++) {
      if (v[i].state == CKPT_PENDING)
        continue;
      if (v[i].level == CKPT_LEVEL_MEMORY) { /* nothing of it in the store */
        if (!c->jv)
          printf("skip  %s step %" PRId64 " (level memory: only in workers' memory)\n", v[i].run,
                 v[i].step);
        continue;
      }
      rc = verify_one(c, v[i].run, v[i].step, &problems);
      checked++;
    }
    free(v);
  }
  if (rc) {
    cJSON_Delete(c->jv);
    c->jv = NULL;
    return fail(rc, "verify");
  }
  ckpt_tier_stats ts;
  ckpt_store_tier_stats(c->s, &ts);
  if (c->json) {
    cJSON *o = jobj("verify");
    cJSON_AddNumberToObject(o, "checked", checked);
    cJSON_AddNumberToObject(o, "damaged", problems);
    cJSON_AddBoolToObject(o, "marked_bad", problems && marking);
    cJSON_AddNumberToObject(o, "repaired_local", (double)ts.repaired_local);
    cJSON_AddNumberToObject(o, "repaired_remote", (double)ts.repaired_remote);
    cJSON_AddItemToObject(o, "checkpoints", c->jv);
    c->jv = NULL;
    emit(o);
    return problems ? CKPT_EXIT_PROBLEM : 0;
  }
  if (ts.has_remote && (ts.repaired_local || ts.repaired_remote))
    printf("repaired %" PRIu64 " chunk%s in the cache from the bucket and %" PRIu64
           " in the bucket from the cache\n",
           ts.repaired_local, ts.repaired_local == 1 ? "" : "s", ts.repaired_remote);
  if (problems) {
    printf("%d of %d checkpoints damaged%s\n", problems, checked,
           marking ? "; marked bad (latest/restore will skip them)"
                   : "; not marked bad: a writer holds the catalog");
    return CKPT_EXIT_PROBLEM;
  }
  printf("%d checkpoint%s verified, no problems\n", checked, checked == 1 ? "" : "s");
  return 0;
}

/* ---- gc, pin ---------------------------------------------------------------------- */

static int cmd_gc(cli *c) {
  ckpt_retention r = {.keep_last = c->keep_last, .keep_every = c->keep_every};
  ckpt_gc_report rep;
  if (c->grace >= 0)
    ckpt_store_set_gc_grace(c->s, c->grace);
  int rc = ckpt_store_gc(c->s, &r, c->dry_run, &rep);
  if (rc)
    return fail(rc, "gc");
  if (c->json) {
    cJSON *o = jobj("gc");
    cJSON_AddBoolToObject(o, "dry_run", c->dry_run);
    cJSON_AddNumberToObject(o, "checkpoints_deleted", rep.checkpoints_deleted);
    cJSON_AddNumberToObject(o, "chunks_deleted", (double)rep.chunks_deleted);
    cJSON_AddNumberToObject(o, "bytes_freed", (double)rep.bytes_freed);
    cJSON_AddNumberToObject(o, "tmp_deleted", rep.tmp_deleted);
    cJSON_AddNumberToObject(o, "shards_deleted", (double)rep.shards_deleted);
    cJSON_AddBoolToObject(o, "sweep_only", rep.sweep_only);
    cJSON_AddNumberToObject(o, "marks_followed", rep.marks_followed);
    cJSON_AddStringToObject(o, "note", rep.note);
    emit(o);
    if (rep.sweep_only)
      fprintf(stderr, "ckpt: gc: %s\n", rep.note);
    return rep.sweep_only ? CKPT_EXIT_STORE : 0;
  }
  char b[32];
  human(rep.bytes_freed, b, sizeof b);
  printf("%s%d checkpoint%s, %" PRIu64 " chunks, %s\n", c->dry_run ? "would delete " : "deleted ",
         rep.checkpoints_deleted, rep.checkpoints_deleted == 1 ? "" : "s", rep.chunks_deleted, b);
  if (rep.shards_deleted)
    printf("%s%" PRIu64 " shard object%s no kept checkpoint names\n",
           c->dry_run ? "would delete " : "deleted ", rep.shards_deleted,
           rep.shards_deleted == 1 ? "" : "s");
  if (rep.marks_followed)
    printf("%d checkpoint%s pinned or marked in the store but not in the catalog (an older "
           "copy): kept as the store says%s\n",
           rep.marks_followed, rep.marks_followed == 1 ? "" : "s",
           c->dry_run ? "" : "; the catalog is updated");
  if (rep.tmp_deleted)
    printf("%s%d temp file%s left by interrupted manifest writes\n",
           c->dry_run ? "would delete " : "deleted ", rep.tmp_deleted,
           rep.tmp_deleted == 1 ? "" : "s");
  if (rep.sweep_only) {
    fprintf(stderr, "ckpt: gc: %s\n", rep.note);
    return CKPT_EXIT_STORE;
  }
  return 0;
}

static int cmd_pin(cli *c, const char *arg, int pin) {
  int64_t step;
  int rc = parse_step(c, arg, &step);
  if (rc == FT_OK)
    rc = ckpt_store_pin(c->s, c->run, step, pin);
  if (rc)
    return fail(rc, pin ? "pin" : "unpin");
  if (c->json) {
    cJSON *o = jobj(pin ? "pin" : "unpin");
    cJSON_AddStringToObject(o, "run", c->run);
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddBoolToObject(o, "pinned", pin);
    emit(o);
    return 0;
  }
  printf("%s %s step %" PRId64 "\n", pin ? "pinned" : "unpinned", c->run, step);
  return 0;
}

/* ---- rebuild-catalog ---------------------------------------------------------------- */

typedef struct skip_acc {
  int n;
  cJSON *arr; /* --json */
} skip_acc;

static void rebuild_skipped(void *ud, const char *key, const char *why) {
  skip_acc *a = ud;
  a->n++;
  fprintf(stderr, "ckpt: rebuild-catalog: skipped %s: %s\n", key, why);
  if (a->arr) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "key", key);
    cJSON_AddStringToObject(x, "why", why);
    cJSON_AddItemToArray(a->arr, x);
  }
}

static int cmd_rebuild(cli *c) {
  int found = 0, added = 0;
  skip_acc sk = {.arr = c->json ? cJSON_CreateArray() : NULL};
  if (c->s->catalog_aside[0]) {
    fprintf(stderr,
            "ckpt: the damaged catalog was moved to %s; %d record%s of other components "
            "(the supervisor's run state) copied from it%s%s\n",
            c->s->catalog_aside, c->s->salvaged_meta, c->s->salvaged_meta == 1 ? "" : "s",
            c->s->salvage_error[0] ? "; not all could be read: " : "", c->s->salvage_error);
  }
  int rc = ckpt_store_rebuild_catalog_report(c->s, rebuild_skipped, &sk, &found, &added);
  if (rc) {
    cJSON_Delete(sk.arr);
    return fail(rc, "rebuild-catalog");
  }
  if (c->json) {
    cJSON *o = jobj("rebuild-catalog");
    cJSON_AddNumberToObject(o, "found", found);
    cJSON_AddNumberToObject(o, "added", added);
    cJSON_AddStringToObject(o, "damaged_catalog_moved_to", c->s->catalog_aside);
    cJSON_AddItemToObject(o, "skipped", sk.arr);
    emit(o);
  } else {
    printf("%d manifest%s in the store; %d checkpoint%s added to the catalog; %d skipped\n", found,
           found == 1 ? "" : "s", added, added == 1 ? "" : "s", sk.n);
  }
  return sk.n ? CKPT_EXIT_PROBLEM : 0;
}

/* ---- diff ------------------------------------------------------------------------- */

/* Bytes of tensor t covered by chunks of a and b that differ. */
static uint64_t changed_bytes(const ckpt_tensor *a, const ckpt_tensor *b) {
  uint64_t changed = 0, at = 0, end = a->len < b->len ? a->len : b->len;
  int i = 0, j = 0;
  while (at < end && i < a->nchunks && j < b->nchunks) {
    const ckpt_chunk_ref *x = &a->chunks[i], *y = &b->chunks[j];
    uint64_t xe = x->offset + x->len, ye = y->offset + y->len;
    uint64_t segend = xe < ye ? xe : ye;
    int same =
        x->offset == y->offset && x->len == y->len && memcmp(x->hash, y->hash, CKPT_HASH_LEN) == 0;
    if (!same)
      changed += segend - at;
    at = segend;
    if (xe == segend)
      i++;
    if (ye == segend)
      j++;
  }
  return changed;
}

/* One row of diff's table (or of its JSON "tensors"). */
static void diff_row(cJSON *arr, const char *name, const char *change, int64_t changed,
                     uint64_t size) {
  if (arr) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", name);
    cJSON_AddStringToObject(x, "change", change);
    if (changed >= 0)
      cJSON_AddNumberToObject(x, "changed_bytes", (double)changed);
    else
      cJSON_AddNullToObject(x, "changed_bytes");
    cJSON_AddNumberToObject(x, "bytes", (double)size);
    cJSON_AddItemToArray(arr, x);
    return;
  }
  char x[32] = "-", y[32], pct[16] = "-";
  human(size, y, sizeof y);
  if (changed >= 0) {
    human((uint64_t)changed, x, sizeof x);
    snprintf(pct, sizeof pct, "%.1f", size ? 100.0 * (double)changed / (double)size : 0.0);
  }
  printf("%-28s %-10s %13s %13s %7s\n", name, change, x, y, pct);
}

static int cmd_diff(cli *c, const char *a1, const char *a2) {
  int64_t sa, sb;
  ckpt_manifest *ma = NULL, *mb = NULL;
  int rc = parse_step(c, a1, &sa);
  if (rc == FT_OK)
    rc = parse_step(c, a2, &sb);
  if (rc == FT_OK)
    rc = ckpt_store_load(c->s, c->run, sa, &ma);
  if (rc == FT_OK)
    rc = ckpt_store_load(c->s, c->run, sb, &mb);
  if (rc) {
    ckpt_manifest_free(ma);
    return fail(rc, "diff");
  }
  cJSON *arr = c->json ? cJSON_CreateArray() : NULL;
  if (!arr) {
    printf("%s: step %" PRId64 " -> %" PRId64 "\n", c->run, sa, sb);
    printf("%-28s %-10s %13s %13s %7s\n", "TENSOR", "CHANGE", "CHANGED", "SIZE", "%");
  }
  int i = 0, j = 0, nchanged = 0;
  uint64_t total_changed = 0;
  while (i < ma->ntensors || j < mb->ntensors) {
    int cmp = i >= ma->ntensors   ? 1
              : j >= mb->ntensors ? -1
                                  : strcmp(ma->tensors[i].name, mb->tensors[j].name);
    if (cmp < 0) {
      diff_row(arr, ma->tensors[i].name, "removed", -1, ma->tensors[i].len);
      nchanged++;
      i++;
    } else if (cmp > 0) {
      diff_row(arr, mb->tensors[j].name, "added", -1, mb->tensors[j].len);
      nchanged++;
      j++;
    } else {
      const ckpt_tensor *ta = &ma->tensors[i], *tb = &mb->tensors[j];
      int reshaped = strcmp(ta->dtype, tb->dtype) || ta->ndim != tb->ndim ||
                     memcmp(ta->shape, tb->shape, sizeof ta->shape);
      uint64_t ch = reshaped ? tb->len : changed_bytes(ta, tb);
      if (ch || reshaped) {
        diff_row(arr, tb->name, reshaped ? "reshaped" : "changed", (int64_t)ch, tb->len);
        nchanged++;
        total_changed += ch;
      }
      i++;
      j++;
    }
  }
  if (arr) {
    cJSON *o = jobj("diff");
    cJSON_AddStringToObject(o, "run", c->run);
    cJSON_AddNumberToObject(o, "from", (double)sa);
    cJSON_AddNumberToObject(o, "to", (double)sb);
    cJSON_AddNumberToObject(o, "tensors_changed", nchanged);
    cJSON_AddNumberToObject(o, "bytes_changed", (double)total_changed);
    cJSON_AddItemToObject(o, "tensors", arr);
    emit(o);
  } else {
    char t[32];
    human(total_changed, t, sizeof t);
    printf("%d tensor%s differ; %s changed (a chunk with any changed byte counts whole)\n",
           nchanged, nchanged == 1 ? "" : "s", t);
  }
  ckpt_manifest_free(ma);
  ckpt_manifest_free(mb);
  return 0;
}

/* ---- the command table ---------------------------------------------------------------
 *
 * One row per command, as git's commands[]: its operands, how it opens the
 * store, and the function that runs it. main() looks the name up once and
 * calls the row's handler; a new command is one row and one handler. */

enum {
  CMD_REBUILD = 1,     /* the operand (if any) names the store; its catalog may be missing */
  CMD_RO_FALLBACK = 2, /* a store locked by a writer is opened read-only (verify) */
};

/* a1, a2: the operands (NULL when absent); marking: the store is open as
 * the writer, so damage found may be recorded (verify) */
typedef int (*cmd_fn)(cli *c, const char *a1, const char *a2, int marking);

static int run_ls(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_ls(c);
}
static int run_show(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_show(c, a1);
}
static int run_restore(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_restore(c, a1);
}
static int run_verify(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_verify(c, a1, marking);
}
static int run_gc(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_gc(c);
}
static int run_pin(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_pin(c, a1, 1);
}
static int run_unpin(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_pin(c, a1, 0);
}
static int run_diff(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_diff(c, a1, a2);
}
static int run_rebuild(cli *c, const char *a1, const char *a2, int marking) {
  return cmd_rebuild(c);
}

static const struct ckpt_cmd {
  const char *name;
  int min, max; /* operands */
  int writer;   /* opens the store as its catalog's writer */
  int flags;    /* CMD_* */
  cmd_fn run;
} cmds[] = {
    {"ls", 0, 0, 0, 0, run_ls},
    {"show", 1, 1, 0, 0, run_show},
    {"restore", 1, 1, 0, 0, run_restore},
    {"verify", 0, 1, 1, CMD_RO_FALLBACK, run_verify},
    {"gc", 0, 0, 1, 0, run_gc},
    {"pin", 1, 1, 1, 0, run_pin},
    {"unpin", 1, 1, 1, 0, run_unpin},
    {"diff", 2, 2, 0, 0, run_diff},
    {"rebuild-catalog", 0, 1, 1, CMD_REBUILD, run_rebuild},
};

static const struct ckpt_cmd *cmd_find(const char *name) {
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (!strcmp(name, cmds[i].name))
      return &cmds[i];
  return NULL;
}

/* ---- main -------------------------------------------------------------------------- */

static int parse_int(const char *opt, const char *arg, int *v) {
  char *end;
  long x = strtol(arg, &end, 10);
  if (*end || end == arg || x < 0 || x > 1000000000)
    return usage_error(opt, arg);
  *v = (int)x;
  return 0;
}

int main(int argc, char **argv) {
  cli c = {.rank = -1, .grace = -1};
  c.store = getenv("CKPT_STORE");
  enum { O_STORE = 256, O_RUN, O_JSON, O_DRY, O_KL, O_KE, O_TO, O_WORLD, O_RANK, O_GRACE };
  static const struct option opts[] = {{"store", required_argument, 0, O_STORE},
                                       {"run", required_argument, 0, O_RUN},
                                       {"json", no_argument, 0, O_JSON},
                                       {"dry-run", no_argument, 0, O_DRY},
                                       {"keep-last", required_argument, 0, O_KL},
                                       {"keep-every", required_argument, 0, O_KE},
                                       {"to", required_argument, 0, O_TO},
                                       {"world", required_argument, 0, O_WORLD},
                                       {"rank", required_argument, 0, O_RANK},
                                       {"grace", required_argument, 0, O_GRACE},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
  int ch, grace = 0;
  char oerr[192];
  if (ft_opts_check(argc, argv, opts, oerr, sizeof oerr))
    return usage_error("%s", oerr);
  opterr = 0;
  while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    int e = 0;
    switch (ch) {
    case 'h':
      fputs(usage_text, stdout);
      return 0;
    case 'V':
      ft_version_print("ckpt");
      return 0;
    case O_STORE:
      c.store = optarg;
      break;
    case O_RUN:
      c.run = optarg;
      break;
    case O_JSON:
      c.json = 1;
      break;
    case O_DRY:
      c.dry_run = 1;
      break;
    case O_KL:
      e = parse_int("--keep-last needs a number >= 0, not '%s'", optarg, &c.keep_last);
      break;
    case O_KE:
      e = parse_int("--keep-every needs a number >= 0, not '%s'", optarg, &c.keep_every);
      break;
    case O_TO:
      c.to = optarg;
      break;
    case O_WORLD:
      e = parse_int("--world needs a number >= 1, not '%s'", optarg, &c.world);
      if (!e && c.world < 1)
        e = usage_error("--world needs a number >= 1, not '%s'", optarg);
      break;
    case O_RANK:
      e = parse_int("--rank needs a number >= 0, not '%s'", optarg, &c.rank);
      break;
    case O_GRACE:
      e = parse_int("--grace needs seconds >= 0, not '%s'", optarg, &grace);
      c.grace = grace;
      break;
    default:
      return usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
    }
    if (e)
      return e;
  }
  if (optind >= argc)
    return usage_error("no command given%s", "");
  const char *cmd = argv[optind];
  const char *a1 = optind + 1 < argc ? argv[optind + 1] : NULL;
  const char *a2 = optind + 2 < argc ? argv[optind + 2] : NULL;
  int nargs = argc - optind - 1;
  const struct ckpt_cmd *k = cmd_find(cmd);
  if (!k)
    return usage_error("unknown command '%s'", cmd);
  if (nargs < k->min || nargs > k->max)
    return usage_error("wrong number of arguments for '%s'", cmd);
  int rebuild = (k->flags & CMD_REBUILD) != 0;
  if (rebuild && a1)
    c.store = a1;
  if (!c.store || !c.store[0])
    return usage_error("no store: pass --store URI or set CKPT_STORE (e.g. local:state/store)%s",
                       "");
  if (c.run && !ckpt_run_name_ok(c.run))
    return usage_error("'%s' is not a valid run name", c.run);

  int marking = k->writer;
  int rc = open_store(&c, k->writer, rebuild);
  if (rc == FT_EBUSY && (k->flags & CMD_RO_FALLBACK)) {
    fprintf(stderr,
            "ckpt: note: %s\nckpt: verifying read-only; damaged checkpoints will be "
            "reported but not marked bad\n",
            ft_err_detail());
    marking = 0;
    rc = open_store(&c, 0, 0);
  }
  if (rc)
    return fail(rc, "cannot open the store");
  if (c.run && !rebuild && (rc = check_run(&c)) != FT_OK) {
    ckpt_store_free(c.s);
    return fail(rc, cmd);
  }
  int code = k->run(&c, a1, a2, marking);
  ckpt_store_free(c.s);
  return code;
}
