/* test_nap: a rank blocked inside mesh on a late peer naps instead of spinning, on every way a
 * rank waits in mesh/: a blocking collective on real links (the engine's caller waiter) and on
 * emulated ones, a DIRECT round, a point-to-point receive, mesh_wait with the progress thread and
 * in the inline mode, a blocking collective while the inline coroutine has messages in flight,
 * mesh_agree (MPI's Allreduce, napping) and mesh_bcast_bytes.
 *
 * How it decides, with no clock: for each case rank 0 enters the wait first and rank 1 is held
 * back until rank 0 has napped (mesh_naps, this process's naps, grew by NAPS): a helper thread of
 * rank 0 watches the count and then lets rank 1 go with a message on a communicator of its own.
 * A wait that spins never naps, so rank 1 would never go: after GIVE_UP seconds the helper lets
 * it go anyway and the case fails ("spins"). A loaded machine only delays the naps. The other
 * ranks (3 ranks: rank 2) take part at once. Every case also checks its result.
 *
 * The spin (mesh_set_spin): with a spin of SPIN_LONG, a peer SPIN_LATE late is waited for without
 * a nap (the window is 100 times the delay: load cannot close it); with a spin of SPIN_SHORT, the
 * wait naps after it (the helper above). mesh_spin_auto's choice: 20 ms where the host's ranks
 * fit on its cores and had them (core share 1), 50 µs with a share of 0.5 or with a core's worth
 * of compute threads per rank.
 * Usage: mpirun -np N test_nap --mesh N (N = 2 or 3) */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mesh/bcast.h"
#include "mesh/coll.h"
#include "mesh/link.h"
#include "mesh/mesh_mpi.h"
#include "mesh/nap.h"
#include "mesh_args.h"

#define NAPS 3       /* naps of rank 0 before rank 1 may go */
#define GIVE_UP 30.0 /* seconds: then rank 0's wait is taken to spin */
#define TAG_GO 9

static int failures;
static MPI_Comm go_comm; /* the helper's messages, apart from mesh's */

typedef struct {
    int64_t naps0; /* mesh_naps() when the case began */
    atomic_int spun;
} watch;

