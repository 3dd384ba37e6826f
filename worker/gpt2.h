/*
 * gpt2: the GPT-2 model on the CPU kernels: parameters, gradients,
 * activations, forward, backward and the optimizer step.
 *
 * Parameters follow common/ft_gpt2.h's layout (groups: wte, wpe, h.0..h.L-1,
 * lnf; each group one flat buffer, the unit FSDP will shard). One model is
 * allocated for one micro-batch shape (B, T) and reused every step: all
 * memory is allocated once in gpt2_new.
 *
 * Determinism: forward and backward are fixed sequences of deterministic
 * kernels, so the same parameters and tokens give the same bits.
 */
#ifndef GPT2_H
#define GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "ft_gpt2.h"

typedef struct gpt2 gpt2;

/* Hooks through which FSDP (fsdp.c) sees the model's use of each parameter
 * group during forward and backward. Without hooks every group is resident
 * in params and gradients accumulate in grads. With hooks, params and grads
 * are working buffers: a group's parameters are valid only between its
 * gather and release, and its gradient is handed over by reduce (which
 * leaves the working gradient zeroed). Order: forward gathers wte, wpe,
 * then each block in turn, then lnf; backward gathers them again in reverse
 * and reduces each group as soon as its gradient is complete (lnf, blocks
 * L-1..0, wpe, wte). A hook returning non-zero stops the pass: the forward
 * returns NaN and m->err holds the code. */
typedef struct gpt2_hooks {
  void *ud;
  int (*gather)(void *ud, gpt2 *m, int g);
  void (*release)(void *ud, gpt2 *m, int g);
  int (*reduce)(void *ud, gpt2 *m, int g);
} gpt2_hooks;

struct gpt2 {
  ft_gpt2_dims d;
  int B, T; /* micro-batch shape the activations are sized for */
  size_t nparams;
  float *params; /* (nparams) */
  float *grads;  /* (nparams) */
  float *m, *v;  /* AdamW moments (nparams) */
  float *acts;   /* activations arena */
  float *gacts;  /* activation-gradient arena */
  size_t nacts;
  int32_t *inputs;         /* (B,T) of the last forward */
  int32_t *targets;        /* (B,T) */
  float last_loss;         /* mean loss of the last forward */
  const gpt2_hooks *hooks; /* NULL: all groups resident (world size 1) */
  int err;                 /* first hook error of the last pass, FT_OK if none */
};

/* Allocates a model for micro-batch (B, T); parameters are zero until
 * gpt2_init_weights or a restore. *out owned by the caller (gpt2_free). */
int gpt2_new(const ft_gpt2_dims *d, int B, int T, gpt2 **out);
void gpt2_free(gpt2 *m);
/* Writes zeros over the weights, gradients and activations, so their pages
 * are mapped before the first step needs them (a warm spare). */
void gpt2_touch(gpt2 *m);

/* GPT-2 initialisation from a seed: weights N(0, 0.02), the two residual
 * projections of each block N(0, 0.02/sqrt(2L)), biases 0, LayerNorm
 * weights 1. Padding rows of wte are 0. Moments are zeroed. */
void gpt2_init_weights(gpt2 *m, uint64_t seed);
/* The same initialisation into a full parameter array of d's layout
 * (ft_gpt2_num_params(d) floats), without a model (any backend). */
void gpt2_init_params(const ft_gpt2_dims *d, float *params, uint64_t seed);

/* Forward on tokens (B,T) and targets (B,T); returns the mean loss (NaN
 * with m->err set if a hook failed). */
float gpt2_forward(gpt2 *m, const int32_t *inputs, const int32_t *targets);
/* Backward of the last forward, accumulating into m->grads; dloss_scale
 * is the weight of this micro-batch's mean loss in the step's loss (1/accum). */
int gpt2_backward(gpt2 *m, float dloss_scale);
void gpt2_zero_grad(gpt2 *m);

/* Global L2 norm of the gradients (deterministic). */
float gpt2_grad_norm(const gpt2 *m);
/* Calls fn for each run of group g's elements that shares one weight-decay
 * setting: (offset within the group, count, decays). */
void gpt2_group_segments(const ft_gpt2_dims *d, int g,
                         void (*fn)(void *ud, size_t off, size_t n, int decays), void *ud);
/* The one walk of AdamW over a flat parameter buffer, shared by the CPU
 * trainer, FSDP and the CUDA engine so that they update the same elements
 * with the same decay in the same order. Calls fn(ud, off, n, wd) for every
 * run of elements that shares one weight-decay setting, group by group, run
 * by run (gpt2_group_segments): off is the run's offset in the buffer and wd
 * the decay it gets (wd, or 0 where gpt2_group_segments says no decay).
 * sm NULL: the buffer is the whole model (group offset + run offset). With a
 * shardmap: the buffer is this rank's shard; each run is clipped to the
 * rank's range, and runs it owns nothing of are skipped. Stops at fn's first
 * non-zero return and returns it; FT_OK otherwise. */
struct shardmap;
int gpt2_adamw_runs(const ft_gpt2_dims *d, const struct shardmap *sm, float wd,
                    int (*fn)(void *ud, size_t off, size_t n, float wd), void *ud);
/* AdamW on every parameter; weight decay on 2-D weights and embeddings
 * only. t is the 1-based optimizer step. */
void gpt2_adamw(gpt2 *m, float lr, float beta1, float beta2, float eps, float wd, int64_t t);

/* Splitmix64-seeded xorshift generator used for initialisation; its state
 * is part of the training state. */
uint64_t gpt2_rng_next(uint64_t *state);

#endif
