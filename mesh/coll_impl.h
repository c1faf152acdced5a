/* coll_impl: the collective engine's private interface, shared by coll.c (the plans, the blocking
 * calls, the settings), coll_engine.c (the step engine), coll_direct.c (DIRECT), coll_ctx.c (the
 * engine's state per context) and coll_async.c (the queue of non-blocking calls). A call runs on
 * one of a mesh's two contexts (0: the caller's blocking calls; 1: the queue), each with its own
 * communicators (comms.h) and engine state (eng_ctx), so that their messages never mix.
 * Private to mesh/. Depends on MPI and on the parts a collective uses: topo.h, comms.h, links.h,
 * activity.h, stats.h (through coll_env) and progress (the queue, opaque here). */
#ifndef MT_MESH_COLL_IMPL_H
#define MT_MESH_COLL_IMPL_H
#include "mesh/activity.h"
#include "mesh/coll.h"
#include "mesh/comms.h"
#include "mesh/links.h"
#include "mesh/mesh_mpi.h"
#include "mesh/topo.h"

typedef struct mesh_async mesh_async;

#define MESH_MAX_LANES 16            /* most sub-block lanes of one RING/BIDIR collective */
#define MESH_CHUNK_DEFAULT (1 << 20) /* bytes per lane and block, see mesh_set_chunk */

/* The collectives' settings (coll.c): what mesh_set_default_alg, mesh_set_chunk, mesh_set_wire
 * and mesh_set_verify set. Set identically on every rank, between calls. */
typedef struct coll_conf coll_conf;
struct coll_conf {
    mesh_alg default_alg; /* DEFAULT = BIDIR for one axis, MULTI for several */
    int verify;           /* debug: check call signatures agree across ranks */
    int64_t chunk;        /* lane size in bytes; 0: no lanes */
    mesh_wire wire;       /* the format of the calls that take none (mesh_set_wire) */
};

/* The engine's state on one context (coll_ctx.c): scratch slots that grow on demand and are
 * kept, offset tables grown to the calls made, and the call in progress's format, virtual clock
 * and idle polls. */
#define ENG_NSCRATCH 30
typedef struct eng_ctx eng_ctx;
struct eng_ctx {
    float *scratch[ENG_NSCRATCH];
    int64_t scratch_n[ENG_NSCRATCH];
    int64_t *boff, *blen;        /* tab_n + 1 entries each: uneven AllReduce blocks */
    int64_t *loff, *llen, *lmid; /* tab_ln entries each: the lanes' sub-blocks */
    int64_t tab_n, tab_ln;       /* the tables' sizes, grown by eng_tables (0 at first) */
    mesh_wire wire;              /* the wire format of the call running on this context */
#ifdef MESHTRAIN_SMPI
    int no_data; /* the call running on this context leaves its floats alone (mesh_no_data) */
#endif
    link_clock clock;   /* the emulated links' virtual clock of the call running here */
    int64_t idle_polls; /* the engine's polls on this context that found nothing (mesh_call) */
};
/* Grows scratch slot `slot` of c to hold n floats; returns it. */
float *eng_scratch(eng_ctx *c, int slot, int64_t n);
/* Grows c's offset tables for a call over n ranks in at most `lanes` lanes: sized by the calls
 * made, so that a slice of thousands of ranks whose calls span one axis does not hold
 * MESH_MAX_LANES entries per rank of the slice per context. */
void eng_tables(eng_ctx *c, int64_t n, int lanes);
void eng_free(eng_ctx *c);

/* Whether the call running on context c works on its floats: always, but in the SMPI build
 * under mesh_set_no_data. */
#ifdef MESHTRAIN_SMPI
#define CTX_DATA(c) (!(c)->no_data)
#else
#define CTX_DATA(c) 1
#endif

/* One call's environment: the parts it uses, on one context. */
typedef struct {
    const mesh_topo *topo;
    mesh_comms *comms;
    eng_ctx *ctx;
    mesh_links *links;
    act_slot *slot; /* where it publishes what it does (activity.h) */
    mesh_async *q;  /* the queue, for the waiters (progress.h); NULL: none yet */
    int on_thread;  /* context 1 (the queue) */
    const coll_conf *conf;
} coll_env;
/* The environment of a call of m on context ci. */
coll_env coll_env_of(mesh *m, int ci);

/* One collective's arguments. */
typedef struct {
    mesh_op op;
    mesh_axes a;
    int axis, shift; /* ppermute */
    float *out;
    const float *in;
    int64_t count;
    mesh_alg alg;
    mesh_wire wire; /* the call's own (mesh_coll_call), or the mesh's default (mesh_set_wire) */
    int bf16_mem;   /* out and in hold 2-byte elements, count of them, moved bit for bit as
                       count/2 four-byte units (mesh_all_gather_bf16); recorded in bf16 */
    const int64_t *vcounts; /* AllToAllv (mesh_all_to_allv): the n×n counts, row = sender; count
                               is then the largest; NULL for every other call */
} coll_args;
/* The arguments of the call c (checked: an op of mesh_coll_run, one axis for ppermute). */
coll_args coll_args_of(const mesh_coll_call *c, float *out, const float *in);
/* The arguments of mesh_all_gather_bf16 (count even, checked). */
coll_args coll_args_bf16(mesh_axes a, uint16_t *out, const uint16_t *in, int64_t count,
                         mesh_alg alg);
/* rec of a call with arguments x issued now (stats.h's numbering). */
void coll_issue(mesh *m, const coll_args *x, mesh_call *rec);
/* Runs the call x on m's caller context (context 0), numbered and recorded: the blocking API. */
void coll_run_blocking(mesh *m, const coll_args *x);
/* Runs one collective in environment e, filling rec's algorithm, format, bytes and times. */
void coll_execute(const coll_env *e, const coll_args *x, mesh_call *rec);
/* coll_a2av.c: the arguments of mesh_all_to_allv (count: the matrix's largest). */
coll_args coll_args_a2av(mesh *m, mesh_axes a, float *out, const float *in, const int64_t *counts,
                         mesh_alg alg);
/* The AllToAllv a plan's call c describes (c->op MESH_OP_ALL_TO_ALL; its algorithm and wire
 * format): mesh_coll_run_v's and mesh_coll_start_v's arguments. */
coll_args coll_args_a2av_call(mesh *m, const mesh_coll_call *c, float *out, const float *in,
                              const int64_t *counts);
/* coll_direct.c: runs the AllToAllv x with MESH_ALG_DIRECT: every block its own size. */
void direct_a2av(const coll_env *e, const coll_args *x, int64_t (*lb)[2]);
/* coll_direct.c: runs x (not ppermute) with MESH_ALG_DIRECT, accounting into link_bytes. */
void direct_run(const coll_env *e, const coll_args *x, int64_t (*link_bytes)[2]);
/* coll_async.c: waits for the queue's calls and frees it (from mesh_destroy). */
void coll_async_destroy(mesh *m);
#endif
