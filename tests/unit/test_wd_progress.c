/*
 * Tests of wd_progress (watchdog/wd_progress.c): the deadline (auto: a
 * multiple of the slowest recent step, its floor, ceiling and first-step
 * minimum; fixed; each phase's allowance), no verdict while any rank
 * moves, and every class: behind (culprits and their nodes, the phase
 * named), storage, network, rendezvous, gang, none; hostile values; the
 * attribution of a collective timeout (wd_progress_behind), and of a
 * rendezvous timeout to the ranks that never joined; a rank waiting on its
 * data's bucket (storage_wait): its deadline (the S3 client's bound), never
 * a culprit, verdict storage.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ft_err.h"
#include "ft_wire.h"
#include "wd_progress.h"

static wd_progress_cfg cfg10(void) {
  wd_progress_cfg c;
  wd_progress_cfg_default(&c, 10);
  return c;
}

/* a joined rank: node, phase, coll_seq, step, stuck_s */
static wd_prog_rank rk(int node, int phase, uint64_t coll, int64_t step, double stuck) {
  return (wd_prog_rank){
      .node = node, .in_gen = 1, .phase = phase, .coll_seq = coll, .step = step, .stuck_s = stuck};
}

static const double steps1[] = {0.8, 1.0, 0.9}; /* slowest 1 s: auto base = floor 60 */

static wd_prog_verdict judge(const wd_prog_rank *r, int n) {
  wd_progress_cfg c = cfg10();
  wd_prog_verdict v;
  assert_int_equal(wd_progress_judge(&c, r, n, steps1, 3, 0, &v), FT_OK);
  return v;
}

static void test_deadline_auto(void **state) {
  (void)state;
  wd_progress_cfg c = cfg10();
  double s[] = {0.5, 2.0, 1.0};
  /* 10 x 2 s = 20 s, below the floor of 60 */
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, s, 3, 0) == 60);
  double slow[] = {12, 30, NAN, -4, INFINITY, 0}; /* the bad ones ignored */
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, slow, 6, 0) == 300);
  double huge[] = {500};
  assert_true(wd_progress_deadline(&c, FT_PHASE_COLLECTIVE, huge, 1, 0) == 1800); /* ceiling */
  /* no recent step, or the generation's first step: first_step_s */
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, NULL, 0, 0) == 600);
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, s, 3, 1) == 600);
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, huge, 1, 1) == 1800);
  /* the floor is never below the heartbeat timeout */
  c.heartbeat_timeout_s = 100;
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, s, 3, 0) == 100);
  c = cfg10();
  c.floor_s = 0;
  double fast[] = {0.1};
  assert_true(wd_progress_deadline(&c, FT_PHASE_DATA, fast, 1, 0) == 10);
  double mid[] = {3};
  assert_true(wd_progress_deadline(&c, FT_PHASE_DATA, mid, 1, 0) == 30);
}

static void test_deadline_fixed_and_phases(void **state) {
  (void)state;
  wd_progress_cfg c = cfg10();
  c.timeout_s = 120; /* fixed: the steps do not matter */
  double huge[] = {500};
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, huge, 1, 0) == 120);
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, NULL, 0, 1) == 120);
  c.timeout_s = 5; /* still floored */
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, NULL, 0, 0) == 60);
  c = cfg10();
  /* the allowances, on the auto base of 60 */
  assert_true(wd_progress_deadline(&c, FT_PHASE_RESTORE, steps1, 3, 0) == 600);
  assert_true(wd_progress_deadline(&c, FT_PHASE_RENDEZVOUS, steps1, 3, 0) == 600);
  assert_true(wd_progress_deadline(&c, FT_PHASE_VALIDATION, steps1, 3, 0) == 360);
  assert_true(wd_progress_deadline(&c, FT_PHASE_SNAPSHOT, steps1, 3, 0) == 660);
  assert_true(wd_progress_deadline(&c, FT_PHASE_CKPT_WRITE, steps1, 3, 0) == 660);
  for (int ph = 0; ph < FT_PHASE_COUNT; ph++) {
    double d = wd_progress_deadline(&c, ph, steps1, 3, 0);
    assert_true(d >= 60);
  }
  assert_true(wd_progress_deadline(&c, 200, steps1, 3, 0) == 60); /* unknown: compute */
  /* restore's minimum stays when the base is larger */
  double slow[] = {100};
  assert_true(wd_progress_deadline(&c, FT_PHASE_RESTORE, slow, 1, 0) == 1000);
}

