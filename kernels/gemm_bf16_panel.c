/* gemm_bf16_panel: the panel layouts of a bf16 weight (gemm_bf16.h: kern_bf16_panel_pack,
 * kern_bf16_ctx_add_panel), the K16 layout's AVX2 matrix-vector kernel (one-row products, decode at
 * batch 1) and the storage. The PAIRS layout's kernel is gemm_bf16_pairs.c.
 *
 * The K16 layout: B[K, N] cut into panels of 16 columns, panel p = columns [16p, 16p + 16), stored
 * [K][16] contiguous, panels one after another (the last padded with zeros). Within a panel's row
 * the 16 values are interleaved so that 32-bit lane i holds column i in its low half and column
 * 8 + i in its high half: a 16-bit shift widens columns 0..7 to fp32, a mask columns 8..15, and
 * the sums come out in column order. The kernel reads PANEL_NP panels side by side, each one
 * linear stream with its 16 sums in registers (a [K, N] row-major weight read a row at a time
 * gives only short streams: the one-row kernel of gemm_bf16_avx2.c). Every element is still one
 * fp32 chain over k in order from 0 (or from C), so the bits equal the other own kernels'. */
#ifndef _DEFAULT_SOURCE /* (the SMPI build defines it) */
#define _DEFAULT_SOURCE /* madvise, posix_memalign */
#endif
#include "kernels/gemm_bf16_impl.h"
#include "kernels/panel_table.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/bf16_inl.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_bf16_x86.h"

int64_t kern_bf16_panel_elems(kern_bf16_panel_layout l, int64_t K, int64_t N) {
    return l == KERN_BF16_PANELS_K16     ? panel_elems(K, N)
           : l == KERN_BF16_PANELS_PAIRS ? panel_elems((K + 1) / 2 * 2, N)
                                         : 0;
}

/* Huge pages: the kernel streams the copies at the memory's full rate, and with 4 KB pages every
 * 4 KB of each of its 8 streams costs a TLB miss and restarts the hardware prefetcher (on a Zen 3
 * EPYC decode's 51.6 MB of copies were read about 6% faster from 2 MB pages; Linux gives them to
 * a 2 MB-aligned block that asks with MADV_HUGEPAGE where THP is "madvise"). */
#define PANEL_ALIGN ((size_t)2 << 20)

kern_bf16 *kern_bf16_panel_alloc(int64_t elems) {
    const size_t bytes = (size_t)(elems > 0 ? elems : 1) * sizeof(kern_bf16);
    void *p = NULL;
    if (posix_memalign(&p, PANEL_ALIGN, bytes)) return NULL;
#ifdef MADV_HUGEPAGE /* advice (whole 4 KB pages): without it, or refused, the pages are 4 KB */
    (void)madvise(p, (bytes + 4095) / 4096 * 4096, MADV_HUGEPAGE);
#endif
    memset(p, 0, bytes);
    return p;
}

/* By blocks of PACK_KB rows of B (in L2 while each panel takes its piece of them). */
#define PACK_KB 64

static void pack_k16(kern_bf16 *P, const kern_bf16 *B, int64_t K, int64_t N, int64_t ldb) {
    for (int64_t k0 = 0; k0 < K; k0 += PACK_KB)
        for (int64_t p = 0; p < (N + 15) / 16; p++)
            for (int64_t k = k0; k < K && k < k0 + PACK_KB; k++) {
                kern_bf16 *row = P + (p * K + k) * 16;
#if BF16_X86
                if (p * 16 + 16 <= N) { /* SSE2: columns 0..7 and 8..15 interleaved by 16 bits */
                    const __m128i lo = _mm_loadu_si128((const __m128i *)(B + k * ldb + p * 16));
                    const __m128i hi = _mm_loadu_si128((const __m128i *)(B + k * ldb + p * 16 + 8));
                    _mm_storeu_si128((__m128i *)row, _mm_unpacklo_epi16(lo, hi));
                    _mm_storeu_si128((__m128i *)(row + 8), _mm_unpackhi_epi16(lo, hi));
                    continue;
                }
#endif
                for (int i = 0; i < 16; i++) {
                    const int64_t j = p * 16 + i;
                    row[i < 8 ? 2 * i : 2 * (i - 8) + 1] = j < N ? B[k * ldb + j] : 0;
                }
            }
}

/* The pair layout (the avx512bf16 path's, gemm_bf16_pairs.c): panel p's pair q, [16][2], holds
 * column c's B[2q, c] and B[2q + 1, c] at 2c and 2c + 1 (zeros past K or N). */
