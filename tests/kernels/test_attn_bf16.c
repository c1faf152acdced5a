/* bf16 attention (attn_bf16.h) on the path MESHTRAIN_BF16_PATH forces (a path this CPU lacks: skip,
 * 77), against the double twins that round at the same points.
 *
 * Bounds, per element (u = 2^-24, γ_n = n·u/(1 − n·u); flush: 2^-126 per input and operation, as
 * in test_gemm_bf16.c). A bf16 rounding of the kernel's fp32 value and of the twin's double value
 * of the same quantity can land one bf16 step apart (≤ 2^-7 of the value) when the two straddle a
 * midpoint; so:
 *  - P: each entry equal to the twin's or one bf16 step away (≤ 2^-7·|P|), 0 above the diagonal;
 *    such flips are rare (the fp32 softmax is within a few u of the exact one: expect ~1e-4 of the
 *    entries), at most 1% here.
 *  - out_i = Σ_j P̂_ij·v_j from the kernel's own P̂: |out − out_twin| ≤ γ_{T+1}·Σ|P̂·v| +
 *    Σ|P̂ − P_twin|·|v| + u·|out_twin| + flush (the flips' effect, measured, not assumed).
 *  - backward, P given (the same for both): dV = Pᵀ·dO: γ_{G·T+1}·Σ|P·dO| + u·|dv| + flush
 *    (G = Nl/Kl query heads accumulate into a kv head). dQ = dS·K and dK = dSᵀ·Q, where dS is
 *    internal: |ΔdS| ≤ 2^-7·|dS| + scale·P·(e_dP + e_pd) + 4u·|dS| + 2^-133, e_dP = γ_{H+1}·Σ|dO·v|
 *    (the fp32 dP), e_pd = γ_{i+2}·Σ_j P·|dP| + Σ_j P·e_dP (the fp32 row sum); then
 *    |dq − dq_twin| ≤ γ_{T+1}·Σ(|dS| + |ΔdS|)·|k| + Σ|ΔdS|·|k| + u·|dq_twin| + flush, dK alike over
 *    G·T terms.
 *  - the cached kernel: its rows bit-equal to the training forward's (decode one position at a
 *    time, prefill from 0 and from a later position), and against its own twin with every
 *    probability allowed a flip: γ_{S+1}·Σ|P·v| + 2^-7·Σ|P·v| + u·|out| + flush.
 *  - the blockwise kernels (attn_part.h's bf16 training pair): with one block of every key, bit
 *    for bit the whole-sequence kernels' O, dQ, dK, dV; query rows with a jump in their positions
 *    against every key, their rows' O and dQ bit for bit. A ring of C zigzag ranks as cp.c runs
 *    it (each rank's key block in ring order, partials merged, D from the merged output, each
 *    block's backward) against the twins: the merged O against the twin on every key,
 *    (FLIP + δ + γ_{T+1}(1 + FLIP))·Σ P·|v| + u·|o| + flush with P the exact softmax and δ the
 *    fp32 P's relative error (4·max e_s + γ_{T+8+4C}, e_s a score's fp32 error); m + log l
 *    against the exact log-sum-exp within max e_s + γ_{T+8+4C} + 3u·|lse|; the backward with the
 *    same m, l, D given to both, a P entry allowed a flip and its fp32 error (e_s + 6u), dS as
 *    above, dQ one fp32 chain through every block (γ_{T+1}) plus the twin's C per-block
 *    roundings (ring_bwd_bounds).
 * Also: outputs and scratch full of NaN beforehand (all overwritten), run to run bit-identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_bf16.h"
#include "kernels/attn_part.h"
#include "ktest.h"

#define U 0x1p-24
#define TINY 0x1p-126
#define FLIP 0x1p-7

static kern_bf16_ctx *ctx;

static double gam(double n) {
    return n * U / (1.0 - n * U);
}

static double bv(kern_bf16 h) {
    return kern_bf16_val(h);
}

static kern_bf16 *bf16s(int64_t n, uint64_t seed, float lo, float hi) {
    float *f = kt_floats(n);
    kern_bf16 *h = malloc((size_t)n * sizeof *h);
    if (!h) exit(1);
    kt_fill(f, n, seed, lo, hi);
    kern_bf16_pack(h, f, n);
    free(f);
    return h;
}

/* got vs want under bound[], element by element; one line with the worst. */
static void check_elems(const char *what, const float *got, const float *want, const double *bound,
                        int64_t n) {
    double worst = 0.0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double dev = fabs((double)got[i] - (double)want[i]) / bound[i];
        if (!(dev <= worst)) worst = dev, at = i;
    }
    const int bad = !(worst <= 1.0);
    printf("%-4s %-52s worst %.3g of the bound at %lld: got %.9g want %.9g\n", bad ? "FAIL" : "ok",
           what, worst, (long long)at, (double)got[at], (double)want[at]);
    if (bad) check_count_failure();
}

typedef struct {
    int64_t B, T, Nl, Kl, H;
} dims;

/* P vs the twin's: equal or one bf16 step apart, 0 above the diagonal, flips ≤ 1%. */
static void check_probs(const char *shape, const dims *s, const kern_bf16 *P, const kern_bf16 *Pt) {
    int64_t flips = 0, bad = 0, n = 0;
    for (int64_t bh = 0; bh < s->B * s->Nl; bh++)
        for (int64_t i = 0; i < s->T; i++)
            for (int64_t j = 0; j < s->T; j++) {
                const int64_t e = (bh * s->T + i) * s->T + j;
                const double a = bv(P[e]), b = bv(Pt[e]);
                if (j > i) {
                    bad += P[e] != 0;
                    continue;
                }
                n++;
                if (a == b) continue;
                flips++;
                bad += !(fabs(a - b) <= FLIP * fmax(fabs(a), fabs(b)));
            }
    check_expect(bad == 0 && flips * 100 <= n, "bf16 attn fwd P %s: %lld of %lld one step off",
                 shape, (long long)flips, (long long)n);
}

