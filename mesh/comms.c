/* comms: the communicators of a mesh context (see comms.h), and as mesh.h hands them out. */
#include "mesh/comms.h"

#include <stdlib.h>

#include "mesh/parts.h"

/* The communicator of the ordered axis set a that holds this rank: the ranks sharing its
 * coordinates off the set, numbered by mesh_axes_index (the set's last axis fastest). Collective
 * over world (whose ranks are mesh ranks), or over the set's ranks when lazy (SMPI only).
 * The MPI build splits world by the coordinates off the set. The SMPI build makes the same
 * communicator from the group of those ranks, one strided range along the set's last axis per
 * combination of its other axes (MPI_Comm_create, or MPI_Comm_create_group when lazy): SMPI serves
 * a split's gather of every rank's colour at one root in time quadratic in the ranks, for every
 * set, and its MPI_Comm_create needs no messages but the new communicator's own set-up. */
static MPI_Comm set_comm(const mesh_topo *t, MPI_Comm world, mesh_axes a, int lazy) {
    MPI_Comm out;
#ifdef MESHTRAIN_SMPI
    int stride[MESH_MAX_AXES], base = t->rank;
    for (int d = t->ndims - 1, s = 1; d >= 0; s *= t->size[d--]) stride[d] = s;
    for (int i = 0; i < a.n; i++) base -= t->coord[a.ax[i]] * stride[a.ax[i]];
    int len = a.n ? t->size[a.ax[a.n - 1]] : 1, step = a.n ? stride[a.ax[a.n - 1]] : 1;
    int nr = topo_axes_size(t, a) / len;
    int(*r)[3] = malloc((size_t)nr * sizeof *r);
    CHECK(r, "out of memory");
    for (int j = 0; j < nr; j++) { /* j: the set's other axes, in the set's order, last fastest */
        int q = j, first = base;
        for (int i = a.n - 2; i >= 0; i--) {
            first += q % t->size[a.ax[i]] * stride[a.ax[i]];
            q /= t->size[a.ax[i]];
        }
        r[j][0] = first, r[j][1] = first + (len - 1) * step, r[j][2] = step;
    }
    MPI_Group wg, g;
    MPI_Comm_group(world, &wg);
    MPI_Group_range_incl(wg, nr, r, &g);
    if (lazy)
        MPI_Comm_create_group(world, g, mesh_set_id(a), &out);
    else
        MPI_Comm_create(world, g, &out);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(r);
#else
    (void)lazy;
    int color = 0; /* the coordinates on the axes NOT in the set */
    for (int d = 0; d < t->ndims; d++) {
        int in = 0;
        for (int i = 0; i < a.n; i++) in |= a.ax[i] == d;
        if (!in) color = color * t->size[d] + t->coord[d];
    }
    MPI_Comm_split(world, color, topo_axes_index(t, a), &out);
#endif
    return out;
}

#ifdef MESHTRAIN_SMPI
/* SMPI keeps, for every simulated rank, a copy of the group of every communicator it is in: on a
 * 16x16x16 slice the 6 orders of the 3-axis set and the 6 of each 2-axis set, on two contexts,
 * are tens of GB. So the SMPI build makes a set of two or three axes at its first collective
 * (MPI_Comm_create_group: collective over the set's ranks only, which all make that call), and a
 * run over one axis set pays for that set alone. */
enum { LAZY_FROM = 2 };
#else
enum { LAZY_FROM = MESH_MAX_AXES + 1 }; /* every set at mesh_create */
#endif

MPI_Comm comms_set(mesh_comms *c, const mesh_topo *t, mesh_axes a) {
    mesh_comm *s = &c->set[mesh_set_id(a)];
    if (s->mpi == MPI_COMM_NULL && a.n >= LAZY_FROM) s->mpi = set_comm(t, c->world.mpi, a, 1);
    CHECK(s->mpi != MPI_COMM_NULL, "no communicator for axis set %d", mesh_set_id(a));
    return s->mpi;
}

void comms_create(mesh_comms *c, const mesh_topo *t, MPI_Comm base) {
    for (int i = 0; i < MESH_NSETS; i++) c->set[i].mpi = MPI_COMM_NULL;
        /* rank in world = mesh rank */
#ifdef MESHTRAIN_SMPI
    /* SMPI's split gathers every rank's colour at rank 0, which then sends each rank its group
     * (2 × 4095 messages through rank 0 on a 16x16x16 slice, per context); a duplicate needs
     * neither, and is the same communicator when the mesh keeps MPI_COMM_WORLD's order. */
    int wr, same;
    MPI_Comm_rank(base, &wr);
    same = wr == t->rank;
    MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_LAND, base);
    if (same)
        MPI_Comm_dup(base, &c->world.mpi);
    else
#endif
        MPI_Comm_split(base, 0, t->rank, &c->world.mpi);
    /* every ordered subset of the axes, in the same order on every rank */
    int nd = t->ndims;
    for (int n = 0; n <= nd; n++) {
        int ax[3];
        for (ax[0] = 0; ax[0] < (n > 0 ? nd : 1); ax[0]++)
            for (ax[1] = 0; ax[1] < (n > 1 ? nd : 1); ax[1]++)
                for (ax[2] = 0; ax[2] < (n > 2 ? nd : 1); ax[2]++) {
                    mesh_axes a = {n, {ax[0], ax[1], ax[2]}};
                    int dup = 0;
                    for (int i = 0; i < n; i++)
                        for (int j = 0; j < i; j++) dup |= a.ax[i] == a.ax[j];
                    if (dup || n >= LAZY_FROM) continue;
                    for (int i = n; i < 3; i++) a.ax[i] = 0;
                    c->set[mesh_set_id(a)].mpi = set_comm(t, c->world.mpi, a, 0);
                }
    }
    for (int d = 0; d < nd; d++) c->axis[d] = c->set[1 + d].mpi;
}

void comms_free(mesh_comms *c) {
    for (int i = 0; i < MESH_NSETS; i++)
        if (c->set[i].mpi != MPI_COMM_NULL) MPI_Comm_free(&c->set[i].mpi);
    MPI_Comm_free(&c->world.mpi);
}

void comms_p2p_create(mesh_p2p_comms *p, const mesh_comms *c, int ndims) {
    for (int k = 0; k < MESH_MAX_AXES; k++)
        if (k < ndims)
            MPI_Comm_dup(c->axis[k], &p->axis[k]);
        else
            p->axis[k] = MPI_COMM_NULL;
}

void comms_p2p_free(mesh_p2p_comms *p) {
    for (int k = 0; k < MESH_MAX_AXES; k++)
        if (p->axis[k] != MPI_COMM_NULL) MPI_Comm_free(&p->axis[k]);
}

/* ---- the public face (mesh.h) ---- */

const mesh_comm *mesh_axes_comm(mesh *m, mesh_axes a) {
    mesh_comms *c = mesh_part_comms(m, 0);
    comms_set(c, mesh_part_topo(m), a);
    return &c->set[mesh_set_id(a)];
}

const mesh_comm *mesh_world_comm(const mesh *m) {
    return &mesh_part_comms((mesh *)m, 0)->world;
}

const mesh_comm *mesh_self_comm(void) {
    static mesh_comm self;
    self.mpi = MPI_COMM_SELF; /* not a constant expression in every MPI */
    return &self;
}
