/*
 * progress: the training thread's progress record, a seqlock over C11
 * atomics (see progress.h).
 *
 * The protocol (H.-J. Boehm, "Can seqlocks get along with programming
 * language memory models?", MSPC 2012):
 *   writer  CAS seq even -> odd (acquire; this also excludes other writers),
 *           release fence, relaxed stores of the fields, store seq + 2
 *           (release);
 *   reader  s1 = seq (acquire), relaxed loads of the fields, acquire
 *           fence, s2 = seq (relaxed); the copy is whole iff s1 == s2 and
 *           s1 is even, else read again.
 * If the reader saw any store of a write, the fences order that write's
 * odd seq before its second load, so s2 != s1.
 *
 * The ring of the last changes (progress_ring): change number k (from 1)
 * goes to slot k % PROGRESS_RING_LEN, written inside the record's write
 * (so writers are already excluded from each other) as its own seqlock:
 *   writer  slot.seq = 0 (relaxed), release fence, relaxed stores of the
 *           fields, slot.seq = k (release), then head = k (release);
 *   reader  h = head (acquire); for k = h, h-1, ...: s1 = slot.seq
 *           (acquire), relaxed loads, acquire fence, s2 = slot.seq
 *           (relaxed); the entry is change k iff s1 == s2 == k.
 * A slot's sequence only takes 0 and ever larger change numbers, so a
 * reader that saw any store of a later write sees s2 != k. The reader
 * never retries: a slot being written (by a thread the reader interrupted,
 * in a signal handler) or reused ends its list.
 *
 * Storage waits (progress_wait_*): the phase storage_wait goes through the
 * record like any phase; why the thread waits (the S3 client's last retry:
 * reason and attempt, worker/data_wait.c) is one atomic word beside the
 * record, relaxed: a hint the control thread copies into the next
 * HEARTBEAT, written by whichever thread's request was retried, cleared
 * when the wait ends. It needs no ordering with the record: a beat that
 * pairs the phase with the previous note only says the older reason.
 */
#include "progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ft_clock.h"

typedef struct ring_slot {
  _Atomic uint64_t seq; /* the change's number (from 1); 0 while written */
  _Atomic uint32_t phase;
  _Atomic int64_t step;
  _Atomic uint64_t coll_seq;
  _Atomic uint64_t at_ns;
} ring_slot;

struct progress_store {
  _Atomic uint64_t seq;
  _Atomic uint32_t phase;
  _Atomic int64_t step;
  _Atomic uint64_t coll_seq;
  _Atomic uint64_t changed_ns;
  _Atomic uint64_t retries;
  _Atomic uint64_t head; /* changes kept in the ring so far */
  ring_slot ring[PROGRESS_RING_LEN];
};

static progress_store g_prog; /* the process's, set up by its first user */
static pthread_once_t g_prog_once = PTHREAD_ONCE_INIT;

static uint64_t write_begin(progress_store *p) {
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
  for (;;) {
    if (!(s & 1) && atomic_compare_exchange_weak_explicit(&p->seq, &s, s + 1, memory_order_acquire,
                                                          memory_order_relaxed))
      break;
    if (s & 1) /* another writer: wait for it */
      s = atomic_load_explicit(&p->seq, memory_order_relaxed);
  }
  atomic_thread_fence(memory_order_release);
  return s;
}

#define LD(f) atomic_load_explicit(&p->f, memory_order_relaxed)
#define ST(f, v) atomic_store_explicit(&p->f, (v), memory_order_relaxed)

/* The record as it now is, into the ring's next slot (inside a write). */
static void ring_push(progress_store *p) {
  uint64_t k = LD(head) + 1;
  ring_slot *e = &p->ring[k % PROGRESS_RING_LEN];
  atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&e->phase, LD(phase), memory_order_relaxed);
  atomic_store_explicit(&e->step, LD(step), memory_order_relaxed);
  atomic_store_explicit(&e->coll_seq, LD(coll_seq), memory_order_relaxed);
  atomic_store_explicit(&e->at_ns, LD(changed_ns), memory_order_relaxed);
  atomic_store_explicit(&e->seq, k, memory_order_release);
  atomic_store_explicit(&p->head, k, memory_order_release);
}

