/* coll_engine: the step engine under coll.c. A phase is one 1D collective over one communicator
 * (a ring, bidirectional ring or line) run as a state machine, one step at a time; a chain is a
 * sequence of phases; several chains run concurrently (MULTI: every axis busy at once). Private
 * to mesh/. Depends on mesh_impl.h. */
#ifndef MT_MESH_COLL_ENGINE_H
#define MT_MESH_COLL_ENGINE_H
#include "mesh/mesh_impl.h"

typedef enum { PH_AG, PH_RS, PH_A2A, PH_PERM, PH_REORDER } ph_kind;
typedef enum { SCH_RING, SCH_BIDIR, SCH_LINE } ph_sched;

#define CHAIN_MAX_PHASES 8
#define ENGINE_MAX_CHAINS MESH_MAX_AXES

typedef struct {
    ph_kind kind;
    ph_sched sc;
    MPI_Comm comm;
    int n, r;       /* ranks on the communicator, my rank */
    int link_axis;  /* mesh axis whose emulated links and accounting this phase uses */
    /* blocks (AG, RS, A2A): block j at off[j] (or j·bs when off == NULL), length len[j] (or bs) */
    const int64_t *off, *len;
    int64_t bs;
    float *buf;       /* AG: the gathered array; RS: the result block; A2A, PERM: output */
    const float *src; /* AG: own block to copy in (NULL: already in place); RS, A2A, PERM: input */
    int shift;        /* PERM */
    /* REORDER: item copy between layouts (see coll.c reorder_items) */
    int nd, sizes[MESH_MAX_AXES], ord_src[MESH_MAX_AXES], ord_dst[MESH_MAX_AXES];
    int64_t item, s_stride, s_off, d_stride, d_off;

    /* run state */
    int step, nsteps, chain;
    mesh_ctx *ctx;
    int64_t (*link_bytes)[2];
    MPI_Request req[8];
    int nreq;
    double hdr_out[2], hdr_in[2];
    int hdr_in_used[2];
    float *sbuf[2][2]; /* [dir][parity]: RS partial sums, A2A messages, PERM scratch */
    int par[2];
    int have[2];             /* RS: a partial from the previous step in dir d */
    int64_t plo[2], plen[2]; /* its range within the block */
    int rblk[2];             /* block received this step in dir d (−1: none) */
    int64_t rlo[2], rlen[2];
} phase;

typedef struct {
    phase ph[CHAIN_MAX_PHASES];
    int nph, cur;
} chain;

/* Runs the chains to completion on context ctx, accounting sent bytes into link_bytes. */
void engine_run(mesh *m, mesh_ctx *ctx, chain *ch, int nch, int64_t (*link_bytes)[2]);
/* Copies the items of a layout ordered by ord_src into one ordered by ord_dst (see phase). */
void reorder_items(float *dst, const float *src, int nd, const int *sizes, const int *ord_src,
                   const int *ord_dst, int64_t item, int64_t s_stride, int64_t s_off,
                   int64_t d_stride, int64_t d_off);
#endif
