/*
 * ckpt_s3_config: what an "s3://bucket/prefix" store URI means on this
 * machine: endpoint, region, addressing, cache directory, durability rule,
 * timeouts and credentials, from the URI and the environment.
 *
 * Why the environment: the same run file ("store: s3://bucket/run1") must
 * work against AWS, MinIO, Ceph or a loopback test server, and credentials
 * must never be in a run file or on a command line.
 *
 * Defaults: endpoint https://s3.<region>.amazonaws.com, region us-east-1,
 * path addressing when FT_S3_ENDPOINT is given (what MinIO/Ceph/moto want),
 * virtual-host addressing otherwise (what AWS wants), cache
 * ~/.cache/ftsup/<bucket>/<prefix>, FT_S3_REQUIRE=both.
 *
 * Credentials, first found wins: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 * (+ AWS_SESSION_TOKEN); else the shared credentials file
 * (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials), profile AWS_PROFILE or
 * "default"; else that profile in the config file (AWS_CONFIG_FILE or
 * ~/.aws/config, "[profile NAME]"), as the AWS CLI looks. The region:
 * AWS_REGION, AWS_DEFAULT_REGION, the profile's "region" in the config file,
 * us-east-1. Both files are parsed with inih. Error messages name variables
 * and files, never secret values; cred_source says which was used, for the
 * client's message when the server refuses the keys.
 * Pure functions of their inputs and the environment; thread-safe if the
 * environment is not changed meanwhile.
 */
#include "ckpt_s3.h"

#include "ft_err.h"

#include <ctype.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int def, int lo, int hi, int *out) {
  const char *v = getenv(name);
  if (!v || !v[0]) {
    *out = def;
    return FT_OK;
  }
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < lo || x > hi)
    return ft_err_set(FT_ECONFIG, "%s='%s': expected a whole number in [%d, %d]", name, v, lo, hi);
  *out = (int)x;
  return FT_OK;
}

static int copy(char *dst, size_t n, const char *src, const char *what) {
  size_t l = strlen(src);
  if (l >= n)
    return ft_err_set(FT_ECONFIG, "%s is too long (%zu bytes, at most %zu)", what, l, n - 1);
  memcpy(dst, src, l + 1);
  return FT_OK;
}

/* ---- the shared credentials file, read with inih ------------------------------------ */

/* inih reads lines of at most its compiled limit (INI_MAX_LINE, 200 bytes as
 * Debian builds it), but a session token alone is longer. So inih reads the
 * file through this reader: a line longer than inih's buffer is handed over
 * as "name=\x1f<n>" and its value kept here, the handler looks it up. Every
 * other line goes to inih as it is. */
#define LONG_MAX_VALUES 8

typedef struct cred_reader {
  FILE *f;
  char *line; /* getline's buffer (held secrets: wiped) */
  size_t cap;
  char *longv[LONG_MAX_VALUES];
  int nlong;
  int toolong_line; /* first line that could not be handed over, or 0 */
  int lineno;
} cred_reader;

static char *cred_read_line(char *str, int num, void *stream) {
  cred_reader *r = stream;
  ssize_t l = getline(&r->line, &r->cap, r->f);
  if (l < 0)
    return NULL;
  r->lineno++;
  if (num < 16)
    return NULL;
  if (l < num) {
    memcpy(str, r->line, (size_t)l + 1);
    return str;
  }
  /* too long for inih: "name = value" keeps its value here */
  char *eq = strpbrk(r->line, "=:");
  size_t nl = eq ? (size_t)(eq - r->line) : 0;
  if (!eq || nl + 8 > (size_t)num || r->nlong == LONG_MAX_VALUES || r->line[0] == '[') {
    if (!r->toolong_line)
      r->toolong_line = r->lineno;
    snprintf(str, (size_t)num, "\n");
    return str;
  }
  char *v = eq + 1;
  while (*v == ' ' || *v == '\t')
    v++;
  size_t vl = strlen(v);
  while (vl > 0 && isspace((unsigned char)v[vl - 1]))
    vl--;
  for (size_t i = 1; i < vl; i++) /* an inline comment, as inih cuts it */
    if (v[i] == ';' && isspace((unsigned char)v[i - 1])) {
      vl = i;
      while (vl > 0 && isspace((unsigned char)v[vl - 1]))
        vl--;
      break;
    }
  char *keep = strndup(v, vl);
  if (!keep)
    return NULL;
  r->longv[r->nlong] = keep;
  snprintf(str, (size_t)num, "%.*s=\x1f%d\n", (int)nl, r->line, r->nlong++);
  return str;
}

