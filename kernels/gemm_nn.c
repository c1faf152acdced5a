/* gemm_nn: C[M,N] (=, or +=) A[M,K] · B[K,N], row-major, in AVX-512 (see gemm_nn.h).
 *
 * The product of the forward: B is a weight, read in place (no packed copy). Register tiles of
 * MR rows × 32 columns (2 zmm per row, 2·MR accumulators) run over the whole of K: per k, two
 * rows of B's 32-column panel are loaded and every row's A[i, k] is broadcast into them. The
 * panel (K × 128 bytes) stays in L2 while the tiles of a block of NN_MC rows pass over it, so
 * the weight is read from memory once per NN_MC rows — once in all for decode's few rows. Edges
 * (N % 32, M % MR) use masked loads and narrower tiles of the same code. Every element is one
 * chain of fmas over k = 0..K-1 from 0 (or from C), whatever its tile: a row's result does not
 * depend on M or on where the row sits, so decode and prefill give the same bits. */
#include "kernels/gemm_nn.h"

#include <stddef.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#define NN_MR 12 /* rows per tile: 24 accumulators + 2 panel registers of the 32 */
/* Rows per block: its tiles share the panel while it is in L2 (A's block, 64 × K, is there too);
 * 64 = prefill's prompt of 64 in one block, so each weight is read from memory once. */
#define NN_MC 64
#define NN_AVX512 __attribute__((target("avx512f")))
#define NN_INLINE __attribute__((always_inline)) inline

/* Row i of a tile: its two accumulators (declared as named variables, not an array, so that the
 * compiler keeps all of them in registers) and what each step does to them. */
#define NN_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define NN_DECL(i) __m512 c0_##i = _mm512_setzero_ps(), c1_##i = _mm512_setzero_ps();
#define NN_LOAD(i)                                                                                 \
    if (i < mr && acc_c) {                                                                         \
        c0_##i = _mm512_maskz_loadu_ps(m0, C + i * ldc);                                           \
        c1_##i = _mm512_maskz_loadu_ps(m1, C + i * ldc + 16);                                      \
    }
#define NN_FMA(i)                                                                                  \
    if (i < mr) {                                                                                  \
        const __m512 a = _mm512_set1_ps(A[i * lda + k]);                                           \
        c0_##i = _mm512_fmadd_ps(a, b0, c0_##i);                                                   \
        c1_##i = _mm512_fmadd_ps(a, b1, c1_##i);                                                   \
    }
#define NN_STORE(i)                                                                                \
    if (i < mr) {                                                                                  \
        _mm512_mask_storeu_ps(C + i * ldc, m0, c0_##i);                                            \
        _mm512_mask_storeu_ps(C + i * ldc + 16, m1, c1_##i);                                       \
    }

/* One tile: mr (a constant after inlining, ≤ NN_MR) rows × 32 columns (masks m0, m1 for the
 * panel's two halves), over all of K. */
static NN_AVX512 NN_INLINE void tile(const int mr, float *restrict C, const float *restrict A,
                                     const float *restrict B, int64_t K, int64_t lda, int64_t ldb,
                                     int64_t ldc, __mmask16 m0, __mmask16 m1, int acc_c, int pf) {
    NN_ROWS(NN_DECL)
    NN_ROWS(NN_LOAD)
    for (int64_t k = 0; k < K; k++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + k * ldb);
        const __m512 b1 = _mm512_maskz_loadu_ps(m1, B + k * ldb + 16);
        if (pf) { /* the block's first tile fetches the next panel's lines of this row of B: the
                   * strided reads of a panel alone keep too few lines in flight */
            _mm_prefetch((const char *)(B + k * ldb + 32), _MM_HINT_T1);
            _mm_prefetch((const char *)(B + k * ldb + 32 + 16), _MM_HINT_T1);
        }
        NN_ROWS(NN_FMA)
    }
    NN_ROWS(NN_STORE)
}
#undef NN_DECL
#undef NN_LOAD
#undef NN_FMA
#undef NN_STORE
#undef NN_ROWS

/* The tile for mr (1..NN_MR) rows, each a copy of tile() with a constant row count. */
#define NN_TILE(R)                                                                                 \
    static NN_AVX512 void tile##R(float *restrict C, const float *restrict A,                      \
                                  const float *restrict B, int64_t K, int64_t lda, int64_t ldb,    \
                                  int64_t ldc, __mmask16 m0, __mmask16 m1, int acc_c, int pf) {    \
        tile(R, C, A, B, K, lda, ldb, ldc, m0, m1, acc_c, pf);                                     \
    }
