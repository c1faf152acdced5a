/* test_simlap: the SMPI build's non-blocking collectives overlap simulated compute. Run on a
 * simpod platform (bench/simpod --chip CHIP --topology ... test_simlap --chip CHIP [--alg A]).
 * The pattern is a backward pass with gradient buckets: K times, compute (mesh_sim_compute, the
 * dry run's kernels) then reduce-scatter the bucket it produced, over every axis of the mesh.
 *  - serial: each bucket's ReduceScatter blocks: the step must take K·(c + x), within 2%, where
 *    c is the compute per bucket (its FLOPs at the chip's rate, checked alone) and x a
 *    ReduceScatter's simulated time (K of them back to back, over K; within 25% of the cost
 *    model's price);
 *  - overlapped: each bucket's ReduceScatter is started (mesh_ireduce_scatter) and the next
 *    bucket's compute runs while it moves; all are waited for at the end. The step must take
 *    c + x + (K−1)·max(c, x) — the last bucket's reduction exposed, the others hidden behind
 *    the compute (c > x) or back to back (c < x) — within 3% plus the poll interval per ring step;
 *  - both give bit-identical results, equal to the serial sum (integer-valued floats), and so
 *    does a run where a blocking AllGather on the caller interleaves with the buckets in flight.
 * Times are simulated (SimGrid's clock), so the bounds do not depend on the machine's load. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/cost.h"
#include "mesh/mesh_mpi.h"
#include "smpi_opts.h"

#define K 4          /* buckets */
#define POLL 1e-6    /* seconds of compute between polls of the buckets in flight */
#define COUNT 300000 /* floats of a bucket's result per rank: x ≈ 40 µs on a v5p ring of 4 */

static int failures;

static void expect_near(const char *what, double got, double want, double rel, double abs_tol) {
    const int ok = fabs(got - want) <= rel * want + abs_tol;
    mesh_log("%s %-58s simulated %9.2f us, expected %9.2f us (%+.2f%%)\n", ok ? "ok  " : "FAIL",
             what, got * 1e6, want * 1e6, 100 * (got / want - 1));
    failures += !ok;
}

/* The slowest rank's simulated time of fn from a barrier. */
typedef struct {
    mesh *m;
    mesh_axes a;
    mesh_alg alg;
    int n, me;
    float *in[K], *out[K], *gin, *gout;
    double flops; /* compute per bucket */
    int overlap, gather;
} run_t;

static void step(run_t *r) {
    mesh_req *q[K];
    for (int k = 0; k < K; k++) {
        mesh_sim_compute(r->flops);
        if (r->gather) /* a blocking call on the caller while buckets are in flight */
            mesh_all_gather(r->m, r->a, r->gout, r->gin, 1000, r->alg);
        if (r->overlap)
            q[k] = mesh_ireduce_scatter(r->m, r->a, r->out[k], r->in[k], COUNT, r->alg);
        else
            mesh_reduce_scatter(r->m, r->a, r->out[k], r->in[k], COUNT, r->alg);
    }
    if (r->overlap)
        for (int k = 0; k < K; k++) mesh_wait(q[k]);
}

static double timed(run_t *r, void (*fn)(run_t *)) {
    MPI_Comm w = mesh_world_comm(r->m)->mpi;
    for (int k = 0; k < K; k++) memset(r->out[k], 0, COUNT * sizeof(float));
    MPI_Barrier(w);
    const double t0 = MPI_Wtime();
    fn(r);
    double dt = MPI_Wtime() - t0, mx = 0;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, w);
    return mx;
}

static float value(int rank, int k, int64_t i) {
    return (float)((rank * 7 + k * 3 + i) % 17);
}

/* The buckets' results against the serial sum, exactly; returns the mismatches. */
static int check_results(const run_t *r, const char *what) {
    int bad = 0;
    for (int k = 0; k < K; k++)
        for (int64_t j = 0; j < COUNT; j++) {
            float want = 0;
            for (int q = 0; q < r->n; q++) want += value(q, k, (int64_t)r->me * COUNT + j);
            bad += r->out[k][j] != want;
        }
    for (int q = 0; r->gather && q < r->n; q++)
        for (int j = 0; j < 1000; j++) bad += r->gout[q * 1000 + j] != (float)(q * 1000 + j);
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, mesh_world_comm(r->m)->mpi);
    mesh_log("%s %s: %d elements differ from the serial sum\n", all ? "FAIL" : "ok  ", what, all);
    return all != 0;
}

