/* test_coll: every collective × algorithm × ordered axis set, bit-exact on integer-valued floats
 * against a serial truth computed from the generating formula and against MPI's built-in; sizes
 * 1, 7 and 1001 elements per block, whole and cut into lanes (mesh_set_chunk); in-place use;
 * ppermute by ±1 and ±2; non-blocking calls overlapped with compute and mixed with blocking
 * calls; the trace's records and link-byte accounting (RING, and DIRECT's link crossings).
 * With --wire bf16 the same checks run with bf16 on the wire: the values are small integers,
 * exact in bf16, so the results must still be exact (test_wire checks the rounding itself).
 * Usage: mpirun -np N test_coll --mesh SPEC [--open AXES] [--wire fp32|bf16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/mesh_mpi.h"
#include "mesh_args.h"

static int failures;

/* The value rank `r` holds at element e: small integers, so every sum is exact in float. */
static float val(int r, int64_t e) {
    return (float)((r * 131 + e * 7 + 3) % 17 - 8);
}

static void expect(const mesh *m, const char *what, const float *got, const float *want,
                   int64_t n) {
    failures += test_bits_differ(m, what, got, want, n);
}

/* Serial truth of op over set a for block count c. */
static void truth(const mesh *m, mesh_op op, mesh_axes a, int64_t c, float *want) {
    int n = mesh_axes_size(m, a), i = mesh_axes_index(m, a);
    switch (op) {
    case MESH_OP_ALL_GATHER:
        for (int j = 0; j < n; j++)
            for (int64_t e = 0; e < c; e++) want[j * c + e] = val(mesh_axes_member(m, a, j), e);
        break;
    case MESH_OP_REDUCE_SCATTER:
    case MESH_OP_ALL_REDUCE: {
        int64_t base = op == MESH_OP_REDUCE_SCATTER ? i * c : 0;
        for (int64_t e = 0; e < c; e++) {
            float s = 0;
            for (int j = 0; j < n; j++) s += val(mesh_axes_member(m, a, j), base + e);
            want[e] = s;
        }
        break;
    }
    case MESH_OP_ALL_TO_ALL:
        for (int j = 0; j < n; j++)
            for (int64_t e = 0; e < c; e++)
                want[j * c + e] = val(mesh_axes_member(m, a, j), i * c + e);
        break;
    default:
        break;
    }
}

static void test_set(mesh *m, mesh_axes a) {
    static const int64_t sizes[] = {1, 7, 1001};
    int n = mesh_axes_size(m, a), i = mesh_axes_index(m, a), me = mesh_rank(m);
    char an[8], what[128];
    mesh_axes_str(m, a, an, sizeof an);
    for (int si = 0; si < 3; si++) {
        int64_t c = sizes[si], nin = c * n;
        float *in = malloc((size_t)nin * sizeof(float)), *out = malloc((size_t)nin * sizeof(float));
        float *want = malloc((size_t)nin * sizeof(float)),
              *ref = malloc((size_t)nin * sizeof(float));
        for (int op = 0; op < MESH_OP_PPERMUTE; op++) {
            int64_t in_n = op == MESH_OP_ALL_GATHER ? c : op == MESH_OP_ALL_REDUCE ? c : nin;
            int64_t out_n = op == MESH_OP_REDUCE_SCATTER ? c : op == MESH_OP_ALL_REDUCE ? c : nin;
            for (int64_t e = 0; e < in_n; e++) in[e] = val(me, e);
            truth(m, (mesh_op)op, a, c, want);
            mesh_collective(m, (mesh_op)op, a, ref, in, c, MESH_ALG_MPI);
            snprintf(what, sizeof what, "%s over '%s' c=%lld mpi vs truth", mesh_op_name(op), an,
                     (long long)c);
            expect(m, what, ref, want, out_n);
            for (int alg = 0; alg < MESH_ALG_COUNT; alg++) {
                if (alg == MESH_ALG_MPI) continue;
                memset(out, 0xff, (size_t)out_n * sizeof(float));
                mesh_collective(m, (mesh_op)op, a, out, in, c, (mesh_alg)alg);
                snprintf(what, sizeof what, "%s over '%s' c=%lld alg %s", mesh_op_name(op), an,
                         (long long)c, mesh_alg_name(alg));
                expect(m, what, out, want, out_n);
                expect(m, what, out, ref, out_n);
                /* in place */
                if (op == MESH_OP_ALL_REDUCE) {
                    for (int64_t e = 0; e < c; e++) out[e] = val(me, e);
                    mesh_all_reduce(m, a, out, out, c, (mesh_alg)alg);
                    snprintf(what, sizeof what, "in-place all_reduce over '%s' c=%lld alg %s", an,
                             (long long)c, mesh_alg_name(alg));
                    expect(m, what, out, want, c);
                }
                if (op == MESH_OP_ALL_GATHER) {
                    for (int64_t e = 0; e < c; e++) out[i * c + e] = val(me, e);
                    mesh_all_gather(m, a, out, out + i * c, c, (mesh_alg)alg);
                    snprintf(what, sizeof what, "in-place all_gather over '%s' c=%lld alg %s", an,
                             (long long)c, mesh_alg_name(alg));
                    expect(m, what, out, want, nin);
                }
            }
        }
        /* AllReduce of a count not divisible by n (uneven / padded blocks) */
        int64_t odd = c * n + (n > 1 ? 1 : 0);
        float *in2 = malloc((size_t)odd * sizeof(float)), *o2 = malloc((size_t)odd * sizeof(float));
        float *w2 = malloc((size_t)odd * sizeof(float));
        for (int64_t e = 0; e < odd; e++) in2[e] = val(me, e);
        truth(m, MESH_OP_ALL_REDUCE, a, odd, w2);
        for (int alg = 0; alg < MESH_ALG_COUNT; alg++) {
            mesh_all_reduce(m, a, o2, in2, odd, (mesh_alg)alg);
            snprintf(what, sizeof what, "all_reduce over '%s' count=%lld alg %s", an,
                     (long long)odd, mesh_alg_name(alg));
            expect(m, what, o2, w2, odd);
        }
        free(in2), free(o2), free(w2);
        free(in), free(out), free(want), free(ref);
    }
}

