/*
 * engine_cuda: the CUDA engine (engine.h). GPT-2 in bf16 on kernels_cuda.h
 * with fp32 master weights, gradients and AdamW moments, sharded FSDP-style
 * over a NCCL comm (docs/design.md §4).
 *
 * Memory, per rank:
 *   shards (device): p, g, m, v fp32 and pb = bf16(p), shard_n each
 *     (shardmap.h: the same geometry and checkpoints as the CPU engine);
 *   working buffers: the full bf16 weights of wte, wpe and lnf (held from
 *     the forward's start to the backward's end) and of two blocks (double
 *     buffered), with fp32 gradient buffers of the same groups, padded to
 *     W*S_g so that a reduce-scatter sends them as they are;
 *   activations: one arena sized for the micro-batch (engine_set_micro).
 * At world 1 without a comm there is nothing to gather or reduce: the
 * working weights are the bf16 shard itself and the gradients accumulate
 * in the fp32 shard directly ("local" mode).
 *
 * Streams and the overlap (non-local mode):
 *   cs  compute: every kernel;
 *   ms  communication: all-gathers into the working weights, reduce-
 *       scatters of the working gradients, and the adds into the shard;
 *   ss  snapshot: device -> pinned host copies of p, m, v.
 * Forward: ms gathers wte, wpe, lnf, then block 0; before block l
 * computes, ms is told to gather block l+1 into the other buffer as soon as
 * block l-1 has released it (ev_buf_free), and cs waits only for block l's
 * own gather (ev_gathered). Backward runs the blocks in reverse: block l's
 * weights are gathered again unless the buffer still holds them from the
 * forward (the last two blocks), and as soon as block l's gradient is
 * complete (ev_grad_ready) ms reduce-scatters it and adds it into the
 * shard while cs goes on with block l-1; a gradient buffer is zeroed for
 * reuse only after its reduce-scatter is done (ev_grad_free). The optimizer
 * and the norm wait for ms to be idle (ev_comm_idle).
 *
 * Snapshots: engine_snapshot records an event on cs after the optimizer,
 * makes ss wait for it and enqueues the copies into pinned staging; the
 * fence (called from the checkpoint committer thread) waits for them. The
 * next engine_adamw is the only thing that must not run before the copy is
 * done; it waits for ev_snap_done and reports how long (engine_fence_ms).
 *
 * Determinism: every kernel is deterministic (kernels_cuda.h), the streams'
 * orderings are fixed by events, the losses are summed on the host in
 * micro-batch order; NCCL's sums are fixed for a fixed world size and
 * topology.
 *
 * Errors: the first failing call's code is returned up; FT_ENOMEM from
 * engine_set_micro leaves the engine without activations (set again
 * smaller). A failed collective or a CUDA error leaves the engine unusable:
 * the trainer exits and the supervisor restarts the gang.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "gpt2.h"
#include "kernels_cuda.h"
#include "shardmap.h"

#define NBUF 2

#define CK(call)                                                                                   \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_)                                                                                       \
      return rc_;                                                                                  \
  } while (0)

typedef struct layer_acts {
  kc_bf16 *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg, *res3;
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
} layer_acts;

typedef struct ecuda {
  ft_gpt2_dims d;
  int B, T, rank, world, dev, L, local;
  comm *c;
  shardmap sm;
  kc_ctx *kc;
  kc_stream cs, ms, ss;
  char devname[192];

  /* shards (device) */
  float *p, *g, *mo, *v;
  kc_bf16 *pb;
  /* working buffers (non-local mode) */
  kc_bf16 *w_wte, *w_wpe, *w_lnf, *w_blk[NBUF];
  float *gw_wte, *gw_wpe, *gw_lnf, *gw_blk[NBUF];
  float *rs_recv;  /* maxS */
  int holds[NBUF]; /* group held by w_blk[i] in this micro-step, -1: none */
  kc_event ev_start, ev_small, ev_gathered[NBUF], ev_buf_free[NBUF], ev_grad_ready[NBUF],
      ev_grad_free[NBUF], ev_emb_ready, ev_comm_idle, ev_snap_ready, ev_snap_done;

  /* activations (one arena) */
  void *arena;
  kc_bf16 *encoded, *lnf, *logits, *dres, *dln, *dqkv, *datty, *dfch, *tmp;
  float *lnf_mean, *lnf_rstd, *losses;
  layer_acts *la;
  int32_t *d_inp, *d_tgt;

  /* host side (pinned) */
  int32_t *h_tok[2];  /* two slots of inputs then targets, (B,T) each */
  int32_t *h_inp;     /* the current slot's inputs */
  kc_event ev_tok[2]; /* the slot's upload has been consumed */
  int slot;
  float *h_losses; /* cap_micro x N: per micro-batch losses since zero_grad */
  int nmicro, cap_micro;
  int zero_err; /* engine_zero_grad's failure, returned by the next engine_micro */
  double *h_ss, *d_ss;
  float *staging; /* 3 x shard_n: p, m, v */
  int snap_pending;
  double fence_ms;
  float *h_full; /* full parameters for export */
  uint64_t comm_ns;
} ecuda;

