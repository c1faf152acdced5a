/* The mixture-of-experts kernels (kernels/moe.h) against independent truth:
 *  - the router against its twin (softmax, lse, the renormalised weights; the choices exactly),
 *    ties going to the lower expert index;
 *  - the dispatch plan equal to its quadratic twin, bit for bit, with and without a capacity, in
 *    groups of G rows and with explicit groups and counters carried over (inference); the kept
 *    slots plus the dropped ones are M·k, and no group gives an expert more than its capacity;
 *  - dispatch then combine with weights 1/k (identity experts) returns the input exactly: any
 *    input for k = 1, 2; for k = 4, 8 inputs of 16 significant bits, so that every partial sum
 *    j·x/k is a float (a 24-bit input's 3x/4 already rounds); within 2 ulp for k = 3;
 *  - combine, its backward, the router's backward and the grouped SwiGLU MLP against their twins,
 *    and every backward against central finite differences in double.
 * Tolerance: |a − b| ≤ k·FLT_EPSILON·(|a| + |b| + 1), k stated at each check. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/moe.h"
#include "ktest.h"

static int32_t *ints(int64_t n) {
    int32_t *p = calloc((size_t)n + 1, sizeof *p);
    if (!p) exit(1);
    return p;
}

/* ---------------------------------------------------------------- router */

static void router_case(int64_t M, int64_t E, int64_t k, int ties) {
    float *l = kt_floats(M * E), *p = kt_floats(M * E), *pr = kt_floats(M * E), *lse = kt_floats(M),
          *lser = kt_floats(M), *w = kt_floats(M * k), *wr = kt_floats(M * k);
    int32_t *idx = ints(M * k), *idxr = ints(M * k);
    char what[128];
    kt_fill(l, M * E, 11 + (uint64_t)E, -3, 3);
    if (ties) /* quantised logits: many exact ties */
        for (int64_t i = 0; i < M * E; i++) l[i] = floorf(l[i]);
    kern_router_fwd(p, lse, idx, w, l, M, E, k);
    kern_router_fwd_ref(pr, lser, idxr, wr, l, M, E, k);
    snprintf(what, sizeof what, "router M=%lld E=%lld k=%lld%s", (long long)M, (long long)E,
             (long long)k, ties ? " (ties)" : "");
    check_expect(memcmp(idx, idxr, (size_t)(M * k) * sizeof *idx) == 0, "%s: choices = twin's",
                 what);
    int order = 1; /* largest first, the lower index among equals */
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j + 1 < k; j++) {
            const float a = l[r * E + idx[r * k + j]], b = l[r * E + idx[r * k + j + 1]];
            order &= a > b || (a == b && idx[r * k + j] < idx[r * k + j + 1]);
        }
    check_expect(order, "%s: choices by logit, ties to the lower index", what);
    kt_close("router prob vs ref", p, pr, M * E, 8); /* exp ~1 ulp, a sum, a product: k = 8 */
    kt_close("router lse vs ref", lse, lser, M, 8);
    kt_close("router renormalised weights vs ref", w, wr, M * k, 8);
    free(l), free(p), free(pr), free(lse), free(lser), free(w), free(wr), free(idx), free(idxr);
}

/* ---------------------------------------------------------------- plan, dispatch, combine */

typedef struct {
    int32_t *pos, *src, *cnt;
    int64_t *offs, *kept;
} plan;

static plan plan_alloc(int64_t M, int64_t E, int64_t k, int64_t groups) {
    plan p = {ints(M * k), ints(M * k), ints(groups * E), calloc((size_t)E + 1, 8),
              calloc((size_t)E + 1, 8)};
    if (!p.offs || !p.kept) exit(1);
    return p;
}

static void plan_free(plan *p) {
    free(p->pos), free(p->src), free(p->cnt), free(p->offs), free(p->kept);
}

static int plan_equal(const plan *a, const plan *b, int64_t M, int64_t E, int64_t k, int64_t nc) {
    return !memcmp(a->pos, b->pos, (size_t)(M * k) * 4) &&
           !memcmp(a->src, b->src, (size_t)a->offs[E] * 4) &&
           !memcmp(a->offs, b->offs, (size_t)(E + 1) * 8) &&
           !memcmp(a->kept, b->kept, (size_t)E * 8) && !memcmp(a->cnt, b->cnt, (size_t)nc * 4);
}

