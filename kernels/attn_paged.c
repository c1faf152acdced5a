/* Attention through a block table (see attn_paged.h).
 *
 * For one query row and one kv head, the G = Nl/Kl query heads that share the head are scored
 * together against each cache row as the block table yields it (each key row read once for the G
 * heads), softmaxed, and the value rows added in position order. No BLAS: sgemm's blocking would
 * make a row's bits depend on the rows beside it.
 *
 * Two versions of the scores and the weighted sum: the plain one (8-lane dot products that GCC
 * turns into SSE2) and, on a CPU with AVX2 and FMA (checked at run time), 8-wide fused
 * multiply-adds, which made the decode step of a 4-layer D=256 model 15-20% faster than with the
 * plain one (its attention ran at a few GFLOP/s). The AVX2 scores take four key rows at a time and
 * the weighted sum keeps 64 output columns in registers over every position, each element the
 * same chain of fmas as one row at a time and one axpy a position made (the same bits), 1.5-1.8x
 * faster on a prefill's rows. Each is row-independent on its own; a run uses one of them for every
 * call. */
#include "kernels/attn_paged.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/attn_paged_inl.h"
#include "kernels/vecmath.h"

int64_t kern_attn_paged_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl) {
    return (Nl / Kl) * (p0 + n);
}

/* Row p of the keys (vals = 0) or values (vals = 1), kv head j. */
static const float *page_row(const kern_kv_pages *kv, int vals, int64_t p, int64_t j, int64_t H) {
    const float *base = vals ? kv->v : kv->k;
    const kern_kv_table *at = &kv->at;
    return base + at->table[p / at->bs] * at->bstride + (p % at->bs) * at->ldk + j * H;
}

/* A version's two row operations: the dot product of two rows and y[n] += a · x[n]. */
typedef float (*dot_fn)(const float *x, const float *y, int64_t n);
typedef void (*axpy_fn)(float *restrict y, float a, const float *restrict x, int64_t n);

/* s[g·S + t] = scale · q_g · k_t for the G query heads q[G, H] and positions t < S. Each version
 * passes its own dot product, a constant that GCC inlines (no call per cache row). */
static inline __attribute__((always_inline)) void
scores_with(dot_fn dot, float *restrict s, const float *restrict q, const kern_kv_pages *kv,
            int64_t j, int64_t S, int64_t G, int64_t H, float scale) {
    for (kern_page_walk w = kern_page_start(&kv->at, j * H, S); kern_page_next(&w);)
        for (int64_t r = 0; r < w.rows; r++) {
            const float *kr = kv->k + w.off + r * kv->at.ldk;
            for (int64_t g = 0; g < G; g++) s[g * S + w.t0 + r] = dot(q + g * H, kr, H) * scale;
        }
}

/* o[G, H] = Σ_t p[g·S + t] · v_t, in position order, for the G heads of kv head j; axpy inlined
 * as dot is in scores_with. */
static inline __attribute__((always_inline)) void
weigh_values_with(axpy_fn axpy, float *restrict o, const float *restrict p, const kern_kv_pages *kv,
                  int64_t j, int64_t S, int64_t G, int64_t H) {
    memset(o, 0, (size_t)(G * H) * sizeof *o);
    for (kern_page_walk w = kern_page_start(&kv->at, j * H, S); kern_page_next(&w);)
        for (int64_t r = 0; r < w.rows; r++) {
            const float *vr = kv->v + w.off + r * kv->at.ldk;
            for (int64_t g = 0; g < G; g++) axpy(o + g * H, p[g * S + w.t0 + r], vr, H);
        }
}

static inline void axpy_plain(float *restrict y, float a, const float *restrict x, int64_t n) {
    for (int64_t d = 0; d < n; d++) y[d] += a * x[d];
}

static void scores_plain(float *restrict s, const float *restrict q, const kern_kv_pages *kv,
                         int64_t j, int64_t S, int64_t G, int64_t H, float scale) {
    scores_with(kern_dot_inl, s, q, kv, j, S, G, H, scale);
}