static void test_ppermute(mesh *m) {
    const int64_t c = 7;
    float in[7], out[7], want[7];
    for (int ax = 0; ax < mesh_ndims(m); ax++)
        for (int shift = -2; shift <= 2; shift++) {
            int n = mesh_axis_size(m, ax), co = mesh_axis_coord(m, ax);
            int from = co - shift, wraps = mesh_axis_wraps(m, ax);
            if (wraps) from = ((from % n) + n) % n;
            for (int64_t e = 0; e < c; e++) in[e] = val(mesh_rank(m), e), out[e] = -99;
            for (int inplace = 0; inplace < 2; inplace++) {
                for (int64_t e = 0; e < c; e++) {
                    want[e] = -99;
                    if (shift == 0)
                        want[e] = in[e];
                    else if (from >= 0 && from < n) {
                        mesh_axes one = {1, {ax, 0, 0}};
                        want[e] = val(mesh_axes_member(m, one, from), e);
                    }
                    out[e] = inplace ? in[e] : -99;
                }
                if (inplace && shift != 0 && !(from >= 0 && from < n))
                    for (int64_t e = 0; e < c; e++) want[e] = in[e];
                mesh_ppermute(m, ax, shift, out, inplace ? out : in, c);
                char what[96];
                snprintf(what, sizeof what, "ppermute axis %c shift %d%s", mesh_axis_name(m, ax),
                         shift, inplace ? " in place" : "");
                expect(m, what, out, want, c);
            }
        }
}

/* Lanes keep every element's order of additions: ReduceScatter and AllReduce of non-integer
 * values (where the order shows in the rounding) give the same bits with and without lanes. */
static void test_lane_bits(mesh *m) {
    mesh_axes x = {1, {0, 0, 0}};
    int n = mesh_axis_size(m, 0);
    const int64_t c = 1001;
    float *in = malloc((size_t)c * n * sizeof(float)), *o1 = malloc((size_t)c * n * sizeof(float));
    float *o2 = malloc((size_t)c * n * sizeof(float));
    for (int64_t e = 0; e < c * n; e++) in[e] = 1.0f / (float)(3 + (mesh_rank(m) * 7 + e) % 29);
    for (int alg = MESH_ALG_RING; alg <= MESH_ALG_BIDIR; alg++)
        for (int op = MESH_OP_REDUCE_SCATTER; op <= MESH_OP_ALL_REDUCE; op++) {
            int64_t cnt = op == MESH_OP_ALL_REDUCE ? c * n : c;
            mesh_set_chunk(m, 0);
            mesh_collective(m, (mesh_op)op, x, o1, in, cnt, (mesh_alg)alg);
            mesh_set_chunk(m, 8);
            mesh_collective(m, (mesh_op)op, x, o2, in, cnt, (mesh_alg)alg);
            char what[96];
            snprintf(what, sizeof what, "%s alg %s, lanes vs none (non-integer)", mesh_op_name(op),
                     mesh_alg_name(alg));
            expect(m, what, o2, o1, op == MESH_OP_ALL_REDUCE ? cnt : c);
        }
    mesh_set_chunk(m, 1 << 20);
    /* DIRECT adds in rank order: the same bits twice, and one AllReduce result on every rank */
    mesh_all_reduce(m, x, o1, in, c * n, MESH_ALG_DIRECT);
    mesh_all_reduce(m, x, o2, in, c * n, MESH_ALG_DIRECT);
    expect(m, "all_reduce direct twice (non-integer)", o2, o1, c * n);
    const mesh_wire w = mesh_get_wire(m); /* fp32: the exact bits travel */
    mesh_set_wire(m, MESH_WIRE_F32);
    mesh_ppermute(m, 0, 1, o2, o1, c * n);
    mesh_set_wire(m, w);
    if (mesh_axis_wraps(m, 0) || mesh_axis_coord(m, 0) > 0)
        expect(m, "all_reduce direct: my neighbour's result (non-integer)", o2, o1, c * n);
    free(in), free(o1), free(o2);
}

