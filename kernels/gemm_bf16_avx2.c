/* The AVX2/FMA path of kern_gemm_bf16: bf16 inputs multiplied in fp32 (contract in
 * gemm_bf16_impl.h: every element one fp32 chain over k in order).
 *
 * How it works. Most products (BLIS's blocking, OpenBLAS's register tile): B is packed by blocks
 * of BF16_KC × BF16_NC into panels of 16 columns ([k][16] fp32, contiguous, so that the L1 cache
 * holds a panel whatever B's row stride), A by blocks of BF16_MC × BF16_KC into panels of BF16_MR
 * rows ([k][MR] fp32); the packing widens bf16 to fp32 (exact: a 16-bit shift) and does both
 * transposes (8 × 8 transposes of 16-bit lanes). A register tile of MR × 16 then runs over the
 * block's k: per k two loads of the B panel's row, MR broadcasts of A and 2·MR fmas into 12
 * accumulators, C loaded (when the chain goes on) and stored once per k block. Measured against
 * a tile that keeps B in bf16 and widens it in registers (one load, a shift and a mask per k):
 * the same speed, with a simpler C (no interleaving of even and odd columns).
 *
 * Decode's rows (M ≤ BF16_STREAM_MAX_M, B untransposed): packing B would write and read every
 * weight once more, which costs more than the product, so B is read in place, front to back:
 * groups of 8 rows of B (one k each) against 16 columns of up to STREAM_ROWS rows of C at a time,
 * held in registers; more rows of C take the same group of B in turn, from the cache. A chunk of
 * C's rows is STREAM_NB columns wide (narrower with more than STREAM_ROWS rows, to stay in L2),
 * so that each row of B is read whole, one stream the prefetcher follows (chunks of 2048 columns
 * read 4 KB of each row at a time and ran at half the speed at M = 1). Each element still gets
 * its products in order of k, so the two kernels agree bit for bit.
 *
 * One row (decode at batch 1, B untransposed): the same groups of 8 rows of B, but each row of
 * the group read 32 bytes at a time and widened in two instructions (a shift for its even
 * columns, a mask for its odd ones), the row's sums kept in even/odd order in the workspace
 * between groups, and the next group prefetched as one is read. Again every element's chain runs
 * over k in order, so a row's bits do not depend on M. */
#include "kernels/gemm_bf16_impl.h"

#include <string.h>

#include "kernels/bf16_inl.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16_x86.h"

#if BF16_X86
#define MR BF16_MR
#define STREAM_ROWS 4   /* rows of C in registers in the streaming kernel */
#define STREAM_NB 16384 /* columns of C per streaming chunk: 4 rows in 256 KB, in L2 */
#define ROW_NB 65536    /* columns of C per chunk of one row: its sums in 256 KB of the workspace */
_Static_assert(ROW_NB <= BF16_WS_B_FLOATS, "a row's chunk of sums fits the workspace");

