/* SwiGLU gate: h = silu(a) · b elementwise, silu(x) = x·sigmoid(x). */
#ifndef MT_KERNELS_SWIGLU_H
#define MT_KERNELS_SWIGLU_H
#include <stdint.h>

/* h[n] = silu(a[n]) · b[n]. Overwrites h. */
void kern_swiglu_fwd(float *restrict h, const float *restrict a, const float *restrict b,
                     int64_t n);
/* da[n], db[n] from dh[n]. Overwrites both. */
void kern_swiglu_bwd(float *restrict da, float *restrict db, const float *restrict dh,
                     const float *restrict a, const float *restrict b, int64_t n);
/* The same in place: dh_da[n] holds dh on entry and da on return; db[n] overwritten. */
void kern_swiglu_bwd_inplace(float *restrict dh_da, float *restrict db, const float *restrict a,
                             const float *restrict b, int64_t n);
void kern_swiglu_fwd_ref(float *h, const float *a, const float *b, int64_t n);
void kern_swiglu_bwd_ref(float *da, float *db, const float *dh, const float *a, const float *b,
                         int64_t n);
/* Fast branch-free expf (Cephes polynomial; the same code is inlined into the vectorised loops
 * of swiglu, attention and xent). Max relative error 8.2e-8 (0.7 FLT_EPSILON) measured on
 * [-87, 88]; returns exactly 0 below about -87.7 (and for -inf), exp(88) for x ≥ 88 (and +inf);
 * NaN propagates. */
float kern_expf(float x);
#endif