/* The forward's out bound from the kernel's P and the twin's. */
static void fwd_bound(double *bnd, const dims *s, const kern_bf16 *P, const kern_bf16 *Pt,
                      const kern_bf16 *v, const float *want) {
    const int64_t T = s->T, H = s->H, ldq = s->Nl * H, ldk = s->Kl * H, G = s->Nl / s->Kl;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->Nl; h++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t d = 0; d < H; d++) {
                    const int64_t pi = ((b * s->Nl + h) * T + i) * T,
                                  o = (b * T + i) * ldq + h * H + d;
                    double pv = 0.0, flip = 0.0, el = 0.0;
                    for (int64_t j = 0; j <= i; j++) {
                        const double vj = fabs(bv(v[(b * T + j) * ldk + (h / G) * H + d]));
                        pv += fabs(bv(P[pi + j])) * vj;
                        flip += fabs(bv(P[pi + j]) - bv(Pt[pi + j])) * vj;
                        el += fabs(bv(P[pi + j])) + vj;
                    }
                    bnd[o] = gam((double)T + 1) * pv + flip + U * fabs(want[o]) +
                             TINY * (el + 2.0 * (double)T + 1.0);
                }
}

/* |dS| (exact, before rounding) and the bound on |ΔdS| for query head h of sequence b, [T, T]. */
static void ds_bounds(double *ds, double *dd, const dims *s, const kern_bf16 *P,
                      const kern_bf16 *dout, const kern_bf16 *v, int64_t b, int64_t h) {
    const int64_t T = s->T, H = s->H, ldq = s->Nl * H, ldk = s->Kl * H, G = s->Nl / s->Kl;
    const double scale = 1.0 / sqrt((double)H);
    const kern_bf16 *Pb = P + (b * s->Nl + h) * T * T;
    double *dp = kt_doubles(T), *edp = kt_doubles(T);
    for (int64_t i = 0; i < T; i++) {
        double pd = 0.0, spd = 0.0, sped = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            double x = 0.0, ax = 0.0;
            for (int64_t d = 0; d < H; d++) {
                const double o = bv(dout[(b * T + i) * ldq + h * H + d]);
                const double w = bv(v[(b * T + j) * ldk + (h / G) * H + d]);
                x += o * w, ax += fabs(o * w);
            }
            dp[j] = x, edp[j] = gam((double)H + 1) * ax;
            pd += bv(Pb[i * T + j]) * x;
            spd += bv(Pb[i * T + j]) * fabs(x), sped += bv(Pb[i * T + j]) * edp[j];
        }
        const double epd = gam((double)i + 2) * spd + sped;
        for (int64_t j = 0; j < T; j++) {
            const double p = j <= i ? bv(Pb[i * T + j]) : 0.0;
            const double x = fabs(p * (dp[j <= i ? j : 0] - pd) * scale);
            ds[i * T + j] = x;
            dd[i * T + j] =
                j <= i ? FLIP * x + scale * p * (edp[j] + epd) + 6 * U * x + 0x1p-133 : 0.0;
        }
    }
    free(dp), free(edp);
}

/* Bounds of dq, dk, dv (see the top). */
static void bwd_bounds(double *bq, double *bk, double *bvv, const dims *s, const kern_bf16 *P,
                       const kern_bf16 *dout, const kern_bf16 *q, const kern_bf16 *k,
                       const kern_bf16 *v, const float *dqt, const float *dkt, const float *dvt) {
    const int64_t T = s->T, H = s->H, ldq = s->Nl * H, ldk = s->Kl * H, G = s->Nl / s->Kl;
    double *ds = kt_doubles(G * T * T), *dd = kt_doubles(G * T * T);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t g = 0; g < s->Kl; g++) {
            for (int64_t r = 0; r < G; r++)
                ds_bounds(ds + r * T * T, dd + r * T * T, s, P, dout, v, b, g * G + r);
            for (int64_t r = 0; r < G; r++)
                for (int64_t i = 0; i < T; i++)
                    for (int64_t d = 0; d < H; d++) {
                        const int64_t o = (b * T + i) * ldq + (g * G + r) * H + d;
                        double a = 0.0, f = 0.0, el = 0.0;
                        for (int64_t j = 0; j <= i; j++) {
                            const double kj = fabs(bv(k[(b * T + j) * ldk + g * H + d]));
                            const double x = ds[(r * T + i) * T + j], e = dd[(r * T + i) * T + j];
                            a += (x * (1 + FLIP) + e) * kj, f += e * kj, el += x + e + kj;
                        }
                        bq[o] = gam((double)T + 1) * a + f + U * fabs(dqt[o]) +
                                TINY * (el + 2.0 * (double)T + 1.0);
                    }
            for (int64_t j = 0; j < T; j++)
                for (int64_t d = 0; d < H; d++) {
                    const int64_t o = (b * T + j) * ldk + g * H + d;
                    double a = 0.0, f = 0.0, pv = 0.0, el = 0.0;
                    for (int64_t r = 0; r < G; r++)
                        for (int64_t i = j; i < T; i++) {
                            const int64_t qo = (b * T + i) * ldq + (g * G + r) * H + d;
                            const double x = ds[(r * T + i) * T + j], e = dd[(r * T + i) * T + j];
                            const double qi = fabs(bv(q[qo])),
                                         p = bv(P[((b * s->Nl + g * G + r) * T + i) * T + j]);
                            a += (x * (1 + FLIP) + e) * qi, f += e * qi;
                            pv += p * fabs(bv(dout[qo])), el += x + e + qi + p + fabs(bv(dout[qo]));
                        }
                    const double n = (double)(G * T) + 1, fl = TINY * (el + 2.0 * n);
                    bk[o] = gam(n) * a + f + U * fabs(dkt[o]) + fl;
                    bvv[o] = gam(n) * pv + U * fabs(dvt[o]) + fl;
                }
        }
    free(ds), free(dd);
}