int bf16_avx2_built(void) {
    return 1;
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* ---------------------------------------------------------------- packing */

/* x[q] ← (x[0][q], x[1][q], ..., x[7][q]): an 8 × 8 transpose of 16-bit lanes. */
static AVX2 INL void transpose8x8(__m128i x[8]) {
    __m128i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm_unpacklo_epi16(x[2 * i], x[2 * i + 1]);
        t[2 * i + 1] = _mm_unpackhi_epi16(x[2 * i], x[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) { /* rows 0-3 (h = 0) and 4-7 (h = 1) */
        u[4 * h + 0] = _mm_unpacklo_epi32(t[4 * h + 0], t[4 * h + 2]);
        u[4 * h + 1] = _mm_unpackhi_epi32(t[4 * h + 0], t[4 * h + 2]);
        u[4 * h + 2] = _mm_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);
    }
    for (int i = 0; i < 4; i++) {
        x[2 * i] = _mm_unpacklo_epi64(u[i], u[4 + i]);
        x[2 * i + 1] = _mm_unpackhi_epi64(u[i], u[4 + i]);
    }
}

/* One panel of A: Ap[k·MR + r] = op(A)[r, k] in fp32 for r < mr, 0 for mr ≤ r < MR; k < kc.
 * A points at op(A)[0, 0]. The vector loop stores 8 floats per k, 2 past the k's MR: the next k
 * rewrites them, and after the panel's last k they fall in the next panel (packed after this one)
 * or the workspace's slack. */
static AVX2 void pack_a(float *restrict Ap, const kern_bf16 *A, int64_t lda, bool ta, int mr,
                        int64_t kc) {
    if (ta) { /* op(A)[r, k] = A[k·lda + r]: the panel's rows lie side by side */
        for (int64_t k = 0; k < kc; k++)
            for (int r = 0; r < MR; r++)
                Ap[k * MR + r] = r < mr ? kern_bf16_val_inl(A[k * lda + r]) : 0.0f;
        return;
    }
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
        __m128i x[8];
        for (int r = 0; r < 8; r++)
            x[r] =
                r < mr ? _mm_loadu_si128((const __m128i *)(A + r * lda + k)) : _mm_setzero_si128();
        transpose8x8(x);
        for (int q = 0; q < 8; q++)
            _mm256_storeu_si256((__m256i *)(Ap + (k + q) * MR),
                                _mm256_slli_epi32(_mm256_cvtepu16_epi32(x[q]), 16));
    }
    for (; k < kc; k++)
        for (int r = 0; r < MR; r++)
            Ap[k * MR + r] = r < mr ? kern_bf16_val_inl(A[r * lda + k]) : 0.0f;
}

