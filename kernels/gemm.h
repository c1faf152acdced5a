/* gemm: every matmul of meshtrain goes through here (OpenBLAS sgemm), with a naive twin.
 * Row-major. Depends on cblas only. No MPI, no allocation. */
#ifndef MT_KERNELS_GEMM_H
#define MT_KERNELS_GEMM_H
#include <stdbool.h>
#include <stdint.h>

/* A kernel called with sizes it cannot serve (an extent past cblas's int) is a caller's bug. The
 * handler reports it the program's way (meshtrain: mesh_abort, naming the rank, ending the job)
 * and does not return; without one, the kernel prints to stderr and aborts. */
typedef void (*kern_bug_fn)(const char *msg);
void kern_set_bug_handler(kern_bug_fn fn);

/* C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C[M,N]; op(X) = Xᵀ when the flag is set.
 * lda/ldb/ldc are row strides of A, B, C as stored (A stored [M,K] or, transposed, [K,M]).
 * beta = 0 overwrites C (C may hold garbage); beta = 1 accumulates. */
void kern_gemm(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K, bool ta,
               bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta);
/* Naive twin of kern_gemm (double accumulation). */
void kern_gemm_ref(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                   bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                   float beta);

/* y[M,N] = x[M,K] · w[K,N]. Overwrites y. */
void kern_matmul(float *restrict y, const float *restrict x, const float *restrict w, int64_t M,
                 int64_t K, int64_t N);
/* dw[K,N] += x[M,K]ᵀ · dy[M,N]. Accumulates (weight gradient). */
void kern_matmul_dw(float *restrict dw, const float *restrict x, const float *restrict dy,
                    int64_t M, int64_t K, int64_t N);
/* dx[M,K] (=, or += when acc) dy[M,N] · w[K,N]ᵀ (input gradient). */
void kern_matmul_dx(float *restrict dx, const float *restrict dy, const float *restrict w,
                    int64_t M, int64_t K, int64_t N, bool acc);

/* Sets the number of BLAS threads for this process (1 = single-threaded). */
void kern_set_threads(int n);
/* Measures this process's matmul throughput in FLOP/s (about `seconds` long) over the three
 * products of a training step, y = x·w, dx = dy·wᵀ and dw += xᵀ·dy, each n×n×n, in turn. */
double kern_measure_flops(int64_t n, double seconds);
/* The same for the forward's product y = x·w alone (inference: every product is one), which
 * runs faster than the backward's two when it takes gemm_nn. */
double kern_measure_flops_fwd(int64_t n, double seconds);
/* The same on the rate of a core the caller has to itself: with one BLAS thread timed by the
 * thread's CPU clock, so that other processes on the core (other ranks, other jobs) do not lower
 * it; with more BLAS threads the same as kern_measure_flops. */
double kern_measure_core_flops(int64_t n, double seconds);
#endif
