/* kern_attn_cached vs its naive twin (double) on decode (n = 1) and prefill/chunk (n > 1, beyond
 * the 64-row block) shapes, G = Nl/Kl of 1, 2 and 4, a cache row stride wider than Kl·H, and
 * garbage in the output and scratch beforehand; and a prefill from position 0 vs the training
 * kernel kern_attn_fwd on the same q, k, v. Tolerance |a − b| ≤ k·FLT_EPSILON·(|a| + |b| + 1),
 * k = 64. Also kern_read_sum vs a double sum. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels/attention.h"
#include "kernels/attn_cache.h"

static uint64_t lcg = 12345;
static float rnd(void) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((lcg >> 40) & 0xffffff) / (float)(1 << 24) * 2.0f - 1.0f;
}

static void run(int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H, int64_t pad) {
    const int64_t ldk = Kl * H + pad, S = p0 + n, nq = n * Nl * H;
    float *q = malloc(sizeof(float) * (size_t)nq), *kc = malloc(sizeof(float) * (size_t)(S * ldk));
    float *vc = malloc(sizeof(float) * (size_t)(S * ldk)),
          *out = malloc(sizeof(float) * (size_t)nq);
    float *ref = malloc(sizeof(float) * (size_t)nq);
    const int64_t ns = kern_attn_cached_scratch(p0, n, Nl, Kl);
    float *scr = malloc(sizeof(float) * (size_t)ns);
    for (int64_t i = 0; i < nq; i++) q[i] = 2 * rnd(), out[i] = NAN;
    for (int64_t i = 0; i < S * ldk; i++) kc[i] = 2 * rnd(), vc[i] = rnd();
    for (int64_t i = 0; i < ns; i++) scr[i] = NAN;
    kern_attn_cached(out, scr, q, kc, vc, p0, n, Nl, Kl, H, ldk);
    kern_attn_cached_ref(ref, q, kc, vc, p0, n, Nl, Kl, H, ldk);
    const double w = check_worst_dev(out, ref, nq);
    check_expect(w <= 64,
                 "attn_cached p0=%lld n=%lld Nl=%lld Kl=%lld H=%lld ldk=%lld vs naive: "
                 "worst %.1f eps units",
                 (long long)p0, (long long)n, (long long)Nl, (long long)Kl, (long long)H,
                 (long long)ldk, w);
    if (p0 == 0 && pad == 0) { /* a prefill is the training kernel's causal attention */
        float *P = malloc(sizeof(float) * (size_t)(Nl * n * n)),
              *tr = malloc(sizeof(float) * (size_t)nq);
        kern_attn_fwd(tr, P, q, kc, vc, 1, n, Nl, Kl, H);
        const double wt = check_worst_dev(out, tr, nq);
        check_expect(wt <= 64, "attn_cached prefill n=%lld vs kern_attn_fwd: worst %.1f eps units",
                     (long long)n, wt);
        free(P), free(tr);
    }
    free(q), free(kc), free(vc), free(out), free(ref), free(scr);
}

int main(void) {
    const int64_t shapes[][6] = {
        {0, 1, 1, 1, 8, 0}, {4, 1, 4, 2, 8, 0},   {12, 1, 8, 2, 16, 8}, {30, 1, 4, 1, 6, 2},
        {0, 7, 2, 1, 8, 0}, {0, 70, 4, 2, 8, 0},  {5, 9, 4, 4, 6, 0},   {3, 70, 2, 1, 10, 4},
        {0, 1, 3, 3, 4, 0}, {17, 3, 6, 2, 12, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5]);
    const int64_t ns[] = {0, 1, 7, 63, 64, 65, 1000003}; /* below, at and past 8 streams x 8 */
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int64_t n = ns[k];
        float *x = malloc(sizeof(float) * (size_t)(n + 1));
        double sum = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) sum += (x[i] = rnd()), mag += fabs(x[i]);
        const float got = kern_read_sum(x, n);
        /* fp32 rounding: each partial sum adds n/64 terms, then at most 64 + 63 + 7 more join
         * the total, so |got - sum| <= 1.01 k u Σ|x| with k = n/64 + 134, u = 2^-24 */
        const double tol = 1.01 * (double)(n / 64 + 134) * 0x1p-24 * mag;
        check_expect(fabs(got - sum) <= tol, "read_sum n=%lld: %.9g vs %.9g (double), bound %g",
                     (long long)n, got, sum, tol);
        free(x);
    }
    return check_finish("test_attn_cache");
}
