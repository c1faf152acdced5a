/* Blockwise causal attention (kernels/attn_part.h) against the one-shot kernels (attention.h) and
 * its naive twins:
 *  - every kernel vs its double twin (fwd, merge, delta, bwd with D and with D = NULL);
 *  - one block holding every key: O, dq, dk, dv bit-equal to kern_attn_fwd / kern_attn_bwd;
 *  - a simulated ring on n = 1..4 ranks (zigzag and contiguous splits): each rank's queries attend
 *    every rank's key block in ring order, partials merged, fully masked blocks skipped (none
 *    under zigzag, n(n−1)/2 under the contiguous split); then the backward with D from the
 *    output: out, dq, dk, dv vs the one-shot kernels within the derived bound below;
 *  - random splits of the key range merged in random orders, the same way.
 *
 * The bound (first order, unit roundoff u = 2^-24; inputs q, k in [−κ, κ], v, dO in [−1, 1]).
 * For a query row seeing n keys, merged from nb blocks:
 *   σ = max Σ_c |q_c k_c|/√H: a score is off by ≤ (H+1)·σ·u on either path, which moves
 *       O = Σ p v by ≤ 2·(H+1)σu (∂O/∂s_j = p_j(v_j − O), |v − O| ≤ 2, Σ p = 1);
 *   exp (kern_expf_inl, ≤ 2 ulp = 4u) in p and in z: 8u; z, a sum of n positives in 8 lanes:
 *       (n/8 + 11)u; 1/z and e·(1/z): 2u; P·V, an n-term sum with Σ|p v| ≤ 1: n·u;
 *   a merge: the weights' l_b cancel against the 1/l_b inside O_b to first order; l, the weights
 *       and O are rounded once each: 3u per merge.
 *   E_f(n, nb) = u·(2(H+1)σ + 21 + 9n/8 + 3nb)  for one path; blockwise vs one-shot: E_f(n, nb) +
 *   E_f(n, 1). m: 2(H+1)σu absolute; l: relative (4(H+1)σ + n/4 + 30 + 3nb)u.
 * Backward, π = max Σ_c |dO_c v_c| (|dP|, |D| ≤ π):
 *   ρ(n, nb) = u·(2(H+1)σ + n/8 + 17 + 3nb), P's relative error from its score, m, exp and l;
 *   Δ = 2Hπu + H²u + H·E_f(n, nb) + nπu + ρ(n, 1)π, the error of dP − D on both paths (D from the
 *       output: H·E_f from O and H² u from the sum; the one-shot's Σ p dP: nπu + ρ·π);
 *   η = (2π(ρ(n, nb) + ρ(n, 1)) + Δ + 8πu)/√H, the error of dS_j relative to p_j;
 *   dq: κη + 4(n + nb)uκπ/√H; dk_j: Pc_j·(κη + 8·Tq·uκπ/√H); dv_j: Pc_j·(ρ(n, nb) + ρ(n, 1) +
 *   2·Tq·u), with Pc_j = Σ_i P_ij over the rows and query heads that see key j (from the one-shot
 *   P) and n = T, the most keys a row sees. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attn_part.h"
#include "kernels/seqsplit.h"
#include "ktest.h"

static const double U = 0x1.0p-24;

/* One attention problem and its one-shot answers. */
typedef struct {
    int64_t B, T, Nl, Kl, H;
    float *q, *k, *v, *dout;
    float *out, *P, *dq, *dk, *dv; /* kern_attn_fwd / kern_attn_bwd */
    double sigma, pi, kappa;
    double *Pc; /* [B, Kl, T]: Σ of P over the rows and query heads that use the key */
} problem;

