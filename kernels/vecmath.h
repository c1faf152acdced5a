/* Kernel-private (not part of the kernels/ API): the scalar building blocks the elementwise
 * kernels inline into their loops so GCC can auto-vectorise them with plain SSE2 (-O3, no
 * -march, no -ffast-math). A function call in a loop body blocks vectorisation, which is why
 * these are static inline here rather than in a .c file; kern_expf (swiglu.h) is the exported
 * form of kern_expf_inl. Depends on nothing. */
#ifndef MT_KERNELS_VECMATH_H
#define MT_KERNELS_VECMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Float bits as an int32 that orders like the float (negative floats have their 31 low bits
 * flipped); the map is its own inverse. Integer compares never trap, so selects and max
 * reductions on these keys if-convert and vectorise under GCC's default -ftrapping-math, where
 * float ternaries often do not. */
static inline int32_t kern_f2key_inl(float x) {
    int32_t b;
    memcpy(&b, &x, sizeof b);
    return b ^ (int32_t)(-(int32_t)((uint32_t)b >> 31) & 0x7fffffff);
}

static inline float kern_key2f_inl(int32_t k) {
    int32_t b = k ^ (int32_t)(-(int32_t)((uint32_t)k >> 31) & 0x7fffffff);
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* exp(x) in fp32, branch-free (Cephes expf): x = k·ln2 + r with k = round(x·log2 e) and
 * |r| ≤ ln2/2, exp(r) by a degree-6 polynomial, 2^k written into the exponent bits. x is first
 * clamped to [-88, 88] (on order-preserving integer keys): at x ≤ -87.7 k reaches -127 and the
 * exponent field 0 makes the result exactly 0; above 88 the result saturates at exp(88). NaN
 * propagates. Max relative error ~2 ulp where the result is a normal float. */
static inline float kern_expf_inl(float x) {
    const int32_t klo = kern_f2key_inl(-88.0f), khi = kern_f2key_inl(88.0f);
    int32_t key = kern_f2key_inl(x), bits;
    key = key > klo ? key : klo;
    key = key < khi ? key : khi;
    float xc = kern_key2f_inl(key);
    /* round to nearest through the 1.5·2^23 magic constant (exact since |xc·log2 e| < 2^22) */
    float kf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    bits = ((int32_t)kf + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    int32_t xb, yb;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&yb, &y, sizeof yb);
    /* NaN in, NaN out; a mask, not a ternary, which GCC would turn into a branch around the
     * polynomial and thereby stop vectorising */
    int32_t nan = -(int32_t)((xb & 0x7fffffff) > 0x7f800000);
    yb = (yb & ~nan) | (xb & nan);
    memcpy(&y, &yb, sizeof y);
    return y;
}

/* σ(x) = 1/(1+exp(−x)), vectorisable. */
static inline float kern_sigmoid_inl(float x) {
    return 1.0f / (1.0f + kern_expf_inl(-x));
}

/* Σ x[i] and Σ x[i]·y[i] with 8 independent accumulators: fp addition is not associative, so
 * GCC (without -ffast-math) will not vectorise a single-accumulator reduction; 8 lanes it will. */
static inline float kern_sum_inl(const float *x, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[i + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += x[i];
    return s;
}

static inline float kern_dot_inl(const float *x, const float *y, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[i + l] * y[i + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

/* max of x[0..n) (−inf when n = 0), as an integer max reduction over order-preserving keys. */
static inline float kern_max_inl(const float *x, int64_t n) {
    int32_t m = kern_f2key_inl(-INFINITY);
    for (int64_t i = 0; i < n; i++) {
        int32_t k = kern_f2key_inl(x[i]);
        m = k > m ? k : m;
    }
    return kern_key2f_inl(m);
}
/* Causal softmax of one row, in place: s[0..n) = exp(s − m)/z with m = max s[0..n) and z the sum
 * of the exps (8 accumulators, then s[j] · (1/z)), n ≥ 1; returns m and z. The one softmax of the
 * training attention: kern_attn_fwd and the blockwise kernels (attn_part.c) share its arithmetic,
 * which is what makes one block of the latter bit-equal to the former. */
static inline void kern_softmax_row_inl(float *s, int64_t n, float *m_out, float *z_out) {
    const float m = kern_max_inl(s, n);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) {
            float e = kern_expf_inl(s[j + l] - m);
            s[j + l] = e;
            acc[l] += e;
        }
    float z = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; j++) {
        s[j] = kern_expf_inl(s[j] - m);
        z += s[j];
    }
    const float inv = 1.0f / z;
    for (j = 0; j < n; j++) s[j] *= inv;
    *m_out = m;
    *z_out = z;
}
#endif