/* Random distinct choices idx[M, k] of E experts. */
static void random_choices(int32_t *idx, int64_t M, int64_t E, int64_t k, uint64_t seed) {
    float *l = kt_floats(E), *p = kt_floats(E), w[64], lse;
    for (int64_t r = 0; r < M; r++) {
        kt_fill(l, E, seed + (uint64_t)r, -1, 1);
        kern_router_fwd(p, &lse, idx + r * k, w, l, 1, E, k);
    }
    free(l), free(p);
}

static void plan_case(int64_t M, int64_t E, int64_t k, int64_t G, int64_t cap) {
    int32_t *idx = ints(M * k);
    random_choices(idx, M, E, k, 100 + (uint64_t)(M * E * k));
    const int64_t groups = (M + G - 1) / G;
    plan a = plan_alloc(M, E, k, groups), b = plan_alloc(M, E, k, groups);
    kern_moe_plan(a.pos, a.src, a.offs, a.kept, a.cnt, idx, NULL, M, E, k, G, E, cap);
    kern_moe_plan_ref(b.pos, b.src, b.offs, b.kept, b.cnt, idx, NULL, M, E, k, G, E, cap);
    int64_t dropped = 0, kept = 0, over = 0;
    for (int64_t i = 0; i < M * k; i++) dropped += a.pos[i] < 0;
    for (int64_t e = 0; e < E; e++) kept += a.kept[e];
    for (int64_t i = 0; i < groups * E; i++) over += cap > 0 && a.cnt[i] > cap;
    check_expect(plan_equal(&a, &b, M, E, k, groups * E) && kept + dropped == M * k && over == 0 &&
                     (cap > 0 || dropped == 0),
                 "plan M=%lld E=%lld k=%lld G=%lld cap=%lld: = twin; kept %lld + dropped %lld = "
                 "M·k; no expert past its capacity in any group",
                 (long long)M, (long long)E, (long long)k, (long long)G, (long long)cap,
                 (long long)kept, (long long)dropped);
    /* inference: the same rows one at a time, each against its group's counters carried over,
     * make the same decisions */
    int32_t *grp = ints(M), *cnt = ints(groups * E), keep1 = 1;
    for (int64_t r = 0; r < M; r++) grp[r] = (int32_t)(r / G);
    plan c = plan_alloc(1, E, k, 1);
    for (int64_t r = 0; r < M; r++) {
        kern_moe_plan(c.pos, c.src, c.offs, c.kept, cnt, idx + r * k, grp + r, 1, E, k, 1, E, cap);
        for (int64_t j = 0; j < k; j++) keep1 &= (c.pos[j] >= 0) == (a.pos[r * k + j] >= 0);
    }
    check_expect(keep1 && !memcmp(cnt, a.cnt, (size_t)(groups * E) * 4),
                 "plan row by row with carried counters = whole sequence's drops");
    plan_free(&a), plan_free(&b), plan_free(&c), free(idx), free(grp), free(cnt);
}

/* Dispatch, identity experts, combine with 1/k: out == x. */
static void identity_case(int64_t M, int64_t E, int64_t k, int64_t D) {
    int32_t *idx = ints(M * k);
    random_choices(idx, M, E, k, 7);
    plan p = plan_alloc(M, E, k, 1);
    kern_moe_plan(p.pos, p.src, p.offs, p.kept, p.cnt, idx, NULL, M, E, k, M, E, 0);
    float *x = kt_floats(M * D), *xs = kt_floats(M * k * D), *out = kt_floats(M * D),
          *w = kt_floats(M * k);
    kt_fill(x, M * D, 3, -5, 5);
    for (int64_t i = 0; i < M * D && k > 2; i++) { /* 16 significant bits: j·x/k exact */
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u &= ~(uint32_t)0xff;
        memcpy(&x[i], &u, 4);
    }
    for (int64_t i = 0; i < M * k; i++) w[i] = 1.0f / (float)k;
    memset(out, 0, (size_t)(M * D) * sizeof *out);
    kern_moe_gather(xs, x, p.src, p.offs[E], D);
    kern_moe_combine(out, xs, p.pos, w, M, k, D);
    char what[96];
    snprintf(what, sizeof what, "dispatch + combine(1/k) = input, M=%lld E=%lld k=%lld",
             (long long)M, (long long)E, (long long)k);
    if ((k & (k - 1)) == 0)
        kt_equal(what, out, x, M * D);
    else
        kt_close(what, out, x, M * D, 2);
    free(x), free(xs), free(out), free(w), free(idx), plan_free(&p);
}

