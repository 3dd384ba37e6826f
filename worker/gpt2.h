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

typedef struct gpt2 {
  ft_gpt2_dims d;
  int B, T;           /* micro-batch shape the activations are sized for */
  size_t nparams;
  float *params;      /* (nparams) */
  float *grads;       /* (nparams) */
  float *m, *v;       /* AdamW moments (nparams) */
  float *acts;        /* activations arena */
  float *gacts;       /* activation-gradient arena */
  size_t nacts;
  int32_t *inputs;    /* (B,T) of the last forward */
  int32_t *targets;   /* (B,T) */
  float last_loss;    /* mean loss of the last forward */
} gpt2;

/* Allocates a model for micro-batch (B, T); parameters are zero until
 * gpt2_init_weights or a restore. *out owned by the caller (gpt2_free). */
int gpt2_new(const ft_gpt2_dims *d, int B, int T, gpt2 **out);
void gpt2_free(gpt2 *m);

/* GPT-2 initialisation from a seed: weights N(0, 0.02), the two residual
 * projections of each block N(0, 0.02/sqrt(2L)), biases 0, LayerNorm
 * weights 1. Padding rows of wte are 0. Moments are zeroed. */
void gpt2_init_weights(gpt2 *m, uint64_t seed);

/* Forward on tokens (B,T) and targets (B,T); returns the mean loss. */
float gpt2_forward(gpt2 *m, const int32_t *inputs, const int32_t *targets);
/* Backward of the last forward, accumulating into m->grads; dloss_scale
 * is the weight of this micro-batch's mean loss in the step's loss (1/accum). */
void gpt2_backward(gpt2 *m, float dloss_scale);
void gpt2_zero_grad(gpt2 *m);

/* Global L2 norm of the gradients (deterministic). */
float gpt2_grad_norm(const gpt2 *m);
/* AdamW on every parameter; weight decay on 2-D weights and embeddings
 * only. t is the 1-based optimizer step. */
void gpt2_adamw(gpt2 *m, float lr, float beta1, float beta2, float eps, float wd, int64_t t);

/* Splitmix64-seeded xorshift generator used for initialisation; its state
 * is part of the training state. */
uint64_t gpt2_rng_next(uint64_t *state);

#endif
