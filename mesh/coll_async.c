/* coll_async: non-blocking collectives. One progress thread per mesh, or in the inline mode (and
 * always in the SMPI build) a coroutine of the caller's thread (co_progress.c), executes queued
 * calls in issue order on the mesh's second context (its own communicators), so blocking calls on
 * the caller's thread (context 0) never mix messages with it. The thread sleeps on a condition
 * variable when the queue is empty: no busy wait on an oversubscribed machine. Request handles
 * are recycled through a free list, so steady-state use does not allocate. */
#define _POSIX_C_SOURCE 200809L /* pthread_condattr_setclock, CLOCK_MONOTONIC */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mesh/async_impl.h"
#include "mesh/links.h"
#include "mesh/parts.h"
#include "mesh/progress.h"
#include "mesh/stats.h"

/* Runs the queue's head call on context 1 and completes it. */
static void run_head(mesh *m, mesh_req *r) {
    const coll_env e = coll_env_of(m, 1);
    coll_execute(&e, &r->x, &r->rec);
    stats_complete(mesh_part_stats(m), &r->rec);
}

static void *progress_main(void *arg) {
    mesh_async *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->work, &q->mu);
        if (!q->head) break;
        mesh_req *r = q->head;
        pthread_mutex_unlock(&q->mu);
        run_head(q->m, r);
        pthread_mutex_lock(&q->mu);
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        r->done = 1;
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* The coroutine's body (co_progress.c): progress_main's loop without the thread. */
static void serve(mesh *m) {
    mesh_async *q = mesh_part_queue(m)->q;
    for (;;) {
        while (q->head) {
            mesh_req *r = q->head;
            run_head(m, r);
            q->head = r->next;
            if (!q->head) q->tail = NULL;
            r->done = 1;
        }
        co_idle(q);
    }
}

static mesh_req *enqueue(mesh *m, const coll_args *x) {
    mesh_queue *mq = mesh_part_queue(m);
    if (!mq->q) {
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
        q->thread = PROGRESS_THREAD && !mq->inline_mode;
        q->serve = serve;
        q->m = m;
        mq->q = q;
        if (q->thread)
            CHECK(pthread_create(&q->th, NULL, progress_main, q) == 0,
                  "cannot start the progress thread");
    }
    mesh_async *q = mq->q;
    pthread_mutex_lock(&q->mu);
    mesh_req *r = q->free_list;
    if (r) q->free_list = r->next;
    pthread_mutex_unlock(&q->mu);
    if (!r) r = malloc(sizeof *r);
    CHECK(r, "out of memory");
    r->m = m;
    r->x = *x;
    r->done = 0;
    r->next = NULL;
    coll_issue(m, x, &r->rec);
    r->rec.async = 1;
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    if (!q->thread)
        co_resume(q); /* posts the call's first messages (or it waits behind the queue) */
    return r;
}

int mesh_test(mesh_req *r) {
    mesh_async *q = mesh_part_queue(r->m)->q;
    if (!q->thread && !r->done) co_resume(q);
    pthread_mutex_lock(&q->mu);
    int d = r->done;
    pthread_mutex_unlock(&q->mu);
    return d;
}

void mesh_wait(mesh_req *r) {
    mesh_wait_rec(r, NULL);
}

double mesh_wait_rec(mesh_req *r, mesh_call *out) {
    if (!r) return 0;
    mesh *m = r->m;
    mesh_async *q = mesh_part_queue(m)->q;
    act_slot *slot = &mesh_part_activity(m)->slot[0];
    const double t0 = mesh_now(), c0 = mesh_thread_cpu();
    /* the fields set at issue (the progress thread writes the others while it runs the call) */
    mesh_call w = {.seq = r->rec.seq,
                   .set_seq = r->rec.set_seq,
                   .op = r->rec.op,
                   .axes = r->rec.axes,
                   .count = r->rec.count,
                   .shift = r->rec.shift,
                   .async = 1};
    act_enter(slot, ACT_WAIT, &w);
    if (!q->thread) co_wait(q, r);
    pthread_mutex_lock(&q->mu);
    if (!r->done) {
        q->waiting++, q->kicks++;
        pthread_cond_signal(&q->kick);
        while (!r->done) pthread_cond_wait(&q->done, &q->mu);
        q->waiting--;
    }
    const mesh_call rec = r->rec; /* r goes back to the free list */
    r->next = q->free_list;
    q->free_list = r;
    pthread_mutex_unlock(&q->mu);
    act_leave(slot);
    const double t1 = mesh_now();
    stats_waited(mesh_part_stats(m), &rec, t0, t1, mesh_thread_cpu() - c0);
    if (out) *out = rec;
    return t1 - t0;
}

