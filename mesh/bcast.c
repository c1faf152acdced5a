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

void mesh_move_bytes(const mesh_comm *comm, void *buf, int64_t n, int src, int dst) {
    CHECK(n >= 0 && n <= INT_MAX && src != dst,
          "mesh_move_bytes: %lld bytes from %d to %d (at most INT_MAX, to another rank)",
          (long long)n, src, dst);
    int me;
    MPI_Comm_rank(comm->mpi, &me);
    if (me != src && me != dst) return;
    enum { TAG = 0x4b56 };
    mesh_blocking_begin(me == src ? "MPI_Isend (bytes to one rank)"
                                  : "MPI_Irecv (bytes from one rank)");
    MPI_Request req;
    if (me == src)
        MPI_Isend(buf, (int)n, MPI_BYTE, dst, TAG, comm->mpi, &req);
    else
        MPI_Irecv(buf, (int)n, MPI_BYTE, src, TAG, comm->mpi, &req);
    nap_waitall(1, &req);
    mesh_blocking_end();
}
