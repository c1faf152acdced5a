/* The grouped SwiGLU MLP on bf16 inputs (kernels/moe_bf16.h) on the path MESHTRAIN_BF16_PATH
 * forces (unset: auto), against its naive twin in double. A path this CPU lacks skips (exit 77).
 * CTest runs one process per path.
 *
 * Shapes: experts taking 0, 1, 7, 33 and 100 rows, D and F odd (and F > D, D > F).
 *
 * The bound, per element of each of the nine products. A product c = Σ_q x_q·y_q (+ c₀) of K
 * bf16 pairs: the path's fp32 sum is within γ_{K+1}·(Σ|x·y| + |c₀|) of the exact sum of the
 * inputs' products (any order of summation; γ_n = n·u/(1 − n·u), u = 2^-24), plus the flush of
 * denormals on the oneDNN paths, 2^-126·(Σ(|x| + |y|) + 2K + 1) (see test_gemm_bf16.c); the twin
 * rounds its double sum once (u·|ref|). Where an input is an intermediate the path rounded to
 * bf16 itself (h, da, db) the twin's own rounding of its own value may differ by one bf16 step;
 * the product then also differs by Σ|Δx|·|y| + Σ|x|·|Δy| (Δ: path's bf16 input − twin's), and
 * that term is added. So each intermediate is checked on its own first:
 *   - a, b, dh (as da's factor) and dW_down: inputs shared with the twin: the bound above;
 *   - h = SwiGLU of the path's a, b (the fp32 kernel's tolerance, k = 8, test_swiglu.c), hb its
 *     bf16 rounding bit for bit; da, db within |∂/∂dh|·(dh's bound) + the SwiGLU backward's
 *     tolerance (k = 16), dab, dbb their roundings bit for bit;
 *   - ys, dxs (K = 2F: the two products summed in fp32), dW_gate, dW_up: the bound plus the
 *     propagated term.
 * The backward runs on the path's forward values (a, b, hb), the same for path and twin. Each
 * line prints the worst element as a fraction of its bound over all experts.
 *
 * The weight part alone (kern_moe_mlp_dw_bf16, a split backward's), from the same g0 on the
 * backward's own bf16 operands (dys, xs, and the path's hb, dab, dbb): the three dW bit for bit
 * the whole backward's, and against its twin on those same inputs within the bound above with no
 * propagated term (the inputs are shared). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/moe_bf16.h"
#include "kernels/swiglu.h"
#include "ktest.h"

static kern_bf16_ctx *ctx;

/* n bf16 values uniform in [lo, hi) from seed. */
static kern_bf16 *bf16s(int64_t n, uint64_t seed, float lo, float hi) {
    float *f = kt_floats(n);
    kern_bf16 *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (!h) exit(1);
    kt_fill(f, n, seed, lo, hi);
    kern_bf16_pack(h, f, n);
    free(f);
    return h;
}

/* A [rows, cols] bf16 matrix (stored [rows, cols], or [cols, rows] when t) as dense doubles. */
static double *dense(const kern_bf16 *x, int64_t rows, int64_t cols, int t) {
    double *d = kt_doubles(rows * cols);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            d[i * cols + j] = kern_bf16_val(t ? x[j * rows + i] : x[i * cols + j]);
    return d;
}

/* The path's bf16 intermediate minus the twin's, dense (as `dense`). */
static double *delta(const kern_bf16 *x, const kern_bf16 *xr, int64_t rows, int64_t cols, int t) {
    double *d = dense(x, rows, cols, t), *r = dense(xr, rows, cols, t);
    for (int64_t i = 0; i < rows * cols; i++) d[i] -= r[i];
    free(r);
    return d;
}

/* One product c[M, N] = A[M, K]·B[K, N] (+ c0) under the bound (dA, dB: the propagated
 * differences, or NULL); the worst element's fraction of its bound raised into *worst. */
