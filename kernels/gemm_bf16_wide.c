/* The avx512 path of kern_gemm_bf16: the bf16 operands widened to fp32 (exact: a 16-bit shift)
 * into the context's workspace and multiplied by kern_gemm, the fp32 product (its library: oneDNN's
 * AVX-512 sgemm where kernels/sgemm_lib.c picks it, for every transpose; else OpenBLAS, or
 * gemm_nn's AVX-512 tiles for the untransposed products on one thread). The products of two bf16
 * values are exact in fp32, so this is the MXU's contract (bf16 inputs, fp32 accumulation) on the
 * FMA units, which on an Intel core without AMX outrun vdpbf16ps two to one (gemm_bf16.h).
 *
 * Blocking. op(A) and op(B) are widened by blocks of WIDE_KB values of K (and, past WIDE_MB rows
 * or WIDE_NB columns, of rows and columns), each block kept in its stored layout (a transposed
 * operand stays transposed: kern_gemm takes the flags), and each K block's product goes on from
 * the last's C (beta 1). So the workspace holds at most WIDE_KB·(WIDE_MB + WIDE_NB) floats
 * (3 MB), sized by the first product that needs more than it has (not per product), and the
 * widened blocks are read by the fp32 product while they are still in the cache. Each element's
 * sum is kern_gemm's over each K block, the blocks in order: the order depends on the shape (and
 * the fp32 library's thread count), not on the run: the same bits run to run.
 *
 * Few rows (M ≤ BF16_STREAM_MAX_M: decode's products, a short last batch) go to the own avx2
 * kernels instead, which read B in place, once, where widening it would cost more than the
 * product (gemm_bf16.c). */
#include "kernels/gemm_bf16_impl.h"

#include <stdlib.h>

#include "kernels/gemm.h"
#include "kernels/gemm_bf16_x86.h"

#define WIDE_KB 512  /* values of K per block */
#define WIDE_MB 512  /* rows of op(A) per block */
#define WIDE_NB 1024 /* columns of op(B) per block */

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

#if BF16_X86
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

int bf16_wide_built(void) {
    return 1;
}

/* d[r·ldd + c] = s[r·lds + c] as fp32, r < rows, c < cols: per 16 values one load, a zero
 * extension to 32 bits and a shift by 16 (the masked tail loads and stores only its values). */
static AVX512 void widen(float *restrict d, int64_t ldd, const kern_bf16 *restrict s, int64_t lds,
                         int64_t rows, int64_t cols) {
    const __mmask16 tail = (__mmask16)((1u << (cols % 16)) - 1u);
    for (int64_t r = 0; r < rows; r++) {
        const kern_bf16 *p = s + r * lds;
        float *q = d + r * ldd;
        int64_t c = 0;
        for (; c + 32 <= cols; c += 32) {
            const __m512i x0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + c)));
            const __m512i x1 =
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + c + 16)));
            _mm512_storeu_si512(q + c, _mm512_slli_epi32(x0, 16));
            _mm512_storeu_si512(q + c + 16, _mm512_slli_epi32(x1, 16));
        }
        if (c + 16 <= cols) {
            const __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + c)));
            _mm512_storeu_si512(q + c, _mm512_slli_epi32(x, 16));
            c += 16;
        }
        if (c < cols) {
            const __m512i x = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, p + c));
            _mm512_mask_storeu_epi32(q + c, tail, _mm512_slli_epi32(x, 16));
        }
    }
}

/* The block op(X)[r0 .. r0 + rows, c0 .. c0 + cols) of a stored X (t: stored transposed, row
 * stride ld) widened into d in X's own layout: [rows, cols] (row stride cols), or, when t,
 * [cols, rows] (row stride rows). Returns d's row stride. */
static int64_t widen_block(float *d, const kern_bf16 *X, int64_t ld, bool t, int64_t r0, int64_t c0,
                           int64_t rows, int64_t cols) {
    if (t) {
        widen(d, rows, X + c0 * ld + r0, ld, cols, rows);
        return rows;
    }
    widen(d, cols, X + r0 * ld + c0, ld, rows, cols);
    return cols;
}

int bf16_wide_gemm(bf16_wide *w, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   bool acc) {
    if (M <= BF16_STREAM_MAX_M) return 1;
    const int64_t kb = min64(K, WIDE_KB), mb = min64(M, WIDE_MB), nb = min64(N, WIDE_NB);
    const int64_t need = kb * (mb + nb);
    if (need > w->cap) { /* grown once for the largest blocks seen (at most 3 MB) */
        float *p = aligned_alloc(64, (size_t)(need * (int64_t)sizeof(float) + 63) / 64 * 64);
        if (!p) return -1;
        free(w->ws);
        w->ws = p, w->cap = need;
    }
    float *wa = w->ws, *wb = w->ws + kb * mb;
    for (int64_t j0 = 0; j0 < N; j0 += WIDE_NB) {
        const int64_t n = min64(WIDE_NB, N - j0);
        for (int64_t p0 = 0; p0 < K; p0 += WIDE_KB) {
            const int64_t k = min64(WIDE_KB, K - p0);
            const int64_t lwb = widen_block(wb, B, ldb, tb, p0, j0, k, n);
            const float beta = acc || p0 > 0 ? 1.0f : 0.0f;
            for (int64_t i0 = 0; i0 < M; i0 += WIDE_MB) {
                const int64_t m = min64(WIDE_MB, M - i0);
                const int64_t lwa = widen_block(wa, A, lda, ta, i0, p0, m, k);
                kern_gemm(C + i0 * ldc + j0, wa, wb, m, n, k, ta, tb, lwa, lwb, ldc, 1.0f, beta);
            }
        }
    }
    return 0;
}

#else /* not x86-64 GCC or Clang: no avx512 path (kern_bf16_path_check refuses it) */
int bf16_wide_built(void) {
    return 0;
}
int bf16_wide_gemm(bf16_wide *w, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   bool acc) {
    (void)w, (void)C, (void)A, (void)B, (void)M, (void)N, (void)K, (void)ta, (void)tb, (void)lda;
    (void)ldb, (void)ldc, (void)acc;
    return 1;
}
#endif