/* A healthy gang over many ticks: phases rotate, collectives count, every
 * rank's progress is younger than its deadline: never a verdict. */
static void test_no_false_alarm_while_moving(void **state) {
  (void)state;
  wd_prog_rank r[8];
  const int phases[] = {FT_PHASE_DATA,       FT_PHASE_FORWARD,   FT_PHASE_BACKWARD,
                        FT_PHASE_COLLECTIVE, FT_PHASE_OPTIMIZER, FT_PHASE_SNAPSHOT,
                        FT_PHASE_VALIDATION, FT_PHASE_SDC};
  uint64_t coll = 0;
  for (int tick = 0; tick < 2000; tick++) {
    coll += tick % 3 == 0;
    for (int i = 0; i < 8; i++)
      r[i] = rk(i / 2, phases[(tick + i) % 8], coll - (i == 5 && coll > 0), tick / 10,
                (double)((tick * 7 + i * 13) % 59));
    wd_prog_verdict v = judge(r, 8);
    assert_int_equal(v.cls, WD_PROG_NONE);
    assert_int_equal(v.nculprits, 0);
  }
  /* every rank stuck long but one still moving: the gang moves */
  for (int i = 0; i < 8; i++)
    r[i] = rk(i / 2, FT_PHASE_COLLECTIVE, 500, 40, 1000);
  r[6] = rk(3, FT_PHASE_FORWARD, 499, 40, 2.0);
  assert_int_equal(judge(r, 8).cls, WD_PROG_NONE);
  /* a slow first step is no hang: 300 s is below first_step_s */
  for (int i = 0; i < 8; i++)
    r[i] = rk(i / 2, FT_PHASE_COLLECTIVE, 3, -1, 300);
  wd_progress_cfg c = cfg10();
  wd_prog_verdict v;
  assert_int_equal(wd_progress_judge(&c, r, 8, NULL, 0, 1, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  /* exactly at the deadline: not yet (strictly past it) */
  for (int i = 0; i < 8; i++)
    r[i] = rk(i / 2, FT_PHASE_COLLECTIVE, 3, 10, 60);
  assert_int_equal(judge(r, 8).cls, WD_PROG_NONE);
  r[0].stuck_s = r[1].stuck_s = 61; /* the rest at 60 */
  assert_int_equal(judge(r, 8).cls, WD_PROG_NONE);
}

/* (a) one rank behind: the others wait in collective N, it computes */
static void test_behind_one(void **state) {
  (void)state;
  wd_prog_rank r[4] = {
      rk(0, FT_PHASE_COLLECTIVE, 812, 40, 95), rk(0, FT_PHASE_COLLECTIVE, 812, 40, 96),
      rk(1, FT_PHASE_COLLECTIVE, 812, 40, 97), rk(1, FT_PHASE_FORWARD, 811, 40, 98)};
  wd_prog_verdict v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_string_equal(wd_prog_class_name(v.cls), "behind");
  assert_int_equal(v.phase, FT_PHASE_FORWARD);
  assert_true(v.coll_seq == 812);
  assert_int_equal(v.nculprits, 1);
  assert_int_equal(v.culprits[0], 3);
  assert_int_equal(v.nnodes, 1);
  assert_int_equal(v.nodes[0], 1);
  assert_true(v.stuck_s == 95);
  assert_true(v.deadline_s == 60);
  print_message("why: %s\n", v.why);
  assert_non_null(strstr(v.why, "rank 3 (node 1) stuck in forward"));
  assert_non_null(strstr(v.why, "wait in collective 812"));

  /* the culprit in a snapshot gets checkpoint_s more: not yet at 98 s */
  r[3].phase = FT_PHASE_SNAPSHOT;
  assert_int_equal(judge(r, 4).cls, WD_PROG_NONE);
  r[3].stuck_s = 700;
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.phase, FT_PHASE_SNAPSHOT);

  /* behind inside an older collective (its peers finished it) */
  r[3] = rk(1, FT_PHASE_COLLECTIVE, 811, 40, 98);
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.phase, FT_PHASE_COLLECTIVE);
  assert_int_equal(v.culprits[0], 3);

  /* the hang_at_step shape on one node: its rank ended its step, the peer
   * waits in the next step's first all-gather */
  wd_prog_rank two[2] = {rk(0, FT_PHASE_COLLECTIVE, 1201, 40, 80),
                         rk(1, FT_PHASE_OPTIMIZER, 1200, 40, 81)};
  v = judge(two, 2);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.phase, FT_PHASE_OPTIMIZER);
  assert_int_equal(v.nodes[0], 1);
}

