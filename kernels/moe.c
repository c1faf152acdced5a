/* moe: the mixture-of-experts kernels (see moe.h). The fast versions use float arithmetic with
 * the inlined exp and 8-lane sums of vecmath.h and take every product through gemm.h; the twins
 * loop naively in double. */
#include "kernels/moe.h"

#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/swiglu.h"
#include "kernels/traffic.h"
#include "kernels/vecmath.h"

/* ---------------------------------------------------------------- router */

/* The k largest of l[E] into idx[k], largest first, ties to the lower index (a NaN never wins,
 * so every slot names a valid expert). */
static void top_k(int32_t *idx, const float *l, int64_t E, int64_t k) {
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j; i++) taken |= idx[i] == (int32_t)e;
            if (!taken && (best < 0 || l[e] > l[best])) best = e;
        }
        idx[j] = (int32_t)best;
    }
}

void kern_router_fwd(float *restrict prob, float *restrict lse, int32_t *restrict idx,
                     float *restrict w, const float *restrict logits, int64_t M, int64_t E,
                     int64_t k) {
    for (int64_t r = 0; r < M; r++) {
        const float *l = logits + r * E;
        float *p = prob + r * E;
        const float mx = kern_max_inl(l, E);
        for (int64_t e = 0; e < E; e++) p[e] = kern_expf_inl(l[e] - mx);
        const float z = kern_sum_inl(p, E), inv = 1.0f / z;
        for (int64_t e = 0; e < E; e++) p[e] *= inv;
        lse[r] = mx + logf(z);
        int32_t *id = idx + r * k;
        top_k(id, l, E, k);
        float *wr = w + r * k, s = 0.0f;
        const float top = l[id[0]];
        for (int64_t j = 0; j < k; j++) s += (wr[j] = kern_expf_inl(l[id[j]] - top));
        for (int64_t j = 0; j < k; j++) wr[j] /= s;
    }
}

void kern_router_fwd_ref(float *prob, float *lse, int32_t *idx, float *w, const float *logits,
                         int64_t M, int64_t E, int64_t k) {
    for (int64_t r = 0; r < M; r++) {
        const float *l = logits + r * E;
        double mx = -INFINITY, z = 0;
        for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < E; e++) z += exp((double)l[e] - mx);
        for (int64_t e = 0; e < E; e++) prob[r * E + e] = (float)(exp((double)l[e] - mx) / z);
        lse[r] = (float)(mx + log(z));
        /* selection by rank: expert e is the j-th choice when exactly j experts beat it (a larger
         * logit, or an equal one at a lower index) */
        for (int64_t e = 0; e < E; e++) {
            int64_t beaten_by = 0;
            for (int64_t f = 0; f < E; f++) beaten_by += l[f] > l[e] || (l[f] == l[e] && f < e);
            if (beaten_by < k) idx[r * k + beaten_by] = (int32_t)e;
        }
        double s = 0;
        for (int64_t j = 0; j < k; j++) s += exp((double)l[idx[r * k + j]] - mx);
        for (int64_t j = 0; j < k; j++)
            w[r * k + j] = (float)(exp((double)l[idx[r * k + j]] - mx) / s);
    }
}

void kern_router_balance(float *restrict frac, float *restrict pmean, const int32_t *restrict idx,
                         const float *restrict prob, int64_t G, int64_t E, int64_t k) {
    for (int64_t e = 0; e < E; e++) frac[e] = 0.0f;
    for (int64_t i = 0; i < G * k; i++) frac[idx[i]] += 1.0f;
    for (int64_t e = 0; e < E; e++) {
        double s = 0;
        for (int64_t r = 0; r < G; r++) s += prob[r * E + e];
        frac[e] /= (float)(G * k);
        pmean[e] = (float)(s / (double)G);
    }
}

void kern_router_bwd(float *restrict dlogits, const float *restrict dw, const int32_t *restrict idx,
                     const float *restrict w, const float *restrict prob, const float *restrict lse,
                     const float *restrict ga, float zs, int64_t M, int64_t E, int64_t k,
                     int64_t G) {
    for (int64_t r = 0; r < M; r++) {
        const float *p = prob + r * E;
        float *dl = dlogits + r * E;
        const float *g = ga ? ga + (r / G) * E : NULL;
        const float t = g ? kern_dot_inl(p, g, E) : 0.0f, zr = zs * lse[r];
        for (int64_t e = 0; e < E; e++) dl[e] = p[e] * ((g ? g[e] - t : 0.0f) + zr);
        const float s = kern_dot_inl(w + r * k, dw + r * k, k);
        for (int64_t j = 0; j < k; j++) dl[idx[r * k + j]] += w[r * k + j] * (dw[r * k + j] - s);
    }
}

