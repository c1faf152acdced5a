/* calc: the book's calculator ("How To Scale Your Model"). Given a chip, a topology, a model, a
 * batch and a sharding (data/ZeRO axes, a Megatron tensor axis, an optional pipeline axis, a
 * checkpointing policy), predicts with the book's formulas (the sharding, transformers and
 * training chapters) every collective of a layer and of a step, the FLOPs and compute time, the
 * step time (overlapped `max` and serial `sum`), MFU, memory per chip by category against HBM,
 * and the book's thresholds; prices pods joined by DCN (calc_spec.pods); and searches shardings
 * for a chip count and batch. Serving is the other half (calc_infer.h). No MPI: pure arithmetic
 * on the collective cost model (mesh/cost.h, library mt_cost), and on the transformer's shape,
 * its parameter counts and FLOPs (calc/shape.h, library mt_shape), which the trainer shares.
 *
 * Conventions: B is the global batch in TOKENS (sequences × T). X = product of the data axes,
 * Y = product of the tensor axes, P = pipeline axis size. bf16 activations and weights on the
 * wire (2 bytes), GB = 1e9. Times in seconds.
 *
 * Sub-axis splits: a physical axis of n chips may be split between the two roles, the tensor
 * sharding taking a contiguous block of k | n chips and the data sharding the strided rest n/k
 * (the book's "2048-way FSDP × 4-way TP" on a pod whose axes are 16, 20, 28). Written "z:4" for
 * the tensor part and "z/4" for the data part. Costs (cost_collective_strided): the block is an
 * open line of k (no wraparound inside it unless k = n); the strided sub-axis wraps if z does,
 * but each ring step crosses k links that the k strided groups share: W/k and k·T_min. */
#ifndef MT_CALC_CALC_H
#define MT_CALC_CALC_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "calc/schedule.h"
#include "calc/shape.h"
#include "mesh/cost.h"

#define CALC_MAX_COLL 24
#define CALC_MAX_NOTES 16
#define CALC_NOTE_LEN 512

typedef enum {
    CALC_REMAT_NONE,  /* save everything: ~20 [B,D] tensors per layer (transformers chapter) */
    CALC_REMAT_BLOCK, /* save each layer's input only; recompute the whole forward (transformers
                         chapter) */
    CALC_REMAT_FFW3, /* save the 3 big FFW matmul outputs: 2·L·B·(D+2F) bytes (transformers chapter)
                      */
    CALC_REMAT_CKPT, /* save n [B,D] tensors per layer: 2·D·B·n·L (applied-training chapter) */
    CALC_REMAT_MESHTRAIN /* save everything, counted tensor by tensor as meshtrain's trainer
                            keeps them (calc_meshtrain_acts) */
} calc_remat;

/* The role of a set of axes; CALC_ROLE_DCN is the data parallelism across pods (no mesh axis:
 * the pods, joined by the data-center network). With experts, CALC_ROLE_EXPERT is the expert
 * axis Z (E_Z: the tokens' AllToAlls) and CALC_ROLE_EXPERT_DATA the data axes without it (X/Z:
 * where the copies of one expert live, its weights' FSDP gathers and gradient reductions). */
typedef enum {
    CALC_ROLE_DATA,
    CALC_ROLE_TENSOR,
    CALC_ROLE_PIPE,
    CALC_ROLE_DCN,
    CALC_ROLE_EXPERT,
    CALC_ROLE_EXPERT_DATA
} calc_role;

/* A mixture of experts (E = 0: a dense model). Every block's MLP is E routed experts, each a
 * gated MLP of width F (0: the model's F), k of them per token, beside S shared (always-on) ones,
 * and a router D×E; the routed experts are sharded over the one data axis of expert_mask (the
 * book's W_in[E_Z, D_X, F_Y]: Z the expert axis, X the FSDP axis, Y the tensor axis). */
typedef struct {
    int64_t E, k, S, F;
    int expert_mask;
} calc_moe;

/* Context parallelism's algorithms (calc_cp.h). */
typedef enum { CALC_CP_ALLGATHER, CALC_CP_RING, CALC_CP_ULYSSES, CALC_CP_N_ALGS } calc_cp_alg;