/* L = Σ dout·combine(ys, w) in double: a function of ys (and w) for the finite differences. */
typedef struct {
    double *ys;
    const float *dout, *w;
    const int32_t *pos;
    int64_t M, k, D;
} comb_loss;

static double comb_d(const void *ctx) {
    const comb_loss *c = ctx;
    double L = 0;
    for (int64_t i = 0; i < c->M * c->k; i++)
        for (int64_t d = 0; d < c->D && c->pos[i] >= 0; d++)
            L += (double)c->dout[(i / c->k) * c->D + d] * c->w[i] * c->ys[c->pos[i] * c->D + d];
    return L;
}

static void combine_case(int64_t M, int64_t E, int64_t k, int64_t D, int64_t cap) {
    int32_t *idx = ints(M * k);
    random_choices(idx, M, E, k, 9);
    plan p = plan_alloc(M, E, k, 1);
    kern_moe_plan(p.pos, p.src, p.offs, p.kept, p.cnt, idx, NULL, M, E, k, M, E, cap);
    const int64_t n = p.offs[E];
    float *ys = kt_floats(n * D), *w = kt_floats(M * k), *o = kt_floats(M * D),
          *orf = kt_floats(M * D), *dout = kt_floats(M * D), *dys = kt_floats(n * D),
          *dysr = kt_floats(n * D), *dw = kt_floats(M * k), *dwr = kt_floats(M * k),
          *dx = kt_floats(M * D);
    double *ysd = kt_doubles(n * D), *fd = kt_doubles(n * D);
    kt_fill(ys, n * D, 21, -1, 1);
    kt_fill(w, M * k, 22, 0, 1);
    kt_fill(o, M * D, 23, -1, 1);
    memcpy(orf, o, (size_t)(M * D) * 4);
    kt_fill(dout, M * D, 24, -1, 1);
    kern_moe_combine(o, ys, p.pos, w, M, k, D);
    kern_moe_combine_ref(orf, ys, p.pos, w, M, k, D);
    kt_close("combine vs ref", o, orf, M * D, 4);
    kern_moe_combine_bwd(dys, dw, dout, ys, p.pos, w, M, k, D);
    kern_moe_combine_bwd_ref(dysr, dwr, dout, ys, p.pos, w, M, k, D);
    kt_close("combine bwd dys vs ref", dys, dysr, n * D, 2);
    kt_close("combine bwd dw vs ref", dw, dwr, M * k, 8);
    for (int64_t i = 0; i < n * D; i++) ysd[i] = ys[i];
    comb_loss c = {ysd, dout, w, p.pos, M, k, D};
    kt_fd_grad(fd, ysd, n * D, 1e-6, comb_d, &c);
    kt_close_d("combine bwd dys vs FD(double)", dys, fd, n * D, 64);
    /* scatter_add is the gather's transpose: Σ dx·x = Σ dxs·gather(x) */
    float *x = kt_floats(M * D), *xs = kt_floats(n * D);
    kt_fill(x, M * D, 25, -1, 1);
    memset(dx, 0, (size_t)(M * D) * 4);
    kern_moe_gather(xs, x, p.src, n, D);
    kern_moe_scatter_add(dx, dys, p.pos, M, k, D);
    double l1 = 0, l2 = 0;
    for (int64_t i = 0; i < M * D; i++) l1 += (double)dx[i] * x[i];
    for (int64_t i = 0; i < n * D; i++) l2 += (double)dys[i] * xs[i];
    check_expect(fabs(l1 - l2) <= 1e-5 * (fabs(l1) + fabs(l2) + 1),
                 "scatter_add = gatherᵀ: <dx, x> %.9g = <dxs, gather(x)> %.9g (cap %lld)", l1, l2,
                 (long long)cap);
    free(ys), free(w), free(o), free(orf), free(dout), free(dys), free(dysr), free(dw), free(dwr),
        free(dx), free(ysd), free(fd), free(x), free(xs), free(idx), plan_free(&p);
}

