/* trace: the timeline recorder and the where-notes. See trace.h.
 *
 * Events are fixed-size records appended to one buffer by the caller's thread (spans, blocking
 * calls, waits, p2p) and by mesh's progress thread (non-blocking calls, through the trace hook):
 * a slot is reserved with an atomic counter and filled by its reserver; nothing reads the buffer
 * before trace_finish, after both threads have gone quiet. */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include "train/observe/trace.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/paths.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "mesh/where.h"

#define TRACE_DEPTH 16

enum { EV_SPAN, EV_CALL, EV_WAIT, EV_FLIGHT };
enum { TID_CALLER, TID_PROGRESS, TID_FLIGHT };

typedef struct {
    double t0, t1, t_xfer; /* mesh_now() times; t_xfer: a call's transfer start */
    int64_t i;             /* span: its index; call, wait, flight: the call's seq */
    int64_t set_seq, count, link_bytes;
    int32_t step;
    uint8_t type, what; /* EV_*; span: trace_kind, others: mesh_op */
    uint8_t tid, alg, async;
    int8_t shift;
    mesh_axes axes;
} trace_ev;

static const char *const notes[TRACE_KIND_COUNT] = {
    [TRACE_STEP] = NULL,
    [TRACE_MICRO_FWD] = "forward of micro-batch #",
    [TRACE_MICRO_BWD] = "backward of micro-batch #",
    [TRACE_FWD] = "layer # forward",
    [TRACE_BWD] = "layer # backward",
    [TRACE_HEAD_FWD] = "head forward (final norm, unembedding, loss)",
    [TRACE_HEAD_BWD] = "head backward",
    [TRACE_GRADS] = "completing the gradient reductions",
    [TRACE_OPT] = "optimizer update",
    [TRACE_EVAL] = "evaluation (forward only)",
    [TRACE_ATTN] = "attention of layer #",
    [TRACE_MLP] = "MLP of layer #",
    [TRACE_EMBED_FWD] = "embedding forward",
    [TRACE_EMBED_BWD] = "embedding backward",
};
static const char *const names[TRACE_KIND_COUNT] = {
    [TRACE_STEP] = "step #",
    [TRACE_MICRO_FWD] = "forward mb #",
    [TRACE_MICRO_BWD] = "backward mb #",
    [TRACE_FWD] = "fwd L#",
    [TRACE_BWD] = "bwd L#",
    [TRACE_HEAD_FWD] = "head fwd",
    [TRACE_HEAD_BWD] = "head bwd",
    [TRACE_GRADS] = "grad reduction",
    [TRACE_OPT] = "optimizer",
    [TRACE_EVAL] = "eval",
    [TRACE_ATTN] = "attn L#",
    [TRACE_MLP] = "mlp L#",
    [TRACE_EMBED_FWD] = "embed fwd",
    [TRACE_EMBED_BWD] = "embed bwd",
};

struct trace {
    mesh *m; /* NULL after trace_finish: spans are no-ops */
    int on; /* recording */
    double origin;
    trace_ev *ev;
    int64_t cap;
    atomic_llong n;  /* slots reserved (may exceed cap: the excess was dropped) */
    atomic_int step; /* current step, −1 outside one */
    struct {
        trace_kind k;
        int64_t i;
        double t0;
    } stack[TRACE_DEPTH];
    int depth, lost_depth;   /* spans beyond TRACE_DEPTH are not recorded */
    trace_observer observer; /* trace_observe */
    void *observer_ctx;
    char path[1024];
};

static trace_ev *reserve(trace *T) {
    const long long k = atomic_fetch_add_explicit(&T->n, 1, memory_order_relaxed);
    return k < T->cap ? &T->ev[k] : NULL;
}

/* ---- spans and notes ---- */

static void note_top(const trace *T) {
    if (T->depth == 0) {
        mesh_where_note(T->m, NULL, 0);
        return;
    }
    const trace_kind k = T->stack[T->depth - 1].k;
    if (k == TRACE_STEP)
        mesh_where_note(T->m, NULL, 0);
    else
        mesh_where_note(T->m, notes[k], T->stack[T->depth - 1].i);
}