/* Output formats of a plan and of a search. */
typedef enum { CALC_FORMAT_TABLE, CALC_FORMAT_CSV, CALC_FORMAT_JSON } calc_format;

/* Where a collective sits, in the book's labels (profiling chapter). */
typedef enum {
    CALC_PATH_CRITICAL, /* blocks the next matmul (TP gathers and scatters) */
    CALC_PATH_PREFETCH, /* can be issued a layer early (FSDP weight gathers) */
    CALC_PATH_ASYNC     /* off the critical path (gradient reductions) */
} calc_path;

typedef struct {
    cost_chip chip; /* a copy: a table chip or a host profile */
    cost_link link; /* link constants the collectives use (normally the chip's) */
    mesh_alg alg;   /* collective algorithm (DEFAULT, spelled "auto" here: bidir ring on one axis,
                     * multi on several) */
    int n_axes;
    int sizes[COST_MAX_AXES];
    int wraps[COST_MAX_AXES];
    char names[COST_MAX_AXES];             /* 'x', 'y', 'z' */
    int data_mask, tensor_mask, pipe_mask; /* bit i = axis i */
    /* Tensor block of axis i: 0 (or sizes[i]) = the whole axis; 1 < k < sizes[i], k | sizes[i]:
     * the axis is split, tensor takes a contiguous block of k chips and, if the axis is also in
     * data_mask (the only way an axis may have two roles), data takes the strided n/k. */
    int tensor_block[COST_MAX_AXES];
    int zero; /* 0..3 over the data axes */
    model_shape shape;
    double tokens; /* global batch B in tokens */
    calc_remat remat;
    int ckpt_n;          /* tensors per layer for CALC_REMAT_CKPT */
    int microbatches;    /* pipeline microbatches (≥ 1) */
    sched_kind schedule; /* pipeline schedule (calc_pipe.c), default gpipe */
    int virtual_stages;  /* v chunks per pipeline rank; 0: the schedule's own (sched_spec_v) */
    double param_bytes, grad_bytes, opt_bytes, act_bytes; /* per element: 2, 2, 8, 2 */
    /* Pods: `pods` copies of the topology joined by DCN, data parallel across them (the book:
     * pure DP over DCN, FSDP/TP inside a pod). Gradients reduce hierarchically: ReduceScatter
     * over the pod's data axes (as ZeRO does; with ZeRO-0 the AllReduce is that plus its
     * AllGather), the shard AllReduced over DCN, then the in-pod AllGather: DCN carries 1/X of
     * the gradient. The batch is global: each pod takes B/pods. dcn_bw: bytes/s per chip,
     * 0 = the chip's (cost_chip_dcn_bw). */
    int pods;
    double dcn_bw;
    calc_moe moe;
    /* The context axis (meshplan --cp; calc_cp.h): cp_n chips split every sequence (0 or 1:
     * none), with cp_alg. Only CALC_REMAT_MESHTRAIN's activations read these: the axis is among
     * the data axes for everything else. */
    int cp_n;
    calc_cp_alg cp_alg;
} calc_spec;

typedef struct {
    char what[128]; /* "AllGather_y In[B_x,D_y]->[B_x,D]" */
    cost_op op;
    int axes_mask;
    char axes[24];  /* the role's axes with splits: "xyz/4", "z:4" */
    calc_role role; /* data or tensor */
    int seg;        /* 0: per layer; 1: the embedding/unembedding head (once per step) */
    int bwd;        /* 0 forward, 1 backward (incl. recompute) */
    int count;      /* calls per layer (per step for seg 1) per chip */
    calc_path path;
    double bytes;       /* the book's V per call */
    cost_est est;       /* one call */
    cost_regime regime; /* compute-hidden if its phase's compute covers its phase's comms */
} calc_coll;

/* Times of one phase of one segment, per chip. */
typedef struct {
    double flops, t_math, t_comm;
} calc_phase;

