/* mesh_impl: the private state of a mesh, shared by mesh.c, coll.c, coll_async.c, link.c, p2p.c
 * and where.c.
 * Not installed, not included by anything outside mesh/. Depends on MPI and pthreads. */
#ifndef MT_MESH_IMPL_H
#define MT_MESH_IMPL_H
#include <pthread.h>
#include "mesh/coll.h"
#include "mesh/link.h"
#include "mesh/links.h"
#include "mesh/mesh_mpi.h"
#include "mesh/where_impl.h"

/* The process-wide state (base.c): world rank and size from mesh_mpi_init, the program name of
 * error messages, the newest mesh (whose coordinates mesh_abort prints). */
extern int mesh_g_world_rank, mesh_g_world_size;
extern const struct mesh *mesh_g_last_mesh;
extern const char *mesh_g_progname;

/* Ordered axis sets are numbered 0..MESH_NSETS-1: 0 = {}, 1..3 one axis, 4..12 two, 13..39 three.
 */
#define MESH_NSETS 40
#define MESH_NSCRATCH 28
#define MESH_TRACE_LEN 1024
#define MESH_MAX_HOOKS 4  /* trace observers (mesh_add_trace_hook) */
#define MESH_MAX_LANES 16 /* most sub-block lanes of one RING/BIDIR collective (coll.c) */
#define MESH_CHUNK_DEFAULT (1 << 20) /* bytes per lane and block, see mesh_set_chunk */

/* One set of communicators. ctx[0] serves blocking calls (caller thread), ctx[1] the progress
 * thread, so that their messages never mix. Scratch slots grow on demand and are kept. */
typedef struct {
    mesh_comm world;
    MPI_Comm axis[MESH_MAX_AXES]; /* rank in axis[a] = coordinate along a */
    mesh_comm set[MESH_NSETS];    /* MPI_COMM_NULL for unused ids */
    float *scratch[MESH_NSCRATCH];
    int64_t scratch_n[MESH_NSCRATCH];
    int64_t *boff, *blen;        /* tab_n + 1 entries each: uneven AllReduce blocks */
    int64_t *loff, *llen, *lmid; /* tab_ln entries each: the lanes' sub-blocks */
    int64_t tab_n, tab_ln;       /* the tables' sizes, grown by comms_tables (0 at first) */
    mesh_wire wire;              /* the wire format of the call running on this context */
#ifdef MESHTRAIN_SMPI
    int no_data; /* the call running on this context leaves its floats alone (mesh_no_data) */
#endif
    link_clock clock;   /* the emulated links' virtual clock of the call running on this context */
    int64_t idle_polls; /* the engine's polls on this context that found nothing (mesh_call) */
} mesh_ctx;

typedef struct mesh_async mesh_async;

/* The communicator of the ordered axis set a on context c (comms.c): made at mesh_create, except
 * in the SMPI build, where a set of two or three axes gets its communicator at its first use. */
MPI_Comm mesh_ctx_set(const struct mesh *m, mesh_ctx *c, mesh_axes a);
/* Makes context c's communicators (collective over MPI_COMM_WORLD) and offset tables, and frees
 * them (comms.c). */
void comms_create(struct mesh *m, mesh_ctx *c);
void comms_free(mesh_ctx *c);
/* Grows context c's offset tables for a call over n ranks in at most `lanes` lanes (comms.c):
 * sized by the calls made, so that a slice of thousands of ranks whose calls span one axis does
 * not hold MESH_MAX_LANES entries per rank of the slice per context. */
void comms_tables(mesh_ctx *c, int64_t n, int lanes);

typedef struct {
    mesh_trace_fn done; /* NULL: a free entry */
    mesh_wait_fn waited;
    void *ctx;
} mesh_hook;

struct mesh {
    int rank, nranks, ndims;
    int size[MESH_MAX_AXES], coord[MESH_MAX_AXES], wrap[MESH_MAX_AXES];
    char name[MESH_MAX_AXES];
    mesh_ctx ctx[2];
    mesh_alg default_alg; /* DEFAULT = BIDIR for one axis, MULTI for several */
    int verify;           /* debug: check call signatures agree across ranks */
    int64_t chunk;        /* lane size in bytes (mesh_set_chunk); 0: no lanes */
    mesh_wire wire;       /* format of the collectives started from now on (mesh_set_wire) */

    mesh_links links; /* the emulated links (links.h) */

    /* accounting; guarded by acct_mu */
    pthread_mutex_t acct_mu;
    int64_t seq;
    int64_t set_seq[MESH_NSETS]; /* collectives started over each axis set (mesh_call.set_seq) */
    mesh_stat stat[MESH_OP_COUNT][MESH_MAX_AXES + 1]; /* [op][major axis + 1], [op][0] = none */
    mesh_call trace[MESH_TRACE_LEN];
    mesh_hook hook[MESH_MAX_HOOKS];

    mesh_async *async;
    int progress_inline;         /* mesh_set_progress(MESH_PROGRESS_INLINE) */
    MPI_Comm p2p[MESH_MAX_AXES]; /* point-to-point messages along each axis (p2p.c) */
    where_state where;           /* hang forensics (where.c) */
};

int mesh_set_id(mesh_axes a);
/* Whether the call running on context c works on its floats: always, but in the SMPI build
 * under mesh_set_no_data. */
#ifdef MESHTRAIN_SMPI
#define CTX_DATA(c) (!(c)->no_data)
#else
#define CTX_DATA(c) 1
#endif

/* Grows scratch slot `slot` of ctx to hold n floats; returns it. */
float *mesh_scratch(mesh_ctx *c, int slot, int64_t n);

/* coll.c: runs one collective on context ci, filling rec's bytes and times. Used by blocking
 * calls (ci = 0) and by the progress thread (ci = 1). */
typedef struct {
    mesh_op op;
    mesh_axes a;
    int axis, shift; /* ppermute */
    float *out;
    const float *in;
    int64_t count;
    mesh_alg alg;
    mesh_wire wire; /* the call's own (mesh_coll_call), or the mesh's default (mesh_set_wire) */
} coll_args;
/* The arguments of the call c (checked: an op of mesh_coll_run, one axis for ppermute). */
coll_args coll_args_of(const mesh_coll_call *c, float *out, const float *in);
void coll_execute(mesh *m, int ci, const coll_args *x, mesh_call *rec);
/* coll_direct.c: runs x (not ppermute) with MESH_ALG_DIRECT on ctx, accounting into link_bytes. */
void direct_run(mesh *m, mesh_ctx *ctx, const coll_args *x, int64_t (*link_bytes)[2]);
/* Accounting: assigns the sequence number at issue; records completion. */
void coll_record_begin(mesh *m, const coll_args *x, mesh_call *rec);
void coll_record_end(mesh *m, const mesh_call *rec);
void coll_async_destroy(mesh *m);
#endif