static void setup(problem *p, int64_t B, int64_t T, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t nq = B * T * Nl * H, nk = B * T * Kl * H, grp = Nl / Kl;
    *p = (problem){B,
                   T,
                   Nl,
                   Kl,
                   H,
                   kt_floats(nq),
                   kt_floats(nk),
                   kt_floats(nk),
                   kt_floats(nq),
                   kt_floats(nq),
                   kt_floats(B * Nl * T * T),
                   kt_floats(nq),
                   kt_floats(nk),
                   kt_floats(nk),
                   0,
                   0,
                   1.5,
                   kt_doubles(B * Kl * T)};
    kt_fill(p->q, nq, 11, -1.5f, 1.5f);
    kt_fill(p->k, nk, 12, -1.5f, 1.5f);
    kt_fill(p->v, nk, 13, -1, 1);
    kt_fill(p->dout, nq, 14, -1, 1);
    float *scr = kt_floats(T * T);
    kern_attn_fwd(p->out, p->P, p->q, p->k, p->v, B, T, Nl, Kl, H);
    kern_attn_bwd(p->dq, p->dk, p->dv, scr, p->dout, p->P, p->q, p->k, p->v, B, T, Nl, Kl, H);
    free(scr);
    for (int64_t i = 0; i < B * Kl * T; i++) p->Pc[i] = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j <= i; j++) {
                    const float *qi = p->q + (b * T + i) * Nl * H + h * H;
                    const float *kj = p->k + (b * T + j) * Kl * H + (h / grp) * H;
                    const float *di = p->dout + (b * T + i) * Nl * H + h * H;
                    const float *vj = p->v + (b * T + j) * Kl * H + (h / grp) * H;
                    double s = 0, d = 0;
                    for (int64_t c = 0; c < H; c++) s += fabs((double)qi[c] * kj[c]);
                    for (int64_t c = 0; c < H; c++) d += fabs((double)di[c] * vj[c]);
                    p->sigma = fmax(p->sigma, s / sqrt((double)H));
                    p->pi = fmax(p->pi, d);
                    p->Pc[(b * Kl + h / grp) * T + j] += p->P[((b * Nl + h) * T + i) * T + j];
                }
}

static void problem_free(problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->dout), free(p->out), free(p->P);
    free(p->dq), free(p->dk), free(p->dv), free(p->Pc);
}

static double e_fwd(const problem *p, double n, double nb) {
    return U * (2 * ((double)p->H + 1) * p->sigma + 21 + 9 * n / 8 + 3 * nb);
}
static double rho(const problem *p, double n, double nb) {
    return U * (2 * ((double)p->H + 1) * p->sigma + n / 8 + 17 + 3 * nb);
}
/* η: the error of dS relative to p (see the top). */
static double eta(const problem *p, double n, double nb) {
    const double H = (double)p->H, pi = p->pi;
    const double delta =
        2 * H * pi * U + H * H * U + H * e_fwd(p, n, nb) + n * pi * U + rho(p, n, 1) * pi;
    return (2 * pi * (rho(p, n, nb) + rho(p, n, 1)) + delta + 8 * pi * U) / sqrt(H);
}

/* got vs want under a per-element absolute bound; prints the worst ratio. */
static void check_bound(const char *what, const float *got, const float *want, const double *bnd,
                        int64_t n) {
    double worst = 0, err = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]), r = e / bnd[i];
        if (!(r <= worst)) worst = r, at = i, err = e;
    }
    check_expect(worst <= 1, "%-44s worst |err| %.3g = %.3g of the bound %.3g (at %lld)", what, err,
                 worst, bnd[at], (long long)at);
}

/* dst[B·np, w] = the rows of src[B·T, w] at pos[np], per sequence; unpack is the inverse (+=). */
static void pack(float *dst, const float *src, const int32_t *pos, int64_t np, int64_t B, int64_t T,
                 int64_t w) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < np; i++)
            memcpy(dst + (b * np + i) * w, src + (b * T + pos[i]) * w, (size_t)w * sizeof *dst);
}
static void unpack(float *dst, const float *src, const int32_t *pos, int64_t np, int64_t B,
                   int64_t T, int64_t w) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < np; i++)
            for (int64_t c = 0; c < w; c++)
                dst[(b * T + pos[i]) * w + c] += src[(b * np + i) * w + c];
}

typedef struct {
    int64_t n;
    int32_t *pos;
} posset;

/* Query sets qs[nq] against key sets ks[nk], set i visiting key sets in order[i·nk + t]; merged
 * forward, then the backward with D from the output (d_null: D = NULL, one key set only).
 * exact: compare bit for bit; else within the bound. Returns the number of blocks skipped. */