/* Rank 0's helper: lets rank 1 go once rank 0 has napped NAPS times (or GIVE_UP has passed). */
static void *watch_naps(void *arg) {
    watch *w = arg;
    const double t0 = mesh_now();
    while (mesh_naps() - w->naps0 < NAPS) {
        if (mesh_now() - t0 > GIVE_UP) {
            atomic_store(&w->spun, 1);
            break;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, TAG_GO, go_comm);
    return NULL;
}

typedef void (*wait_case)(mesh *m, float *buf);

/* Runs one case: rank 0 waits (its helper releases rank 1), rank 1 goes when released. */
static void run_case(mesh *m, const char *name, wait_case fn, float *buf) {
    MPI_Barrier(mesh_world_comm(m)->mpi);
    const int me = mesh_world_rank();
    watch w = {mesh_naps(), 0};
    pthread_t th;
    if (me == 0 && pthread_create(&th, NULL, watch_naps, &w) != 0)
        mesh_exit_error("test_nap: cannot start the helper thread");
    if (me == 1) {
        int go;
        MPI_Recv(&go, 1, MPI_INT, 0, TAG_GO, go_comm, MPI_STATUS_IGNORE);
    }
    fn(m, buf);
    if (me == 0) {
        pthread_join(th, NULL);
        const long long naps = (long long)(mesh_naps() - w.naps0);
        if (atomic_load(&w.spun)) {
            fprintf(stderr, "FAIL %s: rank 0 did not nap within %g s: its wait spins\n", name,
                    GIVE_UP);
            failures++;
        } else {
            mesh_log("%-58s naps %lld (>= %d)\n", name, naps, NAPS);
        }
    }
}

/* The sum over the ranks of (rank + 1) * (e + 1), as a small integer: exact. */
static void check_sum(mesh *m, const char *what, const float *x, int64_t n) {
    const int r = mesh_nranks(m);
    for (int64_t e = 0; e < n; e++)
        if (x[e] != (float)(r * (r + 1) / 2 * (e + 1))) {
            fprintf(stderr, "FAIL rank %d %s: element %lld = %g\n", mesh_rank(m), what,
                    (long long)e, (double)x[e]);
            failures++;
            return;
        }
}
static void fill(const mesh *m, float *x, int64_t n) {
    for (int64_t e = 0; e < n; e++) x[e] = (float)((mesh_rank(m) + 1) * (e + 1));
}

#define N 64
static void blocking(mesh *m, float *b) {
    fill(m, b, N);
    mesh_all_reduce(m, mesh_all_axes(m), b, b, N, MESH_ALG_BIDIR);
    check_sum(m, "blocking all_reduce", b, N);
}
static void direct(mesh *m, float *b) {
    fill(m, b, N);
    mesh_all_reduce(m, mesh_all_axes(m), b, b, N, MESH_ALG_DIRECT);
    check_sum(m, "direct all_reduce", b, N);
}
static void nonblocking(mesh *m, float *b) {
    fill(m, b, N);
    mesh_wait(mesh_iall_reduce(m, mesh_all_axes(m), b, b, N, MESH_ALG_BIDIR));
    check_sum(m, "mesh_wait", b, N);
}
/* Inline mode: a blocking call while the coroutine's call waits for the same late peer. */
static void beside_coroutine(mesh *m, float *b) {
    fill(m, b, N);
    fill(m, b + N, N);
    mesh_req *r = mesh_iall_reduce(m, mesh_all_axes(m), b, b, N, MESH_ALG_BIDIR);
    mesh_all_reduce(m, mesh_all_axes(m), b + N, b + N, N, MESH_ALG_BIDIR);
    mesh_wait(r);
    check_sum(m, "blocking beside the coroutine", b, N);
    check_sum(m, "blocking beside the coroutine", b + N, N);
}
/* Rank 0 receives from rank 1 (its neighbour at +1 along the one axis). */
static void p2p(mesh *m, float *b) {
    const int me = mesh_world_rank();
    if (me == 0) {
        mesh_recv(m, 0, +1, b, N);
        for (int64_t e = 0; e < N; e++)
            if (b[e] != (float)e) {
                fprintf(stderr, "FAIL p2p: element %lld = %g\n", (long long)e, (double)b[e]);
                failures++;
                break;
            }
    } else if (me == 1) {
        for (int64_t e = 0; e < N; e++) b[e] = (float)e;
        mesh_p2p_wait(mesh_isend(m, 0, -1, b, N));
    }
}
static void agree(mesh *m, float *b) {
    (void)b;
    const int got = mesh_agree(mesh_world_comm(m), mesh_world_rank() == 1 ? -5 : 0);
    if (got != -5) {
        fprintf(stderr, "FAIL mesh_agree: %d, want -5\n", got);
        failures++;
    }
}
static void bcast(mesh *m, float *b) {
    char msg[16] = "";
    (void)b;
    if (mesh_world_rank() == 1) strcpy(msg, "from rank 1");
    mesh_bcast_bytes(mesh_world_comm(m), msg, sizeof msg, 1);
    if (strcmp(msg, "from rank 1") != 0) {
        fprintf(stderr, "FAIL mesh_bcast_bytes: '%s'\n", msg);
        failures++;
    }
}

#define SPIN_LONG 5.0
#define SPIN_LATE 0.05
#define SPIN_SHORT 0.2
/* Rank 1 comes SPIN_LATE late to a blocking AllReduce that rank 0 waits in, spinning: no nap. */
static void spin_case(mesh *m, float *b) {
    MPI_Barrier(mesh_world_comm(m)->mpi);
    const int64_t naps0 = mesh_naps();
    if (mesh_world_rank() == 1) {
        struct timespec ts = {0, (long)(SPIN_LATE * 1e9)};
        nanosleep(&ts, NULL);
    }
    blocking(m, b);
    const long long naps = (long long)(mesh_naps() - naps0);
    if (mesh_world_rank() == 0 && naps != 0) {
        fprintf(stderr, "FAIL spin %g s: a peer %g s late cost %lld naps, want 0\n", SPIN_LONG,
                SPIN_LATE, naps);
        failures++;
    } else if (mesh_world_rank() == 0) {
        mesh_log("%-58s naps 0\n", "spin 5 s: a peer 50 ms late");
    }
}

/* mesh_spin_auto's table on this host (collective: every rank). */
static void spin_auto(mesh *m) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int host = mesh_host_ranks(m);
    const double own = mesh_spin_auto(m, 1, 1.0), shared = mesh_spin_auto(m, 1, 0.5),
                 threads = mesh_spin_auto(m, (int)cores, 1.0);
    const double want = host <= cores ? NAP_SPIN_OWN_CORE : NAP_SPIN;
    if (own != want || shared != NAP_SPIN || threads != NAP_SPIN) {
        fprintf(stderr, "FAIL mesh_spin_auto on %d ranks of %ld cores: %g %g %g s, want %g %g %g\n",
                host, cores, own, shared, threads, want, NAP_SPIN, NAP_SPIN);
        failures++;
    }
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    mesh *m = test_mesh(argc, argv);
    if (mesh_ndims(m) != 1 || mesh_nranks(m) < 2)
        mesh_exit_error("test_nap needs one axis of 2 or more ranks (--mesh 2, --mesh 3)");
    MPI_Comm_dup(mesh_world_comm(m)->mpi, &go_comm);
    static float buf[2 * N];
    run_case(m, "blocking all_reduce, real links (caller)", blocking, buf);
    run_case(m, "DIRECT all_reduce (its round)", direct, buf);
    run_case(m, "p2p receive", p2p, buf);
    run_case(m, "mesh_wait, progress thread", nonblocking, buf);
    run_case(m, "mesh_agree (MPI's Allreduce)", agree, buf);
    run_case(m, "mesh_bcast_bytes", bcast, buf);
    mesh_set_progress(m, MESH_PROGRESS_INLINE);
    run_case(m, "mesh_wait, inline", nonblocking, buf);
    run_case(m, "blocking beside the inline coroutine", beside_coroutine, buf);
    mesh_set_progress(m, MESH_PROGRESS_THREAD);
    mesh_set_spin(SPIN_LONG);
    spin_case(m, buf);
    mesh_set_spin(SPIN_SHORT);
    run_case(m, "spin 0.2 s, then naps", blocking, buf);
    mesh_set_spin(NAP_SPIN);
    spin_auto(m);
    mesh_link_set(m, 0, 1e9, 1e-4);
    run_case(m, "blocking all_reduce, emulated links", blocking, buf);
    MPI_Comm_free(&go_comm);
    return test_mesh_finish(m, "test_nap", failures);
}
