/* test_a2av: AllToAllv (mesh_all_to_allv_counts, mesh_all_to_allv, mesh_iall_to_allv,
 * mesh_coll_start_v) on every algorithm and every ordered axis set, bit for bit against
 * MPI_Alltoallv called here on a communicator of the set's ranks (not through mesh/) and against the generating formula:
 * uniform blocks, skewed ones (one large block per rank, the rest small), zero blocks (a rank
 * sending nothing, and some pairs empty), all zero (also first, before any scratch exists), and
 * blocks cut into lanes (mesh_set_chunk).
 * The counts matrix is checked against every rank's own send counts; the reverse exchange with
 * the transposed counts returns every rank's input; the record says an AllToAll of the largest
 * block. The started exchange (with the progress thread, and inline in the lanes' pass; a
 * blocking one beside it) gives the blocking call's bits. Values are small integers: exact with --wire bf16 too.
 * Usage: mpirun -np N test_a2av --mesh SPEC [--open AXES] [--wire fp32|bf16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/mesh_mpi.h"
#include "mesh_args.h"

static int failures;

/* Element e of the block set index i sends to set index j. */
static float val(int i, int j, int64_t e) {
    return (float)((i * 131 + j * 17 + e * 7 + 3) % 23 - 11);
}

enum { PAT_UNIFORM, PAT_SKEWED, PAT_ZEROS, PAT_EMPTY, PAT_BIG, PAT_COUNT };
static const char *pat_name[PAT_COUNT] = {"uniform", "skewed", "zero blocks", "all empty", "large"};

/* Elements from set index i to j under pattern p. */
static int64_t count_of(int p, int i, int j, int n) {
    switch (p) {
    case PAT_UNIFORM:
        return 5;
    case PAT_SKEWED: /* rank i sends most to (i + 1) % n */
        return j == (i + 1) % n ? 40 + i : (i + 2 * j) % 3;
    case PAT_ZEROS: /* set index 1 sends nothing, and (i + j) % 3 == 0 pairs are empty */
        return i == 1 || (i + j) % 3 == 0 ? 0 : 1 + (i * 5 + j) % 9;
    case PAT_EMPTY:
        return 0;
    default: /* large enough for lanes and several engine steps */
        return 3000 + 101 * i - 37 * j;
    }
}

static void check(const mesh *m, const char *what, const float *got, const float *want, int64_t n) {
    failures += test_bits_differ(m, what, got, want, n);
}

/* MPI_Alltoallv over the set's ranks on a communicator split here (ranks ordered by set index). */
static void mpi_truth(const mesh *m, mesh_axes a, const int64_t *cnt, const float *in, float *out) {
    const int n = mesh_axes_size(m, a), me = mesh_axes_index(m, a);
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, mesh_axes_member(m, a, 0), me, &comm);
    int *v = malloc(4 * (size_t)n * sizeof(int)), so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        v[j] = (int)cnt[me * n + j], v[n + j] = so, so += v[j];
        v[2 * n + j] = (int)cnt[j * n + me], v[3 * n + j] = ro, ro += v[2 * n + j];
    }
    MPI_Alltoallv(in, v, v + n, MPI_FLOAT, out, v + 2 * n, v + 3 * n, MPI_FLOAT, comm);
    free(v);
    MPI_Comm_free(&comm);
}

/* The exchange started (mesh_coll_start_v, in the mesh's wire format; with the progress thread
 * or inline, as the mesh is set), its reverse run blocking while it is in flight, then compute
 * with polls before the wait: both the same bits as the blocking calls (out: the forward's, in:
 * the reverse's), the record an asynchronous AllToAll of the largest block. */
