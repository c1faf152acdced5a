/* gemm_f32_panel: the forward's product C[M,N] (=, or += when acc) A[M,K] · B[K,N] against an
 * fp32 weight packed once into panels (gemm.h: kern_f32_panel_pack, kern_f32_panel_gemm), in AVX2
 * and FMA register tiles.
 *
 * Layout: B[K, N] cut into panels of 16 columns, panel p = columns [16p, 16p + 16), stored [K][16]
 * contiguous, panels one after another (the last padded with zeros): sgemm's packed B, made at
 * load instead of on every call. The product runs as BLIS's Haswell kernels do: rows in blocks
 * of F32_MC, K in blocks of F32_KC (A's block packed per call into slivers of at most F32_MR
 * rows, as even as they go, in L2; a panel's block, 32 KB, read by every sliver in turn, which
 * also prefetch the next block), tiles of up to F32_MR rows × 16
 * columns (12 accumulators) over the block. The sizes were chosen by bench/gemm_bench's prefill
 * part on a Zen 3 core (1.1-1.2x OpenBLAS's sgemm at 32-128 rows, 1.0-1.08x at 2048; a K block
 * of 512 keeps the model's K = 512 products in one pass over C). One row (decode) reads F32_NP
 * panels side by side instead, one linear stream each.
 *
 * Every element is one chain of fmas over k = 0..K-1 in order, from 0 (or from C): a block of K
 * stores the partial sum in C and the next block loads it again, which is exact. So a row's
 * result depends neither on M nor on the row's place in A nor on which path (tile or row) ran
 * it: prefill, decode and a server's batches give the same bits. */
#include "kernels/gemm.h"

#include "kernels/cpu.h"
#include "kernels/gemm_bf16_x86.h"
#include "kernels/gemm_nn.h"
#include "kernels/panel_table.h"

#include <stddef.h>

int64_t kern_f32_panel_elems(int64_t K, int64_t N) {
    return panel_elems(K, N);
}

void kern_f32_panel_pack(float *P, const float *B, int64_t K, int64_t N, int64_t ldb) {
    for (int64_t p = 0; p < (N + 15) / 16; p++)
        for (int64_t k = 0; k < K; k++) {
            float *row = P + (p * K + k) * 16;
            for (int i = 0; i < 16; i++) row[i] = p * 16 + i < N ? B[k * ldb + p * 16 + i] : 0.0f;
        }
}

#if BF16_X86 /* x86-64 with GCC or Clang: AVX2 and INL as the bf16 kernels' */

#define F32_MR 6   /* rows per tile: 12 accumulators, 2 panel registers, 1 broadcast */
#define F32_KC 512 /* rows of B per block: a panel's block, 32 KB, from L1 and L2 */
#define F32_MC 72  /* rows of A per block: 144 KB of A's block at F32_KC, in L2 */
#define F32_NP 8   /* panels side by side in a one-row product: 16 accumulators */

#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define DECL(i) __m256 c0_##i = _mm256_setzero_ps(), c1_##i = _mm256_setzero_ps();
#define LOAD(i)                                                                                    \
    if (i < mr && load) {                                                                          \
        c0_##i = _mm256_maskload_ps(C + i * ldc, m0);                                              \
        c1_##i = _mm256_maskload_ps(C + i * ldc + 8, m1);                                          \
    }
#define FMA(i)                                                                                     \
    if (i < mr) {                                                                                  \
        const __m256 a = _mm256_broadcast_ss(A + k * F32_MR + i);                                  \
        c0_##i = _mm256_fmadd_ps(a, b0, c0_##i);                                                   \
        c1_##i = _mm256_fmadd_ps(a, b1, c1_##i);                                                   \
    }
