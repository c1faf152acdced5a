/* report: where a step's time goes, beside the book's prediction.
 *
 * Measured: every collective is recorded by mesh's trace hook (its transfer time) and by
 * mesh_stats (the time the caller was blocked in it: the *exposed* communication). Per step:
 *   compute = wall − Σ exposed;  idle = max over ranks of compute − this rank's compute (time
 *   spent waiting for slower ranks, which shows up inside the exposed communication).
 * Predicted: compute = this rank's FLOPs / its measured sgemm FLOP/s; each collective call =
 *   mesh/cost.h's formula for its op, axes, algorithm and V, with the link constants of its
 *   major axis (emulated, or calibrated at start-up by a ping-pong along the axis);
 *   step = compute + blocking collectives + max(0, asynchronous collectives − ⅔·compute)
 *   (asynchronous gradient reductions and prefetches can hide behind the backward pass, which
 *   is ⅔ of the compute).
 * Overlap (report.h): per collective type, 1 − exposed/transfer, measured per step and over the
 *   run; predicted by the same step model (the hidden part of the asynchronous transfers, shared
 *   among types in proportion to their predicted times). */
#include "train/observe/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/cost.h"
#include "mesh/link.h"

struct report {
    mesh *m;
    double flops; /* this rank's sgemm FLOP/s */
    cost_link link[MESH_MAX_AXES];
    int calibrated; /* links measured (1) or emulated (2) */
    /* accumulated by the trace hook (the progress thread may call it) */
    double pred[MESH_OP_COUNT], pred_async[MESH_OP_COUNT], xfer[MESH_OP_COUNT];
    int regime_lat[MESH_OP_COUNT], async_calls[MESH_OP_COUNT];
    /* totals over the run */
    report_totals tot;
    mesh_stat before[MESH_OP_COUNT];
    double t0;
};

double report_predict(const report *r, mesh_op op, mesh_axes axes, mesh_alg alg, int64_t count,
                      int *latency_bound) {
    int sizes[MESH_MAX_AXES], wraps[MESH_MAX_AXES], n = 1;
    for (int k = 0; k < axes.n; k++) {
        sizes[k] = mesh_axis_size(r->m, axes.ax[k]);
        wraps[k] = mesh_axis_wraps(r->m, axes.ax[k]);
        n *= sizes[k];
    }
    double V = 4.0 * (double)count; /* AllReduce, ppermute: the array itself */
    if (op == MESH_OP_ALL_GATHER || op == MESH_OP_REDUCE_SCATTER || op == MESH_OP_ALL_TO_ALL)
        V *= n; /* after the gather / the unreduced input (count is per rank) */
    const cost_link *l = &r->link[axes.n ? axes.ax[0] : 0];
    cost_est est;
    double t =
        cost_collective(mesh_cost_op(op), l, sizes, wraps, axes.n, mesh_cost_alg(alg), V, &est);
    if (latency_bound) *latency_bound = t > 0 && est.regime == COST_REGIME_LATENCY;
    return t > 0 ? t : 0.0;
}

static void hook(const mesh_call *c, void *ctx) {
    report *r = ctx;
    int lat = 0;
    double t = report_predict(r, c->op, c->axes, c->alg, c->count, &lat);
    if (c->async)
        r->pred_async[c->op] += t;
    else
        r->pred[c->op] += t;
    r->xfer[c->op] += c->t_end - c->t_start;
    r->regime_lat[c->op] += lat;
    r->async_calls[c->op] += c->async;
}

double report_overlap(double exposed, double xfer) {
    if (!(xfer > 0)) return 0.0;
    const double f = 1.0 - exposed / xfer;
    return f < 0 ? 0.0 : f > 1 ? 1.0 : f;
}

/* One-hop ping-pong along an axis: α from 1 float, β from 1 MiB (median of 5). */
static void calibrate_axis(report *r, int axis) {
    const int64_t big = 1 << 18;
    float *a = calloc((size_t)big, sizeof(float)), *b = calloc((size_t)big, sizeof(float));
    double ts[5], tb[5];
    for (int rep = 0; rep < 5; rep++) {
        double t = mesh_now();
        for (int i = 0; i < 10; i++) mesh_ppermute(r->m, axis, 1, b, a, 1);
        ts[rep] = (mesh_now() - t) / 10;
        t = mesh_now();
        mesh_ppermute(r->m, axis, 1, b, a, big);
        tb[rep] = mesh_now() - t;
    }
    for (int i = 0; i < 5; i++) /* insertion sort, for the medians */
        for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) {
            double x = ts[j];
            ts[j] = ts[j - 1], ts[j - 1] = x;
        }
    for (int i = 0; i < 5; i++)
        for (int j = i; j > 0 && tb[j] < tb[j - 1]; j--) {
            double x = tb[j];
            tb[j] = tb[j - 1], tb[j - 1] = x;
        }
    double lat = ts[2], dt = tb[2] - lat;
    r->link[axis].hop_latency = lat;
    r->link[axis].w_oneway = dt > 0 ? 4.0 * (double)big / dt : 1e12;
    free(a);
    free(b);
}

