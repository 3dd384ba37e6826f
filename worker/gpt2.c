/*
 * gpt2: forward, backward and optimizer step of GPT-2 on the CPU kernels.
 *
 * The shape of one step, for micro-batch (B, T), N = B*T rows:
 *
 *   encoded (N,C) = wte[inputs] + wpe[t]
 *   for each block l:          (residual stream x_l, x_0 = encoded)
 *     ln1 = LN(x_l); qkv = ln1 @ qkvw^T + qkvb; atty = attn(qkv)
 *     res2 = x_l + (atty @ attprojw^T + attprojb)
 *     ln2 = LN(res2); fch = ln2 @ fcw^T + fcb; fchg = gelu(fch)
 *     x_{l+1} = res3 = res2 + (fchg @ fcprojw^T + fcprojb)
 *   lnf = LN(x_L); logits (N,Vp) = lnf @ wte^T; loss = CE(softmax(logits))
 *
 * Activations live in one arena sized once for (B, T); their gradients in a
 * second arena with the same layout. Backward zeroes the activation
 * gradients it accumulates into, parameter gradients accumulate across
 * micro-batches until gpt2_zero_grad.
 */
#include "gpt2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"
#include "kernels.h"
#include "shardmap.h"

/* Per-layer activation tensors, in arena order. */
enum {
  A_LN1,
  A_LN1_MEAN,
  A_LN1_RSTD,
  A_QKV,
  A_ATTY,
  A_PREATT,
  A_ATT,
  A_ATTPROJ,
  A_RES2,
  A_LN2,
  A_LN2_MEAN,
  A_LN2_RSTD,
  A_FCH,
  A_FCHG,
  A_FCPROJ,
  A_RES3,
  A_LAYER_COUNT
};

typedef struct acts {
  float *encoded;              /* (N,C) */
  float *layer[A_LAYER_COUNT]; /* of layer l: base + l * layer_stride */
  size_t layer_size[A_LAYER_COUNT];
  float *lnf, *lnf_mean, *lnf_rstd; /* (N,C) (N) (N) */
  float *logits, *probs;            /* (N,Vp) */
  float *losses;                    /* (N) */
} acts;

static void acts_sizes(const gpt2 *m, size_t sz[A_LAYER_COUNT]) {
  size_t N = (size_t)m->B * m->T, C = m->d.channels, NH = m->d.n_head, T = m->T;
  sz[A_LN1] = N * C;
  sz[A_LN1_MEAN] = N;
  sz[A_LN1_RSTD] = N;
  sz[A_QKV] = N * 3 * C;
  sz[A_ATTY] = N * C;
  sz[A_PREATT] = (size_t)m->B * NH * T * T;
  sz[A_ATT] = (size_t)m->B * NH * T * T;
  sz[A_ATTPROJ] = N * C;
  sz[A_RES2] = N * C;
  sz[A_LN2] = N * C;
  sz[A_LN2_MEAN] = N;
  sz[A_LN2_RSTD] = N;
  sz[A_FCH] = N * 4 * C;
  sz[A_FCHG] = N * 4 * C;
  sz[A_FCPROJ] = N * C;
  sz[A_RES3] = N * C;
}

/* Lays the acts struct over an arena (acts or gacts); returns the arena's
 * size in floats when base is NULL. */
static size_t acts_layout(const gpt2 *m, float *base, acts *a) {
  size_t N = (size_t)m->B * m->T, C = m->d.channels, Vp = m->d.padded_vocab_size;
  size_t L = m->d.n_layer, off = 0, sz[A_LAYER_COUNT];
  acts_sizes(m, sz);
  memset(a, 0, sizeof *a);
#define TAKE(ptr, n)                                                                               \
  do {                                                                                             \
    (ptr) = base ? base + off : NULL;                                                              \
    off += (n);                                                                                    \
  } while (0)
  TAKE(a->encoded, N * C);
  for (int k = 0; k < A_LAYER_COUNT; k++) {
    TAKE(a->layer[k], sz[k] * L);
    a->layer_size[k] = sz[k];
  }
  TAKE(a->lnf, N * C);
  TAKE(a->lnf_mean, N);
  TAKE(a->lnf_rstd, N);
  TAKE(a->logits, N * Vp);
  TAKE(a->probs, N * Vp);
  TAKE(a->losses, N);
#undef TAKE
  return off;
}