#define STORE(i)                                                                                   \
    if (i < mr) {                                                                                  \
        if (full) {                                                                                \
            _mm256_storeu_ps(C + i * ldc, c0_##i);                                                 \
            _mm256_storeu_ps(C + i * ldc + 8, c1_##i);                                             \
        } else {                                                                                   \
            _mm256_maskstore_ps(C + i * ldc, m0, c0_##i);                                          \
            _mm256_maskstore_ps(C + i * ldc + 8, m1, c1_##i);                                      \
        }                                                                                          \
    }

/* One tile: mr (a constant after inlining) rows × the panel's 16 columns (n of them kept), over
 * kc rows of the panel from Bp; load: the chains go on from C (else they start at 0). Meanwhile
 * it prefetches npf lines (rows of 16) from pf into L2, spread evenly over its rows. */
static AVX2 INL void tile(const int mr, float *restrict C, const float *restrict A,
                          const float *restrict Bp, int64_t kc, int64_t ldc, int n, int load,
                          const float *pf, int64_t npf) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), lane);
    const int full = n == 16;
    for (int i = 0; i < mr; i++) _mm_prefetch((const char *)(C + i * ldc), _MM_HINT_T0);
    for (int i = 0; i < mr; i++) _mm_prefetch((const char *)(C + i * ldc + 15), _MM_HINT_T0);
    ROWS(DECL)
    ROWS(LOAD)
    const int64_t every = npf > 0 && npf <= kc ? kc / npf : 1; /* rows between prefetches */
    int64_t left = every;
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_loadu_ps(Bp + k * 16);
        const __m256 b1 = _mm256_loadu_ps(Bp + k * 16 + 8);
        if (npf > 0 && --left == 0) { /* a line of the next block, into L2 */
            _mm_prefetch((const char *)pf, _MM_HINT_T1);
            pf += 16, npf--, left = every;
        }
        ROWS(FMA)
    }
    for (; npf > 0; npf--, pf += 16) _mm_prefetch((const char *)pf, _MM_HINT_T1);
    ROWS(STORE)
}
#undef DECL
#undef LOAD
#undef FMA
#undef STORE
#undef ROWS

/* The tile for mr = 1..F32_MR rows, each a copy of tile() with a constant row count. */
#define MR_SIZES(X) X(1) X(2) X(3) X(4) X(5) X(6)
#define TILE(R)                                                                                    \
    static AVX2 void tile##R(float *restrict C, const float *restrict A, const float *restrict Bp, \
                             int64_t kc, int64_t ldc, int n, int load, const float *pf,            \
                             int64_t npf) {                                                        \
        tile(R, C, A, Bp, kc, ldc, n, load, pf, npf);                                              \
    }
MR_SIZES(TILE)
#undef TILE
#define TILE_NAME(R) tile##R,
typedef void (*tile_fn)(float *restrict, const float *restrict, const float *restrict, int64_t,
                        int64_t, int, int, const float *, int64_t);
static const tile_fn tiles[F32_MR + 1] = {NULL, MR_SIZES(TILE_NAME)};
#undef TILE_NAME
#undef MR_SIZES

/* Columns [k, k + 8) of F32_MR rows r[] (two more rows of zeros) as 8 groups of 8: group j =
 * column j's F32_MR values, then two zeros; stored at w + 6j, each store's zeros overwritten by
 * the next group's values (the last group's land past the columns: the buffer has room). */
