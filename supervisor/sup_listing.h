/*
 * sup_listing: the run's recorded s3:// data listing kept with its
 * checkpoints (docs/data.md "The listing").
 *
 * The workers record the listing of every s3:// pattern in one file
 * (FT_DATA_LISTING, by default STATE/data_listing.json; worker/
 * data_listing.c). A checkpoint's data position means "sequence i of THAT
 * list of objects", so every checkpoint the supervisor commits carries the
 * file's JSON, compact (ckpt_meta.data_json, the manifest's "data" key), and a run
 * that resumes without the file (a fresh --state) gets it back from the
 * checkpoint it resumes from before any worker starts: an object added to
 * the bucket since never changes the stream.
 *
 * Threading: sup_listing_text is called by the commit queue's lanes (two
 * threads at once); the cache is under the object's mutex. Everything else
 * is the start's (one thread, before the loop).
 */
#ifndef SUP_LISTING_H
#define SUP_LISTING_H

#include "ckptstore.h"

#include <stdint.h>
#include <stdio.h>

typedef struct sup_listing sup_listing;

/* The listing of the file at path (borrowed, copied). FT_ENOMEM. */
int sup_listing_new(const char *path, sup_listing **out);
void sup_listing_free(sup_listing *l); /* NULL: no-op */

/* The file's JSON, compact, for a commit: malloc'd (caller frees), NULL
 * when there is no file yet (or it cannot be read or is not JSON: said once
 * on stderr; the commit goes on without it). Read once and cached; read again only when the file
 * changes (inode, size or mtime). Thread-safe. */
char *sup_listing_text(sup_listing *l);

/* What sup_listing_restore did, for the run_started event. */
typedef struct sup_listing_outcome {
  const char *source; /* "checkpoint": written from it; "state": the file was
                         there (and the checkpoint's is the same, or it has
                         none); "relist": moved aside on request, the workers
                         list again; "none": neither, they list */
  int64_t step;       /* the checkpoint consulted; -1: none */
  int replaced;       /* a different file was there: kept as FILE.old */
} sup_listing_outcome;

/* At start, before any worker: with step >= 0 (the checkpoint the run
 * resumes from) and no relist, the listing of that checkpoint is written to
 * the file (whole: temp + rename) when the file is absent, or differs as
 * JSON (the old file kept as FILE.old, a warning on err). relist: the file, if any,
 * moves to FILE.old and nothing is written (the workers list the bucket
 * again; the checkpoints after carry the new listing). A checkpoint without
 * a listing (older than them) leaves the file as it is. FT_E* on a store or
 * file error (the detail says which). */
int sup_listing_restore(sup_listing *l, ckpt_store *st, const char *run, int64_t step, int relist,
                        FILE *err, sup_listing_outcome *out);

#endif