report *report_create(mesh *m, double flops) {
    report *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->m = m;
    r->flops = flops;
    int emulated = 1;
    for (int a = 0; a < mesh_ndims(m); a++) {
        double bw, lat;
        mesh_link_get(m, a, &bw, &lat);
        if (bw > 0) {
            r->link[a].w_oneway = bw;
            r->link[a].hop_latency = lat;
        } else {
            emulated = 0;
            if (mesh_axis_size(m, a) > 1)
                calibrate_axis(r, a);
            else
                r->link[a] = (cost_link){1e12, 1e-6};
        }
    }
    r->calibrated = emulated ? 2 : 1;
    mesh_stats_reset(m);
    CHECK(mesh_add_trace_hook(m, hook, NULL, r) == 0, "too many trace observers");
    return r;
}

void report_destroy(report *r) {
    if (!r) return;
    mesh_remove_trace_hook(r->m, r);
    free(r);
}

const cost_link *report_link(const report *r, int axis) {
    return &r->link[axis];
}
double report_flops(const report *r) {
    return r->flops;
}
const char *report_link_source(const report *r) {
    return r->calibrated == 2 ? "emulated" : "measured";
}

void report_step_begin(report *r) {
    memset(r->pred, 0, sizeof r->pred);
    memset(r->pred_async, 0, sizeof r->pred_async);
    memset(r->xfer, 0, sizeof r->xfer);
    memset(r->regime_lat, 0, sizeof r->regime_lat);
    memset(r->async_calls, 0, sizeof r->async_calls);
    for (int op = 0; op < MESH_OP_COUNT; op++) r->before[op] = mesh_stats(r->m, (mesh_op)op, -1);
    r->t0 = mesh_now();
}

void report_step_end(report *r, double flops_rank, step_split *out) {
    const double wall = mesh_now() - r->t0;
    memset(out, 0, sizeof *out);
    double exposed = 0, pred_block = 0, pred_async = 0;
    for (int op = 0; op < MESH_OP_COUNT; op++) {
        mesh_stat now = mesh_stats(r->m, (mesh_op)op, -1);
        out->exposed[op] = now.wait_seconds - r->before[op].wait_seconds;
        out->calls[op] = now.calls - r->before[op].calls;
        out->bytes[op] = now.bytes - r->before[op].bytes;
        out->pred[op] = r->pred[op] + r->pred_async[op];
        exposed += out->exposed[op];
        pred_block += r->pred[op];
        pred_async += r->pred_async[op];
        report_totals *t = &r->tot;
        t->calls[op] += out->calls[op];
        t->bytes[op] += out->bytes[op];
        t->exposed[op] += out->exposed[op];
        t->xfer[op] += r->xfer[op];
        t->pred[op] += out->pred[op];
        t->latency_calls[op] += r->regime_lat[op];
        t->async_calls[op] += r->async_calls[op];
        out->xfer[op] = r->xfer[op];
    }
    out->wall = wall;
    out->compute = wall - exposed;
    out->pred_compute = flops_rank / r->flops;
    double hidden = pred_async - 2.0 / 3.0 * out->pred_compute;
    out->pred_step = out->pred_compute + pred_block + (hidden > 0 ? hidden : 0);
    /* overlap, measured and predicted, over the collectives (p2p waits are pipeline bubbles) */
    const double can_hide =
        pred_async < 2.0 / 3.0 * out->pred_compute ? pred_async : 2.0 / 3.0 * out->pred_compute;
    double c_exp = 0, c_xfer = 0, c_pred = 0, c_hid = 0;
    int64_t n_async = 0;
    for (int op = 0; op < MESH_OP_SEND; op++) {
        const double h = pred_async > 0 ? r->pred_async[op] / pred_async * can_hide : 0;
        r->tot.pred_hidden[op] += h;
        c_exp += out->exposed[op], c_xfer += out->xfer[op], c_pred += out->pred[op], c_hid += h;
        n_async += r->async_calls[op];
    }
    out->overlap = n_async ? report_overlap(c_exp, c_xfer) : -1;
    out->pred_overlap = n_async && c_pred > 0 ? c_hid / c_pred : -1;
    /* idle: how long this rank waited for the slowest rank's compute */
    float mine = (float)out->compute, all[4096];
    mesh_axes world;
    world.n = mesh_ndims(r->m);
    for (int a = 0; a < world.n; a++) world.ax[a] = a;
    const int n = mesh_nranks(r->m);
    if (n <= 4096) {
        mesh_all_gather(r->m, world, all, &mine, 1, MESH_ALG_MPI);
        float mx = 0;
        for (int i = 0; i < n; i++) mx = all[i] > mx ? all[i] : mx;
        out->idle = (double)mx - out->compute;
    }
    r->tot.steps++;
    r->tot.wall += wall;
    r->tot.compute += out->compute;
    r->tot.pred_compute += out->pred_compute;
    r->tot.pred_step += out->pred_step;
    /* the gather above is bookkeeping, not the step's: keep it out of the next step's deltas */
}

