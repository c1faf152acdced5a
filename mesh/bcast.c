#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* bcast: a napping broadcast of bytes (see bcast.h). */
#include "mesh/bcast.h"

#include <limits.h>
#include <time.h>

#include "mesh/mesh_mpi.h"
#include "mesh/where.h"

/* A nap is 1% of the time waited so far, between 2 µs and 1 ms: a short wait (the deciding rank
 * busy for a moment) adds little latency, a long one (an idle server) wakes 1000 times a second. */
#define BCAST_NAP_MIN 2e-6
#define BCAST_NAP_MAX 1e-3
#define BCAST_NAP_SHARE 0.01

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

void mesh_bcast_bytes(const mesh_comm *comm, void *buf, int64_t n, int root) {
    CHECK(n >= 0 && n <= INT_MAX, "mesh_bcast_bytes: %lld bytes do not fit MPI's int count",
          (long long)n);
    int me = 0;
    MPI_Comm_rank(comm->mpi, &me);
    mesh_blocking_begin("MPI_Ibcast (a step plan from the deciding rank)");
    MPI_Request req;
    MPI_Ibcast(buf, (int)n, MPI_BYTE, root, comm->mpi, &req);
    if (me == root) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        const double t0 = mesh_now();
        for (int done = 0;;) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (done) break;
            const double s = (mesh_now() - t0) * BCAST_NAP_SHARE;
            nap(s < BCAST_NAP_MIN ? BCAST_NAP_MIN : s > BCAST_NAP_MAX ? BCAST_NAP_MAX : s);
        }
    }
    mesh_blocking_end();
}