void kern_router_bwd_ref(float *dlogits, const float *dw, const int32_t *idx, const float *w,
                         const float *prob, const float *lse, const float *ga, float zs, int64_t M,
                         int64_t E, int64_t k, int64_t G) {
    for (int64_t r = 0; r < M; r++) {
        double s = 0, t = 0;
        for (int64_t j = 0; j < k; j++) s += (double)w[r * k + j] * dw[r * k + j];
        for (int64_t e = 0; e < E && ga; e++) t += (double)prob[r * E + e] * ga[(r / G) * E + e];
        for (int64_t e = 0; e < E; e++) {
            double d = (double)prob[r * E + e] * (double)zs * lse[r];
            if (ga) d += (double)prob[r * E + e] * ((double)ga[(r / G) * E + e] - t);
            for (int64_t j = 0; j < k; j++)
                if (idx[r * k + j] == e) d += (double)w[r * k + j] * ((double)dw[r * k + j] - s);
            dlogits[r * E + e] = (float)d;
        }
    }
}

/* ---------------------------------------------------------------- dispatch */

/* offs[E + 1] from kept[E]. */
static void prefix(int64_t *offs, const int64_t *kept, int64_t E) {
    offs[0] = 0;
    for (int64_t e = 0; e < E; e++) offs[e + 1] = offs[e] + kept[e];
}

void kern_moe_plan(int32_t *restrict pos, int32_t *restrict src, int64_t *restrict offs,
                   int64_t *restrict kept, int32_t *restrict cnt, const int32_t *restrict idx,
                   const int32_t *restrict grp, int64_t M, int64_t E, int64_t k, int64_t G,
                   int64_t cstride, int64_t cap) {
    for (int64_t e = 0; e < E; e++) kept[e] = 0;
    for (int64_t r = 0; r < M; r++) {
        int32_t *c = cnt + (grp ? grp[r] : r / G) * cstride;
        for (int64_t j = 0; j < k; j++) {
            const int32_t e = idx[r * k + j];
            const int keep = cap <= 0 || c[e] < cap;
            c[e] += keep;
            kept[e] += keep;
            pos[r * k + j] = keep ? 0 : -1;
        }
    }
    prefix(offs, kept, E);
    for (int64_t e = 0; e < E; e++) kept[e] = 0;
    for (int64_t i = 0; i < M * k; i++) {
        if (pos[i] < 0) continue;
        const int32_t e = idx[i];
        const int64_t p = offs[e] + kept[e]++;
        pos[i] = (int32_t)p;
        src[p] = (int32_t)(i / k);
    }
}

void kern_moe_plan_ref(int32_t *pos, int32_t *src, int64_t *offs, int64_t *kept, int32_t *cnt,
                       const int32_t *idx, const int32_t *grp, int64_t M, int64_t E, int64_t k,
                       int64_t G, int64_t cstride, int64_t cap) {
    for (int64_t i = 0; i < M * k; i++) { /* slot i: kept if its group's earlier ones leave room */
        const int64_t r = i / k, g = grp ? grp[r] : r / G;
        int64_t before = cnt[g * cstride + idx[i]];
        for (int64_t i2 = 0; i2 < i; i2++) {
            const int64_t g2 = grp ? grp[i2 / k] : (i2 / k) / G;
            before += g2 == g && idx[i2] == idx[i] && pos[i2] >= 0;
        }
        pos[i] = cap <= 0 || before < cap ? 0 : -1;
    }
    for (int64_t e = 0; e < E; e++) { /* expert e's rows: its kept slots in slot order */
        kept[e] = 0;
        for (int64_t i = 0; i < M * k; i++) kept[e] += idx[i] == e && pos[i] >= 0;
    }
    prefix(offs, kept, E);
    for (int64_t e = 0; e < E; e++)
        for (int64_t i = 0, n = 0; i < M * k; i++)
            if (idx[i] == e && pos[i] >= 0) {
                pos[i] = (int32_t)(offs[e] + n++);
                src[pos[i]] = (int32_t)(i / k);
            }
    for (int64_t i = 0; i < M * k; i++)
        if (pos[i] >= 0) cnt[(grp ? grp[i / k] : (i / k) / G) * cstride + idx[i]]++;
}

