/* ktime: the predicted compute of one training step on this rank, from the kernels' speeds
 * measured at start-up on the shapes this rank runs (not a peak rate: small matmuls never reach
 * it). Every kernel call of a step (the model's forward and backward pass, the loss, the optimizer
 * update) is timed once on buffers of its real size, and the step's compute is the sum of
 * count × time. Residual adds, copies and the embedding lookup are not counted (they move a few
 * bytes per token). Depends on kernels/ and mesh_now (the clock). Not collective: call it on
 * every rank at the same time, so that ranks sharing a core measure the share they get. */
#ifndef MT_TRAIN_KTIME_H
#define MT_TRAIN_KTIME_H
#include <stdint.h>

/* What this rank computes in one step. */
typedef struct {
    int64_t L;              /* layers on this rank (its pipeline stage's) */
    int64_t D, H, T;        /* residual width, head dim, sequence length */
    int64_t Nl, Kl, Fl, Vl; /* query heads, kv heads, d_ff and vocabulary held on this rank */
    int64_t seqs;           /* sequences per micro-batch on this rank */
    int64_t micro;          /* micro-batches per step */
    int64_t params;         /* parameters this rank's optimizer updates */
    int last;               /* 1 if this rank computes the loss (the last pipeline stage) */
} ktime_shape;

typedef struct {
    double matmul;       /* the linear layers (forward, weight and input gradients), seconds */
    double attention;    /* causal attention forward and backward (its sgemms and softmax) */
    double elementwise;  /* RMSNorm, RoPE, SwiGLU, cross-entropy */
    double optimizer;    /* AdamW over the parameters this rank owns */
    double total;        /* the step's predicted compute */
    double matmul_flops; /* FLOPs of the linear layers, for their rate */
} ktime_step;

/* Times every kernel the step runs, each for at least `budget` seconds (best of 2 trials), and
 * fills out. Allocates its buffers and frees them before returning. Returns 0, or −1 when a
 * buffer cannot be allocated (out untouched). */
int ktime_measure(const ktime_shape *s, double budget, ktime_step *out);

/* Seconds per call of fn(ctx): the best of `trials` trials, each calling it until at least
 * `budget` seconds and `min_calls` calls have passed. */
double ktime_best(void (*fn)(void *ctx), void *ctx, int trials, double budget, int64_t min_calls);
#endif