/* (a) a few ranks on two nodes, phases named from the first; ranks idle
 * after their part count as waiting */
static void test_behind_few(void **state) {
  (void)state;
  wd_prog_rank r[6];
  for (int i = 0; i < 6; i++)
    r[i] = rk(i, FT_PHASE_COLLECTIVE, 77, 9, 120);
  r[1] = rk(1, FT_PHASE_DATA, 76, 9, 130);
  r[4] = rk(4, FT_PHASE_BACKWARD, 70, 9, 125);
  r[5] = rk(5, FT_PHASE_IDLE, 77, 9, 500); /* done with its part */
  wd_prog_verdict v = judge(r, 6);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.nculprits, 2);
  assert_int_equal(v.culprits[0], 1);
  assert_int_equal(v.culprits[1], 4);
  assert_int_equal(v.nnodes, 2);
  assert_int_equal(v.nodes[0], 1);
  assert_int_equal(v.nodes[1], 4);
  assert_int_equal(v.phase, FT_PHASE_DATA);
  assert_true(v.stuck_s == 120);
  /* two culprits on the same node: that node once */
  r[4].node = 1;
  v = judge(r, 6);
  assert_int_equal(v.nculprits, 2);
  assert_int_equal(v.nnodes, 1);
  assert_int_equal(v.nodes[0], 1);
  assert_non_null(strstr(v.why, "ranks 1, 4 (node 1)"));
}

/* more than half behind: no culprit can be named */
static void test_gang(void **state) {
  (void)state;
  wd_prog_rank r[4];
  for (int i = 0; i < 4; i++)
    r[i] = rk(i, FT_PHASE_FORWARD, 10, 3, 100);
  r[0] = rk(0, FT_PHASE_COLLECTIVE, 11, 3, 100);
  wd_prog_verdict v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_GANG);
  assert_int_equal(v.nculprits, 0);
  assert_int_equal(v.nnodes, 0);
  /* every rank stuck in compute at the same point (hang_at_step on all) */
  for (int i = 0; i < 4; i++)
    r[i] = rk(i / 2, FT_PHASE_OPTIMIZER, 1200, 40, 100);
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_GANG);
  assert_int_equal(v.phase, FT_PHASE_OPTIMIZER);
  assert_int_equal(v.nculprits, 0);
  assert_non_null(strstr(v.why, "nobody blamed"));
  /* world 1 */
  v = judge(r, 1);
  assert_int_equal(v.cls, WD_PROG_GANG);
}

