/* gemm_bf16_pairs: the avx512bf16 path's own product on a weight with a registered panel copy in
 * the pair layout (gemm_bf16.h: KERN_BF16_PANELS_PAIRS), in AVX512-BF16 (vdpbf16ps) tiles. Every
 * product whose B has a copy runs here, whatever M: decode's row, prefill's chunks, a server's
 * batches.
 *
 * Layout: B[K, N] cut into panels of 16 columns, each [⌈K/2⌉][16][2]: pair q of column c holds
 * B[2q, c] and B[2q + 1, c] side by side (an odd K's last pair padded with a zero; the last panel's
 * missing columns zero). One 64-byte load is one operand of vdpbf16ps; the other is a broadcast
 * of A's pair (A[i, 2q], A[i, 2q + 1]), adjacent in a row-major A (an odd K's last pair: A[i, K −
 * 1] and a zero, never a read past the row).
 *
 * Each element is ONE chain over the pairs in order, q = 0..⌈K/2⌉ − 1, from 0 (or from C): no
 * split of K, the same instructions for it in every tile and in the one-row kernel. So a row's
 * bits depend on its row of A and on B alone, not on M, the tile that ran it, its place in A, the
 * thread count or the batch: decode, prefill and a server's batches agree by construction. (The
 * sum order is vdpbf16ps's pairs, not the avx2 path's chain over k: not the avx2 path's bits.)
 *
 * Several rows: tiles of up to PR_MR rows × PR_NP panels (24 accumulators), the column panels
 * outer and the row tiles inner, so that a pair of panels stays in L2 while every tile of rows
 * reads it. One row (decode at batch 1): PR_ROW_NP panels side by side, each one linear stream;
 * 2 to 6 rows (decode's small batches, bound by the memory too): 8 or 4 panels. */
#include "kernels/gemm_bf16_impl.h"

#include <string.h>

#include "kernels/gemm_bf16_x86.h"

#if BF16_X86_512
#define PR_MR 12    /* rows of a tile */
#define PR_NP 2     /* panels of a tile of 7 to 12 rows (32 columns): up to 24 accumulators */
#define PR_ROW_NP 8 /* panels side by side for 1 to 3 rows (4 to 6 rows: 4) */
/* Up to 6 rows, bound by the memory: each panel's stream prefetched PR_PF pairs (1 KB) ahead. On
 * the Emerald Rapids core one row read 14-16 GB/s with it, 13-14 without (gemm_bench, 256 MB). */
#define PR_PF 16

int bf16_pairs_built(void) {
    return 1;
}

/* The pair (a[0], a[1]) as one 32-bit lane value (a[0] in the low half). */
static INL int pair_at(const kern_bf16 *a) {
    uint32_t v;
    memcpy(&v, a, sizeof v);
    return (int)v;
}

/* C[r, 16j + c] for r < R, j < NP, c < 16 (the columns below n kept) (=, or += when acc) A's R
 * rows (row stride lda) · NP panels from P (panel stride ps) over K. R and NP are constants after
 * inlining: the R·NP sums live in registers. */
static AVX512BF16 INL void tile(const int R, const int NP, float *C, int64_t ldc,
                                const kern_bf16 *A, int64_t lda, const kern_bf16 *P, int64_t ps,
                                int64_t K, int64_t n, bool acc) {
    __m512 c[PR_MR * PR_NP > PR_ROW_NP ? PR_MR * PR_NP : PR_ROW_NP];
    __mmask16 mk[PR_ROW_NP];
    for (int j = 0; j < NP; j++) {
        const int64_t w = n - 16 * j;
        mk[j] = w >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << w) - 1u);
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NP; j++)
            c[r * NP + j] =
                acc ? _mm512_maskz_loadu_ps(mk[j], C + r * ldc + 16 * j) : _mm512_setzero_ps();
    const int64_t Q = K / 2;
    for (int64_t q = 0; q < Q; q++) {
        __m512i b[PR_ROW_NP];
        for (int j = 0; j < NP; j++) b[j] = _mm512_loadu_si512(P + j * ps + 32 * q);
        for (int j = 0; R <= 6 && j < NP; j++) /* (a prefetch never faults past the panel) */
            _mm_prefetch((const char *)(P + j * ps + 32 * (q + PR_PF)), _MM_HINT_T0);
        for (int r = 0; r < R; r++) {
            const __m512i a = _mm512_set1_epi32(pair_at(A + r * lda + 2 * q));
            for (int j = 0; j < NP; j++)
                c[r * NP + j] = _mm512_dpbf16_ps(c[r * NP + j], (__m512bh)a, (__m512bh)b[j]);
        }
    }
    if (K & 1) /* the last pair: A's last value and a zero (B's copy holds its zero) */
        for (int r = 0; r < R; r++) {
            const __m512i a = _mm512_set1_epi32((int)(uint32_t)A[r * lda + K - 1]);
            for (int j = 0; j < NP; j++)
                c[r * NP + j] = _mm512_dpbf16_ps(c[r * NP + j], (__m512bh)a,
                                                 (__m512bh)_mm512_loadu_si512(P + j * ps + 32 * Q));
        }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NP; j++)
            _mm512_mask_storeu_ps(C + r * ldc + 16 * j, mk[j], c[r * NP + j]);
}

