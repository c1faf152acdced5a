/* Causal GQA attention on a local head slab. Per (sequence b, query head h) every product is an
 * sgemm on strided views (rows of q/k/v are tokens, row strides Nl·H and Kl·H), done in row
 * blocks of ATTN_BLOCK so that only the causal trapezoid is computed: block [i0, i1) of scores
 * needs keys [0, i1), and the key-side gradients dK, dV for keys [j0, j1) need queries [j0, T).
 * The softmax and its backward touch only j ≤ i. */
#include "kernels/attention.h"

#include <math.h>
#include <string.h>

#include "kernels/attn_heads_inl.h"
#include "kernels/gemm.h"
#include "kernels/vecmath.h"

#define ATTN_BLOCK KERN_ATTN_BLOCK

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* s[0..n) = softmax(s[0..n)) in place, n ≥ 1. */
static void softmax_row(float *s, int64_t n) {
    float m, z;
    kern_softmax_row_inl(s, n, &m, &z);
}

void kern_attn_fwd(float *restrict out, float *restrict P, const float *restrict q,
                   const float *restrict k, const float *restrict v, int64_t B, int64_t T,
                   int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H;
    const float scale = 1.0f / sqrtf((float)H);
    for (kern_attn_heads a = kern_attn_heads_start(B, T, Nl, Kl, H); kern_attn_heads_next(&a);) {
        const float *qb = q + a.q, *kb = k + a.kv, *vb = v + a.kv;
        float *ob = out + a.q, *S = P + a.P;
        for (int64_t i0 = 0; i0 < T; i0 += ATTN_BLOCK) {
            int64_t i1 = min64(T, i0 + ATTN_BLOCK);
            kern_gemm(S + i0 * T, qb + i0 * ldq, kb, i1 - i0, i1, H, false, true, ldq, ldk, T,
                      scale, 0.0f);
            for (int64_t i = i0; i < i1; i++) {
                softmax_row(S + i * T, i + 1);
                memset(S + i * T + i + 1, 0, (size_t)(T - i - 1) * sizeof *S);
            }
            kern_gemm(ob + i0 * ldq, S + i0 * T, vb, i1 - i0, H, i1, false, false, T, ldk, ldq,
                      1.0f, 0.0f);
        }
    }
}

void kern_attn_bwd(float *restrict dq, float *restrict dk, float *restrict dv,
                   float *restrict scratch, const float *restrict dout, const float *restrict P,
                   const float *restrict q, const float *restrict k, const float *restrict v,
                   int64_t B, int64_t T, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H;
    const float scale = 1.0f / sqrtf((float)H);
    memset(dk, 0, (size_t)(B * T * ldk) * sizeof *dk);
    memset(dv, 0, (size_t)(B * T * ldk) * sizeof *dv);
    float *dS = scratch;
    for (kern_attn_heads a = kern_attn_heads_start(B, T, Nl, Kl, H); kern_attn_heads_next(&a);) {
        const float *qb = q + a.q, *dob = dout + a.q, *kb = k + a.kv, *vb = v + a.kv;
        const float *Pb = P + a.P;
        float *dqb = dq + a.q, *dkb = dk + a.kv, *dvb = dv + a.kv;
        for (int64_t i0 = 0; i0 < T; i0 += ATTN_BLOCK) {
            int64_t i1 = min64(T, i0 + ATTN_BLOCK);
            /* dP = dO·Vᵀ on the block's causal columns [0, i1) */
            kern_gemm(dS + i0 * T, dob + i0 * ldq, vb, i1 - i0, i1, H, false, true, ldq, ldk, T,
                      1.0f, 0.0f);
            for (int64_t i = i0; i < i1; i++) {
                const float *p = Pb + i * T;
                float *d = dS + i * T;
                float pd = kern_dot_inl(p, d, i + 1);
                for (int64_t j = 0; j <= i; j++) d[j] = p[j] * (d[j] - pd) * scale;
                for (int64_t j = i + 1; j < i1; j++) d[j] = 0.0f;
            }
            /* dQ = dS·K */
            kern_gemm(dqb + i0 * ldq, dS + i0 * T, kb, i1 - i0, H, i1, false, false, T, ldk, ldq,
                      1.0f, 0.0f);
        }
        for (int64_t j0 = 0; j0 < T; j0 += ATTN_BLOCK) {
            int64_t j1 = min64(T, j0 + ATTN_BLOCK);
            /* dV[j0:j1] += P[j0:T, j0:j1]ᵀ·dO[j0:T];  dK[j0:j1] += dS[j0:T, j0:j1]ᵀ·Q[j0:T] */
            kern_gemm(dvb + j0 * ldk, Pb + j0 * T + j0, dob + j0 * ldq, j1 - j0, H, T - j0, true,
                      false, T, ldq, ldk, 1.0f, 1.0f);
            kern_gemm(dkb + j0 * ldk, dS + j0 * T + j0, qb + j0 * ldq, j1 - j0, H, T - j0, true,
                      false, T, ldq, ldk, 1.0f, 1.0f);
        }
    }
}

