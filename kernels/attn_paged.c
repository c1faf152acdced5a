/* Attention through a block table (see attn_paged.h).
 *
 * For one query row and one kv head, the G = Nl/Kl query heads that share the head are scored
 * together against each cache row as the block table yields it (each key row read once for the G
 * heads), softmaxed, and the value rows added in position order. No BLAS: sgemm's blocking would
 * make a row's bits depend on the rows beside it. */
#include "kernels/attn_paged.h"

#include <math.h>
#include <string.h>

#include "kernels/vecmath.h"

int64_t kern_attn_paged_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl) {
    return (Nl / Kl) * (p0 + n);
}

/* Row p of the keys (vals = 0) or values (vals = 1), kv head j. */
static const float *page_row(const kern_kv_pages *kv, int vals, int64_t p, int64_t j, int64_t H) {
    const float *base = vals ? kv->v : kv->k;
    return base + kv->table[p / kv->bs] * kv->bstride + (p % kv->bs) * kv->ldk + j * H;
}

/* s[g·S + t] = scale · q_g · k_t for the G query heads q[G, H] and positions t < S. */
static void scores(float *restrict s, const float *restrict q, const kern_kv_pages *kv, int64_t j,
                   int64_t S, int64_t G, int64_t H, float scale) {
    for (int64_t t0 = 0, b = 0; t0 < S; t0 += kv->bs, b++) {
        const float *blk = kv->k + kv->table[b] * kv->bstride + j * H;
        const int64_t rows = S - t0 < kv->bs ? S - t0 : kv->bs;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t g = 0; g < G; g++)
                s[g * S + t0 + r] = kern_dot_inl(q + g * H, blk + r * kv->ldk, H) * scale;
    }
}

/* o[G, H] = Σ_t p[g·S + t] · v_t, in position order, for the G heads of kv head j. */
static void weigh_values(float *restrict o, const float *restrict p, const kern_kv_pages *kv,
                         int64_t j, int64_t S, int64_t G, int64_t H) {
    memset(o, 0, (size_t)(G * H) * sizeof *o);
    for (int64_t t0 = 0, b = 0; t0 < S; t0 += kv->bs, b++) {
        const float *blk = kv->v + kv->table[b] * kv->bstride + j * H;
        const int64_t rows = S - t0 < kv->bs ? S - t0 : kv->bs;
        for (int64_t r = 0; r < rows; r++) {
            const float *vr = blk + r * kv->ldk;
            for (int64_t g = 0; g < G; g++) {
                const float w = p[g * S + t0 + r];
                float *og = o + g * H;
                for (int64_t d = 0; d < H; d++) og[d] += w * vr[d];
            }
        }
    }
}

void kern_attn_paged(float *restrict out, float *restrict scratch, const float *restrict q,
                     const kern_kv_pages *kv, int64_t p0, int64_t n, int64_t Nl, int64_t Kl,
                     int64_t H) {
    const int64_t G = Nl / Kl, ldq = Nl * H;
    const float scale = 1.0f / sqrtf((float)H);
    for (int64_t i = 0; i < n; i++) {
        const int64_t S = p0 + i + 1;
        for (int64_t j = 0; j < Kl; j++) {
            scores(scratch, q + i * ldq + j * G * H, kv, j, S, G, H, scale);
            for (int64_t g = 0; g < G; g++) { /* softmax over the S positions */
                float m, z;
                kern_softmax_row_inl(scratch + g * S, S, &m, &z);
            }
            weigh_values(out + i * ldq + j * G * H, scratch, kv, j, S, G, H);
        }
    }
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