static void fill_nan(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

static int bit_equal(const void *a, const void *b, size_t bytes) {
    return memcmp(a, b, bytes) == 0;
}

/* ---------------------------------------------------------------- blockwise (attn_part.h) */

/* Rows rows[0..n) of each of the B sequences of x[B·T, w] into y[B·n, w]. */
static void take_rows(kern_bf16 *y, const kern_bf16 *x, const int32_t *rows, int64_t n, int64_t B,
                      int64_t T, int64_t w) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n; i++)
            memcpy(y + (b * n + i) * w, x + (b * T + rows[i]) * w, (size_t)w * 2);
}

/* Rows rows[0..n) of x[B·T, w] (fp32) bit-equal to y[B·n, w]? */
static int rows_equal(const float *y, const float *x, const int32_t *rows, int64_t n, int64_t B,
                      int64_t T, int64_t w) {
    int same = 1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n; i++)
            same &= bit_equal(y + (b * n + i) * w, x + (b * T + rows[i]) * w, (size_t)w * 4);
    return same;
}

/* The blockwise bf16 kernels against the whole-sequence ones, bit for bit: one block of every key
 * (O, and dQ, dK, dV with D = NULL from the forward's m, l); then the query rows of a zigzag
 * rank (the first and last quarter, one jump between) against every key: their O and dQ rows. */
static void part_equal(const dims *s, const char *shape, const kern_bf16 *q, const kern_bf16 *k,
                       const kern_bf16 *v, const kern_bf16 *dout, const float *out, const float *dq,
                       const float *dk, const float *dv) {
    const int64_t T = s->T, NH = s->Nl * s->H, nq = s->B * T * NH, nk = s->B * T * s->Kl * s->H;
    const int64_t nml = s->B * T * s->Nl;
    int32_t *pos = malloc((size_t)T * sizeof *pos), *rows = malloc((size_t)T * sizeof *rows);
    float *o = kt_floats(nq), *ml = kt_floats(2 * nml), *g = kt_floats(nq + 2 * nk);
    float *scr = kt_floats(kern_attn_part_bwd_bf16_scratch(T, T) +
                           kern_attn_part_fwd_bf16_scratch(T, T));
    kern_bf16 *qs = malloc((size_t)nq * 2), *ds = malloc((size_t)nq * 2);
    if (!pos || !rows || !qs || !ds) exit(1);
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)t;
    fill_nan(o, nq), fill_nan(ml, 2 * nml);
    kern_attn_part_fwd_bf16(ctx, o, ml, ml + nml, scr, q, k, v, pos, pos, s->B, T, T, s->Nl, s->Kl,
                            s->H);
    memset(g, 0, (size_t)(nq + 2 * nk) * 4);
    kern_attn_part_bwd_bf16(ctx, g, g + nq, g + nq + nk, scr, dout, NULL, ml, ml + nml, q, k, v,
                            pos, pos, s->B, T, T, s->Nl, s->Kl, s->H, KERN_ATTN_PART_BOTH);
    check_expect(bit_equal(o, out, (size_t)nq * 4) && bit_equal(g, dq, (size_t)nq * 4) &&
                     bit_equal(g + nq, dk, (size_t)nk * 4) &&
                     bit_equal(g + nq + nk, dv, (size_t)nk * 4),
                 "bf16 blockwise attn, one block of every key = whole-sequence kernels, bit for "
                 "bit (O, dQ, dK, dV) %s",
                 shape);
    const int64_t c = (T + 3) / 4, n = 2 * c <= T ? 2 * c : T;
    for (int64_t i = 0; i < n; i++) rows[i] = (int32_t)(i < c || n == T ? i : T - n + i);
    take_rows(qs, q, rows, n, s->B, T, NH);
    take_rows(ds, dout, rows, n, s->B, T, NH);
    fill_nan(o, nq);
    kern_attn_part_fwd_bf16(ctx, o, ml, ml + nml, scr, qs, k, v, rows, pos, s->B, n, T, s->Nl,
                            s->Kl, s->H);
    memset(g, 0, (size_t)(nq + 2 * nk) * 4);
    kern_attn_part_bwd_bf16(ctx, g, g + nq, g + nq + nk, scr, ds, NULL, ml, ml + nml, qs, k, v,
                            rows, pos, s->B, n, T, s->Nl, s->Kl, s->H, KERN_ATTN_PART_BOTH);
    check_expect(rows_equal(o, out, rows, n, s->B, T, NH) && rows_equal(g, dq, rows, n, s->B, T, NH),
                 "bf16 blockwise attn, rows 0..%lld and %lld..%lld against every key: their O "
                 "and dQ rows bit for bit %s",
                 (long long)c - 1, (long long)(T - n + c), (long long)T - 1, shape);
    /* the backward in halves (every head's P, dS kept, then dK, dV): the same bits */
    float *g2 = kt_floats(nq + 2 * nk);
    float *scr2 = kt_floats(kern_attn_part_bwd_bf16_halves_scratch(s->B, s->Nl, n, T));
    memset(g2, 0, (size_t)(nq + 2 * nk) * 4);
    for (int h = KERN_ATTN_PART_ROWS; h <= KERN_ATTN_PART_KEYS; h++)
        kern_attn_part_bwd_bf16(ctx, g2, g2 + nq, g2 + nq + nk, scr2, ds, NULL, ml, ml + nml, qs,
                                k, v, rows, pos, s->B, n, T, s->Nl, s->Kl, s->H,
                                (kern_attn_part_half)h);
    check_expect(bit_equal(g2, g, (size_t)(nq + 2 * nk) * 4),
                 "bf16 blockwise backward in halves = in one, bit for bit (dQ, dK, dV) %s", shape);
    free(g2), free(scr2);
    free(pos), free(rows), free(o), free(ml), free(g), free(scr), free(qs), free(ds);
}

/* The zigzag positions of rank r of C over T (chunks r and 2C − 1 − r of T/(2C) each). */
static void zigzag(int32_t *pos, int64_t r, int64_t C, int64_t T) {
    const int64_t c = T / (2 * C);
    for (int64_t t = 0; t < c; t++) {
        pos[t] = (int32_t)(r * c + t);
        pos[c + t] = (int32_t)((2 * C - 1 - r) * c + t);
    }
}

