/* plan: the book's calculator (issue 7, first half). Given a chip, a topology, a model, a batch
 * and a sharding (data/ZeRO axes, a Megatron tensor axis, an optional pipeline axis, a
 * checkpointing policy), predicts with the book's formulas (../shared/docs/book-digest.md §3–6)
 * every collective of a layer and of a step, the FLOPs and compute time, the step time (overlapped
 * `max` and serial `sum`), MFU, memory per chip by category against HBM, and the book's
 * thresholds; and searches shardings for a chip count and batch. No MPI run: pure arithmetic on
 * mesh/cost.h. Depends on mesh/cost.h and train/config.h (model_shape).
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
#ifndef MT_TRAIN_PLAN_H
#define MT_TRAIN_PLAN_H
#include <stddef.h>
#include <stdio.h>

#include "mesh/cost.h"
#include "train/config/config.h"

#define PLAN_MAX_COLL 24
#define PLAN_MAX_NOTES 16
#define PLAN_NOTE_LEN 512

typedef enum {
    PLAN_REMAT_NONE,  /* save everything: ~20 [B,D] tensors per layer (§4.4) */
    PLAN_REMAT_BLOCK, /* save each layer's input only; recompute the whole forward (§4.4) */
    PLAN_REMAT_FFW3,  /* save the 3 big FFW matmul outputs: 2·L·B·(D+2F) bytes (§4.4) */
    PLAN_REMAT_CKPT   /* save n [B,D] tensors per layer: 2·D·B·n·L (applied-training, §6) */
} plan_remat;

/* The role of a set of axes. */
typedef enum { PLAN_ROLE_DATA, PLAN_ROLE_TENSOR, PLAN_ROLE_PIPE } plan_role;

/* Output formats of a plan and of a search. */
typedef enum { PLAN_FORMAT_TABLE, PLAN_FORMAT_CSV, PLAN_FORMAT_JSON } plan_format;

/* Where a collective sits, in the book's labels (§9.2). */
typedef enum {
    PLAN_PATH_CRITICAL, /* blocks the next matmul (TP gathers and scatters) */
    PLAN_PATH_PREFETCH, /* can be issued a layer early (FSDP weight gathers) */
    PLAN_PATH_ASYNC     /* off the critical path (gradient reductions) */
} plan_path;

typedef struct {
    cost_chip chip; /* a copy: a table chip or a host profile */
    cost_link link; /* link constants the collectives use (normally the chip's) */
    cost_alg alg;   /* collective algorithm (AUTO: bidir ring on one axis, multi on several) */
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
    plan_remat remat;
    int ckpt_n;       /* tensors per layer for PLAN_REMAT_CKPT */
    int microbatches; /* pipeline microbatches (≥ 1) */
    double param_bytes, grad_bytes, opt_bytes, act_bytes; /* per element: 2, 2, 8, 2 */
} plan_spec;

typedef struct {
    char what[128]; /* "AllGather_y In[B_x,D_y]->[B_x,D]" */
    cost_op op;
    int axes_mask;
    char axes[24];  /* the role's axes with splits: "xyz/4", "z:4" */
    plan_role role; /* data or tensor */
    int seg;        /* 0: per layer; 1: the embedding/unembedding head (once per step) */
    int bwd;        /* 0 forward, 1 backward (incl. recompute) */
    int count;      /* calls per layer (per step for seg 1) per chip */
    plan_path path;
    double bytes;       /* the book's V per call */
    cost_est est;       /* one call */
    cost_regime regime; /* compute-hidden if its phase's compute covers its phase's comms */
} plan_coll;

/* Times of one phase of one segment, per chip. */
typedef struct {
    double flops, t_math, t_comm;
} plan_phase;

typedef struct {
    /* model */
    double params, params_layer, flops_model; /* total params; per layer; 6·params·B */
    double flops_attn;                        /* causal attention, training, per step */
    double flops_recompute;                   /* extra forward work of the remat policy */
    /* collectives and phases: [seg][bwd] */
    plan_coll coll[PLAN_MAX_COLL];
    int n_coll;
    plan_phase phase[2][2];
    double layers_per_chip, bubble; /* L/P; pipeline factor (M+P−1)/M */
    double t_pipe;                  /* pipeline ppermutes per step */
    /* step */
    double chips, t_math, t_comm, t_step_max, t_step_sum, mfu, tokens_per_s;
    /* memory per chip, bytes */
    double mem_params, mem_grads, mem_opt, mem_acts, mem_gathered, mem_total, hbm;
    double mem_global; /* params + optimizer + activations over all chips (the book's total) */
    int fits;
    /* thresholds (§5) */
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
} plan_result;

