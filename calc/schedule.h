/* schedule: pipeline schedules as tables of actions per rank, and their simulator. Owns the
 * generators (GPipe, 1F1B, Megatron's interleaved 1F1B, zero-bubble ZB-H1 and ZB-V), the checks
 * that a table is complete, in dependency order and deadlock-free, and the simulated makespan,
 * bubble and activations in flight, with unit or measured costs. Pure arithmetic: no MPI, no
 * model; train/ runs the tables, calc/ prices them. Depends on mesh/errmsg only.
 *
 * The pipeline. p ranks along the pipeline axis run S = p·v stages: the L layers are cut into S
 * chunks of L/S consecutive layers, stage s holding chunk s. Placement (sched_stage_rank): dealt
 * round-robin, rank r holds stages r, r+p, r+2p, … (v "virtual stages" per rank); ZB-V places
 * them in a V instead, rank r holding stages r and 2p−1−r. A step's batch is cut into m
 * micro-batches; micro-batch j flows forward through stages 0 … S−1 and its gradient back.
 *
 * Actions, for (stage s, micro-batch j), written `<s><op><j>` (PyTorch's notation):
 *   F  forward of stage s: reads the stage input, keeps the activations, writes the output.
 *   B  the whole backward: input gradient and weight gradient at once.
 *   I  input-gradient half of the backward (dL/dx, needed by stage s−1).
 *   W  weight-gradient half (dL/dW += …), after I; it may wait to fill a bubble.
 *   SEND_F / RECV_F  the activation out of stage s to s+1 / into stage s from s−1;
 *   SEND_B / RECV_B  the input gradient of stage s to s−1 / the output gradient into s from s+1.
 * Every (s, j) gets one F and either one B or one I and one W (a table uses one kind throughout).
 * A send or receive appears only where the two stages sit on different ranks (a stage boundary
 * inside a rank, the turn of ZB-V's V, is a copy). In a rank's list, a RECV sits just before the
 * compute that needs it and a SEND just after the compute that produced it.
 *
 * How a table runs (the executor's contract, and the simulator's model): each rank does its
 * actions in order. A compute action occupies the rank. A SEND is posted and returns at once (the
 * message travels for the p2p time, after the messages before it on the same link); a RECV blocks
 * until its message has arrived. Messages are told apart by (kind, stage, micro-batch): sched_fifo
 * says whether each link's receives also come in the order of its sends, so that matching in
 * order with one tag per link, or per kind of message, gets the right one. The weight gradients of
 * every stage accumulate in micro-batch order 0, 1, …, m−1 in every table, so that every schedule
 * sums the same numbers in the same order.
 *
 * Activations in flight: (s, j) holds its activations from its F until its B, or until its W when
 * the backward is split (W reads the layer inputs). sched_result counts such pairs per rank; one
 * pair is one micro-batch's activations of one chunk (L/S layers). */
#ifndef MT_CALC_SCHEDULE_H
#define MT_CALC_SCHEDULE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    SCHED_GPIPE,       /* all forwards, then all backwards; m activations held */
    SCHED_1F1B,        /* p−r−1 warm-up forwards, then one forward one backward */
    SCHED_INTERLEAVED, /* Megatron's interleaved 1F1B: v ≥ 2 chunks round-robin, m % p == 0 */
    SCHED_ZB_H1,       /* zero bubble H1 (Qi et al. 2023): 1F1B with B split, W delayed by r */
    SCHED_ZB_V,        /* zero bubble V: 2 chunks per rank in a V, split backward */
    SCHED_N_KINDS
} sched_kind;

typedef enum {
    SCHED_F,
    SCHED_B,
    SCHED_I,
    SCHED_W,
    SCHED_SEND_F,
    SCHED_RECV_F,
    SCHED_SEND_B,
    SCHED_RECV_B,
    SCHED_N_OPS
} sched_op;

typedef struct {
    int32_t op; /* sched_op */
    int32_t stage, mb;
} sched_action;

/* What to build: the schedule, p pipeline ranks, v virtual stages per rank (0: the schedule's
 * own, 2 for interleaved and zb-v, else 1), m micro-batches, and the model's layers (0: not
 * checked). */
typedef struct {
    sched_kind kind;
    int p, v, m;
    int64_t layers;
} sched_spec;

/* A built table. Rank r's actions are act[off[r]] … act[off[r+1] − 1]. */
typedef struct {
    sched_spec spec; /* with v resolved */
    int stages;      /* S = p·v */
    int split;       /* 1: backward as I then W; 0: as B */
    int v_shape;     /* 1: ZB-V placement; 0: round-robin */
    int *stage_rank; /* [S] */
    int64_t *off;    /* [p + 1] */
    sched_action *act;
} sched_table;

/* Costs of one action of one stage for one micro-batch, in any unit (seconds when measured).
 * Arrays of S entries, or NULL for the scalar beside them. b is the whole backward (used by
 * B tables), i and w its halves (used by split tables). p2p: the time one message (activation or
 * gradient of one micro-batch) takes over one link; a link carries one message at a time. */