/* One pipeline schedule priced for the plan (calc_pipe.c): refused (why), or its simulated step. */
typedef struct {
    int ok, v;
    char why[160];
    double t_step;      /* simulated makespan, overlapped phases */
    double bubble;      /* idle fraction of that step */
    double bubble_unit; /* the same table with unit costs and no p2p: the closed form */
    double peak;        /* (stage, micro-batch) pairs held on the busiest rank */
    double mem_acts;    /* activation bytes per chip at that peak */
    double sends;       /* p2p messages per rank per step */
} calc_sched_row;

/* The pipeline axis given another role instead (calc_pipe.c): FSDP (joins the data axes,
 * ZeRO-3) or TP (joins the tensor axes); ok = 0 when calc_compute refuses that sharding. */
typedef struct {
    int ok;
    char label[48], why[160];
    double t_step, t_comm, mem_total;
} calc_axis_choice;

typedef struct {
    /* model */
    double params, params_layer, flops_model; /* total params; per layer; 6·params·B */
    double flops_attn;                        /* causal attention, training, per step */
    double flops_recompute;                   /* extra forward work of the remat policy */
    /* collectives and phases: [seg][bwd] */
    calc_coll coll[CALC_MAX_COLL];
    int n_coll;
    calc_phase phase[2][2];
    double layers_per_chip, bubble; /* L/P; pipeline factor: step / busiest rank's compute */
    double t_pipe;                  /* pipeline ppermutes per step per chip (all of them) */
    /* pipeline (P > 1), priced by simulating the schedule (calc_pipe.c) */
    double pipe_bubble;  /* idle fraction of the simulated step */
    double t_p2p;        /* one micro-batch's activations over one boundary */
    double act_mb_chunk; /* activation bytes of one micro-batch in one chunk */
    double pipe_peak;    /* (stage, micro-batch) pairs held, busiest rank */
    calc_sched_row sched[SCHED_N_KINDS];
    calc_axis_choice alt[2]; /* the pipeline axis as FSDP, as TP */
    /* step */
    double chips, t_math, t_comm, t_step_max, t_step_sum, mfu, tokens_per_s;
    /* memory per chip, bytes */
    double mem_params, mem_grads, mem_opt, mem_acts, mem_gathered, mem_total, hbm;
    double mem_global; /* params + optimizer + activations over all chips (the book's total) */
    int fits;
    /* thresholds (training chapter) */
    double alpha;            /* C / W_bidi */
    double hbm_intensity;    /* C / W_hbm */
    double X, Y, P;          /* degrees */
    int M_X, M_Y;            /* physical axes used by data and tensor sharding */
    double tokens_per_x;     /* B / X */
    double dp_threshold;     /* α / M_X: B/X must exceed it */
    double tp_limit;         /* M_Y · F / α: Y must stay below it */
    double x_opt;            /* sqrt((B/F)(M_X/M_Y)N), N = X·Y */
    double mixed_threshold;  /* 4α²/(M_X·M_Y·F): B/N must exceed it */
    double mixed_min_batch;  /* N · mixed_threshold */
    double min_chips_memory; /* mem_global / HBM */
    /* pods (pods = 1: none); chips and the step totals above count every pod */
    double pods, chips_pod, tokens_per_pod;
    double dcn_bw;        /* per chip */
    double dcn_threshold; /* C / W_dcn: the book's per-pod batch below which DCN binds */
    /* mixture of experts (spec moe.E > 0; else params_active = params, Z = 1, the rest 0) */
    double params_active;       /* the parameters one token passes through (6·them·B: FLOPs) */
    double Z;                   /* the expert axis's degree (1: every chip holds every expert) */
    double expert_params;       /* the routed experts' parameters, all layers */
    double tokens_per_expert;   /* (B/X)·Z·k/E: the tokens one copy of an expert takes a step */
    double expert_intensity;    /* C·param_bytes/(2·W_hbm): the tokens an expert needs to be
                                   FLOP-bound (the roofline's C/W_hbm, 240 on v5e in bf16) */
    double moe_batch_threshold; /* expert_intensity·E/k: what an expert group's batch B/X·Z must
                                   exceed (the book's ~240·E/k) */
    double t_expert_hbm;        /* per layer and chip, fwd + bwd: the experts' weight reads beyond
                                   their matmuls' time (the roofline's HBM floor; 0: FLOP-bound) */
} calc_result;