typedef struct cred_ctx {
  const char *profile;
  ckpt_s3_config *c;
  char *region; /* NULL: not wanted */
  size_t region_n;
  cred_reader *rd;
  int found;
  int rc;
} cred_ctx;

static int cred_on_value(void *user, const char *section, const char *name, const char *value) {
  cred_ctx *x = user;
  /* "[name]", or "[profile name]" (the config file's spelling) */
  int in = strcmp(section, x->profile) == 0 ||
           (strncmp(section, "profile ", 8) == 0 && strcmp(section + 8, x->profile) == 0);
  if (!in || x->rc)
    return 1;
  x->found = 1;
  if (value[0] == '\x1f') {
    int k = atoi(value + 1);
    value = k >= 0 && k < x->rd->nlong ? x->rd->longv[k] : "";
  }
  if (strcmp(name, "aws_access_key_id") == 0)
    x->rc = copy(x->c->access_key, sizeof x->c->access_key, value, "aws_access_key_id");
  else if (strcmp(name, "aws_secret_access_key") == 0)
    x->rc = copy(x->c->secret_key, sizeof x->c->secret_key, value, "aws_secret_access_key");
  else if (strcmp(name, "aws_session_token") == 0)
    x->rc = copy(x->c->session_token, sizeof x->c->session_token, value, "aws_session_token");
  else if (strcmp(name, "region") == 0 && x->region)
    x->rc = copy(x->region, x->region_n, value, "region");
  return 1;
}

/* [profile] of an AWS credentials or config file: the keys into c and, if
 * region is not NULL, its region. need_keys: a profile without either key is
 * FT_ENOENT, with one of the two FT_ECONFIG. */
static int read_profile(const char *path, const char *profile, ckpt_s3_config *c, char *region,
                        size_t region_n, int need_keys) {
  cred_reader rd = {0};
  rd.f = fopen(path, "r");
  if (!rd.f)
    return ft_err_set(FT_ENOENT, "no file %s", path);
  cred_ctx x = {.profile = profile, .c = c, .region = region, .region_n = region_n, .rd = &rd};
  int bad = ini_parse_stream(cred_read_line, &rd, cred_on_value, &x);
  int eof = feof(rd.f);
  fclose(rd.f);
  if (rd.line) { /* the line buffer held a secret */
    memset(rd.line, 0, rd.cap);
    free(rd.line);
  }
  for (int i = 0; i < rd.nlong; i++) {
    memset(rd.longv[i], 0, strlen(rd.longv[i]));
    free(rd.longv[i]);
  }
  if (x.rc)
    return x.rc;
  if (bad < 0 || !eof)
    return ft_err_set(FT_ENOMEM, "reading %s: out of memory", path);
  if (rd.toolong_line && (!bad || rd.toolong_line < bad))
    bad = rd.toolong_line;
  if (bad > 0)
    return ft_err_set(FT_ECONFIG, "%s line %d: not '[profile]', 'name = value' or a comment", path,
                      bad);
  if (!x.found)
    return ft_err_set(FT_ENOENT, "profile '%s' not in %s", profile, path);
  if (need_keys && !c->access_key[0] && !c->secret_key[0])
    return ft_err_set(FT_ENOENT, "profile '%s' in %s has no keys", profile, path);
  if (need_keys && (!c->access_key[0] || !c->secret_key[0]))
    return ft_err_set(FT_ECONFIG,
                      "profile '%s' in %s lacks aws_access_key_id or aws_secret_access_key",
                      profile, path);
  return FT_OK;
}

int ckpt_s3_config_read_credentials(const char *path, const char *profile, ckpt_s3_config *c) {
  return read_profile(path, profile, c, NULL, 0, 1);
}

/* AWS_CONFIG_FILE, else ~/.aws/config */
static void config_file(char *path, size_t n, int *from_env) {
  const char *f = getenv("AWS_CONFIG_FILE"), *home = getenv("HOME");
  *from_env = f && f[0];
  if (*from_env)
    snprintf(path, n, "%s", f);
  else
    snprintf(path, n, "%s/.aws/config", home ? home : "");
}

static const char *profile_name(void) {
  const char *p = getenv("AWS_PROFILE");
  return p && p[0] ? p : "default";
}