static void weigh_values_plain(float *restrict o, const float *restrict p, const kern_kv_pages *kv,
                               int64_t j, int64_t S, int64_t G, int64_t H) {
    weigh_values_with(axpy_plain, o, p, kv, j, S, G, H);
}

typedef void (*scores_fn)(float *restrict s, const float *restrict q, const kern_kv_pages *kv,
                          int64_t j, int64_t S, int64_t G, int64_t H, float scale);
typedef void (*values_fn)(float *restrict o, const float *restrict p, const kern_kv_pages *kv,
                          int64_t j, int64_t S, int64_t G, int64_t H);

#if defined(__x86_64__)
/* Σ of the 8 lanes, in one fixed order. */
__attribute__((target("avx2,fma"))) static float hsum8(__m256 a) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

/* x · y: 8-wide fused multiply-adds, the lanes summed by hsum8, then the tail in order. */
__attribute__((target("avx2,fma"))) static inline float dot_avx2(const float *x, const float *y,
                                                                 int64_t n) {
    const int64_t n8 = n & ~(int64_t)7;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t d = 0; d < n8; d += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d), acc);
    float dot = hsum8(acc);
    for (int64_t d = n8; d < n; d++) dot += x[d] * y[d];
    return dot;
}

/* s[g·S + t] for the G heads: four cache rows at a time, each its own chain of fmas (dot_avx2's
 * operations, row by row, so the same bits), interleaved so that the four chains overlap instead
 * of each waiting on its own latency. */
__attribute__((target("avx2,fma"))) static void
scores_avx2(float *restrict s, const float *restrict q, const kern_kv_pages *kv, int64_t j,
            int64_t S, int64_t G, int64_t H, float scale) {
    const int64_t n8 = H & ~(int64_t)7, ld = kv->at.ldk;
    for (kern_page_walk w = kern_page_start(&kv->at, j * H, S); kern_page_next(&w);) {
        const float *k0 = kv->k + w.off;
        int64_t r = 0;
        for (; r + 4 <= w.rows; r += 4)
            for (int64_t g = 0; g < G; g++) {
                const float *x = q + g * H, *y = k0 + r * ld;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int64_t d = 0; d < n8; d += 8) {
                    const __m256 xd = _mm256_loadu_ps(x + d);
                    a0 = _mm256_fmadd_ps(xd, _mm256_loadu_ps(y + d), a0);
                    a1 = _mm256_fmadd_ps(xd, _mm256_loadu_ps(y + ld + d), a1);
                    a2 = _mm256_fmadd_ps(xd, _mm256_loadu_ps(y + 2 * ld + d), a2);
                    a3 = _mm256_fmadd_ps(xd, _mm256_loadu_ps(y + 3 * ld + d), a3);
                }
                const __m256 acc[4] = {a0, a1, a2, a3};
                for (int u = 0; u < 4; u++) {
                    float dot = hsum8(acc[u]);
                    for (int64_t d = n8; d < H; d++) dot += x[d] * y[u * ld + d];
                    s[g * S + w.t0 + r + u] = dot * scale;
                }
            }
        for (; r < w.rows; r++)
            for (int64_t g = 0; g < G; g++)
                s[g * S + w.t0 + r] = dot_avx2(q + g * H, k0 + r * ld, H) * scale;
    }
}

/* o[G, H] = Σ_t p[g·S + t] · v_t for the G heads: 64 columns at a time held in eight registers
 * over every position, each element the chain of fmas axpy_avx2 makes (from 0, position by
 * position; the columns past a multiple of 8 as its tail does), so the same bits without a load
 * and a store of o for each position. */