/* The exact quantities of query row i (head h, sequence b; global rows qr of q, dout) against the
 * key at global row j: the score s, its fp32 error bound e_s (the H-term chain, the rounded scale
 * and its product), dP = dO·v and its chain's bound e_dP. */
typedef struct {
    double s, es, dp, edp;
} pair_x;
static pair_x pair_exact(const dims *d, const kern_bf16 *q, const kern_bf16 *k, const kern_bf16 *v,
                         const kern_bf16 *dout, int64_t b, int64_t h, int64_t qr, int64_t j) {
    const int64_t H = d->H, G = d->Nl / d->Kl;
    const kern_bf16 *qi = q + (b * d->T + qr) * d->Nl * H + h * H;
    const kern_bf16 *oi = dout + (b * d->T + qr) * d->Nl * H + h * H;
    const kern_bf16 *kj = k + (b * d->T + j) * d->Kl * H + (h / G) * H;
    const kern_bf16 *vj = v + (b * d->T + j) * d->Kl * H + (h / G) * H;
    double x = 0, ax = 0, y = 0, ay = 0;
    for (int64_t c = 0; c < H; c++) {
        x += bv(qi[c]) * bv(kj[c]), ax += fabs(bv(qi[c]) * bv(kj[c]));
        y += bv(oi[c]) * bv(vj[c]), ay += fabs(bv(oi[c]) * bv(vj[c]));
    }
    const double sc = 1.0 / sqrt((double)H);
    return (pair_x){x * sc, (gam((double)H) * ax + 4 * U * fabs(x)) * sc + TINY * (2 * H + 2), y,
                    gam((double)H + 1) * ay + TINY * (2 * H + 2)};
}

/* The bounds of the ring's merged forward of query rows qr[n] against all T keys (the exact
 * softmax P = exp(s − M)/L): |o − o_twin| ≤ (FLIP + δ + γ_{T+1}(1 + FLIP))·Σ P·|v| + u·|o_twin| +
 * flush, δ = 4·max e_s + γ_{T+8+4C} the fp32 P's relative error (scores, max, exp, sum, the
 * merges' weights and roundings), FLIP the two bf16 roundings of P (the kernel's of each block's
 * own P, the twin's of the whole); and |lse − lse_exact| ≤ max e_s + γ_{T+8+4C} + 2u·|lse|. */
static void ring_fwd_bounds(double *bo, double *blse, double *lse, const dims *d, const kern_bf16 *q,
                            const kern_bf16 *k, const kern_bf16 *v, const kern_bf16 *dout,
                            const int32_t *qr, int64_t n, int64_t C, const float *ot) {
    const int64_t H = d->H, NH = d->Nl * H, G = d->Nl / d->Kl, T = d->T;
    double *sx = kt_doubles(T);
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < d->Nl; h++) {
                double M = -INFINITY, L = 0, E = 0;
                for (int64_t j = 0; j <= qr[i]; j++) {
                    const pair_x x = pair_exact(d, q, k, v, dout, b, h, qr[i], j);
                    sx[j] = x.s, M = fmax(M, x.s), E = fmax(E, x.es);
                }
                for (int64_t j = 0; j <= qr[i]; j++) L += exp(sx[j] - M);
                const int64_t r = (b * n + i) * d->Nl + h;
                const double g = gam((double)(T + 8 + 4 * C)), delta = 4 * E + g;
                lse[r] = M + log(L), blse[r] = E + g + 2 * U * fabs(lse[r]);
                for (int64_t c = 0; c < H; c++) {
                    double pv = 0;
                    for (int64_t j = 0; j <= qr[i]; j++)
                        pv += exp(sx[j] - M) / L *
                              fabs(bv(v[(b * T + j) * d->Kl * H + (h / G) * H + c]));
                    const int64_t e = (b * n + i) * NH + h * H + c;
                    bo[e] = (FLIP + delta + gam((double)T + 1) * (1 + FLIP)) * pv +
                            U * fabs(ot[e]) + TINY * 8.0 * (double)(T + H);
                }
            }
    free(sx);
}

/* The backward's bounds, the kernel's m, l and D given to both (see the top): per pair, the
 * kernel's P off the twin's by ΔP ≤ (FLIP + δ)(1 + FLIP)·p, δ = e_s + 6u; dS off by
 * FLIP·|x| + scale·(ΔP·|dP − D| + P·e_dP) + 4u·|x|; dQ one chain through every block
 * (γ_{T+1}), plus the twin's per-block roundings (C·u); dK, dV chains over the G·n rows. b[0..7]:
 * dq's three sums, dk's three, dv's two. */
static void ring_bwd_bounds(double *b[8], const dims *d, const kern_bf16 *q, const kern_bf16 *k,
                            const kern_bf16 *v, const kern_bf16 *dout, const kern_bf16 *qs,
                            const kern_bf16 *dls, const int32_t *qr, int64_t n, const float *m,
                            const float *l, const float *D) {
    const int64_t H = d->H, NH = d->Nl * H, KH = d->Kl * H, G = d->Nl / d->Kl, T = d->T;
    const double sc = 1.0 / sqrt((double)H);
    for (int64_t bb = 0; bb < d->B; bb++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < d->Nl; h++) {
                const int64_t r = (bb * n + i) * d->Nl + h;
                for (int64_t j = 0; j <= qr[i]; j++) {
                    const pair_x x = pair_exact(d, q, k, v, dout, bb, h, qr[i], j);
                    const double p = exp(x.s - m[r]) / l[r], pt = bv(kern_bf16_of((float)p));
                    const double dP = (FLIP + x.es + 6 * U) * (1 + FLIP) * (p + pt);
                    const double ds = fabs(pt * (x.dp - D[r]) * sc);
                    const double dd = FLIP * ds + sc * (dP * fabs(x.dp - D[r]) + (pt + dP) * x.edp) +
                                      4 * U * ds + 0x1p-133;
                    for (int64_t c = 0; c < H; c++) {
                        const int64_t eq = (bb * n + i) * NH + h * H + c;
                        const int64_t ek = (bb * T + j) * KH + (h / G) * H + c;
                        const double kj = fabs(bv(k[ek])), qi = fabs(bv(qs[eq]));
                        const double oi = fabs(bv(dls[eq]));
                        b[0][eq] += (ds * (1 + FLIP) + dd) * kj, b[1][eq] += dd * kj;
                        b[2][eq] += ds * kj;
                        b[3][ek] += (ds * (1 + FLIP) + dd) * qi, b[4][ek] += dd * qi;
                        b[5][ek] += ds * qi;
                        b[6][ek] += (pt + dP) * oi, b[7][ek] += dP * oi;
                    }
                }
            }
}

