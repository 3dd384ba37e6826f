/*
 * sup_commitq: commits on a thread of their own, results back on the loop
 * (see sup_commitq.c for the model and its invariants).
 */
#ifndef SUP_COMMITQ_H
#define SUP_COMMITQ_H

#include "sup_int.h"

#include <event2/event.h>

typedef struct sup_commitq sup_commitq;
typedef void (*sup_commitq_fn)(void *ud, sup_pending_ckpt *p);
/* The retention GC: a job holding its outcome for done (gc_done set), or
 * NULL (nothing to report). */
typedef sup_pending_ckpt *(*sup_commitq_gc)(void *ud);

/* work runs on the queue's threads (one per lane: memory-level jobs,
 * records (p->rec.work set), the others); gc on its GC thread after each store-level commit (not a
 * mark_good job) whose p->rc is 0, and what it returns goes to done; done
 * (which then owns p) and release (for jobs never started, at free) on the
 * loop's. */
int sup_commitq_new(struct event_base *base, sup_commitq_fn work, sup_commitq_fn done,
                    sup_commitq_fn release, sup_commitq_gc gc, void *ud, sup_commitq **out);
/* Queues p (the queue owns it until done or release). */
void sup_commitq_push(sup_commitq *q, sup_pending_ckpt *p);
/* Waits for the job in flight, reports finished ones, releases the rest.
 * NULL is a no-op. */
void sup_commitq_free(sup_commitq *q);

#endif
