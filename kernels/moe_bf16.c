/* moe_bf16: the grouped SwiGLU MLP on bf16 inputs (see moe_bf16.h): each product on the bf16
 * context's path, and the naive twins, which sum the bf16 inputs' exact products in double. */
#include "kernels/moe_bf16.h"

#include "kernels/swiglu.h"
#include "kernels/traffic.h"

void kern_moe_mlp_fwd_bf16(kern_bf16_ctx *ctx, float *ys, float *a, float *b, float *h,
                           kern_bf16 *hb, const kern_bf16 *xs, const kern_bf16 *wg,
                           const kern_bf16 *wu, const kern_bf16 *wd, const int64_t *offs, int64_t E,
                           int64_t D, int64_t F) {
    kern_traffic_rows(offs[E]);
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        if (n == 0) continue;
        kern_matmul_bf16(ctx, a + o * F, xs + o * D, wg + e * D * F, n, D, F);
        kern_matmul_bf16(ctx, b + o * F, xs + o * D, wu + e * D * F, n, D, F);
        kern_swiglu_fwd(h + o * F, a + o * F, b + o * F, n * F);
        kern_bf16_pack(hb + o * F, h + o * F, n * F);
        kern_matmul_bf16(ctx, ys + o * D, hb + o * F, wd + e * F * D, n, F, D);
    }
}

/* Expert e's three dW products on rows [o, o + n) (the same for the whole backward and the
 * weight part alone). */
static void expert_dw(kern_bf16_ctx *ctx, float *dwg, float *dwu, float *dwd, const kern_bf16 *dys,
                      const kern_bf16 *xs, const kern_bf16 *dab, const kern_bf16 *dbb,
                      const kern_bf16 *hb, int64_t e, int64_t o, int64_t n, int64_t D, int64_t F) {
    kern_matmul_dw_bf16(ctx, dwd + e * F * D, hb + o * F, dys + o * D, n, F, D);
    kern_matmul_dw_bf16(ctx, dwg + e * D * F, xs + o * D, dab + o * F, n, D, F);
    kern_matmul_dw_bf16(ctx, dwu + e * D * F, xs + o * D, dbb + o * F, n, D, F);
}

void kern_moe_mlp_bwd_bf16(kern_bf16_ctx *ctx, float *dxs, float *dwg, float *dwu, float *dwd,
                           float *da, float *db, kern_bf16 *dab, kern_bf16 *dbb,
                           const kern_bf16 *dys, const kern_bf16 *xs, const float *a,
                           const float *b, const kern_bf16 *hb, const kern_bf16 *wg,
                           const kern_bf16 *wu, const kern_bf16 *wd, const int64_t *offs, int64_t E,
                           int64_t D, int64_t F) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        if (n == 0) continue;
        float *dae = da + o * F, *dbe = db + o * F;
        kern_bf16 *dabe = dab + o * F, *dbbe = dbb + o * F;
        kern_matmul_dx_bf16(ctx, dae, dys + o * D, wd + e * F * D, n, F, D, false); /* dh */
        kern_swiglu_bwd_inplace(dae, dbe, a + o * F, b + o * F, n * F);
        kern_bf16_pack(dabe, dae, n * F);
        kern_bf16_pack(dbbe, dbe, n * F);
        kern_matmul_dx_bf16(ctx, dxs + o * D, dabe, wg + e * D * F, n, D, F, false);
        kern_matmul_dx_bf16(ctx, dxs + o * D, dbbe, wu + e * D * F, n, D, F, true);
        if (dwg) expert_dw(ctx, dwg, dwu, dwd, dys, xs, dab, dbb, hb, e, o, n, D, F);
    }
}

void kern_moe_mlp_dw_bf16(kern_bf16_ctx *ctx, float *dwg, float *dwu, float *dwd,
                          const kern_bf16 *dys, const kern_bf16 *xs, const kern_bf16 *dab,
                          const kern_bf16 *dbb, const kern_bf16 *hb, const int64_t *offs, int64_t E,
                          int64_t D, int64_t F) {
    for (int64_t e = 0; e < E; e++)
        if (offs[e + 1] > offs[e])
            expert_dw(ctx, dwg, dwu, dwd, dys, xs, dab, dbb, hb, e, offs[e], offs[e + 1] - offs[e],
                      D, F);
}

/* y[i, c] (+)= Σ_q op(x)[i, q]·op(w)[q, c] over the bf16 values, in double, rounded once:
 * x [n, K] (tx: [K, n]), w [K, N] (tw: [N, K]); acc adds y's value first. */
