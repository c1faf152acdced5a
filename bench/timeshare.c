/* timeshare: what a step of compute and a ring step cost when ranks share CPUs, the measurement
 * behind the prediction on a shared host (train/observe/share.h, docs/fidelity.md). Every rank
 * repeats: C µs of compute on its thread's CPU clock, then one exchange of B bytes with a peer
 * (MPI_Sendrecv: one ring step). bench/timeshare.sh runs it on 1 and 2 ranks per CPU.
 * Prints one line: ranks, the host's CPUs and threads per CPU (mesh_host_cpus), whether MPI's
 * waits yield (mesh_mpi_yields), and the slowest rank's mean iteration with its CPU time.
 * usage: mpirun -np N timeshare COMPUTE_US SECONDS BYTES [pairs|ring|alternate]
 *   about SECONDS of iterations, after 20 warm-up ones that set how many (the same on every rank);
 *   pairs: rank r with r^1; ring: sends to r+1, receives from r−1; alternate: r^1 and r^2 in
 *   turn (needs a multiple of 4 ranks), as the demo's 2x2 mesh alternates its axes. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/mesh_mpi.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile double sink;

/* s seconds of this thread's CPU time in a multiply-add loop. */
static void compute(double s) {
    const double t0 = cpu_now();
    double x = 1.0;
    while (cpu_now() - t0 < s)
        for (int i = 0; i < 256; i++) x = x * 1.0000001 + 1e-9;
    sink = x;
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[128];
    mesh *m = mesh_create(NULL, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int r = mesh_world_rank(), n = mesh_world_size();
    const char *pat = argc > 4 ? argv[4] : "pairs";
    if (argc < 4 || !(atof(argv[2]) > 0) || atoi(argv[3]) < 1 ||
        (strcmp(pat, "pairs") && strcmp(pat, "ring") && strcmp(pat, "alternate")) ||
        (strcmp(pat, "ring") && n % 2) || (!strcmp(pat, "alternate") && n % 4))
        mesh_exit_error("usage: mpirun -np N timeshare COMPUTE_US SECONDS BYTES "
                        "[pairs|ring|alternate] (pairs: N even; alternate: N a multiple of 4)");
    const double c = atof(argv[1]) * 1e-6, seconds = atof(argv[2]);
    const int bytes = atoi(argv[3]);
    const int ranks = mesh_host_ranks(m), cpus = mesh_host_cpus(m), yields = mesh_mpi_yields();
    char *sb = calloc((size_t)bytes, 1), *rb = calloc((size_t)bytes, 1);
    if (!sb || !rb) mesh_exit_error("out of memory");
    const int warm = 20;
    double t0 = MPI_Wtime(), c0 = 0;
    int iters = warm;
    for (int i = -warm; i < iters; i++) {
        if (i == 0) { /* the warm-up's pace sets the count, the slowest rank's */
            double w = (MPI_Wtime() - t0) / warm;
            MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            iters = w > 0 && seconds / w < 1e7 ? (int)(seconds / w) : 10000000;
            iters = iters < warm ? warm : iters;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime(), c0 = cpu_now();
        }
        int to = r ^ 1, from = r ^ 1;
        if (!strcmp(pat, "ring")) to = (r + 1) % n, from = (r + n - 1) % n;
        if (!strcmp(pat, "alternate") && (i & 1)) to = from = r ^ 2;
        compute(c);
        MPI_Sendrecv(sb, bytes, MPI_BYTE, to, 0, rb, bytes, MPI_BYTE, from, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    }
    double mine[2] = {(MPI_Wtime() - t0) / iters, (cpu_now() - c0) / iters}, worst[2];
    MPI_Reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (r == 0)
        printf(
            "timeshare | ranks %d | cpus %d | threads-per-cpu %.3g | yields %d | compute %.0f us "
            "| bytes %d | %s | iteration %.1f us | cpu %.1f us\n",
            ranks, cpus, (double)ranks / cpus, yields, c * 1e6, bytes, pat, 1e6 * worst[0],
            1e6 * worst[1]);
    free(sb), free(rb);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return 0;
}
