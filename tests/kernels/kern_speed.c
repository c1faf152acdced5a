/* Speed of the non-matmul kernels against one sgemm, single-threaded. Not a test: prints
 * milliseconds per call (best of a few repeats). Shapes: rmsnorm and swiglu on the
 * B·T = 2048-token activations of a d_model 512 / d_ff 2048 layer, attention at B=8, T=256,
 * Nl=Kl=8, H=64; reference point one 2048×512×2048 sgemm. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static float *buf(int64_t n, float v) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = v * (float)((i * 37 % 101) - 50) / 50.0f;
    return p;
}

#define BEST(label, reps, stmt)                                                                    \
    do {                                                                                           \
        double best = 1e30;                                                                        \
        for (int r_ = 0; r_ < (reps); r_++) {                                                      \
            double t0_ = now_ms();                                                                 \
            stmt;                                                                                  \
            double t_ = now_ms() - t0_;                                                            \
            best = t_ < best ? t_ : best;                                                          \
        }                                                                                          \
        printf("%-44s %8.3f ms\n", label, best);                                                   \
    } while (0)

int main(void) {
    kern_set_threads(1);
    const int64_t M = 2048, D = 512, F = 2048;
    float *A = buf(M * D, 1), *Bw = buf(D * F, 1), *C = buf(M * F, 0);
    BEST("sgemm 2048x512x2048", 5, kern_matmul(C, A, Bw, M, D, F));

    float *x = buf(M * D, 1), *g = buf(D, 1), *y = buf(M * D, 0), *rs = buf(M, 0);
    float *dy = buf(M * D, 1), *dx = buf(M * D, 0), *dg = buf(D, 0);
    BEST("rmsnorm fwd+bwd [2048, 512]", 10,
         (kern_rmsnorm_fwd(y, rs, x, g, M, D), kern_rmsnorm_bwd(dx, dg, dy, x, g, rs, M, D)));

    float *a = buf(M * F, 3), *b = buf(M * F, 1), *h = buf(M * F, 0), *dh = buf(M * F, 1);
    float *da = buf(M * F, 0), *db = buf(M * F, 0);
    BEST("swiglu fwd+bwd [2048, 2048]", 10,
         (kern_swiglu_fwd(h, a, b, M * F), kern_swiglu_bwd(da, db, dh, a, b, M * F)));

    const int64_t Bs = 8, T = 256, N = 8, H = 64, nq = Bs * T * N * H;
    float *q = buf(nq, 1), *k = buf(nq, 1), *v = buf(nq, 1), *o = buf(nq, 0),
          *P = buf(Bs * N * T * T, 0);
    float *dout = buf(nq, 1), *dq = buf(nq, 0), *dk = buf(nq, 0), *dv = buf(nq, 0),
          *scr = buf(T * T, 0);
    BEST("attention fwd B=8 T=256 Nl=Kl=8 H=64", 5, kern_attn_fwd(o, P, q, k, v, Bs, T, N, N, H));
    BEST("attention bwd B=8 T=256 Nl=Kl=8 H=64", 5,
         kern_attn_bwd(dq, dk, dv, scr, dout, P, q, k, v, Bs, T, N, N, H));
    printf("sgemm throughput %.1f GFLOP/s (kern_measure_flops(512, 0.3))\n",
           kern_measure_flops(512, 0.3) * 1e-9);
    return 0;
}