static void bound(double *worst, const float *c, const float *ref, const float *c0, const double *A,
                  const double *dA, const double *B, const double *dB, int64_t M, int64_t N,
                  int64_t K) {
    const double u = 0x1p-24, tiny = 0x1p-126, n = (double)(K + 1), g = n * u / (1.0 - n * u);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double sab = c0 ? fabs((double)c0[i * N + j]) : 0.0, sabs = 2.0 * (double)K + 1.0;
            double prop = 0.0;
            for (int64_t q = 0; q < K; q++) {
                const double a = A[i * K + q], b = B[q * N + j];
                sab += fabs(a * b);
                sabs += fabs(a) + fabs(b);
                if (dA) prop += fabs(dA[i * K + q] * b);
                if (dB) prop += fabs(a * dB[q * N + j]);
            }
            const double r = ref[i * N + j];
            const double bd = g * sab + tiny * sabs + u * fabs(r) + prop * (1.0 + 4.0 * u);
            const double dev = fabs((double)c[i * N + j] - r) / bd;
            if (!(dev <= *worst)) *worst = dev; /* NaN is the worst */
        }
}

/* The [n, F] matrices [x | y] side by side ([n, 2F]), and [pᵀ ; qᵀ] stacked ([2F, D]) from p, q
 * [D, F]: dxs's two products as one sum of 2F terms. */
static double *side(const double *x, const double *y, int64_t n, int64_t F) {
    double *s = kt_doubles(n * 2 * F);
    for (int64_t i = 0; i < n; i++)
        for (int64_t f = 0; f < F; f++)
            s[i * 2 * F + f] = x[i * F + f], s[i * 2 * F + F + f] = y[i * F + f];
    return s;
}
static double *stack_t(const kern_bf16 *p, const kern_bf16 *q, int64_t D, int64_t F) {
    double *pt = dense(p, F, D, 1), *qt = dense(q, F, D, 1), *s = kt_doubles(2 * F * D);
    memcpy(s, pt, (size_t)(F * D) * sizeof *s);
    memcpy(s + F * D, qt, (size_t)(F * D) * sizeof *s);
    free(pt), free(qt);
    return s;
}

enum { P_A, P_B, P_YS, P_DWD, P_DA, P_DB, P_DXS, P_DWG, P_DWU, P_N };
static const char *const names[P_N] = {"a = xs·wg",
                                       "b = xs·wu",
                                       "ys = hb·wd",
                                       "dwd += hbT·dys",
                                       "da (dh = dys·wdT)",
                                       "db (dh = dys·wdT)",
                                       "dxs = da·wgT + db·wuT",
                                       "dwg += xsT·da",
                                       "dwu += xsT·db"};

/* da, db vs the twin's: |∂/∂dh|·(dh's bound) + the SwiGLU backward's tolerance (k = 16). */
static void dswiglu_bound(double *wa, double *wb, const float *da, const float *db,
                          const float *dar, const float *dbr, const float *a, const float *b,
                          const double *dys, const double *wdt, int64_t n, int64_t D, int64_t F) {
    const double u = 0x1p-24, tiny = 0x1p-126, g = (D + 1) * u / (1.0 - (D + 1) * u);
    for (int64_t i = 0; i < n; i++)
        for (int64_t f = 0; f < F; f++) {
            double sab = 0, sabs = 2.0 * (double)D + 1.0, dh = 0;
            for (int64_t d = 0; d < D; d++) {
                const double x = dys[i * D + d], y = wdt[d * F + f];
                sab += fabs(x * y), sabs += fabs(x) + fabs(y), dh += x * y;
            }
            const double bdh = g * sab + tiny * sabs + u * fabs(dh);
            const double s = 1.0 / (1.0 + exp(-(double)a[i * F + f]));
            const double fa = s * (1.0 + a[i * F + f] * (1.0 - s)) * b[i * F + f];
            const double fb = a[i * F + f] * s;
            const int64_t p = i * F + f;
            const double ta = 16.0 * FLT_EPSILON * (fabs(da[p]) + fabs(dar[p]) + 1.0);
            const double tb = 16.0 * FLT_EPSILON * (fabs(db[p]) + fabs(dbr[p]) + 1.0);
            const double ea = fabs((double)da[p] - dar[p]) / (fabs(fa) * bdh + ta);
            const double eb = fabs((double)db[p] - dbr[p]) / (fabs(fb) * bdh + tb);
            if (!(ea <= *wa)) *wa = ea;
            if (!(eb <= *wb)) *wb = eb;
        }
}

