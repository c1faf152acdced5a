/* bcast: a napping broadcast of bytes (see bcast.h). */
#include "mesh/bcast.h"

#include <limits.h>

#include "mesh/mesh_mpi.h"
#include "mesh/nap.h"
#include "mesh/where.h"

void mesh_bcast_bytes(const mesh_comm *comm, void *buf, int64_t n, int root) {
    CHECK(n >= 0 && n <= INT_MAX, "mesh_bcast_bytes: %lld bytes do not fit MPI's int count",
          (long long)n);
    mesh_blocking_begin("MPI_Ibcast (a step plan from the deciding rank)");
    MPI_Request req;
    MPI_Ibcast(buf, (int)n, MPI_BYTE, root, comm->mpi, &req);
    nap_waitall(1, &req); /* a rank left waiting naps (nap.h) */
    mesh_blocking_end();
}
