/*
 * ckpt_verify: re-hash every chunk of a checkpoint.
 *
 * Each chunk the manifest references is read from the tier, decoded and its
 * SHA-256 compared with its name (ckpt_chunk_decode); a missing chunk and a
 * damaged one are counted apart. Any problem marks the checkpoint BAD (when
 * the store is writable), so ckpt_store_latest never picks it again, and
 * returns FT_ECORRUPT; the report says what was wrong first.
 * A chunk shared by several tensors of the checkpoint is checked each time it
 * is referenced (cheap next to the I/O, and the counts then match "show").
 */
#include "ckpt_int.h"

#include "ft_err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  uint64_t total = (uint64_t)m->info.nchunks, done = 0;
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (int t = 0; t < m->ntensors; t++) {
    const ckpt_tensor *tt = &m->tensors[t];
    for (int c = 0; c < tt->nchunks; c++) {
      const ckpt_chunk_ref *ref = &tt->chunks[c];
      char hex[CKPT_HEX_LEN + 1], key[128];
      ckpt_hex(ref->hash, hex);
      ckpt_objkey_chunk(key, sizeof key, hex);
      uint8_t *obj = NULL;
      size_t objlen = 0;
      int r = s->tier->get(s->tier, key, &obj, &objlen);
      if (r == FT_OK) {
        if (cap < ref->len) {
          free(buf);
          buf = malloc(ref->len);
          cap = buf ? ref->len : 0;
        }
        r = buf ? ckpt_chunk_decode(obj, objlen, ref->hash, buf, ref->len)
                : ft_err_set(FT_ENOMEM, "out of memory");
        free(obj);
        if (r == FT_ENOMEM) {
          rc = r;
          goto out;
        }
        if (r) {
          rep->chunks_corrupt++;
          if (!rep->first_problem[0])
            snprintf(rep->first_problem, sizeof rep->first_problem,
                     "%s (tensor %s, bytes %" PRIu64 "..%" PRIu64 ")", ft_err_detail(), tt->name,
                     ref->offset, ref->offset + ref->len);
        }
      } else if (r == FT_ENOENT) {
        rep->chunks_missing++;
        if (!rep->first_problem[0])
          snprintf(rep->first_problem, sizeof rep->first_problem,
                   "chunk %s (tensor %s, bytes %" PRIu64 "..%" PRIu64 ") is missing", hex, tt->name,
                   ref->offset, ref->offset + ref->len);
      } else {
        rc = r; /* an I/O error is not a verdict on the checkpoint */
        goto out;
      }
      rep->chunks_checked++;
      done++;
      if (progress)
        progress(ud, done, total);
    }
  }
  if (rep->chunks_corrupt || rep->chunks_missing) {
    if (!s->read_only) {
      int r = ckpt_store_set_state(s, run, step, CKPT_BAD);
      if (r) {
        rc = r;
        goto out;
      }
    }
    rc = ft_err_set(FT_ECORRUPT,
                    "checkpoint %s step %" PRId64 ": %d corrupt, %d missing of %d "
                    "chunks; first: %s",
                    run, step, rep->chunks_corrupt, rep->chunks_missing, rep->chunks_checked,
                    rep->first_problem);
  }
out:
  free(buf);
  ckpt_manifest_free(m);
  return rc;
}
