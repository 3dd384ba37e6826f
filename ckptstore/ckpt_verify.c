/*
 * ckpt_verify: re-hash every chunk of a checkpoint.
 *
 * First, the checkpoint's manifest object, where it exists, must hold the
 * catalog's copy of its manifest byte for byte: one overwritten (a `ckpt
 * restore --to` into the store) or cut short is a problem like a damaged
 * chunk (a catalog rebuild would lose the checkpoint, or record other
 * bytes). A missing one is not: a GC that dropped the checkpoint deletes
 * the object before the catalog record (ckpt_gc.c G3), and a crash between
 * leaves the checkpoint whole in the catalog.
 * Each chunk the manifest references is read from the tier, decoded and its
 * SHA-256 compared with its name (ckpt_store_fetch); a delta chunk is
 * decoded against its base, read and checked the same way, so a damaged or
 * missing base makes every checkpoint whose chunks need it fail here. A
 * missing chunk (or base) and a damaged one are counted apart. The other
 * checkpoints of the run that need a chunk that failed (a delta on it, or
 * it in their chains) are marked BAD too, without reading them: they
 * cannot be restored either. Any problem marks the checkpoint BAD
 * (when the store is writable), so ckpt_store_latest never picks it again, and returns FT_ECORRUPT;
 * the report says what was wrong first. A chunk shared by several tensors of the checkpoint is
 * checked each time it is referenced (cheap next to the I/O, and the counts then match "show").
 */
#include "ckpt_hashset.h"
#include "ckpt_int.h"

#include "ft_err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dep_ctx {
  ckpt_store *s;
  const char *run;
  int64_t step;
  const ckpt_hashset *failed;
  int64_t *steps; /* the run's other checkpoints that need a failed chunk */
  int n, cap;
} dep_ctx;

static int dep_cb(void *ud, const char *key, const char *val, size_t vlen) {
  dep_ctx *d = ud;
  ckpt_manifest *m = NULL;
  if (ckpt_manifest_from_json(val, &m) != FT_OK) /* verify of it will say so */
    return FT_OK;
  if (strcmp(m->info.run, d->run) != 0 || m->info.step == d->step ||
      ckpt_manifest_expand(d->s, m) != FT_OK) { /* a damaged shard object: its verify says so */
    ckpt_manifest_free(m);
    return FT_OK;
  }
  int needs = 0;
  if (!strcmp(m->info.run, d->run) && m->info.step != d->step)
    for (int t = 0; t < m->ntensors && !needs; t++)
      for (int c = 0; c < m->tensors[t].nchunks && !needs; c++) {
        const ckpt_chunk_ref *r = &m->tensors[t].chunks[c];
        needs = ckpt_hashset_has(d->failed, r->hash, CKPT_HASH_LEN);
        for (int k = 0; k < r->depth && !needs; k++)
          needs = ckpt_hashset_has(d->failed, r->chain + (size_t)k * CKPT_HASH_LEN, CKPT_HASH_LEN);
      }
  if (needs && d->n == d->cap) {
    int64_t *n = realloc(d->steps, (size_t)(d->cap ? 2 * d->cap : 16) * sizeof *n);
    if (!n) {
      ckpt_manifest_free(m);
      return ft_err_set(FT_ENOMEM, "out of memory");
    }
    d->steps = n;
    d->cap = d->cap ? 2 * d->cap : 16;
  }
  if (needs)
    d->steps[d->n++] = m->info.step;
  ckpt_manifest_free(m);
  return FT_OK;
}

/* Marks BAD every other checkpoint of run that needs a chunk in failed (as
 * one of its own or in a delta's chain): it cannot be restored either.
 * *n: how many were marked now. */
static int mark_dependants(ckpt_store *s, const char *run, int64_t step, const ckpt_hashset *failed,
                           int *n) {
  dep_ctx d = {.s = s, .run = run, .step = step, .failed = failed};
  char prefix[64];
  ckpt_key_man_prefix(prefix, sizeof prefix);
  int rc = ckpt_catalog_scan(s->cat, prefix, dep_cb, &d);
  for (int i = 0; rc == FT_OK && i < d.n; i++) {
    ckpt_info in;
    rc = ckpt_store_get_info(s, run, d.steps[i], &in);
    if (rc == FT_OK && in.state != CKPT_BAD && in.state != CKPT_PENDING &&
        (rc = ckpt_store_set_state(s, run, d.steps[i], CKPT_BAD)) == FT_OK)
      (*n)++;
    else if (rc == FT_ENOENT)
      rc = FT_OK;
  }
  free(d.steps);
  return rc;
}

/* The manifest object of (run, step) holds the catalog's copy of its
 * manifest, byte for byte (the commit writes both from one text, and a
 * rebuild copies the object): FT_OK, or FT_ECORRUPT with why (what is
 * wrong with the object, by name) in the detail; FT_OK too where the
 * catalog keeps no copy (a checkpoint read from the bucket alone) or the
 * object is gone (see below). */
