/*
 * sdc: the silent-data-corruption check's arithmetic (see sdc.h).
 */
#include "sdc.h"

#include <inttypes.h>
#include <stdio.h>

int sdc_due(int64_t every, int world, int64_t k) {
  return every > 0 && world >= 2 && k > 0 && k % every == 0;
}

int sdc_micro(uint64_t seed, int64_t k, int accum) {
  if (accum <= 1)
    return 0;
  uint64_t z = seed + (uint64_t)k * 0x9e3779b97f4a7c15ull; /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (int)(z % (uint64_t)accum);
}

int sdc_stride(int world, int G) {
  return G >= 1 && world > G ? G : 1;
}

void sdc_pack(double *v, int r, uint64_t h) {
  v[2 * r] = (double)(h >> 32);
  v[2 * r + 1] = (double)(h & 0xffffffffu);
}

uint64_t sdc_unpack(const double *v, int r) {
  return ((uint64_t)v[2 * r] << 32) | (uint64_t)v[2 * r + 1];
}

int sdc_mismatches(const uint64_t *own, const uint64_t *re1, int world, int stride, int *first) {
  int n = 0;
  *first = -1;
  for (int a = 0; a < world; a++)
    if (own[a] != re1[(a + stride) % world] && n++ == 0)
      *first = a;
  return n;
}

int sdc_judge(const uint64_t *own, const uint64_t *re1, const uint64_t *re2, int world, int stride,
              int64_t step, int mb, char *detail, size_t len) {
  int named = -2, nmis = 0, fa = -1; /* -2: none yet; -1: no majority */
  for (int a = 0; a < world; a++) {
    int b = (a + stride) % world, c = (a + 2 * stride) % world;
    if (own[a] == re1[b])
      continue;
    if (fa < 0)
      fa = a;
    nmis++;
    int who = -1;
    if (c != a && c != b && re2[c] == re1[b])
      who = a; /* two recomputations agree against a's own */
    else if (c != a && c != b && re2[c] == own[a])
      who = b; /* a's own and c's agree against b's */
    named = named == -2 || named == who ? who : -1;
  }
  if (fa < 0) {
    snprintf(detail, len, "step %" PRId64 ": every rank's micro-batch %d recomputed alike", step,
             mb);
    return -1;
  }
  int b = (fa + stride) % world, c = (fa + 2 * stride) % world;
  char third[64] = "no third rank to recompute it";
  if (c != fa && c != b)
    snprintf(third, sizeof third, "%016" PRIx64 " on rank %d", re2[c], c);
  char hashes[256];
  snprintf(hashes, sizeof hashes,
           "rank %d's micro-batch %d of step %" PRId64 " hashed %016" PRIx64 " on rank %d, "
           "%016" PRIx64 " recomputed on rank %d, %s (%d rank(s) differ from their recomputation)",
           fa, mb, step, own[fa], fa, re1[b], b, third, nmis);
  if (named >= 0)
    snprintf(detail, len, "rank %d computes wrong bits: %s", named, hashes);
  else
    snprintf(detail, len, "no majority names a rank: %s", hashes);
  return named >= 0 ? named : -1;
}
