/* test_wire: bf16 on the wire (coll.h: mesh_set_wire, and per call: mesh_coll_run).
 *  - the conversion against a naive twin (the nearer of the two bf16 neighbours, computed in
 *    double; ties to the even one) on every special case and 1e6 random bit patterns;
 *  - every collective × algorithm over each axis and over all axes, on non-integer data:
 *    AllGather, AllToAll and ppermute deliver exactly the bf16-rounded fp32 truth (over one
 *    rank, a copy: exact); ReduceScatter
 *    and AllReduce are within n·2⁻⁸·Σ|x| of the sum computed in double (each of the ≤ n
 *    roundings on the way loses at most 2⁻⁹ of a partial sum no larger than Σ|x|); an
 *    AllReduce's result is the same bits on every rank of the set; lanes do not change the bits;
 *  - bytes: a bf16 call accounts exactly half the link bytes of the same fp32 call, and the
 *    baselines (MPI, DIRECT) stay fp32 and exact;
 *  - the format as a property of each call (mesh_coll_run, mesh_coll_start): the same bits as
 *    under the mesh's default format, whatever that default, also for a non-blocking bf16 call
 *    with fp32 calls beside it; each trace record names its call's format;
 *  - bf16 in memory (mesh_all_gather_bf16, blocking and not): every algorithm delivers each
 *    rank's 2-byte patterns bit for bit (NaN payloads and the halves of fp32 signalling NaNs
 *    included), as MPI_Allgather of MPI_UINT16_T does, with half an fp32 gather's link bytes of
 *    the same element count, recorded as count bf16 elements; under either default format.
 * Usage: mpirun -np N test_wire --mesh SPEC [--open AXES] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "mesh/coll.h"
#include "mesh/mesh_mpi.h"
#include "mesh_args.h"

static int failures;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "FAIL rank %d: ", mesh_world_rank());                                      \
        fprintf(stderr, __VA_ARGS__);                                                              \
        failures++;                                                                                \
    } while (0)

/* ---- the conversion against its naive twin ---- */
static double bits_value(uint32_t u) { /* fp32 value of bits u; the pattern of inf as 2^128 */
    if ((u & 0x7fffffffu) == 0x7f800000u) return (u >> 31 ? -1 : 1) * ldexp(1.0, 128);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint16_t naive_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x)) return 0x7fc0;
    if (isinf(x)) return (uint16_t)(u >> 16);
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u; /* same sign, next magnitude up */
    const double dl = fabs((double)x - bits_value(lo)), dh = fabs(bits_value(hi) - (double)x);
    if (dl < dh || (dl == dh && ((lo >> 16) & 1) == 0)) return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}
static void test_convert(void) {
    const float special[] = {0.0f,
                             -0.0f,
                             1.0f,
                             -1.0f,
                             1.00390625f /* tie, even below */,
                             1.01171875f /* tie, odd below */,
                             3.4028235e38f,
                             -3.4028235e38f,
                             1e-45f,
                             1.1754942e-38f,
                             INFINITY,
                             -INFINITY};
    int bad = 0;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (kern_bf16_of(special[i]) != naive_bf16(special[i]) && bad++ < 5)
            FAIL("bf16(%.9g) = 0x%04x, naive 0x%04x\n", (double)special[i],
                 kern_bf16_of(special[i]), naive_bf16(special[i]));
    uint16_t h = kern_bf16_of(NAN);
    if (!isnan(kern_bf16_val(h))) FAIL("bf16(NaN) = 0x%04x is not a NaN\n", h);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 1000000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t u = (uint32_t)(s >> 16);
        float x;
        memcpy(&x, &u, sizeof x);
        if (isnan(x)) continue;
        if (kern_bf16_of(x) != naive_bf16(x) && bad++ < 5)
            FAIL("bf16(%.9g = 0x%08x) = 0x%04x, naive 0x%04x\n", (double)x, u, kern_bf16_of(x),
                 naive_bf16(x));
        if (kern_bf16_round(x) != kern_bf16_val(naive_bf16(x)) && bad++ < 5)
            FAIL("bf16_round(%.9g) disagrees\n", (double)x);
    }
}

