/* link: emulated links and chip emulation. See link.h for the model. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, clock_nanosleep, gethostname */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mesh/cost.h"
#include "mesh/mesh_impl.h"
#include "mesh/where.h"

void mesh_link_set(mesh *m, int axis, double bw, double latency) {
    CHECK(axis >= 0 && axis < m->ndims, "axis %d out of range", axis);
    CHECK(bw >= 0 && latency >= 0, "link bandwidth and latency must be >= 0");
#ifdef MESHTRAIN_SMPI /* emulation sleeps in real time, which would stall the whole simulation */
    if (bw > 0)
        mesh_exit_error("link emulation (--emulate, --link) is off in the SMPI build: the "
                        "simulated platform's links are the chip's (bench/simpod --chip)");
#endif
    pthread_mutex_lock(&m->link_mu);
    m->link_bw[axis] = bw;
    m->link_lat[axis] = latency;
    m->link_busy[axis][0] = m->link_busy[axis][1] = 0;
    pthread_mutex_unlock(&m->link_mu);
}

void mesh_link_get(const mesh *m, int axis, double *bw, double *latency) {
    CHECK(axis >= 0 && axis < m->ndims, "axis %d out of range", axis);
    if (bw) *bw = m->link_bw[axis];
    if (latency) *latency = m->link_lat[axis];
}

/* Real time books each directed link first come, first served: one busy-until per link is
 * exact here. A message is booked at its send, `now`, read under link_mu, so the bookings come
 * in the order of their start times: a gap only opens when a message finds its link idle
 * (now > busy), and it lies wholly before that now, where no later message can fit. (The
 * virtual clock below is different: there a message's `ready` is not its booking order.) */
double link_schedule(mesh *m, int axis, int dir, int64_t bytes, int hops) {
    if (axis < 0 || m->link_bw[axis] <= 0) return 0;
    pthread_mutex_lock(&m->link_mu);
    double now = mesh_now();
    double start = m->link_busy[axis][dir] > now ? m->link_busy[axis][dir] : now;
    double wire = (double)bytes / m->link_bw[axis];
    m->link_busy[axis][dir] = start + wire;
    double t = start + wire + hops * m->link_lat[axis];
    pthread_mutex_unlock(&m->link_mu);
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
static double vlink_book(mesh_vlink *l, double ready, double wire) {
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
    } else if (l->n < MESH_VLINK_SLOTS) {
        for (int k = l->n; k > i; k--) l->lo[k] = l->lo[k - 1], l->hi[k] = l->hi[k - 1];
        l->lo[i] = start, l->hi[i] = end;
        l->n++;
    } else { /* full: after the last interval */
        start = ready > l->hi[l->n - 1] ? ready : l->hi[l->n - 1];
        l->hi[l->n - 1] = start + wire;
    }
    return start;
}

double link_schedule_virtual(mesh *m, mesh_ctx *ctx, int axis, int dir, int64_t bytes, int hops,
                             double ready) {
    if (axis < 0 || m->link_bw[axis] <= 0) return 0;
    const double wire = (double)bytes / m->link_bw[axis];
    const double start = vlink_book(&ctx->vlink[axis][dir], ready, wire);
    return start + wire + hops * m->link_lat[axis];
}

void link_virtual_reset(mesh_ctx *ctx) {
    ctx->vclock = 0;
    for (int a = 0; a < MESH_MAX_AXES; a++) ctx->vlink[a][0].n = ctx->vlink[a][1].n = 0;
}

void link_sleep_until(double t) {
    double now = mesh_now();
    if (now >= t) return;
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

int mesh_emulate(mesh *m, const char *chip, double measured_flops, mesh_emulation *out) {
    const cost_chip *c = cost_chip_find(chip);
    if (!c || !(measured_flops > 0)) return -1;
    double mean = 0;
    mesh_blocking_begin("MPI_Allreduce and MPI_Bcast (ranks agreeing on the emulated links)");
    MPI_Allreduce(&measured_flops, &mean, 1, MPI_DOUBLE, MPI_SUM, m->ctx[0].world.mpi);
    mean /= m->nranks;
    /* hosts must agree for the shared clock (link.h) */
    char host[64] = "", first[64];
    gethostname(host, sizeof host - 1);
    memcpy(first, host, sizeof first);
    MPI_Bcast(first, 64, MPI_CHAR, 0, m->ctx[0].world.mpi);
    int same = strcmp(first, host) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, m->ctx[0].world.mpi);
    mesh_blocking_end();
    if (!all)
        mesh_log("warning: --emulate on several hosts: emulated delays rely on one shared clock "
                 "and will be off by the hosts' clock offsets\n");
    mesh_emulation e;
    e.chip_flops = c->flops_bf16;
    e.chip_w_oneway = c->ici_oneway;
    e.chip_latency = c->hop_latency;
    e.measured_flops = mean;
    e.time_scale = c->flops_bf16 / mean;
    e.bw = c->ici_oneway / e.time_scale;
    e.latency = c->hop_latency * e.time_scale;
    for (int k = 0; k < m->ndims; k++) mesh_link_set(m, k, e.bw, e.latency);
    mesh_apply_chip_wrap(m, chip);
    if (out) *out = e;
    return 0;
}

cost_op mesh_cost_op(mesh_op op) {
    switch (op) {
    case MESH_OP_ALL_GATHER:
        return COST_OP_ALL_GATHER;
    case MESH_OP_REDUCE_SCATTER:
        return COST_OP_REDUCE_SCATTER;
    case MESH_OP_ALL_REDUCE:
        return COST_OP_ALL_REDUCE;
    case MESH_OP_ALL_TO_ALL:
        return COST_OP_ALL_TO_ALL;
    default:
        return COST_OP_PPERMUTE;
    }
}
