/* async_impl: the private state of the non-blocking collectives, shared by coll_async.c (the
 * queue and the progress thread) and nap.c (the progress thread's naps, called by the engine). */
#ifndef MESHTRAIN_MESH_ASYNC_IMPL_H
#define MESHTRAIN_MESH_ASYNC_IMPL_H

#include "mesh/mesh_impl.h"

/* Under SimGrid's SMPI (MESHTRAIN_SMPI) a simulated rank is an actor that alone may call MPI, so
 * there is no progress thread: the queue runs on a coroutine of the rank's own actor instead
 * (sim_progress.c), in issue order on ctx[1] as the thread would. */
#ifdef MESHTRAIN_SMPI
#include <ucontext.h>
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
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_cond_t kick; /* a caller started waiting (mesh_wait): end the progress thread's nap */
    mesh_req *head, *tail, *free_list;
    int stop;
    int waiting;    /* callers blocked in mesh_wait */
    unsigned kicks; /* mesh_wait calls that found their call unfinished */
#ifdef MESHTRAIN_SMPI
    /* The coroutine that runs the queue (sim_progress.c): it runs until its call must wait for a
     * message, then returns to the caller with the requests it waits for (pend). */
    ucontext_t caller_uc, co_uc;
    void *stack;
    int inside;        /* running on the coroutine */
    MPI_Request *pend; /* its requests in flight while suspended (npend; 0: idle) */
    int npend;
    MPI_Request *all; /* the caller's wait over its own requests and pend (cap entries) */
    int *idx, cap;
#endif
};

#ifdef MESHTRAIN_SMPI
/* The non-blocking calls in SimGrid's simulated time (sim_progress.c). A simulated rank is one
 * actor, so the queue runs on a coroutine of it: a call runs until it would block, posting its
 * MPI_Isend/MPI_Irecv as the engine's schedule says, then hands the rank back to the caller; it
 * goes on whenever the caller polls (mesh_test, mesh_wait, a blocking collective's wait, the
 * simulated compute of mesh_sim_compute). Messages in flight progress in simulated time
 * meanwhile, so the collective overlaps the caller's compute. */
/* Switches to the coroutine (made at first use with serve as its body, which loops over the
 * queue and calls sim_idle when it is empty) until it waits or idles again. */
void sim_resume(mesh *m, void (*serve)(mesh *));
/* The coroutine's body, its queue empty: back to the caller until resumed. */
void sim_idle(mesh *m);
/* Drives the coroutine until r is done (mesh_wait), blocking in simulated time in between. */
void sim_wait(mesh *m, void (*serve)(mesh *), const mesh_req *r);
/* Frees the coroutine (its queue empty) and forgets the mesh as the one compute polls. */
void sim_destroy(mesh *m);
#endif

#endif