static void test_started(mesh *m, mesh_axes a, const char *an, int p, mesh_alg alg,
                         const int64_t *cnt, const int64_t *tr, const float *in, const float *out,
                         int64_t nin, int64_t nout) {
    float *got = malloc((size_t)(nout + 1) * sizeof(float)),
          *back = malloc((size_t)(nin + 1) * sizeof(float));
    const mesh_coll_call c = {MESH_OP_ALL_TO_ALL, a, 0, 0, alg, mesh_get_wire(m)};
    const int inl = mesh_get_progress(m) == MESH_PROGRESS_INLINE;
    memset(got, 0xff, (size_t)(nout + 1) * sizeof(float));
    mesh_req *r = mesh_coll_start_v(m, &c, got, in, cnt);
    mesh_all_to_allv(m, a, back, out, tr, alg); /* context 0, beside it */
    volatile float busy = 0;
    for (int i = 0; i < 100; i++) {
        for (int j = 0; j < 500; j++) busy += (float)j * 1e-3f;
        mesh_poll(m);
    }
    mesh_call rec;
    const double waited = mesh_wait_rec(r, &rec);
    char what[200];
    snprintf(what, sizeof what, "started all_to_allv over '%s' %s alg %s (%s) vs blocking", an,
             pat_name[p], mesh_alg_name(alg), inl ? "inline" : "thread");
    check(m, what, got, out, nout);
    snprintf(what, sizeof what, "blocking reverse beside a started one over '%s' %s alg %s", an,
             pat_name[p], mesh_alg_name(alg));
    check(m, what, back, in, nin);
    if (rec.op != MESH_OP_ALL_TO_ALL || !rec.async || rec.count != mesh_all_to_allv_max(m, a, cnt) ||
        !(waited >= 0) || !(rec.t_end >= rec.t_start)) {
        fprintf(stderr, "FAIL rank %d: %s recorded as %s async %d count %lld waited %g\n",
                mesh_rank(m), what, mesh_op_name(rec.op), rec.async, (long long)rec.count, waited);
        failures++;
    }
    free(got), free(back);
}

static void test_one(mesh *m, mesh_axes a, int p, mesh_alg alg) {
    const int n = mesh_axes_size(m, a), me = mesh_axes_index(m, a);
    char an[8], what[160];
    mesh_axes_str(m, a, an, sizeof an);
    int64_t *send = malloc((size_t)n * sizeof(int64_t)),
            *cnt = malloc((size_t)n * n * sizeof(int64_t)),
            *tr = malloc((size_t)n * n * sizeof(int64_t));
    int64_t nin = 0, nout = 0;
    for (int j = 0; j < n; j++) send[j] = count_of(p, me, j, n), nin += send[j];
    memset(cnt, 0xff, (size_t)n * n * sizeof(int64_t));
    mesh_all_to_allv_counts(m, a, cnt, send, alg);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (cnt[i * n + j] != count_of(p, i, j, n)) {
                fprintf(stderr,
                        "FAIL rank %d: counts over '%s' %s alg %s: [%d][%d] = %lld, want %lld\n",
                        mesh_rank(m), an, pat_name[p], mesh_alg_name(alg), i, j,
                        (long long)cnt[i * n + j], (long long)count_of(p, i, j, n));
                failures++;
                goto out;
            }
    for (int i = 0; i < n; i++) nout += cnt[i * n + me];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) tr[j * n + i] = cnt[i * n + j];
    float *in = malloc((size_t)(nin + 1) * sizeof(float)),
          *out = malloc((size_t)(nout + 1) * sizeof(float)),
          *ref = malloc((size_t)(nout + 1) * sizeof(float)),
          *want = malloc((size_t)(nout + 1) * sizeof(float)),
          *back = malloc((size_t)(nin + 1) * sizeof(float));
    for (int64_t j = 0, o = 0; j < n; j++)
        for (int64_t e = 0; e < send[j]; e++) in[o++] = val(me, (int)j, e);
    for (int64_t i = 0, o = 0; i < n; i++)
        for (int64_t e = 0; e < cnt[i * n + me]; e++) want[o++] = val((int)i, me, e);
    mpi_truth(m, a, cnt, in, ref);
    snprintf(what, sizeof what, "MPI_Alltoallv over '%s' %s vs formula", an, pat_name[p]);
    check(m, what, ref, want, nout);
    memset(out, 0xff, (size_t)(nout + 1) * sizeof(float));
    mesh_all_to_allv(m, a, out, in, cnt, alg);
    snprintf(what, sizeof what, "all_to_allv over '%s' %s alg %s vs MPI_Alltoallv", an, pat_name[p],
             mesh_alg_name(alg));
    check(m, what, out, ref, nout);
    const float guard = out[nout];
    memset(&out[nout], 0xff, sizeof(float));
    if (memcmp(&guard, &out[nout], sizeof(float)) != 0) {
        fprintf(stderr, "FAIL rank %d: %s wrote past its %lld elements\n", mesh_rank(m), what,
                (long long)nout);
        failures++;
    }
    /* the reverse exchange (the transposed counts) returns the input */
    mesh_req *r = mesh_iall_to_allv(m, a, back, out, tr, alg);
    mesh_wait(r);
    snprintf(what, sizeof what, "reverse all_to_allv over '%s' %s alg %s", an, pat_name[p],
             mesh_alg_name(alg));
    check(m, what, back, in, nin);
    test_started(m, a, an, p, alg, cnt, tr, in, out, nin, nout);
    free(in), free(out), free(ref), free(want), free(back);
