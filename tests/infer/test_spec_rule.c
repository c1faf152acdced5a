/* Speculative decoding's acceptance rule (train/infer/spec_rule.h) against independent truth:
 *  - the one-step output distribution, computed in double from the rule's pieces: the drafted
 *    token d ~ q is kept with probability min(1, p(d)/q(d)), else the token comes from
 *    norm(max(0, p − q)), so P(x) = q(x)·a(x) + (1 − Σ_d q(d)·a(d))·r(x). It must equal the
 *    target's p within 1e-12 on every case below (temperatures 0.5–1.7, top-k cuts that give p
 *    and q different supports, a drafter equal to the target, one far from it);
 *  - spec_probs equals the frequencies sample_pick draws (the drafter's q is what it samples);
 *  - chi-square tests of spec_verify's output over 20,000 seeded rounds per case against the
 *    target's distribution, at significance 0.001 (the critical value by the Wilson–Hilferty
 *    approximation; a token of probability 0 must never appear): the first output token with
 *    k = 1, and with k = 3 the second and third output tokens of the rounds that kept the ones
 *    before (the target's rows here do not depend on the tokens, so that token must follow the
 *    target's row at its position: this checks the rule at every drafted position);
 *  - greedy: the longest prefix equal to the target's argmax, the correction, the bonus.
 * V = 11, logits from a fixed LCG; the drafter's are the target's plus noise of another scale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/rng.h"
#include "train/infer/spec_rule.h"
#include "train/model/sample.h"

#define V 11
#define NSAMPLE 20000

typedef struct {
    double temperature;
    int64_t top_k;
    double spread_p, spread_q; /* scale of the target's logits; of the drafter's difference */
    int same;                  /* the drafter is the target */
} rule_case;

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void fill(float *l, int64_t n, double spread, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) l[i] = (float)(spread * ((double)(lcg(s) % 2001) / 1000.0 - 1));
}

