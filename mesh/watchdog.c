/* watchdog: the --timeout watchdog (where.h: mesh_watchdog_start), an observer of the rank's
 * activity (activity.h). See watchdog.h.
 *
 * One message per failure. The rank whose watchdog fires prints its where-line, asks every other
 * rank for theirs (a notice on the watchdog's own communicator, carrying the time until which it
 * waits for the answers), names the ranks that did not answer in time and ends the job. A rank
 * that hears a notice answers with its where-line if the asker still waits, and from then on
 * never fires itself: the asker ends the job. So a rank that was stopped (SIGSTOP) and resumes
 * while the job ends (mpirun's SIGCONT before its SIGTERM) adds nothing: the notice it finds has
 * expired (the asker already named it) and its own overdue call is the same failure. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include "mesh/watchdog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mesh/activity.h"
#include "mesh/parts.h"
#include "mesh/sbuf.h"
#include "mesh/topo.h"
#include "mesh/where.h"
#include "mesh/where_impl.h"

#define WD_TAG 7001     /* watchdog notices, on the watchdog's own communicator */
#define WD_ACK_TAG 7002 /* answers to a notice: the where-line is out */
/* Seconds the firing rank waits at most for the others' where-lines; the wait ends as soon as
 * every rank has answered, so only a rank that cannot answer (stopped, or its watchdog thread
 * starved) costs the whole of it. Long enough for a healthy rank on a loaded or oversubscribed
 * machine; MESHTRAIN_WATCHDOG_GRACE (seconds, > 0) overrides it. */
#define WD_GRACE 5.0
#define WD_STATUS 4 /* exit status of a job the watchdog ended */

/* CLOCK_REALTIME in ns: the deadlines in notices (hosts' real-time clocks agree far better than
 * the grace's second; their monotonic clocks do not agree at all). */
static long long real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* Prints this rank's where-line once per job. */
static void report_once(mesh_watchdog *w, const char *tail) {
    if (atomic_exchange(&w->reported, 1)) return;
    where_write(w->m, tail);
}

/* What has run longer than the timeout, as "AllGather #57 over y has waited 31.0 s", or "". */
static void overdue(mesh_watchdog *w, long long now, char *what, size_t len) {
    const mesh_topo *t = mesh_part_topo(w->m);
    const mesh_activity *a = mesh_part_activity(w->m);
    const long long lim = (long long)(w->timeout * 1e9);
    sbuf b = {what, 0, len};
    what[0] = 0;
    for (int sl = 0; sl < 2; sl++) {
        long long f[AF_N];
        act_read(&a->slot[sl], f);
        if (f[AF_KIND] == ACT_IDLE || now - f[AF_T0] <= lim) continue;
        if (sl == 1) put_s(&b, "the progress thread's ");
        if (f[AF_KIND] == ACT_BLOCKING) {
            put_s(&b, atomic_load_explicit(&a->blocking, memory_order_relaxed));
        } else if (f[AF_KIND] == ACT_P2P) {
            put_s(&b, f[AF_OP] == MESH_OP_RECV ? "recv from " : "send to ");
            put_set(&b, t, f[AF_SET]);
            put_s(&b, f[AF_SHIFT] > 0 ? "+1" : "-1");
        } else {
            if (f[AF_KIND] == ACT_WAIT) put_s(&b, "wait for ");
            put_call(&b, t, f[AF_OP], f[AF_SETSEQ], f[AF_SET]);
        }
        put_s(&b, " has waited ");
        put_secs(&b, now - f[AF_T0]);
        return;
    }
    const long long st0 = atomic_load(&a->step_t0);
    if (st0 > 0 && now - st0 > lim) {
        put_s(&b, "step ");
        put_i(&b, atomic_load(&a->step));
        put_s(&b, " has run ");
        put_secs(&b, now - st0);
    }
}

/* The notices of other ranks' watchdogs, on the watchdog's communicator: one receive posted at a
 * time, re-posted after each; `heard` marks every rank whose notice arrived (it fired, so it
 * printed its where-line, and it ends the job). */
