/* Attention through a block table (a paged KV cache, as a serving engine keeps it): the keys and
 * values of one sequence live in fixed-size blocks of a shared pool, and the sequence's block
 * table says which block holds which positions. Grouped-query heads as in attention.h (query head
 * h uses kv head h / (Nl/Kl)), scale 1/sqrt(H). No MPI, no allocation.
 *
 * Row-independent by construction: each query row's output is a function of that row's query and
 * of the cache rows it attends to, computed in one fixed order (dot products in 8 lanes, the
 * softmax and the weighted sum of values over positions in position order), never of the other
 * query rows of the call, of how the rows are chunked (p0, n), of the block size or of where the
 * blocks sit in the pool. So a chunked prefill, a decode step in a batch of any size and a
 * contiguous cache (one block holding every row) give the same bits. On a CPU with AVX2 and FMA
 * the products are fused multiply-adds (other bits than the plain version's, the same for every
 * call of a run). A bf16 pool (--kv-dtype bf16) has its twin, kern_attn_paged_bf16, reading the
 * same block layout (attn_paged_bf16.c). */
#ifndef MT_KERNELS_ATTN_PAGED_H
#define MT_KERNELS_ATTN_PAGED_H
#include <stdint.h>

#include "kernels/bf16.h"

/* Where a sequence's rows sit in a pool: the row of position p starts table[p / bs]·bstride +
 * (p % bs)·ldk elements from the pool's start. ldk ≥ Kl·H; bstride ≥ bs·ldk (blocks may
 * interleave other layers' rows between them). */
typedef struct {
    const int32_t *table;
    int64_t bs, bstride, ldk;
} kern_kv_table;

/* One layer's view of a paged cache: the key row of position p (its Kl heads side by side, kv
 * head j at columns [j·H, (j+1)·H)) is at.table's row of p from k, the value row the same from v. */
typedef struct {
    const float *k, *v;
    kern_kv_table at;
} kern_kv_pages;

/* Query row i (i < n) is the token at position p0 + i of the sequence and attends to cache
 * positions [0, p0 + i], which must hold its keys and values already (its own row included).
 * q[n, Nl·H] (row stride Nl·H); out[n, Nl·H]. scratch: kern_attn_paged_scratch floats.
 * Overwrites out and scratch. */
void kern_attn_paged(float *restrict out, float *restrict scratch, const float *restrict q,
                     const kern_kv_pages *kv, int64_t p0, int64_t n, int64_t Nl, int64_t Kl,
                     int64_t H);
/* The plain version (SSE2 through GCC's vectoriser), which kern_attn_paged runs on CPUs without
 * AVX2 and FMA; the same contract. */
void kern_attn_paged_plain(float *restrict out, float *restrict scratch, const float *restrict q,
                           const kern_kv_pages *kv, int64_t p0, int64_t n, int64_t Nl, int64_t Kl,
                           int64_t H);
/* Floats of scratch for rows up to position p0 + n − 1: (Nl/Kl)·(p0 + n). */
int64_t kern_attn_paged_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl);
/* Naive twin (double accumulation, exp from libm); needs no scratch. */
void kern_attn_paged_ref(float *out, const float *q, const kern_kv_pages *kv, int64_t p0, int64_t n,
                         int64_t Nl, int64_t Kl, int64_t H);

/* The view of a bf16 pool: the same layout as kern_kv_pages, in bf16 elements. */
typedef struct {
    const kern_bf16 *k, *v;
    kern_kv_table at;
} kern_kv_pages_bf16;

/* kern_attn_paged on a bf16 pool, with the rounding points of kern_attn_cached_bf16
 * (attn_bf16.h): q rounded to bf16; each score Σ_d b(q)_d·k_d one fp32 chain in d order, times the
 * scale; softmax fp32; P rounded to bf16; out = Σ_t b(P)_t·v_t one fp32 chain per element in
 * position order. Products of bf16 values are exact in fp32, so these chains are those of the
 * own bf16 kernels (gemm_bf16.h): the results are bit-identical to kern_attn_cached_bf16's on a
 * contiguous copy of the cache (on its avx2 and portable paths alike), and row-independent as
 * kern_attn_paged is. q[n, Nl·H] fp32; out[n, Nl·H]; scratch: kern_attn_paged_bf16_scratch
 * floats. Overwrites out and scratch. */
void kern_attn_paged_bf16(float *restrict out, float *restrict scratch, const float *restrict q,
                          const kern_kv_pages_bf16 *kv, int64_t p0, int64_t n, int64_t Nl,
                          int64_t Kl, int64_t H);
/* Floats of scratch for rows up to position p0 + n − 1: the scores of the Nl/Kl heads of a kv head
 * (fp32), their probabilities and their query rows (bf16). */
int64_t kern_attn_paged_bf16_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H);
#endif
