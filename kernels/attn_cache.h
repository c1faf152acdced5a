/* Attention against a KV cache (inference): a few new query rows of one sequence attend to the
 * keys and values of every earlier position, held in a cache of S rows. Grouped-query heads as in
 * attention.h (query head h uses kv head h / (Nl/Kl)), scale 1/sqrt(H). Scores and values go
 * through sgemm; one new token (decode) reads each kv head's cache once for all the query heads
 * that share it. Also the memory-bandwidth probe that decode's roofline is measured against.
 * No MPI. */
#ifndef MT_KERNELS_ATTN_CACHE_H
#define MT_KERNELS_ATTN_CACHE_H
#include <stdint.h>

/* Query row i (i < n) is the token at position p0 + i and attends to cache rows [0, p0 + i].
 * q[n, Nl·H] (row stride Nl·H); kc, vc[p0 + n, ldk] (kv head j at columns [j·H, (j+1)·H),
 * ldk ≥ Kl·H) already hold rows [0, p0 + n); out[n, Nl·H]. scratch: kern_attn_cached_scratch
 * floats. Overwrites out and scratch. */
void kern_attn_cached(float *restrict out, float *restrict scratch, const float *restrict q,
                      const float *restrict kc, const float *restrict vc, int64_t p0, int64_t n,
                      int64_t Nl, int64_t Kl, int64_t H, int64_t ldk);
/* Floats of scratch kern_attn_cached needs for n rows after p0 with Nl/Kl query heads per kv
 * head: n = 1: (Nl/Kl)·(p0 + 1); n > 1: min(n, 64)·(p0 + n). */
int64_t kern_attn_cached_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl);
/* Naive twin (double accumulation); needs no scratch. */
void kern_attn_cached_ref(float *out, const float *q, const float *kc, const float *vc, int64_t p0,
                          int64_t n, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk);

/* Σ x[0..n), read once as eight streams (the buffer's eighths side by side, as a matrix-vector
 * product reads its rows) with 64 independent partial sums: the memory-bound read that decode
 * does to its weights and cache. */
float kern_read_sum(const float *restrict x, int64_t n);
/* Measures this process's read bandwidth from memory in bytes/s: kern_read_sum over a buffer of
 * `bytes` (allocated here, far larger than the caches), best of repeated passes for about
 * `seconds`. 0 when the buffer cannot be allocated. */
double kern_measure_read_bw(int64_t bytes, double seconds);
/* The size in bytes of the last-level cache CPU 0 uses (the highest cache level Linux lists in
 * /sys/devices/system/cpu/cpu0/cache); 0 when not known. */
int64_t kern_llc_bytes(void);
#endif