/* ---- collectives ---- */
static float val(int r, int64_t e) { /* non-integer, most not representable in bf16 */
    return (float)sin(0.37 * (double)r + 0.0113 * (double)e + 0.5) * (1.0f + (float)(e % 5));
}

static void gather_world_compare(mesh *m, mesh_axes a, const float *x, int64_t n,
                                 const char *what) {
    /* every member of the set must hold the same bits: compare with member 0 over MPI */
    MPI_Comm c = mesh_axes_comm(m, a)->mpi;
    float *ref = malloc((size_t)n * sizeof(float));
    memcpy(ref, x, (size_t)n * sizeof(float));
    MPI_Bcast(ref, (int)n, MPI_FLOAT, 0, c);
    if (memcmp(ref, x, (size_t)n * sizeof(float)) != 0)
        FAIL("%s: result differs from the set's first rank\n", what);
    free(ref);
}

static void check_set(mesh *m, mesh_axes a, int64_t c, mesh_alg alg) {
    const int n = mesh_axes_size(m, a), i = mesh_axes_index(m, a), me = mesh_rank(m);
    char an[8], what[160];
    mesh_axes_str(m, a, an, sizeof an);
    float *in = malloc((size_t)(n * c) * sizeof(float)),
          *out = malloc((size_t)(n * c) * sizeof(float));
    for (int op = 0; op < MESH_OP_PPERMUTE; op++) {
        const int64_t in_n = op == MESH_OP_ALL_GATHER || op == MESH_OP_ALL_REDUCE ? c : n * c;
        const int64_t out_n = op == MESH_OP_REDUCE_SCATTER || op == MESH_OP_ALL_REDUCE ? c : n * c;
        for (int64_t e = 0; e < in_n; e++) in[e] = val(me, e);
        mesh_collective(m, (mesh_op)op, a, out, in, c, alg);
        snprintf(what, sizeof what, "%s over '%s' alg %s c=%lld", mesh_op_name(op), an,
                 mesh_alg_name(alg), (long long)c);
        for (int64_t e = 0; e < out_n; e++) {
            const int j = (int)(e / c);
            double want, tol = 0;
            if (op == MESH_OP_ALL_GATHER || op == MESH_OP_ALL_TO_ALL) {
                const float v =
                    val(mesh_axes_member(m, a, j), (op == MESH_OP_ALL_TO_ALL ? i * c : 0) + e % c);
                want = n > 1 ? kern_bf16_round(v) : v; /* one rank: a copy, nothing on a wire */
            } else {
                const int64_t at = op == MESH_OP_REDUCE_SCATTER ? i * c + e : e;
                double sum = 0, mag = 0;
                for (int k = 0; k < n; k++) {
                    const double v = val(mesh_axes_member(m, a, k), at);
                    sum += v, mag += fabs(v);
                }
                want = sum;
                tol = n > 1 ? n * ldexp(mag, -8) : 0;
            }
            if (!(fabs((double)out[e] - want) <= tol)) {
                FAIL("%s: element %lld: got %.9g want %.9g (tolerance %.3g)\n", what, (long long)e,
                     (double)out[e], want, tol);
                break;
            }
        }
        if (op == MESH_OP_ALL_REDUCE) gather_world_compare(m, a, out, c, what);
    }
    free(in), free(out);
}

/* ppermute by +1 along axis ax: the neighbour's values, bf16-rounded (the ends of an open axis
 * receive nothing and keep out). */
static void check_ppermute(mesh *m, int ax) {
    const int64_t c = 257;
    const int n = mesh_axis_size(m, ax), r = mesh_axis_coord(m, ax), me = mesh_rank(m);
    float in[257], out[257];
    for (int64_t e = 0; e < c; e++) in[e] = val(me, e), out[e] = -1.0f;
    mesh_ppermute(m, ax, 1, out, in, c);
    int from = r - 1;
    if (from < 0) from = mesh_axis_wraps(m, ax) ? n - 1 : -1;
    for (int64_t e = 0; e < c; e++) {
        float want = -1.0f;
        if (from >= 0) {
            mesh_axes one = {1, {ax, 0, 0}};
            want = kern_bf16_round(val(mesh_axes_member(m, one, from), e));
        }
        if (out[e] != want) {
            FAIL("ppermute axis %c: element %lld got %.9g want %.9g\n", mesh_axis_name(m, ax),
                 (long long)e, (double)out[e], (double)want);
            break;
        }
    }
}