void trace_begin(trace *T, trace_kind k, int64_t i) {
    if (!T || !T->m) return;
    if (T->depth == TRACE_DEPTH) {
        T->lost_depth++;
        return;
    }
    T->stack[T->depth].k = k, T->stack[T->depth].i = i, T->stack[T->depth].t0 = mesh_now();
    T->depth++;
    if (k == TRACE_STEP) {
        atomic_store_explicit(&T->step, (int)i, memory_order_relaxed);
        mesh_where_step(T->m, i);
    }
    note_top(T);
    if (T->observer) T->observer(T->observer_ctx, k, 1);
}

void trace_observe(trace *T, trace_observer fn, void *ctx) {
    if (!T) return;
    T->observer = fn, T->observer_ctx = ctx;
}

void trace_unobserve(trace *T, void *ctx) {
    if (!T) return;
    if (T->observer_ctx == ctx) T->observer = NULL, T->observer_ctx = NULL;
}

void trace_end(trace *T, trace_kind k) {
    if (!T || !T->m) return;
    if (T->lost_depth > 0) {
        T->lost_depth--;
        return;
    }
    CHECK(T->depth > 0 && T->stack[T->depth - 1].k == k,
          "trace_end(%d) does not close the open span", (int)k);
    T->depth--;
    const double t1 = mesh_now();
    trace_ev *e = T->on ? reserve(T) : NULL;
    if (e) {
        memset(e, 0, sizeof *e);
        e->type = EV_SPAN, e->what = (uint8_t)k, e->tid = TID_CALLER;
        e->t0 = T->stack[T->depth].t0, e->t1 = t1, e->i = T->stack[T->depth].i;
        e->step = atomic_load_explicit(&T->step, memory_order_relaxed);
    }
    if (k == TRACE_STEP) {
        atomic_store_explicit(&T->step, -1, memory_order_relaxed);
        mesh_where_step(T->m, -1);
    }
    note_top(T);
    if (T->observer) T->observer(T->observer_ctx, k, 0);
}

/* ---- collectives and p2p (mesh's trace hooks; any thread) ---- */

static void fill_call(const trace *T, trace_ev *e, const mesh_call *c, int type, int tid, double t0,
                      double t1) {
    memset(e, 0, sizeof *e);
    e->type = (uint8_t)type, e->what = (uint8_t)c->op, e->tid = (uint8_t)tid;
    e->t0 = t0, e->t1 = t1, e->t_xfer = c->t_start;
    e->i = c->seq, e->set_seq = c->set_seq, e->count = c->count;
    for (int k = 0; k < MESH_MAX_AXES; k++)
        e->link_bytes += c->link_bytes[k][0] + c->link_bytes[k][1];
    e->step = atomic_load_explicit(&T->step, memory_order_relaxed);
    e->alg = (uint8_t)c->alg, e->async = (uint8_t)c->async, e->shift = (int8_t)c->shift;
    e->axes = c->axes;
}

static void on_done(const mesh_call *c, void *ctx) {
    trace *T = ctx;
    trace_ev *e;
    if (c->op == MESH_OP_SEND) { /* in flight from post to completion; blocked in the wait */
        if ((e = reserve(T))) fill_call(T, e, c, EV_FLIGHT, TID_FLIGHT, c->t_start, c->t_end);
        if (c->t_end > c->t_issue && (e = reserve(T)))
            fill_call(T, e, c, EV_CALL, TID_CALLER, c->t_issue, c->t_end);
    } else if (c->async) {
        if ((e = reserve(T))) fill_call(T, e, c, EV_CALL, TID_PROGRESS, c->t_start, c->t_end);
    } else if ((e = reserve(T))) {
        fill_call(T, e, c, EV_CALL, TID_CALLER, c->t_issue, c->t_end);
    }
}

static void on_waited(const mesh_call *c, double t0, double t1, void *ctx) {
    trace *T = ctx;
    trace_ev *e = reserve(T);
    if (e) fill_call(T, e, c, EV_WAIT, TID_CALLER, t0, t1);
}

/* ---- start ---- */