/* 8 bf16 (in 16-bit lanes) → 8 fp32 (exact). */
static AVX2 INL __m256 widen8(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* One panel of B: Bp[k·16 + c] = op(B)[k, c] in fp32 for c < nr, 0 for nr ≤ c < 16; k < kc. B
 * points at op(B)[0, 0]. */
static AVX2 void pack_b(float *restrict Bp, const kern_bf16 *B, int64_t ldb, bool tb, int nr,
                        int64_t kc) {
    if (!tb) {
        for (int64_t k = 0; k < kc; k++)
            if (nr == 16) {
                _mm256_storeu_ps(Bp + k * 16,
                                 widen8(_mm_loadu_si128((const __m128i *)(B + k * ldb))));
                _mm256_storeu_ps(Bp + k * 16 + 8,
                                 widen8(_mm_loadu_si128((const __m128i *)(B + k * ldb + 8))));
            } else {
                for (int c = 0; c < 16; c++)
                    Bp[k * 16 + c] = c < nr ? kern_bf16_val_inl(B[k * ldb + c]) : 0.0f;
            }
        return;
    }
    int64_t k = 0; /* op(B)[k, c] = B[c·ldb + k] */
    for (; k + 8 <= kc; k += 8) {
        __m128i lo[8], hi[8];
        for (int c = 0; c < 8; c++) {
            lo[c] =
                c < nr ? _mm_loadu_si128((const __m128i *)(B + c * ldb + k)) : _mm_setzero_si128();
            hi[c] = c + 8 < nr ? _mm_loadu_si128((const __m128i *)(B + (c + 8) * ldb + k))
                               : _mm_setzero_si128();
        }
        transpose8x8(lo);
        transpose8x8(hi);
        for (int q = 0; q < 8; q++) {
            _mm256_storeu_ps(Bp + (k + q) * 16, widen8(lo[q]));
            _mm256_storeu_ps(Bp + (k + q) * 16 + 8, widen8(hi[q]));
        }
    }
    for (; k < kc; k++)
        for (int c = 0; c < 16; c++)
            Bp[k * 16 + c] = c < nr ? kern_bf16_val_inl(B[c * ldb + k]) : 0.0f;
}

/* ---------------------------------------------------------------- the register tile */

/* Row i of a register tile (the packed tile's, the streaming product's and the AVX-512 tile's):
 * its two accumulators of W bits (named variables, not an array, so that GCC keeps them all in
 * registers), their load from C (when load) and their store to C: l at C's row, h W/32 columns on.
 * Each tile adds its own step to them (T_FMA, S_FMA, Z_FMA). */
#define ROW_DECL(W, i) __m##W l##i = _mm##W##_setzero_ps(), h##i = _mm##W##_setzero_ps();
#define ROW_LOAD(W, i)                                                                             \
    if (i < mr && load) {                                                                          \
        l##i = _mm##W##_loadu_ps(C + i * ldc);                                                     \
        h##i = _mm##W##_loadu_ps(C + i * ldc + W / 32);                                            \
    }
#define ROW_STORE(W, i)                                                                            \
    if (i < mr) {                                                                                  \
        _mm##W##_storeu_ps(C + i * ldc, l##i);                                                     \
        _mm##W##_storeu_ps(C + i * ldc + W / 32, h##i);                                            \
    }
#define ACC_DECL(i) ROW_DECL(256, i)
#define ACC_LOAD(i) ROW_LOAD(256, i)
#define ACC_STORE(i) ROW_STORE(256, i)
#define T_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define T_FMA(i)                                                                                   \
    if (i < mr) {                                                                                  \
        const __m256 a = _mm256_broadcast_ss(Ap + k * MR + i);                                     \
        l##i = _mm256_fmadd_ps(a, bl, l##i);                                                       \
        h##i = _mm256_fmadd_ps(a, bh, h##i);                                                       \
    }
/* C[mr, 16] (=, or += when load) Ap-panel · Bp-panel over kc. mr is a constant after inlining. */
static AVX2 INL void tile(const int mr, float *C, int64_t ldc, const float *restrict Ap,
                          const float *restrict Bp, int64_t kc, int load) {
    T_ROWS(ACC_DECL)
    T_ROWS(ACC_LOAD)
    for (int64_t k = 0; k < kc; k++) {
        const __m256 bl = _mm256_loadu_ps(Bp + k * 16), bh = _mm256_loadu_ps(Bp + k * 16 + 8);
        T_ROWS(T_FMA)
    }
    T_ROWS(ACC_STORE)
}
#undef T_FMA
#undef T_ROWS

/* FN##R for R = 1..MR: the inline tile FN (built for ATTR) with its row count a constant, and the
 * table FN##s of them by row count. */
#define TILE_R(FN, ATTR, R)                                                                        \
    static ATTR void FN##R(float *C, int64_t ldc, const float *Ap, const float *Bp, int64_t kc,    \
                           int load) {                                                             \
        FN(R, C, ldc, Ap, Bp, kc, load);                                                           \
    }
#define TILES(FN, ATTR)                                                                            \
    TILE_R(FN, ATTR, 1)                                                                            \
    TILE_R(FN, ATTR, 2)                                                                            \
    TILE_R(FN, ATTR, 3)                                                                            \
    TILE_R(FN, ATTR, 4)                                                                            \
    TILE_R(FN, ATTR, 5)                                                                            \
    TILE_R(FN, ATTR, 6)                                                                            \
    static const tile_fn FN##s[MR + 1] = {NULL, FN##1, FN##2, FN##3, FN##4, FN##5, FN##6};
typedef void (*tile_fn)(float *, int64_t, const float *, const float *, int64_t, int);
TILES(tile, AVX2)

/* The same tile on AVX-512 over two panels side by side (mr × 32: 2·mr accumulators of 16
 * lanes), where the CPU has AVX-512: per k two loads of B (one a panel), mr broadcasts and 2·mr
 * fmas. Each element's chain is the 256-bit tile's, fma by fma in the order of k from 0 or C, so
 * the bits are the same; the twice-wider registers halve the instructions per FLOP (inference's
 * prefill on the avx512 path, gemm_bf16_wide.c, and the avx2 path on such CPUs). */
