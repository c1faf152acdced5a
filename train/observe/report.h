/* report: the measured split of each step (compute, exposed communication per collective, idle)
 * beside the book's prediction, and run totals for the final summary. Depends on mesh/ (trace
 * hook, stats, links) and mesh/cost.h. Collective over: world (report_create, report_step_end). */
#ifndef MT_TRAIN_REPORT_H
#define MT_TRAIN_REPORT_H
#include <stdint.h>
#include <stdio.h>
#include "mesh/coll.h"
#include "kernels/traffic.h"
#include "mesh/cost.h"
#include "train/observe/parts.h"
#include "train/observe/share.h"
#include "train/observe/trace.h"

typedef struct report report;

/* Overlap (the OSU non-blocking benchmarks' measure): of a collective type's transfer time
 * (start → end of each call, summed), the fraction the caller did not spend blocked in it,
 *     overlap = 1 − exposed / transfer, clamped to [0, 1];
 * a blocking call hides nothing, a non-blocking one whose wait returns at once hides all of it.
 * The prediction follows the step's replay (report.c): the predicted time of the non-blocking
 * transfers that their waits did not expose, shared among types in proportion to their
 * predicted times. */
typedef struct {
    double wall, compute, idle;
    double compute_cpu; /* the calling thread's CPU time in the step outside the collectives */
    double exposed[MESH_OP_COUNT]; /* seconds the caller was blocked in each collective type */
    double xfer[MESH_OP_COUNT];    /* seconds the transfers of each type ran (start → end) */
    double pred[MESH_OP_COUNT];    /* book prediction of the transfers of each type */
    int64_t calls[MESH_OP_COUNT], bytes[MESH_OP_COUNT];
    double pred_compute, pred_step; /* the step's prediction (report.c): compute (the kernels'
                                       and passes' on a CPU of its own) and step (on the host as
                                       shared: share.h) */
    double pred_share;              /* the factor on pred_compute in pred_step (share.h; 1: none) */
    double pred_dedicated;          /* the step predicted on a CPU per rank (= pred_step when no
                                       CPU is shared, bit for bit) */
    double pred_comm;               /* Σ predicted durations of the step's collectives */
    double pred_exposed;  /* pred_step − pred_share·pred_compute: predicted blocked time */
    double book_step;     /* the book's idealised step: max(FLOPs at the peak, bf16 comm) */
    double book_compute;  /* its compute: this rank's FLOPs at the peak sgemm rate */
    const char *dominant; /* the predicted step's largest term: compute, bandwidth, latency */
    double overlap; /* over the collectives (not p2p) of the step; −1: no non-blocking call */
    double pred_overlap; /* the same, predicted */
    /* the step by part (parts.h): the caller's compute CPU time in each (the innermost span's
     * part, less the CPU time blocked in collectives), the transfer time (start → end) of the
     * collectives issued in each, their predicted durations, and the predicted compute
     * (report_set_compute_parts) */
    double part_cpu[PART_COUNT], part_xfer[PART_COUNT];
    double part_pred_comm[PART_COUNT], part_pred_compute[PART_COUNT];
    /* the time the bytes mesh counted on each link direction take at the links' bandwidth
     * (boundary_call_seconds), for the collectives issued in each part, by their major axis:
     * what the book's boundaries compare, for what this run put on the wire (boundary.h);
     * MPI's built-ins under emulation are left out (they do not use the emulated links) */
    double part_wire[PART_COUNT][MESH_MAX_AXES];
    /* the collectives' transfer without the skew between their ranks' arrivals (skew.h): each
     * call from the last rank's start to the last rank's end (one host's shared clock; on
     * several hosts the shortest of the ranks' own durations), summed over the step's
     * collectives (not p2p) and by the part each was issued in; what the book's T_comms is */
    double xfer_last, part_xfer_last[PART_COUNT];
    /* the memory passes the step's thread made (kernels/traffic.h): floats by kind, their
     * predicted seconds by kind (report_set_pass_rates) and in all, which pred_compute and
     * part_pred_compute include */
    int64_t pass_floats[KERN_PASS_COUNT];
    double pred_pass[KERN_PASS_COUNT], pred_passes;
} step_split;

