/*
 * sup_gang: pure node-pool decisions (see sup_gang.h). The recovery machine
 * (sup_recovery.c) applies a plan; this file only computes it.
 */
#include "sup_gang.h"

#include <stdio.h>
#include <string.h>

const char *sup_role_name(int role) {
  switch (role) {
  case SUP_ROLE_ACTIVE:
    return "active";
  case SUP_ROLE_SPARE:
    return "spare";
  case SUP_ROLE_QUARANTINED:
    return "quarantined";
  case SUP_ROLE_LOST:
    return "lost";
  case SUP_ROLE_IDLE:
    return "idle";
  }
  return "?";
}

int sup_no_spares_parse(const char *s) {
  if (!strcmp(s, "shrink"))
    return SUP_NOSPARE_SHRINK;
  if (!strcmp(s, "wait"))
    return SUP_NOSPARE_WAIT;
  if (!strcmp(s, "fail"))
    return SUP_NOSPARE_FAIL;
  return -1;
}

static int check_world(sup_plan *p, int G, int global_batch) {
  p->world_after = p->ngang * G;
  if (p->ngang == 0) {
    p->verdict = SUP_PLAN_FAIL;
    snprintf(p->reason, sizeof p->reason, "no nodes left");
    return -1;
  }
  if (global_batch % p->world_after) {
    p->verdict = SUP_PLAN_FAIL;
    snprintf(p->reason, sizeof p->reason,
             "train.global_batch %d is not divisible by the new world size %d", global_batch,
             p->world_after);
    return -1;
  }
  return 0;
}

void sup_gang_initial(int *roles, int nnodes, int want, int G, int global_batch, int policy,
                      sup_plan *plan) {
  memset(plan, 0, sizeof *plan);
  plan->world_before = want * G;
  for (int n = 0; n < nnodes && n < SUP_MAX_NODES; n++) {
    if (roles[n] == SUP_ROLE_QUARANTINED || roles[n] == SUP_ROLE_LOST)
      continue;
    if (plan->ngang < want) {
      roles[n] = SUP_ROLE_ACTIVE;
      plan->gang[plan->ngang++] = n;
    } else {
      roles[n] = SUP_ROLE_SPARE;
    }
  }
  if (plan->ngang < want) {
    if (policy != SUP_NOSPARE_SHRINK || plan->ngang == 0) {
      plan->verdict = SUP_PLAN_FAIL;
      snprintf(plan->reason, sizeof plan->reason,
               "only %d usable node(s) of the %d needed (the others are quarantined)", plan->ngang,
               want);
      plan->world_after = plan->ngang * G;
      return;
    }
    plan->shrunk = 1;
  }
  if (check_world(plan, G, global_batch))
    return;
  plan->verdict = SUP_PLAN_OK;
}

void sup_gang_plan(const int *gang, int ngang, const int *faulty, const int *spares, int nspares,
                   int G, int global_batch, int policy, sup_plan *plan) {
  memset(plan, 0, sizeof *plan);
  plan->world_before = ngang * G;
  int next_spare = 0;
  for (int p = 0; p < ngang; p++) {
    int n = gang[p];
    if (!faulty[n]) {
      plan->gang[plan->ngang++] = n;
      plan->restart[plan->nrestart++] = n;
      continue;
    }
    plan->quarantine[plan->nquarantine++] = n;
    if (next_spare < nspares) {
      int sp = spares[next_spare++];
      plan->promote_spare[plan->npromote] = sp;
      plan->promote_for[plan->npromote++] = n;
      plan->gang[plan->ngang++] = sp;
      continue;
    }
    switch (policy) {
    case SUP_NOSPARE_SHRINK:
      plan->shrunk = 1; /* drop it */
      break;
    case SUP_NOSPARE_WAIT:
      plan->verdict = SUP_PLAN_WAIT;
      snprintf(plan->reason, sizeof plan->reason, "no spare for node %d: waiting for one", n);
      return;
    default:
      plan->verdict = SUP_PLAN_FAIL;
      snprintf(plan->reason, sizeof plan->reason,
               "no spare left to replace node %d (recovery.when_no_spares: fail)", n);
      return;
    }
  }
  if (check_world(plan, G, global_batch))
    return;
  plan->verdict = SUP_PLAN_OK;
}

int sup_failures_add(sup_failures *f, double now, double window_s) {
  int k = 0;
  for (int i = 0; i < f->n; i++) /* keep the ones still inside the window */
    if (now - f->t[i] <= window_s)
      f->t[k++] = f->t[i];
  f->n = k;
  if (f->n == SUP_FAIL_HIST) { /* full: forget the oldest */
    memmove(f->t, f->t + 1, sizeof f->t[0] * (SUP_FAIL_HIST - 1));
    f->n--;
  }
  f->t[f->n++] = now;
  return f->n;
}