/* Fills s with the defaults (v5p constants, bf16 + Adam byte counts, remat none, 1 microbatch,
 * AUTO algorithm) and no topology, model or batch. */
void plan_spec_defaults(plan_spec *s);
/* Sets the topology from sizes (named x, y, z) with wraparound by the chip's rule (the chip and
 * link must be set first); returns 0, or −1 with err when it does not fit the chip's pod. */
int plan_spec_set_topology(plan_spec *s, const int *sizes, int n_axes, char *err, size_t errlen);
/* Model presets: "llama3-70b", "llama2-13b". Returns 0, or −1 if unknown. */
int plan_model_preset(model_shape *m, const char *name);
/* Total parameters of the meshtrain model (GQA attention, gated MLP, 2 norms per layer, final
 * norm, untied embeddings): L·(3DF + 2DH(N+K) + 2D) + 2DV + D. */
double plan_params(const model_shape *m);

/* Names for printing: "critical", "prefetch", "async"; the topology "16x20x28"; the remat
 * policy, "ffw3" or with detail "ffw3 (3 FFW matmul outputs)" (returns buf). */
const char *plan_path_name(plan_path p);
void plan_topology_str(const plan_spec *s, char *buf, size_t len);
const char *plan_remat_str(const plan_spec *s, int detail, char *buf, size_t len);
/* 1 if axis i of s is split: in the tensor role with a block 1 < k < sizes[i]. */
int plan_axis_split(const plan_spec *s, int axis);
/* The axes of `role` as printed in subscripts and columns: whole axes by letter, a split axis as
 * "z:4" (tensor, block of 4) or "z/4" (data, the strided 16/4): "xyz/4", "z:4"; "" for none. */
void plan_axes_str(const plan_spec *s, plan_role role, char *out, size_t len);

/* Predicts everything for s. Returns 0, or −1 with err for a sharding that does not apply
 * (an axis in two roles that is not split, a block that does not divide its axis, a degree
 * that does not divide the batch or the model). */
int plan_compute(const plan_spec *s, plan_result *r, char *err, size_t errlen);

/* Printing (plan_report.c). */
void plan_print(FILE *out, const plan_spec *s, const plan_result *r);
/* The plan's notes (where it parts from the book, and why), one sentence each, without the
 * leading "- ". Returns how many were written (at most PLAN_MAX_NOTES). */
int plan_notes(const plan_spec *s, const plan_result *r, char (*notes)[PLAN_NOTE_LEN]);

/* Search. */
typedef struct {
    int chips;      /* > 0: every topology of this many chips that fits the pod; 0: s's own */
    int top;        /* rows to print */
    int whole_axes; /* 1: whole axes only (no sub-axis splits) */
    plan_format format;
} plan_search_opt;

typedef struct {
    plan_spec s;
    plan_result r;
} plan_candidate;

/* Enumerates the topologies of o->chips chips (or s's own), and on each every assignment of each
 * axis to data, to tensor, or (unless o->whole_axes) split with tensor taking a contiguous block
 * of every divisor 1 < k < n, times ZeRO 0..3; drops shardings plan_compute rejects and
 * duplicates (same step time, memory and ZeRO stage). Returns a malloc'd array sorted fitting
 * first, then by overlapped step time, ties (compute-bound ones) by serial step time, with its
 * length in *n; NULL (and *n = 0) if out of memory.
 * The caller frees it. */
plan_candidate *plan_search_list(const plan_spec *s, const plan_search_opt *o, int *n);
/* plan_search_list, then prints the o->top first in o->format. Returns the number of
 * candidates. */
int plan_search(FILE *out, const plan_spec *s, const plan_search_opt *o);

/* Machine-readable output (plan_out.c). CSV: one header row, then one row per collective (plan)
 * or per candidate (search); names carry the units (_s seconds, _bytes). JSON: one object (plan)
 * or an array of candidates (search), times in seconds, sizes in bytes, numbers with 15
 * significant digits. */
void plan_print_csv(FILE *out, const plan_spec *s, const plan_result *r);
void plan_print_json(FILE *out, const plan_spec *s, const plan_result *r);
void plan_search_print_csv(FILE *out, const plan_candidate *c, int n);
void plan_search_print_json(FILE *out, const plan_candidate *c, int n);
/* `meshplan` / `meshtrain plan`: parses flags, prints the plan or the search. Returns the exit
 * status (0 ok, 2 bad flags). */
int plan_main(int argc, char **argv);
#endif