out:
    free(send), free(cnt), free(tr);
}

/* The trace records an AllToAll whose count is the matrix's largest block. */
static void test_record(mesh *m) {
    mesh_axes all = {mesh_ndims(m), {0, 1, 2}};
    const int n = mesh_axes_size(m, all), me = mesh_axes_index(m, all);
    int64_t *send = malloc((size_t)n * sizeof(int64_t)),
            *cnt = malloc((size_t)n * n * sizeof(int64_t)), nin = 0, nout = 0;
    for (int j = 0; j < n; j++) send[j] = count_of(PAT_SKEWED, me, j, n), nin += send[j];
    mesh_all_to_allv_counts(m, all, cnt, send, MESH_ALG_DEFAULT);
    for (int i = 0; i < n; i++) nout += cnt[i * n + me];
    float *in = calloc((size_t)nin + 1, sizeof(float)),
          *out = calloc((size_t)nout + 1, sizeof(float));
    mesh_all_to_allv(m, all, out, in, cnt, MESH_ALG_RING);
    mesh_call *rec = malloc(1024 * sizeof(mesh_call));
    const int k = mesh_trace_read(m, 0, rec, 1024);
    const int64_t mx = mesh_all_to_allv_max(m, all, cnt);
    if (k < 1 || rec[k - 1].op != MESH_OP_ALL_TO_ALL || rec[k - 1].count != mx ||
        (n > 1 && mx != 40 + n - 1)) {
        fprintf(stderr,
                "FAIL rank %d: all_to_allv recorded as %s count %lld (want AllToAll %lld)\n",
                mesh_rank(m), k ? mesh_op_name(rec[k - 1].op) : "nothing",
                k ? (long long)rec[k - 1].count : -1LL, (long long)mx);
        failures++;
    }
    free(rec);
    free(send), free(cnt), free(in), free(out);
}

static void test_set(mesh *m, mesh_axes a) {
    for (int p = 0; p < PAT_COUNT; p++)
        for (int alg = 0; alg < MESH_ALG_COUNT; alg++) test_one(m, a, p, (mesh_alg)alg);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    mesh *m = test_mesh_wired(argc, argv, "test_a2av");
    const int nd = mesh_ndims(m);
    /* all empty first, on the fresh mesh: no scratch yet (the padded path's blocks of 0) */
    for (int alg = 0; alg < MESH_ALG_COUNT; alg++)
        test_one(m, (mesh_axes){nd, {0, 1, 2}}, PAT_EMPTY, (mesh_alg)alg);
    test_each_axes(m, 1, 2, test_set);
    /* lanes: 64-byte chunks cut the large blocks into 16 lanes; the same bits; the started
     * exchanges run on the caller's coroutine (inline) */
    mesh_set_chunk(m, 64);
    mesh_set_progress(m, MESH_PROGRESS_INLINE);
    mesh_axes all = {nd, {0, 1, 2}};
    test_set(m, all);
    mesh_set_progress(m, MESH_PROGRESS_THREAD);
    mesh_set_chunk(m, 1 << 20);
    test_record(m);
    return test_mesh_finish(m, "test_a2av", failures);
}
