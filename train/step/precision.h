/* precision: the run's compute dtype, resolved at start-up and the same on every rank.
 *   --compute-dtype bf16: the matmuls multiply bf16 inputs and accumulate in fp32
 *     (kernels/gemm_bf16.h, kernels/attn_bf16.h); fp32: the fp32 kernels (kernels/gemm.h);
 *     auto: bf16 where the bf16 kernels' path is a matrix unit that outruns fp32 (amx; avx512bf16
 *     but on Intel), else fp32 (on the vector units bf16 multiplies no faster than fp32 sgemm,
 *     the avx512 path's widened bf16 included, and rounds).
 *   The path: MESHTRAIN_BF16_PATH (kern_bf16_path_from_env; unset: the fastest this CPU has). A
 *     path this CPU lacks is refused with the kernel's message, once, every rank leaving with
 *     status 2. Ranks whose CPUs differ take the slowest path any of them resolved (the paths
 *     are nested: a CPU with a faster one has every slower one), so that every rank multiplies
 *     with the same arithmetic.
 *   One bf16 context per compute thread: the rank computes on its calling thread (with --threads
 *     workers inside the context), so one context per rank.
 *   The rate: the context's bf16 matrix FLOP/s (a step's three products, timed as the sgemm
 *     rate is), which stands for the chip's C under --emulate and is the MFU's peak in bf16.
 * Depends on kernels/ (the bf16 paths and kernels) and mesh (the ranks' agreement). */
#ifndef MT_TRAIN_PRECISION_H
#define MT_TRAIN_PRECISION_H
#include <stddef.h>
#include <stdio.h>

#include "kernels/gemm_bf16.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/observe/cpupeak.h"
#include "train/model/model.h"

typedef struct {
    compute_dtype asked;  /* --compute-dtype as given (AUTO possible) */
    compute_dtype dtype;  /* resolved: COMPUTE_FP32 or COMPUTE_BF16 */
    kern_bf16_path path;  /* the bf16 kernels' path every rank takes (never AUTO) */
    kern_bf16_ctx *ctx;   /* BF16: the rank's context; NULL in fp32 */
    double rate;          /* BF16: this rank's measured bf16 matrix FLOP/s; 0 in fp32 */
    cpupeak_trial trials[CPUPEAK_TRIALS]; /* BF16: the trials rate is the best of */
    int ntrials;
    char cpu[64];         /* this rank's CPU (kern_cpu_model) */
    char why[256];        /* auto: why it resolved as it did; "" otherwise */
    char sgemm[160];      /* the fp32 products' library (kern_sgemm_lib_describe) */
} precision;

/* Collective over: world. Resolves c->compute into p (zeroed first), creates the bf16 context
 * for c->threads threads and, unless measure is 0, times its rate: a 1024³ product (256³ with
 * c->quick_start) for 0.1 s (0.01 s), best of CPUPEAK_TRIALS (1), every rank at once (each trial kept with
 * the share of the CPU the thread had, p->trials); with core = 1 on the
 * thread's CPU clock (kern_bf16_measure_core_flops: a rank standing for a chip with a core of
 * its own, --emulate). Returns 0, or −1 with one message in err (the same on every rank): a
 * bad MESHTRAIN_BF16_PATH, a path this CPU lacks, a context that could not be made. */
int precision_setup(precision *p, const config *c, mesh *m, int measure, int core, char *err,
                    size_t errlen);
/* Frees the context (p may be zeroed; NULL: nothing). */
void precision_free(precision *p);
/* Not collective. The start-up line of the run's precision (rank 0 prints it): the dtype and how
 * it was chosen; in bf16 the path, the CPU and the measured rate, and on a CPU without a bf16
 * matrix unit what the path does instead. */
void precision_print(const precision *p, FILE *out);
/* Not collective. The share of the wall time since (w0, c0) = (mesh_now(), mesh_thread_cpu())
 * this thread ran (a start-up trial's cpupeak_trial.share); 0 when not known (known = 0: several
 * BLAS threads, or a rate timed on the thread's CPU clock). */
double precision_share_since(double w0, double c0, int known);
#endif
