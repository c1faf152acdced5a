/* comms: the communicators of one context of a mesh: world (rank = mesh rank), one per axis and
 * one per ordered axis set. A mesh has two contexts, 0 for the caller's blocking calls and 1 for
 * the queue of non-blocking calls, so that their messages never mix. Made from the topology
 * (topo.h). Private to mesh/. Depends on MPI and topo.h. */
#ifndef MT_MESH_COMMS_H
#define MT_MESH_COMMS_H
#include "mesh/mesh_mpi.h"
#include "mesh/topo.h"

typedef struct mesh_comms mesh_comms;
struct mesh_comms {
    mesh_comm world;
    MPI_Comm axis[MESH_MAX_AXES]; /* rank in axis[a] = coordinate along a */
    mesh_comm set[MESH_NSETS];    /* MPI_COMM_NULL for unused ids (and, under SMPI, not yet made) */
};

/* The point-to-point messages along each axis (p2p.c), on communicators of their own. */
typedef struct mesh_p2p_comms mesh_p2p_comms;
struct mesh_p2p_comms {
    MPI_Comm axis[MESH_MAX_AXES]; /* MPI_COMM_NULL past the mesh's axes */
};

/* Collective over: MPI_COMM_WORLD. Makes c's communicators for topology t. */
void comms_create(mesh_comms *c, const mesh_topo *t, MPI_Comm base);
/* Collective over: MPI_COMM_WORLD. Frees them. */
void comms_free(mesh_comms *c);
/* The communicator of the ordered axis set a: made at comms_create, except in the SMPI build,
 * where a set of two or three axes gets its communicator at its first use (collective over the
 * set's ranks then). */
MPI_Comm comms_set(mesh_comms *c, const mesh_topo *t, mesh_axes a);
/* Collective over: MPI_COMM_WORLD. Duplicates c's axis communicators into p; frees them. */
void comms_p2p_create(mesh_p2p_comms *p, const mesh_comms *c, int ndims);
void comms_p2p_free(mesh_p2p_comms *p);
#endif