#define AVX512T __attribute__((target("avx512f,avx2,fma")))
#define Z_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define Z_DECL(i) ROW_DECL(512, i)
#define Z_LOAD(i) ROW_LOAD(512, i)
#define Z_STORE(i) ROW_STORE(512, i)
#define Z_FMA(i)                                                                                   \
    if (i < mr) {                                                                                  \
        const __m512 a = _mm512_set1_ps(Ap[k * MR + i]);                                           \
        l##i = _mm512_fmadd_ps(a, b0, l##i);                                                       \
        h##i = _mm512_fmadd_ps(a, b1, h##i);                                                       \
    }
/* C[mr, 32] (=, or += when load) Ap-panel · the two Bp panels at Bp and Bp + 16·kc over kc. */
static AVX512T INL void tile_z(const int mr, float *C, int64_t ldc, const float *restrict Ap,
                               const float *restrict Bp, int64_t kc, int load) {
    const float *restrict Bq = Bp + 16 * kc;
    Z_ROWS(Z_DECL)
    Z_ROWS(Z_LOAD)
    for (int64_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_loadu_ps(Bp + k * 16), b1 = _mm512_loadu_ps(Bq + k * 16);
        Z_ROWS(Z_FMA)
    }
    Z_ROWS(Z_STORE)
}
TILES(tile_z, AVX512T)
#undef TILES
#undef TILE_R
#undef Z_FMA
#undef Z_DECL
#undef Z_LOAD
#undef Z_STORE
#undef Z_ROWS

/* A tile at C's edge (nr < 16 columns): through a 16-column copy of its rows. */
static AVX2 void tile_edge(int mr, int nr, float *C, int64_t ldc, const float *Ap, const float *Bp,
                           int64_t kc, int load) {
    float t[MR * 16] = {0};
    if (load)
        for (int r = 0; r < mr; r++) memcpy(t + r * 16, C + r * ldc, (size_t)nr * sizeof *t);
    tiles[mr](t, 16, Ap, Bp, kc, load);
    for (int r = 0; r < mr; r++) memcpy(C + r * ldc, t + r * 16, (size_t)nr * sizeof *t);
}

/* ---------------------------------------------------------------- blocked product */