/* Lanes: the same bits with and without; bytes: half of fp32's; baselines: fp32 and exact. */
static void check_lanes_bytes(mesh *m, mesh_axes a) {
    const int n = mesh_axes_size(m, a), me = mesh_rank(m);
    const int64_t c = 1001;
    float *in = malloc((size_t)(n * c) * sizeof(float)),
          *o1 = malloc((size_t)(n * c) * sizeof(float));
    float *o2 = malloc((size_t)(n * c) * sizeof(float));
    for (int64_t e = 0; e < n * c; e++) in[e] = val(me, e);
    for (int op = 0; op < MESH_OP_PPERMUTE; op++) {
        mesh_set_chunk(m, 0);
        mesh_collective(m, (mesh_op)op, a, o1, in, c, MESH_ALG_BIDIR);
        mesh_set_chunk(m, 64);
        mesh_collective(m, (mesh_op)op, a, o2, in, c, MESH_ALG_BIDIR);
        const int64_t out_n = op == MESH_OP_REDUCE_SCATTER || op == MESH_OP_ALL_REDUCE ? c : n * c;
        if (memcmp(o1, o2, (size_t)out_n * sizeof(float)) != 0)
            FAIL("%s bidir bf16: lanes change the bits\n", mesh_op_name(op));
    }
    mesh_set_chunk(m, 1 << 20);
    int64_t bytes[MESH_WIRE_COUNT];
    for (int w = 0; w < MESH_WIRE_COUNT; w++) {
        mesh_set_wire(m, (mesh_wire)w);
        const int64_t before = mesh_stats(m, MESH_OP_ALL_REDUCE, -1).bytes;
        mesh_all_reduce(m, a, o1, in, c, MESH_ALG_DEFAULT);
        bytes[w] = mesh_stats(m, MESH_OP_ALL_REDUCE, -1).bytes - before;
    }
    if (bytes[MESH_WIRE_BF16] * 2 != bytes[MESH_WIRE_F32])
        FAIL("all_reduce link bytes: bf16 %lld, fp32 %lld (want half)\n",
             (long long)bytes[MESH_WIRE_BF16], (long long)bytes[MESH_WIRE_F32]);
    mesh_all_reduce(m, a, o1, in, c, MESH_ALG_MPI); /* fp32 reference */
    for (int alg = MESH_ALG_MPI; alg <= MESH_ALG_DIRECT; alg++) {
        mesh_all_gather(m, a, o2, in, c, (mesh_alg)alg);
        for (int j = 0; j < n; j++)
            for (int64_t e = 0; e < c; e++)
                if (o2[j * c + e] != val(mesh_axes_member(m, a, j), e)) {
                    FAIL("all_gather %s under bf16: not exact fp32 at %d,%lld\n",
                         mesh_alg_name(alg), j, (long long)e);
                    j = n;
                    break;
                }
    }
    mesh_call rec;
    static mesh_call recs[1024];
    int got = mesh_trace_read(m, 0, recs, 1024);
    rec = recs[got - 1];
    if (rec.alg != MESH_ALG_DIRECT || rec.wire != MESH_WIRE_F32)
        FAIL("the trace records DIRECT under bf16 as %s / %s\n", mesh_alg_name(rec.alg),
             mesh_wire_name(rec.wire));
    free(in), free(o1), free(o2);
}

/* The format as a property of each call (mesh_coll_run, mesh_coll_start), whatever the mesh's
 * default: a bf16 call gives the bits of the same call under the bf16 default and half the
 * bytes; an fp32 call under the bf16 default gives the exact fp32 result; a non-blocking bf16
 * call keeps its format while fp32 calls run beside it, and each record names its own format. */