static size_t N_of(const ecuda *e) {
  return (size_t)e->B * e->T;
}

/* ---- working weights and gradients -------------------------------------- */

/* The bf16 weights of group g as compute sees them. */
static kc_bf16 *wgrp(const ecuda *e, int g) {
  if (e->local)
    return e->pb + e->sm.shoff[g];
  if (g == 0)
    return e->w_wte;
  if (g == 1)
    return e->w_wpe;
  if (g == 2 + e->L)
    return e->w_lnf;
  return e->w_blk[(g - 2) % NBUF];
}

/* The fp32 gradient buffer of group g that backward accumulates into. */
static float *ggrp(const ecuda *e, int g) {
  if (e->local)
    return e->g + e->sm.shoff[g];
  if (g == 0)
    return e->gw_wte;
  if (g == 1)
    return e->gw_wpe;
  if (g == 2 + e->L)
    return e->gw_lnf;
  return e->gw_blk[(g - 2) % NBUF];
}

static size_t padded(const ecuda *e, int g) {
  return e->sm.S[g] * (size_t)e->world;
}

/* Enqueues on ms the all-gather of group g into its working buffer. */
static int gather(ecuda *e, int g) {
  if (e->local)
    return FT_OK;
  return comm_dev_allgather_bf16(e->c, e->pb + e->sm.shoff[g], wgrp(e, g), e->sm.S[g], e->ms);
}

/* Gathers block l into its buffer on ms once the buffer's previous user is
 * done, unless the buffer still holds it. */
static int gather_block(ecuda *e, int l) {
  int b = l % NBUF;
  if (e->local || e->holds[b] == 2 + l)
    return FT_OK;
  CK(kc_stream_wait(e->ms, e->ev_buf_free[b]));
  CK(gather(e, 2 + l));
  CK(kc_event_record(e->ev_gathered[b], e->ms));
  e->holds[b] = 2 + l;
  return FT_OK;
}

/* cs waits for block l's weights. */
static int use_block(ecuda *e, int l) {
  return e->local ? FT_OK : kc_stream_wait(e->cs, e->ev_gathered[l % NBUF]);
}

/* Once cs has finished group g's gradient (recorded in `ready`), ms
 * reduce-scatters it and adds this rank's part into the shard; `done`
 * (optional) is recorded after. */
static int reduce(ecuda *e, int g, kc_event ready, kc_event done) {
  if (e->local)
    return FT_OK;
  CK(kc_event_record(ready, e->cs));
  CK(kc_stream_wait(e->ms, ready));
  CK(comm_dev_reduce_scatter_f32(e->c, ggrp(e, g), e->rs_recv, e->sm.S[g], e->ms));
  CK(kc_add_f32(e->g + e->sm.shoff[g], e->rs_recv, e->sm.S[g], e->ms));
  return done ? kc_event_record(done, e->ms) : FT_OK;
}

/* cs waits until every reduce-scatter so far has landed in the shard. */
static int grads_ready(ecuda *e) {
  return e->local ? FT_OK : kc_stream_wait(e->cs, e->ev_comm_idle);
}

/* Waits for the compute stream, watching the communicator (a hung or
 * failed peer surfaces here as FT_ETIMEDOUT / FT_ECOMM). */
static int sync_compute(ecuda *e) {
  if (!e->c)
    return kc_stream_sync(e->cs);
  return comm_dev_wait(e->c, e->cs, 0); /* 0: the comm's own collective timeout */
}

/* ---- forward and backward ----------------------------------------------- */

#define W(t) (wb + ft_gpt2_block_offset(&e->d, (t)))
#define G(t) (gb + ft_gpt2_block_offset(&e->d, (t)))

/* Tokens of one micro-batch to the device through one of two pinned slots
 * (the host fills one while the device may still copy from the other).
 * e->h_inp stays valid until the call after next (kc_encoder_bwd reads it). */
static int upload(ecuda *e, const int32_t *inputs, const int32_t *targets) {
  size_t N = N_of(e), n = N * sizeof(int32_t);
  e->slot ^= 1;
  int done = kc_event_query(e->ev_tok[e->slot]); /* this slot's last upload consumed? */
  if (done < 0)
    return done;
  if (!done) /* the device may be behind a collective: a wait that watches the comm */
    CK(sync_compute(e));
  int32_t *h = e->h_tok[e->slot];
  memcpy(h, inputs, n);
  memcpy(h + N, targets, n);
  e->h_inp = h;
  CK(kc_memcpy_h2d_async(e->d_inp, h, n, e->cs));
  CK(kc_memcpy_h2d_async(e->d_tgt, h + N, n, e->cs));
  return kc_event_record(e->ev_tok[e->slot], e->cs);
}

/* Forward of the uploaded micro-batch; losses (N) are copied to h_loss.
 * With train, the logits are replaced by their gradient (weight dloss). */
