/* test_cmatmul: the collective matmuls' data movement (train/parallel/cmatmul.h) against the
 * plain collective + one matmul, over the 1D mesh of all ranks (1, 2, 3, 4: the exchange of an
 * axis of 2, the ppermute ring, and with --open the line both ways), on awkward shapes (M, K
 * prime; N/n = 1 and 5). The math each chunk runs is the caller's (the model's sublayer.c, which
 * the equivalence tests check end to end); here a product for the matmul-ReduceScatter and a copy
 * for the gather.
 *  - The matmul-ReduceScatter on integer-valued data (small integers: every sum is exact in float
 *    whatever its order): bit-identical to a serial truth computed from the generating formula;
 *    on random data in [−1, 1): within a relative tolerance of the same truth computed in double,
 *    |got − want| <= k·eps·Σ|terms| with eps = FLT_EPSILON and k = the number of terms summed
 *    (the classical bound of a float dot product in any order); and the same bits twice.
 *  - The gather: every block handed over once, the rank's own first, its bits those of the
 *    plain AllGather.
 *  - The schedule: one ring step per block but the rank's own (n − 1 ppermutes, 2·(n − 1) on a
 *    line, one AllGather on an axis of 2), counted by mesh_stats.
 * Usage: mpirun -np N test_cmatmul [--open]
 * Every rank generates every rank's operands, so it can compute the truth alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
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

/* The product a · w of the matmul-ReduceScatter, a column block at a time, by the naive
 * definition (each entry a float dot product over K in order). */
typedef struct {
    const float *a, *w;
    int64_t mkn[3]; /* M, K, N */
} ab;

static void ab_block(void *vc, float *dst, int64_t b, int64_t nb) {
    const float *a = ((const ab *)vc)->a, *w = ((const ab *)vc)->w;
    const int64_t *d = ((const ab *)vc)->mkn, K = d[1], N = d[2], nl = N / nb;
    for (int64_t e = 0; e < d[0] * nl; e++) {
        float sum = 0.0f;
        for (int64_t k = 0; k < K; k++) sum += a[e / nl * K + k] * w[k * N + b * nl + e % nl];
        dst[e] = sum;
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
    ab prod = {a, w, {M, K, N}};
    cmm_matmul_reduce_scatter(m, ax, MESH_WIRE_F32, out, ab_block, &prod, M, N, scratch);
    const mesh_stat p1 = mesh_stats(m, MESH_OP_PPERMUTE, -1),
                    g1 = mesh_stats(m, MESH_OP_ALL_GATHER, -1);
    cmm_matmul_reduce_scatter(m, ax, MESH_WIRE_F32, out2, ab_block, &prod, M, N, scratch);
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

/* What the gather handed over: each block copied into its columns of x[M, N], the order. */
typedef struct {
    float *x;
    int64_t M, N, nl;
    int seen[64], n_seen, own_first;
} catcher;

static void catch_block(void *vc, const float *blk, int64_t j, int first) {
    catcher *c = vc;
    for (int64_t row = 0; row < c->M; row++)
        memcpy(c->x + row * c->N + j * c->nl, blk + row * c->nl, (size_t)c->nl * sizeof(float));
    if (c->n_seen == 0) c->own_first = first;
    if (first && c->n_seen != 0) c->own_first = 0;
    if (j >= 0 && j < 64) c->seen[j]++;
    c->n_seen++;
}

/* The gather of column blocks xi[M, nl] (x[M, N] on every rank): the plain AllGather's bits,
 * every block once, the rank's own first, and the ring's steps. */
static void test_gather(mesh *m, int ax, int64_t M, int64_t nl, int integer) {
    const int n = mesh_axis_size(m, ax), i = mesh_axis_coord(m, ax), me = mesh_rank(m);
    const mesh_axes one = {1, {ax, 0, 0}};
    const int64_t N = nl * n;
    float *xi = malloc((size_t)(M * nl) * sizeof(float)),
          *x = malloc((size_t)(M * N) * sizeof(float));
    float *got = calloc((size_t)(M * N), sizeof(float)),
          *blk = malloc((size_t)(M * nl) * sizeof(float));
    float *scratch = malloc((size_t)cmm_scratch(M, N, n) * sizeof(float));
    for (int j = 0; j < n; j++) { /* the whole x, as the plain AllGather would give it */
        fill(blk, M * nl, integer, 2, mesh_axes_member(m, one, j));
        for (int64_t row = 0; row < M; row++)
            memcpy(x + row * N + j * nl, blk + row * nl, (size_t)nl * sizeof(float));
    }
    fill(xi, M * nl, integer, 2, me);
    catcher c = {got, M, N, nl, {0}, 0, 0};
    const mesh_stat p0 = mesh_stats(m, MESH_OP_PPERMUTE, -1),
                    g0 = mesh_stats(m, MESH_OP_ALL_GATHER, -1);
    cmm_gather_blocks(m, ax, MESH_WIRE_F32, xi, M * nl, scratch, catch_block, &c);
    const mesh_stat p1 = mesh_stats(m, MESH_OP_PPERMUTE, -1),
                    g1 = mesh_stats(m, MESH_OP_ALL_GATHER, -1);
    int once = c.n_seen == n;
    for (int j = 0; j < n && j < 64; j++) once &= c.seen[j] == 1;
    const int64_t pp = p1.calls - p0.calls, ag = g1.calls - g0.calls;
    const int64_t steps = n <= 2 ? 0 : mesh_axis_wraps(m, ax) ? n - 1 : 2 * (n - 1);
    if (memcmp(got, x, (size_t)(M * N) * sizeof(float)) || !once || !c.own_first || pp != steps ||
        ag != (n == 2))
        fprintf(stderr,
                "FAIL rank %d (index %d) gather n=%d M=%lld nl=%lld: bits %s, %d blocks (each "
                "once: %d), own first %d, %lld ppermutes, %lld AllGathers\n",
                me, i, n, (long long)M, (long long)nl,
                memcmp(got, x, (size_t)(M * N) * sizeof(float)) ? "differ" : "equal", c.n_seen,
                once, c.own_first, (long long)pp, (long long)ag),
            failures++;
    free(xi), free(x), free(got), free(blk), free(scratch);
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
            test_gather(m, 0, shapes[s][0], shapes[s][2], integer);
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
