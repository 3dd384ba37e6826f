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
 */
#include "progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ft_clock.h"

struct progress_store {
  _Atomic uint64_t seq;
  _Atomic uint32_t phase;
  _Atomic int64_t step;
  _Atomic uint64_t coll_seq;
  _Atomic uint64_t changed_ns;
  _Atomic uint64_t retries;
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

static void write_end(progress_store *p, uint64_t s) {
  atomic_store_explicit(&p->seq, s + 2, memory_order_release);
}

#define LD(f) atomic_load_explicit(&p->f, memory_order_relaxed)
#define ST(f, v) atomic_store_explicit(&p->f, (v), memory_order_relaxed)

void progress_store_write(progress_store *p, const progress_rec *r) {
  uint64_t s = write_begin(p);
  ST(phase, (uint32_t)r->phase);
  ST(step, r->step);
  ST(coll_seq, r->coll_seq);
  ST(changed_ns, r->changed_ns);
  write_end(p, s);
}

void progress_store_read(progress_store *p, progress_rec *out) {
  for (;;) {
    uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
    if (!(s1 & 1)) {
      uint32_t ph = LD(phase);
      int64_t step = LD(step);
      uint64_t cs = LD(coll_seq), ch = LD(changed_ns);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s1) {
        out->phase = (ft_phase)ph;
        out->step = step;
        out->coll_seq = cs;
        out->changed_ns = ch;
        return;
      }
    }
    atomic_fetch_add_explicit(&p->retries, 1, memory_order_relaxed);
  }
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
  write_end(p, s);
}

/* The phase becomes to (a change of the record) when it is from, or when
 * any is set; otherwise nothing changes. */
static void set_phase(int any, ft_phase from, ft_phase to) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  uint32_t now = LD(phase);
  if (now != (uint32_t)to && (any || now == (uint32_t)from)) {
    ST(phase, (uint32_t)to);
    ST(changed_ns, ft_now_ns());
  }
  write_end(p, s);
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
  if (LD(phase) != (uint32_t)phase || LD(step) != step) {
    ST(phase, (uint32_t)phase);
    ST(step, step);
    ST(changed_ns, ft_now_ns());
  }
  write_end(p, s);
}

static ft_phase coll_begin(int count) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  ft_phase before = (ft_phase)LD(phase); /* collective itself when nested */
  ST(phase, (uint32_t)FT_PHASE_COLLECTIVE);
  if (count)
    ST(coll_seq, LD(coll_seq) + 1);
  ST(changed_ns, ft_now_ns());
  write_end(p, s);
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
  write_end(p, s);
}

void progress_coll_count(void) {
  progress_store *p = proc();
  uint64_t s = write_begin(p);
  ST(coll_seq, LD(coll_seq) + 1);
  ST(changed_ns, ft_now_ns());
  write_end(p, s);
}

ft_phase progress_phase_get(void) {
  progress_rec r;
  progress_read(&r);
  return r.phase;
}

void progress_read(progress_rec *out) {
  progress_store_read(proc(), out);
}

uint32_t progress_age_ms(const progress_rec *r, uint64_t now_ns) {
  if (now_ns <= r->changed_ns)
    return 0;
  uint64_t ms = (now_ns - r->changed_ns) / 1000000u;
  return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}
