/*
 * sup_seal: what the supervisor keeps in its state directory DIR because it
 * must hold across restarts and across a catalog rebuilt from the
 * manifests: the run file's snapshot with its seal, and the generation
 * floor.
 *
 * THE SNAPSHOT AND ITS SEAL. At every start the run file is read once into
 * memory, hashed (SHA-256) and written whole to DIR/run.yaml (renamed in);
 * every worker the supervisor launches reads that copy. Its hash and its
 * config (ft_runfile_config_json: model, train, data; parsed under the
 * snapshot's name so relative data globs read alike) go to DIR/run.seal.json
 * {"sha256", "config", "source", "sealed_at"}, and the hash to the
 * run_started event (runfile_sha256).
 *  - Before every launch round (the first gang: sup_main.c run; each
 *    recovery round: sup_recovery.c plan_and_launch) sup_seal_check hashes
 *    the copy again. One that no longer matches is never launched: event
 *    runfile_changed {path, sealed_sha256, sha256, changed} and the
 *    caller fails the run (exit 1) with the reason it is handed, naming
 *    the file, the config keys that differ (or that none of them does:
 *    another section, comments) and how to apply a change. It reads one small file (at most
 *    FT_RUNFILE_MAX_BYTES, a few KB in practice) once per round, never per
 *    worker: cheap enough for the loop; the parse runs only on a mismatch.
 *  - At a start on a DIR sealed before (sup_seal_snapshot), the run file
 *    given is compared with the seal: a different one is refused (exit 2,
 *    naming the keys) unless --accept-runfile-change, which seals the new
 *    one (event runfile_change_accepted). A snapshot edited in place since
 *    is replaced by the run file's copy, with a warning naming what the
 *    edit had changed. supervise run on DIR/run.yaml itself is the same
 *    comparison. A DIR without a seal (a new run, or one from before
 *    seals) is sealed without a comparison.
 *  The command line's --set and --steps are not sealed: they are given
 *  deliberately at the start they apply to.
 *
 * THE GENERATION FLOOR. The generation lives in the catalog's run state
 * (sup_run.c sup_persist), which a catalog rebuilt from the manifests
 * (ckpt rebuild-catalog, a new s3:// cache) has lost: manifests record no
 * generation. sup_persist also writes DIR/generation ("G\n", written whole
 * and renamed in, only when G grew), before the generation is used, and a
 * start takes the one after the higher of the catalog's and the file's
 * (sup_main.c load_run_state): a generation is never used twice while DIR
 * lives. An s3:// bucket alone on a new machine (no DIR) starts again at 1.
 *
 * Single-threaded: main before the loop, then the loop.
 */
#include "sup_int.h"

#include "ft_err.h"
#include "ft_file.h"
#include "ft_hex.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SEAL_FILE "run.seal.json"
#define GEN_FILE "generation"

/* ---- small helpers ---------------------------------------------------------- */

/* The whole of path (at most max bytes; one more is FT_EFORMAT), malloc'd
 * and NUL-terminated in *out, its length in *len. FT_ENOENT when absent. */