/* got[rows of the block at kpos, scattered to the global key rows] from a block's blk[B·c, w]. */
static void scatter_rows(float *got, const float *blk, const int32_t *kpos, int64_t c, int64_t B,
                         int64_t T, int64_t w) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < c; t++)
            memcpy(got + (b * T + kpos[t]) * w, blk + (b * c + t) * w, (size_t)w * 4);
}

/* The ring of C ranks (zigzag) as cp.c runs it, for the queries of rank r: the partial of each
 * rank's key block in ring order (r, r − 1, ..), merged; D from the merged output and the rounded
 * dO; each block's backward (dQ accumulated, the block's dK, dV). Against the twins (forward on
 * every key, backward per block with the same m, l, D) under the bounds above. */
static void ring_case(dims d, int64_t C, int64_t r, uint64_t seed) {
    const int64_t T = d.T, c = T / C, NH = d.Nl * d.H, KH = d.Kl * d.H, B = d.B;
    const int64_t nq = B * c * NH, nk = B * c * KH, nml = B * c * d.Nl;
    kern_bf16 *q = bf16s(B * T * NH, seed, -2, 2), *k = bf16s(B * T * KH, seed + 1, -2, 2);
    kern_bf16 *v = bf16s(B * T * KH, seed + 2, -1, 1), *dout = bf16s(B * T * NH, seed + 3, -1, 1);
    kern_bf16 *qs = malloc((size_t)nq * 2), *ds = malloc((size_t)nq * 2);
    kern_bf16 *ks = malloc((size_t)nk * 2), *vs = malloc((size_t)nk * 2);
    int32_t *qpos = malloc((size_t)c * 4), *kpos = malloc((size_t)c * 4), *all = malloc((size_t)T * 4);
    float *o = kt_floats(nq), *ml = kt_floats(2 * nml), *o2 = kt_floats(nq + 2 * nml);
    float *ot = kt_floats(nq), *mlt = kt_floats(2 * nml), *D = kt_floats(nml), *dq = kt_floats(nq);
    float *dk = kt_floats(nk), *dv = kt_floats(nk), *tq = kt_floats(nq);
    float *gk = kt_floats(4 * B * T * KH), *gv = gk + B * T * KH, *tk = gv + B * T * KH;
    float *tv = tk + B * T * KH;
    float *scr = kt_floats(kern_attn_part_bwd_bf16_scratch(c, c));
    double *rs = kt_doubles(2 * c + 2 * nk), *tqs = kt_doubles(nq), *bo = kt_doubles(nq);
    double *bl = kt_doubles(nml), *lse = kt_doubles(nml), *bb[8];
    if (!qs || !ds || !ks || !vs || !qpos || !kpos || !all) exit(1);
    for (int i = 0; i < 8; i++) bb[i] = kt_doubles(i < 3 ? nq : B * T * KH);
    for (int i = 0; i < 8; i++) memset(bb[i], 0, (size_t)(i < 3 ? nq : B * T * KH) * 8);
    memset(tqs, 0, (size_t)nq * 8);
    for (int64_t t = 0; t < T; t++) all[t] = (int32_t)t;
    zigzag(qpos, r, C, T);
    take_rows(qs, q, qpos, c, B, T, NH);
    take_rows(ds, dout, qpos, c, B, T, NH);
    for (int64_t s = 0; s < C; s++) { /* the forward: the blocks in ring order, merged */
        zigzag(kpos, (r - s + C) % C, C, T);
        take_rows(ks, k, kpos, c, B, T, KH);
        take_rows(vs, v, kpos, c, B, T, KH);
        float *to = s ? o2 : o, *tm = s ? o2 + nq : ml;
        kern_attn_part_fwd_bf16(ctx, to, tm, tm + nml, scr, qs, ks, vs, qpos, kpos, B, c, c, d.Nl,
                                d.Kl, d.H);
        if (s) kern_attn_part_merge(o, ml, ml + nml, o2, o2 + nq, o2 + nq + nml, B * c, d.Nl, d.H);
    }
    kern_attn_part_fwd_bf16_ref(ot, mlt, mlt + nml, qs, k, v, qpos, all, B, c, T, d.Nl, d.Kl, d.H);
    ring_fwd_bounds(bo, bl, lse, &d, q, k, v, dout, qpos, c, C, ot);
    char what[112];
    snprintf(what, sizeof what, "bf16 ring attn fwd, %lld zigzag ranks, rank %lld: O vs twin T=%lld",
             (long long)C, (long long)r, (long long)T);
    check_elems(what, o, ot, bo, nq);
    float *lk = kt_floats(nml), *le = kt_floats(nml);
    for (int64_t e = 0; e < nml; e++) lk[e] = (float)((double)ml[e] + log((double)ml[nml + e]));
    for (int64_t e = 0; e < nml; e++) le[e] = (float)lse[e], bl[e] += U * fabs(lse[e]);
    snprintf(what, sizeof what, "bf16 ring attn fwd, rank %lld: m + log l vs exact lse", (long long)r);
    check_elems(what, lk, le, bl, nml);
    kern_attn_part_delta_bf16(D, ds, o, B * c, d.Nl, d.H);
    memset(dq, 0, (size_t)nq * 4), memset(gk, 0, (size_t)(4 * B * T * KH) * 4);
    for (int64_t s = 0; s < C; s++) { /* the backward, block by block */
        zigzag(kpos, (r - s + C) % C, C, T);
        take_rows(ks, k, kpos, c, B, T, KH);
        take_rows(vs, v, kpos, c, B, T, KH);
        memset(dk, 0, (size_t)nk * 4), memset(dv, 0, (size_t)nk * 4);
        kern_attn_part_bwd_bf16(ctx, dq, dk, dv, scr, ds, D, ml, ml + nml, qs, ks, vs, qpos, kpos,
                                B, c, c, d.Nl, d.Kl, d.H, KERN_ATTN_PART_BOTH);
        scatter_rows(gk, dk, kpos, c, B, T, KH), scatter_rows(gv, dv, kpos, c, B, T, KH);
        memset(tq, 0, (size_t)nq * 4), memset(dk, 0, (size_t)nk * 4), memset(dv, 0, (size_t)nk * 4);
        kern_attn_part_bwd_bf16_ref(tq, dk, dv, rs, ds, D, ml, ml + nml, qs, ks, vs, qpos, kpos, B,
                                    c, c, d.Nl, d.Kl, d.H);
        scatter_rows(tk, dk, kpos, c, B, T, KH), scatter_rows(tv, dv, kpos, c, B, T, KH);
        for (int64_t e = 0; e < nq; e++) tqs[e] += tq[e];
    }
    for (int64_t e = 0; e < nq; e++) tq[e] = (float)tqs[e];
    ring_bwd_bounds(bb, &d, q, k, v, dout, qs, ds, qpos, c, ml, ml + nml, D);
    const double n = (double)(d.Nl / d.Kl * c) + 1, fl = TINY * 8.0 * (double)(T + d.H) * n;
    for (int64_t e = 0; e < nq; e++)
        bb[0][e] = gam((double)T + 1) * bb[0][e] + bb[1][e] + (double)C * U * bb[2][e] +
                   U * fabs(tq[e]) + fl;
    for (int64_t e = 0; e < B * T * KH; e++) {
        bb[3][e] = gam(n) * bb[3][e] + bb[4][e] + U * fabs(tk[e]) + fl;
        bb[6][e] = gam(n) * bb[6][e] + bb[7][e] + U * fabs(tv[e]) + fl;
    }
    snprintf(what, sizeof what, "bf16 ring attn bwd, rank %lld: dQ vs twin", (long long)r);
    check_elems(what, dq, tq, bb[0], nq);
    snprintf(what, sizeof what, "bf16 ring attn bwd, rank %lld: dK vs twin", (long long)r);
    check_elems(what, gk, tk, bb[3], B * T * KH);
    snprintf(what, sizeof what, "bf16 ring attn bwd, rank %lld: dV vs twin", (long long)r);
    check_elems(what, gv, tv, bb[6], B * T * KH);
    free(q), free(k), free(v), free(dout), free(qs), free(ds), free(ks), free(vs), free(qpos);
    free(kpos), free(all), free(o), free(ml), free(o2), free(ot), free(mlt), free(D), free(dq);
    free(dk), free(dv), free(tq), free(gk), free(scr), free(rs), free(tqs), free(bo), free(bl);
    free(lse), free(lk), free(le);
    for (int i = 0; i < 8; i++) free(bb[i]);
}