/* The chi-square critical value for df degrees of freedom at significance 0.001. */
static double chi2_crit(int df) {
    const double z = 3.0902, a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

/* The first output token's distribution in double, from the rule's pieces. */
static double exact_dev(const double *p, const double *q) {
    double r[V], P[V] = {0}, reject = 0;
    for (int32_t d = 0; d < V; d++) {
        const double a = spec_accept_prob(p, q, d);
        P[d] += q[d] * a;
        reject += q[d] * (1 - a);
    }
    spec_residual(r, p, q, V);
    double worst = 0, sum = 0;
    for (int x = 0; x < V; x++) {
        P[x] += reject * r[x];
        sum += P[x];
        if (fabs(P[x] - p[x]) > worst) worst = fabs(P[x] - p[x]);
    }
    return fmax(worst, fabs(sum - 1));
}

/* Chi-square of output token `pos` of NSAMPLE seeded rounds of k drafts (those that kept the
 * pos tokens before it) against p, the target's row pos. */
static double chi2_out(const float *tl, const float *dl, const double *p, int k, int pos,
                       const rule_case *rc, int *df, int *impossible) {
    sample_item scratch[V];
    double q[4 * V], work[2 * V];
    int64_t count[V] = {0}, n = 0;
    for (int64_t s = 0; s < NSAMPLE; s++) {
        int32_t d[4];
        const uint64_t seed = 1000 + (uint64_t)s;
        for (int i = 0; i < k; i++) /* the drafter's rows: one per drafted position */
            d[i] = spec_draft_pick(q + i * V, dl + i * V, V, rc->temperature, rc->top_k, seed, 7, i,
                                   scratch);
        const spec_verdict v =
            spec_verify(tl, q, d, k, V, rc->temperature, rc->top_k, seed, 7, work, scratch);
        if (v.accepted < pos) continue; /* a round that ended before position pos */
        count[v.accepted > pos ? d[pos] : v.next]++;
        n++;
    }
    double chi2 = 0;
    *df = -1, *impossible = 0;
    if (n < NSAMPLE / 20) return INFINITY; /* too few rounds reached pos to test it */
    for (int x = 0; x < V; x++) {
        if (p[x] <= 0) {
            *impossible += count[x] > 0;
            continue;
        }
        const double e = p[x] * (double)n;
        chi2 += (count[x] - e) * (count[x] - e) / e;
        (*df)++;
    }
    return chi2;
}

/* sample_pick's frequencies against spec_probs (chi-square, the same significance). */
static double chi2_pick(const float *l, const rule_case *rc, int *df) {
    sample_item scratch[V];
    double p[V];
    int64_t count[V] = {0};
    spec_probs(p, l, V, rc->temperature, rc->top_k, scratch);
    for (int64_t s = 0; s < NSAMPLE; s++)
        count[sample_pick(l, V, rc->temperature, rc->top_k, kern_rng_uniform(3, 5, (uint64_t)s),
                          scratch)]++;
    double chi2 = 0;
    *df = -1;
    for (int x = 0; x < V; x++)
        if (p[x] > 0) {
            const double e = p[x] * NSAMPLE;
            chi2 += (count[x] - e) * (count[x] - e) / e;
            (*df)++;
        } else if (count[x])
            return INFINITY;
    return chi2;
}

static void greedy_checks(void) {
    float tl[4 * V];
    for (int i = 0; i < 4 * V; i++) tl[i] = 0;
    tl[0 * V + 3] = 1, tl[1 * V + 5] = 1, tl[2 * V + 2] = 1, tl[3 * V + 9] = 1;
    sample_item scratch[V];
    double work[2 * V];
    const int32_t all[3] = {3, 5, 2}, mid[3] = {3, 4, 2}, first[3] = {0, 5, 2};
    const spec_verdict a = spec_verify(tl, NULL, all, 3, V, 0, 0, 1, 0, work, scratch);
    const spec_verdict b = spec_verify(tl, NULL, mid, 3, V, 0, 0, 1, 0, work, scratch);
    const spec_verdict c = spec_verify(tl, NULL, first, 3, V, 0, 0, 1, 0, work, scratch);
    const spec_verdict z = spec_verify(tl, NULL, all, 0, V, 0, 0, 1, 0, work, scratch);
    check_expect(a.accepted == 3 && a.next == 9 && b.accepted == 1 && b.next == 5 &&
                     c.accepted == 0 && c.next == 3 && z.accepted == 0 && z.next == 3,
                 "greedy: all 3 kept + bonus (%d, %d), mismatch at 2 corrected (%d, %d), at 1 "
                 "(%d, %d), k = 0 is plain greedy (%d, %d)",
                 a.accepted, a.next, b.accepted, b.next, c.accepted, c.next, z.accepted, z.next);
}

int main(void) {
    static const rule_case cases[] = {
        {1.0, 0, 2.0, 2.0, 0}, {0.7, 0, 1.5, 3.0, 0}, {1.3, 4, 2.0, 1.0, 0}, {0.8, 3, 1.0, 1.0, 0},
        {1.0, 0, 2.0, 2.0, 1}, {1.7, 6, 3.0, 0.2, 0}, {0.5, 0, 1.0, 2.0, 0},
    };
    uint64_t s = 42;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const rule_case *rc = &cases[ci];
        float tl[4 * V], dl[3 * V];
        fill(tl, 4 * V, rc->spread_p, &s);
        fill(dl, 3 * V, rc->spread_q, &s); /* the drafter: the target's rows plus noise */
        for (int i = 0; i < 3 * V; i++) dl[i] = rc->same ? tl[i] : dl[i] + tl[i];
        sample_item scratch[V];
        double p[V], q[V];
        spec_probs(p, tl, V, rc->temperature, rc->top_k, scratch);
        spec_probs(q, dl, V, rc->temperature, rc->top_k, scratch);
        const double dev = exact_dev(p, q);
        check_expect(dev <= 1e-12,
                     "case %zu (T %.1f, top-k %lld): the one-step output distribution in double "
                     "equals the target's (worst |P - p| %.2e <= 1e-12)",
                     ci, rc->temperature, (long long)rc->top_k, dev);
        int df;
        const double cp = chi2_pick(dl, rc, &df);
        check_expect(cp <= chi2_crit(df),
                     "case %zu: sample_pick draws spec_probs's q: chi2 %.1f <= %.1f (df %d, "
                     "significance 0.001)",
                     ci, cp, chi2_crit(df), df);
        static const int kpos[3][2] = {{1, 0}, {3, 1}, {3, 2}};
        for (int j = 0; j < 3; j++) {
            const int k = kpos[j][0], pos = kpos[j][1];
            int imp;
            double pp[V];
            spec_probs(pp, tl + pos * V, V, rc->temperature, rc->top_k, scratch);
            const double c2 = chi2_out(tl, dl, pp, k, pos, rc, &df, &imp);
            check_expect(imp == 0 && c2 <= chi2_crit(df),
                         "case %zu, k = %d: output token %d of %d seeded rounds vs the target's "
                         "row: chi2 %.1f <= %.1f (df %d, significance 0.001), %d draws where "
                         "p = 0",
                         ci, k, pos + 1, NSAMPLE, c2, chi2_crit(df), df, imp);
        }
    }
    greedy_checks();
    return check_finish("test_spec_rule");
}