typedef struct {
    int64_t steps;
    double wall, compute, pred_compute, pred_step, pred_exposed, book_step, pred_dedicated;
    int64_t dominant[3]; /* steps whose predicted dominant term was compute, bandwidth, latency */
    int64_t calls[MESH_OP_COUNT], bytes[MESH_OP_COUNT], latency_calls[MESH_OP_COUNT];
    double exposed[MESH_OP_COUNT], xfer[MESH_OP_COUNT], pred[MESH_OP_COUNT];
    double pred_hidden[MESH_OP_COUNT]; /* predicted transfer time hidden behind compute */
    int64_t async_calls[MESH_OP_COUNT];
} report_totals;

/* 1 − exposed/xfer clamped to [0, 1] (0 when xfer is 0). */
double report_overlap(double exposed, double xfer);

/* Collective over: world. flops = this rank's measured sgemm FLOP/s (the book's peak C). Link
 * constants: emulated ones when mesh_link_set/mesh_emulate gave them, else a ping-pong
 * calibration per axis, every rank at once (on a shared host, on the CPUs the ranks share).
 * Finds each host's ranks and CPUs (share.h). */
report *report_create(mesh *m, double flops);
/* Not collective, but every rank must set the same. BLAS threads per rank (1 until set), for the
 * prediction on a shared host (share.h). */
void report_set_threads(report *r, int threads);
/* The sharing of the hosts' CPUs that the step's prediction includes (share.h), found at
 * report_create: ranks and CPUs per host (mesh_host_ranks, mesh_host_cpus) over the world. */
const share_model *report_share(const report *r);
/* Not collective. The predicted compute of a step (train/step/ktime.h), seconds. */
void report_set_compute(report *r, double seconds);
/* Not collective. A pipelined step's wait for its neighbours, as the schedule's simulation with
 * measured costs has it (train/step/pipe_pred.h), on a CPU per rank and on the shared host: the
 * step's prediction counts its pipeline receives and sends as free and adds this instead. */
void report_set_pipe(report *r, double idle, double idle_shared);
/* Not collective. The same by part (parts.h), seconds each. */
void report_set_compute_parts(report *r, const double *parts);
/* Not collective. The seconds per float of each memory pass (kernels/traffic.h; ktime.h times
 * them): each step's predicted compute, in total and by part, adds the floats the step's thread
 * copied, cleared and added, at these rates (0 until set: the passes cost nothing). */
void report_set_pass_rates(report *r, const double *sec_per_float);
/* Not collective, but every rank must call it or none (a model with experts: every rank, a
 * pipeline stage without MoE blocks too, with rows 0): the grouped experts' forward and backward
 * take sec[0], sec[1] seconds on `rows` rows (ktime.h), which the predicted compute holds. Each
 * step then reprices them on the rows its experts ran (kernels/traffic.h), each MoE block's at
 * the most rows any rank of `axes` ran in it (predict_expert_rows), gathering them over `axes`
 * at the step's end: the expert axes, whose ranks exchange the rows (all in one pipeline stage;
 * none: this rank's own). */
void report_set_experts(report *r, const double *sec, double rows, mesh_axes axes);
/* Not collective. The --dcn axis: the summary splits the collectives' calls, bytes, transfer and
 * predicted time into ICI ones and those over a set with this axis (−1: no split). */
void report_set_dcn(report *r, int axis);
/* Not collective, but every rank must set the same. on: report_step_end also computes the step's
 * transfer from the last rank's start (step_split.xfer_last, skew.h), gathering every rank's calls
 * over the world at each step's end; off (the default): xfer_last is 0 and the report adds no
 * traffic of its own beyond one float per rank. For timing runs (--bench). */
void report_set_skew(report *r, int on);
/* Not collective. The trace whose spans the report observes (trace_observe): each step's memory
 * passes are then attributed to the pass and sublayer they ran in; NULL (the default): all to
 * the step's rest. tr must outlive r or be finished first. */
void report_watch(report *r, trace *tr);
void report_destroy(report *r); /* accepts NULL */
void report_step_begin(report *r);
/* Collective over: world (and with experts over their axes: report_set_experts). flops_rank =
 * the step's FLOPs on this rank. */