/* Forward and backward of one shape against the twins; run twice for run-to-run equality. */
static void train(dims s, uint64_t seed) {
    const int64_t nq = s.B * s.T * s.Nl * s.H, nk = s.B * s.T * s.Kl * s.H;
    const int64_t nP = s.B * s.Nl * s.T * s.T, ns = kern_attn_bf16_scratch(s.T);
    kern_bf16 *q = bf16s(nq, seed, -1.5f, 1.5f), *k = bf16s(nk, seed + 1, -1.5f, 1.5f);
    kern_bf16 *v = bf16s(nk, seed + 2, -1, 1), *dout = bf16s(nq, seed + 3, -1, 1);
    kern_bf16 *P = malloc((size_t)nP * 2), *Pt = malloc((size_t)nP * 2),
              *P2 = malloc((size_t)nP * 2);
    float *out = kt_floats(nq), *outt = kt_floats(nq), *scr = kt_floats(ns), *o2 = kt_floats(nq);
    float *dq = kt_floats(nq), *dk = kt_floats(nk), *dv = kt_floats(nk),
          *g2 = kt_floats(nq + 2 * nk);
    float *dqt = kt_floats(nq), *dkt = kt_floats(nk), *dvt = kt_floats(nk);
    double *bq = kt_doubles(nq), *bk = kt_doubles(nk), *bvv = kt_doubles(nk);
    double *rs = kt_doubles(s.Nl / s.Kl * s.T * s.T);
    if (!P || !Pt || !P2) exit(1);
    memset(P, 0xff, (size_t)nP * 2); /* NaN patterns: every entry must be written */
    fill_nan(out, nq), fill_nan(scr, ns), fill_nan(dq, nq), fill_nan(dk, nk), fill_nan(dv, nk);
    char shape[80], what[128];
    snprintf(shape, sizeof shape, "B=%lld T=%lld Nl=%lld Kl=%lld H=%lld", (long long)s.B,
             (long long)s.T, (long long)s.Nl, (long long)s.Kl, (long long)s.H);
    kern_attn_fwd_bf16(ctx, out, P, scr, q, k, v, s.B, s.T, s.Nl, s.Kl, s.H);
    kern_attn_fwd_bf16_ref(outt, Pt, q, k, v, s.B, s.T, s.Nl, s.Kl, s.H);
    check_probs(shape, &s, P, Pt);
    fwd_bound(bq, &s, P, Pt, v, outt);
    snprintf(what, sizeof what, "bf16 attn fwd out %s", shape);
    check_elems(what, out, outt, bq, nq);
    fill_nan(scr, ns);
    kern_attn_bwd_bf16(ctx, dq, dk, dv, scr, dout, P, q, k, v, s.B, s.T, s.Nl, s.Kl, s.H);
    kern_attn_bwd_bf16_ref(dqt, dkt, dvt, rs, dout, P, q, k, v, s.B, s.T, s.Nl, s.Kl, s.H);
    bwd_bounds(bq, bk, bvv, &s, P, dout, q, k, v, dqt, dkt, dvt);
    snprintf(what, sizeof what, "bf16 attn bwd dq %s", shape);
    check_elems(what, dq, dqt, bq, nq);
    snprintf(what, sizeof what, "bf16 attn bwd dk %s", shape);
    check_elems(what, dk, dkt, bk, nk);
    snprintf(what, sizeof what, "bf16 attn bwd dv %s", shape);
    check_elems(what, dv, dvt, bvv, nk);
    part_equal(&s, shape, q, k, v, dout, out, dq, dk, dv);
    kern_attn_fwd_bf16(ctx, o2, P2, scr, q, k, v, s.B, s.T, s.Nl, s.Kl, s.H);
    kern_attn_bwd_bf16(ctx, g2, g2 + nq, g2 + nq + nk, scr, dout, P, q, k, v, s.B, s.T, s.Nl, s.Kl,
                       s.H);
    check_expect(bit_equal(o2, out, (size_t)nq * 4) && bit_equal(P2, P, (size_t)nP * 2) &&
                     bit_equal(g2, dq, (size_t)nq * 4) && bit_equal(g2 + nq, dk, (size_t)nk * 4) &&
                     bit_equal(g2 + nq + nk, dv, (size_t)nk * 4),
                 "bf16 attn %s: run to run bit-identical", shape);
    free(q), free(k), free(v), free(dout), free(P), free(Pt), free(P2), free(out), free(outt);
    free(scr), free(o2), free(dq), free(dk), free(dv), free(g2), free(dqt), free(dkt), free(dvt);
    free(bq), free(bk), free(bvv), free(rs);
}