__attribute__((target("avx2,fma"))) static void
weigh_values_avx2(float *restrict o, const float *restrict p, const kern_kv_pages *kv, int64_t j,
                  int64_t S, int64_t G, int64_t H) {
    const int64_t n8 = H & ~(int64_t)7, ld = kv->at.ldk;
    for (int64_t g = 0; g < G; g++) {
        const float *pg = p + g * S;
        float *og = o + g * H;
        for (int64_t c0 = 0; c0 < n8; c0 += 64) {
            const int nv = (int)((n8 - c0 < 64 ? n8 - c0 : 64) / 8);
            __m256 acc[8];
            for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_ps();
            for (kern_page_walk w = kern_page_start(&kv->at, j * H + c0, S); kern_page_next(&w);)
                for (int64_t r = 0; r < w.rows; r++) {
                    const __m256 a = _mm256_set1_ps(pg[w.t0 + r]);
                    const float *x = kv->v + w.off + r * ld;
                    for (int c = 0; c < nv; c++)
                        acc[c] = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 8 * c), acc[c]);
                }
            for (int c = 0; c < nv; c++) _mm256_storeu_ps(og + c0 + 8 * c, acc[c]);
        }
        if (n8 == H) continue;
        for (int64_t d = n8; d < H; d++) og[d] = 0.0f;
        for (kern_page_walk w = kern_page_start(&kv->at, j * H, S); kern_page_next(&w);)
            for (int64_t r = 0; r < w.rows; r++) {
                const float a = pg[w.t0 + r], *x = kv->v + w.off + r * ld;
                for (int64_t d = n8; d < H; d++) og[d] += a * x[d];
            }
    }
}
#endif

static void attend(float *restrict out, float *restrict scratch, const float *restrict q,
                   const kern_kv_pages *kv, int64_t p0, int64_t n, int64_t Nl, int64_t Kl,
                   int64_t H, scores_fn sc, values_fn wv) {
    const int64_t G = Nl / Kl, ldq = Nl * H;
    const float scale = 1.0f / sqrtf((float)H);
    for (int64_t i = 0; i < n; i++) {
        const int64_t S = p0 + i + 1;
        for (int64_t j = 0; j < Kl; j++) {
            sc(scratch, q + i * ldq + j * G * H, kv, j, S, G, H, scale);
            for (int64_t g = 0; g < G; g++) { /* softmax over the S positions */
                float m, z;
                kern_softmax_row_inl(scratch + g * S, S, &m, &z);
            }
            wv(out + i * ldq + j * G * H, scratch, kv, j, S, G, H);
        }
    }
}

void kern_attn_paged_plain(float *restrict out, float *restrict scratch, const float *restrict q,
                           const kern_kv_pages *kv, int64_t p0, int64_t n, int64_t Nl, int64_t Kl,
                           int64_t H) {
    attend(out, scratch, q, kv, p0, n, Nl, Kl, H, scores_plain, weigh_values_plain);
}

void kern_attn_paged(float *restrict out, float *restrict scratch, const float *restrict q,
                     const kern_kv_pages *kv, int64_t p0, int64_t n, int64_t Nl, int64_t Kl,
                     int64_t H) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        attend(out, scratch, q, kv, p0, n, Nl, Kl, H, scores_avx2, weigh_values_avx2);
        return;
    }
#endif
    kern_attn_paged_plain(out, scratch, q, kv, p0, n, Nl, Kl, H);
}

/* Score of query row qi against the key row of position t, kv head j, in double. */
static double score_d(const float *qi, const kern_kv_pages *kv, int64_t t, int64_t j, int64_t H) {
    const float *kt = page_row(kv, 0, t, j, H);
    double s = 0.0;
    for (int64_t d = 0; d < H; d++) s += (double)qi[d] * kt[d];
    return s;
}

void kern_attn_paged_ref(float *out, const float *q, const kern_kv_pages *kv, int64_t p0, int64_t n,
                         int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t G = Nl / Kl, ldq = Nl * H;
    const double scale = 1.0 / sqrt((double)H);
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < Nl; h++) {
            const float *qi = q + i * ldq + h * H;
            const int64_t S = p0 + i + 1, j = h / G;
            double m = -INFINITY, z = 0.0;
            for (int64_t t = 0; t < S; t++) m = fmax(m, score_d(qi, kv, t, j, H) * scale);
            for (int64_t t = 0; t < S; t++) z += exp(score_d(qi, kv, t, j, H) * scale - m);
            for (int64_t d = 0; d < H; d++) {
                double o = 0.0;
                for (int64_t t = 0; t < S; t++)
                    o += exp(score_d(qi, kv, t, j, H) * scale - m) * page_row(kv, 1, t, j, H)[d];
                out[i * ldq + h * H + d] = (float)(o / z);
            }
        }
}