void report_step_end(report *r, double flops_rank, step_split *out);
const report_totals *report_get_totals(const report *r);
const cost_link *report_link(const report *r, int axis);
const char *report_link_source(const report *r);
double report_flops(const report *r);
/* What the final summary needs to know of the run. */
typedef struct report_case {
    const char *scheme; /* "FSDP (ZeRO-3) over x + TP over y" */
    int64_t tokens;     /* B: tokens per step (global) */
    int64_t F, nX, nY;
    int n_data_axes;    /* M_X */
    int data_axis;      /* major data axis (its link constants are used), −1 if none */
    int tensor_axis;    /* the tensor axis, −1 if none */
    unsigned data_mask; /* bit a: axis a carries data parallelism (the data axes, --dcn's) */
    int zero;           /* 0 (DP), 1, 2, 3 */
    int64_t layers;     /* layers on this rank (L over the pipeline's stages) */
    int64_t params;     /* parameters the data axes reduce per rank (all of them over |Y|) */
} report_case;
/* The book's crossovers (its training chapter), for collectives carrying `wire_bytes` per
 * element (2 for bf16, the book's) on a chip of C FLOP/s and W bytes/s per link both ways, so
 * α = C/W (v5p: 4.59e14 / 1.8e11 = 2550). Each is where a pass's compute meets the
 * communication the book sets against it; with α_w = α·wire_bytes/2:
 *  - data (DP and FSDP): tokens per data shard B/X = α_w / n_data_axes. DP: the backward pass's
 *    4·P FLOPs per token (the weight and input gradients) against the gradients' AllReduce,
 *    2·(wire·P)/W; FSDP: the forward and backward's 6·P against two AllGathers of the weights
 *    and a ReduceScatter of the gradients, 3·(wire·P)/W: both α_w.
 *  - tensor: d_ff F = |Y|·α_w·2/mlp_mats. The MLP's forward, 2·mlp_mats·B·D·F/|Y| FLOPs, against
 *    its AllGather and ReduceScatter of the [B, D] activations, 2·wire·B·D/W; the book's MLP has
 *    two matrices (F = |Y|·α), a SwiGLU three (F = ⅔·|Y|·α).
 * Pure. Returns −1 (nothing set) for a non-positive C, W, wire_bytes, n_data_axes, nY or mlp_mats.
 */
typedef struct {
    double alpha;       /* C/W */
    double data_tokens; /* DP/FSDP: B/X */
    double tensor_F;    /* TP: d_ff */
} report_boundaries;
int report_book_boundaries(double C, double W, double wire_bytes, int n_data_axes, int64_t nY,
                           int mlp_mats, report_boundaries *out);
/* Rank 0 prints the per-collective table (calls, bytes, exposed and transfer time, predicted,
 * regime) and where the book's thresholds put this run. */
void report_print_summary(const report *r, const report_case *k, FILE *out);
/* Where the book's thresholds put this run, with this machine's C (the matmul FLOP/s) and W (the
 * bidirectional link): "  regime: C = ..., W = ... → α = C/W = ..." and one line per role of
 * the mesh ("    data/FSDP: ... → compute-bound" or "communication-bound"). */
void report_print_regime(const report *r, const report_case *k, FILE *out);
/* The same for C FLOP/s and the link l of the data axis (source: "measured" or "emulated";
 * boundary.c: it knows no report). */
void boundary_print_regime(double C, const cost_link *l, const char *source,
                           const report_case *k, FILE *out);
/* The run's prediction of one collective call c (its op, axes, algorithm, count as passed to
 * mesh_*, and wire format), on the links this report calibrated or was told; *latency_bound
 * (may be NULL): whether its hop latency dominates. */
double report_predict(const report *r, const mesh_coll_call *c, int *latency_bound);
/* The book's V of a call of `count` (as passed to mesh_*) over n ranks, in elements, which the
 * cost model (mesh/cost.h) prices: the gathered array (AllGather, n·count), the unreduced input
 * (ReduceScatter, n·count), the global array of an AllToAll (n ranks' inputs of n blocks of
 * count: n²·count; each rank sends (n−1)·count), the array itself (AllReduce, ppermute). */
double report_book_elems(mesh_op op, int64_t count, int n);
#endif