/* Ends a write; changed: the record changed (its new state goes to the
 * ring). */
static void write_end(progress_store *p, uint64_t s, int changed) {
  if (changed)
    ring_push(p);
  atomic_store_explicit(&p->seq, s + 2, memory_order_release);
}

void progress_store_write(progress_store *p, const progress_rec *r) {
  uint64_t s = write_begin(p);
  ST(phase, (uint32_t)r->phase);
  ST(step, r->step);
  ST(coll_seq, r->coll_seq);
  ST(changed_ns, r->changed_ns);
  write_end(p, s, 1);
}

/* One attempt at a whole copy: 0, or -1 (a write in flight or under way). */
static int read_once(progress_store *p, progress_rec *out) {
  uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
  if (s1 & 1)
    return -1;
  uint32_t ph = LD(phase);
  int64_t step = LD(step);
  uint64_t cs = LD(coll_seq), ch = LD(changed_ns);
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&p->seq, memory_order_relaxed) != s1)
    return -1;
  out->phase = (ft_phase)ph;
  out->step = step;
  out->coll_seq = cs;
  out->changed_ns = ch;
  return 0;
}

void progress_store_read(progress_store *p, progress_rec *out) {
  while (read_once(p, out))
    atomic_fetch_add_explicit(&p->retries, 1, memory_order_relaxed);
}

int progress_store_try_read(progress_store *p, progress_rec *out) {
  /* a few tries: another thread's write takes nanoseconds; one this thread
   * was interrupted in (a signal handler) never ends while we look */
  for (int i = 0; i < 4; i++)
    if (atomic_load_explicit(&p->seq, memory_order_relaxed) > 0 && !read_once(p, out))
      return 0;
  return -1;
}

int progress_store_ring(progress_store *p, progress_rec *out, int max) {
  uint64_t h = atomic_load_explicit(&p->head, memory_order_acquire);
  int n = 0;
  for (uint64_t k = h; k > 0 && n < max && n < PROGRESS_RING_LEN; k--) {
    ring_slot *e = &p->ring[k % PROGRESS_RING_LEN];
    if (atomic_load_explicit(&e->seq, memory_order_acquire) != k)
      break;
    progress_rec r = {
        .phase = (ft_phase)atomic_load_explicit(&e->phase, memory_order_relaxed),
        .step = atomic_load_explicit(&e->step, memory_order_relaxed),
        .coll_seq = atomic_load_explicit(&e->coll_seq, memory_order_relaxed),
        .changed_ns = atomic_load_explicit(&e->at_ns, memory_order_relaxed),
    };
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&e->seq, memory_order_relaxed) != k)
      break;
    out[n++] = r;
  }
  return n;
}

uint64_t progress_store_retries(progress_store *p) {
  return atomic_load_explicit(&p->retries, memory_order_relaxed);
}

progress_store *progress_store_new(void) {
  progress_store *p = calloc(1, sizeof *p);
  if (p) {
    progress_rec r = {.phase = FT_PHASE_IDLE, .step = -1, .coll_seq = 0, .changed_ns = ft_now_ns()};
    progress_store_write(p, &r);
  }
  return p;
}

void progress_store_free(progress_store *p) {
  free(p);
}

/* ---- the process's record ------------------------------------------------ */

static void proc_init(void) {
  progress_rec r = {.phase = FT_PHASE_IDLE, .step = -1, .coll_seq = 0, .changed_ns = ft_now_ns()};
  progress_store_write(&g_prog, &r);
}

static progress_store *proc(void) {
  pthread_once(&g_prog_once, proc_init);
  return &g_prog;
}

void progress_generation(void) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  ST(phase, FT_PHASE_IDLE);
  ST(step, -1);
  ST(coll_seq, 0);
  ST(changed_ns, ft_now_ns());
  write_end(p, s, 1);
}

/* The phase becomes to (a change of the record) when it is from, or when
 * any is set; otherwise nothing changes. */
