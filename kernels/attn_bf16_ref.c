/* The naive twins of attn_bf16.c in double: every sum exact to double precision from the bf16
 * inputs, rounded to bf16 where the kernels round (P, dS; see attn_bf16.h), to fp32 at the end. */
#include <math.h>
#include <string.h>

#include "kernels/attn_bf16.h"
#include "kernels/attn_part.h"
#include "kernels/bf16_inl.h"

/* The bf16 nearest to x (ties to even), rounding the double once (x's fp32 rounding could land
 * on a bf16 midpoint that x is not on): the two bf16 values around x's fp32 rounding, truncated and
 * next up in magnitude, compared with x itself. Finite x below bf16's largest value. */
static kern_bf16 bf16_of_double(double x) {
    const float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint16_t t = (uint16_t)(u >> 16), up = (uint16_t)(t + 1);
    const double dt = fabs(x - kern_bf16_val_inl(t)), du = fabs((double)kern_bf16_val_inl(up) - x);
    if (dt != du) return dt < du ? t : up;
    return (t & 1) ? up : t;
}

static double val(kern_bf16 h) {
    return kern_bf16_val_inl(h);
}

/* Query row values: bf16 (the training kernels' q) or fp32 rounded to bf16 (the cached one's). */
typedef struct {
    const kern_bf16 *h;
    const float *f;
} qrow;

static double qval(qrow q, int64_t d) {
    return q.h ? val(q.h[d]) : val(bf16_of_double(q.f[d]));
}

/* s_j = q·k_j/sqrt(H) in double. */
static double score(qrow q, const kern_bf16 *kj, int64_t H) {
    double s = 0.0;
    for (int64_t d = 0; d < H; d++) s += qval(q, d) * val(kj[d]);
    return s / sqrt((double)H);
}

/* The softmax of row i (keys 0..i of kh, row stride ldk): its max m and normaliser z. */
static void softmax_stats(double *m, double *z, qrow q, const kern_bf16 *kh, int64_t ldk, int64_t i,
                          int64_t H) {
    *m = -INFINITY, *z = 0.0;
    for (int64_t j = 0; j <= i; j++) *m = fmax(*m, score(q, kh + j * ldk, H));
    for (int64_t j = 0; j <= i; j++) *z += exp(score(q, kh + j * ldk, H) - *m);
}

/* Row i's bf16 probability of key j (0 past i). */
static kern_bf16 prob(qrow q, const kern_bf16 *kh, int64_t ldk, int64_t i, int64_t j, int64_t H,
                      double m, double z) {
    return j <= i ? bf16_of_double(exp(score(q, kh + j * ldk, H) - m) / z) : 0;
}

void kern_attn_fwd_bf16_ref(float *out, kern_bf16 *P, const kern_bf16 *q, const kern_bf16 *k,
                            const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                            int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++) {
            const int64_t kvo = b * T * ldk + (h / grp) * H;
            kern_bf16 *Pb = P + (b * Nl + h) * T * T;
            for (int64_t i = 0; i < T; i++) {
                const qrow qi = {q + (b * T + i) * ldq + h * H, NULL};
                double m, z;
                softmax_stats(&m, &z, qi, k + kvo, ldk, i, H);
                for (int64_t j = 0; j < T; j++)
                    Pb[i * T + j] = prob(qi, k + kvo, ldk, i, j, H, m, z);
                for (int64_t d = 0; d < H; d++) {
                    double o = 0.0;
                    for (int64_t j = 0; j <= i; j++)
                        o += val(Pb[i * T + j]) * val(v[kvo + j * ldk + d]);
                    out[(b * T + i) * ldq + h * H + d] = (float)o;
                }
            }
        }
}