static int check_manifest_object(ckpt_store *s, const char *run, int64_t step) {
  char ckey[256], okey[256], *cat = NULL;
  uint8_t *obj = NULL;
  size_t clen = 0, olen = 0;
  ckpt_key_man(ckey, sizeof ckey, run, step);
  ckpt_objkey_manifest(okey, sizeof okey, run, step);
  int rc = ckpt_catalog_get(s->cat, ckey, &cat, &clen);
  if (rc == FT_ENOENT)
    return FT_OK;
  if (rc)
    return rc;
  rc = s->tier->get(s->tier, okey, &obj, &olen);
  if (rc == FT_ENOENT) {
    /* not damage: a GC dropping this checkpoint deletes the object before
     * the record (G3), and a crash in between leaves it whole in the
     * catalog until the next GC */
    rc = FT_OK;
  } else if (rc == FT_OK && (olen != clen || memcmp(obj, cat, clen) != 0)) {
    uint8_t h[CKPT_HASH_LEN];
    char hex[CKPT_HEX_LEN + 1] = "?";
    if (ckpt_sha256(obj, olen, h) == FT_OK)
      ckpt_hex(h, hex);
    ckpt_manifest *m = NULL;
    char *txt = ckpt_text(obj, olen);
    int parses = txt && strlen(txt) == olen && ckpt_manifest_from_json(txt, &m) == FT_OK;
    ckpt_manifest_free(m);
    free(txt);
    rc = ft_err_set(FT_ECORRUPT,
                    "manifest object %s was overwritten or damaged: it %s (%zu bytes, SHA-256 "
                    "%.16s...) and differs from the catalog's copy (%zu bytes); a catalog "
                    "rebuild would %s",
                    okey, parses ? "is another manifest" : "is not a manifest", olen, hex, clen,
                    parses ? "record what it holds instead" : "skip this checkpoint");
  }
  free(obj);
  free(cat);
  return rc;
}

int ckpt_store_verify(ckpt_store *s, const char *run, int64_t step, ckpt_verify_report *rep,
                      void (*progress)(void *ud, uint64_t done, uint64_t total), void *ud) {
  ckpt_verify_report local;
  if (!rep)
    rep = &local;
  memset(rep, 0, sizeof *rep);
  ckpt_manifest *m = NULL;
  int rc = ckpt_store_load(s, run, step, &m);
  if (rc) {
    if (rc == FT_ECORRUPT || rc == FT_EFORMAT) {
      snprintf(rep->first_problem, sizeof rep->first_problem, "%s", ft_err_detail());
      if (!s->read_only)
        ckpt_store_set_state(s, run, step, CKPT_BAD);
      return ft_err_set(FT_ECORRUPT, "%s", rep->first_problem);
    }
    return rc;
  }
  if (m->info.level == CKPT_LEVEL_MEMORY) { /* its chunks were never written to the store */
    ckpt_manifest_free(m);
    return ft_err_set(FT_ESTATE,
                      "checkpoint %s step %" PRId64 " lives only in workers' memory (level "
                      "memory, checkpoint.persist_every): the store holds none of its chunks",
                      run, step);
  }
  rc = check_manifest_object(s, run, step);
  if (rc == FT_ECORRUPT) {
    rep->manifest_bad = 1;
    snprintf(rep->first_problem, sizeof rep->first_problem, "%s", ft_err_detail());
    rc = FT_OK;
  } else if (rc) { /* an I/O error is not a verdict on the checkpoint */
    ckpt_manifest_free(m);
    return rc;
  }
  ckpt_hashset failed = {0}; /* chunks that could not be read back */
  uint64_t total = (uint64_t)m->info.nchunks, done = 0;
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (int t = 0; t < m->ntensors; t++) {
    const ckpt_tensor *tt = &m->tensors[t];
    for (int c = 0; c < tt->nchunks; c++) {
      const ckpt_chunk_ref *ref = &tt->chunks[c];
      if (cap < ref->len) {
        free(buf);
        buf = malloc(ref->len);
        cap = buf ? ref->len : 0;
        if (!buf) {
          rc = ft_err_set(FT_ENOMEM, "out of memory");
          goto out;
        }
      }
      int r = ckpt_store_fetch(s, ref->hash, ref->len, buf, CKPT_FETCH_TIER | CKPT_FETCH_NOSTATS);
      if (r == FT_ECORRUPT || r == FT_ENOENT) {
        if (ckpt_hashset_put(&failed, ref->hash, CKPT_HASH_LEN, 1)) {
          rc = ft_err_set(FT_ENOMEM, "out of memory");
          goto out;
        }
        if (r == FT_ECORRUPT)
          rep->chunks_corrupt++;
        else
          rep->chunks_missing++;
        if (!rep->first_problem[0])
          snprintf(rep->first_problem, sizeof rep->first_problem,
                   "%s (tensor %s, bytes %" PRIu64 "..%" PRIu64 ")", ft_err_detail(), tt->name,
                   ref->offset, ref->offset + ref->len);
      } else if (r) {
        rc = r; /* an I/O error is not a verdict on the checkpoint */
        goto out;
      }
      rep->chunks_checked++;
      done++;
      if (progress)
        progress(ud, done, total);
    }
  }
  if (rep->chunks_corrupt || rep->chunks_missing || rep->manifest_bad) {
    if (!s->read_only) {
      int r = ckpt_store_set_state(s, run, step, CKPT_BAD);
      if (r == FT_OK)
        r = mark_dependants(s, run, step, &failed, &rep->dependants_bad);
      if (r) {
        rc = r;
        goto out;
      }
    }
    rc = ft_err_set(FT_ECORRUPT,
                    "checkpoint %s step %" PRId64 ": %s%d corrupt, %d missing of %d "
                    "chunks; first: %s",
                    run, step, rep->manifest_bad ? "a bad manifest object, " : "",
                    rep->chunks_corrupt, rep->chunks_missing, rep->chunks_checked,
                    rep->first_problem);
  }
out:
  ckpt_hashset_release(&failed);
  free(buf);
  ckpt_manifest_free(m);
  return rc;
}