static void set_phase(int any, ft_phase from, ft_phase to) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  uint32_t now = LD(phase);
  int changed = now != (uint32_t)to && (any || now == (uint32_t)from);
  if (changed) {
    ST(phase, (uint32_t)to);
    ST(changed_ns, ft_now_ns());
  }
  write_end(p, s, changed);
}

void progress_phase(ft_phase phase) {
  set_phase(1, phase, phase);
}

void progress_phase_if(ft_phase from, ft_phase to) {
  set_phase(0, from, to);
}

void progress_step_done(int64_t step, ft_phase phase) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  int changed = LD(phase) != (uint32_t)phase || LD(step) != step;
  if (changed) {
    ST(phase, (uint32_t)phase);
    ST(step, step);
    ST(changed_ns, ft_now_ns());
  }
  write_end(p, s, changed);
}

static ft_phase coll_begin(int count) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  ft_phase before = (ft_phase)LD(phase); /* collective itself when nested */
  ST(phase, (uint32_t)FT_PHASE_COLLECTIVE);
  if (count)
    ST(coll_seq, LD(coll_seq) + 1);
  ST(changed_ns, ft_now_ns());
  write_end(p, s, 1);
  return before;
}

ft_phase progress_coll_begin(void) {
  return coll_begin(1);
}

ft_phase progress_coll_wait_begin(void) {
  return coll_begin(0);
}

void progress_coll_end(ft_phase before) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  ST(phase, (uint32_t)before);
  ST(changed_ns, ft_now_ns());
  write_end(p, s, 1);
}

/* ---- storage waits ------------------------------------------------------- */

/* why << 32 | attempt; 0: none */
static _Atomic uint64_t g_wait_note;

void progress_wait_begin(ft_phase *was, int restart) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  int changed = 0;
  if (*was == FT_PHASE_COUNT) {
    *was = (ft_phase)LD(phase);
    changed = *was != FT_PHASE_STORAGE_WAIT;
    if (!changed) /* already waiting (not ours): end leaves it as it was */
      *was = FT_PHASE_DATA;
  } else {
    changed = restart;
  }
  if (changed) {
    ST(phase, (uint32_t)FT_PHASE_STORAGE_WAIT);
    ST(changed_ns, ft_now_ns());
  }
  write_end(p, s, changed);
}

void progress_wait_end(ft_phase *was) {
  if (*was == FT_PHASE_COUNT)
    return;
  set_phase(0, FT_PHASE_STORAGE_WAIT, *was);
  *was = FT_PHASE_COUNT;
  progress_wait_clear();
}

void progress_wait_note(ft_wait_reason why, uint32_t attempt) {
  atomic_store_explicit(&g_wait_note, (uint64_t)(uint32_t)why << 32 | attempt,
                        memory_order_relaxed);
}

void progress_wait_clear(void) {
  atomic_store_explicit(&g_wait_note, 0, memory_order_relaxed);
}

void progress_wait_get(ft_wait_reason *why, uint32_t *attempt) {
  uint64_t v = atomic_load_explicit(&g_wait_note, memory_order_relaxed);
  uint32_t w = (uint32_t)(v >> 32);
  *why = w < FT_WAIT_REASON_COUNT ? (ft_wait_reason)w : FT_WAIT_OTHER;
  *attempt = (uint32_t)v;
}

void progress_coll_count(void) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  ST(coll_seq, LD(coll_seq) + 1);
  ST(changed_ns, ft_now_ns());
  write_end(p, s, 1);
}

ft_phase progress_phase_get(void) {
  progress_rec r;
  progress_read(&r);
  return r.phase;
}

void progress_read(progress_rec *out) {
  progress_store_read(proc(), out);
}

/* Not through proc(): pthread_once is no async-signal-safe call. A record
 * never written has seq 0 and an empty ring, which both readers report. */
int progress_try_read(progress_rec *out) {
  return progress_store_try_read(&g_prog, out);
}

int progress_ring(progress_rec *out, int max) {
  return progress_store_ring(&g_prog, out, max);
}

uint32_t progress_age_ms(const progress_rec *r, uint64_t now_ns) {
  if (now_ns <= r->changed_ns)
    return 0;
  uint64_t ms = (now_ns - r->changed_ns) / 1000000u;
  return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}
