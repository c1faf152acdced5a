/* topo: the topology of a mesh: its axes (names, sizes, wraparound), this rank's coordinates
 * and the placement of mesh ranks on MPI ranks, and the arithmetic of ordered axis sets. Pure:
 * no MPI, no communicator (comms.h makes those from it), so it is tested alone
 * (tests/mesh/test_topo.c). Private to mesh/; the public queries on a mesh (mesh.h: mesh_rank,
 * mesh_axis_size, mesh_axes_index, ...) are topo.c's too. Depends on mesh.h, cost.h (the chips'
 * wraparound rules) and errmsg.h. */
#ifndef MT_MESH_TOPO_H
#define MT_MESH_TOPO_H
#include <stddef.h>

#include "mesh/mesh.h"

typedef struct mesh_topo mesh_topo;
struct mesh_topo {
    int rank, nranks, ndims; /* mesh rank (flattened coordinates, last axis fastest), ranks, axes */
    int size[MESH_MAX_AXES]; /* 1 past ndims */
    int coord[MESH_MAX_AXES]; /* this rank's */
    int wrap[MESH_MAX_AXES];  /* a wraparound link (never on an axis of 1 or 2) */
    char name[MESH_MAX_AXES];
};

/* The topology of --mesh `spec` ("x=4,y=2", "2x2x2", "4"; NULL or "": one axis over all ranks)
 * with the axes listed in `open` (NULL: none) without wraparound and those in `cross` (NULL: none)
 * slowest in MPI rank order (mesh.h, mesh_create_placed), as seen by MPI rank `mpi_rank` of
 * `nranks`. Returns 0, or −1 with the reason in err[errlen]. */
int topo_init(mesh_topo *t, const char *spec, const char *open, const char *cross, int mpi_rank,
              int nranks, char *err, size_t errlen);

/* Ordered axis sets are numbered 0..MESH_NSETS-1: 0 = {}, 1..3 one axis, 4..12 two, 13..39
 * three (axes numbered below MESH_MAX_AXES). */
#define MESH_NSETS 40
int mesh_set_id(mesh_axes a);
/* The set numbered id (the inverse of mesh_set_id; n = 0 for an id out of range). */
mesh_axes mesh_set_axes(int id);

/* The product of the sizes of a's axes; this rank's index in the flattened set (a.ax[0] major);
 * the mesh rank of the member with index j of this rank's copy of a. */
int topo_axes_size(const mesh_topo *t, mesh_axes a);
int topo_axes_index(const mesh_topo *t, mesh_axes a);
int topo_axes_member(const mesh_topo *t, mesh_axes a, int j);
/* Whether every axis of a wraps (a ring over the flattened set); 0 for the empty set. */
int topo_wraps(const mesh_topo *t, mesh_axes a);
/* The coordinates c[0..ndims) of mesh rank `rank`. */
void topo_coords(const mesh_topo *t, int rank, int *c);
#endif