typedef struct {
    MPI_Request rq;
    long long deadline; /* the notice's: CLOCK_REALTIME ns until which its sender waits */
    char *heard;        /* [nranks], or NULL when out of memory (then nobody is marked) */
    int any;            /* a notice has arrived: another rank ends the job */
} notices;

static void notice_post(mesh_watchdog *w, notices *n) {
    MPI_Irecv(&n->deadline, 1, MPI_LONG_LONG, MPI_ANY_SOURCE, WD_TAG, w->comm, &n->rq);
}

/* The source of a notice that has arrived (marked; the receive re-posted), or -1. */
static int notice_test(mesh_watchdog *w, notices *n) {
    int flag = 0;
    MPI_Status st;
    if (n->rq != MPI_REQUEST_NULL) MPI_Test(&n->rq, &flag, &st);
    if (!flag) return -1;
    const int src = st.MPI_SOURCE;
    if (n->heard && src >= 0 && src < mesh_nranks(w->m)) n->heard[src] = 1;
    n->any = 1;
    return src;
}

/* Other ranks' watchdogs fired: say where we are (once), to each that still waits for it. */
static void answer_notices(mesh_watchdog *w, notices *nt) {
    for (int src; (src = notice_test(w, nt)) >= 0;) {
        const long long deadline = nt->deadline;
        notice_post(w, nt);
        if (real_ns() > deadline) continue; /* too late: the asker named this rank already */
        char tail[64];
        snprintf(tail, sizeof tail, " (asked by rank %d's watchdog)", src);
        report_once(w, tail);
        static const int one = 1;
        MPI_Request ack;
        MPI_Isend(&one, 1, MPI_INT, src, WD_ACK_TAG, w->comm, &ack);
        MPI_Request_free(&ack);
    }
}

/* Names the ranks that did not answer within the grace. */
static void name_silent(mesh_watchdog *w, const char *answered) {
    const mesh_topo *t = mesh_part_topo(w->m);
    char line[1024];
    sbuf b = {line, 0, sizeof line};
    put_s(&b, "meshtrain: watchdog: no where-line within ");
    put_secs(&b, (long long)(w->grace * 1e9));
    put_s(&b, " from");
    int shown = 0;
    for (int r = 0; r < t->nranks; r++) {
        if (r == t->rank || answered[r]) continue;
        if (shown == 8) {
            put_s(&b, " ...");
            break;
        }
        put_s(&b, shown++ ? ", rank " : " rank ");
        put_i(&b, r);
        put_c(&b, ' ');
        put_coords(&b, t, r);
    }
    put_s(&b, " (stopped, or unable to run its watchdog thread)");
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

/* During the grace period: who has answered the notices (an answer, or a notice of its own from
 * a rank whose watchdog fired too, before this one's or since: both mean it printed its
 * where-line). Ends as soon as every rank has. Then names the others. */
static void collect_answers(mesh_watchdog *w, notices *nt, long long deadline) {
    const int n = mesh_nranks(w->m), me = mesh_rank(w->m);
    char *answered = calloc((size_t)n, 1);
    int left = n - 1;
    if (answered && nt->heard)
        for (int r = 0; r < n; r++)
            if (r != me && nt->heard[r]) answered[r] = 1, left--;
    while (answered && left > 0 && real_ns() < deadline) {
        int flag = 0, src = -1, x;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, WD_ACK_TAG, w->comm, &flag, &st);
        if (flag) {
            MPI_Recv(&x, 1, MPI_INT, st.MPI_SOURCE, WD_ACK_TAG, w->comm, MPI_STATUS_IGNORE);
            src = st.MPI_SOURCE;
        } else if ((src = notice_test(w, nt)) >= 0) {
            notice_post(w, nt);
        }
        if (src >= 0 && src < n && src != me && !answered[src]) answered[src] = 1, left--;
        if (src < 0) sleep_s(0.01);
    }
    if (answered && left > 0) name_silent(w, answered);
    free(answered);
}

