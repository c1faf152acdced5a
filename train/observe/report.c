/* report: where a step's time goes, beside its prediction and the book's idealised figure.
 *
 * Measured: every collective is recorded by mesh's trace hook (its transfer time) and by
 * mesh_stats (the time the caller was blocked in it: the *exposed* communication). Per step:
 *   compute = wall − Σ exposed;  idle = max over ranks of compute − this rank's compute (time
 *   spent waiting for slower ranks, which shows up inside the exposed communication).
 * Predicted (the step's own prediction, `pred_ms` of --metrics):
 *   compute = the kernels' times on this rank's shapes, measured at start-up (train/step/ktime.h),
 *     plus the memory passes the step made (passes.h: the floats its thread copied, cleared and
 *     added, counted by part as the CPU time is) at the seconds per float ktime timed;
 *   each collective call = mesh/cost.h's formula for what it actually moved — its op, axes,
 *     algorithm, V in the bytes of its wire format (fp32 or bf16), the link constants of its
 *     major axis (emulated, or calibrated at start-up by a ping-pong along the axis) — with each
 *     step's hop latency added to its transfer, as the ring algorithms forward what they received
 *     (cost_serialized, lanes included); MPI's built-ins are not slowed by the emulated links and
 *     are predicted free under --emulate; pipeline sends/receives count as measured, or with
 *     report_set_pipe as free, the rank's wait for its neighbours being the simulated one;
 *   step = the replay of the step's events with those durations (train/observe/predict.h): what
 *     the program let overlap (non-blocking calls until their wait) overlaps, nothing else; on a
 *     host whose ranks share its CPUs (share.h), with the compute × the sharing's factor (the
 *     replay with the compute as timed is kept: pred_dedicated, a CPU per rank).
 * The book's idealised step: max(this rank's FLOPs at the peak sgemm rate, Σ of the book's
 *   formulas over the step's collectives with bf16 bytes and the latency overlapped).
 * Overlap (report.h): per collective type, 1 − exposed/transfer, measured per step and over the
 *   run; predicted as 1 − (predicted exposed)/(predicted transfer) over the step's collectives.
 * By part (parts.h): the trace's spans (trace_observe) switch the caller's part; at each switch
 *   the caller's CPU time since the last one, less its CPU time blocked in collectives, is
 *   charged to the part it leaves, and the switch's time is kept, so that a collective (whose
 *   hook may run later, on the progress thread) counts in the part it was issued in.
 * Skew-free transfer (skew.h): at the step's end the ranks exchange every collective's start and
 *   end, and each call's transfer is counted from the last rank's start (report_step_end). */
#include "train/observe/report.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/cost.h"
#include "mesh/link.h"
#include "train/observe/boundary.h"
#include "train/observe/calibrate.h"
#include "train/observe/passes.h"
#include "train/observe/predict.h"
#include "train/observe/skew.h"
#include "train/observe/trace.h"

#define REPORT_EVENTS 16384  /* events one step may record (more: the plain sum, noted once) */
#define REPORT_SWITCHES 8192 /* part switches one step may record (later ones: the last part) */
#define REPORT_PART_DEPTH 16 /* nested spans the part stack follows */
/* the largest exchange of calls (all ranks' rows, floats: 4 MB a rank); the SMPI dry run (every
 * rank in one process) does not exchange: each call keeps its own duration there */
#ifdef MESHTRAIN_SMPI
#define REPORT_SKEW_FLOATS 0
#else
#define REPORT_SKEW_FLOATS (1 << 20)
#endif