double mesh_progress_cpu(const mesh *m) {
    clockid_t id;
    struct timespec ts;
    const mesh_async *q = mesh_part_queue((mesh *)m)->q;
    if (q && !q->thread) return q->co_cpu;
    if (!q || pthread_getcpuclockid(q->th, &id) != 0 || clock_gettime(id, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void coll_async_destroy(mesh *m) {
    mesh_queue *mq = mesh_part_queue(m);
    mesh_async *q = mq->q;
    if (!q) return;
    if (!q->thread) {
        if (q->tail) co_wait(q, q->tail); /* the calls never waited for finish, as below */
        co_destroy(q);
    }
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    if (q->thread) pthread_join(q->th, NULL);
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
    mq->q = NULL;
}

void mesh_set_progress(mesh *m, mesh_progress mode) {
    const int inl = mode == MESH_PROGRESS_INLINE;
    mesh_queue *mq = mesh_part_queue(m);
    if (mq->q && mq->q->thread != (PROGRESS_THREAD && !inl)) {
        if (mq->q->head) return; /* calls in flight: the mode they run in stays */
        coll_async_destroy(m);   /* made again, the new way, at the next non-blocking call */
    }
    mq->inline_mode = inl;
}

mesh_progress mesh_get_progress(const mesh *m) {
    return PROGRESS_THREAD && !mesh_part_queue((mesh *)m)->inline_mode ? MESH_PROGRESS_THREAD
                                                                       : MESH_PROGRESS_INLINE;
}

/* Collective over: world (mesh_host_ranks, first on every rank). How many threads this host's
 * ranks run, `threads` each, against its cores: > 0 when they fit, 0 when they do not; -1 when a
 * link is emulated (its waits sleep until a delivery, on the progress thread). */
static int host_fits(const mesh *m, int threads) {
    const int host = mesh_host_ranks(m);
    for (int a = 0; a < mesh_ndims(m); a++)
        if (links_emulated(mesh_part_links((mesh *)m), a)) return -1;
    return (long)host * threads <= sysconf(_SC_NPROCESSORS_ONLN);
}

mesh_progress mesh_progress_auto(const mesh *m, int compute_threads, double core_share) {
    return host_fits(m, 1 + compute_threads) == 0 && core_share >= 0.9 ? MESH_PROGRESS_INLINE
                                                                       : MESH_PROGRESS_THREAD;
}

double mesh_spin_auto(const mesh *m, int compute_threads, double core_share) {
    return host_fits(m, compute_threads) > 0 && core_share >= 0.9 ? NAP_SPIN_OWN_CORE : NAP_SPIN;
}

void mesh_poll(mesh *m) {
#ifndef MESHTRAIN_SMPI /* simulated compute polls by itself (mesh_sim_compute) */
    mesh_async *q = mesh_part_queue(m)->q;
    if (q && !q->thread && q->head && !q->inside) co_resume(q);
#else
    (void)m;
#endif
}

#define ARGS(OP)                                                                                   \
    {                                                                                              \
        .op = OP, .a = a, .out = out, .in = in, .count = count, .alg = alg,                        \
        .wire = mesh_part_conf(m)->wire                                                            \
    }
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
    const mesh_axes a = {1, {axis, 0, 0}};
    const mesh_coll_call c = {MESH_OP_PPERMUTE, a, shift, count, 0, mesh_part_conf(m)->wire};
    return mesh_coll_start(m, &c, out, in);
}
mesh_req *mesh_iall_gather_bf16(mesh *m, mesh_axes a, uint16_t *out, const uint16_t *in,
                                int64_t count, mesh_alg alg) {
    const coll_args x = coll_args_bf16(a, out, in, count, alg);
    return enqueue(m, &x);
}
mesh_req *mesh_iall_to_allv(mesh *m, mesh_axes a, float *out, const float *in,
                            const int64_t *counts, mesh_alg alg) {
    const coll_args x = coll_args_a2av(m, a, out, in, counts, alg);
    return enqueue(m, &x);
}
mesh_req *mesh_coll_start_v(mesh *m, const mesh_coll_call *c, float *out, const float *in,
                            const int64_t *counts) {
    const coll_args x = coll_args_a2av_call(m, c, out, in, counts);
    return enqueue(m, &x);
}
mesh_req *mesh_coll_start(mesh *m, const mesh_coll_call *c, float *out, const float *in) {
    const coll_args x = coll_args_of(c, out, in);
    return enqueue(m, &x);
}
