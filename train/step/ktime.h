/* ktime: the predicted compute of one training step on this rank, from the kernels' speeds
 * measured at start-up on the shapes this rank runs (not a peak rate: small matmuls never reach
 * it). Every kernel call of a step (the model's forward and backward pass, the loss, the optimizer
 * update) is timed on buffers of its real size, and the step's compute is the sum of
 * count × time. A call's time is the median of single calls, each started with its data in no
 * cache level (the samples rotate through copies of the call's buffers that together are twice
 * the last-level cache), as in a step, whose footprint is many times the caches. With one BLAS
 * thread the clock is the thread's CPU time: the prediction is of a rank that has its core, and a
 * share of the core taken by other processes (ranks sharing a core, other jobs) is not counted;
 * with more BLAS threads it is the wall clock.
 * The memory passes between the kernels (copies, clears and additions of float arrays: residual
 * copies, the packing of gathered weights and of tensor-sharded columns, the gradient
 * reductions' additions, the embedding's lookup and scatter-add, the gradients' zeroing;
 * kernels/traffic.h) are not in this sum: what they cost depends on what the run does (its
 * scheme, buckets, sharding), so the run counts the floats each kind touches as it makes them,
 * and the step's prediction adds floats × the kind's seconds per float, timed here in the same
 * way (cold, on the same clock) on a pass of 4 MB (train/observe/report.c). Depends on kernels/
 * and mesh_now (the clock). */
#ifndef MT_TRAIN_KTIME_H
#define MT_TRAIN_KTIME_H
#include <stdint.h>

#include "kernels/gemm_bf16.h"
#include "kernels/traffic.h"
#include "train/observe/parts.h"

/* What this rank computes in one step. */
typedef struct {
    int64_t L;              /* layers on this rank (its pipeline stage's) */
    int64_t D, H, T;        /* residual width, head dim, sequence length */
    int64_t Nl, Kl, Fl, Vl; /* query heads, kv heads, d_ff and vocabulary held on this rank */
    int64_t seqs;           /* sequences per micro-batch on this rank */
    int64_t micro;          /* micro-batches per step */
    int64_t params;         /* parameters this rank's optimizer updates (and the norm sums) */
    int last;               /* 1 if this rank computes the loss (the last pipeline stage) */
    int threads;            /* BLAS threads per rank (1: timed by the thread's CPU clock) */
    /* bf16 compute (model.h's model_compute): the products and attention on bf16 operands on
     * this context, with the fp32 → bf16 copies of the activations and gradients they consume
     * (kern_bf16_pack) and of the weights, `wpack` elements a step (once per update; ZeRO-3:
     * the shards each gather sends and the gathered unembedding at each use); NULL: fp32 */
    kern_bf16_ctx *bf16;
    int64_t wpack;
    /* mixture of experts (Lm 0: none): Lm of the L blocks are MoE blocks, the others' MLPs
     * dense of width Fl. A MoE block's router (fp32 in either compute) scores E experts and sends
     * each row to k of them; the rows this rank's El experts (of width Fel, its share of F_e) take
     * are timed as a balanced router sends them, seqs·T·k a micro-batch over all El (the rows
     * of the expert axis's |Z| data shards for E/|Z| experts); S shared experts see every row.
     * The rows' gathers, combines and regroupings are memory passes, counted as the run makes
     * them (not here). */
    int64_t Lm, E, k, El, Fel, S;
} ktime_shape;

typedef struct {
    double matmul;           /* the linear layers (forward, weight and input gradients), seconds;
                                with experts, the grouped expert MLPs too */
    double attention;        /* causal attention forward and backward (its sgemms and softmax) */
    double elementwise;      /* RMSNorm, RoPE, SwiGLU, cross-entropy; in bf16 the copies to bf16 */
    double optimizer;        /* AdamW over the parameters this rank owns and their global norm */
    double total;            /* the step's predicted compute */
    double matmul_flops;     /* FLOPs of the linear layers (and experts), for their rate */
    double part[PART_COUNT]; /* the same compute by part of the step (parts.h): a linear layer's
                                forward in its sublayer's forward part, its weight and input
                                gradients in the backward's; the head's and the loss's in the
                                passes' other; the optimizer's in rest */
    double pass[KERN_PASS_COUNT]; /* seconds per float of each memory pass (kernels/traffic.h),
                                     not in the sums above */
    double wgrad[2]; /* of part[], the weight gradients' matmuls (what a split backward defers to
                        its W): the blocks' [0] and the head's unembedding [1] */
    double experts[2];  /* of part[], the grouped experts' forward [0] and backward [1] ... */
    double expert_rows; /* ... on this many rows a step (the balanced router's): the step's
                           prediction reprices them on the rows the run's experts take */
} ktime_step;

/* Times every kernel the step runs, each until its samples add up to `budget` seconds (at least
 * 5, at most 64 samples), and fills out. Allocates its buffers and frees them before returning.
 * Returns 0, or −1 when a buffer cannot be allocated (out untouched). */
int ktime_measure(const ktime_shape *s, double budget, ktime_step *out);

/* The work of the tokens (everything but the optimizer) × f: a context axis of C ranks (--cp)
 * computes f = 1/C of each whole sequence's linear layers, norms and causal attention, which
 * ktime_measure times on whole sequences (the zigzag split balances the attention exactly, the
 * others' head or row shares are equal). */
void ktime_scale_tokens(ktime_step *k, double f);

/* The median of v[0..n) (n >= 1), which it leaves sorted ascending. */
double ktime_median(double *v, int64_t n);
#endif