static void pack_pairs(kern_bf16 *P, const kern_bf16 *B, int64_t K, int64_t N, int64_t ldb) {
    const int64_t Q = (K + 1) / 2;
    for (int64_t q0 = 0; q0 < Q; q0 += PACK_KB / 2)
        for (int64_t p = 0; p < (N + 15) / 16; p++)
            for (int64_t q = q0; q < Q && q < q0 + PACK_KB / 2; q++) {
                kern_bf16 *row = P + (p * Q + q) * 32;
                const kern_bf16 *b0 = B + 2 * q * ldb + p * 16, *b1 = b0 + ldb;
                const int two = 2 * q + 1 < K; /* the pair has its second row */
#if BF16_X86
                if (p * 16 + 16 <= N && two) { /* SSE2: the two rows interleaved by 16 bits */
                    const __m128i l0 = _mm_loadu_si128((const __m128i *)b0);
                    const __m128i h0 = _mm_loadu_si128((const __m128i *)(b0 + 8));
                    const __m128i l1 = _mm_loadu_si128((const __m128i *)b1);
                    const __m128i h1 = _mm_loadu_si128((const __m128i *)(b1 + 8));
                    _mm_storeu_si128((__m128i *)row, _mm_unpacklo_epi16(l0, l1));
                    _mm_storeu_si128((__m128i *)(row + 8), _mm_unpackhi_epi16(l0, l1));
                    _mm_storeu_si128((__m128i *)(row + 16), _mm_unpacklo_epi16(h0, h1));
                    _mm_storeu_si128((__m128i *)(row + 24), _mm_unpackhi_epi16(h0, h1));
                    continue;
                }
#endif
                for (int i = 0; i < 16; i++) {
                    const int in = p * 16 + i < N;
                    row[2 * i] = in ? b0[i] : 0;
                    row[2 * i + 1] = in && two ? b1[i] : 0;
                }
            }
}

void kern_bf16_panel_pack(kern_bf16_panel_layout l, kern_bf16 *P, const kern_bf16 *B, int64_t K,
                          int64_t N, int64_t ldb) {
    if (l == KERN_BF16_PANELS_K16) pack_k16(P, B, K, N, ldb);
    if (l == KERN_BF16_PANELS_PAIRS) pack_pairs(P, B, K, N, ldb);
}

#if BF16_X86
#define PANEL_NP 8 /* panels read side by side: 16 accumulators */

/* out[0, 16·np) (=, or += when acc) a[0, K) · np panels from P (panel stride ps elements). */
static AVX2 INL void panels(const int np, float *out, const float *a, const kern_bf16 *P,
                            int64_t ps, int64_t K, bool acc) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 lo_s[PANEL_NP], hi_s[PANEL_NP];
    for (int i = 0; i < np; i++) {
        lo_s[i] = acc ? _mm256_loadu_ps(out + 16 * i) : _mm256_setzero_ps();
        hi_s[i] = acc ? _mm256_loadu_ps(out + 16 * i + 8) : _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < K; k++) {
        const __m256 ak = _mm256_broadcast_ss(a + k);
        for (int i = 0; i < np; i++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(P + i * ps + k * 16));
            lo_s[i] = _mm256_fmadd_ps(ak, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), lo_s[i]);
            hi_s[i] = _mm256_fmadd_ps(ak, _mm256_castsi256_ps(_mm256_and_si256(v, hi)), hi_s[i]);
        }
    }
    for (int i = 0; i < np; i++) {
        _mm256_storeu_ps(out + 16 * i, lo_s[i]);
        _mm256_storeu_ps(out + 16 * i + 8, hi_s[i]);
    }
}

#define PANELS(R)                                                                                  \
    static AVX2 void panels##R(float *out, const float *a, const kern_bf16 *P, int64_t ps,         \
                               int64_t K, bool acc) {                                              \
        panels(R, out, a, P, ps, K, acc);                                                          \
    }
PANELS(1)
PANELS(2)
PANELS(3)
PANELS(4)
PANELS(5)
PANELS(6)
PANELS(7)
PANELS(8)
typedef void (*panels_fn)(float *, const float *, const kern_bf16 *, int64_t, int64_t, bool);
static const panels_fn panel_fns[PANEL_NP + 1] = {NULL,    panels1, panels2, panels3, panels4,
                                                  panels5, panels6, panels7, panels8};

void bf16_gemv_panel_avx2(const bf16_ws *ws, float *C, const kern_bf16 *A, int64_t sa,
                          const kern_bf16 *P, int64_t ps, int64_t N, int64_t K, bool acc) {
    float *a = ws->a; /* the row of A widened once (K ≤ BF16_WS_A_FLOATS) */
    for (int64_t k = 0; k < K; k++) a[k] = kern_bf16_val_inl(A[k * sa]);
    const int64_t np_all = (N + 15) / 16;
    for (int64_t p0 = 0; p0 < np_all; p0 += PANEL_NP) {
        const int np = (int)(np_all - p0 < PANEL_NP ? np_all - p0 : PANEL_NP);
        const int64_t j0 = p0 * 16, n = N - j0 < 16 * np ? N - j0 : 16 * np;
        if (n == 16 * np) {
            panel_fns[np](C + j0, a, P + p0 * ps, ps, K, acc);
            continue;
        }
        float tmp[16 * PANEL_NP]; /* the last group, its last panel short */
        if (acc) memcpy(tmp, C + j0, (size_t)n * sizeof *tmp);
        panel_fns[np](tmp, a, P + p0 * ps, ps, K, acc);
        memcpy(C + j0, tmp, (size_t)n * sizeof *tmp);
    }
}

#endif /* no AVX2 path: no panel kernel (kern_bf16_ctx_panels is 0, nothing reaches it) */
