/* coll_engine: the step engine under coll.c. A phase is one 1D collective over one communicator
 * (a ring, bidirectional ring or line); each of its two directions is a stream of steps that
 * advances on its own (a step's sends wait only for the receive they forward, a receive only for
 * its buffer). A chain is a sequence of phases; several chains run concurrently: the parts of
 * MULTI (every axis busy at once) or the lanes of a large RING/BIDIR collective (each block cut
 * into sub-blocks, so transfers, copies and adds of different lanes overlap: a pipeline).
 * Private to mesh/. Depends on coll_impl.h. */
#ifndef MT_MESH_COLL_ENGINE_H
#define MT_MESH_COLL_ENGINE_H
#include "mesh/coll_impl.h"

typedef enum { PH_AG, PH_RS, PH_A2A, PH_PERM, PH_REORDER } ph_kind;
typedef enum { SCH_RING, SCH_BIDIR, SCH_LINE } ph_sched;

#define CHAIN_MAX_PHASES 8
#define ENGINE_MAX_CHAINS MESH_MAX_LANES
/* Receive buffers per direction (RS, A2A): a receive waits for the send of NBUF−1 steps
 * earlier (which read the buffer it lands in), not for the step before's. */
#define ENGINE_NBUF 3
#define ENGINE_MAXT 3                                     /* messages per step and direction */
#define ENGINE_RQ ((ENGINE_MAXT + 1) * (ENGINE_NBUF + 1)) /* requests per direction */

/* Run state of one direction. Step s's receive lands in sb[s % NBUF] (RS, A2A) and is forwarded
 * by step s+1's send from there. */
typedef struct {
    int sent, posted, done; /* steps 1..sent: sends posted; 1..posted: receives posted;
                               1..done: received and processed */
    double hdr_in[2];       /* emulated delivery of the receive in flight, wall and virtual
                               clock (0: none) */
    double hdr_out[ENGINE_NBUF][2];
    double vclock; /* virtual time at which this stream's latest data is ready */
    float *sb[ENGINE_NBUF], *pack;
    uint16_t *wsend[ENGINE_NBUF], *wrecv; /* bf16 wire: staged messages of a step */
} stream;

typedef struct {
    ph_kind kind;
    ph_sched sc;
    MPI_Comm comm;
    int n, r;      /* ranks on the communicator, my rank */
    int link_axis; /* mesh axis whose emulated links and accounting this phase uses */
    /* blocks (AG, RS, A2A): block j at off[j] (or j·bs when off == NULL), length len[j] (or bs) */
    const int64_t *off, *len;
    const int64_t *mid; /* where block j splits into halves (NULL: len − len/2) */
    int64_t bs;
    float *buf;       /* AG: the gathered array; RS: the result block; A2A, PERM: output */
    const float *src; /* AG: own block to copy in (NULL: already in place); RS, A2A, PERM: input */
    int shift;        /* PERM */
    /* REORDER: item copy between layouts (see coll.c reorder_items) */
    int nd, sizes[MESH_MAX_AXES], ord_src[MESH_MAX_AXES], ord_dst[MESH_MAX_AXES];
    int64_t item, s_stride, s_off, d_stride, d_off;

    /* run state (set by engine_run) */
    int nsteps, chain, started, copied;
    mesh_wire wire;      /* the call's wire format (eng_ctx.wire) */
    const coll_env *env; /* the call's environment (its context, links, virtual clock) */
    float *arena;        /* this chain's scratch */
    int64_t (*link_bytes)[2];
    MPI_Request *rq; /* 2 × ENGINE_RQ: per direction the receive's data and header requests,
                        then NBUF send slots of data and header requests */
    stream st[2];
} phase;

typedef struct chain {
    phase ph[CHAIN_MAX_PHASES];
    int nph, cur;
    double vclock; /* virtual time at which the finished phases' data is ready */
} chain;

/* Runs the chains to completion in environment e, accounting sent bytes into link_bytes. On
 * emulated links the chains start at the context's virtual clock, which ends at their last
 * virtual delivery. While it waits, it publishes how far the chains got (e->slot). */
void engine_run(const coll_env *e, chain *ch, int nch, int64_t (*link_bytes)[2]);
/* Copies the items of a layout ordered by ord_src into one ordered by ord_dst (see phase). */
void reorder_items(float *dst, const float *src, int nd, const int *sizes, const int *ord_src,
                   const int *ord_dst, int64_t item, int64_t s_stride, int64_t s_off,
                   int64_t d_stride, int64_t d_off);
#endif
