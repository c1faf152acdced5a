/* bench: `meshtrain --bench`, the timing run. Synthetic tokens (no data file), a few untimed
 * warm-up steps, then --steps timed steps; reports tokens/s (median and best step), achieved
 * GFLOP/s and MFU (as in training, see --help), and the matmul-only bound: the sum over the
 * step's matmuls of the time sgemm takes for each, each distinct shape timed on its own. A
 * trainer can approach but not beat that bound; the gap is everything that is not a matmul.
 * Depends on trainer, model, kernels/gemm.h, kernels/rng.h, mesh/. */
#ifndef MT_TRAIN_BENCH_H
#define MT_TRAIN_BENCH_H
#include <stdint.h>

#include "kernels/gemm_bf16.h"

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/cli/run.h"
#include "train/step/trainer.h"

#define BENCH_WARMUP_STEPS 2

/* One sgemm shape of a step: C[M,N] = op(A)[M,K] · op(B)[K,N], `count` times per step (a
 * fraction for the causal half of attention's T×T products). */
typedef struct {
    int64_t M, N, K;
    int ta, tb;
    double count;
} bench_gemm;

/* Not collective. Lists the distinct sgemm shapes of one training step (forward and backward)
 * of a one-rank model of shape s on B sequences in micro-batches of mb, into out[cap]; returns
 * how many (at most cap). Projections y = x·W give dW = xᵀ·dy and dx = dy·Wᵀ in the backward
 * pass; attention's per-head products are counted at half (the causal triangle). With experts
 * the routing is taken as balanced: each expert's products on ceil(BT·k/E) rows. */
int bench_step_gemms(const model_shape *s, int64_t B, int64_t mb, bench_gemm *out, int cap);
/* Not collective. Times one sgemm of shape g on this rank: best of 3 trials of ≥ 50 ms (quick,
 * config.quick_start: one of ≥ 2 ms); with a bf16 context x (else NULL) the product on bf16
 * operands (kern_gemm_bf16). */
double bench_time_gemm(const bench_gemm *g, kern_bf16_ctx *x, int quick);

/* Collective over: world. The --bench run of trainer t; MFU against pk (run_measure_peak);
 * prints from rank 0. Returns 0. */
int bench_run(const config *c, mesh *m, trainer *t, const run_peak *pk);
#endif
