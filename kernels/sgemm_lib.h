/* sgemm_lib: which library runs kern_gemm's fp32 products that the own kernels do not (the
 * backward's transposed products, the forward's on several threads): OpenBLAS, or oneDNN's
 * sgemm where OpenBLAS took a core of an older CPU than this one. Debian 12's OpenBLAS 0.3.21
 * does not know Intel's Emerald Rapids (family 6, model 207) and falls back to its Prescott (SSE3)
 * kernels: 22-33 GFLOP/s on one core there, where oneDNN's AVX-512 sgemm measures 100-164 on
 * the same shapes (bench/gemm_bench, MESHTRAIN_SGEMM=openblas and onednn). Chosen once from the CPU and OpenBLAS's core name, so every
 * rank of a host takes the same library and a run's bits do not depend on timing. */
#ifndef MT_KERNELS_SGEMM_LIB_H
#define MT_KERNELS_SGEMM_LIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { KERN_SGEMM_OPENBLAS, KERN_SGEMM_ONEDNN } kern_sgemm_lib;

#define KERN_SGEMM_ENV "MESHTRAIN_SGEMM" /* auto | openblas | onednn */

/* Resolves the library (the variable, else: oneDNN where the CPU has AVX-512, this build has
 * oneDNN and OpenBLAS's core is not one of its AVX-512 cores). 0, or -1 with msg naming the
 * variable's bad value or the library that is absent. Later calls return the first answer. */
int kern_sgemm_lib_check(kern_sgemm_lib *lib, char *msg, size_t size);
/* The resolved library (OpenBLAS where kern_sgemm_lib_check failed). */
kern_sgemm_lib kern_sgemm_lib_get(void);
/* A phrase for the start-up line: "OpenBLAS 0.3.21 (Haswell kernels)", or "oneDNN's sgemm
 * (OpenBLAS 0.3.21 took its Prescott kernels on this AVX-512 CPU)". */
void kern_sgemm_lib_describe(char *buf, size_t size);
/* C = alpha·op(A)·op(B) + beta·C on oneDNN's sgemm, row-major, on as many OpenMP threads as
 * OpenBLAS has (kern_set_threads). 0, or -1 where oneDNN refused (or is not built). */
int kern_sgemm_onednn(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                      bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                      float beta);

#endif
