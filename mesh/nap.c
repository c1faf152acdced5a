/* nap: how long the progress thread sleeps between polls of a collective in flight, and its
 * sleep, which a caller starting to wait (mesh_wait) ends at once. The engine (coll_engine.c) calls
 * these; they call nothing of the collectives, so the engine does not depend on the queue. Only
 * the progress thread naps: the SMPI build's engine waits in simulated time instead
 * (sim_progress.c). */
#define _POSIX_C_SOURCE 200809L /* pthread_cond_timedwait on CLOCK_MONOTONIC */
#include <errno.h>
#include <time.h>

#include "mesh/async_impl.h"

/* The progress thread's naps between polls of a collective on real links, growing from the
 * first to the longest while nothing arrives. Each nap costs ~20 µs of CPU on a virtual machine
 * (the timer and the wake-up), and a wake-up preempts the compute sharing the core, so while the
 * caller computes they are long: from 100 µs up to 1 ms (at most ~2% of a core); while the caller
 * waits for a result, from 2 µs up to 50 µs for latency, or up to 2% of the time nothing has
 * arrived (a peer far behind, on a loaded machine: the polls would take CPU from it), at most
 * 1 ms. mesh_wait ends a long nap at once. */
#define NAP_COMPUTING 1e-3
#define NAP_COMPUTING_FIRST 100e-6
#define NAP_WAITED 50e-6
#define NAP_WAITED_FIRST 2e-6
#define NAP_WAITED_SHARE 0.02

double nap_cap(mesh *m, double idle, double *first) {
    mesh_async *q = m->async;
    pthread_mutex_lock(&q->mu);
    const int w = q->waiting;
    pthread_mutex_unlock(&q->mu);
    *first = w ? NAP_WAITED_FIRST : NAP_COMPUTING_FIRST;
    if (!w) return NAP_COMPUTING;
    const double grown =
        idle * NAP_WAITED_SHARE > NAP_COMPUTING ? NAP_COMPUTING : idle * NAP_WAITED_SHARE;
    return grown > NAP_WAITED ? grown : NAP_WAITED;
}

void nap_sleep_until(mesh *m, double t) {
    mesh_async *q = m->async;
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&q->mu);
    const unsigned k0 = q->kicks;
    while (q->kicks == k0 && mesh_now() < t)
        if (pthread_cond_timedwait(&q->kick, &q->mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&q->mu);
}