static int credentials(ckpt_s3_config *c) {
  const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
  if (ak && ak[0] && sk && sk[0]) {
    const char *tok = getenv("AWS_SESSION_TOKEN");
    int rc = copy(c->access_key, sizeof c->access_key, ak, "AWS_ACCESS_KEY_ID");
    if (!rc)
      rc = copy(c->secret_key, sizeof c->secret_key, sk, "AWS_SECRET_ACCESS_KEY");
    if (!rc && tok && tok[0])
      rc = copy(c->session_token, sizeof c->session_token, tok, "AWS_SESSION_TOKEN");
    snprintf(c->cred_source, sizeof c->cred_source,
             "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY%s from the environment",
             tok && tok[0] ? " (and AWS_SESSION_TOKEN)" : "");
    return rc;
  }
  if ((ak && ak[0]) != (sk && sk[0]))
    return ft_err_set(FT_ECONFIG, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set "
                                  "together");
  /* the shared credentials file, then the config file (as the AWS CLI) */
  char path[PATH_MAX], cpath[PATH_MAX];
  const char *f = getenv("AWS_SHARED_CREDENTIALS_FILE"), *home = getenv("HOME");
  if (f && f[0])
    snprintf(path, sizeof path, "%s", f);
  else
    snprintf(path, sizeof path, "%s/.aws/credentials", home ? home : "");
  const char *prof = profile_name();
  int rc = ckpt_s3_config_read_credentials(path, prof, c);
  snprintf(c->cred_source, sizeof c->cred_source, "profile '%.200s' of the credentials file %s%s",
           prof, path, f && f[0] ? " (AWS_SHARED_CREDENTIALS_FILE)" : "");
  if (rc != FT_ENOENT)
    return rc;
  int cenv;
  config_file(cpath, sizeof cpath, &cenv);
  memset(c->access_key, 0, sizeof c->access_key);
  memset(c->secret_key, 0, sizeof c->secret_key);
  memset(c->session_token, 0, sizeof c->session_token);
  rc = read_profile(cpath, prof, c, NULL, 0, 1);
  snprintf(c->cred_source, sizeof c->cred_source, "profile '%.200s' of the config file %s%s", prof,
           cpath, cenv ? " (AWS_CONFIG_FILE)" : "");
  if (rc == FT_ENOENT)
    return ft_err_set(FT_ECONFIG,
                      "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                      "put them in %s (profile %s; or in %s)",
                      path, prof, cpath);
  return rc;
}

static int bucket_name_ok(const char *b) {
  size_t n = strlen(b);
  if (n < 3 || n > 63)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)b[i]) || isdigit((unsigned char)b[i]) || b[i] == '-' ||
          b[i] == '.'))
      return 0;
  return 1;
}

