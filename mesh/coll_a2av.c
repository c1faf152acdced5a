/* coll_a2av: AllToAllv, the AllToAll of variable blocks (coll.h): the counts first (an AllGather
 * of every rank's send counts, so that every rank holds the whole matrix), then the blocks as one
 * call whose execution by algorithm is coll.c's (a2av_run). */
#include <string.h>

#include "mesh/coll_impl.h"
#include "mesh/parts.h"

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

coll_args coll_args_a2av_call(mesh *m, const mesh_coll_call *c, float *out, const float *in,
                              const int64_t *counts) {
    CHECK(c->op == MESH_OP_ALL_TO_ALL, "AllToAllv call: %s is not an AllToAll",
          mesh_op_name(c->op));
    CHECK(c->wire >= 0 && c->wire < MESH_WIRE_COUNT, "bad wire format %d", (int)c->wire);
    coll_args x = coll_args_a2av(m, c->axes, out, in, counts, c->alg);
    x.wire = c->wire;
    return x;
}

void mesh_coll_run_v(mesh *m, const mesh_coll_call *c, float *out, const float *in,
                     const int64_t *counts) {
    const coll_args x = coll_args_a2av_call(m, c, out, in, counts);
    coll_run_blocking(m, &x);
}
