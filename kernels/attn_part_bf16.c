/* Decode against one shard of a bf16 KV cache (see attn_part.h): the partial (m, l, O) of each
 * query row and head over the keys of the shard it sees, in attn_paged_bf16.c's arithmetic. For
 * one row and one kv head the G = Nl/Kl query heads that share it are rounded to bf16 and scored
 * together against each key row, softmaxed over the seen keys in fp32, the probabilities rounded
 * to bf16 and the value rows added in position order. Every sum is one fp32 chain in index order
 * (a product of two bf16 values is exact in fp32): the own bf16 kernels' arithmetic, so a shard
 * holding every key gives kern_attn_cached_bf16's output bit for bit. */
#include <math.h>
#include <string.h>

#include "kernels/attn_part.h"
#include "kernels/bf16_inl.h"
#include "kernels/vecmath.h"

int64_t kern_attn_part_cached_bf16_scratch(int64_t S, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t G = Nl / Kl;
    return G * S + (G * S + 1) / 2 + (G * H + 1) / 2 + 1;
}

void kern_attn_part_cached_bf16(float *restrict o, float *restrict m, float *restrict l,
                                float *restrict scratch, const float *restrict q,
                                const kern_bf16 *kc, const kern_bf16 *vc,
                                const int32_t *restrict qpos, int64_t n,
                                const int32_t *restrict kpos, int64_t S, int64_t Nl, int64_t Kl,
                                int64_t H, int64_t ldk) {
    const int64_t G = Nl / Kl, ldq = Nl * H;
    const float scale = 1.0f / sqrtf((float)H);
    float *s = scratch;
    kern_bf16 *p = (kern_bf16 *)(scratch + G * S);
    kern_bf16 *qb = p + G * S + (G * S) % 2;
    for (int64_t i = 0; i < n; i++) {
        const int64_t seen = kern_attn_part_seen(kpos, S, qpos[i]);
        for (int64_t j = 0; j < Kl; j++) {
            const int64_t h0 = j * G;
            float *oj = o + i * ldq + h0 * H;
            memset(oj, 0, (size_t)(G * H) * sizeof *oj);
            if (seen == 0) { /* no key of the shard is visible: the empty partial */
                for (int64_t g = 0; g < G; g++)
                    m[i * Nl + h0 + g] = -INFINITY, l[i * Nl + h0 + g] = 0;
                continue;
            }
            const float *qi = q + i * ldq + h0 * H;
            for (int64_t x = 0; x < G * H; x++) qb[x] = kern_bf16_of_inl(qi[x]);
            for (int64_t t = 0; t < seen; t++) {
                const kern_bf16 *kr = kc + t * ldk + j * H;
                for (int64_t g = 0; g < G; g++) {
                    float c = 0.0f;
                    for (int64_t d = 0; d < H; d++)
                        c += kern_bf16_val_inl(qb[g * H + d]) * kern_bf16_val_inl(kr[d]);
                    s[g * seen + t] = c * scale;
                }
            }
            for (int64_t g = 0; g < G; g++) {
                float *sg = s + g * seen;
                kern_softmax_row_inl(sg, seen, m + i * Nl + h0 + g, l + i * Nl + h0 + g);
                for (int64_t t = 0; t < seen; t++) p[g * seen + t] = kern_bf16_of_inl(sg[t]);
            }
            for (int64_t t = 0; t < seen; t++) {
                const kern_bf16 *vr = vc + t * ldk + j * H;
                for (int64_t g = 0; g < G; g++) {
                    const float pw = kern_bf16_val_inl(p[g * seen + t]);
                    float *og = oj + g * H;
                    for (int64_t d = 0; d < H; d++) og[d] += pw * kern_bf16_val_inl(vr[d]);
                }
            }
        }
    }
}