static int64_t run_sets(const problem *p, const char *label, int nq, const posset *qs, int nk,
                        const posset *ks, const int *order, int d_null, int exact) {
    const int64_t B = p->B, T = p->T, Nl = p->Nl, Kl = p->Kl, H = p->H, NH = Nl * H, KH = Kl * H;
    float *o_all = kt_floats(B * T * NH), *dq_all = kt_floats(B * T * NH);
    float *dk_all = kt_floats(B * T * KH), *dv_all = kt_floats(B * T * KH);
    double *nb_row = kt_doubles(T);
    memset(nb_row, 0, (size_t)T * sizeof *nb_row);
    memset(o_all, 0, (size_t)(B * T * NH) * 4), memset(dq_all, 0, (size_t)(B * T * NH) * 4);
    memset(dk_all, 0, (size_t)(B * T * KH) * 4), memset(dv_all, 0, (size_t)(B * T * KH) * 4);
    float *kk[8], *vv[8], *dk[8], *dv[8];
    for (int s = 0; s < nk; s++) {
        kk[s] = kt_floats(B * ks[s].n * KH), vv[s] = kt_floats(B * ks[s].n * KH);
        dk[s] = kt_floats(B * ks[s].n * KH), dv[s] = kt_floats(B * ks[s].n * KH);
        pack(kk[s], p->k, ks[s].pos, ks[s].n, B, T, KH),
            pack(vv[s], p->v, ks[s].pos, ks[s].n, B, T, KH);
        memset(dk[s], 0, (size_t)(B * ks[s].n * KH) * 4),
            memset(dv[s], 0, (size_t)(B * ks[s].n * KH) * 4);
    }
    int64_t skipped = 0;
    for (int i = 0; i < nq; i++) {
        const int64_t n = qs[i].n, R = B * n;
        float *q = kt_floats(R * NH), *dout = kt_floats(R * NH), *o = kt_floats(R * NH);
        float *o2 = kt_floats(R * NH), *m = kt_floats(R * Nl), *l = kt_floats(R * Nl);
        float *m2 = kt_floats(R * Nl), *l2 = kt_floats(R * Nl), *D = kt_floats(R * Nl);
        float *dq = kt_floats(R * NH), *scr = kt_floats(kern_attn_part_bwd_scratch(n, T));
        pack(q, p->q, qs[i].pos, n, B, T, NH), pack(dout, p->dout, qs[i].pos, n, B, T, NH);
        int first = 1;
        for (int t = 0; t < nk; t++) {
            const posset *K = &ks[order[i * nk + t]];
            const int s = order[i * nk + t];
            if (kern_attn_part_visibility(qs[i].pos, n, K->pos, K->n) == KERN_ATTN_PART_NONE) {
                skipped++;
                continue;
            }
            kern_attn_part_fwd(first ? o : o2, first ? m : m2, first ? l : l2, scr, q, kk[s], vv[s],
                               qs[i].pos, K->pos, B, n, K->n, Nl, Kl, H);
            if (!first) kern_attn_part_merge(o, m, l, o2, m2, l2, R, Nl, H);
            first = 0;
            for (int64_t r = 0; r < n; r++) nb_row[qs[i].pos[r]] += K->pos[0] <= qs[i].pos[r];
        }
        if (!d_null) kern_attn_part_delta(D, dout, o, R, Nl, H);
        memset(dq, 0, (size_t)(R * NH) * 4);
        for (int t = 0; t < nk; t++) {
            const int s = order[i * nk + t];
            if (kern_attn_part_visibility(qs[i].pos, n, ks[s].pos, ks[s].n) == KERN_ATTN_PART_NONE)
                continue;
            kern_attn_part_bwd(dq, dk[s], dv[s], scr, dout, d_null ? NULL : D, m, l, q, kk[s],
                               vv[s], qs[i].pos, ks[s].pos, B, n, ks[s].n, Nl, Kl, H,
                               KERN_ATTN_PART_BOTH);
        }
        unpack(o_all, o, qs[i].pos, n, B, T, NH), unpack(dq_all, dq, qs[i].pos, n, B, T, NH);
        free(q), free(dout), free(o), free(o2), free(m), free(l), free(m2), free(l2), free(D);
        free(dq), free(scr);
    }
    for (int s = 0; s < nk; s++) {
        unpack(dk_all, dk[s], ks[s].pos, ks[s].n, B, T, KH);
        unpack(dv_all, dv[s], ks[s].pos, ks[s].n, B, T, KH);
        free(kk[s]), free(vv[s]), free(dk[s]), free(dv[s]);
    }
    char what[160];
    const char *names[4] = {"out", "dq", "dk", "dv"};
    const float *got[4] = {o_all, dq_all, dk_all, dv_all}, *want[4] = {p->out, p->dq, p->dk, p->dv};
    const int64_t len[4] = {B * T * NH, B * T * NH, B * T * KH, B * T * KH};
    for (int a = 0; a < 4; a++) {
        snprintf(what, sizeof what, "%s %s B=%lld T=%lld Nl=%lld Kl=%lld H=%lld", label, names[a],
                 (long long)B, (long long)T, (long long)Nl, (long long)Kl, (long long)H);
        if (exact) {
            kt_equal(what, got[a], want[a], len[a]);
            continue;
        }
        double *bnd = kt_doubles(len[a]);
        const double Tq = (double)T, kap = p->kappa, pi = p->pi, sH = sqrt((double)H);
        for (int64_t e = 0; e < len[a]; e++) {
            const int64_t row = e / (a < 2 ? NH : KH), t = row % T, b = row / T;
            const double nb = nb_row[t], nr = (double)t + 1;
            const double pc = a >= 2 ? p->Pc[(b * Kl + (e % KH) / H) * T + t] : 0;
            bnd[e] = a == 0   ? e_fwd(p, nr, nb) + e_fwd(p, nr, 1)
                     : a == 1 ? kap * eta(p, Tq, nb) + 4 * (Tq + nb) * U * kap * pi / sH
                     : a == 2 ? pc * (kap * eta(p, Tq, nq + nk) + 8 * Tq * U * kap * pi / sH)
                              : pc * (rho(p, Tq, nq + nk) + rho(p, Tq, 1) + 2 * Tq * U);
        }
        check_bound(what, got[a], want[a], bnd, len[a]);
        free(bnd);
    }
    free(o_all), free(dq_all), free(dk_all), free(dv_all), free(nb_row);
    return skipped;
}