static int forward(ecuda *e, int train, float dloss, float *h_loss) {
  const ft_gpt2_dims *d = &e->d;
  int B = e->B, T = e->T, C = d->channels, NH = d->n_head, L = e->L;
  int V = d->vocab_size, Vp = d->padded_vocab_size, N = B * T;
  size_t NC = (size_t)N * C;

  for (int b = 0; b < NBUF; b++)
    e->holds[b] = -1;
  if (!e->local) {
    CK(kc_event_record(e->ev_start, e->cs)); /* after the last optimizer step */
    CK(kc_stream_wait(e->ms, e->ev_start));
    CK(gather(e, 0));
    CK(gather(e, 1));
    CK(gather(e, 2 + L));
    CK(kc_event_record(e->ev_small, e->ms));
    if (L > 0)
      CK(gather_block(e, 0));
    CK(kc_stream_wait(e->cs, e->ev_small));
  }
  const kc_bf16 *wte = wgrp(e, 0);
  CK(kc_encoder_fwd(e->encoded, e->d_inp, wte, wgrp(e, 1), B, T, C, e->cs));
  const kc_bf16 *x = e->encoded;
  for (int l = 0; l < L; l++) {
    if (l + 1 < L)
      CK(gather_block(e, l + 1));
    CK(use_block(e, l));
    const kc_bf16 *wb = wgrp(e, 2 + l);
    layer_acts *a = &e->la[l];
    CK(kc_layernorm_fwd(a->ln1, a->ln1_mean, a->ln1_rstd, x, W(FT_B_LN1W), W(FT_B_LN1B), N, C,
                        e->cs));
    CK(kc_matmul_fwd(e->kc, a->qkv, NULL, a->ln1, W(FT_B_QKVW), W(FT_B_QKVB), N, C, 3 * C, e->cs));
    CK(kc_attention_fwd(a->atty, a->lse, a->qkv, B, T, C, NH, e->cs));
    CK(kc_matmul_fwd(e->kc, e->tmp, NULL, a->atty, W(FT_B_ATTPROJW), W(FT_B_ATTPROJB), N, C, C,
                     e->cs));
    CK(kc_residual_fwd(a->res2, x, e->tmp, NC, e->cs));
    CK(kc_layernorm_fwd(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, W(FT_B_LN2W), W(FT_B_LN2B), N, C,
                        e->cs));
    CK(kc_matmul_fwd(e->kc, a->fchg, a->fch, a->ln2, W(FT_B_FCW), W(FT_B_FCB), N, C, 4 * C, e->cs));
    CK(kc_matmul_fwd(e->kc, e->tmp, NULL, a->fchg, W(FT_B_FCPROJW), W(FT_B_FCPROJB), N, 4 * C, C,
                     e->cs));
    CK(kc_residual_fwd(a->res3, a->res2, e->tmp, NC, e->cs));
    if (!e->local)
      CK(kc_event_record(e->ev_buf_free[l % NBUF], e->cs));
    x = a->res3;
  }
  const kc_bf16 *lnf = wgrp(e, 2 + L);
  CK(kc_layernorm_fwd(e->lnf, e->lnf_mean, e->lnf_rstd, x, lnf, lnf + C, N, C, e->cs));
  CK(kc_matmul_fwd(e->kc, e->logits, NULL, e->lnf, wte, NULL, N, C, Vp, e->cs));
  CK(kc_classifier(e->losses, e->logits, e->d_tgt, dloss, N, V, Vp, train, e->cs));
  return kc_memcpy_d2h_async(h_loss, e->losses, (size_t)N * sizeof(float), e->cs);
}

