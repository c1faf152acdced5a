/* RMSNorm: fwd/bwd vs the naive twins on awkward shapes; bwd (dx and dg, accumulating) vs
 * central finite differences of a double-precision forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/rmsnorm.h"
#include "ktest.h"

/* L = Σ w ⊙ rmsnorm(x)·g, all in double; x[M,D], g[D], w[M,D]. */
typedef struct {
    const double *x, *g, *w;
    int64_t M, D;
} rms_loss;

static double loss_d(const void *ctx) {
    const rms_loss *a = ctx;
    const double *x = a->x, *g = a->g, *w = a->w;
    const int64_t M = a->M, D = a->D;
    double L = 0.0;
    for (int64_t r = 0; r < M; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < D; i++) ss += x[r * D + i] * x[r * D + i];
        double s = 1.0 / sqrt(ss / (double)D + (double)KERN_RMSNORM_EPS);
        for (int64_t i = 0; i < D; i++) L += w[r * D + i] * x[r * D + i] * s * g[i];
    }
    return L;
}

/* "<check> M=<M> D=<D>" in buf: the line of a check on an M×D input. */
static const char *label(char *buf, size_t len, const char *check, int64_t M, int64_t D) {
    snprintf(buf, len, "%s M=%lld D=%lld", check, (long long)M, (long long)D);
    return buf;
}

static void run(int64_t M, int64_t D) {
    int64_t n = M * D;
    kt_bufs bufs = {0};
    float *x, *dy, *y, *yr, *dx, *dxr, *g, *dg, *dgr, *rs, *rsr;
    double *xd, *wd, *fx, *gd, *fg;
    kt_bufs_floats(&bufs, n, &x, &dy, &y, &yr, &dx, &dxr, NULL); /* M×D */
    kt_bufs_floats(&bufs, D, &g, &dg, &dgr, NULL);
    kt_bufs_floats(&bufs, M, &rs, &rsr, NULL);
    kt_bufs_doubles(&bufs, n, &xd, &wd, &fx, NULL);
    kt_bufs_doubles(&bufs, D, &gd, &fg, NULL);
    kt_fill(x, n, 1, -2, 2);
    kt_fill(g, D, 2, 0.5f, 1.5f);
    kt_fill(dy, n, 3, -1, 1);
    char what[96];

    kern_rmsnorm_fwd(y, rs, x, g, M, D);
    kern_rmsnorm_fwd_ref(yr, rsr, x, g, M, D);
    kt_close(label(what, sizeof what, "rmsnorm fwd y", M, D), y, yr, n,
             8); /* a D-term sum of squares, then 3 roundings: k = 8 */
    kt_close(label(what, sizeof what, "rmsnorm fwd rstd", M, D), rs, rsr, M, 8);

    /* bwd accumulates: start both from the same non-zero contents */
    kt_fill(dx, n, 4, -1, 1);
    kt_fill(dg, D, 5, -1, 1);
    for (int64_t i = 0; i < n; i++) dxr[i] = dx[i];
    for (int64_t i = 0; i < D; i++) dgr[i] = dg[i];
    kern_rmsnorm_bwd(dx, dg, dy, x, g, rs, M, D);
    kern_rmsnorm_bwd_ref(dxr, dgr, dy, x, g, rs, M, D);
    kt_close(label(what, sizeof what, "rmsnorm bwd dx += vs ref", M, D), dx, dxr, n, 32);
    kt_close(label(what, sizeof what, "rmsnorm bwd dg += vs ref", M, D), dg, dgr, D, 32);

    /* finite differences in double: gradient of L = Σ dy ⊙ y */
    for (int64_t i = 0; i < n; i++) xd[i] = x[i], wd[i] = dy[i];
    for (int64_t i = 0; i < D; i++) gd[i] = g[i];
    const rms_loss L = {xd, gd, wd, M, D};
    kt_fd_grad(fx, xd, n, 1e-6, loss_d, &L);
    kt_fd_grad(fg, gd, D, 1e-6, loss_d, &L);
    for (int64_t i = 0; i < n; i++) dx[i] = 0.0f;
    for (int64_t i = 0; i < D; i++) dg[i] = 0.0f;
    kern_rmsnorm_bwd(dx, dg, dy, x, g, rs, M, D);
    /* truth is exact to ~1e-9 (h² and roundoff); the float kernel sums D (dx) or M (dg) terms */
    kt_close_d(label(what, sizeof what, "rmsnorm bwd dx vs FD(double)", M, D), dx, fx, n, 32);
    kt_close_d(label(what, sizeof what, "rmsnorm bwd dg vs FD(double)", M, D), dg, fg, D, 32);
    kt_bufs_free(&bufs);
}

int main(void) {
    const int64_t shapes[][2] = {{1, 1}, {1, 7}, {7, 13}, {3, 17}, {5, 64}, {2, 133}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) run(shapes[s][0], shapes[s][1]);
    return check_finish("test_kern_rmsnorm");
}
