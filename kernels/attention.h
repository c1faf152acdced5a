/* Causal scaled-dot-product attention with grouped-query heads on a local slab of heads.
 * Rows are tokens: q[B·T, Nl·H], k,v[B·T, Kl·H], out[B·T, Nl·H]; query head h uses kv head
 * h / (Nl/Kl). Scale 1/sqrt(H). Scores and values go through sgemm. */
#ifndef MT_KERNELS_ATTENTION_H
#define MT_KERNELS_ATTENTION_H
#include <stdint.h>

/* Rows per causal block: smaller skips more of the masked half, larger makes better gemms.
 * Measured at B=8, T=256, Nl=Kl=8, H=64, one thread: 32, 64 and 128 are within noise of each
 * other; no blocking (block = T) is 1.8× slower for fwd+bwd. The blockwise kernels (attn_part.h)
 * use the same blocks, so that one block of theirs runs the same gemms as these kernels. */
#define KERN_ATTN_BLOCK 64

/* out = softmax(q·kᵀ/sqrt(H) + causal mask) · v. P[B, Nl, T, T] receives the probabilities
 * (saved for backward; entries above the diagonal are 0). Overwrites out and P. */
void kern_attn_fwd(float *restrict out, float *restrict P, const float *restrict q,
                   const float *restrict k, const float *restrict v, int64_t B, int64_t T,
                   int64_t Nl, int64_t Kl, int64_t H);
/* Backward. Overwrites dq[B·T, Nl·H], dk, dv[B·T, Kl·H]. scratch: T·T floats. */
void kern_attn_bwd(float *restrict dq, float *restrict dk, float *restrict dv,
                   float *restrict scratch, const float *restrict dout, const float *restrict P,
                   const float *restrict q, const float *restrict k, const float *restrict v,
                   int64_t B, int64_t T, int64_t Nl, int64_t Kl, int64_t H);
void kern_attn_fwd_ref(float *out, float *P, const float *q, const float *k, const float *v,
                       int64_t B, int64_t T, int64_t Nl, int64_t Kl, int64_t H);
void kern_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *P,
                       const float *q, const float *k, const float *v, int64_t B, int64_t T,
                       int64_t Nl, int64_t Kl, int64_t H);
#endif
