/* test_waiters: the progress part alone (mesh/nap.h, mesh/progress.h, private to mesh/): no mesh,
 * one process, requests on MPI_COMM_SELF. What is checked is what the waiters scheduled and
 * counted, never how long anything took:
 *  - the nap schedule: doubling from 2 µs up to its cap; a waiting caller's cap is 50 µs, then 2%
 *    of the time idle, at most 1 ms;
 *  - nap_waitsome on a receive not yet matched: the first wait of an idle stretch polls without
 *    sleeping (no nap counted), each later one naps once (mesh_naps grows by one) on the
 *    schedule; once the message is sent the wait returns it and the idle stretch ends (a
 *    completion restarts the polling: a call whose sends complete while its receive waits keeps
 *    the fast path); with nothing in flight and nothing due it returns MPI_UNDEFINED without
 *    sleeping;
 *  - the table's rows: a call over emulated links only naps from its first wait, up to its cap
 *    (a quarter of the hop latency); with a real link it is the caller's row (polls first, then
 *    naps up to 50 µs, or 2% of the time idle when that is longer);
 *  - nap_block returns a message sent by another thread only after this thread has napped: a
 *    helper sends once mesh_naps has grown by 3 (a blocking wait that spun would never see it
 *    sent; the helper gives up after 30 s, which fails the test). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "mesh/coll.h"
#include "mesh/mesh_mpi.h"
#include "mesh/nap.h"
#include "mesh/progress.h"

static int failures;

static void expect(const char *what, double got, double want) {
    const double d = got - want, tol = 1e-12 * (want < 0 ? -want : want);
    const int ok = d >= -tol && d <= tol;
    printf("%-64s %12.6g (want %g)%s\n", what, got, want, ok ? "" : "  FAIL");
    failures += !ok;
}

static void schedule(void) {
    nap_state s = {0, 0};
    const double want[] = {2e-6, 4e-6, 8e-6, 16e-6, 32e-6, 50e-6, 50e-6};
    for (int i = 0; i < 7; i++) {
        char what[64];
        snprintf(what, sizeof what, "nap %d of a stretch capped at 50 us", i + 1);
        expect(what, nap_next(&s, NAP_FIRST, 50e-6), want[i]);
    }
    expect("a waiting caller's cap at the start", nap_waited_cap(0), 50e-6);
    expect("after 10 ms idle: 2% of it", nap_waited_cap(0.01), 2e-4);
    expect("after 1 s idle: at most 1 ms", nap_waited_cap(1.0), 1e-3);
}

static void waitsome(void) {
    float in = 0, out = 3;
    int idx[1];
    MPI_Request rq;
    MPI_Irecv(&in, 1, MPI_FLOAT, 0, 1, MPI_COMM_SELF, &rq);
    nap_state s = {0, 0};
    int64_t n0 = mesh_naps();
    int outc = nap_waitsome(&s, 1, &rq, idx, 0);
    expect("first wait of a stretch: nothing arrived", outc, 0);
    expect("  and no nap (it polled)", (double)(mesh_naps() - n0), 0);
    for (int k = 1; k <= 4; k++) {
        n0 = mesh_naps();
        outc = nap_waitsome(&s, 1, &rq, idx, 0);
        char what[64];
        snprintf(what, sizeof what, "wait %d: one nap, of %g us", k + 1,
                 1e6 * NAP_FIRST * (1 << (k - 1)));
        expect(what, (double)(mesh_naps() - n0), 1);
        expect("  its length", s.nap, NAP_FIRST * (1 << (k - 1)));
    }
    MPI_Send(&out, 1, MPI_FLOAT, 0, 1, MPI_COMM_SELF);
    outc = nap_waitsome(&s, 1, &rq, idx, 0);
    expect("after the send: one completed", outc, 1);
    expect("  the value", in, 3);
    expect("  which ends the idle stretch (the next wait polls first again)", s.idle0, 0);
    n0 = mesh_naps();
    expect("nothing in flight, nothing due: MPI_UNDEFINED", nap_waitsome(&s, 1, &rq, idx, 0),
           MPI_UNDEFINED);
    expect("  without a nap", (double)(mesh_naps() - n0), 0);
}

/* The row the table picks, seen in the naps it schedules. */
static void rows(void) {
    float in = 0;
    int idx[1];
    MPI_Request rq;
    MPI_Irecv(&in, 1, MPI_FLOAT, 0, 2, MPI_COMM_SELF, &rq);
    progress_wait w;
    progress_wait_init(&w, NULL, 0, 100e-6, 0);
    progress_waitsome(&w, 1, &rq, idx, 0);
    expect("emulated links only: the first wait naps 2 us", w.nap.nap, 2e-6);
    for (int k = 0; k < 8; k++) progress_waitsome(&w, 1, &rq, idx, 0);
    expect("  up to a quarter of the hop latency (100 us)", w.nap.nap, 100e-6);
    progress_wait_init(&w, NULL, 0, 100e-6, 1);
    progress_waitsome(&w, 1, &rq, idx, 0);
    expect("a real link too: the caller's row, which polls first", w.nap.nap, 0);
    for (int k = 0; k < 8; k++) progress_waitsome(&w, 1, &rq, idx, 0);
    /* 50 µs, or more once it has been idle for over 2.5 ms (a loaded machine) */
    const double cap = nap_waited_cap(mesh_now() - w.nap.idle0);
    const int ok = w.nap.nap >= 50e-6 && w.nap.nap <= cap;
    printf("%-64s %12.6g (want 5e-05 .. %g)%s\n", "  then naps of the waiting caller's cap",
           w.nap.nap, cap, ok ? "" : "  FAIL");
    failures += !ok;
    MPI_Cancel(&rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
}

static int64_t g_naps0;
static int g_gave_up;
static void *send_after_naps(void *arg) {
    (void)arg;
    const double t0 = mesh_now();
    while (mesh_naps() - g_naps0 < 3 && !(g_gave_up = mesh_now() - t0 > 30)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    float v = 7;
    MPI_Send(&v, 1, MPI_FLOAT, 0, 3, MPI_COMM_SELF);
    return NULL;
}

static void block(void) {
    float in = 0;
    int idx[1];
    MPI_Request rq;
    MPI_Irecv(&in, 1, MPI_FLOAT, 0, 3, MPI_COMM_SELF, &rq);
    g_naps0 = mesh_naps();
    pthread_t th;
    if (pthread_create(&th, NULL, send_after_naps, NULL) != 0) {
        printf("cannot start the helper thread  FAIL\n");
        failures++;
        return;
    }
    const int outc = nap_block(1, &rq, idx);
    pthread_join(th, NULL);
    expect("nap_block: the message of a sender that waits for 3 naps", outc, 1);
    expect("  its value", in, 7);
    expect("  the helper did not give up (the wait napped)", g_gave_up, 0);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    schedule();
    waitsome();
    rows();
    block();
    printf("test_waiters: %s\n", failures ? "FAILED" : "ok");
    mesh_mpi_finalize();
    return failures ? 1 : 0;
}