/* Fills s with the defaults (v5p constants, bf16 + Adam byte counts, remat none, 1 microbatch,
 * AUTO algorithm) and no topology, model or batch. */
void calc_spec_defaults(calc_spec *s);
/* Sets the topology from sizes (named x, y, z) with wraparound by the chip's rule (the chip and
 * link must be set first); returns 0, or −1 with err when it does not fit the chip's pod. */
int calc_spec_set_topology(calc_spec *s, const int *sizes, int n_axes, char *err, size_t errlen);
/* Model presets: "llama3-70b", "llama2-13b". Returns 0, or −1 if unknown. */
int calc_model_preset(model_shape *m, const char *name);

/* ---- mixture of experts (calc_moe.c) ---- */
/* "mixtral-8x7b": E = 8, k = 2 (the published sizes; its shape from calc_model_preset); other
 * presets: dense (E = 0). Returns 0, or −1 if unknown. */
int calc_moe_preset(calc_moe *mo, const char *name);
/* The expert width (moe F, or the model's F when 0). */
int64_t calc_moe_F(const model_shape *m, const calc_moe *mo);
/* A MoE block's MLP parameters: the router D·E, E routed and S shared gated experts of 3·D·F_e:
 * all of them, and the ones one token passes through (the router, k + S experts). */
double calc_moe_block_params(const model_shape *m, const calc_moe *mo);
double calc_moe_block_active(const model_shape *m, const calc_moe *mo);
/* CALC_REMAT_MESHTRAIN's MLP part of a MoE block for a micro-batch of b tokens on the chip, in
 * bytes, as meshtrain's model_moe.c keeps it (Z: the expert axis's ranks, whose tokens the chip's
 * experts may all take; Y: the tensor axis's, over which F_e is sharded; a: act_bytes). fp32:
 * the router's logits, probabilities and log-sum-exp, each slot's weight, choice, position and
 * source (int32), each sequence's counters per expert, the experts' SwiGLU inputs [k·Z, F_e] and
 * outputs ys [k, D] (and [k·Z, D] on the experts' rank), the shared experts' inputs [S·F_e]. The
 * products' inputs, the dispatched rows [k, D] (and received [k·Z, D]), the experts' and shared
 * experts' SwiGLU outputs: fp32 with a = 4; with a = 2 (bf16 compute) kept in bf16 alone, the
 * received rows, the hidden values [k·Z, F_e] and the shared [S·F_e]. Per micro-batch besides: the
 * dispatch's offsets and counts per expert (int64), the expert axis's exchange counts. Under a
 * context axis (cp_n > 1) the counters are per piece of a sequence the model routes (C·pieces/T a
 * token: two under allgather's and ring's zigzag split, one otherwise), each with its statistics
 * made whole over the axis, [2E] fp32. */
double calc_moe_meshtrain_acts(const calc_spec *s, const calc_result *r, double b);
/* shape_params with every block's MLP a mixture of experts (= shape_params when E = 0); and the
 * parameters one token passes through. */
double calc_params_moe(const model_shape *m, const calc_moe *mo);
double calc_params_active(const model_shape *m, const calc_moe *mo);
/* The experts' checks for a training plan: 1 ≤ k ≤ E, the expert axis one whole data axis,
 * E divisible by its size. Returns 0, or −1 with err. */
int calc_moe_validate(const calc_spec *s, const calc_result *r, char *err, size_t errlen);
/* The table's lines on the experts (after the header) and their thresholds. */
void calc_moe_print(FILE *out, const calc_spec *s, const calc_result *r);
void calc_moe_print_thresholds(FILE *out, const calc_spec *s, const calc_result *r);

/* Names for printing: "critical", "prefetch", "async"; the topology "16x20x28"; the remat
 * policy, "ffw3" or with detail "ffw3 (3 FFW matmul outputs)" (returns buf). */
const char *calc_path_name(calc_path p);
/* The roofline's verdict on weights read once for a batch: "FLOP-bound" when the batch (tokens or
 * sequences per copy of the weights) exceeds the critical batch crit, else "HBM-bound". */