static int read_small(const char *path, size_t max, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ft_err_set(ft_err_from_errno(errno), "%s: %s", path, strerror(errno));
  char *buf = malloc(max + 2);
  if (!buf) {
    close(fd);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  size_t n = 0;
  for (;;) {
    ssize_t k = read(fd, buf + n, max + 1 - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      int e = errno;
      close(fd);
      free(buf);
      return ft_err_set(ft_err_from_errno(e), "%s: read: %s", path, strerror(e));
    }
    if (k == 0 || (n += (size_t)k) > max)
      break;
  }
  close(fd);
  if (n > max) {
    free(buf);
    return ft_err_set(FT_EFORMAT, "%s: larger than %zu bytes", path, max);
  }
  buf[n] = 0;
  *out = buf;
  *len = n;
  return FT_OK;
}

static int sha256_hex(const void *p, size_t n, char out[65]) {
  unsigned char h[32];
  unsigned hl = 0;
  if (!EVP_Digest(p, n, h, &hl, EVP_sha256(), NULL) || hl != 32)
    return ft_err_set(FT_EIO, "SHA-256 failed (OpenSSL EVP_Digest)");
  ft_hex_encode(h, 32, out);
  return FT_OK;
}

static int write_whole(const char *path, const char *text, size_t len) {
  ft_afile af;
  int rc = ft_afile_open(&af, path);
  if (rc)
    return rc;
  rc = ft_afile_write(&af, text, len);
  if (rc) {
    ft_afile_abort(&af);
    return rc;
  }
  return ft_afile_commit(&af);
}

static void state_path(const sup *s, const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/%s", s->state_dir, name);
}

/* The config JSON of a run file's text, parsed as if it were the snapshot
 * (malloc'd); NULL with why set when it does not parse. */
static char *config_of(const sup *s, const char *text, size_t len, char *why, size_t nwhy) {
  char snap[4200];
  state_path(s, "run.yaml", snap, sizeof snap);
  ft_runfile *rf = malloc(sizeof *rf);
  if (!rf) {
    snprintf(why, nwhy, "out of memory");
    return NULL;
  }
  char *out = NULL;
  if (ft_runfile_parse(snap, text, len, rf, why, nwhy) == FT_OK &&
      !(out = ft_runfile_config_json(rf)))
    snprintf(why, nwhy, "its config has no JSON form");
  free(rf);
  return out;
}

/* "section.key: was -> now" for every key of the two config JSONs that
 * differs, "; "-separated, into out; 0 when none does. */
static int config_diff(const char *was, const char *now, char *out, size_t n) {
  cJSON *a = cJSON_Parse(was ? was : "{}"), *b = cJSON_Parse(now ? now : "{}"), *sec, *it;
  int k = 0;
  size_t len = 0;
  out[0] = 0;
  for (int pass = 0; pass < 2; pass++) { /* keys of a, then keys only b has */
    cJSON *x = pass ? b : a, *y = pass ? a : b;
    cJSON_ArrayForEach(sec, x) {
      cJSON_ArrayForEach(it, sec) {
        cJSON *other = cJSON_GetObjectItem(cJSON_GetObjectItem(y, sec->string), it->string);
        if (pass && other)
          continue; /* compared in the first pass */
        if (other && cJSON_Compare(it, other, 1))
          continue;
        char *v1 = cJSON_PrintUnformatted(pass ? other : it);
        char *v2 = cJSON_PrintUnformatted(pass ? it : other);
        if (len < n)
          len += (size_t)snprintf(out + len, n - len, "%s%s.%s: %s -> %s", k ? "; " : "",
                                  sec->string, it->string, v1 ? v1 : "(none)", v2 ? v2 : "(none)");
        free(v1);
        free(v2);
        k++;
      }
    }
  }
  cJSON_Delete(a);
  cJSON_Delete(b);
  return k;
}

/* What changed between the sealed config and text (a run file), in words. */
static void describe_change(const sup *s, const char *sealed_config, const char *text, size_t len,
                            char *out, size_t n) {
  char why[1024];
  char *cfg = config_of(s, text, len, why, sizeof why);
  if (!cfg)
    snprintf(out, n, "it no longer parses: %s", why);
  else if (!config_diff(sealed_config, cfg, out, n))
    snprintf(out, n,
             "no key of model/train/data differs: the change is in another section, or "
             "in comments and layout");
  free(cfg);
}

/* ---- the seal ----------------------------------------------------------------- */

/* DIR/run.seal.json: its hash and config (config malloc'd). FT_ENOENT: none. */
static int seal_read(const sup *s, char sha[65], char **config) {
  char path[4200], *txt = NULL;
  size_t len;
  *config = NULL;
  state_path(s, SEAL_FILE, path, sizeof path);
  int rc = read_small(path, 1 << 20, &txt, &len);
  if (rc)
    return rc;
  cJSON *o = cJSON_Parse(txt), *h = cJSON_GetObjectItem(o, "sha256");
  cJSON *c = cJSON_GetObjectItem(o, "config");
  free(txt);
  if (!cJSON_IsString(h) || strlen(h->valuestring) != 64 || !cJSON_IsObject(c)) {
    cJSON_Delete(o);
    return ft_err_set(FT_EFORMAT,
                      "%s is not a seal (JSON with sha256 and config); move it away to seal "
                      "the run file anew",
                      path);
  }
  snprintf(sha, 65, "%s", h->valuestring);
  *config = cJSON_PrintUnformatted(c);
  cJSON_Delete(o);
  return *config ? FT_OK : ft_err_set(FT_ENOMEM, "out of memory");
}

static int seal_write(const sup *s, const char *sha, const char *config, const char *source) {
  char path[4200];
  state_path(s, SEAL_FILE, path, sizeof path);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "sha256", sha);
  cJSON_AddItemToObject(o, "config", cJSON_Parse(config));
  cJSON_AddStringToObject(o, "source", source);
  cJSON_AddNumberToObject(o, "sealed_at", (double)time(NULL));
  char *txt = cJSON_Print(o);
  cJSON_Delete(o);
  if (!txt)
    return ft_err_set(FT_ENOMEM, "out of memory");
  size_t n = strlen(txt);
  char *line = realloc(txt, n + 2);
  if (!line) {
    free(txt);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  memcpy(line + n, "\n", 2);
  int rc = write_whole(path, line, n + 1);
  free(line);
  return rc;
}

int sup_seal_snapshot(sup *s, const char *runfile, int accept) {
  char snap[sizeof s->runfile_path], why[1024], sealed[65] = "", old_sha[65], now[2048];
  char *text = NULL, *old = NULL, *sealed_cfg = NULL, *cfg = NULL;
  size_t len = 0, olen = 0;
  int rc;
  if (snprintf(snap, sizeof snap, "%s/run.yaml", s->state_dir) >= (int)sizeof snap) {
    fprintf(stderr, "supervise: --state path too long\n");
    return FT_EINVAL;
  }
  rc = read_small(runfile, FT_RUNFILE_MAX_BYTES, &text, &len);
  if (rc == FT_OK)
    rc = sha256_hex(text, len, s->seal.sha256);
  if (rc) {
    fprintf(stderr, "supervise: cannot read the run file: %s\n", ft_err_detail());
    goto out;
  }
  rc = seal_read(s, sealed, &sealed_cfg);
  if (rc && rc != FT_ENOENT) {
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    goto out;
  }
  if (!(cfg = config_of(s, text, len, why, sizeof why))) {
    fprintf(stderr, "supervise: %s\n", why);
    rc = FT_ECONFIG;
    goto out;
  }
  rc = FT_OK;
  s->seal.accepted[0] = 0;
  if (sealed[0] && strcmp(sealed, s->seal.sha256)) {
    describe_change(s, sealed_cfg, text, len, now, sizeof now);
    if (!accept) {
      fprintf(stderr,
              "supervise: the run file %s differs from the one run %s in %s was started with "
              "(sealed in %s/" SEAL_FILE "): %s.\n"
              "  to train on with the new run file: add --accept-runfile-change (the workers "
              "launched from now on read it)\n"
              "  to go on as before: run with the run file as it was\n",
              runfile, s->rf.run, s->state_dir, s->state_dir, now);
      rc = FT_ECONFIG;
      goto out;
    }
    snprintf(s->seal.accepted, sizeof s->seal.accepted, "%.1000s", now);
  }
  /* an edit of the copy itself, about to be replaced: said, not silent */
  if (sealed[0] && strcmp(snap, runfile) &&
      read_small(snap, FT_RUNFILE_MAX_BYTES, &old, &olen) == 0 &&
      sha256_hex(old, olen, old_sha) == 0 && strcmp(old_sha, sealed)) {
    describe_change(s, sealed_cfg, old, olen, now, sizeof now);
    fprintf(stderr,
            "supervise: warning: %s was edited since it was sealed (%s); it is replaced by the "
            "copy of %s (a change is applied through the run file and "
            "--accept-runfile-change)\n",
            snap, now, runfile);
  }
  if (strcmp(snap, runfile)) {
    rc = write_whole(snap, text, len);
    if (rc) {
      fprintf(stderr, "supervise: cannot copy the run file %s to %s: %s\n", runfile, snap,
              ft_err_detail());
      goto out;
    }
  }
  memcpy(s->runfile_path, snap, sizeof snap);
  free(s->seal.config);
  s->seal.config = cfg;
  cfg = NULL;
  if (strcmp(sealed, s->seal.sha256) &&
      (rc = seal_write(s, s->seal.sha256, s->seal.config, runfile)))
    fprintf(stderr, "supervise: cannot seal the run file's copy: %s\n", ft_err_detail());
out:
  free(text);
  free(old);
  free(sealed_cfg);
  free(cfg);
  return rc;
}

int sup_seal_check(sup *s, char *why, size_t whylen) {
  char sha[65] = "", changed[2048];
  char *text = NULL;
  size_t len = 0;
  if (!s->seal.sha256[0])
    return FT_OK; /* not sealed (--unquarantine launches nothing) */
  int rc = read_small(s->runfile_path, FT_RUNFILE_MAX_BYTES, &text, &len);
  if (rc == FT_OK)
    rc = sha256_hex(text, len, sha);
  if (rc == FT_OK && !strcmp(sha, s->seal.sha256)) {
    free(text);
    return FT_OK;
  }
  if (rc)
    snprintf(changed, sizeof changed, "it cannot be read: %s", ft_err_detail());
  else
    describe_change(s, s->seal.config, text, len, changed, sizeof changed);
  free(text);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "path", s->runfile_path);
  cJSON_AddStringToObject(f, "sealed_sha256", s->seal.sha256);
  if (sha[0])
    cJSON_AddStringToObject(f, "sha256", sha);
  else
    cJSON_AddNullToObject(f, "sha256");
  cJSON_AddStringToObject(f, "changed", changed);
  sup_events_emit(s->ev, "runfile_changed", f,
                  "%s no longer matches the run file this run was started with: %s",
                  s->runfile_path, changed);
  snprintf(why, whylen,
           "the run file's copy %s changed during the run (%.160s); no worker is launched "
           "from it. A change applies only at a start: put it in the run file and run "
           "supervise again with --accept-runfile-change (as before, without it, to go on "
           "unchanged)",
           s->runfile_path, changed);
  return FT_ECONFIG;
}