/* The ring on n ranks: rank r's queries visit key blocks r, r−1, ..., r+1 (what arrives). */
static void ring(const problem *p, int64_t n, int zigzag) {
    posset sets[8];
    int order[64];
    for (int64_t r = 0; r < n; r++) {
        sets[r].n = p->T / n;
        sets[r].pos = malloc((size_t)sets[r].n * sizeof(int32_t));
        if (zigzag)
            kern_seq_zigzag(sets[r].pos, p->T, n, r);
        else
            kern_seq_contig(sets[r].pos, p->T, n, r);
        for (int64_t t = 0; t < n; t++) order[r * n + t] = (int)((r - t + n) % n);
    }
    char label[64];
    snprintf(label, sizeof label, "ring n=%lld %s:", (long long)n, zigzag ? "zigzag" : "contig");
    const int64_t skipped = run_sets(p, label, (int)n, sets, (int)n, sets, order, 0, 0);
    const int64_t want = zigzag ? 0 : n * (n - 1) / 2;
    check_expect(skipped == want, "%s fully masked blocks skipped: %lld (want %lld)", label,
                 (long long)skipped, (long long)want);
    for (int64_t r = 0; r < n; r++) free(sets[r].pos);
}

/* The key range cut at random into nb contiguous blocks, visited in a random order by one query
 * set holding every row. */
static void random_split(const problem *p, int nb, uint64_t seed) {
    posset all = {p->T, malloc((size_t)p->T * sizeof(int32_t))}, ks[8];
    int64_t cut[9] = {0};
    int order[8];
    uint64_t s = seed;
    for (int64_t i = 0; i < p->T; i++) all.pos[i] = (int32_t)i;
    for (int b = 1; b < nb; b++) { /* distinct ascending cuts in (0, T) */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        cut[b] = cut[b - 1] + 1 + (int64_t)((s >> 33) % (uint64_t)(p->T - cut[b - 1] - (nb - b)));
    }
    cut[nb] = p->T;
    for (int b = 0; b < nb; b++) {
        ks[b] = (posset){cut[b + 1] - cut[b], all.pos + cut[b]};
        order[b] = b;
    }
    for (int b = nb - 1; b > 0; b--) { /* Fisher-Yates */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int j = (int)((s >> 33) % (uint64_t)(b + 1)), t = order[b];
        order[b] = order[j], order[j] = t;
    }
    char label[64];
    snprintf(label, sizeof label, "%d key blocks, order %d%d%d..:", nb, order[0],
             nb > 1 ? order[1] : 0, nb > 2 ? order[2] : 0);
    run_sets(p, label, 1, &all, nb, ks, order, 0, 0);
    free(all.pos);
}

