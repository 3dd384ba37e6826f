/*
 * ftdata: make, inspect and validate token shards (llm.c's .bin format).
 *
 *   ftdata encode --in TEXT --out PREFIX   byte-level tokenisation of a file
 *   ftdata synth  --out PREFIX             a small synthetic corpus with structure
 *                                          (PREFIX may be s3://bucket/prefix/name)
 *   ftdata stats  GLOB                     validate shards, print entropies
 *                                          (GLOB may be s3://bucket/prefix/glob)
 *
 * Why: the trainer reads only token shards; this tool makes them without
 * Python, and its entropies give a user the numbers to compare the training
 * loss with (a model that ignores context cannot beat the unigram entropy;
 * one that sees only the previous token cannot beat the bigram entropy).
 *
 * Tokens are bytes (vocab 256: token = byte value). The synthetic corpus is
 * a deterministic function of (seed, size): a fixed PRNG (splitmix64 seeding
 * xoshiro256**), never rand(). Validation is the loader's own (data_open),
 * so `ftdata stats` refuses exactly what training would refuse.
 *
 * Options go through getopt_long like the other programs, but with exact
 * names only: a typo or an abbreviation is a usage error that names the
 * option meant ("--tok" could otherwise silently mean "--tokens").
 *
 * Single-threaded program; exit codes in the help text below.
 */
#include "ckpt_s3_write.h"
#include "data.h"
#include "ft_err.h"
#include "ft_opts.h"
#include "ft_version.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK = 0, EXIT_BAD_DATA = 1, EXIT_USAGE = 2, EXIT_IO = 3 };

#define DEFAULT_SHARD_TOKENS 100000000ULL
#define DEFAULT_SYNTH_TOKENS 1000000ULL

static const char help_text[] =
    "ftdata: make, inspect and validate token shards for training.\n"
    "\n"
    "Shards use llm.c's .bin format: a header of 256 int32 (magic 20240520,\n"
    "version 1, token count) followed by uint16 tokens. The trainer reads a glob\n"
    "of shards (run file: data: {train: \"PREFIX_train_*.bin\", val: ...}) in\n"
    "sorted order as one token stream. This tool tokenises at the byte level:\n"
    "vocab_size 256, token = byte value.\n"
    "\n"
    "Usage:\n"
    "  ftdata encode --in TEXT_FILE --out PREFIX [--val-frac F] [--shard-tokens N]\n"
    "      Tokenise a file (\"-\" reads stdin). The last fraction F of the bytes\n"
    "      (default 0.1) becomes the validation split. Writes PREFIX_train_000.bin,\n"
    "      PREFIX_train_001.bin, ... and PREFIX_val_000.bin, at most N tokens per\n"
    "      shard (default 100000000). --val-frac 0 writes no val shard.\n"
    "      PREFIX may be s3://BUCKET/DIR/NAME: each shard becomes the object\n"
    "      DIR/NAME_train_000.bin, ... holding the bytes the file would, sent whole\n"
    "      (one PUT, or a multipart upload completed at its end) through the\n"
    "      checkpoint store's S3 client with the data bucket's endpoint and keys\n"
    "      (docs/data.md; the keys need PutObject and ListBucket); one line per\n"
    "      shard with the progress.\n"
    "\n"
    "  ftdata synth --out PREFIX [--tokens N] [--seed S] [--val-frac F] [--shard-tokens N]\n"
    "      Write a synthetic English-like corpus of N bytes in total (default\n"
    "      1000000; seed default 1337) with learnable structure: a few dozen words,\n"
    "      sentence templates, a subject name repeated through each paragraph,\n"
    "      nouns repeated within a sentence, matching brackets and quotes, and\n"
    "      counting sequences. A tiny GPT (2 layers, 64 channels, context 64) drives\n"
    "      its loss well below the unigram entropy within a few hundred steps.\n"
    "      The same seed and size always give the same bytes. --out as for encode\n"
    "      (s3:// too).\n"
    "\n"
    "  ftdata stats [--vocab V] [--json] GLOB\n"
    "      Validate the shards matching GLOB exactly as the trainer's loader does\n"
    "      (magic, version, file size, every token < V; default V 256), then print\n"
    "      the shard and token counts and two reference numbers for the loss:\n"
    "        unigram entropy H(x) in nats (and bits): the loss of the best model\n"
    "          that ignores context;\n"
    "        conditional bigram entropy H(x_t | x_t-1): the loss of the best model\n"
    "          that sees only the previous token.\n"
    "      Training loss is reported in nats; a model that learns more than bigram\n"
    "      statistics goes below the second number. (Both are plug-in estimates\n"
    "      from the data itself; on small corpora the bigram one is optimistic.)\n"
    "      Quote GLOB so the shell does not expand it. GLOB may name objects of a\n"
    "      bucket, s3://BUCKET/PREFIX/GLOB, read as the trainer reads them\n"
    "      (docs/data.md: endpoint, keys, cache directory).\n"
    "\n"
    "  ftdata --help | ftdata help | ftdata --version\n"
    "\n"
    "Option names are exact (no abbreviations); --name=VALUE and --name VALUE\n"
    "both work, and --help and --version go with any subcommand.\n"
    "\n"
    "Examples:\n"
    "  ftdata synth --out data/tiny\n"
    "  ftdata stats 'data/tiny_train_*.bin'\n"
    "  ftdata stats 's3://corpus/tiny/tiny_train_*.bin'\n"
    "  ftdata encode --in shakespeare.txt --out data/shakespeare --val-frac 0.05\n"
    "  ftdata encode --in shakespeare.txt --out s3://corpus/shakespeare/sh\n"
    "\n"
    "Exit codes:\n"
    "  0  success\n"
    "  1  bad data: a shard failed validation (the message names the file and\n"
    "     says what is wrong), no file matches GLOB, or the input is empty; an\n"
    "     s3:// shard changed or deleted since it was listed\n"
    "  2  usage error (unknown subcommand or option, bad or missing value)\n"
    "  3  I/O error: the input cannot be read or an output cannot be written (for\n"
    "     s3://: no such bucket, the keys refused (the message says where they came\n"
    "     from), the storage failing past its retries)\n";

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ftdata: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun `ftdata --help` for usage.\n");
  return EXIT_USAGE;
}

