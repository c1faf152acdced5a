/* progress: the table of waiters (see progress.h) and the progress thread's naps. */
#define _POSIX_C_SOURCE 200809L /* pthread_cond_timedwait on CLOCK_MONOTONIC */
#include "mesh/progress.h"

#include <errno.h>
#include <time.h>

#include "mesh/async_impl.h"

/* The progress thread's naps while its caller computes: each costs ~20 µs of CPU on a virtual
 * machine and a wake-up preempts the compute sharing the core, so they are long. */
#define NAP_COMPUTING 1e-3
#define NAP_COMPUTING_FIRST 100e-6
#define NAP_EMULATED_THREAD 50e-6 /* the progress thread's shortest cap on emulated links */

/* Whether the caller waits in mesh_wait for the queue (then the thread's naps are short). */
static int caller_waits(mesh_async *q) {
    pthread_mutex_lock(&q->mu);
    const int w = q->waiting;
    pthread_mutex_unlock(&q->mu);
    return w;
}

/* The progress thread's nap until mesh_now() >= t, which a caller starting to wait ends early. */
static void thread_nap_until(mesh_async *q, double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    nap_count();
    pthread_mutex_lock(&q->mu);
    const unsigned k0 = q->kicks;
    while (q->kicks == k0 && mesh_now() < t)
        if (pthread_cond_timedwait(&q->kick, &q->mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&q->mu);
}

/* One poll; when nothing completed, a nap of the stretch's next length (from `first`, at most
 * `cap`), never past wake; on the progress thread a caller's mesh_wait ends it. */
static int poll_then_nap(progress_wait *w, int n, MPI_Request *rq, int *idx, double wake,
                         double first, double cap) {
    int outc = 0;
    MPI_Testsome(n, rq, &outc, idx, MPI_STATUSES_IGNORE);
    if (outc > 0) { /* something completed: the next wait starts a new stretch */
        nap_reset(&w->nap);
        return outc;
    }
    if (outc == MPI_UNDEFINED && wake <= 0) return outc;
    const double now = mesh_now();
    if (w->nap.idle0 == 0) w->nap.idle0 = now;
    const double t = now + nap_next(&w->nap, first, cap);
    const double until = outc == MPI_UNDEFINED || (wake > 0 && wake < t) ? wake : t;
    if (w->on_thread)
        thread_nap_until(w->q, until);
    else
        nap_until(until);
    return outc;
}

static int wait_coroutine(progress_wait *w, int n, MPI_Request *rq, int *idx, double wake) {
    CHECK(w->emul <= 0 && wake <= 0, "inline progress (mesh_set_progress) on emulated links");
    int outc = 0;
    co_waitsome(w->q, n, rq, &outc, idx);
    return outc;
}

static int wait_emulated(progress_wait *w, int n, MPI_Request *rq, int *idx, double wake) {
    const double cap =
        w->on_thread && w->emul < NAP_EMULATED_THREAD ? NAP_EMULATED_THREAD : w->emul;
    return poll_then_nap(w, n, rq, idx, wake, NAP_FIRST, cap);
}

static int wait_thread(progress_wait *w, int n, MPI_Request *rq, int *idx, double wake) {
    if (!caller_waits(w->q))
        return poll_then_nap(w, n, rq, idx, wake, NAP_COMPUTING_FIRST, NAP_COMPUTING);
    const double idle = w->nap.idle0 > 0 ? mesh_now() - w->nap.idle0 : 0;
    return poll_then_nap(w, n, rq, idx, wake, NAP_FIRST, nap_waited_cap(idle));
}

static int wait_caller(progress_wait *w, int n, MPI_Request *rq, int *idx, double wake) {
    return nap_waitsome(&w->nap, n, rq, idx, wake);
}

typedef enum { ROW_COROUTINE, ROW_EMULATED, ROW_THREAD, ROW_CALLER, ROW_COUNT } wait_row;
static int (*const rows[ROW_COUNT])(progress_wait *, int, MPI_Request *, int *, double) = {
    [ROW_COROUTINE] = wait_coroutine,
    [ROW_EMULATED] = wait_emulated,
    [ROW_THREAD] = wait_thread,
    [ROW_CALLER] = wait_caller,
};

static int coroutine_row(mesh_async *q) {
#ifdef MESHTRAIN_SMPI
    (void)q;
    return 1;
#else
    return co_active(q);
#endif
}

static wait_row row_of(const progress_wait *w) {
    if (coroutine_row(w->q)) return ROW_COROUTINE;
    if (!w->real && w->emul > 0) return ROW_EMULATED;
    return w->on_thread ? ROW_THREAD : ROW_CALLER;
}

void progress_wait_init(progress_wait *w, mesh_async *q, int on_thread, double emul, int real) {
    *w = (progress_wait){q, on_thread, emul, real, {0, 0}};
}

int progress_waitsome(progress_wait *w, int n, MPI_Request *rq, int *idx, double wake) {
    return rows[row_of(w)](w, n, rq, idx, wake);
}

int progress_block(mesh_async *q, int n, MPI_Request *rq, int *idx) {
    if (!coroutine_row(q)) return nap_block(n, rq, idx);
    int outc = 0;
    while (outc == 0) co_waitsome(q, n, rq, &outc, idx);
    return outc;
}

void progress_waitall(mesh_async *q, int n, MPI_Request *rq, int *idx) {
    while (progress_block(q, n, rq, idx) != MPI_UNDEFINED) {
    }
}
