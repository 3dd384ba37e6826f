/*
 * sup_listing: the recorded s3:// data listing kept with the checkpoints
 * (sup_listing.h says why and the threading).
 *
 * Cost: the workers' file is formatted JSON (~190 bytes per object with
 * 22-byte keys and S3's ETags: key, size, ETag, tokens); a commit carries
 * it compact (cJSON_PrintUnformatted: ~125 bytes per object once escaped
 * as the manifest's string, where the formatted text took ~250) in every
 * manifest of the run and in its catalog copy: 1,000 shards add ~125 KB to
 * each manifest, 100,000 ~12.5 MB. The file is
 * read and compacted only when it changed (a stat per commit otherwise).
 * At start the file and the checkpoint's text are compared as JSON.
 */
#include "sup_listing.h"

#include "ft_err.h"
#include "ft_file.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define LISTING_MAX (256 << 20) /* worker/data_listing.c refuses larger */

struct sup_listing {
  char *path;
  pthread_mutex_t mu;
  /* the cache (under mu): the text and the file it was read from */
  char *text;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  int warned; /* an unreadable file was said once */
};

int sup_listing_new(const char *path, sup_listing **out) {
  *out = NULL;
  sup_listing *l = calloc(1, sizeof *l);
  if (!l || !(l->path = strdup(path))) {
    free(l);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&l->mu, NULL);
  *out = l;
  return FT_OK;
}

void sup_listing_free(sup_listing *l) {
  if (!l)
    return;
  pthread_mutex_destroy(&l->mu);
  free(l->text);
  free(l->path);
  free(l);
}

/* The whole file: *text malloc'd, NULL when it does not exist; *st its stat. */
static int read_file(const char *path, char **text, struct stat *st) {
  *text = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return errno == ENOENT ? FT_OK
                           : ft_err_set(FT_EIO, "%s: cannot read: %s", path, strerror(errno));
  int rc = FT_OK;
  char *t = NULL;
  if (fstat(fileno(f), st) != 0 || st->st_size > LISTING_MAX)
    rc = ft_err_set(FT_EFORMAT, "%s: unreadable or over %d bytes", path, LISTING_MAX);
  else if (!(t = malloc((size_t)st->st_size + 1)))
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  else if (fread(t, 1, (size_t)st->st_size, f) != (size_t)st->st_size)
    rc = ft_err_set(FT_EIO, "%s: short read", path);
  fclose(f);
  if (rc) {
    free(t);
    return rc;
  }
  t[st->st_size] = 0;
  *text = t;
  return FT_OK;
}

char *sup_listing_text(sup_listing *l) {
  if (!l)
    return NULL;
  struct stat st;
  char *out = NULL;
  pthread_mutex_lock(&l->mu);
  if (stat(l->path, &st) != 0) { /* none yet: nothing to carry */
    free(l->text);
    l->text = NULL;
    goto out;
  }
  if (!l->text || st.st_dev != l->dev || st.st_ino != l->ino || st.st_size != l->size ||
      st.st_mtim.tv_sec != l->mtime.tv_sec || st.st_mtim.tv_nsec != l->mtime.tv_nsec) {
    char *t = NULL;
    int rc = read_file(l->path, &t, &st);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(l->text);
    l->text = j ? cJSON_PrintUnformatted(j) : NULL; /* compact: a third of the bytes */
    if (t && !l->text && !rc)
      rc = j ? ft_err_set(FT_ENOMEM, "out of memory")
             : ft_err_set(FT_EFORMAT, "%s is not JSON", l->path);
    cJSON_Delete(j);
    free(t);
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    l->size = st.st_size;
    l->mtime = st.st_mtim;
    if (rc && !l->warned) {
      l->warned = 1;
      fprintf(stderr, "supervise: warning: the checkpoints go without the data listing: %s\n",
              ft_err_detail());
    }
  }
  out = l->text ? strdup(l->text) : NULL;
out:
  pthread_mutex_unlock(&l->mu);
  return out;
}

/* 1 if a and b are the same JSON (the file is the workers' formatted text,
 * a checkpoint carries it compact). */
static int same_json(const char *a, const char *b) {
  cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
  int same = x && y && cJSON_Compare(x, y, 1);
  cJSON_Delete(x);
  cJSON_Delete(y);
  return same;
}

static int move_aside(const char *path, char *old, size_t n) {
  snprintf(old, n, "%s.old", path);
  if (rename(path, old) != 0)
    return ft_err_set(FT_EIO, "cannot move %s to %s: %s", path, old, strerror(errno));
  return FT_OK;
}

int sup_listing_restore(sup_listing *l, ckpt_store *st, const char *run, int64_t step, int relist,
                        FILE *err, sup_listing_outcome *out) {
  *out = (sup_listing_outcome){.source = "none", .step = step};
  char *have = NULL, *want = NULL, old[4300];
  struct stat sb;
  int rc = read_file(l->path, &have, &sb);
  if (rc)
    return rc;
  if (relist) {
    if (have && (rc = move_aside(l->path, old, sizeof old)) == FT_OK)
      fprintf(err, "supervise: --relist-data: %s moved to %s; the workers list the bucket again\n",
              l->path, old);
    out->source = "relist";
    goto done;
  }
  if (have)
    out->source = "state";
  if (step < 0 || (rc = ckpt_store_load_data(st, run, step, &want)) != FT_OK || !want)
    goto done; /* nothing to resume from, or a checkpoint older than listings: as it is */
  if (have && same_json(have, want))
    goto done; /* the same listing: the usual resume */
  if (have) {
    if ((rc = move_aside(l->path, old, sizeof old)))
      goto done;
    out->replaced = 1;
    fprintf(err,
            "supervise: warning: %s is not the data listing of checkpoint %" PRId64
            " that the run resumes from: the checkpoint's replaces it (kept as %s; its data "
            "position counts in the checkpoint's list of objects). To list the bucket again "
            "instead: supervise --relist-data\n",
            l->path, step, old);
  }
  ft_afile f;
  if ((rc = ft_afile_open(&f, l->path)) == FT_OK &&
      (rc = ft_afile_write(&f, want, strlen(want))) != FT_OK)
    ft_afile_abort(&f);
  else if (rc == FT_OK)
    rc = ft_afile_commit(&f);
  if (rc == FT_OK) {
    out->source = "checkpoint";
    fprintf(err,
            "supervise: data listing of checkpoint %" PRId64 " written to %s: the workers read "
            "the objects it names, as the run did\n",
            step, l->path);
  }
done:
  free(have);
  free(want);
  return rc;
}