static float *act(const acts *a, int k, int l) {
  return a->layer[k] + (size_t)l * a->layer_size[k];
}

int gpt2_new(const ft_gpt2_dims *d, int B, int T, gpt2 **out) {
  *out = NULL;
  if (B <= 0 || T <= 0 || T > d->max_seq_len || d->channels % d->n_head)
    return ft_err_set(FT_EINVAL, "gpt2: bad shape B=%d T=%d (max %d)", B, T, d->max_seq_len);
  gpt2 *m = calloc(1, sizeof *m);
  if (!m)
    return ft_err_set(FT_ENOMEM, "gpt2: out of memory");
  m->d = *d;
  m->B = B;
  m->T = T;
  m->nparams = ft_gpt2_num_params(d);
  acts a;
  m->nacts = acts_layout(m, NULL, &a);
  m->params = calloc(m->nparams, sizeof(float));
  m->grads = calloc(m->nparams, sizeof(float));
  m->m = calloc(m->nparams, sizeof(float));
  m->v = calloc(m->nparams, sizeof(float));
  m->acts = calloc(m->nacts, sizeof(float));
  m->gacts = calloc(m->nacts, sizeof(float));
  m->inputs = calloc((size_t)B * T, sizeof(int32_t));
  m->targets = calloc((size_t)B * T, sizeof(int32_t));
  if (!m->params || !m->grads || !m->m || !m->v || !m->acts || !m->gacts || !m->inputs ||
      !m->targets) {
    gpt2_free(m);
    return ft_err_set(FT_ENOMEM, "gpt2: out of memory for %zu parameters", ft_gpt2_num_params(d));
  }
  *out = m;
  return FT_OK;
}

void gpt2_touch(gpt2 *m) {
  memset(m->params, 0, m->nparams * sizeof(float));
  memset(m->grads, 0, m->nparams * sizeof(float));
  memset(m->acts, 0, m->nacts * sizeof(float));
  memset(m->gacts, 0, m->nacts * sizeof(float));
}

void gpt2_free(gpt2 *m) {
  if (!m)
    return;
  free(m->params);
  free(m->grads);
  free(m->m);
  free(m->v);
  free(m->acts);
  free(m->gacts);
  free(m->inputs);
  free(m->targets);
  free(m);
}