/* ---------------------------------------------------------------- router backward */

/* L(logits) = Σ dw·w(logits) + Σ_g Σ_e ga·prob + (zs/2)·Σ lse², with the choices held fixed. */
typedef struct {
    double *l;
    const float *dw, *ga;
    const int32_t *idx;
    float zs;
    int64_t M, E, k, G;
} rb_loss;

static double rb_d(const void *ctx) {
    const rb_loss *c = ctx;
    double L = 0;
    for (int64_t r = 0; r < c->M; r++) {
        const double *l = c->l + r * c->E;
        double mx = -INFINITY, z = 0, zk = 0;
        for (int64_t e = 0; e < c->E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < c->E; e++) z += exp(l[e] - mx);
        for (int64_t j = 0; j < c->k; j++) zk += exp(l[c->idx[r * c->k + j]] - mx);
        for (int64_t j = 0; j < c->k; j++)
            L += c->dw[r * c->k + j] * exp(l[c->idx[r * c->k + j]] - mx) / zk;
        for (int64_t e = 0; e < c->E; e++) L += c->ga[(r / c->G) * c->E + e] * exp(l[e] - mx) / z;
        const double lse = mx + log(z);
        L += 0.5 * c->zs * lse * lse;
    }
    return L;
}

static void router_bwd_case(int64_t M, int64_t E, int64_t k, int64_t G) {
    float *l = kt_floats(M * E), *p = kt_floats(M * E), *lse = kt_floats(M), *w = kt_floats(M * k),
          *dw = kt_floats(M * k), *ga = kt_floats((M / G) * E), *dl = kt_floats(M * E),
          *dlr = kt_floats(M * E);
    int32_t *idx = ints(M * k);
    double *ld = kt_doubles(M * E), *fd = kt_doubles(M * E);
    kt_fill(l, M * E, 31, -2, 2);
    kt_fill(dw, M * k, 32, -1, 1);
    kt_fill(ga, (M / G) * E, 33, -1, 1);
    kern_router_fwd(p, lse, idx, w, l, M, E, k);
    const float zs = 0.3f;
    kern_router_bwd(dl, dw, idx, w, p, lse, ga, zs, M, E, k, G);
    kern_router_bwd_ref(dlr, dw, idx, w, p, lse, ga, zs, M, E, k, G);
    char what[96];
    snprintf(what, sizeof what, "router bwd vs ref M=%lld E=%lld k=%lld", (long long)M,
             (long long)E, (long long)k);
    kt_close(what, dl, dlr, M * E, 16);
    for (int64_t i = 0; i < M * E; i++) ld[i] = l[i];
    rb_loss c = {ld, dw, ga, idx, zs, M, E, k, G};
    kt_fd_grad(fd, ld, M * E, 1e-6, rb_d, &c);
    snprintf(what, sizeof what, "router bwd vs FD(double) M=%lld E=%lld k=%lld", (long long)M,
             (long long)E, (long long)k);
    kt_close_d(what, dl, fd, M * E, 256);
    free(l), free(p), free(lse), free(w), free(dw), free(ga), free(dl), free(dlr), free(idx),
        free(ld), free(fd);
}

/* ---------------------------------------------------------------- grouped SwiGLU MLP */