/* dS of query head h of sequence b into ds[T, T] (rows i, columns j ≤ i; 0 above). */
static void dscores(double *ds, const kern_bf16 *dob, const kern_bf16 *Pb, const kern_bf16 *vb,
                    int64_t T, int64_t ldq, int64_t ldk, int64_t H) {
    const double scale = 1.0 / sqrt((double)H);
    for (int64_t i = 0; i < T; i++) {
        double pd = 0.0;
        for (int64_t j = 0; j < T; j++) {
            double dp = 0.0;
            for (int64_t d = 0; d < H && j <= i; d++)
                dp += val(dob[i * ldq + d]) * val(vb[j * ldk + d]);
            ds[i * T + j] = dp; /* dP for now */
            pd += val(Pb[i * T + j]) * dp;
        }
        for (int64_t j = 0; j < T; j++)
            ds[i * T + j] = val(bf16_of_double(val(Pb[i * T + j]) * (ds[i * T + j] - pd) * scale));
    }
}

void kern_attn_bwd_bf16_ref(float *dq, float *dk, float *dv, double *scratch, const kern_bf16 *dout,
                            const kern_bf16 *P, const kern_bf16 *q, const kern_bf16 *k,
                            const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                            int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, G = Nl / Kl;
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < Kl; g++) { /* kv head g and its query heads h = g·G + r */
            const int64_t kvo = b * T * ldk + g * H;
            for (int64_t r = 0; r < G; r++) {
                const int64_t h = g * G + r;
                double *ds = scratch + r * T * T;
                const kern_bf16 *Pb = P + (b * Nl + h) * T * T;
                dscores(ds, dout + b * T * ldq + h * H, Pb, v + kvo, T, ldq, ldk, H);
                for (int64_t i = 0; i < T; i++)
                    for (int64_t d = 0; d < H; d++) {
                        double s = 0.0;
                        for (int64_t j = 0; j <= i; j++)
                            s += ds[i * T + j] * val(k[kvo + j * ldk + d]);
                        dq[(b * T + i) * ldq + h * H + d] = (float)s;
                    }
            }
            for (int64_t j = 0; j < T; j++)
                for (int64_t d = 0; d < H; d++) {
                    double sk = 0.0, sv = 0.0;
                    for (int64_t r = 0; r < G; r++) {
                        const int64_t h = g * G + r, qo = b * T * ldq + h * H;
                        const kern_bf16 *Pb = P + (b * Nl + h) * T * T;
                        for (int64_t i = j; i < T; i++) {
                            sk += scratch[r * T * T + i * T + j] * val(q[qo + i * ldq + d]);
                            sv += val(Pb[i * T + j]) * val(dout[qo + i * ldq + d]);
                        }
                    }
                    dk[kvo + j * ldk + d] = (float)sk;
                    dv[kvo + j * ldk + d] = (float)sv;
                }
        }
}

void kern_attn_cached_bf16_ref(float *out, const float *q, const kern_bf16 *kc, const kern_bf16 *vc,
                               int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H,
                               int64_t ldk) {
    const int64_t ldq = Nl * H, G = Nl / Kl;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < Nl; h++) {
            const kern_bf16 *kh = kc + (h / G) * H, *vh = vc + (h / G) * H;
            const qrow qi = {NULL, q + i * ldq + h * H};
            const int64_t last = p0 + i; /* the row's position: keys 0..last */
            double m, z;
            softmax_stats(&m, &z, qi, kh, ldk, last, H);
            for (int64_t d = 0; d < H; d++) {
                double o = 0.0;
                for (int64_t j = 0; j <= last; j++)
                    o += val(prob(qi, kh, ldk, last, j, H, m, z)) * val(vh[j * ldk + d]);
                out[i * ldq + h * H + d] = (float)o;
            }
        }
}

/* ---------------------------------------------------------------- blockwise (attn_part.h) */

/* Keys of kpos[Tk] at or before position p. */
static int64_t seen_at(const int32_t *kpos, int64_t Tk, int32_t p) {
    int64_t n = 0;
    while (n < Tk && kpos[n] <= p) n++;
    return n;
}