static AVX2 void gemm_blocked(const bf16_ws *ws, float *C, const kern_bf16 *A, const kern_bf16 *B,
                              int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t lda,
                              int64_t ldb, int64_t ldc, bool acc) {
    const int wide = kern_cpu_has(KERN_CPU_AVX512);
    for (int64_t jc = 0; jc < N; jc += BF16_NC) {
        const int64_t nc = min64(BF16_NC, N - jc);
        for (int64_t pc = 0; pc < K; pc += BF16_KC) {
            const int64_t kc = min64(BF16_KC, K - pc);
            for (int64_t jr = 0; jr < nc; jr += 16) {
                const kern_bf16 *b = tb ? B + (jc + jr) * ldb + pc : B + pc * ldb + jc + jr;
                pack_b(ws->b + jr * kc, b, ldb, tb, (int)min64(16, nc - jr), kc);
            }
            const int load = acc || pc > 0; /* continue each element's chain from C */
            for (int64_t ic = 0; ic < M; ic += BF16_MC) {
                const int64_t mc = min64(BF16_MC, M - ic);
                for (int64_t ir = 0; ir < mc; ir += MR) {
                    const kern_bf16 *a = ta ? A + pc * lda + ic + ir : A + (ic + ir) * lda + pc;
                    pack_a(ws->a + ir * kc, a, lda, ta, (int)min64(MR, mc - ir), kc);
                }
                for (int64_t jr = 0; jr < nc; jr += 16) {
                    const int nr = (int)min64(16, nc - jr);
                    const int two = wide && nc - jr >= 32; /* two whole panels: tile_zs */
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        const int mr = (int)min64(MR, mc - ir);
                        float *c = C + (ic + ir) * ldc + jc + jr;
                        if (ir + MR < mc) /* the next tile's rows of C, read at its start */
                            for (int r = 0; r < MR; r++) {
                                _mm_prefetch((const char *)(c + (MR + r) * ldc), _MM_HINT_T0);
                                _mm_prefetch((const char *)(c + (MR + r) * ldc + 15), _MM_HINT_T0);
                            }
                        if (two)
                            tile_zs[mr](c, ldc, ws->a + ir * kc, ws->b + jr * kc, kc, load);
                        else if (nr == 16)
                            tiles[mr](c, ldc, ws->a + ir * kc, ws->b + jr * kc, kc, load);
                        else
                            tile_edge(mr, nr, c, ldc, ws->a + ir * kc, ws->b + jr * kc, kc, load);
                    }
                    jr += two ? 16 : 0;
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- streaming product (decode) */

/* 8 bf16 at p → 8 fp32. */
static AVX2 INL __m256 cvt8(const kern_bf16 *p) {
    return widen8(_mm_loadu_si128((const __m128i *)p));
}

#define S_ROWS(X) X(0) X(1) X(2) X(3)
#define S_FMA(i)                                                                                   \
    if (i < mr) {                                                                                  \
        const __m256 a = _mm256_broadcast_ss(av + i * 8 + q);                                      \
        l##i = _mm256_fmadd_ps(a, bl, l##i);                                                       \
        h##i = _mm256_fmadd_ps(a, bh, h##i);                                                       \
    }
/* C[mr, 16] (=, or += when load) av[mr][8] (row r's kg values at av[r·8 + q]) · B[kg, 16]. */
static AVX2 INL void stream16(const int mr, float *C, int64_t ldc, const float *av,
                              const kern_bf16 *B, int64_t ldb, int kg, int load) {
    S_ROWS(ACC_DECL)
    S_ROWS(ACC_LOAD)
    for (int q = 0; q < kg; q++) {
        const __m256 bl = cvt8(B + q * ldb), bh = cvt8(B + q * ldb + 8);
        S_ROWS(S_FMA)
    }
    S_ROWS(ACC_STORE)
}
#undef S_FMA
#undef S_ROWS
#undef ACC_DECL
#undef ACC_LOAD
#undef ACC_STORE
#undef ROW_DECL
#undef ROW_LOAD
#undef ROW_STORE

/* One group of kg ≤ 8 rows of B against nb columns of C's mr rows. */
static AVX2 INL void stream_group(const int mr, float *C, int64_t ldc, const float *av,
                                  const kern_bf16 *B, int64_t ldb, int kg, int64_t nb, int load) {
    int64_t j = 0;
    if (kg == 8) /* a constant trip count: the loop over the group unrolls */
        for (; j + 16 <= nb; j += 16) stream16(mr, C + j, ldc, av, B + j, ldb, 8, load);
    else
        for (; j + 16 <= nb; j += 16) stream16(mr, C + j, ldc, av, B + j, ldb, kg, load);
    if (j < nb) { /* the last columns, through zero-padded copies */
        const int nr = (int)(nb - j);
        kern_bf16 b[8 * 16] = {0};
        float c[STREAM_ROWS * 16] = {0};
        for (int q = 0; q < kg; q++) memcpy(b + q * 16, B + q * ldb + j, (size_t)nr * sizeof *b);
        if (load)
            for (int r = 0; r < mr; r++)
                memcpy(c + r * 16, C + r * ldc + j, (size_t)nr * sizeof *c);
        stream16(mr, c, 16, av, b, 16, kg, load);
        for (int r = 0; r < mr; r++) memcpy(C + r * ldc + j, c + r * 16, (size_t)nr * sizeof *c);
    }
}

#define STREAM(R)                                                                                  \
    static AVX2 void stream##R(float *C, int64_t ldc, const float *av, const kern_bf16 *B,         \
                               int64_t ldb, int kg, int64_t nb, int load) {                        \
        stream_group(R, C, ldc, av, B, ldb, kg, nb, load);                                         \
    }
STREAM(1)
STREAM(2)
STREAM(3)
STREAM(4)
#undef STREAM
typedef void (*stream_fn)(float *, int64_t, const float *, const kern_bf16 *, int64_t, int, int64_t,
                          int);
static const stream_fn streams[STREAM_ROWS + 1] = {NULL, stream1, stream2, stream3, stream4};

static AVX2 void gemm_stream(float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M, int64_t N,
                             int64_t K, bool ta, int64_t lda, int64_t ldb, int64_t ldc, bool acc) {
    /* C's chunk (M rows × nb columns) in 256 KB: with more rows, narrower chunks */
    const int64_t NB = (M <= STREAM_ROWS ? STREAM_NB : STREAM_NB * STREAM_ROWS / M) / 16 * 16;
    for (int64_t jc = 0; jc < N; jc += NB) {
        const int64_t nb = min64(NB, N - jc);
        for (int64_t k = 0; k < K; k += 8) {
            const int kg = (int)min64(8, K - k);
            float av[BF16_STREAM_MAX_M * 8];
            for (int64_t r = 0; r < M; r++)
                for (int q = 0; q < kg; q++)
                    av[r * 8 + q] =
                        kern_bf16_val_inl(ta ? A[(k + q) * lda + r] : A[r * lda + k + q]);
            for (int64_t g = 0; g < M; g += STREAM_ROWS) /* the group's B from cache after the
                                                          * first rows read it from memory */
                streams[min64(STREAM_ROWS, M - g)](C + g * ldc + jc, ldc, av + g * 8,
                                                   B + k * ldb + jc, ldb, kg, nb, acc || k > 0);
        }
    }
}

/* ---------------------------------------------------------------- one row (decode at batch 1) */

/* c[0, 16) of 16 columns as the row kernel keeps them: the even columns, then the odd ones. */
static INL void to_even_odd(float *restrict s, const float *restrict c) {
    for (int i = 0; i < 8; i++) {
        s[i] = c[2 * i];
        s[8 + i] = c[2 * i + 1];
    }
}
static INL void from_even_odd(float *restrict c, const float *restrict s) {
    for (int i = 0; i < 8; i++) {
        c[2 * i] = s[i];
        c[2 * i + 1] = s[8 + i];
    }
}

/* S[j, j + 16·w) (even/odd order) += a[0..kg) · B[kg, j + 16·w) for w = 1 or 2: per 16 columns
 * one 32-byte load of a row of B, its even columns widened by a shift and its odd ones by a mask,
 * two fmas; pf points kg rows on (the next group, prefetched as this one is read) or at this
 * group. */
static AVX2 INL void row_cols(float *S, const __m256 *a, const kern_bf16 *B, const kern_bf16 *pf,
                              int64_t ldb, const int kg, int64_t j, const int w) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 e0 = _mm256_loadu_ps(S + j), o0 = _mm256_loadu_ps(S + j + 8), e1 = e0, o1 = o0;
    if (w == 2) {
        e1 = _mm256_loadu_ps(S + j + 16);
        o1 = _mm256_loadu_ps(S + j + 24);
    }
    for (int q = 0; q < kg; q++) {
        _mm_prefetch((const char *)(pf + q * ldb + j), _MM_HINT_T0);
        const __m256i v = _mm256_loadu_si256((const __m256i *)(B + q * ldb + j));
        e0 = _mm256_fmadd_ps(a[q], _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), e0);
        o0 = _mm256_fmadd_ps(a[q], _mm256_castsi256_ps(_mm256_and_si256(v, hi)), o0);
        if (w == 2) {
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(B + q * ldb + j + 16));
            e1 = _mm256_fmadd_ps(a[q], _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), e1);
            o1 = _mm256_fmadd_ps(a[q], _mm256_castsi256_ps(_mm256_and_si256(v1, hi)), o1);
        }
    }
    _mm256_storeu_ps(S + j, e0);
    _mm256_storeu_ps(S + j + 8, o0);
    if (w == 2) {
        _mm256_storeu_ps(S + j + 16, e1);
        _mm256_storeu_ps(S + j + 24, o1);
    }
}