struct report {
    mesh *m;
    trace *tr;    /* the spans observed (report_watch; NULL: none) */
    double flops; /* this rank's sgemm FLOP/s */
    cost_link link[MESH_MAX_AXES];
    int calibrated;      /* links measured (1) or emulated (2) */
    double compute_pred; /* predicted compute of a step (report_set_compute) */
    double
        pipe_idle[2]; /* report_set_pipe: the simulated wait (a CPU per rank, shared); −1: none */
    /* accumulated by the trace hooks (the progress thread calls them too): under mu */
    pthread_mutex_t mu;
    double pred[MESH_OP_COUNT], pred_async[MESH_OP_COUNT], xfer[MESH_OP_COUNT];
    int regime_lat[MESH_OP_COUNT], async_calls[MESH_OP_COUNT];
    double book_comm; /* the book's time of the step's collectives (bf16, max-form) */
    predict_event *ev;
    int nev, ev_cap, overflow, overflow_noted; /* ev_cap: REPORT_EVENTS or the test hook's */
    /* totals over the run */
    report_totals tot;
    mesh_stat before[MESH_OP_COUNT];
    double t0, cpu0;
    /* --dcn: collectives over ICI only [0] and over a set with the DCN axis [1] (under mu) */
    int dcn; /* the DCN axis, −1 if none */
    double net_xfer[2], net_pred[2], net_bytes[2];
    int64_t net_calls[2];
    /* the step by part (parts.h): the spans' parts (caller's thread), the caller's CPU and
     * blocked CPU at the last switch, the switches' times (under mu: the progress thread looks
     * up the part a collective was issued in), the sums of the step */
    step_part stack[REPORT_PART_DEPTH];
    int depth;
    double part_cpu0, part_wait0;
    struct {
        double t;
        step_part p;
    } sw[REPORT_SWITCHES];
    int nsw;
    double part_cpu[PART_COUNT], part_xfer[PART_COUNT], part_pred[PART_COUNT];
    double part_compute_pred[PART_COUNT];
    pass_count passes;                 /* the step's memory passes by part (caller's thread) */
    double pass_rate[KERN_PASS_COUNT]; /* their seconds per float (report_set_pass_rates) */
    double expert_sec[2], expert_rows;  /* report_set_experts's (experts: it was called) */
    int experts;
    mesh_axes expert_axes; /* the ranks that share the experts' rows (report_set_experts) */
    double part_wire[PART_COUNT][MESH_MAX_AXES]; /* step_split's (under mu) */
    /* the step's collectives as skew.h matches them across ranks, and the part each was issued
     * in (under mu); shared_clock: every rank on one host */
    skew_call *sk;
    step_part *sk_part;
    int nsk, shared_clock;
    int skew;          /* report_set_skew: exchange the calls at each step's end */
    share_host worst;  /* the most shared host (ranks per CPU), found at report_create */
    int yields;        /* mesh_mpi_yields over the world: 0 if any rank's waits spin */
    share_model share; /* report_set_threads */
};

const char *step_part_name(step_part p) {
    static const char *const n[PART_COUNT] = {"fwd-attn", "fwd-mlp",   "fwd-other", "bwd-attn",
                                              "bwd-mlp",  "bwd-other", "rest"};
    return p >= 0 && p < PART_COUNT ? n[p] : "?";
}

/* The part of a span of kind k opened inside one of part `parent`. */
static step_part part_of(trace_kind k, step_part parent) {
    const int fwd = parent <= PART_FWD_OTHER, bwd = !fwd && parent <= PART_BWD_OTHER;
    switch (k) {
    case TRACE_ATTN:
        return fwd ? PART_FWD_ATTN : bwd ? PART_BWD_ATTN : parent;
    case TRACE_MLP:
        return fwd ? PART_FWD_MLP : bwd ? PART_BWD_MLP : parent;
    case TRACE_FWD:
    case TRACE_HEAD_FWD:
    case TRACE_EMBED_FWD:
    case TRACE_MICRO_FWD:
        return PART_FWD_OTHER;
    case TRACE_BWD:
    case TRACE_HEAD_BWD:
    case TRACE_EMBED_BWD:
    case TRACE_MICRO_BWD:
        return PART_BWD_OTHER;
    default:
        return PART_REST;
    }
}

static step_part part_now(const report *r) {
    const int d = r->depth < REPORT_PART_DEPTH ? r->depth : REPORT_PART_DEPTH;
    return d > 0 ? r->stack[d - 1] : PART_REST;
}

/* The caller's CPU time blocked in collectives so far (mesh_stats' wait_cpu, every op). */
static double wait_cpu(const report *r) {
    double w = 0;
    for (int op = 0; op < MESH_OP_COUNT; op++) w += mesh_stats(r->m, (mesh_op)op, -1).wait_cpu;
    return w;
}

/* Charges the caller's compute CPU time up to `cpu` (its CPU clock; w: wait_cpu) since the last
 * switch to the current part. */
static void part_charge_at(report *r, double cpu, double w) {
    r->part_cpu[part_now(r)] += (cpu - r->part_cpu0) - (w - r->part_wait0);
    r->part_cpu0 = cpu, r->part_wait0 = w;
    pass_count_charge(&r->passes, part_now(r));
}

static void part_charge(report *r) {
    part_charge_at(r, mesh_thread_cpu(), wait_cpu(r));
}

