/* Counter-based random numbers (Philox4x32-10): the value at (seed, stream, index) is a pure
 * function of the three, so any rank can generate any slice of a global tensor and get the
 * same numbers as one rank generating the whole tensor. */
#ifndef MT_KERNELS_RNG_H
#define MT_KERNELS_RNG_H
#include <stdint.h>

/* 64 random bits at (seed, stream, index). */
uint64_t kern_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1) with 53 bits. */
double kern_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box–Muller on the 128 bits of one Philox block). */
double kern_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* out[i] = std · normal(seed, stream, index0 + i), i < n. Overwrites. */
void kern_rng_fill_normal(float *out, uint64_t seed, uint64_t stream, uint64_t index0, int64_t n,
                          float std);
/* The raw Philox4x32-10 block: ctr = (index lo, index hi, stream lo, stream hi), key = (seed lo,
 * seed hi), as in Random123's philox4x32 (for known-answer tests). */
void kern_rng_philox_block(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]);
#endif