/* hb (dab, dbb) equal bit for bit to the path's own fp32 values rounded. */
static int rounded_of(const kern_bf16 *hb, const float *h, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (hb[i] != kern_bf16_of(h[i])) return 0;
    return 1;
}

typedef struct { /* one side's values (the path's, or the twin's) */
    float *ys, *a, *b, *h, *dxs, *da, *db, *g[3];
    kern_bf16 *hb, *dab, *dbb;
} side_vals;

static void vals_alloc(side_vals *v, int64_t n, int64_t E, int64_t D, int64_t F, const float *g0) {
    const int64_t nf = n * F > 0 ? n * F : 1;
    v->ys = kt_floats(n * D), v->dxs = kt_floats(n * D);
    v->a = kt_floats(nf), v->b = kt_floats(nf), v->h = kt_floats(nf);
    v->da = kt_floats(nf), v->db = kt_floats(nf);
    v->hb = malloc((size_t)nf * sizeof *v->hb), v->dab = malloc((size_t)nf * sizeof *v->dab);
    v->dbb = malloc((size_t)nf * sizeof *v->dbb);
    if (!v->hb || !v->dab || !v->dbb) exit(1);
    for (int i = 0; i < 3; i++) {
        v->g[i] = kt_floats(E * D * F);
        memcpy(v->g[i], g0 + i * E * D * F, (size_t)(E * D * F) * sizeof *g0);
    }
}
static void vals_free(side_vals *v) {
    free(v->ys), free(v->dxs), free(v->a), free(v->b), free(v->h), free(v->da), free(v->db);
    free(v->hb), free(v->dab), free(v->dbb);
    for (int i = 0; i < 3; i++) free(v->g[i]);
}

/* Expert e's part of the checks (rows o..o+n). */
static void check_expert(double *w, const side_vals *p, const side_vals *r, const float *g0,
                         const kern_bf16 *xs, const kern_bf16 *dys, const kern_bf16 *wg,
                         const kern_bf16 *wu, const kern_bf16 *wd, int64_t e, int64_t o, int64_t n,
                         int64_t E, int64_t D, int64_t F) {
    const int64_t wo = e * D * F, DF = D * F;
    double *X = dense(xs + o * D, n, D, 0), *XT = dense(xs + o * D, D, n, 1);
    double *WG = dense(wg + wo, D, F, 0), *WU = dense(wu + wo, D, F, 0);
    double *WD = dense(wd + wo, F, D, 0), *WDT = dense(wd + wo, D, F, 1);
    double *HB = dense(p->hb + o * F, n, F, 0), *HBT = dense(p->hb + o * F, F, n, 1);
    double *dHB = delta(p->hb + o * F, r->hb + o * F, n, F, 0);
    double *DY = dense(dys + o * D, n, D, 0);
    double *DA = dense(p->dab + o * F, n, F, 0), *DB = dense(p->dbb + o * F, n, F, 0);
    double *dDA = delta(p->dab + o * F, r->dab + o * F, n, F, 0);
    double *dDB = delta(p->dbb + o * F, r->dbb + o * F, n, F, 0);
    double *S = side(DA, DB, n, F), *dS = side(dDA, dDB, n, F),
           *WT = stack_t(wg + wo, wu + wo, D, F);
    bound(&w[P_A], p->a + o * F, r->a + o * F, NULL, X, NULL, WG, NULL, n, F, D);
    bound(&w[P_B], p->b + o * F, r->b + o * F, NULL, X, NULL, WU, NULL, n, F, D);
    bound(&w[P_YS], p->ys + o * D, r->ys + o * D, NULL, HB, dHB, WD, NULL, n, D, F);
    bound(&w[P_DWD], p->g[2] + wo, r->g[2] + wo, g0 + 2 * E * DF + wo, HBT, NULL, DY, NULL, F, D,
          n);
    dswiglu_bound(&w[P_DA], &w[P_DB], p->da + o * F, p->db + o * F, r->da + o * F, r->db + o * F,
                  p->a + o * F, p->b + o * F, DY, WDT, n, D, F);
    bound(&w[P_DXS], p->dxs + o * D, r->dxs + o * D, NULL, S, dS, WT, NULL, n, D, 2 * F);
    bound(&w[P_DWG], p->g[0] + wo, r->g[0] + wo, g0 + wo, XT, NULL, DA, dDA, D, F, n);
    bound(&w[P_DWU], p->g[1] + wo, r->g[1] + wo, g0 + E * DF + wo, XT, NULL, DB, dDB, D, F, n);
    free(X), free(XT), free(WG), free(WU), free(WD), free(WDT), free(HB), free(HBT), free(dHB);
    free(DY), free(DA), free(DB), free(dDA), free(dDB), free(S), free(dS), free(WT);
}

