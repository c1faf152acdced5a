/* bf16 attention (see attn_bf16.h). The structure of attention.c and attn_cache.c: per (sequence,
 * query head), row blocks of ATTN_BLOCK queries score against the keys they may see (block
 * [i0, i1) needs keys [0, i1)), so that only the causal trapezoid is computed; the key-side
 * gradients dK, dV for keys [j0, j1) need queries [j0, T). The products are bf16 matmuls on the
 * own kernels (bf16_gemm_own); the softmax and its backward are fp32, touching only j ≤ i. */
#include "kernels/attn_bf16.h"

#include <math.h>
#include <string.h>

#include "kernels/attn_heads_inl.h"
#include "kernels/bf16_inl.h"
#include "kernels/gemm_bf16_impl.h"
#include "kernels/vecmath.h"

#define ATTN_BLOCK 64

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

int64_t kern_attn_bf16_scratch(int64_t T) {
    return ATTN_BLOCK * T + (T * T + 1) / 2;
}

/* p[0..n) = bf16(softmax(scale·s[0..n))), p[n..len) = 0, n ≥ 1; s is overwritten. The fp32
 * softmax is the training attention's (kern_softmax_row_inl): the same bits for the same n and s,
 * whoever calls (the training forward, the cached kernel). */
static void softmax_bf16(kern_bf16 *restrict p, float *restrict s, int64_t n, int64_t len,
                         float scale) {
    float m, z;
    for (int64_t j = 0; j < n; j++) s[j] *= scale;
    kern_softmax_row_inl(s, n, &m, &z);
    int64_t j = 0;
    for (; j < n; j++) p[j] = kern_bf16_of_inl(s[j]);
    for (; j < len; j++) p[j] = 0;
}

void kern_attn_fwd_bf16(kern_bf16_ctx *ctx, float *restrict out, kern_bf16 *restrict P,
                        float *restrict scratch, const kern_bf16 *q, const kern_bf16 *k,
                        const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                        int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H;
    const float scale = 1.0f / sqrtf((float)H);
    for (kern_attn_heads a = kern_attn_heads_start(B, T, Nl, Kl, H); kern_attn_heads_next(&a);) {
        const kern_bf16 *qb = q + a.q, *kb = k + a.kv, *vb = v + a.kv;
        kern_bf16 *Pb = P + a.P;
        float *ob = out + a.q;
        for (int64_t i0 = 0; i0 < T; i0 += ATTN_BLOCK) {
            const int64_t i1 = min64(T, i0 + ATTN_BLOCK);
            bf16_gemm_own(ctx, scratch, qb + i0 * ldq, kb, i1 - i0, i1, H, false, true, ldq, ldk, T,
                          false);
            for (int64_t i = i0; i < i1; i++)
                softmax_bf16(Pb + i * T, scratch + (i - i0) * T, i + 1, T, scale);
            bf16_gemm_own(ctx, ob + i0 * ldq, Pb + i0 * T, vb, i1 - i0, H, i1, false, false, T, ldk,
                          ldq, false);
        }
    }
}

/* Row i of dS (bf16, entries [0, n) and zeros up to len) from row i of P (bf16) and of dP (fp32,
 * overwritten): dS_j = P_j·(dP_j − Σ_l P_l·dP_l)·scale, the sum in 8 partial sums. */
static void softmax_bwd_bf16(kern_bf16 *restrict ds, const kern_bf16 *restrict p,
                             float *restrict dp, int64_t n, int64_t len, float scale) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) acc[l] += kern_bf16_val_inl(p[j + l]) * dp[j + l];
    float pd = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; j++) pd += kern_bf16_val_inl(p[j]) * dp[j];
    for (j = 0; j < n; j++)
        ds[j] = kern_bf16_of_inl(kern_bf16_val_inl(p[j]) * (dp[j] - pd) * scale);
    for (; j < len; j++) ds[j] = 0;
}