/* Backward of the last forward (its logits already hold their gradient). */
static int backward(ecuda *e) {
  const ft_gpt2_dims *d = &e->d;
  int B = e->B, T = e->T, C = d->channels, NH = d->n_head, L = e->L;
  int Vp = d->padded_vocab_size, N = B * T;
  size_t NC = (size_t)N * C;

  if (!e->local) { /* the previous micro-step's reductions have read these */
    CK(kc_stream_wait(e->cs, e->ev_comm_idle));
    CK(kc_memset_async(e->gw_wte, 0, padded(e, 0) * sizeof(float), e->cs));
    CK(kc_memset_async(e->gw_wpe, 0, padded(e, 1) * sizeof(float), e->cs));
    CK(kc_memset_async(e->gw_lnf, 0, padded(e, 2 + L) * sizeof(float), e->cs));
  }
  const kc_bf16 *wte = wgrp(e, 0), *lnf = wgrp(e, 2 + L);
  float *dlnf = ggrp(e, 2 + L);
  CK(kc_matmul_bwd(e->kc, e->dln, ggrp(e, 0), NULL, e->logits, e->lnf, wte, NULL, N, C, Vp, e->cs));
  CK(kc_memset_async(e->dres, 0, NC * sizeof(kc_bf16), e->cs));
  const kc_bf16 *xL = L > 0 ? e->la[L - 1].res3 : e->encoded;
  CK(kc_layernorm_bwd(e->kc, e->dres, dlnf, dlnf + C, e->dln, xL, lnf, e->lnf_mean, e->lnf_rstd, N,
                      C, e->cs));
  CK(reduce(e, 2 + L, e->ev_emb_ready, NULL));

  for (int l = L - 1; l >= 0; l--) {
    int b = l % NBUF;
    if (l > 0)
      CK(gather_block(e, l - 1));
    CK(use_block(e, l));
    if (!e->local) {
      CK(kc_stream_wait(e->cs, e->ev_grad_free[b]));
      CK(kc_memset_async(e->gw_blk[b], 0, padded(e, 2 + l) * sizeof(float), e->cs));
    }
    const kc_bf16 *wb = wgrp(e, 2 + l);
    float *gb = ggrp(e, 2 + l);
    layer_acts *a = &e->la[l];
    const kc_bf16 *x = l > 0 ? e->la[l - 1].res3 : e->encoded;
    /* res3 = res2 + fcproj(gelu(fc(ln2))): dres holds d res3 */
    CK(kc_matmul_bwd(e->kc, e->dfch, G(FT_B_FCPROJW), G(FT_B_FCPROJB), e->dres, a->fchg,
                     W(FT_B_FCPROJW), a->fch, N, 4 * C, C, e->cs));
    CK(kc_matmul_bwd(e->kc, e->dln, G(FT_B_FCW), G(FT_B_FCB), e->dfch, a->ln2, W(FT_B_FCW), NULL, N,
                     C, 4 * C, e->cs));
    CK(kc_layernorm_bwd(e->kc, e->dres, G(FT_B_LN2W), G(FT_B_LN2B), e->dln, a->res2, W(FT_B_LN2W),
                        a->ln2_mean, a->ln2_rstd, N, C, e->cs));
    /* res2 = x + attproj(attn(qkv(ln1))): dres holds d res2 */
    CK(kc_matmul_bwd(e->kc, e->datty, G(FT_B_ATTPROJW), G(FT_B_ATTPROJB), e->dres, a->atty,
                     W(FT_B_ATTPROJW), NULL, N, C, C, e->cs));
    CK(kc_attention_bwd(e->kc, e->dqkv, e->datty, a->qkv, a->atty, a->lse, B, T, C, NH, e->cs));
    CK(kc_matmul_bwd(e->kc, e->dln, G(FT_B_QKVW), G(FT_B_QKVB), e->dqkv, a->ln1, W(FT_B_QKVW), NULL,
                     N, C, 3 * C, e->cs));
    CK(kc_layernorm_bwd(e->kc, e->dres, G(FT_B_LN1W), G(FT_B_LN1B), e->dln, x, W(FT_B_LN1W),
                        a->ln1_mean, a->ln1_rstd, N, C, e->cs));
    if (!e->local)
      CK(kc_event_record(e->ev_buf_free[b], e->cs));
    CK(reduce(e, 2 + l, e->ev_grad_ready[b], e->ev_grad_free[b]));
  }
  CK(kc_encoder_bwd(e->kc, ggrp(e, 0), ggrp(e, 1), e->dres, e->h_inp, B, T, C, e->cs));
  CK(reduce(e, 1, e->ev_emb_ready, NULL));
  CK(reduce(e, 0, e->ev_emb_ready, NULL));
  return e->local ? FT_OK : kc_event_record(e->ev_comm_idle, e->ms);
}

#undef W
#undef G

/* *out = the pinned slot (N floats) for the losses of micro-batch i <=
 * cap_micro, the buffer doubled (once the device is done with it) when i
 * is past its end. */
static int loss_slot(ecuda *e, int i, float **out) {
  size_t N = N_of(e);
  if (i >= e->cap_micro) {
    float *more = NULL;
    CK(sync_compute(e)); /* the forward's copies into the old buffer are done */
    CK(kc_host_alloc((void **)&more, 2 * (size_t)e->cap_micro * N * sizeof(float)));
    memcpy(more, e->h_losses, (size_t)e->cap_micro * N * sizeof(float));
    kc_host_free(e->h_losses);
    e->h_losses = more;
    e->cap_micro *= 2;
  }
  *out = e->h_losses + (size_t)i * N;
  return FT_OK;
}

/* Mean of n losses summed in double in index order (as a float, like the
 * CPU's k_crossentropy_fwd). */
static float mean_loss(const float *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += x[i];
  return (float)(s / (double)n);
}

/* ---- engine ops ------------------------------------------------------------ */

static void free_acts(ecuda *e) {
  if (e->arena)
    kc_sync();
  kc_free(e->arena);
  e->arena = NULL;
  free(e->la);
  e->la = NULL;
  kc_host_free(e->h_tok[0]);
  kc_host_free(e->h_tok[1]);
  kc_host_free(e->h_losses);
  e->h_tok[0] = e->h_tok[1] = e->h_inp = NULL;
  e->h_losses = NULL;
  e->cap_micro = e->nmicro = 0;
}

