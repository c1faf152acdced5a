/* The plain C path of kern_gemm_bf16, for any CPU (contract in gemm_bf16_impl.h). Untransposed B:
 * row i of C is built k after k (c[j] += a[i,k]·b[k,j] over j, which GCC vectorises); transposed
 * B: a dot product per element. Either way each element's chain runs over k in order. */
#include "kernels/gemm_bf16_impl.h"

#include "kernels/bf16_inl.h"

void bf16_gemm_plain(float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M, int64_t N,
                     int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, bool acc) {
    for (int64_t i = 0; i < M; i++) {
        float *restrict c = C + i * ldc;
        if (!acc)
            for (int64_t j = 0; j < N; j++) c[j] = 0.0f;
        if (!tb) {
            for (int64_t k = 0; k < K; k++) {
                const float a = kern_bf16_val_inl(ta ? A[k * lda + i] : A[i * lda + k]);
                const kern_bf16 *restrict b = B + k * ldb;
                for (int64_t j = 0; j < N; j++) c[j] += a * kern_bf16_val_inl(b[j]);
            }
            continue;
        }
        for (int64_t j = 0; j < N; j++) {
            float s = c[j];
            for (int64_t k = 0; k < K; k++)
                s += kern_bf16_val_inl(ta ? A[k * lda + i] : A[i * lda + k]) *
                     kern_bf16_val_inl(B[j * ldb + k]);
            c[j] = s;
        }
    }
}
