/* trainer: one training run on this rank — the sharding plan, the model, the optimizer state —
 * and one optimizer step (micro-batch loop, gradient reduction, clipping, update).
 * Depends on model, par (sharding), mesh, kernels. main.c drives it. */
#ifndef MT_TRAIN_TRAINER_H
#define MT_TRAIN_TRAINER_H
#include <stdint.h>
#include "mesh/link.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/model/model.h"
#include "train/parallel/par.h"
#include "train/step/exec.h"
#include "train/observe/report.h"
#include "train/observe/trace.h"
#include "train/step/precision.h"

typedef struct trainer trainer;

typedef struct {
    double loss;      /* mean loss over the global batch */
    double grad_norm; /* global gradient norm before clipping */
    double lr;
    double seconds;   /* wall time of the step */
    step_split split; /* compute, exposed communication per collective, idle; prediction */
    exec_stats pipe;  /* pipelining: bubble, activation memory (zero without --pipeline) */
} step_stats;

/* Collective over: world. Validates the sharding against the mesh and the model, builds the
 * model on this rank. Returns NULL with a message in err (the same on every rank) on bad input. */
trainer *trainer_create(const config *c, mesh *m, char *err, size_t errlen);
/* Like trainer_create, but this rank runs the whole model alone, ignoring the sharding flags (no
 * communication in the step, which may run on any subset of the ranks; no step report:
 * trainer_report is NULL): the 1-rank reference that the equivalence tests compare with. */
trainer *trainer_create_serial(const config *c, mesh *m, char *err, size_t errlen);
void trainer_destroy(trainer *t); /* accepts NULL */
/* Not collective. The trace the run's spans go to (the step, its micro-batches, the model's
 * passes; the step report observes them); NULL: none (the default). tr outlives t's steps: it is
 * finished after the last step and destroyed after t. */
void trainer_set_trace(trainer *t, trace *tr);
model *trainer_model(trainer *t);
par *trainer_par(trainer *t); /* NULL for a single-rank run */
/* The run's sharding plan (a trivial one for a single-rank run). */
const plan *trainer_plan(const trainer *t);
/* The actions the last step ran on this rank, in order (exec_last_step). */
const sched_action *trainer_last_actions(const trainer *t, int64_t *n);
report *trainer_report(trainer *t);
/* This rank's matmul FLOP/s, measured at creation: the fp32 sgemm rate, or in bf16 the bf16
 * path's (the MFU's peak, the emulated chip's C); and the sgemm rate whatever the dtype. */
double trainer_flops(const trainer *t);
double trainer_sgemm_flops(const trainer *t);
/* The start-up trials trainer_flops is the best of (the MFU's peak combines them:
 * cpupeak_measured); returns how many, *trials pointing to them (valid while t lives). */
int trainer_peak_trials(const trainer *t, const cpupeak_trial **trials);
/* The run's precision (--compute-dtype resolved, the bf16 path and context). */
const precision *trainer_precision(const trainer *t);

/* The share of a core this rank had while every rank timed sgemm at creation (thread CPU / wall
 * time; --progress auto picks the progress thread below 0.9). */
double trainer_core_share(const trainer *t);
/* Under --emulate, what mesh_emulate chose (its measured_flops: the rate --emulate-rate stood for
 * the chip's peak, averaged over the ranks); NULL without emulation. */
const mesh_emulation *trainer_emulation(const trainer *t);
/* The optimizer state this rank holds: AdamW moments m and v over the owned slices (see
 * par_owned_slice; NULL for SGD), n elements each. */
void trainer_opt_state(trainer *t, float **m, float **v, int64_t *n);
/* The global batch rows this rank loads each step: rows [row0, row0 + nrows) of the B global
 * sequences (ranks that share a data shard load the same rows). */
void trainer_rows(const trainer *t, int64_t *row0, int64_t *nrows);
/* Collective over: world. One optimizer step on tokens[nrows, T+1] (this rank's rows, all
 * micro-batches). `step` is 0-based. */
void trainer_step(trainer *t, int64_t step, const int32_t *tokens, step_stats *st);
/* Collective over: world. Mean loss over the global batch of tokens[nrows, T+1], no update. */
double trainer_eval(trainer *t, const int32_t *tokens);
/* Rank 0 prints the sharding layout (shardings, one layer's collectives, memory per rank) / the
 * end-of-run summary (per collective type: measured vs predicted, regime). Collective over:
 * world. */
void trainer_print_layout(trainer *t, FILE *out);
void trainer_print_summary(trainer *t, FILE *out);
/* Learning rate at 0-based step: linear warm-up to lr over `warmup` steps, then cosine decay to
 * min_lr at the last step. */
double trainer_lr(const config *c, int64_t step);
/* --emulate-rate: the FLOP/s that stand for the emulated chip's peak: `peak` (the core's 1024³
 * sgemm rate) for CONFIG_RATE_PEAK; for CONFIG_RATE_MODEL, the rate this rank's linear layers reach
 * on the model's own shapes as timed at start-up, matmul_flops / matmul_seconds (ktime.h), so that
 * the emulated chip runs the model's matmuls at its peak, as the book's T_math = FLOPs / C assumes
 * (peak when either is not positive). */
double trainer_emulation_rate(config_rate mode, double peak, double matmul_flops,
                              double matmul_seconds);
#endif