static void mlp_case(int64_t M, int64_t E, int64_t k, int64_t D, int64_t F) {
    int32_t *idx = ints(M * k);
    random_choices(idx, M, E, k, 41);
    plan p = plan_alloc(M, E, k, 1);
    kern_moe_plan(p.pos, p.src, p.offs, p.kept, p.cnt, idx, NULL, M, E, k, M, E, 0);
    const int64_t n = p.offs[E];
    float *xs = kt_floats(n * D), *wg = kt_floats(E * D * F), *wu = kt_floats(E * D * F),
          *wd = kt_floats(E * F * D), *ys = kt_floats(n * D), *ysr = kt_floats(n * D),
          *a = kt_floats(n * F), *b = kt_floats(n * F), *h = kt_floats(n * F),
          *ar = kt_floats(n * F), *br = kt_floats(n * F), *hr = kt_floats(n * F),
          *dys = kt_floats(n * D), *dxs = kt_floats(n * D), *dxsr = kt_floats(n * D),
          *da = kt_floats(n * F), *db = kt_floats(n * F), *dar = kt_floats(n * F),
          *dbr = kt_floats(n * F);
    float *g[3], *gr[3];
    for (int i = 0; i < 3; i++) {
        g[i] = kt_floats(E * D * F), gr[i] = kt_floats(E * D * F);
        memset(g[i], 0, (size_t)(E * D * F) * 4), memset(gr[i], 0, (size_t)(E * D * F) * 4);
    }
    kt_fill(xs, n * D, 51, -1, 1);
    kt_fill(wg, E * D * F, 52, -0.5f, 0.5f);
    kt_fill(wu, E * D * F, 53, -0.5f, 0.5f);
    kt_fill(wd, E * F * D, 54, -0.5f, 0.5f);
    kt_fill(dys, n * D, 55, -1, 1);
    kern_moe_mlp_fwd(ys, a, b, h, xs, wg, wu, wd, p.offs, E, D, F);
    kern_moe_mlp_fwd_ref(ysr, ar, br, hr, xs, wg, wu, wd, p.offs, E, D, F);
    char what[96];
    snprintf(what, sizeof what, "grouped SwiGLU fwd vs ref n=%lld E=%lld D=%lld F=%lld",
             (long long)n, (long long)E, (long long)D, (long long)F);
    kt_close(what, ys, ysr, n * D, 64); /* sums of D·F products in float: k = 64 */
    kern_moe_mlp_bwd(dxs, g[0], g[1], g[2], da, db, dys, xs, a, b, h, wg, wu, wd, p.offs, E, D, F);
    kern_moe_mlp_bwd_ref(dxsr, gr[0], gr[1], gr[2], dar, dbr, dys, xs, a, b, h, wg, wu, wd, p.offs,
                         E, D, F);
    kt_close("grouped SwiGLU bwd dxs vs ref", dxs, dxsr, n * D, 64);
    kt_close("grouped SwiGLU bwd dw_gate vs ref", g[0], gr[0], E * D * F, 64);
    kt_close("grouped SwiGLU bwd dw_up vs ref", g[1], gr[1], E * D * F, 64);
    kt_close("grouped SwiGLU bwd dw_down vs ref", g[2], gr[2], E * F * D, 64);
    for (int i = 0; i < 3; i++) free(g[i]), free(gr[i]);
    free(xs), free(wg), free(wu), free(wd), free(ys), free(ysr), free(a), free(b), free(h),
        free(ar), free(br), free(hr), free(dys), free(dxs), free(dxsr), free(da), free(db),
        free(dar), free(dbr), free(idx), plan_free(&p);
}

int main(void) {
    router_case(1, 1, 1, 0);
    router_case(7, 3, 2, 0);
    router_case(13, 8, 3, 0);
    router_case(31, 8, 8, 1);
    router_case(17, 5, 2, 1);
    plan_case(37, 5, 2, 37, 0);
    plan_case(37, 5, 2, 37, 6);
    plan_case(60, 4, 3, 12, 5);
    plan_case(61, 7, 1, 13, 1);
    plan_case(24, 8, 8, 8, 3);
    for (int64_t k = 1; k <= 8; k *= 2) identity_case(29, 8, k, 13);
    identity_case(29, 5, 3, 13);
    combine_case(19, 4, 2, 7, 0);
    combine_case(23, 3, 3, 5, 4);
    router_bwd_case(12, 6, 2, 4);
    router_bwd_case(7, 3, 1, 7);
    mlp_case(17, 4, 2, 8, 12);
    mlp_case(1, 3, 1, 5, 7);
    return check_finish("test_kern_moe");
}
