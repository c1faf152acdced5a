/* test_simlink: the simulated links of bench/simpod move bytes at the chip's rate. Run on a
 * simpod platform (bench/simpod --chip CHIP --topology ... test_simlink --chip CHIP); checks,
 * against mesh/cost.c's table, that
 *  - one message of b bytes between neighbours takes T_min + b / W_ici_oneway within 5%, for
 *    b = 8 B, 1 MiB and 4 MiB, and 8 B to rank 0's +1 neighbour along every axis (one hop: the
 *    platform's axes are the mesh's);
 *  - every rank sending 4 MiB to its +1 neighbour along a wrapping axis (each over its own
 *    link: no sharing) takes the same, within 5%;
 *  - every rank sending to both neighbours at once (both directions of every link busy: full
 *    duplex) takes no longer than one direction, within 5%.
 * Times are simulated (SimGrid's clock), so the bounds do not depend on the machine's load. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/cost.h"
#include "mesh/mesh_mpi.h"
#include "smpi_opts.h"

static int failures;

static void expect_near(const char *what, double got, double want, double tol) {
    const int ok = fabs(got - want) <= tol * want;
    mesh_log("%s %-52s simulated %10.3f us, chip model %10.3f us (%+.2f%%)\n", ok ? "ok  " : "FAIL",
             what, got * 1e6, want * 1e6, 100 * (got / want - 1));
    failures += !ok;
}

/* One-way time of b bytes from world rank 0 to peer, timed by the receiver from the barrier. */
static double one_way(mesh *m, int peer, int64_t b, char *buf) {
    MPI_Comm w = mesh_world_comm(m)->mpi;
    double t = 0;
    MPI_Barrier(w);
    const double t0 = MPI_Wtime();
    if (mesh_rank(m) == 0) MPI_Send(buf, (int)b, MPI_CHAR, peer, 0, w);
    if (mesh_rank(m) == peer) {
        MPI_Recv(buf, (int)b, MPI_CHAR, 0, 0, w, MPI_STATUS_IGNORE);
        t = MPI_Wtime() - t0;
    }
    MPI_Bcast(&t, 1, MPI_DOUBLE, peer, w);
    return t;
}

/* Every rank sends b bytes to its neighbours along axis (+1 only, or +1 and −1 at once) and
 * receives from them; the slowest rank's time from the barrier. */
static double shift_time(mesh *m, int axis, int both, int64_t b, char *sbuf, char *rbuf) {
    const mesh_axes a = {1, {axis, 0, 0}};
    const int n = mesh_axis_size(m, axis), c = mesh_axis_coord(m, axis);
    MPI_Comm w = mesh_world_comm(m)->mpi;
    MPI_Request rq[4];
    int nrq = 0;
    MPI_Barrier(w);
    const double t0 = MPI_Wtime();
    for (int k = 0; k <= both; k++) {
        const int dir = k ? -1 : +1, to = mesh_axes_member(m, a, (c + dir + n) % n),
                  from = mesh_axes_member(m, a, (c - dir + n) % n);
        MPI_Irecv(rbuf + k * b, (int)b, MPI_CHAR, from, k, w, &rq[nrq++]);
        MPI_Isend(sbuf, (int)b, MPI_CHAR, to, k, w, &rq[nrq++]);
    }
    MPI_Waitall(nrq, rq, MPI_STATUSES_IGNORE);
    double dt = MPI_Wtime() - t0, mx = 0;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, w);
    return mx;
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    const smpi_opts o = smpi_opts_parse(argc, argv, "test_simlink", 0);
    mesh *m = o.m;
    const cost_chip *chip = o.chip;
    const double W = chip->ici_oneway, T = chip->hop_latency;
    const int64_t big = 4 << 20;
    char *buf = malloc((size_t)big);
    char *rbuf = malloc(2 * (size_t)big);
    CHECK(buf && rbuf, "out of memory");
    memset(buf, 1, (size_t)big);

    /* world rank 0's +1 neighbour on the last (fastest) axis is world rank 1 */
    const int64_t sizes[] = {8, 1 << 20, big};
    for (int k = 0; k < 3; k++) {
        char what[96];
        snprintf(what, sizeof what, "rank 0 -> 1, %lld B, one hop", (long long)sizes[k]);
        expect_near(what, one_way(m, 1, sizes[k], buf), T + (double)sizes[k] / W, 0.05);
    }
    for (int a = 0; a < mesh_ndims(m); a++) {
        if (mesh_axis_size(m, a) < 2) continue;
        char what[96];
        /* rank 0's +1 neighbour along a: one hop if the platform's axes are the mesh's */
        int stride = 1; /* world rank of coordinate 1 on axis a, 0 elsewhere (mesh/mesh.h) */
        for (int k = a + 1; k < mesh_ndims(m); k++) stride *= mesh_axis_size(m, k);
        snprintf(what, sizeof what, "rank 0 -> its +1 along %c, 8 B", mesh_axis_name(m, a));
        expect_near(what, one_way(m, stride, 8, buf), T + 8 / W, 0.05);
        if (!mesh_axis_wraps(m, a)) continue; /* the ends of an open axis have no +1 link */
        snprintf(what, sizeof what, "every rank to +1 along %c, 4 MiB", mesh_axis_name(m, a));
        expect_near(what, shift_time(m, a, 0, big, buf, rbuf), T + (double)big / W, 0.05);
        if (mesh_axis_size(m, a) > 2) {
            snprintf(what, sizeof what, "every rank to +1 and -1 along %c at once, 4 MiB",
                     mesh_axis_name(m, a));
            expect_near(what, shift_time(m, a, 1, big, buf, rbuf), T + (double)big / W, 0.05);
        }
    }
    free(buf), free(rbuf);
    mesh_log("test_simlink: %d failure(s)\n", failures);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return failures ? 1 : 0;
}
