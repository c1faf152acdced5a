/* async_impl: the private state of the non-blocking collectives, shared by coll_async.c (the
 * queue and the progress thread) and nap.c (the progress thread's naps, called by the engine). */
#ifndef MESHTRAIN_MESH_ASYNC_IMPL_H
#define MESHTRAIN_MESH_ASYNC_IMPL_H

#include "mesh/mesh_impl.h"

/* Under SimGrid's SMPI (MESHTRAIN_SMPI) a simulated rank is an actor that alone may call MPI, so
 * there is no progress thread: a non-blocking call runs to completion when it is started, in issue
 * order, on ctx[1] as the thread would. Results and the order of messages are the same; the call
 * does not overlap the caller's compute. */
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
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_cond_t kick; /* a caller started waiting (mesh_wait): end the progress thread's nap */
    mesh_req *head, *tail, *free_list;
    int stop;
    int waiting;    /* callers blocked in mesh_wait */
    unsigned kicks; /* mesh_wait calls that found their call unfinished */
};

#endif