static _Noreturn void fire(mesh_watchdog *w, const char *what, notices *nt) {
    const mesh *m = w->m;
    char coords[64];
    mesh_coord_str(m, coords, sizeof coords);
    report_once(w, "");
    fprintf(stderr,
            "meshtrain: watchdog: rank %d %s: %s, more than --timeout %g s; asking every rank "
            "where it is, then ending the job\n",
            mesh_rank(m), coords, what, w->timeout);
    fflush(stderr);
    static long long deadline;
    deadline = real_ns() + (long long)(w->grace * 1e9);
    for (int r = 0; r < mesh_nranks(m); r++) {
        if (r == mesh_rank(m)) continue;
        MPI_Request rq;
        MPI_Isend(&deadline, 1, MPI_LONG_LONG, r, WD_TAG, w->comm, &rq);
        MPI_Request_free(&rq);
    }
    collect_answers(w, nt, deadline);
    fprintf(stderr, "meshtrain: watchdog: rank %d ends the job (MPI_Abort, status %d)\n",
            mesh_rank(m), WD_STATUS);
    fflush(stderr);
    MPI_Abort(w->comm, WD_STATUS);
    abort();
}

/* One look: answer the notices; fire when something is overdue and no other rank's watchdog has
 * fired (a notice heard: that rank ends the job, and this rank's overdue call is the same
 * failure). Before firing, the notices get one more chance to arrive: a rank resuming from a stop
 * finds its calls overdue at once, while a notice that came meanwhile may still be in transit. */
static void look(mesh_watchdog *w, notices *nt) {
    answer_notices(w, nt);
    if (nt->any) return;
    char what[256];
    overdue(w, act_now_ns(), what, sizeof what);
    if (!what[0]) return;
    for (int i = 0; i < 10 && !nt->any; i++) {
        sleep_s(0.01);
        answer_notices(w, nt);
    }
    if (!nt->any) fire(w, what, nt);
}

static void *watchdog_main(void *arg) {
    mesh_watchdog *w = arg;
    double period = w->timeout / 4;
    period = period < 0.02 ? 0.02 : period > 0.25 ? 0.25 : period;
    notices nt = {MPI_REQUEST_NULL, 0, calloc((size_t)mesh_nranks(w->m), 1), 0};
    notice_post(w, &nt);
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (long long)(period * 1e9);
        until.tv_sec += (time_t)(ns / 1000000000LL);
        until.tv_nsec = (long)(ns % 1000000000LL);
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
        if (w->stop) break;
        pthread_mutex_unlock(&w->mu);
        look(w, &nt);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    if (nt.rq != MPI_REQUEST_NULL) {
        MPI_Cancel(&nt.rq);
        MPI_Wait(&nt.rq, MPI_STATUS_IGNORE);
    }
    free(nt.heard);
    return NULL;
}

int mesh_watchdog_start(mesh *m, double timeout) {
    mesh_watchdog *w = mesh_part_watchdog(m);
    if (w->running || !(timeout > 0)) return 0;
    w->m = m;
    MPI_Comm_dup(mesh_world_comm(m)->mpi, &w->comm);
    w->timeout = timeout;
    const char *g = getenv("MESHTRAIN_WATCHDOG_GRACE");
    const double grace = g ? atof(g) : 0;
    w->grace = grace > 0 ? grace : WD_GRACE;
    w->stop = 0;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
#ifdef MESHTRAIN_SMPI /* a simulated rank cannot host a second MPI thread: no watchdog */
    w->running = 1;
    (void)watchdog_main;
#else
    w->running = pthread_create(&w->thread, NULL, watchdog_main, w) == 0 ? 2 : 1;
#endif
    int ok = w->running == 2 ? 0 : -1, all = ok; /* every rank has its watchdog, or none */
    mesh_blocking_begin("MPI_Allreduce (ranks agreeing on the watchdog)");
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, mesh_world_comm(m)->mpi);
    mesh_blocking_end();
    return all;
}

void watchdog_stop_thread(mesh_watchdog *w) {
    if (w->running != 2) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->running = 1;
}

void watchdog_destroy(mesh_watchdog *w) {
    if (!w->running) return;
    watchdog_stop_thread(w);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    MPI_Comm_free(&w->comm); /* collective over world, like the dup */
    w->running = 0;
}

void mesh_watchdog_stop(mesh *m) {
    watchdog_destroy(mesh_part_watchdog(m));
}