static void ecuda_destroy(void *impl) {
  ecuda *e = impl;
  if (!e)
    return;
  kc_sync();
  free_acts(e);
  void *dev[] = {e->p,      e->g,         e->mo,        e->v,        e->pb,     e->w_wte,
                 e->w_wpe,  e->w_lnf,     e->w_blk[0],  e->w_blk[1], e->gw_wte, e->gw_wpe,
                 e->gw_lnf, e->gw_blk[0], e->gw_blk[1], e->rs_recv,  e->d_ss};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
    kc_free(dev[i]);
  kc_event ev[] = {e->ev_start,        e->ev_small,        e->ev_gathered[0],   e->ev_gathered[1],
                   e->ev_buf_free[0],  e->ev_buf_free[1],  e->ev_grad_ready[0], e->ev_grad_ready[1],
                   e->ev_grad_free[0], e->ev_grad_free[1], e->ev_emb_ready,     e->ev_comm_idle,
                   e->ev_snap_ready,   e->ev_snap_done,    e->ev_tok[0],        e->ev_tok[1]};
  for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
    kc_event_free(ev[i]);
  kc_stream_free(e->cs);
  kc_stream_free(e->ms);
  kc_stream_free(e->ss);
  kc_host_free(e->h_ss);
  kc_host_free(e->staging);
  free(e->h_full);
  kc_ctx_free(e->kc);
  shardmap_release(&e->sm);
  free(e);
}

static const char *ecuda_device_name(void *impl) {
  return ((ecuda *)impl)->devname;
}

/* Carves the activation arena: returns its size when base is NULL. */
static size_t carve(ecuda *e, char *base) {
  size_t off = 0, N = N_of(e), C = e->d.channels, Vp = e->d.padded_vocab_size;
  size_t NH = e->d.n_head, NC = N * C;
#define TAKE(ptr, count)                                                                           \
  do {                                                                                             \
    size_t bytes_ = ((count) * sizeof(*(ptr)) + 255) & ~(size_t)255;                               \
    (ptr) = base ? (void *)(base + off) : NULL;                                                    \
    off += bytes_;                                                                                 \
  } while (0)
  TAKE(e->encoded, NC);
  for (int l = 0; l < e->L; l++) {
    layer_acts *a = &e->la[l];
    TAKE(a->ln1, NC);
    TAKE(a->qkv, 3 * NC);
    TAKE(a->atty, NC);
    TAKE(a->res2, NC);
    TAKE(a->ln2, NC);
    TAKE(a->fch, 4 * NC);
    TAKE(a->fchg, 4 * NC);
    TAKE(a->res3, NC);
    TAKE(a->ln1_mean, N);
    TAKE(a->ln1_rstd, N);
    TAKE(a->ln2_mean, N);
    TAKE(a->ln2_rstd, N);
    TAKE(a->lse, N * NH);
  }
  TAKE(e->lnf, NC);
  TAKE(e->lnf_mean, N);
  TAKE(e->lnf_rstd, N);
  TAKE(e->logits, N * Vp);
  TAKE(e->losses, N);
  TAKE(e->dres, NC);
  TAKE(e->dln, NC);
  TAKE(e->dqkv, 3 * NC);
  TAKE(e->datty, NC);
  TAKE(e->dfch, 4 * NC);
  TAKE(e->tmp, NC);
  TAKE(e->d_inp, N);
  TAKE(e->d_tgt, N);
#undef TAKE
  return off;
}

static int ecuda_set_micro(void *impl, int B) {
  ecuda *e = impl;
  free_acts(e);
  e->B = B;
  e->la = calloc((size_t)(e->L > 0 ? e->L : 1), sizeof *e->la);
  if (!e->la)
    return ft_err_set(FT_ENOMEM, "engine_cuda: out of host memory");
  size_t bytes = carve(e, NULL), N = N_of(e);
  int rc = kc_malloc(&e->arena, bytes);
  if (rc == FT_ENOMEM)
    return ft_err_set(FT_ENOMEM, "%s: %.2f GiB of activations for micro-batch %d do not fit",
                      e->devname, (double)bytes / (1 << 30), B);
  if (rc)
    return rc;
  carve(e, e->arena);
  e->cap_micro = 8;
  CK(kc_host_alloc((void **)&e->h_tok[0], 2 * N * sizeof(int32_t)));
  CK(kc_host_alloc((void **)&e->h_tok[1], 2 * N * sizeof(int32_t)));
  CK(kc_host_alloc((void **)&e->h_losses, (size_t)e->cap_micro * N * sizeof(float)));
  return FT_OK;
}

static int ecuda_set_params(void *impl, const float *full) {
  ecuda *e = impl;
  size_t n = e->sm.shard_n;
  CK(kc_sync()); /* the staging may still feed a snapshot copy, the shards a step */
  shardmap_take(&e->sm, full, e->staging);
  CK(kc_memcpy_h2d(e->p, e->staging, n * sizeof(float)));
  CK(kc_memset_async(e->mo, 0, n * sizeof(float), e->cs));
  CK(kc_memset_async(e->v, 0, n * sizeof(float), e->cs));
  CK(kc_memset_async(e->g, 0, n * sizeof(float), e->cs));
  CK(kc_f32_to_bf16(e->pb, e->p, n, e->cs));
  return kc_stream_sync(e->cs);
}

