/* host: what the ranks of one host share (mesh.h): the CPUs they may run on, and whether MPI's
 * waits give the CPU away. Calls nothing of the mesh's collectives. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mesh/mesh_mpi.h"
#include "mesh/where.h"

#ifndef MESHTRAIN_SMPI /* a simulated host's CPUs are its ranks (mesh_host_cpus) */
/* The CPUs a cgroup v2 quota allows this process, rounded up: the smallest "quota period" of
 * cpu.max in its cgroup and every parent; 0 when none is set or none can be read (cgroup v1's
 * quota is not read). */
static int cgroup_cpus(void) {
    char cg[512] = "", path[640];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    int found = 0;
    while (!found && fgets(cg, sizeof cg, f)) found = strncmp(cg, "0::/", 4) == 0;
    fclose(f);
    if (!found) return 0;
    char *dir = cg + 3; /* "/a/b": read /a/b, then /a */
    dir[strcspn(dir, "\n")] = 0;
    double best = 0;
    for (size_t len = strlen(dir); len > 1;) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%.*s/cpu.max", (int)len, dir);
        double quota = 0, period = 0;
        FILE *q = fopen(path, "r");
        if (q && fscanf(q, "%lf %lf", &quota, &period) == 2 && quota > 0 && period > 0 &&
            (best == 0 || quota / period < best))
            best = quota / period;
        if (q) fclose(q);
        while (len > 1 && dir[--len] != '/') {
        }
    }
    return best > 0 ? (int)ceil(best - 1e-9) : 0;
}
#endif

int mesh_host_cpus(const mesh *m) {
#ifdef MESHTRAIN_SMPI /* every simulated rank is a chip of its own, in one process */
    return mesh_host_ranks(m);
#else
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) { /* unknown: every online CPU */
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long c = 0; c < n && c < CPU_SETSIZE; c++) CPU_SET((int)c, &mine);
    }
    cpu_set_t all;
    MPI_Comm host;
    mesh_blocking_begin("MPI_Allreduce (the CPUs of each host)");
    MPI_Comm_split_type(mesh_world_comm(m)->mpi, MPI_COMM_TYPE_SHARED, mesh_rank(m), MPI_INFO_NULL,
                        &host);
    MPI_Allreduce(&mine, &all, (int)sizeof all, MPI_BYTE, MPI_BOR, host);
    mesh_blocking_end();
    MPI_Comm_free(&host);
    int n = CPU_COUNT(&all);
    const int quota = cgroup_cpus();
    if (quota > 0 && quota < n) n = quota;
    return n > 0 ? n : 1;
#endif
}

int mesh_mpi_yields(void) {
#ifdef MESHTRAIN_SMPI
    return -1;
#else
    /* fixed for the process: asked once (each MPI_T_init_thread registers every MCA framework
     * again, ~10 ms, and every trainer asks) */
    static int asked = -2;
    if (asked != -2) return asked;
    int provided, idx, yes = -1;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return asked = -1;
    if (MPI_T_cvar_get_index("mpi_yield_when_idle", &idx) == MPI_SUCCESS) {
        MPI_T_cvar_handle h;
        int count = 0;
        if (MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
            unsigned char v[64] = {0}; /* a bool or an int: any non-zero byte is true */
            if (count == 1 && MPI_T_cvar_read(h, v) == MPI_SUCCESS) {
                yes = 0;
                for (size_t i = 0; i < sizeof v; i++) yes |= v[i] != 0;
            }
            MPI_T_cvar_handle_free(&h);
        }
    }
    MPI_T_finalize();
    return asked = yes;
#endif
}