/* The part the caller was in at time t (under mu). */
static step_part part_at(const report *r, double t) {
    int lo = 0, hi = r->nsw - 1;
    if (hi < 0 || t < r->sw[0].t) return PART_REST;
    while (lo < hi) { /* the last switch at or before t */
        const int mid = (lo + hi + 1) / 2;
        if (r->sw[mid].t <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return r->sw[lo].p;
}

static void on_span(void *ctx, trace_kind k, int begin) {
    report *r = ctx;
    part_charge(r);
    const step_part before = part_now(r);
    if (begin) {
        if (r->depth < REPORT_PART_DEPTH) r->stack[r->depth] = part_of(k, before);
        r->depth++;
    } else if (r->depth > 0) {
        r->depth--;
    }
    const step_part after = part_now(r);
    if (after == before) return;
    pthread_mutex_lock(&r->mu);
    if (r->nsw < REPORT_SWITCHES) r->sw[r->nsw].t = mesh_now(), r->sw[r->nsw++].p = after;
    pthread_mutex_unlock(&r->mu);
}

/* The predictions of one call: the run's (what it moved, latency added per step), its latency
 * part, and the book's (bf16 bytes, latency overlapped, the book's algorithm). */
typedef struct {
    double run, lat, book;
    int latency_bound;
} call_pred;

double report_book_elems(mesh_op op, int64_t count, int n) {
    if (op == MESH_OP_ALL_GATHER || op == MESH_OP_REDUCE_SCATTER) return (double)count * n;
    if (op == MESH_OP_ALL_TO_ALL) return (double)count * n * n;
    return (double)count;
}

static call_pred predict_call(const report *r, mesh_op op, mesh_axes axes, mesh_alg alg,
                              int64_t count, mesh_wire wire) {
    call_pred out = {0, 0, 0, 0};
    int sizes[MESH_MAX_AXES], wraps[MESH_MAX_AXES], n = 1;
    for (int k = 0; k < axes.n; k++) {
        sizes[k] = mesh_axis_size(r->m, axes.ax[k]);
        wraps[k] = mesh_axis_wraps(r->m, axes.ax[k]);
        n *= sizes[k];
    }
    const double elems = report_book_elems(op, count, n);
    const cost_link *l = &r->link[axes.n ? axes.ax[0] : 0];
    const cost_op cop = mesh_cost_op(op);
    cost_est est;
    const double t =
        cost_collective(cop, l, sizes, wraps, axes.n, alg, elems * mesh_wire_bytes(wire), &est);
    if (t < 0) return out;
    int lanes = 1;
    const int64_t chunk = mesh_get_chunk(r->m) / (int64_t)sizeof(float);
    if ((alg == MESH_ALG_RING || alg == MESH_ALG_BIDIR) && chunk > 0) {
        const int64_t blk = op == MESH_OP_ALL_REDUCE ? count / (n > 0 ? n : 1) : count;
        const int64_t k = (blk + chunk - 1) / chunk;
        lanes = k < 1 ? 1 : k > 16 ? 16 : (int)k;
    }
    if (!(r->calibrated == 2 && alg == MESH_ALG_MPI)) { /* MPI: not slowed by emulated links */
        out.run = cost_serialized(&est, lanes);
        out.lat = out.run - est.t_bandwidth > 0 ? out.run - est.t_bandwidth : 0;
        out.latency_bound = est.regime == COST_REGIME_LATENCY;
    }
    if (alg != MESH_ALG_MPI) {
        const double b =
            cost_collective(cop, l, sizes, wraps, axes.n, MESH_ALG_DEFAULT, 2.0 * elems, NULL);
        out.book = b > 0 ? b : 0;
    }
    return out;
}

double report_predict(const report *r, const mesh_coll_call *c, int *latency_bound) {
    const call_pred p =
        predict_call(r, c->op, c->axes, mesh_alg_resolve(r->m, c->axes, c->alg), c->count, c->wire);
    if (latency_bound) *latency_bound = p.latency_bound;
    return p.run;
}

static void push(report *r, predict_event e) {
    if (r->nev < r->ev_cap)
        r->ev[r->nev++] = e;
    else
        r->overflow = 1;
}

static void hook(const mesh_call *c, void *ctx) {
    report *r = ctx;
    const int p2p = c->op == MESH_OP_SEND || c->op == MESH_OP_RECV;
    call_pred p = predict_call(r, c->op, c->axes, c->alg, c->count, c->wire);
    if (p2p) p.run = r->pipe_idle[0] >= 0 ? 0 : c->t_end - c->t_issue, p.lat = 0; /* the top */
    pthread_mutex_lock(&r->mu);
    if (c->async)
        r->pred_async[c->op] += p.run;
    else
        r->pred[c->op] += p.run;
    r->xfer[c->op] += c->t_end - c->t_start;
    r->regime_lat[c->op] += p.latency_bound;
    r->async_calls[c->op] += c->async;
    r->book_comm += p.book;
    if (!p2p) {
        const step_part part = part_at(r, c->t_issue);
        r->part_xfer[part] += c->t_end - c->t_start, r->part_pred[part] += p.run;
        if (c->axes.n > 0 && !(r->calibrated == 2 && c->alg == MESH_ALG_MPI)) {
            double w[MESH_MAX_AXES];
            for (int a = 0; a < MESH_MAX_AXES; a++) w[a] = r->link[a].w_oneway;
            r->part_wire[part][c->axes.ax[0]] +=
                boundary_call_seconds(&c->link_bytes[0][0], w, c->alg);
        }
        int k = 0;
        for (int a = 0; a < c->axes.n; a++) k |= c->axes.ax[a] == r->dcn;
        double b = 0;
        for (int a = 0; a < MESH_MAX_AXES; a++)
            b += (double)(c->link_bytes[a][0] + c->link_bytes[a][1]);
        r->net_xfer[k] += c->t_end - c->t_start, r->net_pred[k] += p.run, r->net_bytes[k] += b;
        r->net_calls[k]++;
        if (r->skew && r->nsk < REPORT_EVENTS) {
            skew_call *sc = &r->sk[r->nsk];
            sc->set = 0, sc->group = 0;
            for (int a = 0; a < c->axes.n; a++) sc->set |= 1 << c->axes.ax[a];
            for (int a = 0; a < mesh_ndims(r->m); a++)
                if (!(sc->set >> a & 1))
                    sc->group = sc->group * mesh_axis_size(r->m, a) + mesh_axis_coord(r->m, a);
            sc->seq = c->set_seq, sc->t0 = c->t_start, sc->t1 = c->t_end;
            r->sk_part[r->nsk++] = part;
        }
    }
    push(r, (predict_event){c->async ? PREDICT_ISSUE : PREDICT_BLOCKING, c->t_issue, c->t_end,
                            c->seq, p.run, p.lat});
    pthread_mutex_unlock(&r->mu);
}

static void waited(const mesh_call *c, double t0, double t1, void *ctx) {
    report *r = ctx;
    pthread_mutex_lock(&r->mu);
    push(r, (predict_event){PREDICT_WAIT, t0, t1, c->seq, 0, 0});
    pthread_mutex_unlock(&r->mu);
}

/* Test hook: MESHTRAIN_REPORT_EVENTS=n (1 ≤ n < 16384) in the environment lowers the events a
 * step's replay holds to n, so that a tiny run overflows it (tests/cli/metrics_pred.sh) instead
 * of one that makes 16384 collectives a step. Every rank reads the same environment. */
static int events_cap(void) {
    const char *s = getenv("MESHTRAIN_REPORT_EVENTS");
    const long n = s && *s ? strtol(s, NULL, 10) : 0;
    return n >= 1 && n < REPORT_EVENTS ? (int)n : REPORT_EVENTS;
}

static void gather_world(report *r, float *all, const float *mine, int64_t count);

/* Collective over: world. Every rank's host's ranks and CPUs, and whether its MPI yields: the most
 * shared host into r->worst, the ranks' yields into r->yields, the model for 1 BLAS thread. */
static void find_sharing(report *r) {
    const int n = mesh_nranks(r->m);
    const float mine[3] = {(float)mesh_host_ranks(r->m), (float)mesh_host_cpus(r->m),
                           (float)mesh_mpi_yields()};
    float *all = malloc((size_t)n * 3 * sizeof *all);
    share_host *h = malloc((size_t)n * sizeof *h);
    CHECK(all && h, "out of memory (%d ranks' hosts)", n);
    gather_world(r, all, mine, 3);
    int yields = 1;
    for (int i = 0; i < n; i++) {
        h[i] = (share_host){(int)all[3 * i], (int)all[3 * i + 1]};
        const int y = (int)all[3 * i + 2];
        yields = y == 0 || yields == 0 ? 0 : y < yields ? y : yields;
    }
    r->share = share_model_of(h, n, 1, yields);
    r->worst = (share_host){r->share.ranks, r->share.cpus};
    r->yields = yields;
    free(all), free(h);
}

report *report_create(mesh *m, double flops) {
    report *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->ev_cap = events_cap();
    r->ev = malloc(REPORT_EVENTS * sizeof *r->ev);
    r->sk = malloc(REPORT_EVENTS * sizeof *r->sk);
    r->sk_part = malloc(REPORT_EVENTS * sizeof *r->sk_part);
    if (!r->ev || !r->sk || !r->sk_part) {
        free(r->ev), free(r->sk), free(r->sk_part);
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->m = m;
    r->flops = flops;
    r->dcn = -1;
    r->pipe_idle[0] = r->pipe_idle[1] = -1;
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
                r->link[a] = calibrate_axis(m, a);
            else
                r->link[a] = (cost_link){1e12, 1e-6};
        }
    }
    r->calibrated = emulated ? 2 : 1;
    find_sharing(r);
    int crosses[MESH_MAX_AXES];
    r->shared_clock = mesh_hosts(m, crosses) == 1;
    mesh_stats_reset(m);
    CHECK(mesh_add_trace_hook(m, hook, waited, r) == 0, "too many trace observers");
    return r;
}

void report_set_skew(report *r, int on) {
    if (r) r->skew = on != 0;
}

void report_set_dcn(report *r, int axis) {
    pthread_mutex_lock(&r->mu);
    r->dcn = axis;
    memset(r->net_xfer, 0, sizeof r->net_xfer), memset(r->net_pred, 0, sizeof r->net_pred);
    memset(r->net_bytes, 0, sizeof r->net_bytes), memset(r->net_calls, 0, sizeof r->net_calls);
    pthread_mutex_unlock(&r->mu);
}

void report_watch(report *r, trace *tr) {
    if (!r) return;
    trace_unobserve(r->tr, r);
    r->tr = tr;
    trace_observe(tr, on_span, r);
}

void report_destroy(report *r) {
    if (!r) return;
    trace_unobserve(r->tr, r);
    mesh_remove_trace_hook(r->m, r);
    pthread_mutex_destroy(&r->mu);
    free(r->ev), free(r->sk), free(r->sk_part);
    free(r);
}

void report_set_threads(report *r, int threads) {
    r->share = share_model_of(&r->worst, 1, threads, r->yields);
}

const share_model *report_share(const report *r) {
    return &r->share;
}

void report_set_pipe(report *r, double idle, double idle_shared) {
    if (r) r->pipe_idle[0] = idle, r->pipe_idle[1] = idle_shared;
}

void report_set_compute(report *r, double seconds) {
    r->compute_pred = seconds;
}

void report_set_compute_parts(report *r, const double *parts) {
    memcpy(r->part_compute_pred, parts, sizeof r->part_compute_pred);
}

void report_set_pass_rates(report *r, const double *sec_per_float) {
    memcpy(r->pass_rate, sec_per_float, sizeof r->pass_rate);
}

void report_set_experts(report *r, const double *sec, double rows, mesh_axes axes) {
    r->expert_sec[0] = sec[0], r->expert_sec[1] = sec[1], r->expert_rows = rows, r->experts = 1;
    r->expert_axes = axes;
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
    pthread_mutex_lock(&r->mu);
    r->nev = r->overflow = 0;
    r->book_comm = 0;
    memset(r->pred, 0, sizeof r->pred);
    memset(r->pred_async, 0, sizeof r->pred_async);
    memset(r->xfer, 0, sizeof r->xfer);
    memset(r->regime_lat, 0, sizeof r->regime_lat);
    memset(r->async_calls, 0, sizeof r->async_calls);
    memset(r->part_xfer, 0, sizeof r->part_xfer), memset(r->part_pred, 0, sizeof r->part_pred);
    memset(r->part_wire, 0, sizeof r->part_wire);
    r->nsk = 0;
    r->nsw = 1, r->sw[0].t = mesh_now(), r->sw[0].p = part_now(r);
    kern_traffic_rows_reset();
    pthread_mutex_unlock(&r->mu);
    memset(r->part_cpu, 0, sizeof r->part_cpu);
    pass_count_begin(&r->passes);
    /* one reading of the CPU clock and of the blocked CPU opens both the step's compute CPU and
     * its first part's (report_step_end closes both with one more): the parts add up to the
     * step by construction */
    double w = 0;
    for (int op = 0; op < MESH_OP_COUNT; op++) {
        r->before[op] = mesh_stats(r->m, (mesh_op)op, -1);
        w += r->before[op].wait_cpu;
    }
    r->cpu0 = r->part_cpu0 = mesh_thread_cpu(), r->part_wait0 = w;
    r->t0 = mesh_now();
}

/* Collective over: world. Gathers count floats of every rank (mesh's blocking collective over
 * every axis, MPI's built-in: like every mesh collective, it serves --progress inline's queue
 * while it waits, which a plain MPI call would not). */
static void gather_world(report *r, float *all, const float *mine, int64_t count) {
    mesh_all_gather(r->m, mesh_all_axes(r->m), all, mine, count, MESH_ALG_MPI);
}

/* Collective over: world. The step's collectives' transfer from the last rank's start (skew.h),
 * in total and by part, into out; every rank's calls are gathered. When the exchange would be
 * too large, or a buffer cannot be allocated, each call keeps this rank's own duration. */
static void skew_step(report *r, step_split *out) {
    pthread_mutex_lock(&r->mu);
    const int n = r->nsk;
    skew_call *mine = malloc((size_t)(n > 0 ? n : 1) * sizeof *mine);
    step_part *part = malloc((size_t)(n > 0 ? n : 1) * sizeof *part);
    if (mine && part)
        for (int i = 0; i < n; i++) mine[i] = r->sk[i], part[i] = r->sk_part[i];
    pthread_mutex_unlock(&r->mu);
    const int nr = mesh_nranks(r->m);
    float *head = malloc((size_t)nr * 2 * sizeof *head);
    CHECK(head != NULL, "out of memory (%d ranks' step summaries)", nr);
    /* every rank's count of calls (−1: no buffers) and step start (a float: the ranks' common
     * origin, the smallest, is the same on every rank) */
    const float h[2] = {mine && part ? (float)n : -1.0f, (float)r->t0};
    gather_world(r, head, h, 2);
    int nmax = 0, fail = 0;
    double ref = r->t0;
    for (int i = 0; i < nr; i++) {
        fail |= head[2 * i] < 0;
        nmax = head[2 * i] > nmax ? (int)head[2 * i] : nmax;
        ref = head[2 * i + 1] < ref ? head[2 * i + 1] : ref;
    }
    const int64_t nf = (int64_t)nmax * SKEW_FIELDS;
    const int fits = !fail && nmax > 0 && nf * nr <= REPORT_SKEW_FLOATS;
    float *rows = NULL, *all = NULL;
    double *x = NULL;
    if (fits) {
        rows = malloc((size_t)nf * sizeof *rows), all = malloc((size_t)(nf * nr) * sizeof *all);
        x = malloc((size_t)nmax * sizeof *x);
    }
    /* every rank must join the gather or none: agree that all buffers exist */
    float have = fits && rows && all && x ? 1.0f : 0.0f;
    gather_world(r, head, &have, 1);
    int ok = fits;
    for (int i = 0; i < nr; i++) ok &= head[i] > 0;
    if (ok) {
        skew_pack(mine, n, nmax, ref, rows);
        gather_world(r, all, rows, nf);
        const int me = mesh_axes_index(r->m, mesh_all_axes(r->m));
        if (skew_transfers(all, nr, nmax, me, r->shared_clock, x) != n)
            for (int i = 0; i < n; i++) x[i] = mine[i].t1 - mine[i].t0;
    }
    for (int i = 0; mine && part && i < n; i++) {
        const double t = ok ? x[i] : mine[i].t1 - mine[i].t0;
        out->xfer_last += t, out->part_xfer_last[part[i]] += t;
    }
    free(rows), free(all), free(x), free(mine), free(part), free(head);
}

/* The step's memory passes (passes.h), charged up to now: their floats by kind into out, their
 * predicted seconds by part into part_seconds, the total returned (also into out). */
static double step_passes(report *r, step_split *out, double *part_seconds) {
    pass_count_charge(&r->passes, part_now(r));
    pass_count_total(&r->passes, out->pass_floats);
    for (int k = 0; k < KERN_PASS_COUNT; k++)
        out->pred_pass[k] = (double)out->pass_floats[k] * r->pass_rate[k];
    out->pred_passes = pass_count_seconds(&r->passes, r->pass_rate, part_seconds);
    return out->pred_passes;
}

/* Idle: how long this rank waited for the slowest rank's compute (all: every rank's, stride
 * floats apart). */
static void step_idle(step_split *out, const float *all, int n, int stride) {
    float mx = 0;
    for (int i = 0; i < n; i++) mx = all[(int64_t)i * stride] > mx ? all[(int64_t)i * stride] : mx;
    out->idle = (double)mx - out->compute;
}

/* Collective over: the expert axes, with experts (over the world, with the step's idle folded
 * in, when they are the world's ranks: *idle_done). The experts' compute on the rows the busiest
 * rank of the expert axes (the ranks that exchange the rows, in the same pipeline stage) ran in
 * each MoE block, less ktime's on the balanced rows, added to part_seconds' MLP parts; returns
 * the difference. */
static double step_experts(report *r, step_split *out, double *part_seconds, int *idle_done) {
    *idle_done = 0;
    if (!r->experts) return 0;
    enum { S = KERN_TRAFFIC_ROWS + 1, F = S + 1 }; /* the calls, their rows, the compute */
    const int n = mesh_axes_size(r->m, r->expert_axes), world = n == mesh_nranks(r->m);
    int64_t rows[KERN_TRAFFIC_ROWS];
    float mine[F], *all = malloc((size_t)n * F * sizeof *all);
    CHECK(all, "out of memory (%d ranks' expert rows)", n);
    mine[0] = (float)kern_traffic_rows_read(rows);
    for (int i = 0; i < KERN_TRAFFIC_ROWS; i++) mine[i + 1] = (float)rows[i];
    mine[S] = (float)out->compute;
    if (world)
        gather_world(r, all, mine, F), step_idle(out, all + S, n, F), *idle_done = 1;
    else if (n > 1)
        mesh_all_gather(r->m, r->expert_axes, all, mine, F, MESH_ALG_MPI);
    else
        memcpy(all, mine, sizeof mine);
    const double ran = predict_expert_rows(all, n, F, KERN_TRAFFIC_ROWS, mine);
    free(all);
    double d = 0;
    for (int i = 0; i < 2 && r->expert_rows > 0; i++) {
        const double x = r->expert_sec[i] * (ran / r->expert_rows - 1.0);
        part_seconds[i ? PART_BWD_MLP : PART_FWD_MLP] += x, d += x;
    }
    return d;
}

/* The collectives' sums over the step, per op, into out and the run's totals. */
typedef struct {
    double exposed, blocked_cpu, w_end, pred_block, pred_async;
} step_coll;
static step_coll step_collectives(report *r, step_split *out) {
    step_coll c = {0, 0, 0, 0, 0};
    for (int op = 0; op < MESH_OP_COUNT; op++) {
        mesh_stat now = mesh_stats(r->m, (mesh_op)op, -1);
        out->exposed[op] = now.wait_seconds - r->before[op].wait_seconds;
        out->calls[op] = now.calls - r->before[op].calls;
        out->bytes[op] = now.bytes - r->before[op].bytes;
        out->pred[op] = r->pred[op] + r->pred_async[op];
        c.exposed += out->exposed[op];
        c.blocked_cpu += now.wait_cpu - r->before[op].wait_cpu;
        c.w_end += now.wait_cpu;
        c.pred_block += r->pred[op];
        c.pred_async += r->pred_async[op];
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
    return c;
}

/* Overlap, measured and predicted, over the collectives (p2p waits are pipeline bubbles): the
 * predicted hidden time is the non-blocking calls' (blocking ones hide nothing). */
static void step_overlap(report *r, const step_coll *c, double pred_exposed, step_split *out) {
    const double async_exposed =
        pred_exposed - c->pred_block > 0 ? pred_exposed - c->pred_block : 0;
    double can_hide = c->pred_async - async_exposed;
    can_hide = can_hide < 0 ? 0 : can_hide;
    double c_exp = 0, c_xfer = 0, c_pred = 0, c_hid = 0;
    int64_t n_async = 0;
    for (int op = 0; op < MESH_OP_SEND; op++) {
        const double h = c->pred_async > 0 ? r->pred_async[op] / c->pred_async * can_hide : 0;
        r->tot.pred_hidden[op] += h;
        c_exp += out->exposed[op], c_xfer += out->xfer[op], c_pred += out->pred[op], c_hid += h;
        n_async += r->async_calls[op];
    }
    out->overlap = n_async ? report_overlap(c_exp, c_xfer) : -1;
    out->pred_overlap = n_async && c_pred > 0 ? c_hid / c_pred : -1;
}

/* Collective over: world, unless the experts' gather held it (idle_done). Idle (step_idle);
 * then the run's totals. */
static void step_idle_totals(report *r, const predict_result *pr, step_split *out, int idle_done) {
    float mine = (float)out->compute, all[4096];
    const int n = mesh_nranks(r->m);
    if (!idle_done && n <= 4096) {
        gather_world(r, all, &mine, 1);
        step_idle(out, all, n, 1);
    }
    r->tot.steps++;
    r->tot.wall += out->wall;
    r->tot.compute += out->compute;
    r->tot.pred_compute += out->pred_compute;
    r->tot.pred_step += out->pred_step;
    r->tot.pred_dedicated += out->pred_dedicated;
    r->tot.pred_exposed += out->pred_exposed;
    r->tot.book_step += out->book_step;
    r->tot.dominant[pr->dominant[0] == 'c' ? 0 : pr->dominant[0] == 'b' ? 1 : 2]++;
    /* the gather above is bookkeeping, not the step's: keep it out of the next step's deltas */
}

void report_step_end(report *r, double flops_rank, step_split *out) {
    const double wall = mesh_now() - r->t0;
    memset(out, 0, sizeof *out);
    const step_coll c = step_collectives(r, out);
    out->wall = wall;
    out->compute = wall - c.exposed;
    const double cpu_end = mesh_thread_cpu();
    out->compute_cpu = cpu_end - r->cpu0 - c.blocked_cpu;
    part_charge_at(r, cpu_end, c.w_end); /* the last part closes where the step's compute does */
    double pass_part[PART_COUNT];
    double compute_pred = r->compute_pred + step_passes(r, out, pass_part);
    int idle_done;
    compute_pred += step_experts(r, out, pass_part, &idle_done);
    /* the prediction: the step's events replayed with predicted durations (predict.h), on a
     * CPU per rank, then (on a shared host) with the compute as the host's CPUs serve it */
    pthread_mutex_lock(&r->mu);
    predict_result pr, pr_dedicated;
    predict_replay(r->ev, r->nev, r->t0, r->t0 + wall, compute_pred, &pr_dedicated);
    const double share = r->share.shared ? r->share.compute : 1.0;
    pr = pr_dedicated;
    if (r->share.shared)
        predict_replay(r->ev, r->nev, r->t0, r->t0 + wall, share * compute_pred, &pr);
    const int overflow = r->overflow;
    const double book_comm = r->book_comm;
    memcpy(out->part_xfer, r->part_xfer, sizeof out->part_xfer);
    memcpy(out->part_pred_comm, r->part_pred, sizeof out->part_pred_comm);
    memcpy(out->part_wire, r->part_wire, sizeof out->part_wire);
    pthread_mutex_unlock(&r->mu);
    memcpy(out->part_cpu, r->part_cpu, sizeof out->part_cpu);
    for (int p = 0; p < PART_COUNT; p++)
        out->part_pred_compute[p] = r->part_compute_pred[p] + pass_part[p];
    out->pred_compute = compute_pred;
    out->pred_share = share;
    const double wait[2] = {r->pipe_idle[0] > 0 ? r->pipe_idle[0] : 0,
                            r->pipe_idle[1] > 0 ? r->pipe_idle[1] : 0};
    out->pred_dedicated =
        (overflow ? compute_pred + c.pred_block + c.pred_async : pr_dedicated.step) + wait[0];
    out->pred_step = (overflow ? share * compute_pred + c.pred_block + c.pred_async : pr.step) +
                     wait[1]; /* ×1: exact */
    if (overflow && !r->overflow_noted) {
        r->overflow_noted = 1;
        mesh_log("note: step %lld recorded more than %d events on rank 0: the replay overflowed, "
                 "and the prediction of such a step is the plain sum of its compute and every "
                 "collective's predicted time (nothing hidden)\n",
                 (long long)r->tot.steps + 1, r->ev_cap);
    }
    out->pred_comm = pr.comm;
    out->pred_exposed = out->pred_step - share * out->pred_compute;
    out->dominant = pr.dominant;
    const double peak_compute = flops_rank / r->flops;
    out->book_step = peak_compute > book_comm ? peak_compute : book_comm;
    out->book_compute = peak_compute;
    step_overlap(r, &c, pr.exposed, out);
    if (r->skew) skew_step(r, out);
    step_idle_totals(r, &pr, out, idle_done);
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
            "pred", "regime (book)");
    for (int op = 0; op < MESH_OP_COUNT; op++) {
        if (t->calls[op] == 0) continue;
        const double ratio = t->pred[op] > 0 ? t->xfer[op] / t->pred[op] : 0;
        char hid[16] = "-"; /* the predicted share hidden */
        if (op < MESH_OP_SEND && t->pred[op] > 0)
            snprintf(hid, sizeof hid, "%.0f%%", 100.0 * t->pred_hidden[op] / t->pred[op]);
        fprintf(out,
                "  %-14s %7lld %6lld %10.3f %11.2f %11.2f %12.2f %9.2f %6.0f%% %5s  %lld of "
                "%lld latency-bound\n",
                mesh_op_name((mesh_op)op), (long long)t->calls[op], (long long)t->async_calls[op],
                t->bytes[op] / 1e6, 1e3 * t->exposed[op], 1e3 * t->xfer[op], 1e3 * t->pred[op],
                ratio, 100.0 * report_overlap(t->exposed[op], t->xfer[op]), hid,
                (long long)t->latency_calls[op], (long long)t->calls[op]);
    }
    fprintf(out, "  overlap = 1 - exposed/transfer: the share of the transfer time hidden behind "
                 "compute (OSU's measure);\n  pred = the prediction's: the share of the "
                 "predicted transfer that the step's replay hides\n");
    if (r->dcn >= 0) {
        char name[2][24];
        snprintf(name[0], sizeof name[0], "ICI");
        snprintf(name[1], sizeof name[1], "DCN (axis %c)", mesh_axis_name(r->m, r->dcn));
        fprintf(out, "  network (collectives):");
        for (int j = 0; j < 2; j++)
            fprintf(out,
                    "%s %s: %lld calls, %.3f MB sent, transfer %.2f ms, predicted %.2f ms (%.2f)",
                    j ? " |" : "", name[j], (long long)r->net_calls[j], r->net_bytes[j] / 1e6,
                    1e3 * r->net_xfer[j], 1e3 * r->net_pred[j],
                    r->net_pred[j] > 0 ? r->net_xfer[j] / r->net_pred[j] : 0);
        fprintf(out, "\n");
    }
    fprintf(out,
            "  compute: measured %.1f ms, predicted %.1f ms (%.2f; the kernels timed on this "
            "rank's shapes and the memory passes counted) | exposed comm: measured %.1f ms, "
            "predicted %.1f ms\n",
            1e3 * t->compute, 1e3 * t->pred_compute,
            t->pred_compute > 0 ? t->compute / t->pred_compute : 0, 1e3 * (t->wall - t->compute),
            1e3 * t->pred_exposed);
    fprintf(out,
            "  step: measured %.1f ms, predicted %.1f ms (%.2f), the book's idealised %.1f ms "
            "(%.2f) | predicted dominant term: compute %lld, bandwidth %lld, latency %lld steps\n",
            1e3 * t->wall, 1e3 * t->pred_step, t->pred_step > 0 ? t->wall / t->pred_step : 0,
            1e3 * t->book_step, t->book_step > 0 ? t->wall / t->book_step : 0,
            (long long)t->dominant[0], (long long)t->dominant[1], (long long)t->dominant[2]);
    if (r->share.shared) {
        char d[512];
        fprintf(out,
                "  shared host: %s\n  on a CPU per rank (pred_dedicated) the steps were predicted "
                "%.1f ms (%.2f)\n",
                share_describe(&r->share, d, sizeof d), 1e3 * t->pred_dedicated,
                t->pred_dedicated > 0 ? t->wall / t->pred_dedicated : 0);
    }
    report_print_regime(r, k, out);
}

void report_print_regime(const report *r, const report_case *k, FILE *out) {
    boundary_print_regime(r->flops, &r->link[k->data_axis >= 0 ? k->data_axis : 0],
                          report_link_source(r), k, out);
}