void kern_moe_gather(float *restrict xs, const float *restrict x, const int32_t *restrict src,
                     int64_t n, int64_t D) {
    for (int64_t i = 0; i < n; i++) memcpy(xs + i * D, x + src[i] * D, (size_t)D * sizeof(float));
    kern_traffic_count(KERN_PASS_COPY, n * D);
}

void kern_moe_combine(float *restrict out, const float *restrict ys, const int32_t *restrict pos,
                      const float *restrict w, int64_t M, int64_t k, int64_t D) {
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t p = pos[r * k + j];
            if (p < 0) continue;
            const float wj = w[r * k + j];
            const float *y = ys + p * D;
            float *o = out + r * D;
            for (int64_t d = 0; d < D; d++) o[d] += wj * y[d];
        }
    kern_traffic_count(KERN_PASS_ADD, M * k * D);
}

void kern_moe_combine_ref(float *out, const float *ys, const int32_t *pos, const float *w,
                          int64_t M, int64_t k, int64_t D) {
    for (int64_t r = 0; r < M; r++)
        for (int64_t d = 0; d < D; d++) {
            double o = out[r * D + d];
            for (int64_t j = 0; j < k; j++)
                if (pos[r * k + j] >= 0) o += (double)w[r * k + j] * ys[pos[r * k + j] * D + d];
            out[r * D + d] = (float)o;
        }
}

void kern_moe_combine_bwd(float *restrict dys, float *restrict dw, const float *restrict dout,
                          const float *restrict ys, const int32_t *restrict pos,
                          const float *restrict w, int64_t M, int64_t k, int64_t D) {
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t p = pos[r * k + j];
            if (p < 0) {
                dw[r * k + j] = 0.0f;
                continue;
            }
            const float *g = dout + r * D;
            dw[r * k + j] = kern_dot_inl(g, ys + p * D, D);
            const float wj = w[r * k + j];
            float *dy = dys + p * D;
            for (int64_t d = 0; d < D; d++) dy[d] = wj * g[d];
        }
    kern_traffic_count(KERN_PASS_COPY, M * k * D);
}

void kern_moe_combine_bwd_ref(float *dys, float *dw, const float *dout, const float *ys,
                              const int32_t *pos, const float *w, int64_t M, int64_t k, int64_t D) {
    for (int64_t i = 0; i < M * k; i++) {
        const int64_t r = i / k, p = pos[i];
        double s = 0;
        for (int64_t d = 0; d < D && p >= 0; d++) {
            s += (double)dout[r * D + d] * ys[p * D + d];
            dys[p * D + d] = (float)((double)w[i] * dout[r * D + d]);
        }
        dw[i] = (float)s;
    }
}

void kern_moe_scatter_add(float *restrict dx, const float *restrict dxs,
                          const int32_t *restrict pos, int64_t M, int64_t k, int64_t D) {
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t p = pos[r * k + j];
            if (p < 0) continue;
            const float *s = dxs + p * D;
            float *o = dx + r * D;
            for (int64_t d = 0; d < D; d++) o[d] += s[d];
        }
    kern_traffic_count(KERN_PASS_ADD, M * k * D);
}

/* ---------------------------------------------------------------- the grouped SwiGLU MLP */

void kern_moe_mlp_fwd(float *ys, float *a, float *b, float *h, const float *xs, const float *wg,
                      const float *wu, const float *wd, const int64_t *offs, int64_t E, int64_t D,
                      int64_t F) {
    kern_traffic_rows(offs[E]);
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        if (n == 0) continue;
        kern_matmul(a + o * F, xs + o * D, wg + e * D * F, n, D, F);
        kern_matmul(b + o * F, xs + o * D, wu + e * D * F, n, D, F);
        kern_swiglu_fwd(h + o * F, a + o * F, b + o * F, n * F);
        kern_matmul(ys + o * D, h + o * F, wd + e * F * D, n, F, D);
    }
}

/* Expert e's three dW products (+=) on rows [o, o + n) (the same for the whole backward and the
 * weight part alone). */
static void expert_dw(float *dwg, float *dwu, float *dwd, const float *dys, const float *xs,
                      const float *da, const float *db, const float *h, int64_t e, int64_t o,
                      int64_t n, int64_t D, int64_t F) {
    kern_matmul_dw(dwd + e * F * D, h + o * F, dys + o * D, n, F, D);
    kern_matmul_dw(dwg + e * D * F, xs + o * D, da + o * F, n, D, F);
    kern_matmul_dw(dwu + e * D * F, xs + o * D, db + o * F, n, D, F);
}

