/*
 * sdc: the arithmetic of the silent-data-corruption check (docs/design.md
 * §6): which steps are checked, who recomputes whom, how the hashes travel
 * in an all-reduce of doubles, and the verdict. Pure functions; the
 * trainer (train.c) runs the recomputations and the collectives.
 *
 * Every watchdog.sdc_every-th step, rank r's micro-batch m (the same index
 * on every rank, drawn from the seed and the step) is hashed as it trains
 * (its loss and each gradient group before reduction) and recomputed by
 * rank r + s (mod W), s = workers per node where the gang spans several
 * nodes, so the recomputation runs on another node. A rank whose hash
 * differs from its recomputation's is recomputed once more, by r + 2s, and
 * the two that agree name the third. Fewer than three distinct ranks, or
 * three different answers: no majority, nobody named.
 */
#ifndef SDC_H
#define SDC_H

#include <stddef.h>
#include <stdint.h>

/* The hash a check starts from (FNV-1a's offset basis). */
#define SDC_HASH_INIT 0xcbf29ce484222325ull

/* 1 if step k (1-based) is checked: every > 0, world >= 2, k % every == 0. */
int sdc_due(int64_t every, int world, int64_t k);
/* The micro-batch (0..accum-1) step k checks: the same on every rank. */
int sdc_micro(uint64_t seed, int64_t k, int accum);
/* The distance from a rank to its recomputer: workers per node G when the
 * world spans more than one node, else 1. */
int sdc_stride(int world, int G);
/* Rank r's hash h into slot r of v (two doubles, 32 bits each: exact in an
 * all-reduce sum where every other rank adds zeros); and back. */
void sdc_pack(double *v, int r, uint64_t h);
uint64_t sdc_unpack(const double *v, int r);
/* From own[r] (rank r's hash of its micro-batch) and re1[x] (rank x's
 * recomputation of rank x - stride's): the number of ranks whose hash
 * differs from their recomputation's; *first gets the lowest. */
int sdc_mismatches(const uint64_t *own, const uint64_t *re1, int world, int stride, int *first);
/* The verdict with re2[x] (rank x's recomputation of rank x - 2*stride's):
 * the rank every mismatch names, or -1 when there is no majority. detail
 * (a sentence for the event; it starts "rank R " when one is named): the
 * hashes behind it. step: the checked step; mb: its micro-batch. */
int sdc_judge(const uint64_t *own, const uint64_t *re1, const uint64_t *re2, int world, int stride,
              int64_t step, int mb, char *detail, size_t len);

#endif