void kern_attn_fwd_ref(float *out, float *P, const float *q, const float *k, const float *v,
                       int64_t B, int64_t T, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    const double scale = 1.0 / sqrt((double)H);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++) {
            const float *qb = q + b * T * ldq + h * H;
            const float *kb = k + b * T * ldk + (h / grp) * H,
                        *vb = v + b * T * ldk + (h / grp) * H;
            float *S = P + (b * Nl + h) * T * T;
            for (int64_t i = 0; i < T; i++) {
                double m = -INFINITY, z = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int64_t d = 0; d < H; d++) s += (double)qb[i * ldq + d] * kb[j * ldk + d];
                    if (s * scale > m) m = s * scale;
                }
                for (int64_t j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int64_t d = 0; d < H; d++) s += (double)qb[i * ldq + d] * kb[j * ldk + d];
                    z += exp(s * scale - m);
                }
                for (int64_t j = 0; j < T; j++) {
                    double s = 0.0;
                    for (int64_t d = 0; d < H && j <= i; d++)
                        s += (double)qb[i * ldq + d] * kb[j * ldk + d];
                    S[i * T + j] = j <= i ? (float)(exp(s * scale - m) / z) : 0.0f;
                }
                for (int64_t d = 0; d < H; d++) {
                    double o = 0.0;
                    for (int64_t j = 0; j <= i; j++) o += (double)S[i * T + j] * vb[j * ldk + d];
                    out[b * T * ldq + i * ldq + h * H + d] = (float)o;
                }
            }
        }
}

void kern_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *P,
                       const float *q, const float *k, const float *v, int64_t B, int64_t T,
                       int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    const double scale = 1.0 / sqrt((double)H);
    for (int64_t i = 0; i < B * T * ldk; i++) dk[i] = dv[i] = 0.0f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++) {
            const int64_t kvo = b * T * ldk + (h / grp) * H;
            const float *qb = q + b * T * ldq + h * H, *dob = dout + b * T * ldq + h * H;
            const float *Pb = P + (b * Nl + h) * T * T;
            for (int64_t i = 0; i < T; i++) {
                double pd = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    double dp = 0.0;
                    for (int64_t d = 0; d < H; d++)
                        dp += (double)dob[i * ldq + d] * v[kvo + j * ldk + d];
                    pd += dp * Pb[i * T + j];
                }
                for (int64_t d = 0; d < H; d++) dq[b * T * ldq + i * ldq + h * H + d] = 0.0f;
                for (int64_t j = 0; j <= i; j++) {
                    double dp = 0.0;
                    for (int64_t d = 0; d < H; d++)
                        dp += (double)dob[i * ldq + d] * v[kvo + j * ldk + d];
                    double p = Pb[i * T + j], ds = p * (dp - pd) * scale;
                    for (int64_t d = 0; d < H; d++) {
                        dq[b * T * ldq + i * ldq + h * H + d] += (float)(ds * k[kvo + j * ldk + d]);
                        dk[kvo + j * ldk + d] += (float)(ds * qb[i * ldq + d]);
                        dv[kvo + j * ldk + d] += (float)(p * dob[i * ldq + d]);
                    }
                }
            }
        }
}