/* (b) every rank in data or checkpoint_write: nobody blamed */
static void test_storage(void **state) {
  (void)state;
  wd_prog_rank r[4];
  for (int i = 0; i < 4; i++)
    r[i] = rk(i, FT_PHASE_DATA, 5, 2, 100);
  wd_prog_verdict v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  assert_int_equal(v.phase, FT_PHASE_DATA);
  assert_int_equal(v.nculprits, 0);
  assert_int_equal(v.nnodes, 0);
  /* the final checkpoint: some durable (idle), the rest writing */
  for (int i = 0; i < 4; i++)
    r[i] = rk(i, i % 2 ? FT_PHASE_IDLE : FT_PHASE_CKPT_WRITE, 900, 100, 700);
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  assert_int_equal(v.phase, FT_PHASE_CKPT_WRITE);
  /* checkpoint_write within its allowance (60 + 600): no verdict */
  for (int i = 0; i < 4; i++)
    r[i].stuck_s = 650;
  assert_int_equal(judge(r, 4).cls, WD_PROG_NONE);
  /* a mix of data and checkpoint_write */
  for (int i = 0; i < 4; i++)
    r[i] = rk(i, i == 2 ? FT_PHASE_DATA : FT_PHASE_CKPT_WRITE, 900, 100, 700);
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  assert_int_equal(v.phase, FT_PHASE_CKPT_WRITE);
  /* one rank in data, the others waiting for it: behind, its phase named */
  for (int i = 0; i < 4; i++)
    r[i] = rk(i, FT_PHASE_COLLECTIVE, 31, 7, 100);
  r[2] = rk(2, FT_PHASE_DATA, 30, 7, 100);
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.phase, FT_PHASE_DATA);
  assert_int_equal(v.nodes[0], 2);
}

/* (c) every rank in the same collective */
static void test_network(void **state) {
  (void)state;
  wd_prog_rank r[8];
  for (int i = 0; i < 8; i++)
    r[i] = rk(i / 4, FT_PHASE_COLLECTIVE, 4242, 17, 61 + i);
  wd_prog_verdict v = judge(r, 8);
  assert_int_equal(v.cls, WD_PROG_NETWORK);
  assert_int_equal(v.phase, FT_PHASE_COLLECTIVE);
  assert_true(v.coll_seq == 4242);
  assert_int_equal(v.nculprits, 0);
  assert_true(v.stuck_s == 61);
  /* not yet past the deadline */
  r[3].stuck_s = 59;
  assert_int_equal(judge(r, 8).cls, WD_PROG_NONE);
}

/* (d) a rank that heartbeats but never joined the generation */
static void test_rendezvous(void **state) {
  (void)state;
  wd_prog_rank r[4];
  for (int i = 0; i < 4; i++)
    r[i] = rk(i, FT_PHASE_RENDEZVOUS, 0, -1, 700);
  r[2].in_gen = 0; /* still beats in the old generation */
  r[2].phase = FT_PHASE_FORWARD;
  r[2].coll_seq = 9000;
  wd_prog_verdict v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_RENDEZVOUS);
  assert_int_equal(v.phase, FT_PHASE_RENDEZVOUS);
  assert_int_equal(v.nculprits, 1);
  assert_int_equal(v.culprits[0], 2);
  assert_int_equal(v.nodes[0], 2);
  assert_non_null(strstr(v.why, "never joined"));
  /* in the generation but idle, nothing counted: it never took its ASSIGN */
  r[2] = rk(2, FT_PHASE_IDLE, 0, -1, 1);
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_RENDEZVOUS);
  assert_int_equal(v.culprits[0], 2);
  /* the others within restore_s (600): no verdict */
  for (int i = 0; i < 4; i++)
    if (i != 2)
      r[i].stuck_s = 500;
  assert_int_equal(judge(r, 4).cls, WD_PROG_NONE);
  /* every rank in the rendezvous, all joined: the network between them */
  for (int i = 0; i < 4; i++)
    r[i] = rk(i, FT_PHASE_RENDEZVOUS, 0, -1, 700);
  v = judge(r, 4);
  assert_int_equal(v.cls, WD_PROG_GANG); /* not a collective: no culprit, nobody blamed */
  assert_int_equal(v.nculprits, 0);
}