const report_totals *report_get_totals(const report *r) {
    return &r->tot;
}

void report_print_summary(const report *r, const report_case *k, FILE *out) {
    const report_totals *t = &r->tot;
    if (mesh_world_rank() != 0 || t->steps == 0) return;
    fprintf(out, "== summary: %s, %lld steps (rank 0; times summed over steps) ==\n", k->scheme,
            (long long)t->steps);
    fprintf(out, "  %-14s %7s %6s %10s %11s %11s %12s %9s %7s %5s  %s\n", "collective", "calls",
            "async", "MB sent", "exposed ms", "transfer ms", "predicted ms", "meas/pred", "overlap",
            "book", "regime (book)");
    for (int op = 0; op < MESH_OP_COUNT; op++) {
        if (t->calls[op] == 0) continue;
        const double ratio = t->pred[op] > 0 ? t->xfer[op] / t->pred[op] : 0;
        char book[16] = "-";
        if (op < MESH_OP_SEND && t->pred[op] > 0)
            snprintf(book, sizeof book, "%.0f%%", 100.0 * t->pred_hidden[op] / t->pred[op]);
        fprintf(out,
                "  %-14s %7lld %6lld %10.3f %11.2f %11.2f %12.2f %9.2f %6.0f%% %5s  %lld of "
                "%lld latency-bound\n",
                mesh_op_name((mesh_op)op), (long long)t->calls[op], (long long)t->async_calls[op],
                t->bytes[op] / 1e6, 1e3 * t->exposed[op], 1e3 * t->xfer[op], 1e3 * t->pred[op],
                ratio, 100.0 * report_overlap(t->exposed[op], t->xfer[op]), book,
                (long long)t->latency_calls[op], (long long)t->calls[op]);
    }
    fprintf(out, "  overlap = 1 - exposed/transfer: the share of the transfer time hidden behind "
                 "compute (OSU's measure);\n  book = the step model's: non-blocking transfers "
                 "hide behind 2/3 of the predicted compute\n");
    fprintf(out,
            "  compute: measured %.1f ms, predicted %.1f ms (%.2f) | step: measured %.1f ms, "
            "predicted %.1f ms (%.2f)\n",
            1e3 * t->compute, 1e3 * t->pred_compute,
            t->pred_compute > 0 ? t->compute / t->pred_compute : 0, 1e3 * t->wall,
            1e3 * t->pred_step, t->pred_step > 0 ? t->wall / t->pred_step : 0);
    /* the book's thresholds with this machine's C (sgemm FLOP/s) and W (bidirectional link) */
    const cost_link *l = &r->link[k->data_axis >= 0 ? k->data_axis : 0];
    const double W = 2.0 * l->w_oneway, alpha = r->flops / W;
    fprintf(out, "  regime: C = %.3g FLOP/s, W = %.3g B/s (%s) → α = C/W = %.0f\n", r->flops, W,
            report_link_source(r), alpha);
    if (k->nX > 1) {
        const double bx = (double)k->tokens / (double)k->nX;
        fprintf(out, "    data/FSDP: B/X = %.0f tokens vs α/n_axes = %.0f → %s\n", bx,
                alpha / k->n_data_axes,
                bx > alpha / k->n_data_axes ? "compute-bound" : "communication-bound");
    }
    if (k->nY > 1) {
        const double ymax = (double)k->F / alpha;
        fprintf(out, "    tensor: |Y| = %lld vs n_axes·F/α = %.2f → %s\n", (long long)k->nY, ymax,
                (double)k->nY < ymax ? "compute-bound" : "communication-bound");
    }
    if (k->nX > 1 && k->nY > 1) {
        const double N = (double)(k->nX * k->nY),
                     thr = 4 * alpha * alpha / (k->n_data_axes * 1.0 * (double)k->F);
        fprintf(out,
                "    mixed FSDP+TP: B/N = %.0f vs 4α²/(M_X·M_Y·F) = %.0f → %s; "
                "X_opt = sqrt(B/F·M_X/M_Y·N) = %.2f\n",
                (double)k->tokens / N, thr,
                (double)k->tokens / N > thr ? "compute-bound" : "communication-bound",
                sqrt((double)k->tokens / (double)k->F * k->n_data_axes * N));
    }
}
