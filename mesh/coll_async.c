/* coll_async: non-blocking collectives. One progress thread per mesh (in the SMPI build a
 * coroutine of the simulated rank, sim_progress.c) executes queued calls in issue order on the
 * mesh's second set of communicators (ctx[1]), so blocking calls on the caller's thread (ctx[0])
 * never mix messages with it. The thread sleeps on a condition variable
 * when the queue is empty: no busy wait on an oversubscribed machine. Request handles are
 * recycled through a free list, so steady-state use does not allocate. */
#define _POSIX_C_SOURCE 200809L /* pthread_condattr_setclock, CLOCK_MONOTONIC */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/async_impl.h"

static void *progress_main(void *arg) {
    mesh *m = arg;
    mesh_async *q = m->async;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->work, &q->mu);
        if (!q->head) break;
        mesh_req *r = q->head;
        pthread_mutex_unlock(&q->mu);
        coll_execute(m, 1, &r->x, &r->rec);
        coll_record_end(m, &r->rec);
        pthread_mutex_lock(&q->mu);
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        r->done = 1;
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

#ifdef MESHTRAIN_SMPI
/* The SMPI build's coroutine body (sim_progress.c): progress_main's loop without the thread. */
static void serve(mesh *m) {
    mesh_async *q = m->async;
    for (;;) {
        while (q->head) {
            mesh_req *r = q->head;
            coll_execute(m, 1, &r->x, &r->rec);
            coll_record_end(m, &r->rec);
            q->head = r->next;
            if (!q->head) q->tail = NULL;
            r->done = 1;
        }
        sim_idle(m);
    }
}
#endif

static mesh_req *enqueue(mesh *m, const coll_args *x) {
    if (!m->async) {
        mesh_async *q = calloc(1, sizeof *q);
        CHECK(q, "out of memory");
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->work, NULL);
        pthread_cond_init(&q->done, NULL);
        pthread_condattr_t ca; /* timed naps on mesh_now()'s clock */
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&q->kick, &ca);
        pthread_condattr_destroy(&ca);
        m->async = q;
        if (PROGRESS_THREAD)
            CHECK(pthread_create(&q->th, NULL, progress_main, m) == 0,
                  "cannot start the progress thread");
    }
    mesh_async *q = m->async;
    pthread_mutex_lock(&q->mu);
    mesh_req *r = q->free_list;
    if (r) q->free_list = r->next;
    pthread_mutex_unlock(&q->mu);
    if (!r) r = malloc(sizeof *r);
    CHECK(r, "out of memory");
    r->m = m;
    r->x = *x;
    r->x.wire = m->wire;
    r->done = 0;
    r->next = NULL;
    coll_record_begin(m, x, &r->rec);
    r->rec.async = 1;
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
#ifdef MESHTRAIN_SMPI
    sim_resume(m, serve); /* posts the call's first messages (or it waits behind the queue) */
#endif
    return r;
}

int mesh_test(mesh_req *r) {
    mesh_async *q = r->m->async;
#ifdef MESHTRAIN_SMPI
    if (!r->done) sim_resume(r->m, serve);
#endif
    pthread_mutex_lock(&q->mu);
    int d = r->done;
    pthread_mutex_unlock(&q->mu);
    return d;
}

void mesh_wait(mesh_req *r) {
    if (!r) return;
    mesh *m = r->m;
    mesh_async *q = m->async;
    const double t0 = mesh_now(), c0 = mesh_thread_cpu();
    /* the fields set at issue (the progress thread writes the others while it runs the call) */
    mesh_call w = {.seq = r->rec.seq,
                   .set_seq = r->rec.set_seq,
                   .op = r->rec.op,
                   .axes = r->rec.axes,
                   .count = r->rec.count,
                   .shift = r->rec.shift,
                   .async = 1};
    where_enter(m, 0, WHERE_WAIT, &w);
#ifdef MESHTRAIN_SMPI
    sim_wait(m, serve, r);
    pthread_mutex_lock(&q->mu);
#else
    pthread_mutex_lock(&q->mu);
    if (!r->done) {
        q->waiting++, q->kicks++;
        pthread_cond_signal(&q->kick);
        while (!r->done) pthread_cond_wait(&q->done, &q->mu);
        q->waiting--;
    }
#endif
    const mesh_call rec = r->rec; /* r goes back to the free list */
    r->next = q->free_list;
    q->free_list = r;
    pthread_mutex_unlock(&q->mu);
    where_leave(m, 0);
    const double t1 = mesh_now();
    pthread_mutex_lock(&m->acct_mu);
    mesh_stat *s = &m->stat[rec.op][rec.axes.n ? rec.axes.ax[0] + 1 : 0];
    s->wait_seconds += t1 - t0;
    s->wait_cpu += mesh_thread_cpu() - c0;
    mesh_hook hk[MESH_MAX_HOOKS];
    memcpy(hk, m->hook, sizeof hk);
    pthread_mutex_unlock(&m->acct_mu);
    for (int i = 0; i < MESH_MAX_HOOKS; i++)
        if (hk[i].done && hk[i].waited) hk[i].waited(&rec, t0, t1, hk[i].ctx);
}

double mesh_progress_cpu(const mesh *m) {
    clockid_t id;
    struct timespec ts;
    if (!PROGRESS_THREAD || !m->async || pthread_getcpuclockid(m->async->th, &id) != 0 ||
        clock_gettime(id, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void coll_async_destroy(mesh *m) {
    mesh_async *q = m->async;
    if (!q) return;
#ifdef MESHTRAIN_SMPI
    if (q->tail) sim_wait(m, serve, q->tail); /* the calls never waited for finish, as below */
    sim_destroy(m);
#endif
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    if (PROGRESS_THREAD) pthread_join(q->th, NULL);
    while (q->free_list) {
        mesh_req *r = q->free_list;
        q->free_list = r->next;
        free(r);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->kick);
    free(q);
    m->async = NULL;
}

#define ARGS(OP)                                                                                   \
    { .op = OP, .a = a, .out = out, .in = in, .count = count, .alg = alg }
/* The four collectives over an axis set (coll.h): one body, the op fixed. */
#define SET_COLLECTIVE(name, OP)                                                                   \
    mesh_req *name(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,               \
                   mesh_alg alg) {                                                                 \
        coll_args x = ARGS(OP);                                                                    \
        return enqueue(m, &x);                                                                     \
    }
SET_COLLECTIVE(mesh_iall_gather, MESH_OP_ALL_GATHER)
SET_COLLECTIVE(mesh_ireduce_scatter, MESH_OP_REDUCE_SCATTER)
SET_COLLECTIVE(mesh_iall_reduce, MESH_OP_ALL_REDUCE)
SET_COLLECTIVE(mesh_iall_to_all, MESH_OP_ALL_TO_ALL)
mesh_req *mesh_ippermute(mesh *m, int axis, int shift, float *out, const float *in, int64_t count) {
    coll_args x = {
        .op = MESH_OP_PPERMUTE, .axis = axis, .shift = shift, .out = out, .in = in, .count = count};
    return enqueue(m, &x);
}
