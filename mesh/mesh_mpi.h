/* mesh_mpi: the MPI face of a mesh, for the code that calls MPI itself (mesh/, data/, tests,
 * benchmarks). mesh.h keeps a communicator opaque (mesh_comm) so that code which only passes
 * communicators along never includes <mpi.h>; this header defines it as the MPI_Comm it holds.
 * Depends on MPI and mesh.h. */
#ifndef MT_MESH_MESH_MPI_H
#define MT_MESH_MESH_MPI_H
#include <mpi.h>

#include "mesh/mesh.h"

struct mesh_comm {
    MPI_Comm mpi;
};
#endif