/* Decode of every position p < T against the cache kc, vc [T, ldk] sharded round-robin over P
 * ranks (rank r holds positions r, r + P, .., its rows in order, as generate --kv-shard lays
 * them): each rank's partial by kern_attn_part_cached_bf16, merged in rank order. P = 1: o (the
 * cached kernel's rows) bit for bit. Each shard normalises its probabilities by its own sum
 * before their bf16 rounding, so an entry may land one bf16 step from the twin's (the bound's
 * flip term already allows that), and the merge's rescaling adds a few u: bnd + γ_{4P}·Σ|P·v|,
 * taken as bnd·(1 + 4P·u) plus the flip bound's share. */
static void part_cached(const float *o, const float *ot, const double *bnd, const float *qf,
                        const kern_bf16 *kc, const kern_bf16 *vc, int64_t T, int64_t Nl, int64_t Kl,
                        int64_t H, int64_t ldk, int64_t P) {
    const int64_t ldq = Nl * H, R = (T + P - 1) / P, blk = ldq + 2 * Nl;
    kern_bf16 *sk = malloc((size_t)(P * R * ldk) * 2), *sv = malloc((size_t)(P * R * ldk) * 2);
    int32_t *kpos = malloc((size_t)(P * R) * sizeof *kpos);
    float *part = kt_floats(P * blk), *got = kt_floats(T * ldq);
    float *scr = kt_floats(kern_attn_part_cached_bf16_scratch(R, Nl, Kl, H));
    if (!sk || !sv || !kpos) exit(1);
    for (int64_t t = 0; t < T; t++) { /* position t: rank t mod P, its row t div P */
        const int64_t at = (t % P) * R + t / P;
        memcpy(sk + at * ldk, kc + t * ldk, (size_t)ldk * 2);
        memcpy(sv + at * ldk, vc + t * ldk, (size_t)ldk * 2);
        kpos[at] = (int32_t)t;
    }
    for (int32_t p = 0; p < T; p++) {
        for (int64_t r = 0; r < P; r++) {
            const int64_t held = p >= r ? (p - r) / P + 1 : 0;
            float *b = part + r * blk;
            fill_nan(scr, kern_attn_part_cached_bf16_scratch(R, Nl, Kl, H));
            kern_attn_part_cached_bf16(b, b + ldq, b + ldq + Nl, scr, qf + p * ldq,
                                       sk + r * R * ldk, sv + r * R * ldk, &p, 1, kpos + r * R,
                                       held, Nl, Kl, H, ldk);
        }
        for (int64_t r = 1; r < P; r++) {
            const float *b = part + r * blk;
            kern_attn_part_merge(part, part + ldq, part + ldq + Nl, b, b + ldq, b + ldq + Nl, 1, Nl,
                                 H);
        }
        memcpy(got + p * ldq, part, (size_t)ldq * 4);
    }
    char what[112];
    if (P == 1) {
        check_expect(bit_equal(got, o, (size_t)(T * ldq) * 4),
                     "bf16 partial cached attn, one shard: the cached kernel's rows bit for bit "
                     "(T=%lld Nl=%lld Kl=%lld H=%lld)",
                     (long long)T, (long long)Nl, (long long)Kl, (long long)H);
    } else {
        double *b2 = kt_doubles(T * ldq);
        for (int64_t e = 0; e < T * ldq; e++) b2[e] = bnd[e] * (1.0 + 4.0 * (double)P * U);
        snprintf(what, sizeof what, "bf16 partial cached attn, %lld shards merged, vs twin T=%lld",
                 (long long)P, (long long)T);
        check_elems(what, got, ot, b2, T * ldq);
        free(b2);
    }
    free(sk), free(sv), free(kpos), free(part), free(got), free(scr);
}

/* The cached kernel on one sequence of T tokens (cache row stride ldk = Kl·H + 3): bit-equal to
 * the training forward's rows, decoding one position at a time and prefilling from 0 and from 5;
 * and against its twin. */
