/* link: the public face of the emulated links (link.h): setting them, chip emulation, and the
 * cost model's name of an op. The links' state and booking are link_book.c's (links.h). */
#define _POSIX_C_SOURCE 200809L /* gethostname */
#include <string.h>
#include <unistd.h>

#include "mesh/cost.h"
#include "mesh/errmsg.h"
#include "mesh/link.h"
#include "mesh/links.h"
#include "mesh/mesh_mpi.h"
#include "mesh/parts.h"
#include "mesh/where.h"

void mesh_link_set(mesh *m, int axis, double bw, double latency) {
    CHECK(axis >= 0 && axis < mesh_ndims(m), "axis %d out of range", axis);
#ifdef MESHTRAIN_SMPI /* emulation sleeps in real time, which would stall the whole simulation */
    if (bw > 0)
        mesh_exit_error("link emulation (--emulate, --link) is off in the SMPI build: the "
                        "simulated platform's links are the chip's (bench/simpod --chip)");
#endif
    links_set(mesh_part_links(m), axis, bw, latency);
}

void mesh_link_get(const mesh *m, int axis, double *bw, double *latency) {
    CHECK(axis >= 0 && axis < mesh_ndims(m), "axis %d out of range", axis);
    const mesh_links *l = mesh_part_links((mesh *)m);
    if (bw) *bw = l->bw[axis];
    if (latency) *latency = l->lat[axis];
}

/* Collective over: world. The mean and the least of x over the ranks; whether they all run on
 * rank 0's host. */
static void agree_rate(mesh *m, double x, double *mean, double *least, int *one_host) {
    const MPI_Comm world = mesh_world_comm(m)->mpi;
    char host[64] = "", first[64];
    gethostname(host, sizeof host - 1);
    memcpy(first, host, sizeof first);
    mesh_blocking_begin("MPI_Allreduce and MPI_Bcast (ranks agreeing on the emulated links)");
    MPI_Allreduce(&x, mean, 1, MPI_DOUBLE, MPI_SUM, world);
    MPI_Allreduce(&x, least, 1, MPI_DOUBLE, MPI_MIN, world);
    MPI_Bcast(first, 64, MPI_CHAR, 0, world);
    int same = strcmp(first, host) == 0;
    MPI_Allreduce(&same, one_host, 1, MPI_INT, MPI_MIN, world);
    mesh_blocking_end();
    *mean /= mesh_nranks(m);
}

int mesh_emulate(mesh *m, const char *chip, double measured_flops, mesh_emulation *out, char *err,
                 size_t errlen) {
    const cost_chip *c = cost_chip_find(chip); /* the same chip on every rank: no agreement */
    if (!c)
        return errmsg_fail(err, errlen, "--emulate %s: unknown chip (v3, v4p, v5e, v5p, v6e)",
                           chip ? chip : "(none)");
    double mean, least;
    mesh_emulation e;
    agree_rate(m, measured_flops > 0 ? measured_flops : 0, &mean, &least, &e.one_host);
    if (!(least > 0))
        return errmsg_fail(err, errlen,
                           "--emulate %s: a rank measured no FLOP/s to scale the links by", chip);
    e.chip_flops = c->flops_bf16;
    e.chip_w_oneway = c->ici_oneway;
    e.chip_latency = c->hop_latency;
    e.measured_flops = mean;
    e.time_scale = c->flops_bf16 / mean;
    e.bw = c->ici_oneway / e.time_scale;
    e.latency = c->hop_latency * e.time_scale;
    for (int k = 0; k < mesh_ndims(m); k++) mesh_link_set(m, k, e.bw, e.latency);
    mesh_apply_chip_wrap(m, chip);
    if (out) *out = e;
    return 0;
}

cost_op mesh_cost_op(mesh_op op) {
    static const cost_op of[MESH_OP_COUNT] = {[MESH_OP_ALL_GATHER] = COST_OP_ALL_GATHER,
                                              [MESH_OP_REDUCE_SCATTER] = COST_OP_REDUCE_SCATTER,
                                              [MESH_OP_ALL_REDUCE] = COST_OP_ALL_REDUCE,
                                              [MESH_OP_ALL_TO_ALL] = COST_OP_ALL_TO_ALL,
                                              [MESH_OP_PPERMUTE] = COST_OP_PPERMUTE,
                                              [MESH_OP_SEND] = COST_OP_PPERMUTE,
                                              [MESH_OP_RECV] = COST_OP_PPERMUTE};
    return (unsigned)op < MESH_OP_COUNT ? of[op] : COST_OP_PPERMUTE;
}