int ckpt_s3_config_from_uri(const char *uri, ckpt_s3_config *c) {
  memset(c, 0, sizeof *c);
  if (strncmp(uri, "s3://", 5) != 0)
    return ft_err_set(FT_EINVAL, "'%s' is not an s3://bucket/prefix URI", uri);
  const char *b = uri + 5, *slash = strchr(b, '/');
  size_t bl = slash ? (size_t)(slash - b) : strlen(b);
  if (bl >= sizeof c->bucket)
    return ft_err_set(FT_EINVAL, "bucket name in '%s' is too long", uri);
  memcpy(c->bucket, b, bl);
  c->bucket[bl] = 0;
  if (!bucket_name_ok(c->bucket))
    return ft_err_set(FT_EINVAL, "'%s': bucket name '%s' is not valid (3-63 of a-z 0-9 . -)", uri,
                      c->bucket);
  const char *p = slash ? slash + 1 : "";
  int rc = copy(c->prefix, sizeof c->prefix, p, "the prefix of the S3 URI");
  if (rc)
    return rc;
  size_t pl = strlen(c->prefix);
  while (pl > 0 && c->prefix[pl - 1] == '/')
    c->prefix[--pl] = 0;
  if (strstr(c->prefix, "//") || strstr(c->prefix, ".."))
    return ft_err_set(FT_EINVAL, "'%s': the prefix may not contain '//' or '..'", uri);

  const char *region = getenv("AWS_REGION");
  if (!region || !region[0])
    region = getenv("AWS_DEFAULT_REGION");
  char cregion[sizeof c->region] = "";
  if (!region || !region[0]) { /* the profile's region in the config file */
    char cpath[PATH_MAX];
    int cenv;
    config_file(cpath, sizeof cpath, &cenv);
    ckpt_s3_config tmp;
    memset(&tmp, 0, sizeof tmp);
    rc = read_profile(cpath, profile_name(), &tmp, cregion, sizeof cregion, 0);
    ckpt_s3_config_wipe(&tmp);
    if (rc && rc != FT_ENOENT)
      return rc;
    region = cregion;
  }
  if (!region[0])
    region = "us-east-1";
  if ((rc = copy(c->region, sizeof c->region, region, "AWS_REGION")))
    return rc;
  const char *ep = getenv("FT_S3_ENDPOINT");
  if (ep && ep[0]) {
    if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0)
      return ft_err_set(FT_ECONFIG, "FT_S3_ENDPOINT='%s' must start with http:// or https://", ep);
    if ((rc = copy(c->endpoint, sizeof c->endpoint, ep, "FT_S3_ENDPOINT")))
      return rc;
  } else {
    snprintf(c->endpoint, sizeof c->endpoint, "https://s3.%s.amazonaws.com", c->region);
  }
  size_t el = strlen(c->endpoint);
  while (el > 0 && c->endpoint[el - 1] == '/')
    c->endpoint[--el] = 0;
  const char *addr = getenv("FT_S3_ADDRESSING");
  if (!addr || !addr[0])
    c->virtual_host = !(ep && ep[0]);
  else if (strcmp(addr, "path") == 0)
    c->virtual_host = 0;
  else if (strcmp(addr, "virtual") == 0)
    c->virtual_host = 1;
  else
    return ft_err_set(FT_ECONFIG, "FT_S3_ADDRESSING='%s': expected path or virtual", addr);
  if (c->virtual_host && strchr(c->bucket, '.') && strncmp(c->endpoint, "https://", 8) == 0)
    return ft_err_set(FT_ECONFIG,
                      "bucket '%s' has a dot: virtual-host addressing breaks TLS names; set "
                      "FT_S3_ADDRESSING=path",
                      c->bucket);

  const char *req = getenv("FT_S3_REQUIRE");
  if (!req || !req[0] || strcmp(req, "both") == 0)
    c->require_both = 1;
  else if (strcmp(req, "local") == 0)
    c->require_both = 0;
  else
    return ft_err_set(FT_ECONFIG, "FT_S3_REQUIRE='%s': expected local or both", req);
  const char *per = getenv("FT_S3_CACHE_PER_HOST");
  if (!per || !per[0] || strcmp(per, "0") == 0)
    c->cache_per_host = 0;
  else if (strcmp(per, "1") == 0)
    c->cache_per_host = 1;
  else
    return ft_err_set(FT_ECONFIG, "FT_S3_CACHE_PER_HOST='%s': expected 0 or 1", per);
  if (c->cache_per_host && !c->require_both)
    return ft_err_set(FT_ECONFIG,
                      "FT_S3_CACHE_PER_HOST=1 needs FT_S3_REQUIRE=both: with a cache on each "
                      "host, the bucket is the only place every host sees");

  const char *cache = getenv("FT_S3_CACHE");
  int w;
  if (cache && cache[0]) {
    w = snprintf(c->cache_dir, sizeof c->cache_dir, "%s", cache);
  } else {
    const char *home = getenv("HOME");
    if (!home || !home[0])
      return ft_err_set(FT_ECONFIG, "no cache directory: set FT_S3_CACHE (HOME is not set)");
    w = snprintf(c->cache_dir, sizeof c->cache_dir, "%s/.cache/ftsup/%s%s%s", home, c->bucket,
                 c->prefix[0] ? "/" : "", c->prefix);
  }
  if (w < 0 || (size_t)w >= sizeof c->cache_dir)
    return ft_err_set(FT_ECONFIG, "cache directory path is too long");

  int mp = 0, part = 0;
  if ((rc = env_int("FT_S3_TIMEOUT_S", CKPT_S3_TIMEOUT_S_DEFAULT, 1, 3600, &c->timeout_s)) ||
      (rc = env_int("FT_S3_RETRIES", 8, 1, 100, &c->retries)) ||
      (rc = env_int("FT_S3_RETRY_BUDGET_S", CKPT_S3_RETRY_BUDGET_S_DEFAULT, 1, 86400,
                    &c->retry_budget_s)) ||
      (rc = env_int("FT_S3_MULTIPART_MIB", 64, 5, 5 * 1024 * 1024, &mp)) ||
      (rc = env_int("FT_S3_PART_MIB", 16, 5, 5 * 1024, &part)) ||
      (rc = env_int("FT_S3_UPLOAD_THREADS", 4, 1, 64, &c->upload_threads)) ||
      (rc = env_int("FT_S3_DRAIN_S", 30, 0, 86400, &c->drain_s)))
    return rc;
  c->retry_base_ms = 100;
  c->retry_cap_ms = 5000;
  c->multipart_threshold = (size_t)mp << 20;
  c->part_size = (size_t)part << 20;
  return credentials(c);
}

void ckpt_s3_config_wipe(ckpt_s3_config *c) {
  volatile char *p[3] = {c->access_key, c->secret_key, c->session_token};
  size_t n[3] = {sizeof c->access_key, sizeof c->secret_key, sizeof c->session_token};
  for (int i = 0; i < 3; i++)
    for (size_t k = 0; k < n[i]; k++)
      p[i][k] = 0;
}