const char *calc_weights_bound(double batch, double crit);
/* The calculator's spelling of an algorithm: "auto" for MESH_ALG_DEFAULT, else mesh_alg_name. Its
 * parse accepts auto, ring, bidir, seq, multi and direct (not mpi: no model of MPI's own); -1
 * otherwise. */
const char *calc_alg_name(mesh_alg a);
int calc_alg_parse(const char *s);
void calc_topology_str(const calc_spec *s, char *buf, size_t len);
const char *calc_remat_str(const calc_spec *s, int detail, char *buf, size_t len);
/* 1 if axis i of s is split: in the tensor role with a block 1 < k < sizes[i]. */
int calc_axis_split(const calc_spec *s, int axis);
/* The bit mask of the axes that `role` spans. */
int calc_role_mask(const calc_spec *s, calc_role role);
/* The axes of `role` as printed in subscripts and columns: whole axes by letter, a split axis as
 * "z:4" (tensor, block of 4) or "z/4" (data, the strided 16/4): "xyz/4", "z:4"; "" for none. */
void calc_axes_str(const calc_spec *s, calc_role role, char *out, size_t len);
/* The axes of `role` as a collective sees them: n entries of extent (a split axis's block or
 * strided part), wraparound and stride, for cost_collective_strided. */
void calc_role_axes(const calc_spec *s, calc_role role, int *sizes, int *wraps, int *strides,
                    int *n);
/* Checks the tensor blocks: each 0 or a divisor >= 2 of its axis, only on tensor axes. Returns
 * 0, or −1 with err. */
int calc_check_blocks(const calc_spec *s, char *err, size_t errlen);
/* The degree of `role` (product of its extents) and, in *n_phys, the physical axes of size > 1
 * it touches (a split axis counts for both roles). */
int calc_role_degree(const calc_spec *s, calc_role role, int *n_phys);
/* calc_axes_str, or "-" for none (table columns). */
void calc_axes_label(const calc_spec *s, calc_role role, char *out, size_t len);

/* Predicts everything for s. Returns 0, or −1 with err for a sharding that does not apply
 * (an axis in two roles that is not split, a block that does not divide its axis, a degree
 * that does not divide the batch or the model). */
int calc_compute(const calc_spec *s, calc_result *r, char *err, size_t errlen);

/* Pipelines (calc_pipe.c). The schedule's refusals for s (sched_check with P, v, M and L):
 * 0 or −1 with err. */
int calc_pipe_check(const calc_spec *s, const calc_result *r, char *err, size_t errlen);
/* Prices a pipelined step (P > 1) by simulating s->schedule with per-stage costs of one
 * micro-batch (L/(P·v) layers' phases / M, the head on the last stage; I = W = B/2) and the p2p
 * time of one micro-batch's activations: sets the step times (overlapped phases: *t_max; serial:
 * *t_sum), r->bubble, r->t_pipe, the pipeline fields, every schedule's row and the axis as FSDP
 * and as TP. Returns 0, or −1 with err. */
int calc_pipe_price(const calc_spec *s, calc_result *r, double *t_max, double *t_sum, char *err,
                    size_t errlen);
/* The pipeline section of the table, and the chosen schedule's step x rank grid. */
void calc_print_pipe(FILE *out, const calc_spec *s, const calc_result *r);
void calc_print_pipe_grid(FILE *out, const calc_spec *s, const calc_result *r);

/* Printing as a table (calc_report.c). */
void calc_print(FILE *out, const calc_spec *s, const calc_result *r);
/* The plan's notes (where it parts from the book, and why), one sentence each, without the
 * leading "- ". Returns how many were written (at most CALC_MAX_NOTES). */
int calc_notes(const calc_spec *s, const calc_result *r, char (*notes)[CALC_NOTE_LEN]);

/* Search (calc_search.c). */
typedef struct {
    int chips;      /* > 0: every topology of this many chips that fits the pod; 0: s's own */
    int top;        /* rows to print */
    int whole_axes; /* 1: whole axes only (no sub-axis splits) */
    calc_format format;
} calc_search_opt;

typedef struct {
    calc_spec s;
    calc_result r;
} calc_candidate;

