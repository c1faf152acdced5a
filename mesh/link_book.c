/* link_book: the emulated links' state and booking, in real time and on a call's virtual clock.
 * See links.h (and link.h for the model). No MPI, no mesh. */
#define _POSIX_C_SOURCE 200809L /* clock_nanosleep */
#include <errno.h>
#include <time.h>

#include "mesh/links.h"

void links_init(mesh_links *l) {
    *l = (mesh_links){0};
    pthread_mutex_init(&l->mu, NULL);
}

void links_destroy(mesh_links *l) {
    pthread_mutex_destroy(&l->mu);
}

void links_set(mesh_links *l, int axis, double bw, double latency) {
    CHECK(axis >= 0 && axis < MESH_MAX_AXES, "axis %d out of range", axis);
    CHECK(bw >= 0 && latency >= 0, "link bandwidth and latency must be >= 0");
    pthread_mutex_lock(&l->mu);
    l->bw[axis] = bw;
    l->lat[axis] = latency;
    l->busy[axis][0] = l->busy[axis][1] = 0;
    pthread_mutex_unlock(&l->mu);
}

int links_emulated(const mesh_links *l, int axis) {
    return axis >= 0 && l->bw[axis] > 0;
}

/* Real time books each directed link first come, first served: one busy-until per link is
 * exact here. A message is booked at its send, `now`, read under the mutex, so the bookings come
 * in the order of their start times: a gap only opens when a message finds its link idle
 * (now > busy), and it lies wholly before that now, where no later message can fit. (The
 * virtual clock below is different: there a message's `ready` is not its booking order.) */
double links_book(mesh_links *l, int axis, int dir, int64_t bytes, int hops) {
    if (!links_emulated(l, axis)) return 0;
    pthread_mutex_lock(&l->mu);
    const double now = mesh_now();
    const double start = l->busy[axis][dir] > now ? l->busy[axis][dir] : now;
    const double wire = (double)bytes / l->bw[axis];
    l->busy[axis][dir] = start + wire;
    const double t = start + wire + hops * l->lat[axis];
    pthread_mutex_unlock(&l->mu);
    return t;
}

/* a <= b up to a 1e-12 share of b (times are >= 0): a message computed to fill a gap exactly
 * still fits it, and abuts its neighbours, whatever the rounding of the sums. */
static int time_le(double a, double b) {
    return a <= b + 1e-12 * b;
}

/* Books [start, start + wire) on l in the first gap at or after `ready` that holds it, between
 * intervals or after the last; returns start. The chains of a call book a shared link in the
 * order the machine runs them, not in their virtual order, so a message whose data is ready
 * early may be booked after one due later: it then takes the gap before that one, as the link
 * would have carried it first. (Bookings are never moved: a message that does not fit the gap
 * its virtual order would have left goes after the message booked before it.) Abutting
 * intervals merge, so back-to-back traffic takes one slot. When l is full and the message would
 * need a new slot, it goes after the last interval, which grows to cover it: the first-come,
 * first-served booking of a single busy-until, conservative (never earlier than the link frees
 * up). */
static double vlink_book(link_vlink *l, double ready, double wire) {
    double start = ready;
    int i = 0;
    while (i < l->n && !time_le(start + wire, l->lo[i])) {
        if (l->hi[i] > start) start = l->hi[i];
        i++;
    }
    if (!(wire > 0)) return start;
    const double end = start + wire;
    const int prev = i > 0 && time_le(start, l->hi[i - 1]); /* start >= hi[i − 1] here */
    const int next = i < l->n && time_le(l->lo[i], end);
    if (prev && next) { /* fills the gap: intervals i − 1 and i become one */
        l->hi[i - 1] = l->hi[i];
        for (int k = i + 1; k < l->n; k++) l->lo[k - 1] = l->lo[k], l->hi[k - 1] = l->hi[k];
        l->n--;
    } else if (prev) {
        l->hi[i - 1] = end;
    } else if (next) {
        l->lo[i] = start < l->lo[i] ? start : l->lo[i];
    } else if (l->n < LINK_VSLOTS) {
        for (int k = l->n; k > i; k--) l->lo[k] = l->lo[k - 1], l->hi[k] = l->hi[k - 1];
        l->lo[i] = start, l->hi[i] = end;
        l->n++;
    } else { /* full: after the last interval */
        start = ready > l->hi[l->n - 1] ? ready : l->hi[l->n - 1];
        l->hi[l->n - 1] = start + wire;
    }
    return start;
}

double links_book_virtual(const mesh_links *l, link_clock *c, int axis, int dir, int64_t bytes,
                          int hops, double ready) {
    if (!links_emulated(l, axis)) return 0;
    const double wire = (double)bytes / l->bw[axis];
    const double start = vlink_book(&c->vlink[axis][dir], ready, wire);
    return start + wire + hops * l->lat[axis];
}

void link_clock_reset(link_clock *c) {
    c->vclock = 0;
    for (int a = 0; a < MESH_MAX_AXES; a++) c->vlink[a][0].n = c->vlink[a][1].n = 0;
}

void link_sleep_until(double t) {
    if (mesh_now() >= t) return;
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}
