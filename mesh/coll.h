/* coll: the book's collectives as explicit algorithms over the mesh's links, plus MPI's built-ins
 * as the baseline, on float buffers, blocking and non-blocking, every call accounted.
 * Depends on mesh.h and MPI.
 *
 * Layouts. Over an ordered axis set A of n ranks (index i = mesh_axes_index):
 *  - all_gather: in[count] from each rank → out[n·count], block i at out + i·count.
 *  - reduce_scatter: in[n·count] (unreduced) → out[count] = Σ_ranks in[i·count ...], block i.
 *  - all_reduce: in[count] → out[count] = Σ_ranks in (any count).
 *  - all_to_all: in[n·count] → out[n·count]; block j of rank i's input lands as block i of
 *    rank j's output.
 *  - ppermute (neighbour shift) along ONE axis by `shift` (+1: send to coord+1, receive from
 *    coord−1); on an open axis the ends send/receive nothing (their out is left untouched).
 * Reductions add in a fixed order, so results are deterministic and identical on every rank.
 * in == out is allowed for all_reduce (in place); all_gather allows in == out + i·count. */
#ifndef MT_MESH_COLL_H
#define MT_MESH_COLL_H
#include "mesh/mesh.h"

typedef enum {
    MESH_ALG_DEFAULT = 0, /* whatever mesh_set_default_alg chose (initially BIDIR) */
    MESH_ALG_RING,        /* unidirectional ring: |X|−1 hops of V/|X| */
    MESH_ALG_BIDIR,       /* bidirectional ring (line on an open axis, using only real links) */
    MESH_ALG_SEQ,         /* multi-axis: axis by axis, each with the bidirectional algorithm */
    MESH_ALG_MULTI,       /* multi-axis: payload split across axes, all axes' links at once */
    MESH_ALG_MPI,         /* MPI's built-in on the axis-set communicator */
    MESH_ALG_COUNT
} mesh_alg;

typedef enum {
    MESH_OP_ALL_GATHER,
    MESH_OP_REDUCE_SCATTER,
    MESH_OP_ALL_REDUCE,
    MESH_OP_ALL_TO_ALL,
    MESH_OP_PPERMUTE,
    MESH_OP_COUNT
} mesh_op;

const char *mesh_alg_name(mesh_alg a);
const char *mesh_op_name(mesh_op op);
/* Parses "ring", "bidir", "seq", "multi", "mpi"; returns -1 when unknown. */
int mesh_alg_parse(const char *s);
void mesh_set_default_alg(mesh *m, mesh_alg a);

/* Blocking. Collective over: the axes in `a`. */
void mesh_all_gather(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg);
void mesh_reduce_scatter(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                         mesh_alg alg);
void mesh_all_reduce(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg);
void mesh_all_to_all(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg);
/* Collective over: axis. */
void mesh_ppermute(mesh *m, int axis, int shift, float *out, const float *in, int64_t count);

/* Non-blocking: start returns a handle; buffers must stay valid until mesh_wait. Calls on one
 * mesh complete in the order they were started. */
typedef struct mesh_req mesh_req;
mesh_req *mesh_iall_gather(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                           mesh_alg alg);
mesh_req *mesh_ireduce_scatter(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                               mesh_alg alg);
mesh_req *mesh_iall_reduce(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                           mesh_alg alg);
/* Returns 1 if done (the handle stays valid until mesh_wait). Drives progress. */
int mesh_test(mesh_req *r);
/* Completes and frees the handle. Accepts NULL. */
void mesh_wait(mesh_req *r);

/* ---- accounting ---- */
typedef struct {
    int64_t calls;
    int64_t bytes;      /* bytes this rank sent over links */
    double seconds;     /* wall time from start to completion, summed */
    double wait_seconds; /* time the caller spent blocked in this op (blocking call or wait) */
} mesh_stat;
/* Totals for op over every axis set (axis < 0) or for sets whose major axis is `axis`. */
mesh_stat mesh_stats(const mesh *m, mesh_op op, int axis);
void mesh_stats_reset(mesh *m);
#endif
