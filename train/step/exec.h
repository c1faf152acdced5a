/* exec: the one step executor. It runs this rank's list of actions (plan_actions: forwards and
 * backwards of micro-batches in activation slots, and a pipeline's receives and sends of their
 * activations and gradients) on the model, for a training step or an evaluation. A run without a
 * pipeline axis is the trivial list F0 B0 F1 B1 ...; GPipe, 1F1B, interleaved 1F1B and zero
 * bubble H1 are other lists (the last two calc's tables, with chunks and split backwards); the
 * model is driven the same way in every case (model_stage_fwd, model_stage_bwd), the micro-batch
 * loop, the loss's mean over the global batch and the gradients' scale exist here once.
 * Depends on the plan and the sharded run (train/parallel), the model and mesh/. */
#ifndef MT_TRAIN_EXEC_H
#define MT_TRAIN_EXEC_H
#include <stdint.h>

#include "mesh/mesh.h"
#include "train/model/model.h"
#include "train/parallel/par.h"
#include "train/parallel/plan.h"

/* Pipelining's figures of a step (all zero without a pipeline axis). The pipeline phase is the
 * step's actions, from each rank's first to its last (not the loss's agreement, the gradients'
 * reductions or the update after it); its makespan is the longest rank's, as calc's simulator
 * counts it with the ranks starting together. */
typedef struct {
    int64_t peak_inflight; /* most micro-batches whose activations this stage held at once */
    int64_t act_bytes;     /* peak_inflight × activation bytes of one micro-batch */
    double bubble;         /* measured: 1 − Σ_ranks compute / (P · makespan) */
    double bubble_wait;    /* of it, the ranks' waits in pipeline receives / (P · makespan) */
    double bubble_other;   /* of it, neither compute nor receive inside the ranks' spans */
    double bubble_ideal;   /* calc's simulation of the schedule's table with unit costs */
    double bubble_sim;     /* the same with the costs measured at start-up (the trainer's) */
    double bubble_run;     /* the same with this step's measured costs (exec_set_p2p's sends) */
    double makespan;       /* measured, seconds */
    double makespan_run, makespan_sim; /* simulated: this step's costs; start-up's (trainer's) */
} exec_stats;

typedef struct exec exec;

/* The executor of plan pl on this rank: model m, sharded run p (NULL without communication),
 * mesh mh; allocates the plan's buffers it owns (the pipeline's) and the action lists. NULL out
 * of memory. pl must outlive it. */
exec *exec_create(model *m, par *p, const plan *pl, mesh *mh);
void exec_destroy(exec *e); /* accepts NULL */
/* Collective over: world. One training step's actions on tokens[n_micro · micro_seqs, T+1]
 * (this rank's rows of the global batch, micro-batch j at rows j · micro_seqs): the gradients
 * of the mean loss over the global batch accumulate into the model's (or the sharded run's)
 * storage. Returns that mean loss, on every rank; st (may be NULL) gets the pipeline's figures. */
double exec_step(exec *e, const int32_t *tokens, exec_stats *st);
/* The seconds one pipeline message takes, for the simulation of each step (exec_stats). */
void exec_set_p2p(exec *e, double seconds);
/* The actions the last exec_step ran on this rank, in the order it ran them (*n of them): op,
 * the stage of the chunk it used (chunk · |Z| + this rank's index), micro-batch. */
const sched_action *exec_last_step(const exec *e, int64_t *n);
/* Collective over: world. The forwards of an evaluation batch; the mean loss, on every rank. */
double exec_eval(exec *e, const int32_t *tokens);
#endif
