/* Causal grouped-query attention on bf16 operands, for training (forward and backward on a local
 * slab of heads, as attention.h) and for inference against a bf16 KV cache (as attn_cache.h).
 * Shapes as there: rows are tokens, q[B·T, Nl·H], k, v[B·T, Kl·H]; query head h uses kv head
 * h / (Nl/Kl); scale 1/sqrt(H). Depends on bf16.h and gemm_bf16.h; no MPI, no allocation.
 *
 * Rounding points (the double twins round at the same places):
 *   forward   S = q·kᵀ summed in fp32 from bf16 q, k; P = softmax(S·scale) in fp32, rounded to
 *             bf16 (saved for the backward: half the bytes of fp32 P); out = P·v summed in fp32.
 *   backward  dO bf16 (the caller rounds it); dP = dO·vᵀ in fp32; dS = P∘(dP − rowsum(P∘dP))·scale
 *             in fp32 from the bf16 P, rounded to bf16; dQ = dS·k, dK = dSᵀ·q, dV = Pᵀ·dO summed
 *             in fp32.
 * The products run on meshtrain's own bf16 kernels on every path (the avx2 kernels, or plain C on
 * the portable path), not oneDNN's: their shapes change with the key count (every decode step has
 * one more key), and oneDNN would make a primitive for each. So on the own kernels' contract
 * (gemm_bf16.h), the cached kernel's rows equal the training forward's bit for bit, and a row's
 * result does not depend on how many rows are computed with it. */
#ifndef MT_KERNELS_ATTN_BF16_H
#define MT_KERNELS_ATTN_BF16_H
#include <stdint.h>

#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"

/* Floats of scratch kern_attn_fwd_bf16 and kern_attn_bwd_bf16 need for sequences of T:
 * 64·T (a block of scores or of dP) + T·T/2 (dS in bf16, the backward). */
int64_t kern_attn_bf16_scratch(int64_t T);

/* out[B·T, Nl·H] = softmax(q·kᵀ/sqrt(H) + causal mask) · v. P[B, Nl, T, T] receives the bf16
 * probabilities (entries above the diagonal 0). Overwrites out, P and scratch. The caller rounds
 * out to bf16 for the next product (kern_bf16_pack). */
void kern_attn_fwd_bf16(kern_bf16_ctx *ctx, float *restrict out, kern_bf16 *restrict P,
                        float *restrict scratch, const kern_bf16 *q, const kern_bf16 *k,
                        const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                        int64_t H);
/* Backward, from dout[B·T, Nl·H] (bf16) and the forward's P. Overwrites dq[B·T, Nl·H],
 * dk, dv[B·T, Kl·H] (fp32) and scratch. */
void kern_attn_bwd_bf16(kern_bf16_ctx *ctx, float *restrict dq, float *restrict dk,
                        float *restrict dv, float *restrict scratch, const kern_bf16 *dout,
                        const kern_bf16 *P, const kern_bf16 *q, const kern_bf16 *k,
                        const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                        int64_t H);

/* Inference against a bf16 KV cache: query row i (i < n) is the token at position p0 + i and
 * attends to cache rows [0, p0 + i]. q[n, Nl·H] fp32 (rounded to bf16 here, as the training
 * forward's caller rounds it); kc, vc[p0 + n, ldk] bf16 (kv head j at columns [j·H, (j+1)·H),
 * ldk ≥ Kl·H) already hold rows [0, p0 + n); out[n, Nl·H] fp32. scratch:
 * kern_attn_cached_bf16_scratch floats. Overwrites out and scratch. One new token (decode) reads
 * each kv head's cache once for all the query heads that share it. For an fp32 cache
 * (--kv-dtype fp32), kern_attn_cached (attn_cache.h) is the kernel. */
void kern_attn_cached_bf16(kern_bf16_ctx *ctx, float *restrict out, float *restrict scratch,
                           const float *restrict q, const kern_bf16 *kc, const kern_bf16 *vc,
                           int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk);
/* Floats of scratch kern_attn_cached_bf16 needs: the scores and their bf16 probabilities for the
 * rows of one block (n = 1: the Nl/Kl query heads of a kv head; n > 1: min(n, 64) rows) over
 * p0 + n keys, and the rounded q. */
int64_t kern_attn_cached_bf16_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H);

/* Naive twins in double that round to bf16 where the kernels do (P; dS), from the same bf16
 * inputs. The backward's twin needs scratch of (Nl/Kl)·T·T doubles (dS of a group of heads) and
 * accumulates dk, dv over the group in double. */
void kern_attn_fwd_bf16_ref(float *out, kern_bf16 *P, const kern_bf16 *q, const kern_bf16 *k,
                            const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                            int64_t H);
void kern_attn_bwd_bf16_ref(float *dq, float *dk, float *dv, double *scratch, const kern_bf16 *dout,
                            const kern_bf16 *P, const kern_bf16 *q, const kern_bf16 *k,
                            const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                            int64_t H);
/* The twin of kern_attn_cached_bf16 (no scratch). */
void kern_attn_cached_bf16_ref(float *out, const float *q, const kern_bf16 *kc, const kern_bf16 *vc,
                               int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H,
                               int64_t ldk);
#endif
