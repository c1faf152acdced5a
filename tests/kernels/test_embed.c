/* Embedding on a vocabulary shard: rows of tokens outside the shard are 0, repeated tokens
 * accumulate in the backward, and the backward matches finite differences in double of
 * L = Σ w ⊙ embed(tokens) (including shards that hold none of the tokens). */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/embed.h"
#include "ktest.h"

static void run(int64_t M, int64_t D, int64_t V, int64_t v0, int64_t Vl) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)M);
    float *E = kt_floats(Vl * D), *x = kt_floats(M * D);
    float *w = kt_floats(M * D), *xr = kt_floats(M * D);
    float *dE = kt_floats(Vl * D), *dE0 = kt_floats(Vl * D);
    double *fd = kt_doubles(Vl * D), *Ed = kt_doubles(Vl * D);
    char what[96];
    for (int64_t r = 0; r < M; r++) tok[r] = (int32_t)((r * 7 + 3) % V); /* repeats when M > V */
    kt_fill(E, Vl * D, 1, -1, 1);
    kt_fill(w, M * D, 2, -1, 1);
    kt_fill(dE0, Vl * D, 3, -1, 1);
    for (int64_t r = 0; r < M; r++)
        for (int64_t c = 0; c < D; c++) {
            int64_t t = tok[r] - v0;
            xr[r * D + c] = (t >= 0 && t < Vl) ? E[t * D + c] : 0.0f;
            x[r * D + c] = -1.0f; /* overwritten */
        }
    kern_embed_fwd(x, E, tok, M, D, v0, Vl);
    snprintf(what, sizeof what, "embed fwd M=%lld D=%lld shard [%lld,%lld)", (long long)M,
             (long long)D, (long long)v0, (long long)(v0 + Vl));
    kt_equal(what, x, xr, M * D);
    for (int64_t i = 0; i < Vl * D; i++) dE[i] = dE0[i], Ed[i] = E[i];
    kern_embed_bwd(dE, w, tok, M, D, v0, Vl);
    for (int64_t i = 0; i < Vl * D; i++) {
        const double h = 1e-3; /* L is linear in E: FD is exact up to roundoff */
        double lp = 0, lm = 0, s = Ed[i];
        for (int pass = 0; pass < 2; pass++) {
            Ed[i] = pass ? s - h : s + h;
            double L = 0;
            for (int64_t r = 0; r < M; r++)
                for (int64_t c = 0; c < D; c++) {
                    int64_t t = tok[r] - v0;
                    if (t >= 0 && t < Vl) L += w[r * D + c] * Ed[t * D + c];
                }
            if (pass)
                lm = L;
            else
                lp = L;
        }
        Ed[i] = s;
        fd[i] = dE0[i] + (lp - lm) / (2 * h);
    }
    snprintf(what, sizeof what, "embed bwd += vs FD(double) M=%lld D=%lld shard [%lld,%lld)",
             (long long)M, (long long)D, (long long)v0, (long long)(v0 + Vl));
    kt_close_d(what, dE, fd, Vl * D, 8); /* ≤ M/V+1 float additions per element: k = 8 */
    free(tok), free(E), free(x), free(w), free(xr), free(dE), free(dE0), free(fd), free(Ed);
}

int main(void) {
    run(1, 1, 1, 0, 1);
    run(13, 7, 5, 0, 5);    /* repeated tokens */
    run(17, 5, 11, 4, 4);   /* middle shard */
    run(7, 3, 29, 20, 9);   /* last shard */
    run(3, 4, 100, 90, 10); /* tokens 3, 10, 17: none in this shard */
    return check_finish("test_kern_embed");
}