typedef void (*tile_fn)(float *, int64_t, const kern_bf16 *, int64_t, const kern_bf16 *, int64_t,
                        int64_t, int64_t, bool);
#define TILE(R, NP)                                                                                \
    static AVX512BF16 void tile##R##_##NP(float *C, int64_t ldc, const kern_bf16 *A, int64_t lda,  \
                                          const kern_bf16 *P, int64_t ps, int64_t K, int64_t n,    \
                                          bool acc) {                                              \
        tile(R, NP, C, ldc, A, lda, P, ps, K, n, acc);                                             \
    }
#define R3(X, NP) X(1, NP) X(2, NP) X(3, NP)
#define R6(X, NP) R3(X, NP) X(4, NP) X(5, NP) X(6, NP)
#define R12(X, NP) R6(X, NP) X(7, NP) X(8, NP) X(9, NP) X(10, NP) X(11, NP) X(12, NP)
#define ALL(X) R12(X, 1) R12(X, 2) R6(X, 3) R6(X, 4) R3(X, 5) R3(X, 6) R3(X, 7) R3(X, 8)
ALL(TILE)
#define ENTRY(R, NP) [R][NP] = tile##R##_##NP,
/* tiles[R][np]: R rows by np panels, np ≤ panels_for(R) */
static const tile_fn tiles[PR_MR + 1][PR_ROW_NP + 1] = {ALL(ENTRY)};
#undef ENTRY
#undef ALL
#undef R12
#undef R6
#undef R3
#undef TILE

/* Panels side by side for a tile of R rows: at most 24 accumulators, and few rows (decode's
 * batches, their product bound by the memory) read more streams of B at once. */
static int panels_for(int64_t R) {
    return R <= 3 ? PR_ROW_NP : R <= 6 ? 4 : PR_NP;
}

/* The product on a row-major A (row stride lda): groups of panels outer, tiles of rows inner (a
 * group stays in L2 while every tile reads it). Every tile of a call takes the first one's group
 * width (the last, shorter tile of rows has fewer accumulators). */
static void rows(float *C, const kern_bf16 *A, const kern_bf16 *P, int64_t ps, int64_t M, int64_t N,
                 int64_t K, int64_t lda, int64_t ldc, bool acc) {
    const int64_t np_all = (N + 15) / 16, NP = panels_for(M < PR_MR ? M : PR_MR);
    for (int64_t p0 = 0; p0 < np_all; p0 += NP) {
        const int np = (int)(np_all - p0 < NP ? np_all - p0 : NP);
        for (int64_t i0 = 0; i0 < M; i0 += PR_MR) {
            const int64_t R = M - i0 < PR_MR ? M - i0 : PR_MR;
            tiles[R][np](C + i0 * ldc + 16 * p0, ldc, A + i0 * lda, lda, P + p0 * ps, ps, K,
                         N - 16 * p0, acc);
        }
    }
}

void bf16_gemm_pairs(const bf16_ws *ws, float *C, const kern_bf16 *A, const kern_bf16 *P,
                     int64_t ps, int64_t M, int64_t N, int64_t K, bool ta, int64_t lda, int64_t ldc,
                     bool acc) {
    if (!ta) {
        rows(C, A, P, ps, M, N, K, lda, ldc, acc);
        return;
    }
    /* A transposed: PR_MR rows at a time gathered into the workspace, row-major */
    kern_bf16 *t = (kern_bf16 *)ws->b;
    for (int64_t i0 = 0; i0 < M; i0 += PR_MR) {
        const int64_t R = M - i0 < PR_MR ? M - i0 : PR_MR;
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < K; k++) t[r * K + k] = A[k * lda + i0 + r];
        rows(C + i0 * ldc, t, P, ps, R, N, K, K, ldc, acc);
    }
}

#else /* no AVX512-BF16 code in this build: kern_bf16_ctx_panels is NONE on the avx512bf16 path */
int bf16_pairs_built(void) {
    return 0;
}
void bf16_gemm_pairs(const bf16_ws *ws, float *C, const kern_bf16 *A, const kern_bf16 *P,
                     int64_t ps, int64_t M, int64_t N, int64_t K, bool ta, int64_t lda, int64_t ldc,
                     bool acc) {
    (void)ws, (void)C, (void)A, (void)P, (void)ps, (void)M, (void)N, (void)K, (void)ta, (void)lda;
    (void)ldc, (void)acc;
}
#endif