static void cached(int64_t T, int64_t Nl, int64_t Kl, int64_t H, uint64_t seed) {
    const int64_t ldq = Nl * H, ldk = Kl * H + 3, nq = T * ldq, G = Nl / Kl;
    const dims s = {1, T, Nl, Kl, H};
    float *qf = kt_floats(nq), *out = kt_floats(nq), *o = kt_floats(nq), *ot = kt_floats(nq);
    float *ref = kt_floats(nq), *scr = kt_floats(kern_attn_bf16_scratch(T));
    kern_bf16 *qh = malloc((size_t)nq * 2), *k = bf16s(T * Kl * H, seed + 1, -1.5f, 1.5f);
    kern_bf16 *v = bf16s(T * Kl * H, seed + 2, -1, 1), *kc = bf16s(T * ldk, seed, 0, 1);
    kern_bf16 *vc = bf16s(T * ldk, seed, 0, 1), *P = malloc((size_t)(Nl * T * T) * 2);
    kern_bf16 *Pt = malloc((size_t)(Nl * T * T) * 2);
    double *bnd = kt_doubles(nq);
    if (!qh || !P || !Pt) exit(1);
    kt_fill(qf, nq, seed + 3, -1.5f, 1.5f);
    kern_bf16_pack(qh, qf, nq);
    for (int64_t t = 0; t < T; t++) {
        memcpy(kc + t * ldk, k + t * Kl * H, (size_t)(Kl * H) * 2);
        memcpy(vc + t * ldk, v + t * Kl * H, (size_t)(Kl * H) * 2);
    }
    kern_attn_fwd_bf16(ctx, out, P, scr, qh, k, v, 1, T, Nl, Kl, H);
    float *cs = kt_floats(kern_attn_cached_bf16_scratch(T, T, Nl, Kl, H));
    int same = 1;
    for (int64_t p = 0; p < T; p++) { /* decode: position p against cache rows [0, p] */
        fill_nan(cs, kern_attn_cached_bf16_scratch(p, 1, Nl, Kl, H));
        kern_attn_cached_bf16(ctx, o + p * ldq, cs, qf + p * ldq, kc, vc, p, 1, Nl, Kl, H, ldk);
    }
    same &= bit_equal(o, out, (size_t)nq * 4);
    for (int64_t p0 = 0; p0 <= 5 && p0 < T; p0 += 5) { /* prefill of rows [p0, T) */
        fill_nan(o, nq);
        fill_nan(cs, kern_attn_cached_bf16_scratch(p0, T - p0, Nl, Kl, H));
        kern_attn_cached_bf16(ctx, o + p0 * ldq, cs, qf + p0 * ldq, kc, vc, p0, T - p0, Nl, Kl, H,
                              ldk);
        same &= bit_equal(o + p0 * ldq, out + p0 * ldq, (size_t)((T - p0) * ldq) * 4);
    }
    check_expect(same,
                 "bf16 cached attn T=%lld Nl=%lld Kl=%lld H=%lld: decode and prefill rows "
                 "bit-equal to the training forward's",
                 (long long)T, (long long)Nl, (long long)Kl, (long long)H);
    kern_attn_cached_bf16_ref(ot, qf, kc, vc, 0, T, Nl, Kl, H, ldk);
    kern_attn_fwd_bf16_ref(ref, Pt, qh, k, v, 1, T, Nl, Kl, H);
    check_expect(bit_equal(ot, ref, (size_t)nq * 4), "bf16 cached attn twin = training twin");
    for (int64_t i = 0; i < T; i++)
        for (int64_t h = 0; h < Nl; h++)
            for (int64_t d = 0; d < H; d++) {
                double pv = 0.0, el = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    const double p = bv(Pt[(h * T + i) * T + j]),
                                 w = fabs(bv(v[j * Kl * H + (h / G) * H + d]));
                    pv += p * w, el += p + w;
                }
                const int64_t e = i * ldq + h * H + d;
                bnd[e] = (gam((double)i + 2) * (1 + FLIP) + FLIP) * pv + U * fabs(ot[e]) +
                         TINY * (el + 2.0 * (double)i + 3.0);
            }
    char what[96];
    snprintf(what, sizeof what, "bf16 cached attn vs twin T=%lld Nl=%lld Kl=%lld", (long long)T,
             (long long)Nl, (long long)Kl);
    check_elems(what, o, ot, bnd, nq);
    for (int64_t n = 1; n <= 3; n++) part_cached(out, ot, bnd, qf, kc, vc, T, Nl, Kl, H, ldk, n);
    (void)s;
    free(qf), free(out), free(o), free(ot), free(ref), free(scr), free(qh), free(k), free(v);
    free(kc), free(vc), free(P), free(Pt), free(bnd), free(cs);
}

int main(void) {
    int status;
    if (!(ctx = kt_bf16_ctx(&status))) return status == 77 ? 77 : check_finish("kern_attn_bf16");
    static const dims shapes[] = {
        {2, 7, 4, 2, 6},   /* GQA, group of 2 */
        {1, 5, 3, 3, 4},   /* Nl = Kl */
        {2, 1, 2, 2, 3},   /* T = 1 */
        {1, 13, 3, 1, 5},  /* Kl = 1, group of 3 */
        {1, 67, 2, 1, 4},  /* crosses the 64-row causal block */
        {1, 131, 4, 2, 8}, /* three blocks, ragged last one */
        {2, 64, 2, 2, 16}, /* exactly one block */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) train(shapes[i], 10 * i + 1);
    cached(9, 4, 2, 6, 101);
    cached(70, 6, 2, 8, 102); /* prefill crosses a block; decode groups of 3 heads */
    cached(20, 2, 2, 5, 103);
    ring_case((dims){1, 12, 4, 2, 6}, 3, 0, 201); /* chunks of 2, GQA */
    ring_case((dims){1, 12, 4, 2, 6}, 3, 2, 202);
    ring_case((dims){2, 20, 3, 1, 5}, 2, 1, 203); /* B = 2, a group of 3 */
    ring_case((dims){1, 280, 2, 2, 8}, 2, 0, 204); /* chunks of 70: a chunk's rows in two blocks */
    kern_bf16_ctx_destroy(ctx);
    return check_finish("kern_attn_bf16");
}