void kern_attn_bwd_bf16(kern_bf16_ctx *ctx, float *restrict dq, float *restrict dk,
                        float *restrict dv, float *restrict scratch, const kern_bf16 *dout,
                        const kern_bf16 *P, const kern_bf16 *q, const kern_bf16 *k,
                        const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                        int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H;
    const float scale = 1.0f / sqrtf((float)H);
    memset(dk, 0, (size_t)(B * T * ldk) * sizeof *dk);
    memset(dv, 0, (size_t)(B * T * ldk) * sizeof *dv);
    float *dP = scratch;                                     /* [ATTN_BLOCK, T] */
    kern_bf16 *dS = (kern_bf16 *)(scratch + ATTN_BLOCK * T); /* [T, T] */
    for (kern_attn_heads a = kern_attn_heads_start(B, T, Nl, Kl, H); kern_attn_heads_next(&a);) {
        const kern_bf16 *qb = q + a.q, *dob = dout + a.q, *Pb = P + a.P;
        const kern_bf16 *kb = k + a.kv, *vb = v + a.kv;
        float *dqb = dq + a.q, *dkb = dk + a.kv, *dvb = dv + a.kv;
        for (int64_t i0 = 0; i0 < T; i0 += ATTN_BLOCK) {
            const int64_t i1 = min64(T, i0 + ATTN_BLOCK);
            /* dP = dO·Vᵀ on the block's causal columns [0, i1) */
            bf16_gemm_own(ctx, dP, dob + i0 * ldq, vb, i1 - i0, i1, H, false, true, ldq, ldk, T,
                          false);
            for (int64_t i = i0; i < i1; i++)
                softmax_bwd_bf16(dS + i * T, Pb + i * T, dP + (i - i0) * T, i + 1, i1, scale);
            /* dQ = dS·K */
            bf16_gemm_own(ctx, dqb + i0 * ldq, dS + i0 * T, kb, i1 - i0, H, i1, false, false, T,
                          ldk, ldq, false);
        }
        for (int64_t j0 = 0; j0 < T; j0 += ATTN_BLOCK) {
            const int64_t j1 = min64(T, j0 + ATTN_BLOCK);
            /* dV[j0:j1] += P[j0:T, j0:j1]ᵀ·dO[j0:T];  dK[j0:j1] += dS[j0:T, j0:j1]ᵀ·Q[j0:T] */
            bf16_gemm_own(ctx, dvb + j0 * ldk, Pb + j0 * T + j0, dob + j0 * ldq, j1 - j0, H, T - j0,
                          true, false, T, ldq, ldk, true);
            bf16_gemm_own(ctx, dkb + j0 * ldk, dS + j0 * T + j0, qb + j0 * ldq, j1 - j0, H, T - j0,
                          true, false, T, ldq, ldk, true);
        }
    }
}

int64_t kern_attn_cached_bf16_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t rows = n <= 1 ? Nl / Kl : min64(n, ATTN_BLOCK);
    /* scores (fp32) and probabilities (bf16) of the rows over p0 + n keys; q in bf16 */
    return rows * (p0 + n) + (rows * (p0 + n) + 1) / 2 + (n * Nl * H + 1) / 2;
}

void kern_attn_cached_bf16(kern_bf16_ctx *ctx, float *restrict out, float *restrict scratch,
                           const float *restrict q, const kern_bf16 *kc, const kern_bf16 *vc,
                           int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk) {
    const int64_t ldq = Nl * H, G = Nl / Kl, ld = p0 + n;
    const int64_t rows = n <= 1 ? G : min64(n, ATTN_BLOCK);
    const float scale = 1.0f / sqrtf((float)H);
    float *S = scratch;
    kern_bf16 *Pr = (kern_bf16 *)(scratch + rows * ld);
    kern_bf16 *qh = Pr + rows * ld + (rows * ld) % 2; /* 4-byte aligned */
    kern_bf16_pack(qh, q, n * ldq);
    if (n == 1) { /* the G query heads of kv head j: one [G, H] matrix, one pass over the cache */
        for (int64_t j = 0; j < Kl; j++) {
            bf16_gemm_own(ctx, S, qh + j * G * H, kc + j * H, G, ld, H, false, true, H, ldk, ld,
                          false);
            for (int64_t g = 0; g < G; g++) softmax_bf16(Pr + g * ld, S + g * ld, ld, ld, scale);
            bf16_gemm_own(ctx, out + j * G * H, Pr, vc + j * H, G, H, ld, false, false, ld, ldk, H,
                          false);
        }
        return;
    }
    for (int64_t h = 0; h < Nl; h++) {
        const kern_bf16 *kh = kc + (h / G) * H, *vh = vc + (h / G) * H;
        for (int64_t i0 = 0; i0 < n; i0 += ATTN_BLOCK) {
            const int64_t i1 = min64(n, i0 + ATTN_BLOCK), keys = p0 + i1;
            bf16_gemm_own(ctx, S, qh + i0 * ldq + h * H, kh, i1 - i0, keys, H, false, true, ldq,
                          ldk, ld, false);
            for (int64_t i = i0; i < i1; i++)
                softmax_bf16(Pr + (i - i0) * ld, S + (i - i0) * ld, p0 + i + 1, keys, scale);
            bf16_gemm_own(ctx, out + i0 * ldq + h * H, Pr, vh, i1 - i0, H, keys, false, false, ld,
                          ldk, ldq, false);
        }
    }
}