/* The weight part alone on p's operands: bit for bit p's gradients (the whole backward's), and
 * within the bound of its twin's on the same inputs. */
static void dw_alone(const side_vals *p, const float *g0, const kern_bf16 *xs, const kern_bf16 *dys,
                     const int64_t *offs, int64_t E, int64_t D, int64_t F, const char *what) {
    const int64_t W = E * D * F;
    float *g = kt_floats(3 * W), *gr = kt_floats(3 * W);
    memcpy(g, g0, (size_t)(3 * W) * sizeof *g0);
    memcpy(gr, g0, (size_t)(3 * W) * sizeof *g0);
    kern_moe_mlp_dw_bf16(ctx, g, g + W, g + 2 * W, dys, xs, p->dab, p->dbb, p->hb, offs, E, D, F);
    kern_moe_mlp_dw_bf16_ref(gr, gr + W, gr + 2 * W, dys, xs, p->dab, p->dbb, p->hb, offs, E, D, F);
    int same = 1;
    for (int i = 0; i < 3; i++) same &= !memcmp(g + i * W, p->g[i], (size_t)W * sizeof *g);
    check_expect(same, "%s: the weight part alone bit for bit the whole backward's dW", what);
    double w[3] = {0, 0, 0};
    for (int64_t e = 0; e < E; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - o, wo = e * D * F;
        double *XT = dense(xs + o * D, D, n, 1), *HBT = dense(p->hb + o * F, F, n, 1);
        double *DY = dense(dys + o * D, n, D, 0), *DA = dense(p->dab + o * F, n, F, 0);
        double *DB = dense(p->dbb + o * F, n, F, 0);
        bound(&w[0], g + 2 * W + wo, gr + 2 * W + wo, g0 + 2 * W + wo, HBT, NULL, DY, NULL, F, D,
              n);
        bound(&w[1], g + wo, gr + wo, g0 + wo, XT, NULL, DA, NULL, D, F, n);
        bound(&w[2], g + W + wo, gr + W + wo, g0 + W + wo, XT, NULL, DB, NULL, D, F, n);
        free(XT), free(HBT), free(DY), free(DA), free(DB);
    }
    static const char *const dn[3] = {"dw alone: dwd", "dw alone: dwg", "dw alone: dwu"};
    for (int i = 0; i < 3; i++) {
        const int bad = !(w[i] <= 1.0);
        printf("%-4s %s %-24s worst %.3g of the bound\n", bad ? "FAIL" : "ok", what, dn[i], w[i]);
        if (bad) check_count_failure();
    }
    free(g), free(gr);
}