typedef struct {
    double F, B, I, W, p2p;
    const double *f, *b, *i, *w; /* per stage, or NULL */
} sched_costs;

/* The simulation of one step. */
typedef struct {
    double makespan;     /* from the first action to the last, over all ranks */
    double bubble;       /* idle fraction: 1 − Σ_r busy_r / (p · makespan) */
    double *busy;        /* [p] compute time of each rank */
    int *peak;           /* [p] most (stage, micro-batch) activations held at once */
    int peak_max;        /* max over ranks of peak */
    int64_t sends;       /* messages in one step (every SEND) */
    double *start, *end; /* [every action] its simulated start and end, indexed like act */
} sched_result;

/* "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"; the parse returns −1 for anything else. */
const char *sched_kind_name(sched_kind k);
int sched_kind_parse(const char *s);
/* The list of names for messages: "gpipe|1f1b|interleaved|zb-h1|zb-v". */
const char *sched_kind_names(void);
/* The virtual stages a spec means (its v, or the schedule's default when v is 0). */
int sched_spec_v(const sched_spec *s);
/* Refuses what a schedule cannot run, with one message naming the flag and what would be right:
 * v without a pipeline (p = 1), v ≠ 1 for gpipe/1f1b/zb-h1, v < 2 for interleaved, v ≠ 2 for
 * zb-v, m not a multiple of p for interleaved, layers not divisible into p·v chunks. Returns 0 or
 * −1 with err. */
int sched_check(const sched_spec *s, char *err, size_t len);
/* Builds the table of s into t (caller-owned; release with sched_free). Returns 0, or −1 with
 * err (sched_check's refusals, or out of memory). */
int sched_init(sched_table *t, const sched_spec *s, char *err, size_t len);
void sched_free(sched_table *t);
/* The rank holding stage s; the stage of rank r's chunk k (k < v). */
int sched_stage_rank(const sched_table *t, int s);
int sched_rank_stage(const sched_table *t, int r, int k);
/* The link direction of a message from stage `from` to stage `to` (a neighbour on another
 * rank): +1 toward rank r+1 (mod p), −1 toward rank r−1. */
int sched_msg_dir(const sched_table *t, int from, int to);
/* 1 if some message goes from rank p−1 to rank 0 or back (the axis must wrap): round-robin with
 * v ≥ 2. ZB-V's V stays on an open line. */
int sched_needs_wrap(const sched_table *t);
/* `2F0`, `1SEND_B3`. Returns buf. */
const char *sched_action_str(const sched_action *a, char *buf, size_t len);

/* Checks a table (also one built by hand): actions on the rank that holds their stage, every
 * (s, j) with one F and one B or one I and one W, F before B/I before W on its rank, a stage
 * boundary inside a rank done in order, every needed send and receive present once (send after
 * its compute, receive before it) and none other, and each stage's weight gradients in
 * micro-batch order. Deadlock is the simulator's to find. Returns 0, or −1 with the first fault. */
int sched_validate(const sched_table *t, char *err, size_t len);
/* 1 if on every link (source rank, destination rank) the receives come in the order of the
 * sends, counting only messages of one kind (activations, gradients) at a time when per_kind is
 * 1; else 0 with the first disagreement in err. An executor that matches messages in order needs
 * one tag per link (per_kind = 0) or one per kind (per_kind = 1) when this holds. */
int sched_fifo(const sched_table *t, int per_kind, char *err, size_t len);

/* Unit costs: the zero-bubble paper's F = I = W = 1 (so B = 2) per chunk, p2p = 0. */
sched_costs sched_unit_costs(void);
/* Validates t, then runs it with costs c (see "How a table runs"). Fills r (release with
 * sched_result_free). Returns 0, or −1 with err: the validation's fault, or a deadlock naming
 * each blocked rank and what it waits for. */
int sched_simulate(const sched_table *t, const sched_costs *c, sched_result *r, char *err,
                   size_t len);
/* The same on ranks that share `cores` CPUs (as ranks oversubscribing a host do, a rank that waits
 * for a message taking none): at any time the n ranks computing each progress at min(1, cores/n)
 * of a CPU, so a compute action costing d takes d or longer; busy counts its time from start to
 * end (what a run measures on the wall clock). cores ≥ p (or ≤ 0) is sched_simulate. */
int sched_simulate_shared(const sched_table *t, const sched_costs *c, double cores,
                          sched_result *r, char *err, size_t len);
void sched_result_free(sched_result *r);

/* The table's compute actions as a step × rank grid: one row per unit of time of a simulation
 * with unit costs (B spans two rows), one column per rank, `.` idle. Then the makespan, bubble
 * and peak activations per rank. Returns 0, or −1 with err. */
int sched_print_grid(FILE *out, const sched_table *t, char *err, size_t len);
/* Each rank's whole list, sends and receives included, one line per rank. */
void sched_print_lists(FILE *out, const sched_table *t);
#endif
