/* where: the where-state, the where-line, the signature check's report, SIGUSR1 and the
 * watchdog. See where.h and where_impl.h.
 *
 * The where-line is formatted without stdio (snprintf is not async-signal-safe): a few append
 * helpers write strings, integers and seconds with one decimal into a caller's buffer. */
#define _POSIX_C_SOURCE 200809L /* sigaction, clock_gettime, nanosleep */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mesh/coll_engine.h"
#include "mesh/where.h"

#define WD_TAG 7001     /* watchdog notices, on the watchdog's own communicator */
#define WD_ACK_TAG 7002 /* answers to a notice: the where-line is out */
/* Seconds the firing rank waits at most for the others' where-lines; the wait ends as soon as
 * every rank has answered, so only a rank that cannot answer (stopped, or its watchdog thread
 * starved) costs the whole of it. Long enough for a healthy rank on a loaded or oversubscribed
 * machine; MESHTRAIN_WATCHDOG_GRACE (seconds, > 0) overrides it. */
#define WD_GRACE 5.0
#define WD_STATUS 4     /* exit status of a job the watchdog ended */
#define CHECK_STATUS 3

static const char *op_titles[MESH_OP_COUNT] = {
    "AllGather", "ReduceScatter", "AllReduce", "AllToAll", "ppermute", "send", "recv"};