void kern_moe_mlp_bwd(float *dxs, float *dwg, float *dwu, float *dwd, float *da, float *db,
                      const float *dys, const float *xs, const float *a, const float *b,
                      const float *h, const float *wg, const float *wu, const float *wd,
                      const int64_t *offs, int64_t E, int64_t D, int64_t F) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        if (n == 0) continue;
        float *dae = da + o * F, *dbe = db + o * F;
        kern_matmul_dx(dae, dys + o * D, wd + e * F * D, n, F, D, false); /* dh, into da */
        kern_swiglu_bwd_inplace(dae, dbe, a + o * F, b + o * F, n * F);
        kern_matmul_dx(dxs + o * D, dae, wg + e * D * F, n, D, F, false);
        kern_matmul_dx(dxs + o * D, dbe, wu + e * D * F, n, D, F, true);
        if (dwg) expert_dw(dwg, dwu, dwd, dys, xs, da, db, h, e, o, n, D, F);
    }
}

void kern_moe_mlp_dw(float *dwg, float *dwu, float *dwd, const float *dys, const float *xs,
                     const float *da, const float *db, const float *h, const int64_t *offs,
                     int64_t E, int64_t D, int64_t F) {
    for (int64_t e = 0; e < E; e++)
        if (offs[e + 1] > offs[e])
            expert_dw(dwg, dwu, dwd, dys, xs, da, db, h, e, offs[e], offs[e + 1] - offs[e], D, F);
}

/* y[n, N] = x[n, K]·w[K, N] in double, rounded once. */
static void mm_ref(float *y, const float *x, const float *w, int64_t n, int64_t K, int64_t N) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < N; c++) {
            double s = 0;
            for (int64_t q = 0; q < K; q++) s += (double)x[i * K + q] * w[q * N + c];
            y[i * N + c] = (float)s;
        }
}

void kern_moe_mlp_fwd_ref(float *ys, float *a, float *b, float *h, const float *xs, const float *wg,
                          const float *wu, const float *wd, const int64_t *offs, int64_t E,
                          int64_t D, int64_t F) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        mm_ref(a + o * F, xs + o * D, wg + e * D * F, n, D, F);
        mm_ref(b + o * F, xs + o * D, wu + e * D * F, n, D, F);
        kern_swiglu_fwd_ref(h + o * F, a + o * F, b + o * F, n * F);
        mm_ref(ys + o * D, h + o * F, wd + e * F * D, n, F, D);
    }
}

void kern_moe_mlp_bwd_ref(float *dxs, float *dwg, float *dwu, float *dwd, float *da, float *db,
                          const float *dys, const float *xs, const float *a, const float *b,
                          const float *h, const float *wg, const float *wu, const float *wd,
                          const int64_t *offs, int64_t E, int64_t D, int64_t F) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - offs[e];
        const float *we = wd + e * F * D;
        for (int64_t i = 0; i < n; i++) /* dh = dys·wdᵀ, into da */
            for (int64_t f = 0; f < F; f++) {
                double s = 0;
                for (int64_t d = 0; d < D; d++) s += (double)dys[(o + i) * D + d] * we[f * D + d];
                da[(o + i) * F + f] = (float)s;
            }
        for (int64_t f = 0; f < F; f++)
            for (int64_t d = 0; d < D; d++) {
                double s = dwd[e * F * D + f * D + d];
                for (int64_t i = 0; i < n; i++)
                    s += (double)h[(o + i) * F + f] * dys[(o + i) * D + d];
                dwd[e * F * D + f * D + d] = (float)s;
            }
        kern_swiglu_bwd_ref(da + o * F, db + o * F, da + o * F, a + o * F, b + o * F, n * F);
        for (int64_t i = 0; i < n; i++)
            for (int64_t d = 0; d < D; d++) {
                double s = 0;
                for (int64_t f = 0; f < F; f++)
                    s += (double)da[(o + i) * F + f] * wg[e * D * F + d * F + f] +
                         (double)db[(o + i) * F + f] * wu[e * D * F + d * F + f];
                dxs[(o + i) * D + d] = (float)s;
            }
        for (int64_t d = 0; d < D; d++)
            for (int64_t f = 0; f < F; f++) {
                double sg = dwg[e * D * F + d * F + f], su = dwu[e * D * F + d * F + f];
                for (int64_t i = 0; i < n; i++) {
                    sg += (double)xs[(o + i) * D + d] * da[(o + i) * F + f];
                    su += (double)xs[(o + i) * D + d] * db[(o + i) * F + f];
                }
                dwg[e * D * F + d * F + f] = (float)sg;
                dwu[e * D * F + d * F + f] = (float)su;
            }
    }
}
