/* async_impl: the private state of the non-blocking collectives, shared by coll_async.c (the
 * queue and the progress thread), co_progress.c (the queue on a coroutine of the caller's thread),
 * sim_progress.c (the SMPI build's simulated compute) and progress.c (the waiters: the progress
 * thread's naps, the coroutine's waits). */
#ifndef MESHTRAIN_MESH_ASYNC_IMPL_H
#define MESHTRAIN_MESH_ASYNC_IMPL_H

#include <ucontext.h>

#include "mesh/coll_impl.h"

/* Under SimGrid's SMPI (MESHTRAIN_SMPI) a simulated rank is an actor that alone may call MPI, so
 * there is no progress thread: the queue always runs on a coroutine of the rank's own actor
 * (co_progress.c), in issue order on context 1 as the thread would. On real cores the coroutine is
 * the inline mode (mesh_set_progress). */
#ifdef MESHTRAIN_SMPI
enum { PROGRESS_THREAD = 0 };
#else
enum { PROGRESS_THREAD = 1 };
#endif

struct mesh_req {
    mesh *m;
    coll_args x;
    mesh_call rec;
    int done;
    mesh_req *next;
};

struct mesh_async {
    mesh *m;    /* the mesh whose calls it runs */
    int thread; /* a progress thread runs the queue; 0: the coroutine (co_progress.c) */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_cond_t kick; /* a caller started waiting (mesh_wait): end the progress thread's nap */
    mesh_req *head, *tail, *free_list;
    int stop;
    int waiting;    /* callers blocked in mesh_wait */
    unsigned kicks; /* mesh_wait calls that found their call unfinished */
    /* The coroutine that runs the queue without a thread (co_progress.c): it runs until its call
     * must wait for a message, then returns to the caller with the requests it waits for
     * (pend). */
    void (*serve)(mesh *); /* its body (coll_async.c) */
    ucontext_t caller_uc, co_uc;
    void *stack;
    int inside;        /* running on the coroutine */
    MPI_Request *pend; /* its requests in flight while suspended (npend; 0: idle) */
    int npend;
    MPI_Request *all; /* the caller's wait over its own requests and pend (cap entries) */
    int *idx, cap;
    double co_cpu; /* CPU seconds spent on the coroutine (real cores; mesh_progress_cpu) */
};

/* The queue on a coroutine of the caller's thread (co_progress.c): a call runs until it would
 * block, posting its MPI_Isend/MPI_Irecv as the engine's schedule says, then hands the thread
 * back to the caller; it goes on whenever the caller polls (issue, mesh_test, mesh_poll,
 * mesh_wait, a blocking collective's or point-to-point wait, and in the SMPI build the simulated
 * compute of mesh_sim_compute). Messages in flight move meanwhile (in simulated time under SMPI;
 * on real cores as far as MPI moves them between polls), so the collective overlaps the caller's
 * compute. */
/* Switches to the coroutine (made at first use with q->serve as its body, which loops over the
 * queue and calls co_idle when it is empty) until it waits or idles again. */
void co_resume(mesh_async *q);
/* The coroutine's body, its queue empty: back to the caller until resumed. */
void co_idle(mesh_async *q);
/* Drives the coroutine until r is done (mesh_wait), blocking in MPI in between. */
void co_wait(mesh_async *q, const mesh_req *r);
/* Frees the coroutine (its queue empty). */
void co_destroy(mesh_async *q);
/* The blocking waits while the non-blocking calls run on a coroutine (the SMPI build, and the
 * inline mode on real cores): MPI_Waitsome's contract (outc, idx), but on the coroutine it hands
 * the thread back to the caller instead of blocking, and on the caller it also serves the
 * coroutine's requests in flight. co_active: whether the waits must go through co_waitsome (on
 * the coroutine, or the caller while the coroutine has requests in flight; q may be NULL). */
void co_waitsome(mesh_async *q, int n, MPI_Request *rq, int *outc, int *idx);
int co_active(const mesh_async *q);

#endif
