/*
 * sup_shardq: SHARD_SAVED envelopes parsed on a thread of their own, the
 * results handed back to the loop in arrival order (see sup_shardq.c).
 */
#ifndef SUP_SHARDQ_H
#define SUP_SHARDQ_H

#include "ckptstore.h"

#include <event2/event.h>
#include <stdint.h>

/* One rank's report: what the loop knew when it came (gen, step, rank),
 * its text until parsed, then what the parse found. */
typedef struct sup_shard_job {
  struct sup_shard_job *next;
  uint64_t gen; /* the supervisor's generation when it came */
  int64_t step;
  int rank;   /* a host reference (ckpt_store_put_host): its first rank */
  int node;   /* the node whose agent sent a host reference; -1: a worker */
  char *text; /* the envelope (owned); freed once parsed */
  /* the parse: why[0] != 0 if the report is bad (sh is then NULL) */
  ckpt_shard *sh;
  int level;                      /* enum ckpt_level */
  char *state, *config, *metrics; /* the envelope's, if it has them */
  double loss;                    /* NAN if none */
  char why[512];
} sup_shard_job;

typedef struct sup_shardq sup_shardq;
typedef void (*sup_shardq_fn)(void *ud, sup_shard_job *j);

/* done runs on the loop's thread, once per job, in push order; it owns the
 * job (sup_shard_job_free). */
int sup_shardq_new(struct event_base *base, sup_shardq_fn done, void *ud, sup_shardq **out);
/* Queues j (the queue owns it until done). */
void sup_shardq_push(sup_shardq *q, sup_shard_job *j);
/* Jobs queued, being parsed or waiting for the loop. */
int sup_shardq_len(sup_shardq *q);
/* Stops the thread; jobs not yet handed to done are freed unreported.
 * NULL is a no-op. */
void sup_shardq_free(sup_shardq *q);
void sup_shard_job_free(sup_shard_job *j);

/* The parse itself (what the thread runs; for tests): fills j's results
 * from j->text. Checks that the manifest is of j->step and j->rank. */
void sup_shard_parse(sup_shard_job *j);

#endif