/* One block holding every key: bit-equal to the one-shot kernels with D = NULL. */
static void one_block(const problem *p) {
    posset all = {p->T, malloc((size_t)p->T * sizeof(int32_t))};
    const int order[1] = {0};
    for (int64_t i = 0; i < p->T; i++) all.pos[i] = (int32_t)i;
    run_sets(p, "one block, D=NULL:", 1, &all, 1, &all, order, 1, 1);
    free(all.pos);
}

/* m of kernel vs twin: equal infinities (rows that see nothing), finite ones within k·eps. */
static void check_m(const char *what, const float *a, const float *b, int64_t n, double k) {
    int inf_ok = 1;
    float *fa = kt_floats(n), *fb = kt_floats(n);
    for (int64_t i = 0; i < n; i++) {
        inf_ok &= isinf(a[i]) == isinf(b[i]);
        fa[i] = isinf(a[i]) ? 0.0f : a[i], fb[i] = isinf(b[i]) ? 0.0f : b[i];
    }
    check_expect(inf_ok, "%s: the rows that see nothing agree (m = -inf)", what);
    kt_close(what, fa, fb, n, k);
    free(fa), free(fb);
}

/* Every kernel against its double twin on a block cut by the mask (rank 0's queries against rank
 * 1's keys under the zigzag split on 2 ranks, or the whole sequence when T is odd). */
