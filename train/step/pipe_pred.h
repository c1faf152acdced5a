/* pipe_pred: the predicted pipeline phase of a step. calc's simulator (calc/schedule.h) runs the
 * run's schedule table with the costs this run measured at start-up: each stage's forward F,
 * backward B and its weight half W per micro-batch from the kernels' times (ktime.h), and the
 * time one activation or gradient takes over a pipeline link (the links' model: the hop latency
 * plus the bytes at the link's one-way rate, emulated or calibrated). Its makespan less a rank's
 * busy time is the time that rank waits for its neighbours, which the step's prediction adds
 * (report_set_pipe). A stage's F and B include its tensor axis's collectives on the critical
 * path (the sublayers' AllGathers and ReduceScatters, priced by the caller: the run's links),
 * which delay its neighbours as its compute does. GPipe is simulated as calc's
 * table (backwards in micro-batch order; the trainer runs them in reverse: the same flow shop).
 * Depends on calc, the plan and ktime. */
#ifndef MT_TRAIN_PIPE_PRED_H
#define MT_TRAIN_PIPE_PRED_H
#include <stddef.h>

#include "mesh/mesh.h"
#include "train/parallel/plan.h"
#include "train/step/ktime.h"

/* One stage's costs per micro-batch, seconds: forward, whole backward, its weight half. */
typedef struct {
    double f, b, w;
} pipe_stage_cost;

typedef struct {
    double makespan; /* the simulated pipeline phase of a step */
    double idle;     /* this rank's wait in it: makespan − its compute */
    double bubble;   /* the table's: 1 − Σ busy / (ranks · makespan) */
} pipe_pred_result;

/* The price of one collective call, seconds (the trainer's: report_predict on the run's links). */
typedef double (*pipe_price_fn)(void *ctx, const mesh_coll_call *call);
/* Not collective. The tensor axis's collectives of one layer and micro-batch that sit on a
 * stage's critical path, from the plan's rows (plan_call): each row of the tensor role in the
 * forward (into f) or the backward (into b: the input half issues them, w gets none) whose path
 * is critical, priced by price × the row's times. Not counted: a collective matmul's ring steps
 * (hidden behind its matmuls), the norm gains' and shared kv heads' gradient fixups (blocking,
 * off the chain, once a step with ZeRO-0/1). All zero without a tensor axis. */
pipe_stage_cost pipe_pred_tensor_layer(const plan *pl, pipe_price_fn price, void *ctx);
/* Not collective. This rank's chunks' costs (pl->chunks entries, chunk k = the k-th stage this
 * rank holds) from its kernels' times kt for the step's n_micro micro-batches, × share (the
 * host's sharing factor on compute): the blocks' share split evenly over the chunks, the head's
 * (final norm, unembedding, loss) added to the last stage's chunk; plus each chunk's layers × tp
 * (pipe_pred_tensor_layer, not scaled; NULL: none). */
void pipe_pred_rank_costs(const plan *pl, const ktime_step *kt, const pipe_stage_cost *tp,
                          double share, pipe_stage_cost *out);
/* Not collective. The simulation of pl's table with stage s costing cost[s] (S = |Z|·chunks
 * entries) × share (the host's sharing factor on compute), p2p seconds per message, the ranks on
 * `cores` CPUs (calc's sched_simulate_shared; 0: a CPU each); rank pl->pipe.index's idle. A
 * split table's I costs b − w. Returns 0, or −1 with err. */
int pipe_pred_simulate(const plan *pl, const pipe_stage_cost *cost, double p2p, double share,
                       double cores, pipe_pred_result *out, char *err, size_t len);
/* Collective over: world (a gather over the pipeline axis). Every rank's chunk costs
 * (pipe_pred_rank_costs of kt, tp) gathered into the stages' and simulated on a CPU per rank
 * (out[0]), with the compute × share (out[1]: the step's prediction, whose replay stretches the
 * compute alike), and on P / share CPUs shared as the ranks compute (out[2]: a rank waiting
 * for its neighbours leaves its CPU to the others, which the bubble on an oversubscribed host
 * shows). Returns 0, or −1 with err (the same on every rank of the axis). */
int pipe_pred_measure(const plan *pl, mesh *m, const ktime_step *kt, const pipe_stage_cost *tp,
                      double p2p, double share, pipe_pred_result out[3], char *err, size_t len);

/* What one rank measured over a step's pipeline phase (train/step/exec.c): from its first action
 * to its last (span), the time in its compute actions (busy: F, B, I, W) and in its pipeline
 * receives (wait), and its chunks' costs per micro-batch (pl->chunks entries: b the whole
 * backward, I + W in a split table). */
typedef struct {
    double span, busy, wait;
    const pipe_stage_cost *chunk;
} pipe_rank_step;

/* A step's pipeline phase over the pipeline axis, measured as calc's simulator counts it. */
typedef struct {
    double makespan; /* the longest rank's span (the ranks start the phase together) */
    double bubble;   /* 1 − Σ busy / (P · makespan): the simulator's definition */
    double wait;     /* Σ receive wait / (P · makespan): the part of the bubble spent receiving */
    double other;    /* Σ (span − busy − wait) / (P · makespan): the part inside the ranks' spans
                        neither computing nor receiving (the executor's copies, its waits for
                        sends, MPI); the rest of the bubble is the ranks' ends before the last */
    pipe_pred_result sim; /* the table simulated with this step's measured chunk costs */
} pipe_step_figures;

/* Collective over: the pipeline axis (one gather). Every rank's mine gathered, the figures above
 * computed from them (the same on every rank), the simulation with p2p seconds per message.
 * Returns 0, or −1 with err (the simulation's). */
int pipe_pred_step(const plan *pl, mesh *m, const pipe_rank_step *mine, double p2p,
                   pipe_step_figures *out, char *err, size_t len);
/* Not collective: the figures from every rank's gathered measure, rank r's at
 * all[r · PIPE_STEP_DOUBLES(v)]: span, busy, wait, then its v chunks' f, b, w. */
#define PIPE_STEP_DOUBLES(v) (3 + 3 * (v))
int pipe_pred_figures(const plan *pl, const double *all, double p2p, pipe_step_figures *out,
                      char *err, size_t len);
#endif
