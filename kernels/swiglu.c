/* SwiGLU gate h = silu(a)·b, and kern_expf. σ uses the inlined polynomial exp (vecmath.h):
 * libm's expf is a call per element and keeps the loop scalar. */
#include "kernels/swiglu.h"

#include <math.h>

#include "kernels/vecmath.h"

float kern_expf(float x) {
    return kern_expf_inl(x);
}

void kern_swiglu_fwd(float *restrict h, const float *restrict a, const float *restrict b,
                     int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = a[i] * kern_sigmoid_inl(a[i]) * b[i];
}

/* silu'(a) = σ(a)·(1 + a·(1 − σ(a))). */
void kern_swiglu_bwd(float *restrict da, float *restrict db, const float *restrict dh,
                     const float *restrict a, const float *restrict b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float s = kern_sigmoid_inl(a[i]);
        db[i] = dh[i] * a[i] * s;
        da[i] = dh[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
    }
}

void kern_swiglu_bwd_inplace(float *restrict dh_da, float *restrict db, const float *restrict a,
                             const float *restrict b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float s = kern_sigmoid_inl(a[i]), dh = dh_da[i];
        db[i] = dh * a[i] * s;
        dh_da[i] = dh * b[i] * s * (1.0f + a[i] * (1.0f - s));
    }
}

void kern_swiglu_fwd_ref(float *h, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double s = 1.0 / (1.0 + exp(-(double)a[i]));
        h[i] = (float)((double)a[i] * s * b[i]);
    }
}

void kern_swiglu_bwd_ref(float *da, float *db, const float *dh, const float *a, const float *b,
                         int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double s = 1.0 / (1.0 + exp(-(double)a[i]));
        db[i] = (float)((double)dh[i] * a[i] * s);
        da[i] = (float)((double)dh[i] * b[i] * s * (1.0 + a[i] * (1.0 - s)));
    }
}
