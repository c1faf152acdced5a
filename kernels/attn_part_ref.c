/* attn_part_ref: the naive twins of the blockwise attention kernels (attn_part.h), every sum in
 * double, row by row and key by key, straight from the formulas in the header. */
#include "kernels/attn_part.h"

#include <math.h>

/* Query row qi (H values) against key row kj, scaled, in double. */
static double score(const float *qi, const float *kj, int64_t H) {
    double s = 0.0;
    for (int64_t c = 0; c < H; c++) s += (double)qi[c] * kj[c];
    return s / sqrt((double)H);
}

/* One query row and head against keys kc, vc[S, ldk] (its kv head's columns) at kpos: o[H], m, l.
 */
static void row_ref(float *o, float *m, float *l, const float *qi, int32_t p, const float *kc,
                    const float *vc, const int32_t *kpos, int64_t S, int64_t H, int64_t ldk) {
    double mx = -INFINITY, z = 0.0;
    for (int64_t j = 0; j < S && kpos[j] <= p; j++) mx = fmax(mx, score(qi, kc + j * ldk, H));
    for (int64_t j = 0; j < S && kpos[j] <= p; j++) z += exp(score(qi, kc + j * ldk, H) - mx);
    for (int64_t c = 0; c < H; c++) {
        double acc = 0.0;
        for (int64_t j = 0; j < S && kpos[j] <= p; j++)
            acc += exp(score(qi, kc + j * ldk, H) - mx) * vc[j * ldk + c];
        o[c] = z > 0 ? (float)(acc / z) : 0.0f;
    }
    *m = (float)mx;
    *l = (float)z;
}

void kern_attn_part_fwd_ref(float *o, float *m, float *l, const float *q, const float *k,
                            const float *v, const int32_t *qpos, const int32_t *kpos, int64_t B,
                            int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t h = 0; h < Nl; h++) {
                const int64_t r = b * Tq + i, kvo = b * Tk * ldk + (h / grp) * H;
                row_ref(o + r * ldq + h * H, m + r * Nl + h, l + r * Nl + h, q + r * ldq + h * H,
                        qpos[i], k + kvo, v + kvo, kpos, Tk, H, ldk);
            }
}

void kern_attn_part_cached_ref(float *o, float *m, float *l, const float *q, const float *kc,
                               const float *vc, const int32_t *qpos, int64_t n, const int32_t *kpos,
                               int64_t S, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk) {
    const int64_t ldq = Nl * H, G = Nl / Kl;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < Nl; h++)
            row_ref(o + i * ldq + h * H, m + i * Nl + h, l + i * Nl + h, q + i * ldq + h * H,
                    qpos[i], kc + (h / G) * H, vc + (h / G) * H, kpos, S, H, ldk);
}

void kern_attn_part_merge_ref(float *o, float *m, float *l, const float *o2, const float *m2,
                              const float *l2, int64_t R, int64_t Nl, int64_t H) {
    for (int64_t rh = 0; rh < R * Nl; rh++) {
        const double mx = fmax(m[rh], m2[rh]);
        const double a1 = l[rh] > 0 ? l[rh] * exp(m[rh] - mx) : 0.0;
        const double a2 = l2[rh] > 0 ? l2[rh] * exp(m2[rh] - mx) : 0.0;
        if (a1 + a2 == 0.0) continue;
        for (int64_t c = 0; c < H; c++)
            o[rh * H + c] = (float)((a1 * o[rh * H + c] + a2 * o2[rh * H + c]) / (a1 + a2));
        m[rh] = (float)mx;
        l[rh] = (float)(a1 + a2);
    }
}

void kern_attn_part_delta_ref(float *D, const float *dout, const float *o, int64_t R, int64_t Nl,
                              int64_t H) {
    for (int64_t rh = 0; rh < R * Nl; rh++) {
        double d = 0.0;
        for (int64_t c = 0; c < H; c++) d += (double)dout[rh * H + c] * o[rh * H + c];
        D[rh] = (float)d;
    }
}

/* dP_ij = dO_i·v_j and P_ij = exp(s_ij − m_i)/l_i of one query row and head against key j. */
static void p_dp(double *p, double *dp, const float *qi, const float *doi, const float *kj,
                 const float *vj, float m, float l, int64_t H) {
    *p = exp(score(qi, kj, H) - m) / l;
    *dp = 0.0;
    for (int64_t c = 0; c < H; c++) *dp += (double)doi[c] * vj[c];
}

void kern_attn_part_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *D,
                            const float *m, const float *l, const float *q, const float *k,
                            const float *v, const int32_t *qpos, const int32_t *kpos, int64_t B,
                            int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    const double scale = 1.0 / sqrt((double)H);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t r = b * Tq + i, kvo = b * Tk * ldk + (h / grp) * H;
                const float *qi = q + r * ldq + h * H, *doi = dout + r * ldq + h * H;
                const float mi = m[r * Nl + h], li = l[r * Nl + h];
                if (li == 0.0f) continue;
                double pd = 0.0, p, dp;
                if (D)
                    pd = D[r * Nl + h];
                else
                    for (int64_t j = 0; j < Tk && kpos[j] <= qpos[i]; j++) {
                        p_dp(&p, &dp, qi, doi, k + kvo + j * ldk, v + kvo + j * ldk, mi, li, H);
                        pd += p * dp;
                    }
                for (int64_t c = 0; c < H; c++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < Tk && kpos[j] <= qpos[i]; j++) {
                        p_dp(&p, &dp, qi, doi, k + kvo + j * ldk, v + kvo + j * ldk, mi, li, H);
                        acc += p * (dp - pd) * scale * k[kvo + j * ldk + c];
                    }
                    dq[r * ldq + h * H + c] += (float)acc;
                }
                for (int64_t j = 0; j < Tk && kpos[j] <= qpos[i]; j++) {
                    p_dp(&p, &dp, qi, doi, k + kvo + j * ldk, v + kvo + j * ldk, mi, li, H);
                    const double ds = p * (dp - pd) * scale;
                    for (int64_t c = 0; c < H; c++) {
                        dk[kvo + j * ldk + c] += (float)(ds * qi[c]);
                        dv[kvo + j * ldk + c] += (float)(p * doi[c]);
                    }
                }
            }
}