/* Experts taking cnt[e] rows each, widths D, F. */
static void mlp_case(const int64_t *cnt, int64_t E, int64_t D, int64_t F, uint64_t seed) {
    int64_t offs[16] = {0};
    for (int64_t e = 0; e < E; e++) offs[e + 1] = offs[e] + cnt[e];
    const int64_t n = offs[E], W = E * D * F;
    kern_bf16 *xs = bf16s(n * D, seed, -1, 1), *dys = bf16s(n * D, seed + 1, -1, 1);
    kern_bf16 *wg = bf16s(W, seed + 2, -0.5f, 0.5f), *wu = bf16s(W, seed + 3, -0.5f, 0.5f),
              *wd = bf16s(W, seed + 4, -0.5f, 0.5f);
    float *g0 = kt_floats(3 * W), *hr = kt_floats(n * F > 0 ? n * F : 1);
    kt_fill(g0, 3 * W, seed + 5, -1, 1);
    side_vals p, r;
    vals_alloc(&p, n, E, D, F, g0);
    vals_alloc(&r, n, E, D, F, g0);
    kern_moe_mlp_fwd_bf16(ctx, p.ys, p.a, p.b, p.h, p.hb, xs, wg, wu, wd, offs, E, D, F);
    kern_moe_mlp_fwd_bf16_ref(r.ys, r.a, r.b, r.h, r.hb, xs, wg, wu, wd, offs, E, D, F);
    kern_moe_mlp_bwd_bf16(ctx, p.dxs, p.g[0], p.g[1], p.g[2], p.da, p.db, p.dab, p.dbb, dys, xs,
                          p.a, p.b, p.hb, wg, wu, wd, offs, E, D, F);
    kern_moe_mlp_bwd_bf16_ref(r.dxs, r.g[0], r.g[1], r.g[2], r.da, r.db, r.dab, r.dbb, dys, xs, p.a,
                              p.b, p.hb, wg, wu, wd, offs, E, D, F);
    char what[160];
    snprintf(what, sizeof what, "moe_bf16 n=%lld E=%lld D=%lld F=%lld", (long long)n, (long long)E,
             (long long)D, (long long)F);
    kern_swiglu_fwd_ref(hr, p.a, p.b, n * F);
    char sub[200];
    snprintf(sub, sizeof sub, "%s h = swiglu(a, b) of the path's a, b", what);
    kt_close(sub, p.h, hr, n * F, 8);
    check_expect(rounded_of(p.hb, p.h, n * F) && rounded_of(p.dab, p.da, n * F) &&
                     rounded_of(p.dbb, p.db, n * F),
                 "%s: hb, dab, dbb the path's h, da, db rounded to bf16", what);
    double w[P_N] = {0};
    for (int64_t e = 0; e < E; e++)
        check_expert(w, &p, &r, g0, xs, dys, wg, wu, wd, e, offs[e], cnt[e], E, D, F);
    for (int i = 0; i < P_N; i++) {
        const int bad = !(w[i] <= 1.0);
        printf("%-4s %s %-24s worst %.3g of the bound\n", bad ? "FAIL" : "ok", what, names[i],
               w[i]);
        if (bad) check_count_failure();
    }
    /* an expert with no rows leaves its accumulated gradients as they were */
    for (int64_t e = 0; e < E; e++)
        if (cnt[e] == 0)
            for (int i = 0; i < 3; i++)
                if (memcmp(p.g[i] + e * D * F, g0 + i * W + e * D * F,
                           (size_t)(D * F) * sizeof *g0) != 0)
                    check_expect(0, "%s: expert %lld with no rows leaves its gradients", what,
                                 (long long)e);
    dw_alone(&p, g0, xs, dys, offs, E, D, F, what);
    vals_free(&p), vals_free(&r);
    free(xs), free(dys), free(wg), free(wu), free(wd), free(g0), free(hr);
}

int main(void) {
    int status = 0;
    ctx = kt_bf16_ctx(&status);
    if (!ctx) return status == 77 ? 77 : check_finish("test_kern_moe_bf16");
    static const int64_t c5[] = {0, 1, 7, 33, 100}, c3[] = {33, 0, 7}, c1[] = {1};
    mlp_case(c5, 5, 19, 27, 101);
    mlp_case(c3, 3, 45, 13, 201);
    mlp_case(c1, 1, 7, 9, 301);
    check_expect(kern_bf16_ctx_fallbacks(ctx) == 0, "no product fell back from oneDNN (%lld)",
                 (long long)kern_bf16_ctx_fallbacks(ctx));
    kern_bf16_ctx_destroy(ctx);
    return check_finish("test_kern_moe_bf16");
}
