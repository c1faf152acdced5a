/* test_host: what the ranks of one host share (mesh_host_cpus, mesh_mpi_yields), on placements
 * the test makes itself: each rank narrows its own affinity (sched_setaffinity) before asking,
 * so the answer is known whatever machine runs it.
 *  - every rank on the first CPU it may run on: 1 CPU;
 *  - rank r on the (r mod n)-th of the n CPUs rank 0 may run on: min(ranks, n) CPUs;
 *  - each rank as it was: at least its own affinity's count, at most the CPUs configured.
 * YIELD (0 or 1) is put in OMPI_MCA_mpi_yield_when_idle before MPI starts; Open MPI's answer
 * must be it (another MPI may answer −1: "does not say").
 * Usage: mpirun -np N test_host YIELD */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mesh/mesh_mpi.h"
#include "rank_expect.h"

/* The i-th CPU of set s (i < CPU_COUNT(s)). */
static int nth_cpu(const cpu_set_t *s, int i) {
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, s) && i-- == 0) return c;
    return -1;
}

static void pin(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    EXPECT(sched_setaffinity(0, sizeof one, &one) == 0, "cannot pin to CPU %d", cpu);
}

int main(int argc, char **argv) {
    const char *yield = argc > 1 ? argv[1] : "1";
    setenv("OMPI_MCA_mpi_yield_when_idle", yield, 1);
    mesh_mpi_init(&argc, &argv);
    char err[256];
    mesh *m = mesh_create(NULL, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int ranks = mesh_host_ranks(m);
    EXPECT(ranks == mesh_nranks(m), "one host: %d ranks on it, %d in all", ranks, mesh_nranks(m));
    cpu_set_t own;
    CPU_ZERO(&own);
    EXPECT(sched_getaffinity(0, sizeof own, &own) == 0, "sched_getaffinity");
    const int cpus = mesh_host_cpus(m);
    const long conf = sysconf(_SC_NPROCESSORS_CONF);
    EXPECT(cpus >= 1 && cpus <= conf, "as placed: %d CPUs, %ld configured", cpus, conf);
    /* rank 0's CPUs, for every rank */
    int n0 = CPU_COUNT(&own);
    MPI_Bcast(&n0, 1, MPI_INT, 0, MPI_COMM_WORLD);
    cpu_set_t set0 = own;
    MPI_Bcast(&set0, (int)sizeof set0, MPI_BYTE, 0, MPI_COMM_WORLD);
    pin(nth_cpu(&set0, 0));
    const int one = mesh_host_cpus(m);
    EXPECT(one == 1, "every rank on CPU %d: %d CPUs", nth_cpu(&set0, 0), one);
    pin(nth_cpu(&set0, mesh_rank(m) % n0));
    const int spread = mesh_host_cpus(m), want = ranks < n0 ? ranks : n0;
    /* a cgroup quota Q below want caps both this and the count as placed at Q */
    EXPECT(spread == want || (spread < want && spread == cpus),
           "rank r on CPU r mod %d: %d CPUs, want %d (or a quota's %d)", n0, spread, want, cpus);
    sched_setaffinity(0, sizeof own, &own);
    const int y = mesh_mpi_yields();
    EXPECT(y == atoi(yield) || y == -1, "OMPI_MCA_mpi_yield_when_idle=%s: mesh_mpi_yields %d",
           yield, y);
    if (mesh_world_rank() == 0)
        printf("host: %d ranks, %d CPUs as placed (%d on one CPU, %d spread); MPI yields: %d\n",
               ranks, cpus, one, spread, y);
    mesh_destroy(m);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    mesh_mpi_finalize();
    return all ? 1 : 0;
}