static int ecuda_full_params(void *impl, const float **out) {
  ecuda *e = impl;
  *out = NULL;
  size_t total = ft_gpt2_num_params(&e->d);
  if (!e->h_full && !(e->h_full = malloc(total * sizeof(float))))
    return ft_err_set(FT_ENOMEM, "engine_cuda: no host memory for the full model");
  CK(sync_compute(e));
  /* Not through the staging: it holds the last snapshot until the next one. */
  if (!e->c || e->world == 1) { /* one shard is the whole model, same layout */
    CK(kc_memcpy_d2h(e->h_full, e->p, total * sizeof(float)));
  } else {
    size_t all = e->sm.maxS * (size_t)e->world;
    float *tmp = malloc((all + e->sm.shard_n) * sizeof(float));
    if (!tmp)
      return ft_err_set(FT_ENOMEM, "engine_cuda: out of host memory");
    float *shard = tmp + all;
    int rc = kc_memcpy_d2h(shard, e->p, e->sm.shard_n * sizeof(float));
    for (int g = 0; g < e->sm.ngroups && rc == FT_OK; g++) {
      uint64_t t0 = ft_now_ns();
      rc = comm_allgather(e->c, shard + e->sm.shoff[g], tmp, e->sm.S[g]);
      e->comm_ns += ft_now_ns() - t0;
      if (rc == FT_OK)
        memcpy(e->h_full + ft_gpt2_group_offset(&e->d, g), tmp, e->sm.numel[g] * sizeof(float));
    }
    free(tmp);
    CK(rc);
  }
  *out = e->h_full;
  return FT_OK;
}

static void ecuda_zero_grad(void *impl) {
  ecuda *e = impl;
  /* cs orders it after the last optimizer step and before this step's
   * reductions (which wait for cs). A failure is kept for the next
   * engine_micro: never accumulate into the last step's gradients. */
  int rc = grads_ready(e);
  if (rc == FT_OK)
    rc = kc_memset_async(e->g, 0, e->sm.shard_n * sizeof(float), e->cs);
  e->zero_err = rc;
  e->nmicro = 0;
}

static int ecuda_micro(void *impl, const int32_t *inputs, const int32_t *targets,
                       float dloss_scale) {
  ecuda *e = impl;
  float *h;
  CK(e->zero_err);
  /* failpoint hang_in=cuda (armed on this thread for this step): a kernel
   * that never finishes, and the training thread blocked behind it in the
   * device synchronisation, as a deadlocked kernel leaves a rank */
  if (ft_failpoint_hang_take(FT_HANG_CUDA)) {
    CK(kc_stall(e->cs));
    CK(kc_sync());
  }
  CK(loss_slot(e, e->nmicro, &h));
  CK(upload(e, inputs, targets));
  CK(forward(e, 1, dloss_scale / (float)N_of(e), h));
  e->nmicro++;
  return backward(e);
}

static int ecuda_loss(void *impl, double *sum) {
  ecuda *e = impl;
  size_t N = N_of(e);
  CK(sync_compute(e));
  /* and the last reduce-scatters: the host collectives that follow (the
   * loss, the norm) run on the comm's own stream, and one communicator's
   * operations must not overlap across streams */
  if (!e->local)
    CK(comm_dev_wait(e->c, e->ms, 0));
  double s = 0;
  for (int i = 0; i < e->nmicro; i++)
    s += mean_loss(e->h_losses + (size_t)i * N, N);
  *sum = s;
  return FT_OK;
}

static int ecuda_eval(void *impl, const int32_t *inputs, const int32_t *targets, double *loss) {
  ecuda *e = impl;
  float *h; /* the slot after the step's micro-batches: engine_loss keeps its sum */
  CK(loss_slot(e, e->nmicro, &h));
  CK(upload(e, inputs, targets));
  CK(forward(e, 0, 0.0f, h));
  CK(sync_compute(e));
  *loss = mean_loss(h, N_of(e));
  return FT_OK;
}

static int ecuda_allreduce_sum(void *impl, double *x, int n) {
  ecuda *e = impl;
  if (!e->c)
    return FT_OK;
  uint64_t t0 = ft_now_ns();
  int rc = comm_allreduce_f64(e->c, x, (size_t)n);
  e->comm_ns += ft_now_ns() - t0;
  return rc;
}

static int ecuda_grad_norm(void *impl, float *norm) {
  ecuda *e = impl;
  CK(grads_ready(e));
  CK(kc_sumsq(e->kc, e->d_ss, e->g, e->sm.shard_n, e->cs)); /* padding slots are zero */
  CK(kc_memcpy_d2h_async(e->h_ss, e->d_ss, sizeof(double), e->cs));
  CK(sync_compute(e));
  double ss = *e->h_ss;
  CK(ecuda_allreduce_sum(e, &ss, 1));
  *norm = (float)sqrt(ss);
  return FT_OK;
}

static int ecuda_scale_grads(void *impl, float s) {
  ecuda *e = impl;
  CK(grads_ready(e));
  return kc_scale_f32(e->g, s, e->sm.shard_n, e->cs);
}

typedef struct adamw_args {
  ecuda *e;
  float lr, b1, b2, eps;
  int64_t t;
} adamw_args;

static int adamw_run(void *ud, size_t o, size_t n, float wd) {
  adamw_args *a = ud;
  ecuda *e = a->e;
  return kc_adamw(e->p + o, e->pb + o, e->g + o, e->mo + o, e->v + o, n, a->lr, a->b1, a->b2,
                  a->eps, wd, a->t, e->cs);
}