static void twins(const problem *p) {
    const int64_t B = p->B, T = p->T, Nl = p->Nl, Kl = p->Kl, H = p->H, NH = Nl * H, KH = Kl * H;
    const int two = T % 4 == 0;
    const int64_t n = two ? T / 2 : T, R = B * n;
    int32_t *qp = malloc((size_t)n * sizeof *qp), *kp = malloc((size_t)n * sizeof *kp);
    for (int64_t i = 0; i < n; i++) qp[i] = kp[i] = (int32_t)i;
    if (two) kern_seq_zigzag(qp, T, 2, 0), kern_seq_zigzag(kp, T, 2, 1);
    float *q = kt_floats(R * NH), *k = kt_floats(R * KH), *v = kt_floats(R * KH);
    float *dout = kt_floats(R * NH), *o[2], *m[2], *l[2], *D[2], *dq[2], *dk[2], *dv[2];
    for (int a = 0; a < 2; a++) {
        o[a] = kt_floats(R * NH), m[a] = kt_floats(R * Nl), l[a] = kt_floats(R * Nl);
        D[a] = kt_floats(R * Nl), dq[a] = kt_floats(R * NH), dk[a] = kt_floats(R * KH);
        dv[a] = kt_floats(R * KH);
    }
    float *scr = kt_floats(kern_attn_part_bwd_scratch(n, n));
    pack(q, p->q, qp, n, B, T, NH), pack(dout, p->dout, qp, n, B, T, NH);
    pack(k, p->k, kp, n, B, T, KH), pack(v, p->v, kp, n, B, T, KH);
    char what[128], shape[64];
    snprintf(shape, sizeof shape, "B=%lld Tq=Tk=%lld Nl=%lld Kl=%lld H=%lld", (long long)B,
             (long long)n, (long long)Nl, (long long)Kl, (long long)H);
    kern_attn_part_fwd(o[0], m[0], l[0], scr, q, k, v, qp, kp, B, n, n, Nl, Kl, H);
    kern_attn_part_fwd_ref(o[1], m[1], l[1], q, k, v, qp, kp, B, n, n, Nl, Kl, H);
    /* as the one-shot kernel against its twin: H-term scores, exp, a sum: k = 16 */
    snprintf(what, sizeof what, "part fwd o vs ref %s", shape);
    kt_close(what, o[0], o[1], R * NH, 16);
    snprintf(what, sizeof what, "part fwd m vs ref %s", shape);
    check_m(what, m[0], m[1], R * Nl, 16);
    snprintf(what, sizeof what, "part fwd l vs ref %s", shape);
    kt_close(what, l[0], l[1], R * Nl, 16);
    /* delta: an H-term dot, k = 8 */
    kern_attn_part_delta(D[0], dout, o[1], R, Nl, H);
    kern_attn_part_delta_ref(D[1], dout, o[1], R, Nl, H);
    snprintf(what, sizeof what, "part delta vs ref %s", shape);
    kt_close(what, D[0], D[1], R * Nl, 8);
    for (int dn = 0; dn < 2; dn++) { /* with D, then D = NULL; onto 0.5s: they accumulate */
        for (int a = 0; a < 2; a++) {
            for (int64_t i = 0; i < R * NH; i++) dq[a][i] = 0.5f;
            for (int64_t i = 0; i < R * KH; i++) dk[a][i] = dv[a][i] = 0.5f;
        }
        kern_attn_part_bwd(dq[0], dk[0], dv[0], scr, dout, dn ? NULL : D[1], m[1], l[1], q, k, v,
                           qp, kp, B, n, n, Nl, Kl, H, KERN_ATTN_PART_BOTH);
        kern_attn_part_bwd_ref(dq[1], dk[1], dv[1], dout, dn ? NULL : D[1], m[1], l[1], q, k, v, qp,
                               kp, B, n, n, Nl, Kl, H);
        const char *nm[3] = {"dq", "dk", "dv"};
        const float *g[3][2] = {{dq[0], dq[1]}, {dk[0], dk[1]}, {dv[0], dv[1]}};
        for (int a = 0; a < 3; a++) { /* as the one-shot backward against its twin: k = 64 */
            snprintf(what, sizeof what, "part bwd%s %s += vs ref %s", dn ? " D=NULL" : "", nm[a],
                     shape);
            kt_close(what, g[a][0], g[a][1], R * (a ? KH : NH), 64);
        }
    }
    /* merge: partials of two halves of the keys, merged both ways, vs the twin's merge */
    if (n >= 2) {
        const int64_t h1 = n / 2;
        float *o2 = kt_floats(R * NH), *m2 = kt_floats(R * Nl), *l2 = kt_floats(R * Nl);
        float *k1 = kt_floats(B * h1 * KH), *v1 = kt_floats(B * h1 * KH);
        float *k2 = kt_floats(B * (n - h1) * KH), *v2 = kt_floats(B * (n - h1) * KH);
        pack(k1, p->k, kp, h1, B, T, KH), pack(v1, p->v, kp, h1, B, T, KH);
        pack(k2, p->k, kp + h1, n - h1, B, T, KH), pack(v2, p->v, kp + h1, n - h1, B, T, KH);
        kern_attn_part_fwd(o[0], m[0], l[0], scr, q, k1, v1, qp, kp, B, n, h1, Nl, Kl, H);
        kern_attn_part_fwd(o2, m2, l2, scr, q, k2, v2, qp, kp + h1, B, n, n - h1, Nl, Kl, H);
        memcpy(o[1], o[0], (size_t)(R * NH) * 4), memcpy(m[1], m[0], (size_t)(R * Nl) * 4);
        memcpy(l[1], l[0], (size_t)(R * Nl) * 4);
        kern_attn_part_merge(o[0], m[0], l[0], o2, m2, l2, R, Nl, H);
        kern_attn_part_merge_ref(o[1], m[1], l[1], o2, m2, l2, R, Nl, H);
        /* the weights in double, one rounding of each output: k = 2 */
        snprintf(what, sizeof what, "part merge o vs ref %s", shape);
        kt_close(what, o[0], o[1], R * NH, 2);
        snprintf(what, sizeof what, "part merge l vs ref %s", shape);
        kt_close(what, l[0], l[1], R * Nl, 2);
        free(o2), free(m2), free(l2), free(k1), free(v1), free(k2), free(v2);
    }
    free(qp), free(kp), free(q), free(k), free(v), free(dout), free(scr);
    for (int a = 0; a < 2; a++) {
        free(o[a]), free(m[a]), free(l[a]), free(D[a]), free(dq[a]), free(dk[a]), free(dv[a]);
    }
}

/* The backward in halves (KERN_ATTN_PART_ROWS: every head's P, dS apart; then _KEYS) against
 * kern_attn_part_bwd, bit for bit: the query rows of zigzag rank 0 of 2 (all rows when 4 does not
 * divide T) against every key, onto dq, dk, dv that already hold sums (as a ring's do). */