void sup_seal_release(sup *s) {
  free(s->seal.config);
  s->seal.config = NULL;
}

/* ---- the generation floor -------------------------------------------------------- */

int sup_gen_floor_read(sup *s, uint64_t *gen) {
  char path[4200], *txt = NULL, *end;
  size_t len;
  *gen = 0;
  state_path(s, GEN_FILE, path, sizeof path);
  int rc = read_small(path, 64, &txt, &len);
  if (rc == FT_ENOENT)
    return FT_OK;
  if (rc)
    return rc;
  errno = 0;
  unsigned long long v = strtoull(txt, &end, 10);
  int bad = end == txt || errno || (*end && strcmp(end, "\n"));
  free(txt);
  if (bad)
    return ft_err_set(FT_EFORMAT,
                      "%s is not a generation number (the highest generation this run used); "
                      "write the highest gen of its events.jsonl into it",
                      path);
  *gen = v;
  s->seal.gen_filed = v;
  return FT_OK;
}

int sup_gen_floor_write(sup *s, uint64_t gen) {
  if (gen <= s->seal.gen_filed)
    return FT_OK;
  char path[4200], line[32];
  state_path(s, GEN_FILE, path, sizeof path);
  snprintf(line, sizeof line, "%" PRIu64 "\n", gen);
  int rc = write_whole(path, line, strlen(line));
  if (rc == FT_OK)
    s->seal.gen_filed = gen;
  return rc;
}
