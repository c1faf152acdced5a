/* predict: replay of a step's events with predicted durations (see predict.h); the overlap
 * ratio report.h declares. */
#include "train/observe/predict.h"

#include "train/observe/report.h" /* report_overlap: its declaration */

#include <stdlib.h>

/* Time order; at equal times an issue first (a call may be waited for the moment it starts). */
static int by_time(const void *pa, const void *pb) {
    const predict_event *a = pa, *b = pb;
    if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
    const int ia = a->kind != PREDICT_ISSUE, ib = b->kind != PREDICT_ISSUE;
    if (ia != ib) return ia - ib;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

/* The caller-side interval an event blocks (none for an issue). */
static int blocks(const predict_event *e) {
    return e->kind != PREDICT_ISSUE;
}

void predict_replay(predict_event *ev, int n, double t_begin, double t_end, double compute_pred,
                    predict_result *out) {
    qsort(ev, (size_t)n, sizeof *ev, by_time);
    /* the measured compute: the stretches of the step not blocked in a collective */
    double gaps = 0, at = t_begin;
    for (int i = 0; i < n; i++) {
        if (ev[i].t0 < t_begin || ev[i].t0 > t_end || !blocks(&ev[i])) continue;
        if (ev[i].t0 > at) gaps += ev[i].t0 - at;
        if (ev[i].t1 > at) at = ev[i].t1;
    }
    if (t_end > at) gaps += t_end - at;
    const double scale = gaps > 0 ? compute_pred / gaps : 0;
    /* the replay: T is the caller's predicted clock, q_free when the queue's last call ends;
     * an issue's end is kept in its t1 for the wait that follows */
    double T = 0, q_free = 0, comm = 0, exp_lat = 0;
    at = t_begin;
    for (int i = 0; i < n; i++) {
        predict_event *e = &ev[i];
        if (e->t0 < t_begin || e->t0 > t_end) continue;
        if (e->t0 > at) T += (e->t0 - at) * scale, at = e->t0;
        switch (e->kind) {
        case PREDICT_ISSUE: {
            const double start = T > q_free ? T : q_free;
            q_free = e->t1 = start + e->dur;
            comm += e->dur;
            break;
        }
        case PREDICT_BLOCKING:
            T += e->dur;
            comm += e->dur;
            exp_lat += e->lat;
            break;
        case PREDICT_WAIT:
            for (int j = i - 1; j >= 0; j--)
                if (ev[j].kind == PREDICT_ISSUE && ev[j].seq == e->seq) {
                    if (ev[j].t1 > T) {
                        const double w = ev[j].t1 - T;
                        exp_lat += ev[j].dur > 0 ? w * ev[j].lat / ev[j].dur : 0;
                        T = ev[j].t1;
                    }
                    break;
                }
            break;
        }
        if (blocks(e) && e->t1 > at) at = e->t1;
    }
    if (t_end > at) T += (t_end - at) * scale;
    if (gaps <= 0) T += compute_pred; /* no stretch to put it in: at the end */
    out->step = T;
    out->compute = compute_pred;
    out->comm = comm;
    out->exposed = T - compute_pred > 0 ? T - compute_pred : 0;
    out->exposed_latency = exp_lat < out->exposed ? exp_lat : out->exposed;
    const double bw = out->exposed - out->exposed_latency;
    out->dominant = compute_pred >= bw && compute_pred >= out->exposed_latency ? "compute"
                    : bw >= out->exposed_latency                               ? "bandwidth"
                                                                               : "latency";
}

double predict_expert_rows(const float *rows, int nranks, int stride, int kept,
                           const float *mine) {
    int same = 1;
    for (int q = 0; q < nranks; q++) same &= rows[(int64_t)q * stride] == mine[0];
    const int n = mine[0] < (float)kept ? (int)mine[0] : kept;
    double sum = 0;
    for (int i = 1; i <= n; i++) {
        float mx = mine[i];
        for (int q = 0; same && q < nranks; q++)
            mx = rows[(int64_t)q * stride + i] > mx ? rows[(int64_t)q * stride + i] : mx;
        sum += mx;
    }
    return sum;
}

double report_overlap(double exposed, double xfer) {
    if (!(xfer > 0)) return 0.0;
    const double f = 1.0 - exposed / xfer;
    return f < 0 ? 0.0 : f > 1 ? 1.0 : f;
}