/* Exit code for a library error: format/content problems are bad data. */
static int exit_for(int rc) {
  return rc == FT_EFORMAT || rc == FT_ENOENT || rc == FT_ECORRUPT || rc == FT_ESTATE ? EXIT_BAD_DATA
                                                                                     : EXIT_IO;
}

/* ---- option parsing ------------------------------------------------------ */

/* Options are parsed with getopt_long, after ft_opts_check has made sure
 * that every "--name" the user typed is exactly one of the subcommand's
 * (getopt_long would take any unambiguous prefix: "--tok" for "--tokens",
 * and a typo of one option could silently be another's prefix). */

/* The options every subcommand takes. */
#define COMMON_OPTS                                                                                \
  {"help", no_argument, NULL, 'h'}, {                                                              \
    "version", no_argument, NULL, 'V'                                                              \
  }

/* getopt_long over argv (argv[0] the subcommand) after check_names. Calls
 * on(ch, optarg, user) for each option; returns 0 when all were taken, or the
 * exit code to end with (usage errors, --help, --version). Positional
 * arguments end up in argv[optind..argc-1] (getopt_long moves them last). */
typedef int (*opt_fn)(int ch, const char *arg, void *user);
static int parse_opts(const char *cmd, int argc, char **argv, const struct option *opts, opt_fn on,
                      void *user) {
  char err[192];
  if (ft_opts_check(argc, argv, opts, err, sizeof err))
    return usage_error("%s: %s", cmd, err);
  int rc;
  optind = 0; /* a full re-initialisation (GNU): each subcommand parses afresh */
  opterr = 0;
  int ch, li;
  while ((ch = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
    switch (ch) {
    case 'h':
      fputs(help_text, stdout);
      return EXIT_OK + 256; /* done, exit 0 */
    case 'V':
      ft_version_print("ftdata");
      return EXIT_OK + 256;
    case ':':
      return usage_error("%s: %s needs a value", cmd, argv[optind - 1]);
    case '?': /* names are checked: a short option, or a value given to a flag */
      if (!strncmp(argv[optind - 1], "--", 2))
        return usage_error("%s: option '%.*s' takes no value", cmd,
                           (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
      return usage_error("%s: unknown option '-%c'", cmd, optopt);
    default:
      rc = on(ch, optarg, user);
      if (rc)
        return rc;
    }
  }
  return 0;
}

/* parse_opts's "stop here with exit code 0" (help, version) vs a real code. */
static int finish(int rc) {
  return rc >= 256 ? rc - 256 : rc;
}

static int parse_u64(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out) {
  char *end;
  errno = 0;
  if (!*s || *s == '-')
    return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

static int parse_frac(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || !*s || *end || !(v >= 0.0 && v < 1.0))
    return -1;
  *out = v;
  return 0;
}

/* ---- writing splits ------------------------------------------------------ */

/* Where the shards go: files PREFIX_<split>_NNN.bin, or objects
 * s3://BUCKET/KEYPREFIX_<split>_NNN.bin sent through the store's S3 client
 * (ckpt_s3_write.h) with the bytes a file would hold. */
typedef struct sink {
  const char *prefix; /* as given (files: the path prefix) */
  ckpt_s3_writer *s3; /* NULL: files */
  const char *key;    /* s3: KEYPREFIX, the part after the bucket */
  char **had;         /* s3: the keys under KEYPREFIX_ before writing */
  size_t nhad, caphad;
  uint64_t bytes_done; /* s3: bytes uploaded so far, of bytes_all */
  uint64_t bytes_all;
  double t0;
} sink;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int on_had(void *ud, const char *key, uint64_t size) {
  (void)size;
  sink *k = ud;
  if (k->nhad == k->caphad) {
    size_t cap = k->caphad ? 2 * k->caphad : 16;
    char **n = realloc(k->had, cap * sizeof *n);
    if (!n)
      return ft_err_set(FT_ENOMEM, "out of memory listing the bucket");
    k->had = n;
    k->caphad = cap;
  }
  if (!(k->had[k->nhad] = strdup(key)))
    return ft_err_set(FT_ENOMEM, "out of memory listing the bucket");
  k->nhad++;
  return 0;
}

/* One shard: a file written crash-safe (data_write_shard), or one object
 * whose bytes are that file's (header of DATA_HEADER_INTS int32, tokens). */
static int sink_put(sink *k, const char *name, const uint16_t *tok, uint64_t m) {
  if (!k->s3) {
    int rc = data_write_shard(name, tok, m);
    if (!rc)
      printf("wrote %s (%llu tokens)\n", name, (unsigned long long)m);
    return rc;
  }
  size_t hb = DATA_HEADER_INTS * sizeof(int32_t), len = hb + (size_t)m * sizeof *tok;
  unsigned char *obj = calloc(1, len);
  if (!obj)
    return ft_err_set(FT_ENOMEM, "out of memory for %s", name);
  int32_t h[DATA_HEADER_INTS] = {DATA_MAGIC, DATA_VERSION, (int32_t)m};
  memcpy(obj, h, hb);
  if (m)
    memcpy(obj + hb, tok, (size_t)m * sizeof *tok);
  const char *key = name + strlen("s3://") + strlen(ckpt_s3_writer_bucket(k->s3)) + 1;
  double t = now_s();
  int rc = ckpt_s3_writer_put(k->s3, key, obj, len);
  free(obj);
  if (rc)
    return rc;
  k->bytes_done += len;
  double dt = now_s() - t, all = now_s() - k->t0;
  printf("uploaded %s (%llu tokens, %.1f MiB in %.1f s; %.0f%% of %.1f MiB, %.1f MiB/s)\n", name,
         (unsigned long long)m, (double)len / 1048576.0, dt,
         k->bytes_all ? 100.0 * (double)k->bytes_done / (double)k->bytes_all : 100.0,
         (double)k->bytes_all / 1048576.0, all > 0 ? (double)k->bytes_done / 1048576.0 / all : 0.0);
  fflush(stdout);
  return FT_OK;
}

/* 1 if name is left over from an earlier, larger run. */
static int sink_has(const sink *k, const char *name) {
  if (!k->s3) {
    struct stat st;
    return stat(name, &st) == 0;
  }
  const char *key = name + strlen("s3://") + strlen(ckpt_s3_writer_bucket(k->s3)) + 1;
  for (size_t i = 0; i < k->nhad; i++)
    if (!strcmp(k->had[i], key))
      return 1;
  return 0;
}

/* Writes bytes as PREFIX_<split>_NNN.bin shards of at most shard_tokens each
 * (always at least one shard). Prints each shard written. */
static int write_split(sink *k, const char *split, const unsigned char *bytes, uint64_t n,
                       uint64_t shard_tokens) {
  const char *prefix = k->prefix;
  uint64_t per = n < shard_tokens ? n : shard_tokens;
  uint16_t *tok = malloc((per ? per : 1) * sizeof *tok);
  size_t plen = strlen(prefix) + strlen(split) + 32;
  char *path = malloc(plen);
  int rc = FT_OK;
  if (!tok || !path) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  uint64_t done = 0;
  int i = 0;
  do {
    uint64_t m = n - done < shard_tokens ? n - done : shard_tokens;
    for (uint64_t j = 0; j < m; j++)
      tok[j] = bytes[done + j];
    snprintf(path, plen, "%s_%s_%03d.bin", prefix, split, i);
    rc = sink_put(k, path, tok, m);
    if (rc)
      goto out;
    done += m;
    i++;
  } while (done < n);
  /* A stale higher-numbered shard from an earlier, larger run would be
   * picked up by the glob and silently mix data: say so. */
  for (;; i++) {
    snprintf(path, plen, "%s_%s_%03d.bin", prefix, split, i);
    if (!sink_has(k, path))
      break;
    fprintf(stderr,
            "ftdata: warning: %s is left from an earlier run and matches %s_%s_*.bin; "
            "delete it or the trainer will read it too\n",
            path, prefix, split);
  }
out:
  free(path);
  free(tok);
  return rc;
}

/* mkdir -p of the directory part of prefix, so `--out data/tiny` just works. */
static int make_parent_dirs(const char *prefix) {
  char *p = strdup(prefix);
  if (!p)
    return ft_err_set(FT_ENOMEM, "out of memory");
  char *slash = strrchr(p, '/');
  int rc = FT_OK;
  if (slash && slash != p) {
    *slash = '\0';
    for (char *q = p + 1; *q && !rc; q++) {
      if (*q != '/')
        continue;
      *q = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST)
        rc = ft_err_set(FT_EIO, "cannot create directory %s: %s", p, strerror(errno));
      *q = '/';
    }
    if (!rc && mkdir(p, 0777) != 0 && errno != EEXIST)
      rc = ft_err_set(FT_EIO, "cannot create directory %s: %s", p, strerror(errno));
  }
  free(p);
  return rc;
}

/* --out s3://BUCKET/KEYPREFIX: a name after the bucket, no glob character
 * (the keys would not be what a glob of them matches). */
static int check_s3_out(const char *out) {
  if (strncmp(out, "s3://", 5) != 0)
    return 0;
  const char *b = out + 5, *slash = strchr(b, '/');
  if (slash == b || !slash || !slash[1] || slash[strlen(slash) - 1] == '/')
    return usage_error("--out '%s': write s3://BUCKET/NAME or s3://BUCKET/DIR/NAME (the shards are "
                       "NAME_train_000.bin, ...)",
                       out);
  if (strpbrk(out, "*?[\\"))
    return usage_error("--out '%s': no glob characters (* ? [ \\) in a key prefix", out);
  return 0;
}

/* Opens the sink of prefix; for s3://, one LIST of KEYPREFIX_ first: the
 * bucket exists and takes the keys before any work is done, and the keys an
 * earlier run left are known for the stale-shard warning. */
static int sink_open(sink *k, const char *prefix, uint64_t bytes_all) {
  memset(k, 0, sizeof *k);
  k->prefix = prefix;
  k->bytes_all = bytes_all;
  k->t0 = now_s();
  if (strncmp(prefix, "s3://", 5) != 0)
    return make_parent_dirs(prefix);
  int rc = ckpt_s3_writer_open(prefix, NULL, &k->s3);
  if (rc)
    return rc;
  k->key = prefix + 5 + strlen(ckpt_s3_writer_bucket(k->s3)) + 1;
  size_t l = strlen(k->key);
  char *lp = malloc(l + 2);
  if (!lp)
    return ft_err_set(FT_ENOMEM, "out of memory");
  memcpy(lp, k->key, l);
  memcpy(lp + l, "_", 2);
  rc = ckpt_s3_writer_list(k->s3, lp, on_had, k);
  free(lp);
  if (rc) { /* the client's detail names the LIST request; say what it was for */
    char d[2048];
    snprintf(d, sizeof d, "%s", ft_err_detail());
    rc = ft_err_set(rc, "cannot write s3://%s/%s_*.bin: %s", ckpt_s3_writer_bucket(k->s3), k->key,
                    d);
  }
  if (!rc)
    printf("writing to s3://%s/%s_* at %s\n", ckpt_s3_writer_bucket(k->s3), k->key,
           ckpt_s3_writer_where(k->s3));
  return rc;
}

static void sink_close(sink *k) {
  if (k->s3) {
    ckpt_s3_writer_stats st;
    ckpt_s3_writer_stats_get(k->s3, &st);
    double dt = now_s() - k->t0;
    printf("s3: %llu requests (%llu retried), %.1f MiB up in %.1f s\n",
           (unsigned long long)st.requests, (unsigned long long)st.retries,
           (double)st.bytes_up / 1048576.0, dt);
  }
  for (size_t i = 0; i < k->nhad; i++)
    free(k->had[i]);
  free(k->had);
  ckpt_s3_writer_free(k->s3);
}

/* The bytes the shards of n tokens take (headers included), for progress. */
static uint64_t split_bytes(uint64_t n, uint64_t shard_tokens) {
  uint64_t shards = n ? (n + shard_tokens - 1) / shard_tokens : 1;
  return shards * DATA_HEADER_INTS * sizeof(int32_t) + 2 * n;
}

static int write_splits(const char *prefix, const unsigned char *bytes, uint64_t n, double val_frac,
                        uint64_t shard_tokens) {
  uint64_t nval = (uint64_t)((double)n * val_frac);
  if (val_frac > 0 && nval == 0 && n > 1)
    nval = 1;
  uint64_t all =
      split_bytes(n - nval, shard_tokens) + (val_frac > 0 ? split_bytes(nval, shard_tokens) : 0);
  sink k;
  int rc = sink_open(&k, prefix, all);
  if (!rc)
    rc = write_split(&k, "train", bytes, n - nval, shard_tokens);
  if (!rc && val_frac > 0)
    rc = write_split(&k, "val", bytes + (n - nval), nval, shard_tokens);
  if (rc) {
    fprintf(stderr, "ftdata: %s\n", ft_err_detail());
    if (k.s3 && k.bytes_done)
      fprintf(stderr, "ftdata: the shards listed as uploaded above are complete; no object is "
                      "ever left half-written\n");
    sink_close(&k);
    return EXIT_IO;
  }
  sink_close(&k);
  printf("train: %llu tokens, val: %llu tokens, vocab_size 256 (byte-level)\n",
         (unsigned long long)(n - nval), (unsigned long long)nval);
  printf("check them with: ftdata stats '%s_train_*.bin'\n", prefix);
  return EXIT_OK;
}

/* ---- encode -------------------------------------------------------------- */

typedef struct split_opts {
  const char *in, *out;
  double val_frac;
  unsigned long long shard_tokens, ntok, seed;
} split_opts;

/* The options of encode and synth (each table lists the ones it takes). */
static int on_split_opt(int ch, const char *v, void *user) {
  split_opts *o = user;
  switch (ch) {
  case 'i':
    o->in = v;
    return 0;
  case 'o':
    o->out = v;
    return 0;
  case 'f':
    if (parse_frac(v, &o->val_frac))
      return usage_error("--val-frac needs a number in [0, 1), got '%s'", v);
    return 0;
  case 'k':
    if (parse_u64(v, 1, INT32_MAX, &o->shard_tokens))
      return usage_error("--shard-tokens needs an integer in 1..%d, got '%s'", INT32_MAX, v);
    return 0;
  case 't':
    if (parse_u64(v, 2, 1ULL << 36, &o->ntok))
      return usage_error("--tokens needs an integer in 2..%llu, got '%s'", 1ULL << 36, v);
    return 0;
  case 's':
    if (parse_u64(v, 0, UINT64_MAX, &o->seed))
      return usage_error("--seed needs a non-negative integer, got '%s'", v);
    return 0;
  }
  return usage_error("unhandled option");
}

static int cmd_encode(int argc, char **argv) {
  static const struct option opts[] = {{"in", required_argument, NULL, 'i'},
                                       {"out", required_argument, NULL, 'o'},
                                       {"val-frac", required_argument, NULL, 'f'},
                                       {"shard-tokens", required_argument, NULL, 'k'},
                                       COMMON_OPTS,
                                       {NULL, 0, NULL, 0}};
  split_opts o = {.val_frac = 0.1, .shard_tokens = DEFAULT_SHARD_TOKENS};
  int rc = parse_opts("encode", argc, argv, opts, on_split_opt, &o);
  if (rc)
    return finish(rc);
  if (optind < argc)
    return usage_error("encode: unexpected argument '%s'", argv[optind]);
  const char *in = o.in, *out = o.out;
  double val_frac = o.val_frac;
  unsigned long long shard_tokens = o.shard_tokens;
  if (!in || !out)
    return usage_error("encode needs --in TEXT_FILE and --out PREFIX");
  if ((rc = check_s3_out(out)))
    return rc;

  FILE *fp = strcmp(in, "-") ? fopen(in, "rb") : stdin;
  if (!fp) {
    fprintf(stderr, "ftdata: cannot open input %s: %s\n", in, strerror(errno));
    return EXIT_IO;
  }
  size_t cap = 1 << 20, n = 0;
  unsigned char *buf = malloc(cap);
  int code = EXIT_OK;
  for (;;) {
    if (!buf) {
      fprintf(stderr, "ftdata: out of memory reading %s\n", in);
      code = EXIT_IO;
      goto out;
    }
    size_t got = fread(buf + n, 1, cap - n, fp);
    n += got;
    if (n < cap) {
      if (ferror(fp)) {
        fprintf(stderr, "ftdata: error reading %s: %s\n", in, strerror(errno));
        code = EXIT_IO;
        goto out;
      }
      break;
    }
    cap *= 2;
    unsigned char *nb = realloc(buf, cap);
    if (!nb)
      free(buf);
    buf = nb;
  }
  if (n == 0) {
    fprintf(stderr, "ftdata: %s is empty: nothing to encode\n", in);
    code = EXIT_BAD_DATA;
    goto out;
  }
  printf("read %s: %zu bytes\n", in, n);
  code = write_splits(out, buf, n, val_frac, shard_tokens);
out:
  free(buf);
  if (fp != stdin)
    fclose(fp);
  return code;
}

/* ---- synth --------------------------------------------------------------- */

typedef struct {
  uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++)
    r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static uint64_t rng_next(rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

/* Uniform in [0, n) (multiply-shift; bias below 2^-32, irrelevant here). */
static unsigned rng_below(rng *r, unsigned n) {
  return (unsigned)(((rng_next(r) >> 32) * n) >> 32);
}

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
static const char *const names[] = {"Alice", "Bob",   "Carol", "Dave",
                                    "Erin",  "Frank", "Grace", "Heidi"};
static const char *const nouns[] = {"cat",  "dog",  "bird",   "house",  "river", "tree",
                                    "book", "lamp", "garden", "window", "apple", "stone"};
static const char *const adjs[] = {"red",   "small",  "old",   "green",
                                   "quiet", "bright", "heavy", "blue"};
static const char *const verbs[] = {"saw",     "found", "took", "liked",
                                    "painted", "moved", "lost", "kept"};
static const char *const preps[] = {"near", "under", "behind", "over", "beside"};
static const char *const numbers[] = {"one", "two", "three", "four", "five", "six"};

typedef struct {
  unsigned char *buf;
  size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *s) {
  while (*s && b->len < b->cap)
    b->buf[b->len++] = (unsigned char)*s++;
}

#define PICK(r, a) ((a)[rng_below((r), NELEM(a))])

/* One sentence about subject S (other: another name) into b. The template
 * depends on the previous one (a small Markov chain over templates). */
static int sentence(sbuf *b, rng *r, const char *S, const char *other, int prev) {
  /* After a quote comes a bracket sentence half the time; otherwise uniform. */
  int t = (prev == 2 && rng_below(r, 2)) ? 3 : (int)rng_below(r, 6);
  const char *n1 = PICK(r, nouns), *n2 = PICK(r, nouns);
  switch (t) {
  case 0: /* the noun comes back in the next sentence */
    put(b, S), put(b, " "), put(b, PICK(r, verbs)), put(b, " the "), put(b, PICK(r, adjs));
    put(b, " "), put(b, n1), put(b, ". The "), put(b, n1), put(b, " was "), put(b, PICK(r, adjs));
    put(b, ".");
    break;
  case 1:
    put(b, S), put(b, " "), put(b, PICK(r, verbs)), put(b, strchr("aeiou", n1[0]) ? " an " : " a ");
    put(b, n1), put(b, " ");
    put(b, PICK(r, preps)), put(b, " the "), put(b, n2), put(b, ".");
    break;
  case 2: /* quotes must close */
    put(b, S), put(b, " said \"the "), put(b, n1), put(b, " is "), put(b, PICK(r, adjs));
    put(b, "\" to "), put(b, other), put(b, ".");
    break;
  case 3: /* brackets must close */
    put(b, S), put(b, " (who was "), put(b, PICK(r, adjs)), put(b, ") "), put(b, PICK(r, verbs));
    put(b, " the "), put(b, n1), put(b, ".");
    break;
  case 4:
    put(b, S), put(b, " and "), put(b, other), put(b, " "), put(b, PICK(r, verbs)), put(b, " the ");
    put(b, n1), put(b, ", the "), put(b, n2), put(b, " and the "), put(b, PICK(r, nouns));
    put(b, ".");
    break;
  default: { /* counting: fully predictable once started */
    unsigned k = 2 + rng_below(r, NELEM(numbers) - 1);
    put(b, S), put(b, " counted ");
    for (unsigned i = 0; i < k; i++)
      put(b, numbers[i]), put(b, i + 1 < k ? ", " : ".");
    break;
  }
  }
  return t;
}

/* Fills b->buf with exactly b->cap bytes of paragraphs. */
static void synth_corpus(sbuf *b, uint64_t seed) {
  rng r;
  rng_seed(&r, seed);
  while (b->len < b->cap) {
    unsigned si = rng_below(&r, NELEM(names));
    unsigned oi = (si + 1 + rng_below(&r, NELEM(names) - 1)) % NELEM(names);
    int ns = 3 + (int)rng_below(&r, 4), prev = -1;
    for (int k = 0; k < ns; k++) {
      if (k)
        put(b, " ");
      prev = sentence(b, &r, names[si], names[oi], prev);
    }
    put(b, "\n");
  }
}

static int cmd_synth(int argc, char **argv) {
  static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                       {"tokens", required_argument, NULL, 't'},
                                       {"seed", required_argument, NULL, 's'},
                                       {"val-frac", required_argument, NULL, 'f'},
                                       {"shard-tokens", required_argument, NULL, 'k'},
                                       COMMON_OPTS,
                                       {NULL, 0, NULL, 0}};
  split_opts o = {.val_frac = 0.1,
                  .shard_tokens = DEFAULT_SHARD_TOKENS,
                  .ntok = DEFAULT_SYNTH_TOKENS,
                  .seed = 1337};
  int rc = parse_opts("synth", argc, argv, opts, on_split_opt, &o);
  if (rc)
    return finish(rc);
  if (optind < argc)
    return usage_error("synth: unexpected argument '%s'", argv[optind]);
  const char *out = o.out;
  double val_frac = o.val_frac;
  unsigned long long ntok = o.ntok, seed = o.seed, shard_tokens = o.shard_tokens;
  if (!out)
    return usage_error("synth needs --out PREFIX");
  if ((rc = check_s3_out(out)))
    return rc;
  sbuf b = {.buf = malloc(ntok), .len = 0, .cap = ntok};
  if (!b.buf) {
    fprintf(stderr, "ftdata: out of memory for %llu tokens\n", ntok);
    return EXIT_IO;
  }
  synth_corpus(&b, seed);
  printf("synthesised %llu bytes (seed %llu)\n", ntok, seed);
  int code = write_splits(out, b.buf, ntok, val_frac, shard_tokens);
  free(b.buf);
  return code;
}

/* ---- stats --------------------------------------------------------------- */

/* Open-addressing counts of bigram keys (a << 16 | b); EMPTY marks a free slot. */
#define EMPTY UINT64_MAX
typedef struct {
  uint64_t *key, *cnt;
  size_t cap, used;
} bimap;

static size_t bimap_slot(const bimap *m, uint64_t k) {
  uint64_t h = k * 0x9e3779b97f4a7c15ULL;
  size_t i = (size_t)(h >> 20) & (m->cap - 1);
  while (m->key[i] != EMPTY && m->key[i] != k)
    i = (i + 1) & (m->cap - 1);
  return i;
}

static int bimap_grow(bimap *m) {
  bimap n = {.cap = m->cap ? m->cap * 2 : 1 << 12};
  n.key = malloc(n.cap * sizeof *n.key);
  n.cnt = calloc(n.cap, sizeof *n.cnt);
  if (!n.key || !n.cnt) {
    free(n.key);
    free(n.cnt);
    return -1;
  }
  memset(n.key, 0xff, n.cap * sizeof *n.key);
  for (size_t i = 0; i < m->cap; i++) {
    if (m->key[i] == EMPTY)
      continue;
    size_t j = bimap_slot(&n, m->key[i]);
    n.key[j] = m->key[i];
    n.cnt[j] = m->cnt[i];
    n.used++;
  }
  free(m->key);
  free(m->cnt);
  *m = n;
  return 0;
}

static int bimap_add(bimap *m, uint64_t k) {
  if (2 * (m->used + 1) > m->cap && bimap_grow(m))
    return -1;
  size_t i = bimap_slot(m, k);
  if (m->key[i] == EMPTY) {
    m->key[i] = k;
    m->used++;
  }
  m->cnt[i]++;
  return 0;
}

typedef struct {
  uint64_t tokens, distinct, distinct_bigrams;
  int max_token;
  double h1, h2; /* nats */
} corpus_stats;

/* Counts unigrams and bigrams of the concatenated stream through the
 * loader's own sequence API, so stats see exactly what training sees. */
static int compute_stats(const data_loader *dl, corpus_stats *cs) {
  int rc = FT_OK;
  uint64_t N = data_num_tokens(dl);
  uint64_t *uni = calloc(65536, sizeof *uni), *first = calloc(65536, sizeof *first);
  int32_t *inp = NULL, *tgt = NULL;
  bimap bm = {0};
  memset(cs, 0, sizeof *cs);
  cs->tokens = N;
  cs->max_token = -1;
  int T = N - 1 < 65536 ? (int)(N - 1) : 65536;
  if (T < 1)
    T = 1;
  inp = malloc((size_t)T * sizeof *inp);
  tgt = malloc((size_t)T * sizeof *tgt);
  if (!uni || !first || !inp || !tgt || bimap_grow(&bm)) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  if (N >= 2) {
    uint64_t nseq = data_num_sequences(dl, T), last = 0;
    /* Bigram positions [0, nseq*T) in chunks of T, the rest one at a time
     * (with T = 1, sequence p is exactly the pair (tok[p], tok[p+1])). */
    for (uint64_t p = 0; p < N - 1;) {
      int chunk = p < nseq * (uint64_t)T ? T : 1;
      rc = data_sequence(dl, chunk == T ? p / (uint64_t)T : p, chunk, inp, tgt);
      if (rc)
        goto out;
      for (int j = 0; j < chunk; j++) {
        uni[inp[j]]++;
        first[inp[j]]++;
        if (bimap_add(&bm, (uint64_t)inp[j] << 16 | (uint64_t)tgt[j])) {
          rc = ft_err_set(FT_ENOMEM, "out of memory counting bigrams");
          goto out;
        }
      }
      last = (uint64_t)tgt[chunk - 1];
      p += (uint64_t)chunk;
    }
    uni[last]++;
  }
  /* N == 1: the loader has no sequence to show; the counts stay empty. */
  double h1 = 0, h2 = 0;
  for (int a = 0; a < 65536; a++) {
    if (!uni[a])
      continue;
    cs->distinct++;
    cs->max_token = a;
    double p = (double)uni[a] / (double)N;
    h1 -= p * log(p);
  }
  if (N >= 2) {
    for (size_t i = 0; i < bm.cap; i++) {
      if (bm.key[i] == EMPTY)
        continue;
      cs->distinct_bigrams++;
      double c = (double)bm.cnt[i];
      h2 -= c / (double)(N - 1) * log(c / (double)first[bm.key[i] >> 16]);
    }
  }
  cs->h1 = h1;
  cs->h2 = h2;
out:
  free(bm.key);
  free(bm.cnt);
  free(tgt);
  free(inp);
  free(first);
  free(uni);
  return rc;
}

typedef struct stats_opts {
  int json;
  unsigned long long vocab;
} stats_opts;

static int on_stats_opt(int ch, const char *v, void *user) {
  stats_opts *o = user;
  if (ch == 'j') {
    o->json = 1;
    return 0;
  }
  if (parse_u64(v, 1, 65536, &o->vocab))
    return usage_error("--vocab needs an integer in 1..65536, got '%s'", v);
  return 0;
}

static int cmd_stats(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"vocab", required_argument, NULL, 'v'},
                                       COMMON_OPTS,
                                       {NULL, 0, NULL, 0}};
  stats_opts o = {.vocab = 256};
  int rc = parse_opts("stats", argc, argv, opts, on_stats_opt, &o);
  if (rc)
    return finish(rc);
  const char *pattern = optind < argc ? argv[optind] : NULL;
  if (optind + 1 < argc)
    return usage_error("stats takes one GLOB (quote it: 'data/train_*.bin'); got '%s' and '%s'",
                       argv[optind], argv[optind + 1]);
  int json = o.json;
  unsigned long long vocab = o.vocab;
  if (!pattern)
    return usage_error("stats needs a GLOB, e.g. ftdata stats 'data/tiny_train_*.bin'");
  data_loader *dl = NULL;
  rc = data_open(pattern, (int)vocab, &dl);
  if (rc) {
    fprintf(stderr, "ftdata: %s\n", ft_err_detail());
    return exit_for(rc);
  }
  corpus_stats cs;
  rc = compute_stats(dl, &cs);
  if (rc) { /* an s3:// read: a changed or gone object is bad data */
    fprintf(stderr, "ftdata: %s\n", ft_err_detail());
    data_free(dl);
    return exit_for(rc);
  }
  const double L2 = log(2.0);
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "glob", pattern);
    cJSON_AddNumberToObject(o, "shards", data_num_shards(dl));
    cJSON_AddNumberToObject(o, "tokens", (double)cs.tokens);
    cJSON_AddNumberToObject(o, "vocab_size", (double)vocab);
    cJSON_AddNumberToObject(o, "distinct_tokens", (double)cs.distinct);
    cJSON_AddNumberToObject(o, "max_token", cs.max_token);
    cJSON_AddNumberToObject(o, "distinct_bigrams", (double)cs.distinct_bigrams);
    cJSON_AddNumberToObject(o, "unigram_entropy_nats", cs.h1);
    cJSON_AddNumberToObject(o, "unigram_entropy_bits", cs.h1 / L2);
    cJSON_AddNumberToObject(o, "bigram_entropy_nats", cs.h2);
    cJSON_AddNumberToObject(o, "bigram_entropy_bits", cs.h2 / L2);
    char *s = cJSON_Print(o);
    if (s)
      printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
  } else {
    printf("glob:              %s\n", pattern);
    printf("shards:            %d (all valid for vocab_size %llu)\n", data_num_shards(dl), vocab);
    printf("tokens:            %llu\n", (unsigned long long)cs.tokens);
    printf("distinct tokens:   %llu (largest id %d)\n", (unsigned long long)cs.distinct,
           cs.max_token);
    printf("unigram entropy:   %.4f nats/token (%.4f bits): loss of the best context-free "
           "model\n",
           cs.h1, cs.h1 / L2);
    printf("bigram entropy:    %.4f nats/token (%.4f bits): loss of the best model that sees "
           "one previous token\n",
           cs.h2, cs.h2 / L2);
    printf("uniform baseline:  %.4f nats/token (ln %llu): loss of an untrained model\n",
           log((double)vocab), vocab);
  }
  data_free(dl);
  return EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return usage_error("missing subcommand (encode, synth or stats)");
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    fputs(help_text, stdout);
    return EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) {
    ft_version_print("ftdata");
    return EXIT_OK;
  }
  /* Each subcommand parses argv + 1: its own name is getopt's argv[0]. */
  if (!strcmp(cmd, "encode"))
    return cmd_encode(argc - 1, argv + 1);
  if (!strcmp(cmd, "synth"))
    return cmd_synth(argc - 1, argv + 1);
  if (!strcmp(cmd, "stats"))
    return cmd_stats(argc - 1, argv + 1);
  if (cmd[0] == '-')
    return usage_error("'%s' before a subcommand: write `ftdata SUBCOMMAND [OPTIONS]` (encode, "
                       "synth or stats)",
                       cmd);
  return usage_error("unknown subcommand '%s' (expected encode, synth or stats)", cmd);
}