static int ecuda_adamw(void *impl, float lr, float beta1, float beta2, float eps, float wd,
                       int64_t t) {
  ecuda *e = impl;
  e->fence_ms = 0;
  if (e->snap_pending) { /* the snapshot's copy must read the weights before they change */
    int done = kc_event_query(e->ev_snap_done);
    if (done < 0)
      return done;
    if (!done) {
      uint64_t t0 = ft_now_ns();
      CK(kc_event_sync(e->ev_snap_done));
      e->fence_ms = (double)(ft_now_ns() - t0) * 1e-6;
    }
    e->snap_pending = 0;
  }
  CK(grads_ready(e));
  adamw_args a = {e, lr, beta1, beta2, eps, t};
  return gpt2_adamw_runs(&e->d, &e->sm, wd, adamw_run, &a);
}

static double ecuda_comm_seconds(void *impl) {
  return (double)((ecuda *)impl)->comm_ns * 1e-9;
}
static double ecuda_fence_ms(void *impl) {
  return ((ecuda *)impl)->fence_ms;
}
static int ecuda_device_pci(void *impl, char *pci, size_t len) {
  return kc_device_pci(((ecuda *)impl)->dev, pci, len);
}
static int ecuda_nparts(void *impl) {
  return shardmap_nparts(&((ecuda *)impl)->sm);
}
static size_t ecuda_snapshot_bytes(void *impl) {
  return 3 * ((ecuda *)impl)->sm.shard_n * sizeof(float);
}

/* Runs on the checkpoint committer's thread, whose current device is not
 * ours: without kc_set_device its first CUDA call would make it device 0
 * (a context there, from every rank). */
static int snap_fence(void *ud) {
  ecuda *e = ud;
  int rc = kc_set_device(e->dev);
  return rc ? rc : kc_event_sync(e->ev_snap_done);
}

static int ecuda_snapshot(void *impl, ckpt_part *parts, char (*names)[64], engine_fence *fence) {
  ecuda *e = impl;
  size_t n = e->sm.shard_n, bytes = n * sizeof(float);
  const float *dev[3] = {e->p, e->mo, e->v};
  const float *host[3];
  CK(kc_event_record(e->ev_snap_ready, e->cs)); /* after the optimizer step */
  CK(kc_stream_wait(e->ss, e->ev_snap_ready));
  for (int k = 0; k < 3; k++) {
    host[k] = e->staging + (size_t)k * n;
    CK(kc_memcpy_d2h_async(e->staging + (size_t)k * n, dev[k], bytes, e->ss));
  }
  CK(kc_event_record(e->ev_snap_done, e->ss));
  e->snap_pending = 1;
  shardmap_parts(&e->sm, host, parts, names);
  *fence = (engine_fence){.fn = snap_fence, .ud = e};
  return FT_OK;
}

static int ecuda_restore(void *impl, ckpt_store *s, const ckpt_manifest *man) {
  ecuda *e = impl;
  size_t n = e->sm.shard_n, bytes = n * sizeof(float);
  float *const host[3] = {e->staging, e->staging + n, e->staging + 2 * n};
  float *dev[3] = {e->p, e->mo, e->v};
  CK(kc_sync()); /* the staging may still feed a snapshot copy */
  CK(shardmap_restore(&e->sm, s, man, host));
  for (int k = 0; k < 3; k++)
    CK(kc_memcpy_h2d(dev[k], host[k], bytes));
  CK(kc_memset_async(e->g, 0, bytes, e->cs));
  CK(kc_f32_to_bf16(e->pb, e->p, n, e->cs));
  return kc_stream_sync(e->cs);
}

static const struct engine_ops ecuda_ops = {
    .name = "cuda",
    .destroy = ecuda_destroy,
    .device_name = ecuda_device_name,
    .set_micro = ecuda_set_micro,
    .set_params = ecuda_set_params,
    .full_params = ecuda_full_params,
    .zero_grad = ecuda_zero_grad,
    .micro = ecuda_micro,
    .loss = ecuda_loss,
    .eval = ecuda_eval,
    .allreduce_sum = ecuda_allreduce_sum,
    .grad_norm = ecuda_grad_norm,
    .scale_grads = ecuda_scale_grads,
    .adamw = ecuda_adamw,
    .comm_seconds = ecuda_comm_seconds,
    .fence_ms = ecuda_fence_ms,
    .device_pci = ecuda_device_pci,
    .nparts = ecuda_nparts,
    .snapshot_bytes = ecuda_snapshot_bytes,
    .snapshot = ecuda_snapshot,
    .restore = ecuda_restore,
};

int engine_cuda_devices(void) {
  return kc_device_count();
}

/* Device memory for the shards and working buffers (everything but the
 * activations). */