uint64_t gpt2_rng_next(uint64_t *s) {
  /* splitmix64: a full-period generator whose whole state is one word. */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Standard normal by Box-Muller from two uniforms in (0,1]. */
static float rng_normal(uint64_t *s) {
  double u1 = ((gpt2_rng_next(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (gpt2_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

static void fill_normal(float *x, size_t n, float std, uint64_t *s) {
  for (size_t i = 0; i < n; i++)
    x[i] = std * rng_normal(s);
}

void gpt2_init_params(const ft_gpt2_dims *d, float *params, uint64_t seed) {
  uint64_t s = seed;
  size_t C = d->channels;
  float std = 0.02f, rstd = 0.02f / sqrtf(2.0f * d->n_layer);
  memset(params, 0, ft_gpt2_num_params(d) * sizeof(float));
  fill_normal(params + ft_gpt2_group_offset(d, 0), (size_t)d->vocab_size * C, std, &s);
  fill_normal(params + ft_gpt2_group_offset(d, 1), (size_t)d->max_seq_len * C, std, &s);
  for (int l = 0; l < d->n_layer; l++) {
    float *blk = params + ft_gpt2_group_offset(d, 2 + l);
    for (int t = 0; t < FT_B_COUNT; t++) {
      float *p = blk + ft_gpt2_block_offset(d, t);
      size_t n = ft_gpt2_block_numel(d, t);
      if (t == FT_B_LN1W || t == FT_B_LN2W)
        for (size_t i = 0; i < n; i++)
          p[i] = 1.0f;
      else if (t == FT_B_ATTPROJW || t == FT_B_FCPROJW)
        fill_normal(p, n, rstd, &s);
      else if (t == FT_B_QKVW || t == FT_B_FCW)
        fill_normal(p, n, std, &s);
    }
  }
  float *lnf = params + ft_gpt2_group_offset(d, 2 + d->n_layer);
  for (size_t i = 0; i < C; i++)
    lnf[i] = 1.0f;
}

void gpt2_init_weights(gpt2 *m, uint64_t seed) {
  gpt2_init_params(&m->d, m->params, seed);
  memset(m->m, 0, m->nparams * sizeof(float));
  memset(m->v, 0, m->nparams * sizeof(float));
}

/* Pointer to block tensor t of layer l inside an array in the params layout. */
static float *blk(const gpt2 *m, float *base, int l, int t) {
  return base + ft_gpt2_group_offset(&m->d, 2 + l) + ft_gpt2_block_offset(&m->d, t);
}

/* Hook wrappers: no-ops without hooks; the first failure sticks in m->err. */
static int h_gather(gpt2 *m, int g) {
  if (!m->hooks || m->err)
    return m->err;
  return m->err = m->hooks->gather(m->hooks->ud, m, g);
}
static void h_release(gpt2 *m, int g) {
  if (m->hooks)
    m->hooks->release(m->hooks->ud, m, g);
}
static int h_reduce(gpt2 *m, int g) {
  if (!m->hooks || m->err)
    return m->err;
  return m->err = m->hooks->reduce(m->hooks->ud, m, g);
}

float gpt2_forward(gpt2 *m, const int32_t *inputs, const int32_t *targets) {
  const ft_gpt2_dims *d = &m->d;
  int B = m->B, T = m->T, C = d->channels, NH = d->n_head, L = d->n_layer;
  int V = d->vocab_size, Vp = d->padded_vocab_size, N = B * T;
  float *P = m->params;
  acts a;
  acts_layout(m, m->acts, &a);
  memcpy(m->inputs, inputs, (size_t)N * sizeof(int32_t));
  memcpy(m->targets, targets, (size_t)N * sizeof(int32_t));

  m->err = FT_OK;
  const float *wte = P + ft_gpt2_group_offset(d, 0), *wpe = P + ft_gpt2_group_offset(d, 1);
  if (h_gather(m, 0) || h_gather(m, 1)) /* wte stays until the backward is done */
    return NAN;
  k_encoder_fwd(a.encoded, inputs, wte, wpe, B, T, C);
  h_release(m, 1);
  const float *x = a.encoded;
  for (int l = 0; l < L; l++) {
    if (h_gather(m, 2 + l))
      return NAN;
    float *ln1 = act(&a, A_LN1, l), *qkv = act(&a, A_QKV, l), *atty = act(&a, A_ATTY, l);
    float *attproj = act(&a, A_ATTPROJ, l), *res2 = act(&a, A_RES2, l), *ln2 = act(&a, A_LN2, l);
    float *fch = act(&a, A_FCH, l), *fchg = act(&a, A_FCHG, l), *fcproj = act(&a, A_FCPROJ, l);
    float *res3 = act(&a, A_RES3, l);
    k_layernorm_fwd(ln1, act(&a, A_LN1_MEAN, l), act(&a, A_LN1_RSTD, l), x, blk(m, P, l, FT_B_LN1W),
                    blk(m, P, l, FT_B_LN1B), N, C);
    k_matmul_fwd(qkv, ln1, blk(m, P, l, FT_B_QKVW), blk(m, P, l, FT_B_QKVB), N, C, 3 * C);
    k_attention_fwd(atty, act(&a, A_PREATT, l), act(&a, A_ATT, l), qkv, B, T, C, NH);
    k_matmul_fwd(attproj, atty, blk(m, P, l, FT_B_ATTPROJW), blk(m, P, l, FT_B_ATTPROJB), N, C, C);
    k_residual_fwd(res2, x, attproj, (size_t)N * C);
    k_layernorm_fwd(ln2, act(&a, A_LN2_MEAN, l), act(&a, A_LN2_RSTD, l), res2,
                    blk(m, P, l, FT_B_LN2W), blk(m, P, l, FT_B_LN2B), N, C);
    k_matmul_fwd(fch, ln2, blk(m, P, l, FT_B_FCW), blk(m, P, l, FT_B_FCB), N, C, 4 * C);
    k_gelu_fwd(fchg, fch, (size_t)N * 4 * C);
    k_matmul_fwd(fcproj, fchg, blk(m, P, l, FT_B_FCPROJW), blk(m, P, l, FT_B_FCPROJB), N, 4 * C, C);
    k_residual_fwd(res3, res2, fcproj, (size_t)N * C);
    h_release(m, 2 + l);
    x = res3;
  }
  const float *lnf = P + ft_gpt2_group_offset(d, 2 + L);
  if (h_gather(m, 2 + L))
    return NAN;
  k_layernorm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, x, lnf, lnf + C, N, C);
  h_release(m, 2 + L);
  k_matmul_fwd(a.logits, a.lnf, wte, NULL, N, C, Vp);
  m->last_loss = k_crossentropy_fwd(a.probs, a.losses, a.logits, targets, N, V, Vp);
  return m->last_loss;
}

void gpt2_zero_grad(gpt2 *m) {
  memset(m->grads, 0, m->nparams * sizeof(float));
}

int gpt2_backward(gpt2 *m, float dloss_scale) {
  const ft_gpt2_dims *d = &m->d;
  int B = m->B, T = m->T, C = d->channels, NH = d->n_head, L = d->n_layer;
  int V = d->vocab_size, Vp = d->padded_vocab_size, N = B * T;
  float *P = m->params, *G = m->grads;
  acts a, g;
  acts_layout(m, m->acts, &a);
  acts_layout(m, m->gacts, &g);
  memset(m->gacts, 0, m->nacts * sizeof(float));

  float *wte = P + ft_gpt2_group_offset(d, 0), *dwte = G + ft_gpt2_group_offset(d, 0);
  float *dwpe = G + ft_gpt2_group_offset(d, 1);
  const float *lnf = P + ft_gpt2_group_offset(d, 2 + L);
  float *dlnf = G + ft_gpt2_group_offset(d, 2 + L);

  if (m->err)
    return m->err;
  k_crossentropy_bwd(g.logits, a.probs, m->targets, dloss_scale / (float)N, N, V, Vp);
  k_matmul_bwd(g.lnf, dwte, NULL, g.logits, a.lnf, wte, N, C, Vp);
  if (h_gather(m, 2 + L))
    return m->err;
  const float *xL = L > 0 ? act(&a, A_RES3, L - 1) : a.encoded;
  float *dxL = L > 0 ? act(&g, A_RES3, L - 1) : g.encoded;
  k_layernorm_bwd(dxL, dlnf, dlnf + C, g.lnf, xL, lnf, a.lnf_mean, a.lnf_rstd, N, C);
  h_release(m, 2 + L);
  if (h_reduce(m, 2 + L))
    return m->err;

  for (int l = L - 1; l >= 0; l--) {
    if (h_gather(m, 2 + l))
      return m->err;
    const float *x = l > 0 ? act(&a, A_RES3, l - 1) : a.encoded;
    float *dx = l > 0 ? act(&g, A_RES3, l - 1) : g.encoded;
    float *dres3 = act(&g, A_RES3, l), *dres2 = act(&g, A_RES2, l);
    /* res3 = res2 + fcproj */
    k_residual_bwd(dres2, act(&g, A_FCPROJ, l), dres3, (size_t)N * C);
    k_matmul_bwd(act(&g, A_FCHG, l), blk(m, G, l, FT_B_FCPROJW), blk(m, G, l, FT_B_FCPROJB),
                 act(&g, A_FCPROJ, l), act(&a, A_FCHG, l), blk(m, P, l, FT_B_FCPROJW), N, 4 * C, C);
    k_gelu_bwd(act(&g, A_FCH, l), act(&a, A_FCH, l), act(&g, A_FCHG, l), (size_t)N * 4 * C);
    k_matmul_bwd(act(&g, A_LN2, l), blk(m, G, l, FT_B_FCW), blk(m, G, l, FT_B_FCB),
                 act(&g, A_FCH, l), act(&a, A_LN2, l), blk(m, P, l, FT_B_FCW), N, C, 4 * C);
    k_layernorm_bwd(dres2, blk(m, G, l, FT_B_LN2W), blk(m, G, l, FT_B_LN2B), act(&g, A_LN2, l),
                    act(&a, A_RES2, l), blk(m, P, l, FT_B_LN2W), act(&a, A_LN2_MEAN, l),
                    act(&a, A_LN2_RSTD, l), N, C);
    /* res2 = x + attproj */
    k_residual_bwd(dx, act(&g, A_ATTPROJ, l), dres2, (size_t)N * C);
    k_matmul_bwd(act(&g, A_ATTY, l), blk(m, G, l, FT_B_ATTPROJW), blk(m, G, l, FT_B_ATTPROJB),
                 act(&g, A_ATTPROJ, l), act(&a, A_ATTY, l), blk(m, P, l, FT_B_ATTPROJW), N, C, C);
    k_attention_bwd(act(&g, A_QKV, l), act(&g, A_PREATT, l), act(&g, A_ATT, l), act(&g, A_ATTY, l),
                    act(&a, A_QKV, l), act(&a, A_ATT, l), B, T, C, NH);
    k_matmul_bwd(act(&g, A_LN1, l), blk(m, G, l, FT_B_QKVW), blk(m, G, l, FT_B_QKVB),
                 act(&g, A_QKV, l), act(&a, A_LN1, l), blk(m, P, l, FT_B_QKVW), N, C, 3 * C);
    k_layernorm_bwd(dx, blk(m, G, l, FT_B_LN1W), blk(m, G, l, FT_B_LN1B), act(&g, A_LN1, l), x,
                    blk(m, P, l, FT_B_LN1W), act(&a, A_LN1_MEAN, l), act(&a, A_LN1_RSTD, l), N, C);
    h_release(m, 2 + l);
    if (h_reduce(m, 2 + l))
      return m->err;
  }
  k_encoder_bwd(dwte, dwpe, g.encoded, m->inputs, B, T, C);
  h_release(m, 0);
  if (h_reduce(m, 1) || h_reduce(m, 0))
    return m->err;
  return FT_OK;
}

float gpt2_grad_norm(const gpt2 *m) {
  return (float)sqrt(k_sumsq(m->grads, m->nparams));
}

void gpt2_group_segments(const ft_gpt2_dims *d, int g,
                         void (*fn)(void *ud, size_t off, size_t n, int decays), void *ud) {
  int L = d->n_layer;
  if (g < 2) /* wte, wpe: decayed */
    fn(ud, 0, ft_gpt2_group_numel(d, g), 1);
  else if (g == 2 + L) /* lnf: LayerNorm, not decayed */
    fn(ud, 0, ft_gpt2_group_numel(d, g), 0);
  else
    for (int k = 0; k < FT_B_COUNT; k++)
      fn(ud, ft_gpt2_block_offset(d, k), ft_gpt2_block_numel(d, k), ft_gpt2_block_decays(k));
}

typedef struct runs_walk {
  const ft_gpt2_dims *d;
  const shardmap *sm;
  int g, rc;
  float wd;
  int (*fn)(void *ud, size_t off, size_t n, float wd);
  void *ud;
} runs_walk;

static void walk_segment(void *ud, size_t off, size_t n, int decays) {
  runs_walk *w = ud;
  if (w->rc)
    return;
  size_t o = ft_gpt2_group_offset(w->d, w->g) + off, cnt = n;
  if (w->sm)
    cnt = shardmap_clip(w->sm, w->g, off, n, &o);
  if (cnt)
    w->rc = w->fn(w->ud, o, cnt, decays ? w->wd : 0.0f);
}

int gpt2_adamw_runs(const ft_gpt2_dims *d, const shardmap *sm, float wd,
                    int (*fn)(void *ud, size_t off, size_t n, float wd), void *ud) {
  runs_walk w = {d, sm, 0, FT_OK, wd, fn, ud};
  int ngroups = sm ? sm->ngroups : ft_gpt2_ngroups(d);
  for (w.g = 0; w.g < ngroups && !w.rc; w.g++)
    gpt2_group_segments(d, w.g, walk_segment, &w);
  return w.rc;
}

typedef struct adamw_args {
  gpt2 *m;
  float lr, b1, b2, eps;
  int64_t t;
} adamw_args;

static int adamw_run(void *ud, size_t o, size_t n, float wd) {
  adamw_args *a = ud;
  k_adamw(a->m->params + o, a->m->grads + o, a->m->m + o, a->m->v + o, n, a->lr, a->b1, a->b2,
          a->eps, wd, a->t);
  return FT_OK;
}

void gpt2_adamw(gpt2 *m, float lr, float beta1, float beta2, float eps, float wd, int64_t t) {
  adamw_args a = {m, lr, beta1, beta2, eps, t};
  gpt2_adamw_runs(&m->d, NULL, wd, adamw_run, &a);
}
