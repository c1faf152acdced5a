/* gemm_nn: the forward's product C[M,N] (=, or += when acc) A[M,K] · B[K,N], row-major with row
 * strides lda, ldb, ldc, in AVX-512 register tiles that read B (the weight) in place, without the
 * packed copy sgemm makes on every call. kern_gemm sends its untransposed products here when the
 * CPU has AVX-512 and the BLAS runs one thread; kern_gemm_ref is the naive twin. Each element is
 * one fma chain over k in order, so a row's result does not depend on M. No MPI, no allocation. */
#ifndef MT_KERNELS_GEMM_NN_H
#define MT_KERNELS_GEMM_NN_H
#include <stdint.h>

/* 1 if this CPU runs kern_gemm_nn's AVX-512 code (elsewhere, on any CPU, kern_gemm_nn is a plain loop). */
int kern_gemm_nn_available(void);
/* acc = 0 overwrites C (which may hold garbage); acc = 1 accumulates into it. */
void kern_gemm_nn(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                  int64_t lda, int64_t ldb, int64_t ldc, int acc);
#endif