NN_TILE(1)
NN_TILE(2)
NN_TILE(3)
NN_TILE(4)
NN_TILE(5)
NN_TILE(6)
NN_TILE(7)
NN_TILE(8)
NN_TILE(9)
NN_TILE(10)
NN_TILE(11)
NN_TILE(12)
#undef NN_TILE

typedef void (*tile_fn)(float *restrict, const float *restrict, const float *restrict, int64_t,
                        int64_t, int64_t, int64_t, __mmask16, __mmask16, int, int);
static const tile_fn tiles[NN_MR + 1] = {NULL,  tile1, tile2, tile3,  tile4,  tile5, tile6,
                                         tile7, tile8, tile9, tile10, tile11, tile12};

static __mmask16 mask_of(int64_t n) { /* the first n (clamped to 0..16) lanes */
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

static NN_AVX512 void gemm_nn_avx512(float *C, const float *A, const float *B, int64_t M, int64_t N,
                                     int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int acc_c) {
    for (int64_t i0 = 0; i0 < M; i0 += NN_MC) {
        const int64_t i1 = i0 + NN_MC < M ? i0 + NN_MC : M;
        for (int64_t j = 0; j < N; j += 32) {
            const __mmask16 m0 = mask_of(N - j), m1 = mask_of(N - j - 16);
            for (int64_t i = i0; i < i1; i += NN_MR) {
                const int64_t mr = i1 - i < NN_MR ? i1 - i : NN_MR;
                tiles[mr](C + i * ldc + j, A + i * lda, B + j, K, lda, ldb, ldc, m0, m1, acc_c,
                          i == i0 && j + 32 < N);
            }
        }
    }
}

int kern_gemm_nn_available(void) {
    static int have = -1; /* the CPU does not change while the program runs */
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return have;
}

static void gemm_nn_plain(float *C, const float *A, const float *B, int64_t M, int64_t N,
                          int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int acc);

void kern_gemm_nn(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                  int64_t lda, int64_t ldb, int64_t ldc, int acc) {
    if (kern_gemm_nn_available()) /* an AVX-512 instruction on a CPU without it is SIGILL */
        gemm_nn_avx512(C, A, B, M, N, K, lda, ldb, ldc, acc);
    else
        gemm_nn_plain(C, A, B, M, N, K, lda, ldb, ldc, acc);
}

#else /* not x86-64 with GCC or Clang: no AVX-512 path; kern_gemm keeps to the BLAS */
static void gemm_nn_plain(float *C, const float *A, const float *B, int64_t M, int64_t N,
                          int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int acc);
int kern_gemm_nn_available(void) {
    return 0;
}
void kern_gemm_nn(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                  int64_t lda, int64_t ldb, int64_t ldc, int acc) {
    gemm_nn_plain(C, A, B, M, N, K, lda, ldb, ldc, acc);
}
#endif

/* The plain loop: one chain over k in order per element, as the tiles run it (whether the
 * compiler fuses its multiply-adds decides whether the bits equal the tiles'). */
static void gemm_nn_plain(float *C, const float *A, const float *B, int64_t M, int64_t N,
                          int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int acc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float c = acc ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++) c += A[i * lda + k] * B[k * ldb + j];
            C[i * ldc + j] = c;
        }
}