/* Non-blocking: starts an AllReduce, computes until mesh_test reports it done (the progress
 * thread must complete it without the caller entering mesh: mesh_test only reads its flag),
 * then waits; also a blocking call and a second non-blocking call in flight at once. No clock
 * bounds the compute: under load a progress thread may wait long for a core, and only its
 * getting none at all while its caller computes is a failure. The bound is a count of compute
 * chunks of ~0.1 ms of CPU each, which a wait for a core does not advance: done takes 70–300 of
 * them on 8 ranks of 2 loaded cores, so NB_MAX_POLLS (50000, ~4 s of the caller's CPU) means
 * the calls do not move unless the caller enters mesh. The SMPI build runs the calls on the
 * caller's coroutine in simulated time, where the compute is not simulated: mesh_test moves them
 * on and the bound is 20 s of the simulated clock, which no load can change. */
#define NB_MAX_POLLS 50000
static int nb_keep_computing(int polls, double t0) {
#ifdef MESHTRAIN_SMPI
    (void)polls;
    return mesh_now() - t0 < 20;
#else
    (void)t0;
    return polls < NB_MAX_POLLS;
#endif
}
static void test_nonblocking(mesh *m) {
    mesh_axes all = {mesh_ndims(m), {0, 1, 2}};
    int64_t c = 1 << 18;
    float *in = malloc((size_t)c * sizeof(float)), *out = malloc((size_t)c * sizeof(float));
    float *want = malloc((size_t)c * sizeof(float));
    int n = mesh_axes_size(m, all);
    float *g = malloc((size_t)(c / 64) * n * sizeof(float)),
          *gw = malloc((size_t)(c / 64) * n * sizeof(float));
    for (int64_t e = 0; e < c; e++) in[e] = val(mesh_rank(m), e);
    truth(m, MESH_OP_ALL_REDUCE, all, c, want);
    truth(m, MESH_OP_ALL_GATHER, all, c / 64, gw);
    double t0 = mesh_now(), x = 0;
    mesh_req *r = mesh_iall_reduce(m, all, out, in, c, MESH_ALG_DEFAULT);
    mesh_req *r2 = mesh_iall_gather(m, all, g, in, c / 64, MESH_ALG_RING);
    float *g3 = malloc((size_t)(c / 64) * n * sizeof(float)),
          *o3 = malloc((size_t)(c / 64) * sizeof(float));
    mesh_req *r3 = mesh_iall_gather(m, all, g3, in, c / 64, MESH_ALG_DIRECT);
    mesh_req *r4 = mesh_iall_reduce(m, all, o3, in, c / 64, MESH_ALG_DIRECT);
    float small[3] = {1, 2, 3}, sum[3];
    mesh_all_reduce(m, all, sum, small, 3, MESH_ALG_DEFAULT); /* blocking, meanwhile */
    int polls = 0, done = 0;
    while (!(done = mesh_test(r)) && nb_keep_computing(polls, t0)) {
        for (int k = 0; k < 100000; k++) x += 1e-9 * k; /* the caller's compute */
        polls++;
    }
    mesh_wait(r);
    mesh_wait(r2);
    mesh_wait(r3);
    mesh_wait(r4);
    expect(m, "iall_reduce", out, want, c);
    expect(m, "iall_gather (concurrent)", g, gw, (c / 64) * n);
    expect(m, "iall_gather direct (concurrent)", g3, gw, (c / 64) * n);
    expect(m, "iall_reduce direct (concurrent)", o3, want, c / 64);
    free(g3), free(o3);
    float sw[3] = {(float)n, 2.0f * n, 3.0f * n};
    expect(m, "blocking all_reduce during non-blocking ones", sum, sw, 3);
    if (!done) {
        fprintf(stderr,
                "FAIL rank %d: iall_reduce not done after %d compute chunks (%.1f s of mesh_now): "
                "the progress thread does not move it while the caller computes\n",
                mesh_rank(m), polls, mesh_now() - t0);
        failures++;
    }
    mesh_stat st = mesh_stats(m, MESH_OP_ALL_REDUCE, -1);
    if (st.calls < 2) {
        fprintf(stderr, "FAIL rank %d: stats count %lld all_reduce calls\n", mesh_rank(m),
                (long long)st.calls);
        failures++;
    }
    mesh_log("non-blocking: done after %d compute chunks (%.3f s) [%g]\n", polls, mesh_now() - t0,
             x > 0 ? 0.0 : 1.0);
    free(in), free(out), free(want), free(g), free(gw);
}