static void halves(const problem *p) {
    const int64_t B = p->B, T = p->T, Nl = p->Nl, Kl = p->Kl, H = p->H, NH = Nl * H, KH = Kl * H;
    const int64_t n = T % 4 == 0 ? T / 2 : T, R = B * n;
    int32_t *qp = malloc((size_t)n * sizeof *qp), *kp = malloc((size_t)T * sizeof *kp);
    if (!qp || !kp) exit(1);
    if (n < T)
        kern_seq_zigzag(qp, T, 2, 0);
    else
        for (int64_t t = 0; t < T; t++) qp[t] = (int32_t)t;
    for (int64_t t = 0; t < T; t++) kp[t] = (int32_t)t;
    float *q = kt_floats(R * NH), *dout = kt_floats(R * NH), *o = kt_floats(R * NH);
    float *ml = kt_floats(3 * R * Nl), *g[2];
    const int64_t ng = R * NH + 2 * B * T * KH;
    float *scr = kt_floats(kern_attn_part_bwd_halves_scratch(B, Nl, n, T) +
                           kern_attn_part_fwd_scratch(n, T));
    pack(q, p->q, qp, n, B, T, NH), pack(dout, p->dout, qp, n, B, T, NH);
    kern_attn_part_fwd(o, ml, ml + R * Nl, scr, q, p->k, p->v, qp, kp, B, n, T, Nl, Kl, H);
    kern_attn_part_delta(ml + 2 * R * Nl, dout, o, R, Nl, H);
    for (int a = 0; a < 2; a++) {
        g[a] = kt_floats(ng);
        for (int64_t e = 0; e < ng; e++) g[a][e] = 0.01f * (float)(e % 7) - 0.03f;
    }
    float *dq[2] = {g[0], g[1]}, *dk[2] = {g[0] + R * NH, g[1] + R * NH};
    float *dv[2] = {dk[0] + B * T * KH, dk[1] + B * T * KH};
    kern_attn_part_bwd(dq[0], dk[0], dv[0], scr, dout, ml + 2 * R * Nl, ml, ml + R * Nl, q, p->k,
                       p->v, qp, kp, B, n, T, Nl, Kl, H, KERN_ATTN_PART_BOTH);
    for (int h = KERN_ATTN_PART_ROWS; h <= KERN_ATTN_PART_KEYS; h++)
        kern_attn_part_bwd(dq[1], dk[1], dv[1], scr, dout, ml + 2 * R * Nl, ml, ml + R * Nl, q,
                           p->k, p->v, qp, kp, B, n, T, Nl, Kl, H, (kern_attn_part_half)h);
    char what[96];
    snprintf(what, sizeof what, "halves = whole backward B=%lld T=%lld Nl=%lld Kl=%lld H=%lld",
             (long long)B, (long long)T, (long long)Nl, (long long)Kl, (long long)H);
    kt_equal(what, g[1], g[0], ng);
    free(qp), free(kp), free(q), free(dout), free(o), free(ml), free(scr), free(g[0]), free(g[1]);
}

int main(void) {
    static const int64_t shapes[][5] = {
        {2, 12, 4, 2, 6},  /* GQA, group of 2 */
        {1, 1, 2, 2, 3},   /* T = 1 */
        {1, 24, 3, 1, 5},  /* Kl = 1 */
        {1, 72, 2, 1, 4},  /* crosses the 64-row block */
        {1, 144, 4, 2, 8}, /* three blocks, ragged */
        {2, 64, 2, 2, 16}, /* exactly one block */
    };
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int64_t *s = shapes[c];
        problem p;
        setup(&p, s[0], s[1], s[2], s[3], s[4]);
        one_block(&p);
        twins(&p);
        halves(&p);
        for (int64_t n = 1; n <= 4; n++) {
            if (p.T % (2 * n) == 0) ring(&p, n, 1);
            if (n > 1 && p.T % n == 0 && c % 2 == 0) ring(&p, n, 0);
        }
        for (int nb = 2; nb <= 5 && nb <= p.T; nb += 3) random_split(&p, nb, 7 + (uint64_t)c);
        problem_free(&p);
    }
    return check_finish("test_kern_attn_part");
}