trace *trace_create(mesh *m, const char *path, int64_t capacity, char *err, size_t errlen) {
    trace *T = calloc(1, sizeof *T);
    if (mesh_agree(mesh_world_comm(m), T ? 0 : -1) < 0) {
        free(T);
        errmsg_fail(err, errlen, "out of memory for the trace");
        return NULL;
    }
    atomic_init(&T->n, 0);
    atomic_init(&T->step, -1);
    T->m = m;
    if (!path || !path[0]) return T;
    int ok = 1;
    char why[1100];
    if (mesh_rank(m) == 0 && paths_can_write(path, why, sizeof why) < 0) {
        ok = 0; /* fail before the run, not after it, and touch nothing */
        errmsg_fail(err, errlen, "--trace %s: cannot create it (%s)", path, why);
    }
    if (mesh_agree_msg(mesh_world_comm(m), ok ? 0 : -1, err, errlen) < 0) {
        free(T);
        return NULL;
    }
    T->cap = capacity > 0 ? capacity : 1;
    T->ev = malloc((size_t)T->cap * sizeof *T->ev);
    ok = T->ev != NULL && mesh_add_trace_hook(m, on_done, on_waited, T) == 0;
    if (mesh_agree(mesh_world_comm(m), ok ? 0 : -1) < 0) {
        errmsg_fail(err, errlen, "--trace %s: out of memory for %lld events per rank", path,
                    (long long)T->cap);
        mesh_remove_trace_hook(m, T);
        free(T->ev);
        free(T);
        return NULL;
    }
    snprintf(T->path, sizeof T->path, "%s", path);
    T->on = 1;
    T->origin = mesh_now(); /* just after the barrier of mesh_agree: t = 0 on every rank */
    return T;
}

/* ---- writing ---- */

static int ev_cmp(const void *pa, const void *pb) {
    const trace_ev *a = pa, *b = pb;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
    if (a->t1 != b->t1) return a->t1 > b->t1 ? -1 : 1; /* the enclosing span first */
    return (int)a->type - (int)b->type;
}

/* µs with three decimals from whole nanoseconds, so that ts + dur is exact in the file. */
static void put_us(FILE *f, long long ns) {
    fprintf(f, "%lld.%03lld", ns / 1000, ns % 1000);
}
static long long rel_ns(const trace *T, double t) {
    const long long v = llround((t - T->origin) * 1e9);
    return v > 0 ? v : 0;
}

static const char *op_axes(const mesh *m, const trace_ev *e, char *buf, size_t len) {
    char ax[8];
    mesh_axes_str(m, e->axes, ax, sizeof ax);
    if (e->what == MESH_OP_SEND || e->what == MESH_OP_RECV)
        snprintf(buf, len, "%s %s %s%s", mesh_op_title((mesh_op)e->what),
                 e->what == MESH_OP_SEND ? "to" : "from", ax, e->shift > 0 ? "+1" : "-1");
    else
        snprintf(buf, len, "%s_%s", mesh_op_title((mesh_op)e->what), ax[0] ? ax : "{}");
    return buf;
}

/* The array V of a call, in bytes (gathered / unreduced / reduced / sent). */
static long long payload(const mesh *m, const trace_ev *e) {
    const long long b = 4LL * e->count;
    if (e->what == MESH_OP_ALL_GATHER || e->what == MESH_OP_REDUCE_SCATTER ||
        e->what == MESH_OP_ALL_TO_ALL)
        return b * mesh_axes_size(m, e->axes);
    return b;
}