static void check_per_call(mesh *m, mesh_axes a) {
    const int n = mesh_axes_size(m, a), me = mesh_rank(m);
    const int64_t c = 301;
    const size_t bytes_c = (size_t)c * sizeof(float);
    float *in = malloc(bytes_c), *dflt = malloc(bytes_c), *own = malloc(bytes_c);
    float *f32 = malloc(bytes_c), *again = malloc(bytes_c), *nb = malloc(bytes_c);
    for (int64_t e = 0; e < c; e++) in[e] = val(me, e);
    const mesh_coll_call bf = {MESH_OP_ALL_REDUCE, a, 0, c, MESH_ALG_BIDIR, MESH_WIRE_BF16};
    mesh_coll_call fp = bf;
    fp.wire = MESH_WIRE_F32;
    mesh_set_wire(m, MESH_WIRE_BF16);
    mesh_all_reduce(m, a, dflt, in, c, MESH_ALG_BIDIR);
    mesh_coll_run(m, &fp, f32, in); /* fp32 under the bf16 default */
    mesh_set_wire(m, MESH_WIRE_F32);
    mesh_all_reduce(m, a, again, in, c, MESH_ALG_BIDIR);
    if (memcmp(f32, again, bytes_c) != 0)
        FAIL("an fp32 call under the bf16 default differs from the fp32 default's result\n");
    if (n > 1 && memcmp(f32, dflt, bytes_c) == 0)
        FAIL("bf16 and fp32 on the wire gave the same bits (the format had no effect)\n");
    int64_t bytes[2];
    for (int w = 0; w < 2; w++) {
        const int64_t before = mesh_stats(m, MESH_OP_ALL_REDUCE, -1).bytes;
        mesh_coll_run(m, w ? &bf : &fp, w ? own : again, in);
        bytes[w] = mesh_stats(m, MESH_OP_ALL_REDUCE, -1).bytes - before;
    }
    if (memcmp(own, dflt, bytes_c) != 0)
        FAIL("a bf16 call under the fp32 default differs from the bf16 default's result\n");
    if (bytes[1] * 2 != bytes[0])
        FAIL("per call: bf16 %lld link bytes, fp32 %lld (want half)\n", (long long)bytes[1],
             (long long)bytes[0]);
    /* a non-blocking bf16 call, then fp32 calls while it is in flight */
    mesh_req *r = mesh_coll_start(m, &bf, nb, in);
    for (int k = 0; k < 3; k++) {
        mesh_coll_run(m, &fp, again, in);
        if (memcmp(f32, again, bytes_c) != 0) FAIL("fp32 call %d beside a bf16 one changed\n", k);
    }
    mesh_wait(r);
    if (memcmp(nb, dflt, bytes_c) != 0)
        FAIL("a non-blocking bf16 call beside fp32 calls changed its bits\n");
    static mesh_call recs[1024];
    const int got = mesh_trace_read(m, 0, recs, 1024);
    for (int k = got - 4; k < got; k++) { /* by issue: the bf16 call, then the 3 fp32 ones */
        const mesh_wire want = k == got - 4 ? MESH_WIRE_BF16 : MESH_WIRE_F32;
        if (k < 0 || recs[k].wire != want || recs[k].async != (k == got - 4))
            FAIL("trace record %d of %d: wire %s async %d (want %s)\n", k, got,
                 k < 0 ? "?" : mesh_wire_name(recs[k].wire), k < 0 ? -1 : recs[k].async,
                 mesh_wire_name(want));
    }
    mesh_set_wire(m, MESH_WIRE_BF16); /* main's default again */
    free(in), free(dflt), free(own), free(f32), free(again), free(nb);
}

/* 2-byte patterns of rank r, element e: every pattern class, NaN payloads and the halves of
 * fp32 signalling NaNs (0x7f80 next to 0x0001) among them. */
static uint16_t pattern(int r, int64_t e) {
    static const uint16_t special[] = {0x7f80, 0x0001, 0xff81, 0x7fc0, 0x0000, 0x8000, 0xffff};
    if (e % 11 < 7) return special[e % 11];
    return (uint16_t)(0x9e37u * (unsigned)(r + 1) + 0x79b9u * (unsigned)e);
}

/* bf16 in memory: the patterns gathered bit for bit by every algorithm (and by the non-blocking
 * call), as MPI_Allgather of 2-byte integers; link bytes half an fp32 gather of as many
 * elements; the trace's record: count elements in bf16. */
