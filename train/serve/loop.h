/* loop: one step of the serving loop on every rank. Rank 0 holds the scheduler: it plans the
 * step, sends the plan to every rank (mesh_bcast_bytes: the scheduler's decision for each
 * iteration, which sequences, which tokens, which KV blocks), every rank runs it (engine_step),
 * and rank 0 hands the sampled tokens back to the scheduler. The other ranks only follow: they
 * wait for the next plan (napping, so an idle server costs no core) until rank 0 sends the exit
 * plan. With speculative decoding (engine_spec) the engine's step is serve_spec_step and an item
 * may yield several tokens. Depends on batcher, engine, spec_engine, mesh. */
#ifndef MT_TRAIN_SERVE_LOOP_H
#define MT_TRAIN_SERVE_LOOP_H
#include <stdint.h>

#include "mesh/mesh.h"
#include "train/serve/engine.h"
#include "train/serve/batcher.h"

typedef struct {
    uint8_t *buf;
    int64_t cap;
    int32_t *next, *counts;  /* a step's tokens and, per sampling item, how many (drafting: 1+) */
    float *lp;               /* their log-probability records (batch_plan_lp_floats) */
    engine_xfer xfer;        /* the step's KV transfers on this rank (disaggregated serving) */
    struct serve_spec *spec; /* a drafter's rank of its own (no target engine): its part */
} serve_wire;

/* Buffers of a plan and of its wire form for these options, on every rank. −1 out of memory. */
int serve_loop_init(batch_plan *p, serve_wire *w, const batch_opts *o);
void serve_loop_free(batch_plan *p, serve_wire *w);

/* Collective over: world when there is work. On rank 0 (s given, s NULL elsewhere): plans the
 * step; an empty plan is sent to nobody and returns 0 at once. Then every rank holds the plan in
 * p and runs it (a rank of a drafter of its own, e NULL, runs w->spec's part); rank 0 commits its
 * tokens to s, calling emit(ctx, ...) for each. Returns the plan's items (> 0), 0 (rank 0: nothing
 * to do), or −1 when rank 0 sent the exit plan. st: this rank's share of the step. */
int32_t serve_loop_step(serve_engine *e, mesh *m, batcher *s, batch_plan *p, serve_wire *w,
                        batch_emit_fn emit, void *ctx, gen_step *st);
/* Collective over: world (rank 0 sends, the others are in serve_loop_step). Ends the loop. */
void serve_loop_exit(mesh *m, batch_plan *p, serve_wire *w);
#endif