static void write_event(FILE *f, const trace *T, const trace_ev *e) {
    const mesh *m = T->m;
    const int r = mesh_rank(m);
    char name[64], ax[8];
    const long long t0 = rel_ns(T, e->t0), t1 = rel_ns(T, e->t1);
    if (e->type == EV_SPAN) {
        const char *nm = names[e->what], *h = strchr(nm, '#');
        if (h)
            snprintf(name, sizeof name, "%.*s%lld%s", (int)(h - nm), nm, (long long)e->i, h + 1);
        else
            snprintf(name, sizeof name, "%s", nm);
        fprintf(f,
                "{\"name\":\"%s\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":",
                name, r, e->tid);
        put_us(f, t0);
        fprintf(f, ",\"dur\":");
        put_us(f, t1 - t0);
        fprintf(f, ",\"args\":{\"step\":%d,\"index\":%lld}}", e->step, (long long)e->i);
        return;
    }
    op_axes(m, e, name, sizeof name);
    mesh_axes_str(m, e->axes, ax, sizeof ax);
    if (e->type == EV_FLIGHT) {
        for (int end = 0; end < 2; end++) {
            fprintf(f,
                    "%s{\"name\":\"%s\",\"cat\":\"p2p\",\"ph\":\"%c\",\"id\":\"%d.%lld\","
                    "\"pid\":%d,\"tid\":%d,\"ts\":",
                    end ? ",\n" : "", name, end ? 'e' : 'b', r, (long long)e->i, r, TID_CALLER);
            put_us(f, end ? t1 : t0);
            if (!end)
                fprintf(f, ",\"args\":{\"step\":%d,\"seq\":%lld,\"count\":%lld,\"bytes\":%lld}",
                        e->step, (long long)e->i, (long long)e->count, payload(m, e));
            fprintf(f, "}");
        }
        return;
    }
    const char *suffix = e->type == EV_WAIT ? "" : e->async ? " (async)" : "";
    fprintf(f, "{\"name\":\"%s%s%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":",
            e->type == EV_WAIT ? "wait " : "", name, suffix,
            e->what >= MESH_OP_SEND ? "p2p" : "collective", r, e->tid);
    put_us(f, t0);
    fprintf(f, ",\"dur\":");
    put_us(f, t1 - t0);
    fprintf(f,
            ",\"args\":{\"step\":%d,\"op\":\"%s\",\"axes\":\"%s\",\"seq\":%lld,\"set_seq\":%lld,"
            "\"count\":%lld,\"bytes\":%lld,\"link_bytes\":%lld,\"alg\":\"%s\",\"async\":%d,"
            "\"wait\":%d,\"transfer_us\":",
            e->step, mesh_op_title((mesh_op)e->what), ax, (long long)e->i, (long long)e->set_seq,
            (long long)e->count, payload(m, e), (long long)e->link_bytes,
            e->what >= MESH_OP_PPERMUTE ? "-" : mesh_alg_name((mesh_alg)e->alg), e->async,
            e->type == EV_WAIT);
    put_us(f, rel_ns(T, e->t_xfer));
    fprintf(f, "}}");
}

/* Closes f; 0, or −errno of the first failed write or of the close (a full disk: −ENOSPC). */
static int close_checked(FILE *f) {
    int e = 0;
    if (fflush(f) != 0 || ferror(f)) e = errno ? errno : EIO;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    return -e;
}

/* This rank's part: metadata, then its events sorted per thread by start time; returns 0 or
 * −errno. */
static int write_part(const trace *T, const char *part, int64_t nev, int64_t dropped) {
    const mesh *m = T->m;
    const int r = mesh_rank(m);
    FILE *f = fopen(part, "w");
    if (!f) return errno ? -errno : -EIO;
    char coords[64];
    mesh_coord_str(m, coords, sizeof coords);
    fprintf(f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"name\":\"rank %d %s\"}},\n",
            r, r, coords);
    fprintf(f,
            "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"sort_index\":%d}},\n",
            r, r);
    fprintf(f,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"name\":\"caller: compute, blocking calls, waits\"}},\n",
            r, TID_CALLER);
    fprintf(f,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"name\":\"progress thread: non-blocking collectives\"}}",
            r, TID_PROGRESS);
    if (dropped > 0)
        fprintf(f,
                ",\n{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"labels\":\"%lld events dropped (buffer full)\"}}",
                r, (long long)dropped);
    for (int64_t k = 0; k < nev; k++) {
        fprintf(f, ",\n");
        write_event(f, T, &T->ev[k]);
    }
    fprintf(f, "\n");
    return close_checked(f);
}

