/* proc: the process-wide bottom of mesh/ (see proc.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "mesh/proc.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/mesh_mpi.h"
#include "mesh/parts.h"

static int g_world_rank = 0, g_world_size = 1;
static const char *g_progname = "meshtrain";

/* The current mesh and its coordinates, for mesh_abort (parts.h). */
static mesh *_Atomic g_current;
static char g_current_coords[64];

void proc_set_world(int rank, int size) {
    g_world_rank = rank, g_world_size = size;
}
int mesh_world_rank(void) {
    return g_world_rank;
}
int mesh_world_size(void) {
    return g_world_size;
}
void mesh_set_progname(const char *name) {
    g_progname = name ? name : "meshtrain";
}
const char *proc_progname(void) {
    return g_progname;
}

mesh *mesh_current(void) {
    return atomic_load(&g_current);
}
void mesh_current_attach(mesh *m, const char *coords) {
    mesh *none = NULL;
    if (atomic_load(&g_current)) return;
    snprintf(g_current_coords, sizeof g_current_coords, "%s", coords);
    atomic_compare_exchange_strong(&g_current, &none, m);
}
void mesh_current_detach(mesh *m) {
    mesh *was = m;
    if (atomic_compare_exchange_strong(&g_current, &was, NULL)) g_current_coords[0] = 0;
}

double mesh_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mesh_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

_Noreturn void mesh_abort(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "meshtrain: rank %d %s: %s:%d: %s\n", g_world_rank,
            mesh_current() ? g_current_coords : "", file, line, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    abort();
}

void mesh_log(const char *fmt, ...) {
    if (g_world_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}