/* S[0, n16) += a[0..kg) · B[kg, n16), 32 columns a step (16 at the end). */
static AVX2 INL void row_group(float *S, const __m256 *a, const kern_bf16 *B, const kern_bf16 *pf,
                               int64_t ldb, const int kg, int64_t n16) {
    int64_t j = 0;
    for (; j + 32 <= n16; j += 32) row_cols(S, a, B, pf, ldb, kg, j, 2);
    if (j < n16) row_cols(S, a, B, pf, ldb, kg, j, 1);
}

static AVX2 void row_group8(float *S, const __m256 *a, const kern_bf16 *B, const kern_bf16 *pf,
                            int64_t ldb, int64_t n16) {
    row_group(S, a, B, pf, ldb, 8, n16);
}

/* C[0, nb) (=, or += when acc) a · B[K, nb], a = op(A)'s row (a[k·sa]), on one row of C: the
 * matrix-vector product of decode at batch 1. Groups of 8 rows of B, each read once, with the
 * 16-column sums in registers through a group and in S (the workspace, even/odd order) between
 * groups; the next group is prefetched as a group is read (measured on the Zen 3 EPYC, decode's
 * shapes, 51 MB of weights: 14 GB/s against 9.5 for the streaming kernel with one row, which
 * widens by vpmovzxwd and reads half as much per load). Every element's chain still runs over k in
 * order from 0 (or from C), so the bits are the streaming and the blocked kernels'. */
