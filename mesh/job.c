/* job: MPI start-up and shut-down, the ranks' agreement on an outcome and the job's clean exit
 * (mesh.h). The agreements wait napping (nap.h) and bracket their MPI calls for the where-line
 * and the watchdog (mesh_blocking_begin). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "mesh/mesh_mpi.h"
#include "mesh/nap.h"
#include "mesh/parts.h"
#include "mesh/proc.h"
#include "mesh/watchdog.h"
#include "mesh/where.h"

void mesh_mpi_init(int *argc, char ***argv) {
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    proc_set_world(rank, size);
#ifndef MESHTRAIN_SMPI /* SMPI: non-blocking calls run on the caller's thread (coll_async.c) */
    if (provided < MPI_THREAD_MULTIPLE)
        mesh_exit_error("this MPI does not provide MPI_THREAD_MULTIPLE (got level %d); "
                        "meshtrain's non-blocking collectives need it",
                        provided);
#endif
}

double mesh_launcher_kill_grace(void) {
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return -1;
    const char *t = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    return t ? atof(t) : 1.0;
}

void mesh_mpi_finalize(void) {
    MPI_Finalize();
}

int mesh_agree_msg(const mesh_comm *c, int status, char *err, size_t errlen) {
    const MPI_Comm comm = c->mpi;
    int rank;
    MPI_Comm_rank(comm, &rank);
    struct {
        int status, rank;
    } in = {status, rank}, out = in;
    MPI_Request rq;
    mesh_blocking_begin("MPI_Allreduce (ranks agreeing on a status)");
    MPI_Iallreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm, &rq);
    nap_waitall(1, &rq); /* naps while a peer is late (nap.h) */
    mesh_blocking_end();
    if (out.status >= 0 || !err || errlen == 0) return out.status;
    int most = status; /* did every rank fail? */
    char msg[MESH_MSG_MAX] = "";
    if (rank == out.rank) snprintf(msg, sizeof msg, "%s", err);
    mesh_blocking_begin("MPI_Bcast (the message of a failed status)");
    MPI_Iallreduce(&status, &most, 1, MPI_INT, MPI_MAX, comm, &rq);
    nap_waitall(1, &rq);
    MPI_Ibcast(msg, (int)sizeof msg, MPI_CHAR, out.rank, comm, &rq);
    nap_waitall(1, &rq);
    mesh_blocking_end();
    if (out.rank != 0 && most >= 0)
        snprintf(err, errlen, "rank %d: %s", out.rank, msg);
    else
        snprintf(err, errlen, "%s", msg);
    return out.status;
}

int mesh_agree(const mesh_comm *comm, int status) {
    return mesh_agree_msg(comm, status, NULL, 0);
}

int64_t mesh_agree_max(const mesh_comm *comm, int64_t value) {
    int64_t most = value;
    MPI_Request rq;
    mesh_blocking_begin("MPI_Allreduce (ranks agreeing on a maximum)");
    MPI_Iallreduce(&value, &most, 1, MPI_INT64_T, MPI_MAX, comm->mpi, &rq);
    nap_waitall(1, &rq);
    mesh_blocking_end();
    return most;
}

void mesh_agree_or_exit(const mesh_comm *comm, int status, const char *fmt, ...) {
    char msg[MESH_MSG_MAX] = "";
    if (status < 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    if (mesh_agree_msg(comm, status, msg, sizeof msg) < 0) mesh_exit_error("%s", msg);
}

_Noreturn void mesh_exit_error(const char *fmt, ...) {
    if (mesh_world_rank() == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: error: ", proc_progname());
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        fflush(stderr);
        va_end(ap);
    }
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    mesh *cur = mesh_current();
    if (cur) watchdog_stop_thread(mesh_part_watchdog(cur)); /* no watchdog past MPI_Finalize */
    if (inited && !finalized) {
        MPI_Barrier(MPI_COMM_WORLD); /* let rank 0's message out before anyone exits */
        MPI_Finalize();
    }
    exit(2);
}
