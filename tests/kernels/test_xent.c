/* Cross-entropy pieces: stats and bwd vs the naive twins; the sharded combination of xent.h
 * (V split into 3 uneven shards) reproduces the unsharded lse and loss, and per-shard bwd with
 * the global lse equals the matching columns of the unsharded bwd; bwd vs finite differences in
 * double of scale·Σ_rows (lse − logit[target]); in-place bwd equals out-of-place bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/xent.h"
#include "ktest.h"

/* L = scale·Σ_rows (lse − logit[target]) in double; l[M,V], t[M]. */
typedef struct {
    const double *l;
    const int32_t *t;
    int64_t M, V;
    double scale;
} xent_loss;

static double loss_d(const void *ctx) {
    const xent_loss *a = ctx;
    const double *l = a->l, scale = a->scale;
    const int32_t *t = a->t;
    const int64_t M = a->M, V = a->V;
    double L = 0.0;
    for (int64_t r = 0; r < M; r++) {
        double m = -INFINITY, z = 0.0;
        for (int64_t j = 0; j < V; j++) m = l[r * V + j] > m ? l[r * V + j] : m;
        for (int64_t j = 0; j < V; j++) z += exp(l[r * V + j] - m);
        L += scale * (m + log(z) - l[r * V + t[r]]);
    }
    return L;
}

static void run(int64_t M, int64_t V, float spread) {
    const float scale = 1.0f / (float)M;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)M);
    float *lg = kt_floats(M * V), *mx = kt_floats(M), *sm = kt_floats(M), *tl = kt_floats(M),
          *mxr = kt_floats(M);
    float *smr = kt_floats(M), *tlr = kt_floats(M), *lse = kt_floats(M), *d = kt_floats(M * V),
          *dr = kt_floats(M * V);
    float *ds = kt_floats(M * V), *ip = kt_floats(M * V);
    double *ld = kt_doubles(M * V), *fd = kt_doubles(M * V);
    char what[128], shape[48];
    snprintf(shape, sizeof shape, "M=%lld V=%lld spread=%g", (long long)M, (long long)V, spread);
    for (int64_t r = 0; r < M; r++) t[r] = (int32_t)((r * 5 + 2) % V);
    kt_fill(lg, M * V, 1, -spread, spread);

    kern_xent_stats(mx, sm, tl, lg, t, M, V, 0);
    kern_xent_stats_ref(mxr, smr, tlr, lg, t, M, V, 0);
    snprintf(what, sizeof what, "xent stats rowmax vs ref %s", shape);
    kt_equal(what, mx, mxr, M);
    snprintf(what, sizeof what, "xent stats rowsum vs ref %s", shape);
    kt_close(what, sm, smr, M, 8); /* V exps of ≤ 1 ulp summed in 8 lanes: k = 8 */
    snprintf(what, sizeof what, "xent stats tlogit vs ref %s", shape);
    kt_equal(what, tl, tlr, M);
    for (int64_t r = 0; r < M; r++) lse[r] = mx[r] + logf(sm[r]);

    kern_xent_bwd(d, lg, lse, t, M, V, 0, scale);
    kern_xent_bwd_ref(dr, lg, lse, t, M, V, 0, scale);
    snprintf(what, sizeof what, "xent bwd vs ref %s", shape);
    kt_close(what, d, dr, M * V, 8);
    memcpy(ip, lg, sizeof(float) * (size_t)(M * V));
    kern_xent_bwd(ip, ip, lse, t, M, V, 0, scale);
    snprintf(what, sizeof what, "xent bwd in place = out of place %s", shape);
    kt_equal(what, ip, d, M * V);

    /* FD truth in double */
    for (int64_t i = 0; i < M * V; i++) ld[i] = lg[i];
    const xent_loss L = {ld, t, M, V, scale};
    kt_fd_grad(fd, ld, M * V, 1e-6, loss_d, &L);
    snprintf(what, sizeof what, "xent bwd vs FD(double) %s", shape);
    kt_close_d(what, d, fd, M * V, 16); /* lse itself carries a few ulp of the float stats */

    /* three uneven shards, combined by the xent.h formula */
    int64_t cut[4] = {0, V / 3, V / 3 + (V + 1) / 2, V};
    if (cut[2] > V) cut[2] = V;
    float *m_s = kt_floats(3 * M), *z_s = kt_floats(3 * M), *t_s = kt_floats(3 * M),
          *lse_c = kt_floats(M);
    float *loss = kt_floats(M), *loss_c = kt_floats(M);
    for (int s = 0; s < 3; s++) {
        int64_t v0 = cut[s], Vl = cut[s + 1] - cut[s];
        float *slab = kt_floats(M * Vl);
        for (int64_t r = 0; r < M; r++)
            for (int64_t j = 0; j < Vl; j++) slab[r * Vl + j] = lg[r * V + v0 + j];
        kern_xent_stats(m_s + s * M, z_s + s * M, t_s + s * M, slab, t, M, Vl, v0);
        free(slab);
    }
    for (int64_t r = 0; r < M; r++) {
        float m = -INFINITY, z = 0.0f, tt = 0.0f;
        for (int s = 0; s < 3; s++) m = m_s[s * M + r] > m ? m_s[s * M + r] : m;
        for (int s = 0; s < 3; s++) z += z_s[s * M + r] * expf(m_s[s * M + r] - m);
        for (int s = 0; s < 3; s++) tt += t_s[s * M + r]; /* only the owning shard is non-zero */
        lse_c[r] = m + logf(z);
        loss_c[r] = lse_c[r] - tt;
        loss[r] = lse[r] - tl[r];
    }
    snprintf(what, sizeof what, "xent 3-shard combined lse vs unsharded %s", shape);
    kt_close(what, lse_c, lse, M, 8);
    snprintf(what, sizeof what, "xent 3-shard combined loss vs unsharded %s", shape);
    kt_close(what, loss_c, loss, M, 8);
    for (int s = 0; s < 3; s++) {
        int64_t v0 = cut[s], Vl = cut[s + 1] - cut[s];
        float *slab = kt_floats(M * Vl), *want = kt_floats(M * Vl);
        for (int64_t r = 0; r < M; r++)
            for (int64_t j = 0; j < Vl; j++) {
                slab[r * Vl + j] = lg[r * V + v0 + j];
                want[r * Vl + j] = d[r * V + v0 + j];
            }
        kern_xent_bwd(slab, slab, lse, t, M, Vl, v0, scale);
        snprintf(what, sizeof what, "xent shard %d [%lld,%lld) bwd = unsharded columns %s", s,
                 (long long)v0, (long long)(v0 + Vl), shape);
        kt_equal(what, slab, want, M * Vl);
        free(slab), free(want);
    }
    free(m_s), free(z_s), free(t_s), free(lse_c), free(loss), free(loss_c);
    free(t), free(lg), free(mx), free(sm), free(tl), free(mxr), free(smr), free(tlr), free(lse);
    free(d), free(dr), free(ds), free(ip), free(ld), free(fd);
}

int main(void) {
    run(1, 3, 4.0f);
    run(7, 13, 4.0f);
    run(5, 17, 30.0f); /* large logit spread: most exps tiny */
    run(3, 101, 8.0f);
    return check_finish("test_kern_xent");
}