/* Rank 0: FILE = header, every rank's part in rank order, footer; the parts are removed. */
static int join_parts(const trace *T, int nranks, char *err, size_t errlen) {
    const mesh *m = T->m;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", T->path, (long)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) {
        return errmsg_fail(err, errlen, "--trace %s: cannot write it (%s)", T->path,
                           strerror(errno));
    }
    fprintf(out, "{\"traceEvents\":[\n");
    int rc = 0;
    char part[1100], buf[1 << 16];
    for (int r = 0; r < nranks && rc == 0; r++) {
        snprintf(part, sizeof part, "%s.rank%d", T->path, r);
        FILE *in = fopen(part, "r");
        if (!in) {
            errmsg_fail(err, errlen,
                        "--trace %s: cannot read %s (%s); the per-rank parts must be on "
                        "a filesystem rank 0 can read",
                        T->path, part, strerror(errno));
            rc = -1;
            break;
        }
        if (r) fprintf(out, ",\n");
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
        fclose(in);
    }
    char spec[96];
    fprintf(out,
            "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"tool\":\"meshtrain\","
            "\"clock\":\"us since trace start (a barrier)\",\"mesh\":\"%s\",\"axes\":\"",
            mesh_spec_str(m, spec, sizeof spec));
    for (int k = 0; k < mesh_ndims(m); k++) fputc(mesh_axis_name(m, k), out);
    fprintf(out, "\",\"ranks\":[");
    for (int r = 0; r < nranks; r++) {
        int c[MESH_MAX_AXES], q = r;
        for (int k = mesh_ndims(m) - 1; k >= 0; k--)
            c[k] = q % mesh_axis_size(m, k), q /= mesh_axis_size(m, k);
        fprintf(out, "%s{\"rank\":%d,\"coords\":[", r ? "," : "", r);
        for (int k = 0; k < mesh_ndims(m); k++) fprintf(out, "%s%d", k ? "," : "", c[k]);
        fprintf(out, "]}");
    }
    fprintf(out, "]}}\n");
    const int e = close_checked(out);
    if (e < 0 && rc == 0) {
        rc = errmsg_fail(err, errlen, "--trace %s: writing it failed (%s)", T->path, strerror(-e));
    }
    if (rc == 0 && rename(tmp, T->path) != 0) {
        rc = errmsg_fail(err, errlen, "--trace %s: cannot rename %s into place (%s)", T->path, tmp,
                         strerror(errno));
    }
    if (rc < 0) remove(tmp); /* an existing file at the path stays as it was */
    return rc;
}

int trace_finish(trace *T, int64_t *dropped, char *err, size_t errlen) {
    if (dropped) *dropped = 0;
    if (!T || !T->m) return 0;
    mesh *m = T->m;
    int rc = 0;
    if (T->on) {
        mesh_remove_trace_hook(m, T);
        const long long n = atomic_load(&T->n);
        const int64_t nev = n < T->cap ? n : T->cap, lost = n - nev;
        qsort(T->ev, (size_t)nev, sizeof *T->ev, ev_cmp);
        char part[1100];
        snprintf(part, sizeof part, "%s.rank%d", T->path, mesh_rank(m));
        const int wrote = write_part(T, part, nev, lost);
        const int worst = mesh_agree(mesh_world_comm(m), wrote);
        if (worst < 0) {
            rc = errmsg_fail(err, errlen,
                             "--trace %s: a rank could not write its part %s.rank<r> (%s)", T->path,
                             T->path, strerror(-worst));
        }
        int joined = 0;
        if (rc == 0 && mesh_rank(m) == 0) joined = join_parts(T, mesh_nranks(m), err, errlen);
        if (mesh_rank(m) == 0)
            for (int r = 0; r < mesh_nranks(m); r++) {
                snprintf(part, sizeof part, "%s.rank%d", T->path, r);
                remove(part);
            }
        if (mesh_agree_msg(mesh_world_comm(m), joined, err, errlen) < 0) rc = -1;
        float mine = (float)lost, all = 0;
        mesh_axes world = {mesh_ndims(m), {0, 1, 2}};
        mesh_all_reduce(m, world, &all, &mine, 1, MESH_ALG_MPI);
        if (dropped) *dropped = (int64_t)all;
        free(T->ev);
    }
    mesh_where_note(m, NULL, 0);
    mesh_where_step(m, -1);
    T->m = NULL, T->on = 0, T->ev = NULL; /* spans are no-ops from here */
    T->observer = NULL, T->observer_ctx = NULL;
    return rc;
}

void trace_destroy(trace *T) {
    if (!T) return;
    if (T->m) { /* never finished: nothing is written */
        if (T->on) mesh_remove_trace_hook(T->m, T);
        mesh_where_note(T->m, NULL, 0);
        mesh_where_step(T->m, -1);
    }
    free(T->ev);
    free(T);
}