/* none: nobody joined yet, or every rank idle after its part */
static void test_none(void **state) {
  (void)state;
  wd_prog_rank r[3];
  for (int i = 0; i < 3; i++) {
    r[i] = rk(i, FT_PHASE_IDLE, 0, -1, 5000);
    r[i].in_gen = i == 1;
  }
  wd_prog_verdict v = judge(r, 3);
  assert_int_equal(v.cls, WD_PROG_NONE);
  assert_int_equal(v.phase, -1);
  for (int i = 0; i < 3; i++)
    r[i] = rk(i, FT_PHASE_IDLE, 400, 100, 5000); /* done, waiting for STOP */
  assert_int_equal(judge(r, 3).cls, WD_PROG_NONE);
  assert_string_equal(wd_prog_class_name(WD_PROG_NONE), "none");
  assert_string_equal(wd_prog_class_name(WD_PROG_STORAGE), "storage");
  assert_string_equal(wd_prog_class_name(WD_PROG_NETWORK), "network");
  assert_string_equal(wd_prog_class_name(WD_PROG_RENDEZVOUS), "rendezvous");
  assert_string_equal(wd_prog_class_name(WD_PROG_GANG), "gang");
  assert_string_equal(wd_prog_class_name(99), "?");
}

/* hostile or odd values never alarm wrongly nor crash */
static void test_odd_inputs(void **state) {
  (void)state;
  wd_progress_cfg c = cfg10();
  wd_prog_verdict v;
  wd_prog_rank r[2] = {rk(0, FT_PHASE_COLLECTIVE, 5, 1, 100),
                       rk(1, FT_PHASE_COLLECTIVE, 5, 1, 100)};
  assert_int_equal(wd_progress_judge(NULL, r, 2, steps1, 3, 0, &v), FT_EINVAL);
  assert_int_equal(wd_progress_judge(&c, NULL, 2, steps1, 3, 0, &v), FT_EINVAL);
  assert_int_equal(wd_progress_judge(&c, r, 0, steps1, 3, 0, &v), FT_EINVAL);
  assert_int_equal(wd_progress_judge(&c, r, 2, NULL, 3, 0, &v), FT_EINVAL);
  assert_int_equal(wd_progress_judge(&c, r, 2, steps1, -1, 0, &v), FT_EINVAL);
  assert_int_equal(wd_progress_judge(&c, r, 2, steps1, 3, 0, NULL), FT_EINVAL);
  /* a NaN age is no evidence of a hang */
  r[1].stuck_s = NAN;
  assert_int_equal(wd_progress_judge(&c, r, 2, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  /* a phase out of range is compute: behind */
  r[1] = rk(1, 250, 4, 1, 100);
  assert_int_equal(wd_progress_judge(&c, r, 2, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.phase, 250);
  assert_non_null(strstr(v.why, "stuck in ?"));
  /* many culprits: counted in full, the first 64 kept, the text bounded */
  static wd_prog_rank big[300];
  for (int i = 0; i < 300; i++)
    big[i] = rk(i, i % 2 ? FT_PHASE_FORWARD : FT_PHASE_COLLECTIVE, i % 2 ? 1 : 2, 0, 100);
  assert_int_equal(wd_progress_judge(&c, big, 300, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.nculprits, 150);
  assert_int_equal(v.culprits[63], 127);
  assert_int_equal(v.nnodes, WD_PROG_MAX_CULPRITS);
  assert_non_null(strstr(v.why, "and 142 more"));
  assert_true(strlen(v.why) < sizeof v.why);
}

/* wd_progress_behind: after a collective timeout, the ranks that never
 * started the reporter's collective, whatever their phase; nobody when
 * none, more than half, or a rank not in the generation. */
static void test_behind_collective(void **state) {
  (void)state;
  wd_prog_rank r[4] = {
      rk(0, FT_PHASE_COLLECTIVE, 7, 4, 30), rk(1, FT_PHASE_BACKWARD, 6, 4, 31),
      rk(2, FT_PHASE_BACKWARD, 7, 4, 0.5), /* its collective failed: back in backward */
      rk(3, FT_PHASE_IDLE, 7, 4, 0.2),     /* reported and waits for STOP */
  };
  wd_prog_verdict v;
  assert_int_equal(wd_progress_behind(r, 4, 7, 10, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.nculprits, 1);
  assert_int_equal(v.culprits[0], 1);
  assert_int_equal(v.nnodes, 1);
  assert_int_equal(v.nodes[0], 1);
  assert_int_equal(v.phase, FT_PHASE_BACKWARD);
  assert_true(v.coll_seq == 7 && v.stuck_s == 31);
  assert_non_null(strstr(v.why, "never started collective 7"));
  /* two of four behind: still at most half */
  r[3].coll_seq = 5;
  r[3].stuck_s = 40;
  assert_int_equal(wd_progress_behind(r, 4, 7, 10, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.nculprits, 2);
  /* ... unless one of them moved within min_stuck_s (it crashed) */
  r[3].stuck_s = 0.2;
  assert_int_equal(wd_progress_behind(r, 4, 7, 10, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  r[3].stuck_s = 40;
  /* three of four: a common cause, nobody named */
  r[2].coll_seq = 6;
  assert_int_equal(wd_progress_behind(r, 4, 7, 10, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  /* nobody behind (every rank started it: the network) */
  for (int i = 0; i < 4; i++)
    r[i].coll_seq = 7;
  assert_int_equal(wd_progress_behind(r, 4, 7, 10, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  /* a rank not in the generation: nobody */
  r[1].coll_seq = 6;
  r[2].in_gen = 0;
  assert_int_equal(wd_progress_behind(r, 4, 7, 10, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  r[2].in_gen = 1;
  assert_int_equal(wd_progress_behind(r, 4, 0, 10, &v), FT_OK); /* no collective */
  assert_int_equal(v.cls, WD_PROG_NONE);
  assert_int_equal(wd_progress_behind(r, 4, 7, 10, NULL), FT_EINVAL);
  assert_int_equal(wd_progress_behind(NULL, 4, 7, 10, &v), FT_EINVAL);
  assert_int_equal(wd_progress_behind(r, 0, 7, 10, &v), FT_EINVAL);
}

/* storage_wait: a rank waiting on its data's bucket. Its deadline is at
 * least storage_wait_s (the caller's: the S3 client's bound plus a
 * heartbeat timeout), so the client gives up first; it is never a culprit;
 * ranks in storage_wait while the others wait in the collective are the
 * data's storage (nobody blamed), and so is a collective timeout that the
 * ranks in storage_wait caused. */
static void test_storage_wait(void **state) {
  (void)state;
  wd_progress_cfg c = cfg10();
  /* the deadline: max(base, storage_wait_s) */
  assert_true(wd_progress_deadline(&c, FT_PHASE_STORAGE_WAIT, steps1, 3, 0) == 60);
  c.storage_wait_s = 150; /* 120 s budget + 2 x 10 s timeout + 10 s heartbeat timeout */
  assert_true(wd_progress_deadline(&c, FT_PHASE_STORAGE_WAIT, steps1, 3, 0) == 150);
  assert_true(wd_progress_deadline(&c, FT_PHASE_FORWARD, steps1, 3, 0) == 60);
  double slow[] = {30}; /* a base above it wins */
  assert_true(wd_progress_deadline(&c, FT_PHASE_STORAGE_WAIT, slow, 1, 0) == 300);
  c.timeout_s = 500; /* a fixed base too */
  assert_true(wd_progress_deadline(&c, FT_PHASE_STORAGE_WAIT, steps1, 3, 0) == 500);
  c.timeout_s = 0;

  /* rank 1 waits on its bucket for 100 s (its client still retrying),
   * the others wait in collective 9 for it: no verdict (its deadline is
   * 150), where a rank in data would be behind at 60 */
  wd_prog_rank r[4] = {
      rk(0, FT_PHASE_COLLECTIVE, 9, 4, 100), rk(1, FT_PHASE_STORAGE_WAIT, 8, 4, 100),
      rk(2, FT_PHASE_COLLECTIVE, 9, 4, 100), rk(3, FT_PHASE_COLLECTIVE, 9, 4, 100)};
  wd_prog_verdict v;
  assert_int_equal(wd_progress_judge(&c, r, 4, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  r[1].phase = FT_PHASE_DATA; /* the same in phase data: behind, its node blamed */
  assert_int_equal(wd_progress_judge(&c, r, 4, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.culprits[0], 1);
  /* past its deadline (the client never gave up): storage, nobody named */
  r[1].phase = FT_PHASE_STORAGE_WAIT;
  for (int i = 0; i < 4; i++)
    r[i].stuck_s = 151;
  assert_int_equal(wd_progress_judge(&c, r, 4, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  assert_int_equal(v.phase, FT_PHASE_STORAGE_WAIT);
  assert_int_equal(v.nculprits, 0);
  assert_int_equal(v.nnodes, 0);
  assert_non_null(strstr(v.why, "storage_wait"));
  assert_non_null(strstr(v.why, "nobody blamed"));
  /* more than half in storage_wait (a bucket slow for every host): storage */
  r[0].phase = r[2].phase = FT_PHASE_STORAGE_WAIT;
  r[0].coll_seq = r[2].coll_seq = 8;
  assert_int_equal(wd_progress_judge(&c, r, 4, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  assert_int_equal(v.nculprits, 0);
  /* every rank in storage_wait, or beside one in data or checkpoint_write */
  r[3].phase = FT_PHASE_STORAGE_WAIT;
  assert_int_equal(wd_progress_judge(&c, r, 4, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  r[3].phase = FT_PHASE_CKPT_WRITE;
  r[3].stuck_s = 700;
  assert_int_equal(wd_progress_judge(&c, r, 4, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  /* one in storage_wait, one stuck in compute, two waiting: only the
   * compute one is behind (the one in storage_wait is never named) */
  wd_prog_rank m[4] = {rk(0, FT_PHASE_COLLECTIVE, 9, 4, 200),
                       rk(1, FT_PHASE_STORAGE_WAIT, 8, 4, 200), rk(2, FT_PHASE_FORWARD, 8, 4, 200),
                       rk(3, FT_PHASE_COLLECTIVE, 9, 4, 200)};
  assert_int_equal(wd_progress_judge(&c, m, 4, steps1, 3, 0, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.nculprits, 1);
  assert_int_equal(v.culprits[0], 2);
  assert_int_equal(v.nodes[0], 2);
  assert_int_equal(v.phase, FT_PHASE_FORWARD);

  /* a collective timeout: the rank behind it waits on its bucket (however
   * recently its clock restarted): storage, nobody named */
  wd_prog_rank t[4] = {rk(0, FT_PHASE_COLLECTIVE, 9, 4, 30), rk(1, FT_PHASE_STORAGE_WAIT, 8, 4, 2),
                       rk(2, FT_PHASE_COLLECTIVE, 9, 4, 30), rk(3, FT_PHASE_IDLE, 9, 4, 0.2)};
  assert_int_equal(wd_progress_behind(t, 4, 9, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_STORAGE);
  assert_int_equal(v.phase, FT_PHASE_STORAGE_WAIT);
  assert_int_equal(v.nculprits, 0);
  assert_true(v.coll_seq == 9);
  assert_non_null(strstr(v.why, "nobody blamed"));
  /* with a rank stuck in compute behind it too: that one alone is named */
  t[2] = rk(2, FT_PHASE_BACKWARD, 8, 4, 30);
  assert_int_equal(wd_progress_behind(t, 4, 9, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_BEHIND);
  assert_int_equal(v.nculprits, 1);
  assert_int_equal(v.culprits[0], 2);
  assert_non_null(strstr(v.why, "while 2 rank(s) waited")); /* ranks 0 and 3 */
}

/* wd_progress_behind with seq 0: the reporter's rendezvous timed out (a
 * worker's gives up after max(collective timeout, 60 s)) before any
 * collective: the ranks that heartbeat in the generation but never joined
 * it (idle, nothing counted) are named, class rendezvous; nobody when one
 * of them just moved, is not in the generation, or most never joined. The
 * deadline judge alone would wait for the rendezvous allowance (600 s,
 * whatever progress_timeout_s says). */
static void test_rendezvous_timeout(void **state) {
  (void)state;
  wd_prog_rank r[4] = {
      rk(0, FT_PHASE_RENDEZVOUS, 0, -1, 60), rk(1, FT_PHASE_IDLE, 0, -1, 61), /* never joined */
      rk(2, FT_PHASE_RENDEZVOUS, 0, -1, 59), rk(3, FT_PHASE_RENDEZVOUS, 0, -1, 62)};
  wd_prog_verdict v;
  assert_int_equal(wd_progress_behind(r, 4, 0, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_RENDEZVOUS);
  assert_int_equal(v.phase, FT_PHASE_RENDEZVOUS);
  assert_int_equal(v.nculprits, 1);
  assert_int_equal(v.culprits[0], 1);
  assert_int_equal(v.nnodes, 1);
  assert_int_equal(v.nodes[0], 1);
  assert_true(v.coll_seq == 0 && v.stuck_s == 59); /* the least the others waited */
  assert_non_null(strstr(v.why, "never joined the generation's rendezvous"));
  /* the deadline judge says nothing yet: the others are in their rendezvous */
  wd_progress_cfg c = cfg10();
  c.timeout_s = 5; /* an explicit deadline does not shorten the rendezvous' */
  c.floor_s = 0;
  assert_true(wd_progress_deadline(&c, FT_PHASE_RENDEZVOUS, NULL, 0, 1) == 600);
  assert_true(wd_progress_deadline(&c, FT_PHASE_RESTORE, NULL, 0, 1) == 600);
  assert_int_equal(wd_progress_judge(&c, r, 4, NULL, 0, 1, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  /* two of four absent: both named */
  r[3] = rk(3, FT_PHASE_IDLE, 0, -1, 62);
  assert_int_equal(wd_progress_behind(r, 4, 0, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_RENDEZVOUS);
  assert_int_equal(v.nculprits, 2);
  assert_true(v.culprits[0] == 1 && v.culprits[1] == 3 && v.nnodes == 2);
  /* three of four: a common cause, nobody named */
  r[2] = rk(2, FT_PHASE_IDLE, 0, -1, 62);
  assert_int_equal(wd_progress_behind(r, 4, 0, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  r[2] = rk(2, FT_PHASE_RENDEZVOUS, 0, -1, 59);
  /* an absent rank that moved within min_stuck_s (it is just starting) */
  r[3].stuck_s = 3;
  assert_int_equal(wd_progress_behind(r, 4, 0, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  r[3] = rk(3, FT_PHASE_RENDEZVOUS, 0, -1, 62);
  /* the absent rank does not heartbeat in this generation: nobody */
  r[1].in_gen = 0;
  assert_int_equal(wd_progress_behind(r, 4, 0, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  r[1].in_gen = 1;
  /* everyone joined (all in the rendezvous): the network, nobody */
  r[1] = rk(1, FT_PHASE_RENDEZVOUS, 0, -1, 61);
  assert_int_equal(wd_progress_behind(r, 4, 0, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_NONE);
  /* world 2, the failpoint's case */
  wd_prog_rank two[2] = {rk(0, FT_PHASE_RENDEZVOUS, 0, -1, 60), rk(1, FT_PHASE_IDLE, 0, -1, 60)};
  assert_int_equal(wd_progress_behind(two, 2, 0, 15, &v), FT_OK);
  assert_int_equal(v.cls, WD_PROG_RENDEZVOUS);
  assert_true(v.nculprits == 1 && v.culprits[0] == 1 && v.nodes[0] == 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deadline_auto),
      cmocka_unit_test(test_deadline_fixed_and_phases),
      cmocka_unit_test(test_no_false_alarm_while_moving),
      cmocka_unit_test(test_behind_one),
      cmocka_unit_test(test_behind_few),
      cmocka_unit_test(test_gang),
      cmocka_unit_test(test_storage),
      cmocka_unit_test(test_network),
      cmocka_unit_test(test_rendezvous),
      cmocka_unit_test(test_none),
      cmocka_unit_test(test_odd_inputs),
      cmocka_unit_test(test_behind_collective),
      cmocka_unit_test(test_rendezvous_timeout),
      cmocka_unit_test(test_storage_wait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