void kern_attn_part_fwd_bf16_ref(float *o, float *m, float *l, const kern_bf16 *q,
                                 const kern_bf16 *k, const kern_bf16 *v, const int32_t *qpos,
                                 const int32_t *kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t Nl,
                                 int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, G = Nl / Kl;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const kern_bf16 *kh = k + b * Tk * ldk + (h / G) * H;
                const kern_bf16 *vh = v + b * Tk * ldk + (h / G) * H;
                const qrow qi = {q + (b * Tq + i) * ldq + h * H, NULL};
                const int64_t seen = seen_at(kpos, Tk, qpos[i]), r = (b * Tq + i) * Nl + h;
                double mx = -INFINITY, z = 0.0;
                if (seen > 0) softmax_stats(&mx, &z, qi, kh, ldk, seen - 1, H);
                m[r] = seen > 0 ? (float)mx : -INFINITY;
                l[r] = (float)z;
                for (int64_t d = 0; d < H; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < seen; j++)
                        acc += val(prob(qi, kh, ldk, seen - 1, j, H, mx, z)) * val(vh[j * ldk + d]);
                    o[r / Nl * ldq + h * H + d] = (float)acc;
                }
            }
}

/* One query row's P (bf16 values) and dS over its seen keys, from the given m, l and D. */
static void part_row_bwd(double *p, double *ds, qrow qi, const kern_bf16 *dorow,
                         const kern_bf16 *kh, const kern_bf16 *vh, int64_t ldk, int64_t seen,
                         int64_t H, double m, double l, const float *D) {
    double pd = 0.0;
    for (int64_t j = 0; j < seen; j++) {
        p[j] = val(bf16_of_double(exp(score(qi, kh + j * ldk, H) - m) / l));
        double dp = 0.0;
        for (int64_t d = 0; d < H; d++) dp += val(dorow[d]) * val(vh[j * ldk + d]);
        ds[j] = dp; /* dP for now */
        pd += p[j] * dp;
    }
    if (D) pd = *D;
    for (int64_t j = 0; j < seen; j++)
        ds[j] = val(bf16_of_double(p[j] * (ds[j] - pd) / sqrt((double)H)));
}

void kern_attn_part_bwd_bf16_ref(float *dq, float *dk, float *dv, double *scratch,
                                 const kern_bf16 *dout, const float *D, const float *m,
                                 const float *l, const kern_bf16 *q, const kern_bf16 *k,
                                 const kern_bf16 *v, const int32_t *qpos, const int32_t *kpos,
                                 int64_t B, int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl,
                                 int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, G = Nl / Kl, nkv = B * Tk * ldk;
    double *p = scratch, *ds = scratch + Tk, *gk = scratch + 2 * Tk, *gv = gk + nkv;
    memset(gk, 0, (size_t)(2 * nkv) * sizeof *gk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t kvo = b * Tk * ldk + (h / G) * H, qo = (b * Tq + i) * ldq + h * H;
                const int64_t seen = seen_at(kpos, Tk, qpos[i]), r = (b * Tq + i) * Nl + h;
                if (seen == 0) continue;
                const qrow qi = {q + qo, NULL};
                part_row_bwd(p, ds, qi, dout + qo, k + kvo, v + kvo, ldk, seen, H, m[r], l[r],
                             D ? D + r : NULL);
                for (int64_t d = 0; d < H; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < seen; j++) {
                        acc += ds[j] * val(k[kvo + j * ldk + d]);
                        gk[kvo + j * ldk + d] += ds[j] * val(q[qo + d]);
                        gv[kvo + j * ldk + d] += p[j] * val(dout[qo + d]);
                    }
                    dq[qo + d] += (float)acc;
                }
            }
    for (int64_t e = 0; e < nkv; e++) dk[e] += (float)gk[e], dv[e] += (float)gv[e];
}
