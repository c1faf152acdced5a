/* test_cmatmul: the collective matmuls (train/parallel/cmatmul.h) against the plain
 * collective + one matmul, over the 1D mesh of all ranks (1, 2, 3, 4: the exchange of an axis of
 * 2, the ppermute ring, and with --open the line both ways), on awkward shapes (M, K prime;
 * N/n = 1 and 5).
 *  - Integer-valued data (small integers: every sum is exact in float whatever its order): the
 *    results are bit-identical to a serial truth computed from the generating formula.
 *  - Random data in [−1, 1): within a relative tolerance of the same truth computed in double,
 *    |got − want| <= k·eps·Σ|terms| with eps = FLT_EPSILON and k = the number of terms summed
 *    (the classical bound of a float dot product in any order); and the same bits twice.
 *  - The AllGather-norm-matmul: the gathered x, the norm's h and rstd bit-identical to the plain
 *    gather and kern_rmsnorm_fwd; the products as above (integers: exact up to the last scale).
 *  - The schedule: one ring step per block but the rank's own (n − 1 ppermutes, 2·(n − 1) on a
 *    line, one AllGather on an axis of 2), counted by mesh_stats.
 * Usage: mpirun -np N test_cmatmul [--open]
 * Every rank generates every rank's operands, so it can compute the truth alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "kernels/rmsnorm.h"
#include "mesh/mesh_mpi.h"
#include "train/parallel/cmatmul.h"

static int failures;

/* Element e of operand `which` (0 a, 1 w, 2 x) of rank r. */
static float gen(int integer, int which, int r, int64_t e) {
    uint64_t h = (uint64_t)(which * 1000003 + r * 7919) * 2654435761u + (uint64_t)e * 40503u;
    h ^= h >> 13, h *= 0x9E3779B97F4A7C15ull, h ^= h >> 29;
    if (integer) return (float)((int)(h % 7) - 3);
    return (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float *v, int64_t n, int integer, int which, int r) {
    for (int64_t e = 0; e < n; e++) v[e] = gen(integer, which, r, e);
}

/* got vs (want, bound): exact when integer, else |got − want| <= k·eps·mag. */
static void check(const char *what, int rank, const float *got, const double *want,
                  const double *mag, int64_t n, double k, int integer) {
    for (int64_t e = 0; e < n; e++) {
        const double d = fabs((double)got[e] - want[e]);
        if (integer ? (double)got[e] != want[e] : d > k * 1.1920929e-7 * mag[e]) {
            fprintf(stderr,
                    "FAIL rank %d %s: element %lld got %.9g want %.9g (|d| %.3g, bound %.3g)\n",
                    rank, what, (long long)e, (double)got[e], want[e], d,
                    integer ? 0.0 : k * 1.1920929e-7 * mag[e]);
            failures++;
            return;
        }
    }
}

/* matmul-ReduceScatter: out[M, nl] = column block i of Σ_r a_r[M, K] · w_r[K, N]. */
static void test_rs(mesh *m, int ax, int64_t M, int64_t K, int64_t nl, int integer) {
    const int n = mesh_axis_size(m, ax), i = mesh_axis_coord(m, ax), me = mesh_rank(m);
    const mesh_axes one = {1, {ax, 0, 0}};
    const int64_t N = nl * n;
    float *a = malloc((size_t)(M * K) * sizeof(float)),
          *w = malloc((size_t)(K * N) * sizeof(float));
    float *out = malloc((size_t)(M * nl) * sizeof(float)),
          *out2 = malloc((size_t)(M * nl) * sizeof(float));
    float *ar = malloc((size_t)(M * K) * sizeof(float)),
          *wr = malloc((size_t)(K * N) * sizeof(float));
    float *scratch = malloc((size_t)cmm_scratch(M, N, n) * sizeof(float));
    double *want = calloc((size_t)(M * nl), sizeof(double)),
           *mag = calloc((size_t)(M * nl), sizeof(double));
    for (int r = 0; r < n; r++) {
        const int rank = mesh_axes_member(m, one, r);
        fill(ar, M * K, integer, 0, rank), fill(wr, K * N, integer, 1, rank);
        for (int64_t row = 0; row < M; row++)
            for (int64_t col = 0; col < nl; col++)
                for (int64_t k = 0; k < K; k++) {
                    const double t = (double)ar[row * K + k] * wr[k * N + i * nl + col];
                    want[row * nl + col] += t, mag[row * nl + col] += fabs(t);
                }
    }
    fill(a, M * K, integer, 0, me), fill(w, K * N, integer, 1, me);
    const mesh_stat p0 = mesh_stats(m, MESH_OP_PPERMUTE, -1),
                    g0 = mesh_stats(m, MESH_OP_ALL_GATHER, -1);
    cmm_matmul_reduce_scatter(m, ax, out, a, w, M, K, N, scratch);
    const mesh_stat p1 = mesh_stats(m, MESH_OP_PPERMUTE, -1),
                    g1 = mesh_stats(m, MESH_OP_ALL_GATHER, -1);
    cmm_matmul_reduce_scatter(m, ax, out2, a, w, M, K, N, scratch);
    char what[96];
    snprintf(what, sizeof what, "matmul-RS n=%d M=%lld K=%lld N=%lld %s", n, (long long)M,
             (long long)K, (long long)N, integer ? "integers" : "random");
    check(what, me, out, want, mag, M * nl, (double)(K * n), integer);
    if (memcmp(out, out2, (size_t)(M * nl) * sizeof(float)))
        fprintf(stderr, "FAIL rank %d %s: not the same bits twice\n", me, what), failures++;
    const int64_t pp = p1.calls - p0.calls, ag = g1.calls - g0.calls;
    const int64_t steps = n <= 2 ? 0 : mesh_axis_wraps(m, ax) ? n - 1 : 2 * (n - 1);
    if (pp != steps || ag != (n == 2))
        fprintf(stderr, "FAIL rank %d %s: %lld ppermutes and %lld AllGathers\n", me, what,
                (long long)pp, (long long)ag),
            failures++;
    free(a), free(w), free(out), free(out2), free(ar), free(wr), free(scratch), free(want),
        free(mag);
}

/* AllGather-matmul: x[M, N] by column blocks (rank j: xj[M, nl]); y = x · wᵀ, dw += aᵀ · x. */
static void test_ag(mesh *m, int ax, int64_t M, int64_t K, int64_t nl, int integer) {
    const int n = mesh_axis_size(m, ax), me = mesh_rank(m);
    const mesh_axes one = {1, {ax, 0, 0}};
    const int64_t N = nl * n;
    float *xi = malloc((size_t)(M * nl) * sizeof(float)),
          *x = malloc((size_t)(M * N) * sizeof(float));
    float *w = malloc((size_t)(K * N) * sizeof(float)),
          *a = malloc((size_t)(M * K) * sizeof(float));
    float *y = malloc((size_t)(M * K) * sizeof(float)),
          *dw = malloc((size_t)(K * N) * sizeof(float));
    float *y2 = malloc((size_t)(M * K) * sizeof(float)),
          *dw2 = malloc((size_t)(K * N) * sizeof(float));
    float *blk = malloc((size_t)(M * nl) * sizeof(float));
    float *scratch = malloc((size_t)cmm_scratch(M, N, n) * sizeof(float));
    double *wy = calloc((size_t)(M * K), sizeof(double)),
           *my = calloc((size_t)(M * K), sizeof(double));
    double *wd = calloc((size_t)(K * N), sizeof(double)),
           *md = calloc((size_t)(K * N), sizeof(double));
    for (int j = 0; j < n; j++) { /* the whole x, as the plain AllGather would give it */
        fill(blk, M * nl, integer, 2, mesh_axes_member(m, one, j));
        for (int64_t row = 0; row < M; row++)
            memcpy(x + row * N + j * nl, blk + row * nl, (size_t)nl * sizeof(float));
    }
    fill(xi, M * nl, integer, 2, me), fill(w, K * N, integer, 1, me),
        fill(a, M * K, integer, 0, me);
    for (int64_t e = 0; e < K * N; e++) { /* dw accumulates onto its initial value */
        dw[e] = dw2[e] = integer ? (float)(e % 5) : 0.5f;
        wd[e] = dw[e], md[e] = fabs(wd[e]);
    }
    for (int64_t row = 0; row < M; row++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t col = 0; col < N; col++) {
                const double ty = (double)x[row * N + col] * w[k * N + col];
                const double td = (double)a[row * K + k] * x[row * N + col];
                wy[row * K + k] += ty, my[row * K + k] += fabs(ty);
                wd[k * N + col] += td, md[k * N + col] += fabs(td);
            }
    cmm_all_gather_matmul_t(m, ax, y, dw, xi, w, a, M, K, N, scratch);
    cmm_all_gather_matmul_t(m, ax, y2, dw2, xi, w, a, M, K, N, scratch);
    char what[96];
    snprintf(what, sizeof what, "AG-matmul n=%d M=%lld K=%lld N=%lld %s", n, (long long)M,
             (long long)K, (long long)N, integer ? "integers" : "random");
    check(what, me, y, wy, my, M * K, (double)N, integer);
    check(what, me, dw, wd, md, K * N, (double)(M + 1), integer);
    if (memcmp(y, y2, (size_t)(M * K) * sizeof(float)) ||
        memcmp(dw, dw2, (size_t)(K * N) * sizeof(float)))
        fprintf(stderr, "FAIL rank %d %s: not the same bits twice\n", me, what), failures++;
    free(xi), free(x), free(w), free(a), free(y), free(dw), free(y2), free(dw2), free(blk);
    free(scratch), free(wy), free(my), free(wd), free(md);
}

/* AllGather-norm-matmul: x[M, N] by column blocks; h = rmsnorm(x) ∘ g, y_k = h · w_k (two). x, h,
 * rstd are the bits of the gather and of kern_rmsnorm_fwd on the whole x; y_k = rstd · Σ over the
 * columns of x ∘ g ∘ w_k (integers: exact up to the final scale's one rounding). */
static void test_agn(mesh *m, int ax, int64_t M, int64_t K, int64_t nl, int integer) {
    const int n = mesh_axis_size(m, ax), me = mesh_rank(m);
    const mesh_axes one = {1, {ax, 0, 0}};
    const int64_t N = nl * n, nk[2] = {K, K + 2}, Dl = nl;
    float *x = malloc((size_t)(M * N) * sizeof(float)),
          *xg = malloc((size_t)(M * N) * sizeof(float));
    float *h = malloc((size_t)(M * N) * sizeof(float)),
          *hr = malloc((size_t)(M * N) * sizeof(float));
    float *rstd = malloc((size_t)M * sizeof(float)), *rr = malloc((size_t)M * sizeof(float));
    float *g = malloc((size_t)N * sizeof(float)), *xi = malloc((size_t)(M * nl) * sizeof(float));
    float *w[2], *y[2], *y2[2];
    double *want = calloc((size_t)(M * (K + 2)), sizeof(double)),
           *mag = calloc((size_t)(M * (K + 2)), sizeof(double));
    float *scratch = malloc((size_t)cmm_scratch(M, N, n) * sizeof(float));
    for (int j = 0; j < n; j++) {
        fill(xi, M * nl, integer, 2, mesh_axes_member(m, one, j));
        for (int64_t row = 0; row < M; row++)
            memcpy(x + row * N + j * nl, xi + row * nl, (size_t)nl * sizeof(float));
    }
    fill(xi, M * nl, integer, 2, me), fill(g, N, integer, 3, 0);
    kern_rmsnorm_fwd(hr, rr, x, g, M, N);
    for (int k = 0; k < 2; k++) {
        w[k] = malloc((size_t)(N * nk[k]) * sizeof(float));
        y[k] = malloc((size_t)(M * nk[k]) * sizeof(float));
        y2[k] = malloc((size_t)(M * nk[k]) * sizeof(float));
        fill(w[k], N * nk[k], integer, 1, 10 * me + k);
    }
    const mesh_stat p0 = mesh_stats(m, MESH_OP_PPERMUTE, -1);
    for (int rep = 0; rep < 2; rep++) { /* x holds only this rank's columns, the rest garbage */
        for (int64_t e = 0; e < M * N; e++) xg[e] = -7.5f;
        for (int64_t row = 0; row < M; row++)
            memcpy(xg + row * N + mesh_axis_coord(m, ax) * Dl, xi + row * nl,
                   (size_t)nl * sizeof(float));
        cmm_all_gather_norm_matmul(m, ax, xg, h, rstd, g, xi, 2, (const float *const *)w, nk,
                                   rep ? y2 : y, M, N, scratch);
    }
    const mesh_stat p1 = mesh_stats(m, MESH_OP_PPERMUTE, -1);
    char what[96];
    snprintf(what, sizeof what, "AG-norm-matmul n=%d M=%lld K=%lld N=%lld %s", n, (long long)M,
             (long long)K, (long long)N, integer ? "integers" : "random");
    if (memcmp(xg, x, (size_t)(M * N) * sizeof(float)) ||
        memcmp(h, hr, (size_t)(M * N) * sizeof(float)) ||
        memcmp(rstd, rr, (size_t)M * sizeof(float)))
        fprintf(stderr, "FAIL rank %d %s: x, h or rstd not the plain bits\n", me, what), failures++;
    for (int k = 0; k < 2; k++) {
        for (int64_t row = 0; row < M; row++)
            for (int64_t q = 0; q < nk[k]; q++) {
                double sum = 0, a = 0;
                for (int64_t col = 0; col < N; col++) {
                    const double t = (double)(x[row * N + col] * g[col]) * w[k][col * nk[k] + q];
                    sum += t, a += fabs(t);
                }
                want[row * nk[k] + q] = integer ? (double)(float)(sum * rr[row]) : sum * rr[row];
                mag[row * nk[k] + q] = a * rr[row];
            }
        check(what, me, y[k], want, mag, M * nk[k], (double)(N + 2), integer);
        if (memcmp(y[k], y2[k], (size_t)(M * nk[k]) * sizeof(float)))
            fprintf(stderr, "FAIL rank %d %s: not the same bits twice\n", me, what), failures++;
        free(w[k]), free(y[k]), free(y2[k]);
    }
    const int64_t steps = n <= 2 ? 0 : mesh_axis_wraps(m, ax) ? n - 1 : 2 * (n - 1);
    if (p1.calls - p0.calls != 2 * steps)
        fprintf(stderr, "FAIL rank %d %s: %lld ppermutes\n", me, what,
                (long long)(p1.calls - p0.calls)),
            failures++;
    free(x), free(xg), free(h), free(hr), free(rstd), free(rr), free(g), free(xi), free(want),
        free(mag), free(scratch);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[256];
    /* --open: the axis as a line (no wraparound) */
    const int open = argc > 1 && !strcmp(argv[1], "--open");
    mesh *m = mesh_create(NULL, open ? "x" : NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int64_t shapes[][3] = {{5, 7, 1}, {13, 11, 5}, {1, 3, 2}};
    for (int integer = 1; integer >= 0; integer--)
        for (int s = 0; s < 3; s++) {
            test_rs(m, 0, shapes[s][0], shapes[s][1], shapes[s][2], integer);
            test_ag(m, 0, shapes[s][0], shapes[s][1], shapes[s][2], integer);
            test_agn(m, 0, shapes[s][0], shapes[s][1], shapes[s][2], integer);
        }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, mesh_world_comm(m)->mpi);
    if (mesh_rank(m) == 0)
        printf("%s (%d failures over %d ranks)\n", all ? "FAIL" : "PASS", all,
               mesh_axis_size(m, 0));
    mesh_destroy(m);
    mesh_mpi_finalize();
    return all ? 1 : 0;
}
