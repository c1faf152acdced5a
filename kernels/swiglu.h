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
void kern_swiglu_fwd_ref(float *h, const float *a, const float *b, int64_t n);
void kern_swiglu_bwd_ref(float *da, float *db, const float *dh, const float *a, const float *b,
                         int64_t n);
/* Fast vectorisable expf (max relative error ~2 ulp over [-87, 88]; saturates outside). */
float kern_expf(float x);
#endif