static void check_bf16_mem(mesh *m, mesh_axes a) {
    const int n = mesh_axes_size(m, a), me = mesh_rank(m);
    const int64_t c = 1002;
    uint16_t *in = malloc((size_t)c * 2), *out = malloc((size_t)(n * c) * 2);
    uint16_t *ref = malloc((size_t)(n * c) * 2);
    float *fin = malloc((size_t)c * 4), *fout = malloc((size_t)(n * c) * 4);
    for (int64_t e = 0; e < c; e++) in[e] = pattern(me, e), fin[e] = val(me, e);
    MPI_Allgather(in, (int)c, MPI_UINT16_T, ref, (int)c, MPI_UINT16_T, mesh_axes_comm(m, a)->mpi);
    for (int w = 0; w < MESH_WIRE_COUNT; w++) {
        mesh_set_wire(m, (mesh_wire)w); /* the default format does not matter */
        for (int alg = MESH_ALG_DEFAULT; alg < MESH_ALG_COUNT; alg++) {
            memset(out, 0xa5, (size_t)(n * c) * 2);
            if (alg % 2)
                mesh_wait(mesh_iall_gather_bf16(m, a, out, in, c, (mesh_alg)alg));
            else
                mesh_all_gather_bf16(m, a, out, in, c, (mesh_alg)alg);
            if (memcmp(out, ref, (size_t)(n * c) * 2) != 0)
                FAIL("all_gather_bf16 alg %s (default wire %s): not the patterns bit for bit\n",
                     mesh_alg_name(alg), mesh_wire_name(w));
        }
    }
    int64_t bytes[2];
    for (int k = 0; k < 2; k++) {
        mesh_set_wire(m, MESH_WIRE_F32);
        const int64_t before = mesh_stats(m, MESH_OP_ALL_GATHER, -1).bytes;
        if (k)
            mesh_all_gather_bf16(m, a, out, in, c, MESH_ALG_BIDIR);
        else
            mesh_all_gather(m, a, fout, fin, c, MESH_ALG_BIDIR);
        bytes[k] = mesh_stats(m, MESH_OP_ALL_GATHER, -1).bytes - before;
    }
    if (bytes[1] * 2 != bytes[0])
        FAIL("all_gather_bf16: %lld link bytes, an fp32 gather of as many elements %lld (want "
             "half)\n",
             (long long)bytes[1], (long long)bytes[0]);
    static mesh_call recs[1024];
    const int got = mesh_trace_read(m, 0, recs, 1024);
    if (got < 1 || recs[got - 1].count != c || recs[got - 1].wire != MESH_WIRE_BF16)
        FAIL("all_gather_bf16's record: count %lld wire %s (want %lld, bf16)\n",
             got < 1 ? -1LL : (long long)recs[got - 1].count,
             got < 1 ? "?" : mesh_wire_name(recs[got - 1].wire), (long long)c);
    mesh_set_wire(m, MESH_WIRE_BF16); /* main's default again */
    free(in), free(out), free(ref), free(fin), free(fout);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    mesh *m = test_mesh(argc, argv);
    test_convert();
    mesh_set_wire(m, MESH_WIRE_BF16);
    const int nd = mesh_ndims(m);
    static const int64_t sizes[] = {1, 7, 1001};
    for (int alg = MESH_ALG_DEFAULT; alg <= MESH_ALG_MULTI; alg++)
        for (int si = 0; si < 3; si++) {
            for (int a0 = 0; a0 < nd; a0++) {
                mesh_axes one = {1, {a0, 0, 0}};
                check_set(m, one, sizes[si], (mesh_alg)alg);
            }
            if (nd > 1) {
                mesh_axes all = {nd, {nd - 1, 0, 1}}; /* minor axis first: a non-trivial order */
                if (nd == 2) all.ax[1] = 0;
                check_set(m, all, sizes[si], (mesh_alg)alg);
            }
        }
    for (int a0 = 0; a0 < nd; a0++) {
        mesh_axes one = {1, {a0, 0, 0}};
        check_ppermute(m, a0);
        mesh_set_wire(m, MESH_WIRE_BF16);
        check_lanes_bytes(m, one);
        check_per_call(m, one);
        check_bf16_mem(m, one);
    }
    if (nd > 1) check_bf16_mem(m, (mesh_axes){2, {1, 0, 0}});
    return test_mesh_finish(m, "test_wire", failures);
}