/* Accounting: the trace holds every call in order with its signature. */
static void test_trace(mesh *m) {
    mesh_axes x = {1, {0, 0, 0}};
    float a[4] = {1, 1, 1, 1}, b[4 * 8];
    mesh_stats_reset(m);
    static mesh_call recs[1024];
    int n0 = mesh_trace_read(m, 0, recs, 1024);
    int64_t next = n0 ? recs[n0 - 1].seq + 1 : 0;
    mesh_all_gather(m, x, b, a, 1, MESH_ALG_RING);
    mesh_all_reduce(m, x, a, a, 4, MESH_ALG_BIDIR);
    int got = mesh_trace_read(m, next, recs, 8);
    int nx = mesh_axis_size(m, 0);
    int ok = got == 2 && recs[0].op == MESH_OP_ALL_GATHER && recs[1].op == MESH_OP_ALL_REDUCE &&
             recs[0].seq + 1 == recs[1].seq && recs[0].alg == MESH_ALG_RING && recs[1].count == 4 &&
             recs[0].t_end >= recs[0].t_start;
    int64_t sent = recs[0].link_bytes[0][0] + recs[0].link_bytes[0][1];
    /* ring: n−1 blocks of 4 B; line: blocks 0..r go right, r..n−1 go left */
    int r = mesh_axis_coord(m, 0);
    int64_t blocks =
        mesh_axis_wraps(m, 0) ? nx - 1 : (r + 1 < nx ? r + 1 : 0) + (r >= 1 ? nx - r : 0);
    if (ok) ok = sent == blocks * mesh_wire_bytes(mesh_get_wire(m));
    /* DIRECT counts link crossings: a block d hops away crosses d links (shortest way round) */
    mesh_all_gather(m, x, b, a, 1, MESH_ALG_DIRECT);
    int64_t want_direct = 0;
    for (int j = 0; j < nx; j++) {
        int d = abs(j - r);
        if (mesh_axis_wraps(m, 0) && nx - d < d) d = nx - d;
        want_direct += 4 * d;
    }
    if (ok && mesh_trace_read(m, next + 2, recs + 2, 1) == 1) {
        int64_t got_direct = recs[2].link_bytes[0][0] + recs[2].link_bytes[0][1];
        if (recs[2].alg != MESH_ALG_DIRECT || got_direct != want_direct) {
            fprintf(stderr,
                    "FAIL rank %d: direct all_gather accounted %lld link bytes, want %lld\n",
                    mesh_rank(m), (long long)got_direct, (long long)want_direct);
            failures++;
        }
    } else
        ok = 0;
    mesh_stat st = mesh_stats(m, MESH_OP_ALL_GATHER, 0);
    if (!ok || st.calls != 2) {
        fprintf(stderr,
                "FAIL rank %d: trace got %d records (op %d,%d) sent %lld, stats calls %lld\n",
                mesh_rank(m), got, got > 0 ? (int)recs[0].op : -1, got > 1 ? (int)recs[1].op : -1,
                (long long)sent, (long long)st.calls);
        failures++;
    }
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    mesh *m = test_mesh_wired(argc, argv, "test_coll");
    /* every ordered set of axes, including the empty one */
    int nd = mesh_ndims(m);
    test_each_axes(m, 0, nd, test_set);
    /* lanes (mesh_set_chunk): 8-byte chunks cut the blocks of 7 and 1001 elements into 4 and
     * 16 lanes; the results must be the same bits */
    mesh_set_chunk(m, 8);
    for (int a0 = 0; a0 < nd; a0++) {
        mesh_axes one = {1, {a0, 0, 0}};
        test_set(m, one);
    }
    if (nd > 1) {
        mesh_axes all = {nd, {0, 1, 2}};
        test_set(m, all);
    }
    mesh_set_chunk(m, 1 << 20);
    test_lane_bits(m);
    test_ppermute(m);
    test_trace(m);
    mesh_set_verify(m, 0);
    test_nonblocking(m);
    return test_mesh_finish(m, "test_coll", failures);
}
