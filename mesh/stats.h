/* stats: the accounting of a mesh's calls (mesh_stats) and its trace (mesh_trace_read, the
 * observers of mesh_add_trace_hook): the numbering of calls at issue (seq, and set_seq per axis
 * set) and their records at completion. One per mesh, shared by the threads that complete calls
 * (guarded by its mutex); no MPI, no mesh, so it is tested alone (tests/mesh/test_stats.c).
 * Private to mesh/; the public calls are coll.h's. Depends on coll.h (mesh_call, mesh_stat) and
 * topo.h (set ids). */
#ifndef MT_MESH_STATS_H
#define MT_MESH_STATS_H
#include <pthread.h>

#include "mesh/coll.h"
#include "mesh/topo.h"

#define STATS_TRACE_LEN 1024 /* the trace's ring of the latest calls */
#define STATS_MAX_HOOKS 4    /* observers (mesh_add_trace_hook) */

typedef struct {
    mesh_trace_fn done; /* NULL: a free entry */
    mesh_wait_fn waited;
    void *ctx;
} stats_hook;

typedef struct mesh_stats_part mesh_stats_part;
struct mesh_stats_part {
    pthread_mutex_t mu;
    int64_t seq;                                      /* calls issued on this rank */
    int64_t set_seq[MESH_NSETS];                      /* collectives issued over each axis set */
    mesh_stat stat[MESH_OP_COUNT][MESH_MAX_AXES + 1]; /* [op][major axis + 1], [op][0] = none */
    mesh_call trace[STATS_TRACE_LEN];
    stats_hook hook[STATS_MAX_HOOKS];
};

void stats_init(mesh_stats_part *s);
void stats_destroy(mesh_stats_part *s);
/* A call issued now: clears rec and fills what is known at issue (op, axes, count, shift; its
 * seq, and set_seq for a collective; t_issue and the caller's CPU time). */
void stats_issue(mesh_stats_part *s, mesh_call *rec, mesh_op op, mesh_axes axes, int64_t count,
                 int shift);
/* rec completed: adds it to the totals (a blocking call's wait too: it completed on the
 * caller's thread) and the trace, then tells the observers, outside the lock. */
void stats_complete(mesh_stats_part *s, const mesh_call *rec);
/* The caller waited in mesh_wait for the non-blocking call rec over [t0, t1] and used `cpu`
 * seconds of CPU meanwhile: added to its op's wait totals; the observers' waited(). */
void stats_waited(mesh_stats_part *s, const mesh_call *rec, double t0, double t1, double cpu);
/* Totals of op over every axis set (axis < 0) or over the sets whose major axis is `axis`. */
mesh_stat stats_get(mesh_stats_part *s, mesh_op op, int axis);
void stats_reset(mesh_stats_part *s);
/* Up to max records with seq >= from_seq, oldest first; returns how many. */
int stats_trace_read(mesh_stats_part *s, int64_t from_seq, mesh_call *out, int max);
/* Returns 0, or −1 when STATS_MAX_HOOKS observers are registered already. */
int stats_add_hook(mesh_stats_part *s, mesh_trace_fn done, mesh_wait_fn waited, void *ctx);
void stats_remove_hook(mesh_stats_part *s, void *ctx);
#endif
