/* test_where: hang forensics on a real mesh, driven by where.sh, which checks exit status and
 * output. Usage: test_where MODE --mesh SPEC [--timeout S] [--release FILE]
 *   mismatch   --debug-collectives: on x=2,y=2 the ranks of one x-set call AllReduce over x with
 *              counts 2 and 3 (the other x-set agrees) → one message naming both ranks with
 *              coordinates and calls, every rank ends (MPI_Abort, status 3)
 *   mismatch-op  the same with AllGather against ReduceScatter
 *   stall      the last rank stalls for good ("computing", never returns) inside step 0 while the
 *              others enter an AllGather over the last axis (then an AllReduce over the first) →
 *              only the watchdog (--timeout) can end the job: the stalled rank's fires (the
 *              others' get 10 times --timeout), prints its where-line, asks the others for
 *              theirs and ends the job (status 4)
 *   usr1       the last rank "computes" until FILE (--release) exists while the others wait in an
 *              AllGather; rank 0 prints "ready" first, so that where.sh can send SIGUSR1 to
 *              mpirun until the where-lines show both ranks in place, then create FILE; then the
 *              run completes normally (exit 0)
 *   quiet      a normal run of 20 steps of collectives, 50 ms of "compute" each (so that the
 *              watchdog wakes several times), with the watchdog on: it must not fire
 *   stop-agree  after step 0 the last rank stops itself (SIGSTOP) while the others enter
 *              mesh_agree, MPI's own Allreduce outside any step and any mesh collective → the
 *              watchdog still fires (status 4), names the call and the rank that did not answer
 *   stop-resume  the same inside step 0, the last rank ignoring SIGTERM: when the job's end
 *              resumes it (mpirun's SIGCONT), its step is overdue and the others' notice has come
 *              too late → it must add nothing to the one report */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mesh/coll.h"
#include "mesh/where.h"

/* "Compute" for s seconds: sleeps, resuming after signals. */
static void busy(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    const char *mode = argc > 1 ? argv[1] : "quiet", *spec = NULL, *release = NULL;
    double timeout = 0;
    for (int i = 2; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--mesh"))
            spec = argv[++i];
        else if (!strcmp(argv[i], "--timeout"))
            timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--release"))
            release = argv[++i];
    }
    char err[256];
    mesh *m = mesh_create(spec, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    mesh_where_signal(m);
    const int nd = mesh_ndims(m), last = mesh_nranks(m) - 1;
    /* stall: only the stalled rank's watchdog fires (the others' would 10 times later), so the
     * others print their where-lines because it asks them to */
    if (!strcmp(mode, "stall") && mesh_rank(m) != last) timeout *= 10;
    if (timeout > 0 && mesh_watchdog_start(m, timeout) < 0)
        mesh_exit_error("cannot start the watchdog thread");
    mesh_axes first = {1, {0, 0, 0}}, minor = {1, {nd - 1, 0, 0}};
    float in[16] = {1, 2, 3}, out[16 * 64];

    if (!strncmp(mode, "mismatch", 8)) {
        mesh_set_verify(m, 1);
        mesh_all_reduce(m, minor, out, in, 2, MESH_ALG_DEFAULT); /* agreed by everyone */
        const int odd = mesh_axis_coord(m, 0) == 1 && mesh_axis_coord(m, nd - 1) == 0;
        if (!strcmp(mode, "mismatch"))
            mesh_all_reduce(m, first, out, in, odd ? 3 : 2, MESH_ALG_DEFAULT);
        else if (odd)
            mesh_reduce_scatter(m, first, out, in, 2, MESH_ALG_DEFAULT);
        else
            mesh_all_gather(m, first, out, in, 2, MESH_ALG_DEFAULT);
        mesh_all_reduce(m, minor, out, in, 1, MESH_ALG_DEFAULT); /* the good set waits here */
    } else if (!strcmp(mode, "stall") || !strcmp(mode, "usr1")) {
        const int stall = !strcmp(mode, "stall");
        mesh_all_reduce(m, first, out, in, 1, MESH_ALG_DEFAULT);
        if (!stall) {
            mesh_agree(mesh_world_comm(m), 0);
            mesh_log("ready\n");
        }
        mesh_where_step(m, 0);
        if (mesh_rank(m) == last) {
            mesh_where_note(m, "stalled in compute, part #", 1);
            if (stall) /* for good: only the watchdog can end the job */
                for (;;) pause();
            if (!release) mesh_exit_error("test_where usr1: --release FILE is required");
            for (int i = 0; access(release, F_OK) != 0; i++) { /* until where.sh releases it */
                if (i == 12000) mesh_exit_error("test_where usr1: %s never appeared", release);
                busy(0.01);
            }
        }
        mesh_where_note(m, "exchange #", 1);
        mesh_all_gather(m, minor, out, in, 4, MESH_ALG_DEFAULT);
        mesh_all_reduce(m, first, out, in, 4, MESH_ALG_DEFAULT);
        mesh_where_step(m, -1);
    } else if (!strcmp(mode, "stop-agree") || !strcmp(mode, "stop-resume")) {
        const int resume = !strcmp(mode, "stop-resume");
        mesh_where_step(m, 0);
        mesh_all_reduce(m, first, out, in, 1, MESH_ALG_DEFAULT);
        if (!resume) mesh_where_step(m, -1);
        if (mesh_rank(m) == last) {
            /* stop-resume: the job's end (SIGCONT, SIGTERM, later SIGKILL) finds this rank alive
             * and overdue once it resumes, as a rank stopped by a user would be */
            if (resume) signal(SIGTERM, SIG_IGN);
            raise(SIGSTOP);
        }
        mesh_agree(mesh_world_comm(m), 0);
    } else {
        for (int i = 0; i < 20; i++) {
            mesh_where_step(m, i);
            busy(0.05); /* 1 s in all: the watchdog (period 0.25 s at most) looks several times */
            mesh_all_gather(m, minor, out, in, 4, MESH_ALG_DEFAULT);
            mesh_req *r = mesh_iall_reduce(m, first, out, in, 16, MESH_ALG_DEFAULT);
            mesh_wait(r);
        }
        mesh_where_step(m, -1);
    }
    mesh_log("test_where %s: finished\n", mode);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return 0;
}
