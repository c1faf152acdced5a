/* pipe: pipeline schedules (GPipe, 1F1B) over the pipeline axis, with point-to-point sends of
 * activations and their gradients between neighbouring stages. Depends on model, par, mesh. */
#ifndef MT_TRAIN_PIPE_H
#define MT_TRAIN_PIPE_H
#include <stdint.h>
#include <stdio.h>
#include "mesh/coll.h"
#include "train/model/model.h"
#include "train/parallel/par.h"


typedef struct {
    int fwd;    /* 1 forward, 0 backward */
    int64_t mb; /* micro-batch */
} pipe_action;

typedef struct {
    int64_t peak_inflight; /* most micro-batches whose activations this stage held at once */
    int64_t act_bytes;     /* peak_inflight × activation bytes of one micro-batch */
    double bubble;         /* fraction of the step the stages waited for their neighbours (mean) */
    double bubble_ideal;   /* (P−1)/(M+P−1) */
} pipe_stats;

typedef struct pipe pipe;

/* Stage s of P's action list for M micro-batches; returns its length (2M). out: 2M entries. */
int pipe_actions(pipe_schedule schedule, int64_t P, int64_t s, int64_t M, pipe_action *out);
/* The schedule driver of plan pl's stage (its --schedule, its micro-batches), with the plan's
 * pipeline buffers; NULL out of memory. */
pipe *pipe_create(model *m, par *p, const plan *pl, mesh *mh);
void pipe_destroy(pipe *q); /* accepts NULL */
/* Collective over: world. One step's forwards and backwards of M micro-batches of
 * tokens[M·b, T+1] (this data shard's rows); gradients accumulate with grad scale `scale`.
 * Returns the mean loss over the data shard (from the last stage, on every rank). */
double pipe_step(pipe *q, const int32_t *tokens, float scale, pipe_stats *st);
/* Collective over: world. Forward only; the mean loss. */
double pipe_eval(pipe *q, const int32_t *tokens);
/* The schedule as a text timeline (stage × time, F/B and micro-batch), from a unit-time
 * simulation. */
void pipe_timeline(pipe_schedule schedule, int64_t P, int64_t M, FILE *out);
#endif