static int alloc_state(ecuda *e) {
  size_t n = e->sm.shard_n;
  CK(kc_malloc((void **)&e->p, n * sizeof(float)));
  CK(kc_malloc((void **)&e->g, n * sizeof(float)));
  CK(kc_malloc((void **)&e->mo, n * sizeof(float)));
  CK(kc_malloc((void **)&e->v, n * sizeof(float)));
  CK(kc_malloc((void **)&e->pb, n * sizeof(kc_bf16)));
  CK(kc_malloc((void **)&e->d_ss, sizeof(double)));
  CK(kc_host_alloc((void **)&e->h_ss, sizeof(double)));
  CK(kc_host_alloc((void **)&e->staging, 3 * n * sizeof(float)));
  if (e->local)
    return FT_OK;
  int L = e->L;
  size_t maxblk = 0;
  for (int l = 0; l < L; l++)
    if (padded(e, 2 + l) > maxblk)
      maxblk = padded(e, 2 + l);
  CK(kc_malloc((void **)&e->w_wte, padded(e, 0) * sizeof(kc_bf16)));
  CK(kc_malloc((void **)&e->w_wpe, padded(e, 1) * sizeof(kc_bf16)));
  CK(kc_malloc((void **)&e->w_lnf, padded(e, 2 + L) * sizeof(kc_bf16)));
  CK(kc_malloc((void **)&e->gw_wte, padded(e, 0) * sizeof(float)));
  CK(kc_malloc((void **)&e->gw_wpe, padded(e, 1) * sizeof(float)));
  CK(kc_malloc((void **)&e->gw_lnf, padded(e, 2 + L) * sizeof(float)));
  for (int b = 0; b < NBUF && L > 0; b++) {
    CK(kc_malloc((void **)&e->w_blk[b], maxblk * sizeof(kc_bf16)));
    CK(kc_malloc((void **)&e->gw_blk[b], maxblk * sizeof(float)));
  }
  return kc_malloc((void **)&e->rs_recv, e->sm.maxS * sizeof(float));
}

static int create_sync(ecuda *e) {
  kc_event *ev[] = {
      &e->ev_start,        &e->ev_small,        &e->ev_gathered[0],   &e->ev_gathered[1],
      &e->ev_buf_free[0],  &e->ev_buf_free[1],  &e->ev_grad_ready[0], &e->ev_grad_ready[1],
      &e->ev_grad_free[0], &e->ev_grad_free[1], &e->ev_emb_ready,     &e->ev_comm_idle,
      &e->ev_snap_ready,   &e->ev_snap_done,    &e->ev_tok[0],        &e->ev_tok[1]};
  for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
    CK(kc_event_new(ev[i]));
  CK(kc_stream_new(&e->cs));
  CK(kc_stream_new(&e->ms));
  return kc_stream_new(&e->ss);
}

int engine_cuda_new(const ft_gpt2_dims *d, int B, int T, comm *c, int rank, int world, int device,
                    engine **out) {
  *out = NULL;
  if (c && !comm_is_device(c))
    return ft_err_set(FT_EINVAL, "engine_cuda: the comm is %s, not a device (NCCL) comm",
                      comm_backend(c));
  if (T > d->max_seq_len) /* wpe has max_seq_len rows (gpt2_new checks the same) */
    return ft_err_set(FT_EINVAL, "engine_cuda: T=%d above max_seq_len %d", T, d->max_seq_len);
  if (d->channels % 8 || d->channels % d->n_head)
    return ft_err_set(FT_ECONFIG,
                      "cuda: model.n_embd %d must be a multiple of 8 and of model.n_head %d",
                      d->channels, d->n_head);
  int ndev = kc_device_count();
  if (ndev == 0)
    return ft_err_set(FT_ECONFIG, "nodes.device is cuda but no CUDA device is visible");
  if (device < 0 || device >= ndev)
    return ft_err_set(FT_ECONFIG, "CUDA device %d does not exist (%d visible)", device, ndev);
  ecuda *e = calloc(1, sizeof *e);
  if (!e)
    return ft_err_set(FT_ENOMEM, "engine_cuda: out of memory");
  e->d = *d;
  e->T = T;
  e->rank = rank;
  e->world = world;
  e->dev = device;
  e->L = d->n_layer;
  e->c = c;
  e->local = c == NULL;
  char name[128] = "?";
  size_t mem = 0;
  int sms = 0, major = 0, minor = 0;
  int rc = kc_set_device(device);
  if (rc == FT_OK)
    rc = kc_device_info(device, name, sizeof name, &mem, &sms, &major, &minor);
  snprintf(e->devname, sizeof e->devname, "cuda:%d %s, %.0f GiB, %d SMs, sm_%d%d", device, name,
           (double)mem / (1 << 30), sms, major, minor);
  if (rc == FT_OK)
    rc = shardmap_init(&e->sm, d, rank, world);
  if (rc == FT_OK)
    rc = kc_ctx_new(&e->kc);
  if (rc == FT_OK)
    rc = create_sync(e);
  if (rc == FT_OK)
    rc = alloc_state(e);
  if (rc == FT_ENOMEM)
    rc = ft_err_set(FT_ENOMEM, "%s: the model's state (%zu parameters in this shard) does not fit",
                    e->devname, e->sm.shard_n);
  if (rc == FT_OK)
    rc = ecuda_set_micro(e, B);
  if (rc == FT_OK)
    rc = engine__wrap(&ecuda_ops, e, B, out);
  if (rc)
    ecuda_destroy(e);
  return rc;
}
