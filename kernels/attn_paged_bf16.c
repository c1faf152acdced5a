/* Attention through a block table on a bf16 pool (see attn_paged.h). The structure of
 * attn_paged.c's: for one query row and one kv head, the G = Nl/Kl query heads that share it are
 * scored together against each key row as the block table yields it, softmaxed, and the value
 * rows added in position order. Every sum is one fp32 chain in index order (a product of two bf16
 * values is exact in fp32, so a multiply then an add rounds as a fused multiply-add would): the
 * arithmetic of the own bf16 kernels, whose contract kern_attn_cached_bf16 inherits. The value
 * sum runs across H in the inner loop, which GCC vectorises without changing a chain. */
#include <math.h>
#include <string.h>

#include "kernels/attn_paged.h"
#include "kernels/attn_paged_inl.h"
#include "kernels/bf16_inl.h"
#include "kernels/vecmath.h"

int64_t kern_attn_paged_bf16_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t G = Nl / Kl, S = p0 + n;
    return G * S + (G * S + 1) / 2 + (G * H + 1) / 2 + 1;
}

/* s[g·S + t] = scale · Σ_d qb_g[d]·k_t[d] for the G query heads qb[G, H] (bf16), t < S. */
static void scores(float *restrict s, const kern_bf16 *restrict qb, const kern_kv_pages_bf16 *kv,
                   int64_t j, int64_t S, int64_t G, int64_t H, float scale) {
    for (kern_page_walk w = kern_page_start(&kv->at, j * H, S); kern_page_next(&w);)
        for (int64_t r = 0; r < w.rows; r++) {
            const kern_bf16 *kr = kv->k + w.off + r * kv->at.ldk;
            for (int64_t g = 0; g < G; g++) {
                float c = 0.0f;
                for (int64_t d = 0; d < H; d++)
                    c += kern_bf16_val_inl(qb[g * H + d]) * kern_bf16_val_inl(kr[d]);
                s[g * S + w.t0 + r] = c * scale;
            }
        }
}

/* o[G, H] = Σ_t p[g·S + t] · v_t (p bf16), in position order, for the G heads of kv head j. */
static void weigh_values(float *restrict o, const kern_bf16 *restrict p,
                         const kern_kv_pages_bf16 *kv, int64_t j, int64_t S, int64_t G, int64_t H) {
    memset(o, 0, (size_t)(G * H) * sizeof *o);
    for (kern_page_walk w = kern_page_start(&kv->at, j * H, S); kern_page_next(&w);)
        for (int64_t r = 0; r < w.rows; r++) {
            const kern_bf16 *vr = kv->v + w.off + r * kv->at.ldk;
            for (int64_t g = 0; g < G; g++) {
                const float pw = kern_bf16_val_inl(p[g * S + w.t0 + r]);
                float *og = o + g * H;
                for (int64_t d = 0; d < H; d++) og[d] += pw * kern_bf16_val_inl(vr[d]);
            }
        }
}

void kern_attn_paged_bf16(float *restrict out, float *restrict scratch, const float *restrict q,
                          const kern_kv_pages_bf16 *kv, int64_t p0, int64_t n, int64_t Nl,
                          int64_t Kl, int64_t H) {
    const int64_t G = Nl / Kl, ldq = Nl * H, Smax = p0 + n;
    const float scale = 1.0f / sqrtf((float)H);
    float *s = scratch;
    kern_bf16 *p = (kern_bf16 *)(scratch + G * Smax);
    kern_bf16 *qb = p + G * Smax + (G * Smax) % 2;
    for (int64_t i = 0; i < n; i++) {
        const int64_t S = p0 + i + 1;
        for (int64_t j = 0; j < Kl; j++) {
            const float *qi = q + i * ldq + j * G * H;
            for (int64_t x = 0; x < G * H; x++) qb[x] = kern_bf16_of_inl(qi[x]);
            scores(s, qb, kv, j, S, G, H, scale);
            for (int64_t g = 0; g < G; g++) { /* softmax over the S positions, rounded */
                float m, z, *sg = s + g * S;
                kern_softmax_row_inl(sg, S, &m, &z);
                for (int64_t t = 0; t < S; t++) p[g * S + t] = kern_bf16_of_inl(sg[t]);
            }
            weigh_values(out + i * ldq + j * G * H, p, kv, j, S, G, H);
        }
    }
}