static AVX2 INL void pack_8(float *w, const float *A, int64_t lda, int64_t k) {
    const __m256 z = _mm256_setzero_ps();
    const __m256 t0 = _mm256_unpacklo_ps(_mm256_loadu_ps(A + k), _mm256_loadu_ps(A + lda + k));
    const __m256 t1 = _mm256_unpackhi_ps(_mm256_loadu_ps(A + k), _mm256_loadu_ps(A + lda + k));
    const __m256 r2 = _mm256_loadu_ps(A + 2 * lda + k), r3 = _mm256_loadu_ps(A + 3 * lda + k);
    const __m256 r4 = _mm256_loadu_ps(A + 4 * lda + k), r5 = _mm256_loadu_ps(A + 5 * lda + k);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, z, 0x44), s5 = _mm256_shuffle_ps(t4, z, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, z, 0x44), s7 = _mm256_shuffle_ps(t5, z, 0xEE);
    _mm256_storeu_ps(w + 0 * F32_MR, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(w + 1 * F32_MR, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(w + 2 * F32_MR, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(w + 3 * F32_MR, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(w + 4 * F32_MR, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(w + 5 * F32_MR, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(w + 6 * F32_MR, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(w + 7 * F32_MR, _mm256_permute2f128_ps(s3, s7, 0x31));
}

/* Sliver s of ns over a block of `rows` rows: its first row; sliver s holds rows [sliver_row(s),
 * sliver_row(s + 1)), ns = ceil(rows / F32_MR) slivers of sizes differing by one at most (32 rows:
 * 5, 5, 6, 5, 5, 6, not five of 6 and one of 2, whose 4 accumulators wait on the fma latency and
 * cost as much as 4 rows of a full tile: 10% of a serving step's products at 32 rows). */
static int64_t sliver_row(int64_t s, int64_t ns, int64_t rows) {
    return s * rows / ns;
}

/* A's block of `rows` rows and kc columns (row stride lda) into its ns slivers (sliver_row), each
 * [kc][F32_MR] (a sliver's rows past its own: the next sliver's, or zero past the block, which
 * the tiles never read): one stream per tile, whatever lda. */
static AVX2 void pack_a(float *restrict W, const float *restrict A, int64_t lda, int64_t rows,
                        int64_t kc) {
    const int64_t ns = (rows + F32_MR - 1) / F32_MR;
    for (int64_t s = 0; s < ns; s++) {
        float *w = W + s * F32_MR * kc;
        const int64_t r0 = sliver_row(s, ns, rows);
        const int64_t mr = rows - r0 < F32_MR ? rows - r0 : F32_MR; /* rows inside the block */
        int64_t k = 0;
        if (mr == F32_MR)
            for (; k + 8 <= kc; k += 8) pack_8(w + k * F32_MR, A + r0 * lda, lda, k);
        for (; k < kc; k++)
            for (int64_t r = 0; r < F32_MR; r++)
                w[k * F32_MR + r] = r < mr ? A[(r0 + r) * lda + k] : 0.0f;
    }
}

/* The packed block of A, per thread (144 KB; pack_8's last store runs 2 floats past a block). */
static _Thread_local float a_pack[F32_MC * F32_KC + 8] __attribute__((aligned(64)));

/* The block of B that follows panel p's block at row p0 (gemm_tiles' order: the next panel, else
 * the first panel's next K block, else its first block for the next block of A's rows, when
 * there is one): its first row, and its rows in *nk (0: none). */
static const float *next_block(const float *P, int64_t ps, int64_t p, int64_t np, int64_t p0,
                               int64_t K, int more_rows, int64_t *nk) {
    const int64_t kc = K - p0 < F32_KC ? K - p0 : F32_KC;
    if (p + 1 < np) return *nk = kc, P + (p + 1) * ps + p0 * 16;
    if (p0 + F32_KC < K)
        return *nk = K - p0 - F32_KC < F32_KC ? K - p0 - F32_KC : F32_KC, P + (p0 + F32_KC) * 16;
    *nk = more_rows ? (K < F32_KC ? K : F32_KC) : 0;
    return P;
}

/* The tiles of C over its blocks. While the ns slivers of A's block run over panel p's block,
 * each prefetches its share of the next block of B into L2 (next_block): the weight's stream
 * from memory runs under the products, as the roofline's max(FLOPs / C, bytes / BW) has it.
 * With the first sliver alone fetching it (one line each of its rows, into L1) the stream
 * outran the memory and the first sliver waited: on a weight past the caches (a step's 103 MB
 * of the serving benchmark's model) a product of 32 rows cost its weight's read on top of its
 * FLOPs. */
static AVX2 void gemm_tiles(float *C, const float *A, const float *P, int64_t ps, int64_t M,
                            int64_t N, int64_t K, int64_t lda, int64_t ldc, int acc) {
    const int64_t np = (N + 15) / 16;
    for (int64_t i0 = 0; i0 < M; i0 += F32_MC) { /* a block's rows of C stay in L2 over K */
        const int64_t i1 = i0 + F32_MC < M ? i0 + F32_MC : M;
        const int64_t ns = (i1 - i0 + F32_MR - 1) / F32_MR;
        for (int64_t p0 = 0; p0 < K; p0 += F32_KC) {
            const int64_t kc = K - p0 < F32_KC ? K - p0 : F32_KC;
            const int load = acc || p0 > 0;
            pack_a(a_pack, A + i0 * lda + p0, lda, i1 - i0, kc);
            for (int64_t p = 0; p < np; p++) {
                const int n = (int)(N - 16 * p < 16 ? N - 16 * p : 16);
                const float *Bp = P + p * ps + p0 * 16;
                int64_t nk;
                const float *nb = next_block(P, ps, p, np, p0, K, i1 < M, &nk);
                for (int64_t s = 0; s < ns; s++) {
                    const int64_t r0 = sliver_row(s, ns, i1 - i0);
                    const int64_t mr = sliver_row(s + 1, ns, i1 - i0) - r0;
                    const int64_t a = nk * s / ns, b = nk * (s + 1) / ns;
                    tiles[mr](C + (i0 + r0) * ldc + 16 * p, a_pack + s * F32_MR * kc, Bp, kc, ldc,
                              n, load, nb + a * 16, b - a);
                }
            }
        }
    }
}

/* out[0, 16·np) (=, or += when acc) a[0, K) · np panels from P (panel stride ps): 2·np sums
 * of 8 columns, sum i in panel i / 2, its half i % 2. */
static AVX2 INL void panels(const int np, float *out, const float *a, const float *P, int64_t ps,
                            int64_t K, int acc) {
    __m256 sum[2 * F32_NP];
    for (int i = 0; i < 2 * np; i++)
        sum[i] = acc ? _mm256_loadu_ps(out + 8 * i) : _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m256 ak = _mm256_broadcast_ss(a + k);
        for (int i = 0; i < 2 * np; i++)
            sum[i] =
                _mm256_fmadd_ps(ak, _mm256_loadu_ps(P + i / 2 * ps + k * 16 + i % 2 * 8), sum[i]);
    }
    for (int i = 0; i < 2 * np; i++) _mm256_storeu_ps(out + 8 * i, sum[i]);
}

static AVX2 void panels_group(float *out, const float *a, const float *P, int64_t ps, int64_t K,
                              int acc) {
    panels(F32_NP, out, a, P, ps, K, acc);
}
static AVX2 void panels_one(float *out, const float *a, const float *P, int64_t K, int acc) {
    panels(1, out, a, P, 16 * K, K, acc);
}

/* One row: the whole panels by groups of F32_NP, then one at a time; a short last panel through
 * a copy of its columns. */
static void gemv_panels(float *C, const float *a, const float *P, int64_t ps, int64_t N, int64_t K,
                        int acc) {
    const int64_t whole = N / 16;
    int64_t p = 0;
    for (; p + F32_NP <= whole; p += F32_NP) panels_group(C + 16 * p, a, P + p * ps, ps, K, acc);
    for (; p < whole; p++) panels_one(C + 16 * p, a, P + p * ps, K, acc);
    if (N == 16 * whole) return;
    float tmp[16] = {0}; /* the lanes past N: added to, never read back */
    for (int64_t j = 16 * whole; j < N && acc; j++) tmp[j - 16 * whole] = C[j];
    panels_one(tmp, a, P + whole * ps, K, acc);
    for (int64_t j = 16 * whole; j < N; j++) C[j] = tmp[j - 16 * whole];
}

/* kern_cpu_has's answer, asked once (cpuid costs microseconds in a VM, a product may not):
 * a constant of the CPU, kept as gemm_nn.c keeps its own. */
static int have_avx2_fma(void) {
    static int have = -1;
    if (have < 0) have = kern_cpu_has(KERN_CPU_AVX2_FMA);
    return have;
}

static void panel_gemm_avx2(float *C, const float *A, const float *P, int64_t ps, int64_t M,
                            int64_t N, int64_t K, int64_t lda, int64_t ldc, int acc) {
    if (M == 1)
        gemv_panels(C, A, P, ps, N, K, acc);
    else
        gemm_tiles(C, A, P, ps, M, N, K, lda, ldc, acc);
}
#else /* not x86-64 with GCC or Clang: the plain loop alone */
static int have_avx2_fma(void) {
    return 0;
}
#define panel_gemm_avx2 kern_f32_panel_gemm_plain
#endif

int kern_f32_panel_available(void) {
    return have_avx2_fma();
}

void kern_f32_panel_gemm(float *C, const float *A, const float *P, int64_t ps, int64_t M, int64_t N,
                         int64_t K, int64_t lda, int64_t ldc, int acc) {
    if (M < 1 || N < 1) return;
    if (have_avx2_fma()) /* an AVX2 instruction on a CPU without it is SIGILL */
        panel_gemm_avx2(C, A, P, ps, M, N, K, lda, ldc, acc);
    else
        kern_f32_panel_gemm_plain(C, A, P, ps, M, N, K, lda, ldc, acc);
}

/* Panel by panel as a [K, 16] matrix of row stride 16, through kern_gemm_nn: the same chains
 * (fma where the compiler or the CPU fuses them, which decides whether the bits equal the tiles').
 */
void kern_f32_panel_gemm_plain(float *C, const float *A, const float *P, int64_t ps, int64_t M,
                               int64_t N, int64_t K, int64_t lda, int64_t ldc, int acc) {
    for (int64_t p = 0; 16 * p < N; p++)
        kern_gemm_nn(C + 16 * p, A, P + p * ps, M, N - 16 * p < 16 ? N - 16 * p : 16, K, lda, 16,
                     ldc, acc);
}