/* Enumerates the topologies of o->chips chips (or s's own), and on each every assignment of each
 * axis to data, to tensor, or (unless o->whole_axes) split with tensor taking a contiguous block
 * of every divisor 1 < k < n, times ZeRO 0..3; drops shardings calc_compute rejects and
 * duplicates (same step time, memory and ZeRO stage). Returns a malloc'd array sorted fitting
 * first, then by overlapped step time, ties (compute-bound ones) by serial step time, with its
 * length in *n; NULL (and *n = 0) if out of memory.
 * The caller frees it. */
calc_candidate *calc_search_list(const calc_spec *s, const calc_search_opt *o, int *n);
/* calc_search_list, then prints the o->top first in o->format on out (NULL: prints nothing).
 * Returns the number of candidates (0: nothing printed), or −1 if out of memory. */
int calc_search(FILE *out, const calc_spec *s, const calc_search_opt *o);
/* Why a search found no candidate: no slice of o->chips fits the chip's pod (the message says
 * so, whether the count is prime, and the nearest count below that fits), or the reason
 * calc_compute rejects the plainest sharding. Writes err[len]; returns −1. */
int calc_search_explain(const calc_spec *s, const calc_search_opt *o, char *err, size_t len);

/* Machine-readable output (calc_out.c). CSV: one header row, then one row per collective (plan)
 * or per candidate (search); names carry the units (_s seconds, _bytes). JSON: one object (plan)
 * or an array of candidates (search), times in seconds, sizes in bytes, numbers with 15
 * significant digits. */
void calc_print_csv(FILE *out, const calc_spec *s, const calc_result *r);
void calc_print_json(FILE *out, const calc_spec *s, const calc_result *r);
void calc_search_print_csv(FILE *out, const calc_candidate *c, int n);
void calc_search_print_json(FILE *out, const calc_candidate *c, int n);
/* CALC_REMAT_MESHTRAIN: the bytes of activations meshtrain's trainer keeps on one chip for one
 * micro-batch of b tokens (its rows on the chip, whole over the tensor axis) of a dense model,
 * tensor by tensor as its model saves them for the backward. Per layer of the chip's L/P: the
 * residuals x1, x2, SwiGLU's inputs a, b [b, F_Y] and the rows' two 1/rms, which a norm's or
 * SwiGLU's backward reads, in fp32 (4 bytes); what only products read at act_bytes each (2: bf16
 * compute keeps them in bf16 alone; 4: fp32 compute): the norms' outputs h1, h2, q [b, N_Y·H],
 * k, v [b, K_Y·H] (K_Y at least 1: kv heads replicate over Y), attention's probabilities
 * [b, N_Y·T] and output [b, N_Y·H], the SwiGLU output g [b, F_Y]. Per micro-batch: each of the v
 * chunks' outputs [b, D] in fp32 and the int32 targets; with the head (the last stage): the
 * final norm's output [b, D] at act_bytes, the logits [b, V_Y], the log-sum-exp and the loss's
 * three row statistics in fp32. */
double calc_meshtrain_acts(const calc_spec *s, const calc_result *r, double b, int head);

/* `meshplan` / `meshtrain plan`: parses flags, prints the plan or the search to `out` and a bad
 * flag's message ("meshplan: error: ...") to `errout`; either may be NULL to print nothing, so
 * that every rank of an MPI job can run it and reach the same status while one prints. Returns
 * the exit status (0 ok, 2 bad input). */
int calc_run(int argc, char **argv, FILE *out, FILE *errout);
/* What the command computes: a training step's prediction, a search of shardings (--search), or
 * serving (--infer). */
enum { CALC_MODE_TRAIN = 1, CALC_MODE_SEARCH = 2, CALC_MODE_INFER = 4 };
/* The flag table, for tests that walk it: the number of flags, and the i-th one's name
 * ("--context"), the modes it changes the result in (CALC_MODE_* bits; in the others it is
 * refused) and whether it is a mode switch itself; NULL past the end. */
int calc_flag_count(void);
const char *calc_flag_name(int i, int *modes, int *is_mode);
/* calc_run on stdout and stderr. */
int calc_main(int argc, char **argv);
#endif
