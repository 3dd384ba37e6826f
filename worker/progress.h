/*
 * progress: what the training thread is doing, published where the control
 * thread reads it without a lock (issue 36: progress, not liveness).
 *
 * A worker whose training thread is stuck (a deadlock, a collective that
 * never returns, a read from a hung file system) still heartbeats from its
 * control thread, so heartbeats alone cannot tell a hang. Every HEARTBEAT
 * therefore carries this record (ft_wire.h, version 7): the phase
 * (ft_phase), the last completed step, the number of collectives started
 * on this generation's communicator, and how long ago any of them last
 * changed. The supervisor keeps each rank's last record and a detector
 * (watchdog/wd_progress.h) judges them.
 *
 * One record per process (the training thread is the only writer that
 * matters; comm.c publishes each collective, train.c the phases between
 * them). Writers are serialised by the sequence word itself (a writer
 * takes it from even to odd with a compare-and-swap), so a second writer
 * (the link check, a test) never tears the record either; readers
 * (progress_read) retry while a write is in flight and never block it.
 * Each field is a C11 atomic accessed relaxed inside the seqlock, so the
 * record is free of data races in the C11 sense (TSan-clean), not only
 * "probably fine".
 *
 * The last PROGRESS_RING_LEN changes are kept too (progress_ring), for the
 * evidence a hung worker leaves in its log before it is killed
 * (worker/stackdump.h): each change of the record, inside the same write,
 * fills the next slot of a ring. Each slot is a seqlock of its own whose
 * sequence is the change's number, so a reader never waits: a slot being
 * written, or already reused, is skipped. That makes the ring (and
 * progress_try_read) safe in a signal handler, even one that interrupted
 * a write on the writer's own thread, where a retrying reader would spin
 * forever.
 *
 * Storage waits (phase storage_wait, wire version 9): where the training
 * thread blocks on a remote read of its data (worker/data_s3.c: a block of
 * an s3:// shard that is not in memory, fetched by itself or by the
 * prefetcher), progress_wait_begin/_end put the record in storage_wait and
 * back. Why it waits is a note beside the record (progress_wait_note: the
 * read's last retry, from any thread, through the S3 client's retry hook,
 * worker/data_wait.c): one atomic word, outside the seqlock, which
 * HEARTBEAT carries while the phase is storage_wait.
 *
 * Cost: a write is two atomic read-modify-writes, about ten relaxed stores
 * and one clock_gettime(CLOCK_MONOTONIC), about 30 ns: a handful per
 * micro-batch and one per collective.
 */
#ifndef FT_PROGRESS_H
#define FT_PROGRESS_H

#include <stdint.h>

#include "ft_wire.h"

typedef struct progress_rec {
  ft_phase phase;
  int64_t step;        /* last completed step (-1: none) */
  uint64_t coll_seq;   /* collectives started since progress_generation (in phase
                          collective: the one in flight) */
  uint64_t changed_ns; /* ft_now_ns() when phase, step or coll_seq last changed */
} progress_rec;

/* The process's record: phase idle, step -1, coll_seq 0, changed now. A new
 * generation's communicator starts counting its collectives at 0 on every
 * rank (ranks compare them): call when the comm is made. */
void progress_generation(void);

/* The phase from now on (the time changes only when it differs). */
void progress_phase(ft_phase phase);
/* The phase `to`, only while the phase is `from` (the engine's backward
 * half of a training micro-batch, not of a recomputation). */
void progress_phase_if(ft_phase from, ft_phase to);
/* Step `step` completed (its optimizer update applied), and the phase. */
void progress_step_done(int64_t step, ft_phase phase);

/* A collective starts: coll_seq + 1, phase collective; returns the phase
 * it interrupted, for progress_coll_end. */
ft_phase progress_coll_begin(void);
/* Waiting for collectives enqueued earlier (comm_dev_wait): phase
 * collective, coll_seq unchanged; returns the phase it interrupted. */
ft_phase progress_coll_wait_begin(void);
/* The collective returned (either way): the phase before it again. */
void progress_coll_end(ft_phase before);
/* A collective enqueued without waiting (a device collective): counted, the
 * phase unchanged. */
void progress_coll_count(void);

/* Storage waits (see above). *was is the caller's: FT_PHASE_COUNT while
 * not waiting. begin: the first call puts the record in storage_wait and
 * keeps the phase it interrupted in *was; a later one with restart set (a
 * new request for the same wait) only restarts the phase's clock, so the
 * watchdog's deadline covers one request (ckpt_s3_read_bound_s). end: back
 * to *was (when still in storage_wait), *was = FT_PHASE_COUNT, the note
 * cleared; nothing when not waiting. Training thread only. */
void progress_wait_begin(ft_phase *was, int restart);
void progress_wait_end(ft_phase *was);
/* Any thread: the wait's read was retried (why, its attempt from 1), or a
 * retried read succeeded (clear). get: the note (FT_WAIT_NONE, 0: none). */
void progress_wait_note(ft_wait_reason why, uint32_t attempt);
void progress_wait_clear(void);
void progress_wait_get(ft_wait_reason *why, uint32_t *attempt);

/* The phase now (the writer's own view). */
ft_phase progress_phase_get(void);

/* A consistent copy of the record (never torn); lock-free, any thread. */
void progress_read(progress_rec *out);

/* The same without waiting: 0 and a whole copy, or -1 when a write is in
 * flight (or none was ever made). Async-signal-safe. */
int progress_try_read(progress_rec *out);

/* The last changes of the record kept (the ring's length). */
#define PROGRESS_RING_LEN 32
/* Copies up to max (at most PROGRESS_RING_LEN) of the record's last
 * changes, newest first, each as the record became (changed_ns: when);
 * returns how many. A slot caught mid-write (a write reusing the oldest)
 * ends the list there. Never waits, never allocates: async-signal-safe, on
 * any thread. */
int progress_ring(progress_rec *out, int max);

/* The same over a record of one's own (tests): a progress_store is what the
 * process record is made of. */
typedef struct progress_store progress_store;
progress_store *progress_store_new(void);
void progress_store_free(progress_store *p);
/* Writes a whole record (phase, step, coll_seq, changed_ns as given). */
void progress_store_write(progress_store *p, const progress_rec *r);
void progress_store_read(progress_store *p, progress_rec *out);
int progress_store_try_read(progress_store *p, progress_rec *out);
int progress_store_ring(progress_store *p, progress_rec *out, int max);
/* Retries readers needed since creation (a test's proof they raced writes). */
uint64_t progress_store_retries(progress_store *p);

/* The milliseconds since r changed at now_ns, saturated to u32 (HEARTBEAT). */
uint32_t progress_age_ms(const progress_rec *r, uint64_t now_ns);

#endif