static void reductions_only(run_t *r) { /* back to back: no skew from the barrier in x */
    for (int k = 0; k < K; k++) mesh_reduce_scatter(r->m, r->a, r->out[k], r->in[k], COUNT, r->alg);
}
static void compute_only(run_t *r) {
    mesh_sim_compute(r->flops);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    const smpi_opts o = smpi_opts_parse(argc, argv, "test_simlap", 1);
    mesh *m = o.m;
    const cost_chip *chip = o.chip;
    const char *algname = o.alg_name;
    mesh_sim_set_poll(POLL);

    run_t r = {.m = m, .alg = o.alg};
    int sizes[MESH_MAX_AXES], wraps[MESH_MAX_AXES];
    for (int a = 0; a < mesh_ndims(m); a++) {
        r.a.ax[r.a.n] = a;
        sizes[r.a.n] = mesh_axis_size(m, a), wraps[r.a.n] = mesh_axis_wraps(m, a);
        r.a.n++;
    }
    r.n = mesh_axes_size(m, r.a), r.me = mesh_axes_index(m, r.a);
    for (int k = 0; k < K; k++) {
        r.in[k] = malloc((size_t)r.n * COUNT * sizeof(float));
        r.out[k] = malloc(COUNT * sizeof(float));
        CHECK(r.in[k] && r.out[k], "out of memory");
        for (int64_t i = 0; i < (int64_t)r.n * COUNT; i++) r.in[k][i] = value(mesh_rank(m), k, i);
    }
    r.gin = malloc(1000 * sizeof(float)), r.gout = malloc((size_t)r.n * 1000 * sizeof(float));
    CHECK(r.gin && r.gout, "out of memory");
    for (int j = 0; j < 1000; j++) r.gin[j] = (float)(r.me * 1000 + j);
    /* every rank of the slice is in the set: its world rank is its index (row-major) */
    CHECK(r.n == mesh_nranks(m), "test_simlap: the set must hold every rank");

    const double x = timed(&r, reductions_only) / K, V = (double)r.n * COUNT * sizeof(float);
    const cost_link link = cost_chip_link(chip);
    const double xm =
        cost_collective(COST_OP_REDUCE_SCATTER, &link, sizes, wraps, r.a.n, r.alg, V, NULL);
    mesh_log("ReduceScatter of %.1f MiB over %d ranks (%s): %.2f us simulated, %.2f us by the "
             "cost model\n",
             V / 1048576, r.n, algname, x * 1e6, xm * 1e6);
    expect_near("one ReduceScatter vs the cost model", x, xm, 0.25, 0);
    const int steps = r.n - 1; /* ring steps of a ReduceScatter (fewer for bidir) */
    const double ratios[2] = {2.0, 0.5};
    for (int i = 0; i < 2; i++) {
        const double c = ratios[i] * x;
        r.flops = c * chip->flops_bf16;
        r.overlap = r.gather = 0;
        char what[96];
        snprintf(what, sizeof what, "compute alone, c = %.1f x", ratios[i]);
        expect_near(what, timed(&r, compute_only), c, 0.001, 0);
        snprintf(what, sizeof what, "serial step, %d buckets, c = %.1f x", K, ratios[i]);
        const double ts = timed(&r, step);
        expect_near(what, ts, K * (c + x), 0.02, 0);
        failures += check_results(&r, "serial results");
        float *keep = malloc(COUNT * sizeof(float) * K);
        CHECK(keep, "out of memory");
        for (int k = 0; k < K; k++) memcpy(keep + k * COUNT, r.out[k], COUNT * sizeof(float));
        r.overlap = 1;
        snprintf(what, sizeof what, "overlapped step, %d buckets, c = %.1f x", K, ratios[i]);
        const double to = timed(&r, step);
        expect_near(what, to, c + x + (K - 1) * (c > x ? c : x), 0.03, K * steps * POLL);
        failures += check_results(&r, "overlapped results");
        int same = 1;
        for (int k = 0; k < K; k++)
            same &= memcmp(keep + k * COUNT, r.out[k], COUNT * sizeof(float)) == 0;
        mesh_log("%s overlapped results bit-identical to the serial ones; step %.2f -> %.2f us "
                 "(saved %.2f us of the %.2f us hideable)\n",
                 same ? "ok  " : "FAIL", ts * 1e6, to * 1e6, (ts - to) * 1e6,
                 (K - 1) * (c < x ? c : x) * 1e6);
        failures += !same;
        free(keep);
    }
    r.overlap = r.gather = 1; /* the caller's blocking waits serve the buckets in flight */
    timed(&r, step);
    failures += check_results(&r, "overlapped results with blocking AllGathers between");
    for (int k = 0; k < K; k++) free(r.in[k]), free(r.out[k]);
    free(r.gin), free(r.gout);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, mesh_world_comm(m)->mpi);
    mesh_log("test_simlap: %s\n", all ? "FAILURES" : "all passed");
    mesh_destroy(m);
    mesh_mpi_finalize();
    return all ? 1 : 0;
}
