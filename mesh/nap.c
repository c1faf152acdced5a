/* nap: the naps of mesh/'s waits and the caller's napping waits. See nap.h. */
#include "mesh/nap.h"

#include <sched.h>
#include <stdatomic.h>

#include "mesh/coll.h"
#include "mesh/links.h"

static atomic_llong g_naps; /* this process's naps, every thread */
static _Atomic double g_spin = NAP_SPIN; /* mesh_set_spin */

double mesh_get_spin(void) {
    return atomic_load_explicit(&g_spin, memory_order_relaxed);
}

void mesh_set_spin(double seconds) {
    atomic_store_explicit(&g_spin, seconds > 0 ? seconds : 0, memory_order_relaxed);
}

int64_t mesh_naps(void) {
    return atomic_load_explicit(&g_naps, memory_order_relaxed);
}

double nap_next(nap_state *s, double first, double cap) {
    const double n = s->nap * 2;
    s->nap = n < first ? first : n > cap ? cap : n;
    return s->nap;
}

double nap_waited_cap(double idle) {
    const double grown = idle * NAP_SHARE > NAP_MAX ? NAP_MAX : idle * NAP_SHARE;
    return grown > NAP_WAITED ? grown : NAP_WAITED;
}

void nap_count(void) {
    atomic_fetch_add_explicit(&g_naps, 1, memory_order_relaxed);
}

void nap_until(double t) {
    nap_count();
    link_sleep_until(t);
}

int nap_waitsome(nap_state *s, int n, MPI_Request *rq, int *idx, double wake) {
    int outc = 0;
    double now = mesh_now();
    if (s->idle0 == 0) { /* a new idle stretch: poll without sleeping for a moment */
        s->idle0 = now;
        const double spin = mesh_get_spin();
        for (;;) { /* yielding between polls: a peer sharing this core gets to run */
            MPI_Testsome(n, rq, &outc, idx, MPI_STATUSES_IGNORE);
            if (outc != 0 || (now = mesh_now()) - s->idle0 >= spin || (wake > 0 && now >= wake))
                break;
            sched_yield();
        }
        if (outc > 0) nap_reset(s);
        return outc;
    }
    MPI_Testsome(n, rq, &outc, idx, MPI_STATUSES_IGNORE);
    if (outc > 0) { /* something completed: whatever waits next starts a new stretch */
        nap_reset(s);
        return outc;
    }
    const double t = now + nap_next(s, NAP_FIRST, nap_waited_cap(now - s->idle0));
    if (outc == MPI_UNDEFINED && wake <= 0) return outc;
    nap_until(outc == MPI_UNDEFINED || (wake > 0 && wake < t) ? wake : t);
    return outc;
}

int nap_block(int n, MPI_Request *rq, int *idx) {
    int outc = 0;
#ifdef MESHTRAIN_SMPI /* simulated time: MPI's own wait */
    MPI_Waitsome(n, rq, &outc, idx, MPI_STATUSES_IGNORE);
#else
    nap_state s = {0, 0};
    while ((outc = nap_waitsome(&s, n, rq, idx, 0)) == 0) {
    }
#endif
    return outc;
}

int nap_waitany(int n, MPI_Request *rq) {
    int i = MPI_UNDEFINED;
#ifdef MESHTRAIN_SMPI
    MPI_Waitany(n, rq, &i, MPI_STATUS_IGNORE);
#else
    nap_state s = {0, 0};
    const double spin = mesh_get_spin();
    for (int flag = 0;;) {
        MPI_Testany(n, rq, &i, &flag, MPI_STATUS_IGNORE);
        if (flag) return i; /* MPI_UNDEFINED when none was in flight */
        const double now = mesh_now();
        if (s.idle0 == 0) s.idle0 = now;
        if (now - s.idle0 < spin)
            sched_yield();
        else
            nap_until(now + nap_next(&s, NAP_FIRST, nap_waited_cap(now - s.idle0)));
    }
#endif
    return i;
}

void nap_waitall(int n, MPI_Request *rq) {
#ifdef MESHTRAIN_SMPI
    MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
#else
    while (nap_waitany(n, rq) != MPI_UNDEFINED) {
    }
#endif
}