static void mm_ref(float *y, const kern_bf16 *x, const kern_bf16 *w, int64_t n, int64_t K,
                   int64_t N, int tx, int tw, int acc) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < N; c++) {
            double s = acc ? (double)y[i * N + c] : 0.0;
            for (int64_t q = 0; q < K; q++)
                s += (double)kern_bf16_val(tx ? x[q * n + i] : x[i * K + q]) *
                     (double)kern_bf16_val(tw ? w[c * K + q] : w[q * N + c]);
            y[i * N + c] = (float)s;
        }
}

static void round_ref(kern_bf16 *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = kern_bf16_of(in[i]);
}

void kern_moe_mlp_fwd_bf16_ref(float *ys, float *a, float *b, float *h, kern_bf16 *hb,
                               const kern_bf16 *xs, const kern_bf16 *wg, const kern_bf16 *wu,
                               const kern_bf16 *wd, const int64_t *offs, int64_t E, int64_t D,
                               int64_t F) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        mm_ref(a + o * F, xs + o * D, wg + e * D * F, n, D, F, 0, 0, 0);
        mm_ref(b + o * F, xs + o * D, wu + e * D * F, n, D, F, 0, 0, 0);
        kern_swiglu_fwd_ref(h + o * F, a + o * F, b + o * F, n * F);
        round_ref(hb + o * F, h + o * F, n * F);
        mm_ref(ys + o * D, hb + o * F, wd + e * F * D, n, F, D, 0, 0, 0);
    }
}

/* expert_dw's twin: expert e's three dW products (+=) on rows [o, o + n), each in double. */
static void expert_dw_ref(float *dwg, float *dwu, float *dwd, const kern_bf16 *dys,
                          const kern_bf16 *xs, const kern_bf16 *dab, const kern_bf16 *dbb,
                          const kern_bf16 *hb, int64_t e, int64_t o, int64_t n, int64_t D,
                          int64_t F) {
    mm_ref(dwd + e * F * D, hb + o * F, dys + o * D, F, n, D, 1, 0, 1);
    mm_ref(dwg + e * D * F, xs + o * D, dab + o * F, D, n, F, 1, 0, 1);
    mm_ref(dwu + e * D * F, xs + o * D, dbb + o * F, D, n, F, 1, 0, 1);
}

void kern_moe_mlp_bwd_bf16_ref(float *dxs, float *dwg, float *dwu, float *dwd, float *da, float *db,
                               kern_bf16 *dab, kern_bf16 *dbb, const kern_bf16 *dys,
                               const kern_bf16 *xs, const float *a, const float *b,
                               const kern_bf16 *hb, const kern_bf16 *wg, const kern_bf16 *wu,
                               const kern_bf16 *wd, const int64_t *offs, int64_t E, int64_t D,
                               int64_t F) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        mm_ref(da + o * F, dys + o * D, wd + e * F * D, n, D, F, 0, 1, 0); /* dh, into da */
        kern_swiglu_bwd_ref(da + o * F, db + o * F, da + o * F, a + o * F, b + o * F, n * F);
        round_ref(dab + o * F, da + o * F, n * F);
        round_ref(dbb + o * F, db + o * F, n * F);
        for (int64_t i = 0; i < n; i++) /* dxs = dab·wgᵀ + dbb·wuᵀ, one double sum */
            for (int64_t d = 0; d < D; d++) {
                double s = 0;
                for (int64_t f = 0; f < F; f++)
                    s += (double)kern_bf16_val(dab[(o + i) * F + f]) *
                             kern_bf16_val(wg[e * D * F + d * F + f]) +
                         (double)kern_bf16_val(dbb[(o + i) * F + f]) *
                             kern_bf16_val(wu[e * D * F + d * F + f]);
                dxs[(o + i) * D + d] = (float)s;
            }
        expert_dw_ref(dwg, dwu, dwd, dys, xs, dab, dbb, hb, e, o, n, D, F);
    }
}

void kern_moe_mlp_dw_bf16_ref(float *dwg, float *dwu, float *dwd, const kern_bf16 *dys,
                              const kern_bf16 *xs, const kern_bf16 *dab, const kern_bf16 *dbb,
                              const kern_bf16 *hb, const int64_t *offs, int64_t E, int64_t D,
                              int64_t F) {
    for (int64_t e = 0; e < E; e++)
        expert_dw_ref(dwg, dwu, dwd, dys, xs, dab, dbb, hb, e, offs[e], offs[e + 1] - offs[e], D,
                      F);
}
