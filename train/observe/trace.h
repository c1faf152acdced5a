/* trace: the run's timeline in Chrome's trace-event format (opens in Perfetto and
 * chrome://tracing), and the notes that tell the hang forensics (mesh/where.h) which step,
 * layer and micro-batch a rank is in.
 *
 * A recorder is a handle (trace_create), passed to what opens spans: the trainer keeps it and
 * hands it to the model (model_set_trace: its layers and sublayers), the step executor (its
 * micro-batches) and the step report (which observes the spans). trace_begin/trace_end on a NULL
 * handle, or after trace_finish, do nothing: code run without a trace (tests, generate) passes
 * none.
 *
 * The file (FILE of --trace). One process track per rank, named "rank 5 (x=1,y=0)":
 *   thread 0 "caller": step ⊃ forward/backward of micro-batch j ⊃ layer forward/backward ⊃
 *     blocking collectives, waits for non-blocking ones, p2p receives;
 *   thread 1 "progress thread": non-blocking collectives while they run;
 *   async slices "send to z+1": pipeline sends in flight (posted → completed); the sender's wait
 *   for one, and every receive ("recv from z-1"), are blocking calls on thread 0.
 * Complete ("X") events nest per thread; ts and dur are in µs since trace_create (a barrier, so
 * all ranks share t = 0 to within the barrier's skew). Collectives carry args: step, op, axes,
 * set_seq (the call's number on its axis set, equal across the set), count, bytes (the array V:
 * gathered / unreduced / reduced size), link_bytes (sent by this rank), alg, async, and the
 * transfer's own start (transfer_us: the part before it is the signature check or the queue).
 * "otherData" holds the mesh and every rank's coordinates; a rank whose buffer filled up says how
 * many events it dropped in a process label.
 *
 * Cost: events go to a buffer allocated at trace_create (no allocation and no I/O during a step;
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

typedef struct trace trace;

/* Collective over: world. Starts the notes for mesh m (always) and, if path is non-empty, the
 * recording of up to `capacity` events on this rank. Returns the handle, or NULL with the reason
 * in err (the same on every rank) when rank 0 cannot create path or memory runs out. */
trace *trace_create(mesh *m, const char *path, int64_t capacity, char *err, size_t errlen);
/* Not collective; the caller's thread only. Opens / closes a span of kind k (spans nest: end
 * closes the innermost, which must be of kind k). t may be NULL (nothing happens). */
void trace_begin(trace *t, trace_kind k, int64_t i);
void trace_end(trace *t, trace_kind k);
/* Collective over: world. Writes the file (if recording) and stops: spans are no-ops from here
 * and the observer is gone; the handle stays valid until trace_destroy. Returns 0, or −1 with err
 * (the same on every rank). *dropped (may be NULL) = events lost to a full buffer, all ranks. */
int trace_finish(trace *t, int64_t *dropped, char *err, size_t errlen);
/* Not collective; before mesh_destroy. Frees t (accepts NULL); one not finished writes nothing. */
void trace_destroy(trace *t);
/* Not collective; the caller's thread. fn(ctx, k, begin) is called after every span of kind k
 * opens (begin = 1) and after it closes (begin = 0), until trace_finish (the step report's
 * attribution of compute to passes and sublayers, report.h); NULL stops it. One observer at a
 * time; t may be NULL (nothing is observed). */
typedef void (*trace_observer)(void *ctx, trace_kind k, int begin);
void trace_observe(trace *t, trace_observer fn, void *ctx);
/* Stops the observer if its ctx is `ctx` (another's stays). t may be NULL. */
void trace_unobserve(trace *t, void *ctx);
#endif
