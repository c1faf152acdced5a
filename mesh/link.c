/* link: the public face of the emulated links (link.h): setting them, chip emulation, and the
 * cost model's name of an op. The links' state and booking are link_book.c's (links.h). */
#define _POSIX_C_SOURCE 200809L /* gethostname */
#include <string.h>
#include <unistd.h>

#include "mesh/cost.h"
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

int mesh_emulate(mesh *m, const char *chip, double measured_flops, mesh_emulation *out) {
    const cost_chip *c = cost_chip_find(chip);
    if (!c || !(measured_flops > 0)) return -1;
    double mean = 0;
    mesh_blocking_begin("MPI_Allreduce and MPI_Bcast (ranks agreeing on the emulated links)");
    MPI_Allreduce(&measured_flops, &mean, 1, MPI_DOUBLE, MPI_SUM, mesh_world_comm(m)->mpi);
    mean /= mesh_nranks(m);
    /* hosts must agree for the shared clock (link.h) */
    char host[64] = "", first[64];
    gethostname(host, sizeof host - 1);
    memcpy(first, host, sizeof first);
    MPI_Bcast(first, 64, MPI_CHAR, 0, mesh_world_comm(m)->mpi);
    int same = strcmp(first, host) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, mesh_world_comm(m)->mpi);
    mesh_blocking_end();
    if (!all)
        mesh_log("warning: --emulate on several hosts: emulated delays rely on one shared clock "
                 "and will be off by the hosts' clock offsets\n");
    mesh_emulation e;
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
    switch (op) {
    case MESH_OP_ALL_GATHER:
        return COST_OP_ALL_GATHER;
    case MESH_OP_REDUCE_SCATTER:
        return COST_OP_REDUCE_SCATTER;
    case MESH_OP_ALL_REDUCE:
        return COST_OP_ALL_REDUCE;
    case MESH_OP_ALL_TO_ALL:
        return COST_OP_ALL_TO_ALL;
    default:
        return COST_OP_PPERMUTE;
    }
}
