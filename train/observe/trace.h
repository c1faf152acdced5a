/* trace: the run's timeline in Chrome's trace-event format (opens in Perfetto and
 * chrome://tracing), and the notes that tell the hang forensics (mesh/where.h) which step,
 * layer and micro-batch a rank is in.
 *
 * One recorder per process: spans are opened by code that holds no handle to pass (model.c's
 * layers, pipe.c's micro-batches), so the recorder is module state, set up by trace_start and
 * written by trace_finish; trace_begin/trace_end do nothing before trace_start.
 *
 * The file (FILE of --trace). One process track per rank, named "rank 5 (x=1,y=0)":
 *   thread 0 "caller": step ⊃ forward/backward of micro-batch j ⊃ layer forward/backward ⊃
 *     blocking collectives, waits for non-blocking ones, p2p receives;
 *   thread 1 "progress thread": non-blocking collectives while they run;
 *   async slices "send to z+1": pipeline sends in flight (posted → completed); the sender's wait
 *   for one, and every receive ("recv from z-1"), are blocking calls on thread 0.
 * Complete ("X") events nest per thread; ts and dur are in µs since trace_start (a barrier, so
 * all ranks share t = 0 to within the barrier's skew). Collectives carry args: step, op, axes,
 * set_seq (the call's number on its axis set, equal across the set), count, bytes (the array V:
 * gathered / unreduced / reduced size), link_bytes (sent by this rank), alg, async, and the
 * transfer's own start (transfer_us: the part before it is the signature check or the queue).
 * "otherData" holds the mesh and every rank's coordinates; a rank whose buffer filled up says how
 * many events it dropped in a process label.
 *
 * Cost: events go to a buffer allocated at trace_start (no allocation and no I/O during a step;
 * past its capacity events are counted and dropped); trace_finish sorts and writes them: each
 * rank writes FILE.rank<r>, then rank 0 joins the parts into FILE and removes them (so the parts
 * must be on a filesystem rank 0 can read).
 * Depends on mesh/ (trace hooks, where-notes). */
#ifndef MT_TRAIN_TRACE_H
#define MT_TRAIN_TRACE_H
#include <stddef.h>
#include <stdint.h>

#include "mesh/mesh.h"

typedef enum {
    TRACE_STEP,     /* i = step */
    TRACE_MICRO_FWD, /* i = micro-batch: this stage's forward of it (exec.c) */
    TRACE_MICRO_BWD, /* i = micro-batch: its backward */
    TRACE_FWD,      /* i = layer */
    TRACE_BWD,      /* i = layer */
    TRACE_HEAD_FWD, /* final norm, unembedding, loss */
    TRACE_HEAD_BWD,
    TRACE_GRADS, /* completing the gradient reductions (par_finish_grads) */
    TRACE_OPT,   /* optimizer update and the parameter gathers after it */
    TRACE_EVAL,  /* a forward-only evaluation batch */
    TRACE_ATTN,  /* i = layer: its attention sublayer (norm, projections, attention, output and
                    its collectives), inside TRACE_FWD or TRACE_BWD */
    TRACE_MLP,   /* i = layer: its MLP sublayer (norm, gate/up/down, output and its collectives) */
    TRACE_EMBED_FWD, /* the embedding lookup (and its reduction over the tensor axis) */
    TRACE_EMBED_BWD, /* the residual gradient's gather and the embedding's gradient */
    TRACE_KIND_COUNT
} trace_kind;

/* Collective over: world. Starts the notes for mesh m (always) and, if path is non-empty, the
 * recording of up to `capacity` events on this rank. Returns 0, or −1 with the reason in err (the
 * same on every rank) when rank 0 cannot create path or memory runs out. */
int trace_start(mesh *m, const char *path, int64_t capacity, char *err, size_t errlen);
/* Not collective; the caller's thread only. Opens / closes a span of kind k (spans nest: end
 * closes the innermost, which must be of kind k). */
void trace_begin(trace_kind k, int64_t i);
void trace_end(trace_kind k);
/* Collective over: world. Writes the file (if recording) and stops. Returns 0, or −1 with err
 * (the same on every rank). *dropped (may be NULL) = events lost to a full buffer, all ranks. */
int trace_finish(int64_t *dropped, char *err, size_t errlen);
/* Not collective; the caller's thread. fn(ctx, k, begin) is called after every span of kind k
 * opens (begin = 1) and after it closes (begin = 0), from trace_start to trace_finish (the
 * step report's attribution of compute to passes and sublayers, report.h); NULL stops it. One
 * observer at a time. */
typedef void (*trace_observer)(void *ctx, trace_kind k, int begin);
void trace_observe(trace_observer fn, void *ctx);
/* Stops the observer if its ctx is `ctx` (another's stays). */
void trace_unobserve(void *ctx);
#endif