static AVX2 void gemv_row(float *S, float *C, const kern_bf16 *A, int64_t sa, const kern_bf16 *B,
                          int64_t nb, int64_t K, int64_t ldb, bool acc) {
    const int64_t n16 = nb / 16 * 16;
    for (int64_t j = 0; j < n16; j += 16)
        if (acc)
            to_even_odd(S + j, C + j);
        else
            memset(S + j, 0, 16 * sizeof *S);
    for (int64_t k = 0; k < K; k += 8) {
        const int kg = (int)min64(8, K - k);
        __m256 a[8];
        for (int q = 0; q < kg; q++)
            a[q] = _mm256_castsi256_ps(_mm256_set1_epi32((int)((uint32_t)A[(k + q) * sa] << 16)));
        const kern_bf16 *b = B + k * ldb;
        if (kg == 8) /* prefetch the next group while it is whole, else this one again */
            row_group8(S, a, b, k + 16 <= K ? b + 8 * ldb : b, ldb, n16);
        else
            row_group(S, a, b, b, ldb, kg, n16);
    }
    for (int64_t j = 0; j < n16; j += 16) from_even_odd(C + j, S + j);
    for (int64_t j = n16; j < nb; j++) { /* the last columns: one chain each */
        float c = acc ? C[j] : 0.0f;
        for (int64_t k = 0; k < K; k++)
            c += kern_bf16_val_inl(A[k * sa]) * kern_bf16_val_inl(B[k * ldb + j]);
        C[j] = c;
    }
}

void bf16_gemm_avx2(const bf16_ws *ws, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                    int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                    bool acc) {
    if (!tb && M == 1) { /* the row's sums in ws->b, by chunks of ROW_NB columns */
        for (int64_t jc = 0; jc < N; jc += ROW_NB)
            gemv_row(ws->b, C + jc, A, ta ? lda : 1, B + jc, min64(ROW_NB, N - jc), K, ldb, acc);
        return;
    }
    if (!tb && M <= BF16_STREAM_MAX_M)
        gemm_stream(C, A, B, M, N, K, ta, lda, ldb, ldc, acc);
    else
        gemm_blocked(ws, C, A, B, M, N, K, ta, tb, lda, ldb, ldc, acc);
}

#else /* no AVX2 path (kern_bf16_path_check refuses it) */
int bf16_avx2_built(void) {
    return 0;
}
void bf16_gemm_avx2(const bf16_ws *ws, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                    int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                    bool acc) {
    (void)ws;
    bf16_gemm_plain(C, A, B, M, N, K, ta, tb, lda, ldb, ldc, acc);
}
#endif
