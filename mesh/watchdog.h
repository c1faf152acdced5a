/* watchdog: the --timeout watchdog's state (watchdog.c; the public calls are where.h's), an
 * observer of the rank's activity (activity.h): its thread reads the published slots and step
 * and, when one has lasted too long, prints where-lines and ends the job. Private to mesh/.
 * Depends on MPI and pthreads. */
#ifndef MT_MESH_WATCHDOG_H
#define MT_MESH_WATCHDOG_H
#include <pthread.h>
#include <stdatomic.h>

#include "mesh/mesh_mpi.h"

typedef struct mesh_watchdog mesh_watchdog;
struct mesh_watchdog {
    mesh *m; /* the mesh it watches */
    pthread_t thread;
    int running; /* 0: off; 1: communicator only (the thread failed, or stopped); 2: running */
    double timeout;
    double grace; /* seconds to wait for the others' where-lines (WD_GRACE in watchdog.c) */
    MPI_Comm comm;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;            /* guarded by mu */
    atomic_int reported; /* this rank printed its where-line for a watchdog */
};

/* Not collective: stops the thread (its communicator stays until watchdog_destroy or
 * MPI_Finalize), so that no MPI call of it races with MPI_Finalize. */
void watchdog_stop_thread(mesh_watchdog *w);
/* Collective over: world. Stops the watchdog and frees its communicator (no-op if none). */
void watchdog_destroy(mesh_watchdog *w);
#endif