const char *mesh_op_title(mesh_op op) {
    return op >= 0 && op < MESH_OP_COUNT ? op_titles[op] : "?";
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* async-signal-safe */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the slots (seqlock writers: one thread per slot) ---- */

static void slot_begin(where_slot *s) {
    unsigned g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    atomic_store_explicit(&s->gen, g + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}
static void slot_commit(where_slot *s) {
    unsigned g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    atomic_store_explicit(&s->gen, g + 1, memory_order_release);
}
static void slot_set(where_slot *s, int f, long long v) {
    atomic_store_explicit(&s->f[f], v, memory_order_relaxed);
}
/* Copies the slot's fields; returns 0 if the copy may be torn (the writer never got out of the
 * way, e.g. this is a signal handler that interrupted it). */
static int slot_read(const where_slot *s, long long *f) {
    for (int tries = 0; tries < 64; tries++) {
        unsigned g1 = atomic_load_explicit(&s->gen, memory_order_acquire);
        for (int k = 0; k < WF_N; k++) f[k] = atomic_load_explicit(&s->f[k], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        unsigned g2 = atomic_load_explicit(&s->gen, memory_order_relaxed);
        if (g1 == g2 && !(g1 & 1)) return 1;
    }
    return 0;
}

void where_enter(mesh *m, int slot, int kind, const mesh_call *rec) {
    where_slot *s = &m->where.slot[slot];
    slot_begin(s);
    slot_set(s, WF_OP, rec->op);
    slot_set(s, WF_SET, mesh_set_id(rec->axes));
    slot_set(s, WF_ALG, rec->alg);
    slot_set(s, WF_SHIFT, rec->shift);
    slot_set(s, WF_SETSEQ, rec->set_seq);
    slot_set(s, WF_COUNT, rec->count);
    slot_set(s, WF_PHASE, 0);
    slot_set(s, WF_NPHASE, 0);
    slot_set(s, WF_DONE, 0);
    slot_set(s, WF_TOTAL, 0);
    slot_set(s, WF_T0, now_ns());
    slot_set(s, WF_KIND, kind);
    slot_commit(s);
}

void where_kind(mesh *m, int slot, int kind) {
    where_slot *s = &m->where.slot[slot];
    slot_begin(s);
    slot_set(s, WF_KIND, kind);
    slot_commit(s);
}

void where_steps(mesh *m, int slot, int ph, int nph, int done, int total) {
    where_slot *s = &m->where.slot[slot];
    slot_begin(s);
    slot_set(s, WF_PHASE, ph);
    slot_set(s, WF_NPHASE, nph);
    slot_set(s, WF_DONE, done);
    slot_set(s, WF_TOTAL, total);
    slot_commit(s);
}

void where_leave(mesh *m, int slot) {
    where_slot *s = &m->where.slot[slot];
    slot_begin(s);
    slot_set(s, WF_LAST_OP, atomic_load_explicit(&s->f[WF_OP], memory_order_relaxed));
    slot_set(s, WF_LAST_SET, atomic_load_explicit(&s->f[WF_SET], memory_order_relaxed));
    slot_set(s, WF_LAST_SETSEQ, atomic_load_explicit(&s->f[WF_SETSEQ], memory_order_relaxed));
    slot_set(s, WF_LAST_T, now_ns());
    slot_set(s, WF_KIND, WHERE_IDLE);
    slot_commit(s);
}

/* ---- blocking MPI calls outside mesh's collectives ---- */

static mesh *_Atomic g_where_mesh;
static _Thread_local int t_blocking_depth, t_blocking_owned;

void where_attach(mesh *m) {
    atomic_store(&g_where_mesh, m);
}

void mesh_blocking_begin(const char *what) {
    if (t_blocking_depth++ > 0) return;
    t_blocking_owned = 0;
    mesh *m = atomic_load(&g_where_mesh);
    if (!m) return;
    where_slot *s = &m->where.slot[0];
    if (atomic_load_explicit(&s->f[WF_KIND], memory_order_relaxed) != WHERE_IDLE) return;
    atomic_store_explicit(&m->where.blocking, what, memory_order_relaxed);
    slot_begin(s);
    slot_set(s, WF_T0, now_ns());
    slot_set(s, WF_KIND, WHERE_BLOCKING);
    slot_commit(s);
    t_blocking_owned = 1;
}

void mesh_blocking_end(void) {
    if (t_blocking_depth == 0 || --t_blocking_depth > 0) return;
    mesh *m = atomic_load(&g_where_mesh);
    if (!t_blocking_owned || !m) return;
    where_slot *s = &m->where.slot[0];
    slot_begin(s);
    slot_set(s, WF_KIND, WHERE_IDLE);
    slot_commit(s);
    t_blocking_owned = 0;
}

void mesh_where_note(mesh *m, const char *label, int64_t i) {
    atomic_store_explicit(&m->where.note_i, i, memory_order_relaxed);
    atomic_store_explicit(&m->where.note, label, memory_order_release);
}

void mesh_where_step(mesh *m, int64_t step) {
    atomic_store_explicit(&m->where.step, step, memory_order_relaxed);
    atomic_store_explicit(&m->where.step_t0, step >= 0 ? now_ns() : 0, memory_order_release);
}

/* ---- async-signal-safe formatting ---- */

typedef struct {
    char *p;
    size_t n, cap; /* cap includes the terminator */
} sbuf;

static void put_s(sbuf *b, const char *s) {
    while (*s && b->n + 1 < b->cap) b->p[b->n++] = *s++;
    b->p[b->n] = 0;
}
static void put_c(sbuf *b, char c) {
    char s[2] = {c, 0};
    put_s(b, s);
}
static void put_i(sbuf *b, long long v) {
    char d[24];
    int k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do d[k++] = (char)('0' + u % 10);
    while ((u /= 10) && k < 23);
    if (v < 0) put_c(b, '-');
    while (k) put_c(b, d[--k]);
}
/* Seconds from nanoseconds, one decimal: "12.3 s". */
static void put_secs(sbuf *b, long long ns) {
    if (ns < 0) ns = 0;
    long long ds = (ns + 50000000LL) / 100000000LL;
    put_i(b, ds / 10);
    put_c(b, '.');
    put_i(b, ds % 10);
    put_s(b, " s");
}

/* Axis names of set id `id` (the inverse of mesh_set_id). */
static void put_set(sbuf *b, const mesh *m, long long id) {
    int ax[3], n;
    if (id <= 0)
        n = 0;
    else if (id < 4)
        n = 1, ax[0] = (int)id - 1;
    else if (id < 13)
        n = 2, ax[0] = ((int)id - 4) / 3, ax[1] = ((int)id - 4) % 3;
    else
        n = 3, ax[0] = ((int)id - 13) / 9, ax[1] = ((int)id - 13) / 3 % 3,
        ax[2] = ((int)id - 13) % 3;
    if (n == 0) put_s(b, "no axes");
    for (int k = 0; k < n; k++) put_c(b, ax[k] < m->ndims ? m->name[ax[k]] : '?');
}

static void put_coords(sbuf *b, const mesh *m, int rank) {
    int c[MESH_MAX_AXES];
    for (int k = m->ndims - 1; k >= 0; k--) c[k] = rank % m->size[k], rank /= m->size[k];
    put_c(b, '(');
    for (int k = 0; k < m->ndims; k++) {
        if (k) put_c(b, ',');
        put_c(b, m->name[k]);
        put_c(b, '=');
        put_i(b, c[k]);
    }
    put_c(b, ')');
}

/* "AllGather #57 over y" */
static void put_call(sbuf *b, const mesh *m, long long op, long long setseq, long long set) {
    put_s(b, mesh_op_title((mesh_op)op));
    put_s(b, " #");
    put_i(b, setseq);
    put_s(b, " over ");
    put_set(b, m, set);
}

static void put_slot(sbuf *b, const mesh *m, const where_slot *s, long long now) {
    long long f[WF_N];
    int clean = slot_read(s, f);
    switch ((int)f[WF_KIND]) {
    case WHERE_CHECK:
    case WHERE_COLL:
        put_s(b, "in ");
        put_call(b, m, f[WF_OP], f[WF_SETSEQ], f[WF_SET]);
        if (f[WF_OP] == MESH_OP_PPERMUTE) {
            put_s(b, " (shift ");
            put_i(b, f[WF_SHIFT]);
            put_c(b, ')');
        }
        if (f[WF_KIND] == WHERE_CHECK) {
            put_s(b, ", comparing call signatures with its peers (--debug-collectives)");
        } else if (f[WF_ALG] == MESH_ALG_MPI) {
            put_s(b, ", in MPI's built-in");
        } else {
            if (f[WF_NPHASE] > 1) {
                put_s(b, ", phase ");
                put_i(b, f[WF_PHASE]);
                put_s(b, " of ");
                put_i(b, f[WF_NPHASE]);
            }
            if (f[WF_TOTAL] > 0) {
                put_s(b, ", ");
                put_i(b, f[WF_DONE]);
                put_s(b, " of ");
                put_i(b, f[WF_TOTAL]);
                put_s(b, " hops done");
            }
        }
        break;
    case WHERE_BLOCKING:
        put_s(b, "in ");
        put_s(b, atomic_load_explicit(&m->where.blocking, memory_order_relaxed));
        break;
    case WHERE_WAIT:
        put_s(b, "waiting for the non-blocking ");
        put_call(b, m, f[WF_OP], f[WF_SETSEQ], f[WF_SET]);
        break;
    case WHERE_P2P: {
        const int recv = f[WF_OP] == MESH_OP_RECV;
        put_s(b, recv ? "in recv from " : "in send to ");
        put_set(b, m, f[WF_SET]);
        put_s(b, f[WF_SHIFT] > 0 ? "+1 (" : "-1 (");
        put_i(b, f[WF_COUNT]);
        put_s(b, " floats)");
        break;
    }
    default:
        put_s(b, "not in mesh");
        if (f[WF_LAST_T] > 0) {
            put_s(b, " (last: ");
            if (f[WF_LAST_OP] == MESH_OP_SEND || f[WF_LAST_OP] == MESH_OP_RECV) {
                put_s(b, mesh_op_title((mesh_op)f[WF_LAST_OP]));
                put_s(b, " over ");
                put_set(b, m, f[WF_LAST_SET]);
            } else {
                put_call(b, m, f[WF_LAST_OP], f[WF_LAST_SETSEQ], f[WF_LAST_SET]);
            }
            put_s(b, ", ended ");
            put_secs(b, now - f[WF_LAST_T]);
            put_s(b, " ago)");
        }
        return;
    }
    put_s(b, ", for ");
    put_secs(b, now - f[WF_T0]);
    if (!clean) put_s(b, " (state changing)");
}

size_t mesh_where_str(const mesh *m, char *buf, size_t len) {
    if (!len) return 0;
    sbuf b = {buf, 0, len};
    buf[0] = 0;
    const long long now = now_ns();
    put_s(&b, "rank ");
    put_i(&b, m->rank);
    put_c(&b, ' ');
    put_coords(&b, m, m->rank);
    put_s(&b, ": ");
    put_slot(&b, m, &m->where.slot[0], now);
    const long long step = atomic_load_explicit(&m->where.step, memory_order_relaxed);
    const long long st0 = atomic_load_explicit(&m->where.step_t0, memory_order_acquire);
    const char *note = atomic_load_explicit(&m->where.note, memory_order_acquire);
    if (st0 > 0 || note) put_s(&b, " | ");
    if (st0 > 0) {
        put_s(&b, "step ");
        put_i(&b, step);
        put_s(&b, " (");
        put_secs(&b, now - st0);
        put_c(&b, ')');
        if (note) put_s(&b, ", ");
    }
    if (note) {
        const long long i = atomic_load_explicit(&m->where.note_i, memory_order_relaxed);
        for (const char *p = note; *p; p++) {
            if (*p == '#') {
                put_i(&b, i);
                put_s(&b, p + 1);
                break;
            }
            put_c(&b, *p);
        }
    }
    if (m->async) { /* the progress thread (or the inline coroutine) exists */
        put_s(&b, m->progress_inline ? " | inline progress: " : " | progress thread: ");
        put_slot(&b, m, &m->where.slot[1], now);
    }
    return b.n;
}

/* ---- SIGUSR1 ---- */

static mesh *_Atomic g_signal_mesh;

/* "meshtrain: where: <line>\n" to stderr with one write. */
static void write_where(const mesh *m, const char *tail) {
    char buf[1024];
    sbuf b = {buf, 0, sizeof buf - 1};
    put_s(&b, "meshtrain: where: ");
    b.n += mesh_where_str(m, buf + b.n, b.cap - b.n);
    put_s(&b, tail);
    buf[b.n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, b.n);
    (void)w;
}

static void on_sigusr1(int sig) {
    (void)sig;
    const int saved = errno;
    const mesh *m = atomic_load(&g_signal_mesh);
    if (m) write_where(m, " (SIGUSR1)");
    errno = saved;
}

void mesh_where_signal(mesh *m) {
    atomic_store(&g_signal_mesh, m);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
}

/* ---- the debug signature check ---- */

enum { SG_RANK, SG_SETSEQ, SG_OP, SG_SET, SG_COUNT, SG_ALG, SG_SHIFT, SG_N };

static int sig_equal(const long long *a, const long long *b) {
    for (int k = SG_SETSEQ; k < SG_N; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

/* Prints the mismatch report: one line per distinct signature, with the ranks that made it. */
static void report_mismatch(mesh *m, const long long *all, int n, const mesh_call *rec) {
    char line[1024];
    sbuf b = {line, 0, sizeof line};
    put_s(&b, "meshtrain: error: collective mismatch (--debug-collectives): the ");
    put_i(&b, n);
    put_s(&b, " ranks of axis set ");
    put_set(&b, m, mesh_set_id(rec->axes));
    put_s(&b, " disagree on their next collective over it:");
    fprintf(stderr, "%s\n", line);
    char *seen = calloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        if (seen && seen[i]) continue;
        const long long *s = all + (size_t)i * SG_N;
        b.n = 0;
        put_s(&b, "  ");
        int shown = 0, more = 0;
        for (int j = i; j < n; j++) {
            const long long *t = all + (size_t)j * SG_N;
            if (!sig_equal(s, t) || (seen && seen[j])) continue;
            if (seen) seen[j] = 1;
            if (shown == 8) {
                more++;
                continue;
            }
            put_s(&b, shown ? ", rank " : "rank ");
            put_i(&b, t[SG_RANK]);
            put_c(&b, ' ');
            put_coords(&b, m, (int)t[SG_RANK]);
            shown++;
        }
        if (more) {
            put_s(&b, " and ");
            put_i(&b, more);
            put_s(&b, " more");
        }
        put_s(&b, ": ");
        put_call(&b, m, s[SG_OP], s[SG_SETSEQ], s[SG_SET]);
        put_s(&b, ", count ");
        put_i(&b, s[SG_COUNT]);
        if (s[SG_OP] == MESH_OP_PPERMUTE) {
            put_s(&b, ", shift ");
            put_i(&b, s[SG_SHIFT]);
        }
        put_s(&b, ", alg ");
        put_s(&b, mesh_alg_name((mesh_alg)s[SG_ALG]));
        fprintf(stderr, "%s\n", line);
        if (!seen) break;
    }
    free(seen);
    fprintf(stderr, "meshtrain: ending the job (MPI_Abort, status %d)\n", CHECK_STATUS);
    fflush(stderr);
}

void where_verify(mesh *m, MPI_Comm comm, const mesh_call *rec) {
    long long mine[SG_N] = {m->rank,    rec->set_seq, rec->op,   mesh_set_id(rec->axes),
                            rec->count, rec->alg,     rec->shift};
    int n = 1, me = 0;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    long long *all = malloc((size_t)n * SG_N * sizeof *all); /* debug mode only */
    CHECK(all, "out of memory for the signature check");
    MPI_Allgather(mine, SG_N, MPI_LONG_LONG, all, SG_N, MPI_LONG_LONG, comm);
    int same = 1;
    for (int i = 1; i < n; i++) same &= sig_equal(all, all + (size_t)i * SG_N);
    if (same) {
        free(all);
        return;
    }
    /* Every rank of the set saw the same table: the first one reports, the others wait to be
     * ended by its MPI_Abort (and abort themselves if that never comes). */
    if (me == 0) {
        report_mismatch(m, all, n, rec);
        MPI_Abort(m->ctx[0].world.mpi, CHECK_STATUS);
    }
    struct timespec ts = {10, 0};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
    MPI_Abort(m->ctx[0].world.mpi, CHECK_STATUS);
    abort();
}

/* ---- the watchdog ---- */

/* Prints this rank's where-line once per job. */
static void report_once(mesh *m, const char *tail) {
    if (atomic_exchange(&m->where.reported, 1)) return;
    write_where(m, tail);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* What has run longer than the timeout, as "AllGather #57 over y has waited 31.0 s", or "". */
static void overdue(mesh *m, long long now, char *what, size_t len) {
    const long long lim = (long long)(m->where.wd_timeout * 1e9);
    sbuf b = {what, 0, len};
    what[0] = 0;
    for (int sl = 0; sl < 2; sl++) {
        long long f[WF_N];
        slot_read(&m->where.slot[sl], f);
        if (f[WF_KIND] == WHERE_IDLE || now - f[WF_T0] <= lim) continue;
        if (sl == 1) put_s(&b, "the progress thread's ");
        if (f[WF_KIND] == WHERE_BLOCKING) {
            put_s(&b, atomic_load_explicit(&m->where.blocking, memory_order_relaxed));
        } else if (f[WF_KIND] == WHERE_P2P) {
            put_s(&b, f[WF_OP] == MESH_OP_RECV ? "recv from " : "send to ");
            put_set(&b, m, f[WF_SET]);
            put_s(&b, f[WF_SHIFT] > 0 ? "+1" : "-1");
        } else {
            if (f[WF_KIND] == WHERE_WAIT) put_s(&b, "wait for ");
            put_call(&b, m, f[WF_OP], f[WF_SETSEQ], f[WF_SET]);
        }
        put_s(&b, " has waited ");
        put_secs(&b, now - f[WF_T0]);
        return;
    }
    const long long st0 = atomic_load(&m->where.step_t0);
    if (st0 > 0 && now - st0 > lim) {
        put_s(&b, "step ");
        put_i(&b, atomic_load(&m->where.step));
        put_s(&b, " has run ");
        put_secs(&b, now - st0);
    }
}

/* The notices of other ranks' watchdogs, on the watchdog's communicator: one receive posted at a
 * time, re-posted after each, and `heard` marks every rank whose notice arrived (it fired, so it
 * printed its where-line). */
typedef struct {
    MPI_Request rq;
    int buf;
    char *heard; /* [nranks], or NULL when out of memory (then nobody is marked) */
} notices;

static void notice_post(mesh *m, notices *n) {
    MPI_Irecv(&n->buf, 1, MPI_INT, MPI_ANY_SOURCE, WD_TAG, m->where.wd_comm, &n->rq);
}

/* The source of a notice that has arrived (marked in heard; the receive re-posted), or -1. */
static int notice_test(mesh *m, notices *n) {
    int flag = 0;
    MPI_Status st;
    if (n->rq != MPI_REQUEST_NULL) MPI_Test(&n->rq, &flag, &st);
    if (!flag) return -1;
    const int src = st.MPI_SOURCE;
    if (n->heard && src >= 0 && src < m->nranks) n->heard[src] = 1;
    notice_post(m, n);
    return src;
}

/* During the grace period: who has answered the notices (an answer, or a notice of its own from
 * a rank whose watchdog fired too, before this one's or since: both mean it printed its
 * where-line). Ends as soon as every rank has. Then names the others. */
static void collect_answers(mesh *m, notices *nt) {
    char *answered = calloc((size_t)m->nranks, 1);
    int left = m->nranks - 1;
    if (answered && nt->heard)
        for (int r = 0; r < m->nranks; r++)
            if (r != m->rank && nt->heard[r]) answered[r] = 1, left--;
    const long long until = now_ns() + (long long)(m->where.wd_grace * 1e9);
    while (answered && left > 0 && now_ns() < until) {
        int flag = 0, src = -1, x;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, WD_ACK_TAG, m->where.wd_comm, &flag, &st);
        if (flag) {
            MPI_Recv(&x, 1, MPI_INT, st.MPI_SOURCE, WD_ACK_TAG, m->where.wd_comm,
                     MPI_STATUS_IGNORE);
            src = st.MPI_SOURCE;
        } else {
            src = notice_test(m, nt);
        }
        if (src >= 0 && src < m->nranks && src != m->rank && !answered[src])
            answered[src] = 1, left--;
        if (src < 0) sleep_s(0.01);
    }
    if (answered && left > 0) {
        char line[1024];
        sbuf b = {line, 0, sizeof line};
        put_s(&b, "meshtrain: watchdog: no where-line within ");
        put_secs(&b, (long long)(m->where.wd_grace * 1e9));
        put_s(&b, " from");
        int shown = 0;
        for (int r = 0; r < m->nranks; r++) {
            if (r == m->rank || answered[r]) continue;
            if (shown == 8) {
                put_s(&b, " ...");
                break;
            }
            put_s(&b, shown++ ? ", rank " : " rank ");
            put_i(&b, r);
            put_c(&b, ' ');
            put_coords(&b, m, r);
        }
        put_s(&b, " (stopped, or unable to run its watchdog thread)");
        fprintf(stderr, "%s\n", line);
        fflush(stderr);
    }
    free(answered);
}

static _Noreturn void fire(mesh *m, const char *what, notices *nt) {
    char coords[64];
    mesh_coord_str(m, coords, sizeof coords);
    report_once(m, "");
    fprintf(stderr,
            "meshtrain: watchdog: rank %d %s: %s, more than --timeout %g s; asking every rank "
            "where it is, then ending the job\n",
            m->rank, coords, what, m->where.wd_timeout);
    fflush(stderr);
    static const int one = 1;
    for (int r = 0; r < m->nranks; r++) {
        if (r == m->rank) continue;
        MPI_Request rq;
        MPI_Isend(&one, 1, MPI_INT, r, WD_TAG, m->where.wd_comm, &rq);
        MPI_Request_free(&rq);
    }
    collect_answers(m, nt);
    fprintf(stderr, "meshtrain: watchdog: rank %d ends the job (MPI_Abort, status %d)\n", m->rank,
            WD_STATUS);
    fflush(stderr);
    MPI_Abort(m->where.wd_comm, WD_STATUS);
    abort();
}

static void *watchdog_main(void *arg) {
    mesh *m = arg;
    where_state *w = &m->where;
    double period = w->wd_timeout / 4;
    period = period < 0.02 ? 0.02 : period > 0.25 ? 0.25 : period;
    notices nt = {MPI_REQUEST_NULL, 0, calloc((size_t)m->nranks, 1)};
    notice_post(m, &nt);
    pthread_mutex_lock(&w->wd_mu);
    while (!w->wd_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (long long)(period * 1e9);
        until.tv_sec += (time_t)(ns / 1000000000LL);
        until.tv_nsec = (long)(ns % 1000000000LL);
        pthread_cond_timedwait(&w->wd_cv, &w->wd_mu, &until);
        if (w->wd_stop) break;
        pthread_mutex_unlock(&w->wd_mu);
        /* other ranks' watchdogs fired: say where we are (once), answer each; they end the job */
        for (int src; (src = notice_test(m, &nt)) >= 0;) {
            char tail[64];
            snprintf(tail, sizeof tail, " (asked by rank %d's watchdog)", src);
            report_once(m, tail);
            static const int one = 1;
            MPI_Request ack;
            MPI_Isend(&one, 1, MPI_INT, src, WD_ACK_TAG, w->wd_comm, &ack);
            MPI_Request_free(&ack);
        }
        char what[256];
        overdue(m, now_ns(), what, sizeof what);
        if (what[0]) fire(m, what, &nt);
        pthread_mutex_lock(&w->wd_mu);
    }
    pthread_mutex_unlock(&w->wd_mu);
    if (nt.rq != MPI_REQUEST_NULL) {
        MPI_Cancel(&nt.rq);
        MPI_Wait(&nt.rq, MPI_STATUS_IGNORE);
    }
    free(nt.heard);
    return NULL;
}

int mesh_watchdog_start(mesh *m, double timeout) {
    where_state *w = &m->where;
    if (w->wd_running || !(timeout > 0)) return 0;
    MPI_Comm_dup(m->ctx[0].world.mpi, &w->wd_comm);
    w->wd_timeout = timeout;
    const char *g = getenv("MESHTRAIN_WATCHDOG_GRACE");
    const double grace = g ? atof(g) : 0;
    w->wd_grace = grace > 0 ? grace : WD_GRACE;
    w->wd_stop = 0;
    pthread_mutex_init(&w->wd_mu, NULL);
    pthread_cond_init(&w->wd_cv, NULL);
#ifdef MESHTRAIN_SMPI /* a simulated rank cannot host a second MPI thread: no watchdog */
    w->wd_running = 1;
    (void)watchdog_main;
#else
    w->wd_running = pthread_create(&w->wd_thread, NULL, watchdog_main, m) == 0 ? 2 : 1;
#endif
    int ok = w->wd_running == 2 ? 0 : -1, all = ok; /* every rank has its watchdog, or none */
    mesh_blocking_begin("MPI_Allreduce (ranks agreeing on the watchdog)");
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, m->ctx[0].world.mpi);
    mesh_blocking_end();
    return all;
}

void where_stop_thread(mesh *m) {
    where_state *w = &m->where;
    if (w->wd_running != 2) return;
    pthread_mutex_lock(&w->wd_mu);
    w->wd_stop = 1;
    pthread_cond_signal(&w->wd_cv);
    pthread_mutex_unlock(&w->wd_mu);
    pthread_join(w->wd_thread, NULL);
    w->wd_running = 1;
}

void mesh_watchdog_stop(mesh *m) {
    where_state *w = &m->where;
    if (!w->wd_running) return;
    where_stop_thread(m);
    pthread_mutex_destroy(&w->wd_mu);
    pthread_cond_destroy(&w->wd_cv);
    MPI_Comm_free(&w->wd_comm); /* collective over world, like the dup */
    w->wd_running = 0;
}

void where_destroy(mesh *m) {
    mesh_watchdog_stop(m);
    mesh *attached = m;
    atomic_compare_exchange_strong(&g_where_mesh, &attached, NULL);
    mesh *expected = m;
    if (atomic_compare_exchange_strong(&g_signal_mesh, &expected, NULL)) signal(SIGUSR1, SIG_DFL);
}

/* ---- engine progress ---- */

void where_engine(mesh *m, const mesh_ctx *ctx, const chain *ch, int nch) {
    int best = -1, bcur = 0, bdone = 0, btotal = 0;
    for (int c = 0; c < nch; c++) {
        const int cur = ch[c].cur;
        int done = 0, total = 0;
        if (cur < ch[c].nph && ch[c].ph[cur].started) {
            const phase *p = &ch[c].ph[cur];
            done = p->st[0].done < p->st[1].done ? p->st[0].done : p->st[1].done;
            total = p->nsteps;
        }
        if (best < 0 || cur < bcur || (cur == bcur && done < bdone))
            best = c, bcur = cur, bdone = done, btotal = total;
    }
    if (best >= 0) where_steps(m, ctx == &m->ctx[1], bcur + 1, ch[best].nph, bdone, btotal);
}
