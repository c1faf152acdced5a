/* coll_a2av: AllToAllv, the AllToAll of variable blocks (coll.h): the counts first (an AllGather
 * of every rank's send counts, so that every rank holds the whole matrix), then the blocks by the
 * call's algorithm: MPI_Alltoallv; DIRECT, each block at its own size in one round
 * (coll_direct.c); RING, BIDIR, SEQ and MULTI, the engine's AllToAll over blocks padded to the
 * matrix's largest count (the padding moves as zeros and is dropped on arrival). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll_engine.h"
#include "mesh/parts.h"

/* Scratch slots (per context) after coll_direct.c's (≤ 27). */
enum { SL_VIN = 28, SL_VOUT = 29 };

static int icount(int64_t n) {
    CHECK(n >= 0 && n <= INT_MAX, "count %lld does not fit MPI's int", (long long)n);
    return (int)n;
}

static void run_mpi(const coll_env *e, const coll_args *x, int64_t (*lb)[2]) {
    const int n = topo_axes_size(e->topo, x->a), me = topo_axes_index(e->topo, x->a);
    int *v = malloc(4 * (size_t)n * sizeof(int));
    CHECK(v, "out of memory");
    int *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
    int64_t so = 0, ro = 0, bytes = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = icount(x->vcounts[(int64_t)me * n + j]), sd[j] = icount(so), so += sc[j];
        rc[j] = icount(x->vcounts[(int64_t)j * n + me]), rd[j] = icount(ro), ro += rc[j];
        if (j != me) bytes += sc[j];
    }
    MPI_Alltoallv(x->in, sc, sd, MPI_FLOAT, x->out, rc, rd, MPI_FLOAT,
                  comms_set(e->comms, e->topo, x->a));
    free(v);
    if (x->a.n) lb[x->a.ax[0]][0] += bytes * (int64_t)sizeof(float);
}

/* The engine's AllToAll on blocks of x->count (the largest), through padded copies. */
static void run_padded(const coll_env *e, const coll_args *x, mesh_alg alg, chain *ch,
                       int64_t (*lb)[2]) {
    const int n = topo_axes_size(e->topo, x->a), me = topo_axes_index(e->topo, x->a);
    const int64_t c = x->count;
    float *pin = eng_scratch(e->ctx, SL_VIN, (int64_t)n * c);
    float *pout = eng_scratch(e->ctx, SL_VOUT, (int64_t)n * c);
    if (CTX_DATA(e->ctx)) {
        memset(pin, 0, (size_t)(n * c) * sizeof(float));
        const float *src = x->in;
        for (int j = 0; j < n; j++) {
            const int64_t l = x->vcounts[(int64_t)me * n + j];
            memcpy(pin + j * c, src, (size_t)l * sizeof(float));
            src += l;
        }
    }
    coll_args y = *x;
    y.vcounts = NULL, y.in = pin, y.out = pout;
    coll_run_blocks(e, PH_A2A, &y, alg, ch, lb);
    if (!CTX_DATA(e->ctx)) return;
    float *dst = x->out;
    for (int j = 0; j < n; j++) {
        const int64_t l = x->vcounts[(int64_t)j * n + me];
        memcpy(dst, pout + j * c, (size_t)l * sizeof(float));
        dst += l;
    }
}

void a2av_run(const coll_env *e, const coll_args *x, mesh_alg alg, chain *ch, int64_t (*lb)[2]) {
    if (alg == MESH_ALG_MPI)
        run_mpi(e, x, lb);
    else if (alg == MESH_ALG_DIRECT)
        direct_a2av(e, x, lb);
    else
        run_padded(e, x, alg, ch, lb);
}

void mesh_all_to_allv_counts(mesh *m, mesh_axes a, int64_t *counts, const int64_t *send,
                             mesh_alg alg) {
    const int n = mesh_axes_size(m, a);
    for (int j = 0; j < n; j++)
        CHECK(send[j] >= 0, "all_to_allv: negative count %lld to %d", (long long)send[j], j);
    /* int64 counts as pairs of four-byte units, moved bit for bit (fp32 wire: copies only) */
    const mesh_coll_call c = {MESH_OP_ALL_GATHER, a, 0, 2 * (int64_t)n, alg, MESH_WIRE_F32};
    mesh_coll_run(m, &c, (float *)(void *)counts, (const float *)(const void *)send);
}

int64_t mesh_all_to_allv_max(const mesh *m, mesh_axes a, const int64_t *counts) {
    const int64_t nn = (int64_t)mesh_axes_size(m, a) * mesh_axes_size(m, a);
    int64_t mx = 0;
    for (int64_t q = 0; q < nn; q++) mx = counts[q] > mx ? counts[q] : mx;
    return mx;
}

coll_args coll_args_a2av(mesh *m, mesh_axes a, float *out, const float *in, const int64_t *counts,
                         mesh_alg alg) {
    return (coll_args){.op = MESH_OP_ALL_TO_ALL,
                       .a = a,
                       .out = out,
                       .in = in,
                       .count = mesh_all_to_allv_max(m, a, counts),
                       .alg = alg,
                       .wire = mesh_part_conf(m)->wire,
                       .vcounts = counts};
}

void mesh_all_to_allv(mesh *m, mesh_axes a, float *out, const float *in, const int64_t *counts,
                      mesh_alg alg) {
    const coll_args x = coll_args_a2av(m, a, out, in, counts, alg);
    coll_run_blocking(m, &x);
}
