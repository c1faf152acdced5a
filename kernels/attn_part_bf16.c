/* Decode against one shard of a bf16 KV cache (see attn_part.h): the partial (m, l, O) of each
 * query row and head over the keys of the shard it sees, in attn_paged_bf16.c's arithmetic. For
 * one row and one kv head the G = Nl/Kl query heads that share it are rounded to bf16 and scored
 * together against each key row, softmaxed over the seen keys in fp32, the probabilities rounded
 * to bf16 and the value rows added in position order. Every sum is one fp32 chain in index order
 * (a product of two bf16 values is exact in fp32): the own bf16 kernels' arithmetic, so a shard
 * holding every key gives kern_attn_cached_bf16's output bit for bit. */
#include <math.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attn_part.h"
#include "kernels/bf16_inl.h"
#include "kernels/gemm_bf16_impl.h"
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

/* ---------------------------------------------------------------- training, bf16 operands */

int64_t kern_attn_part_fwd_bf16_scratch(int64_t Tq, int64_t Tk) {
    const int64_t rows = Tq < KERN_ATTN_BLOCK ? Tq : KERN_ATTN_BLOCK;
    return rows * Tk + (rows * Tk + 1) / 2; /* scores (fp32), probabilities (bf16) */
}

/* `rows` query rows of one head (a token apart, consecutive positions qpos[0..rows)) against keys
 * [0, Tk) of one kv head: kern_attn_fwd_bf16's row block, the softmax over the keys each row sees. */
typedef struct {
    kern_bf16_ctx *ctx;
    const kern_bf16 *q, *k, *v;
    const int32_t *qpos, *kpos;
    int64_t ldq, ldk, Nl, Tk, H;
    float *o, *m, *l, *S;
    kern_bf16 *P;
} brows_job;

static void brows_fwd(const brows_job *J, int64_t rows) {
    const int64_t nk = kern_attn_part_seen(J->kpos, J->Tk, J->qpos[rows - 1]), H = J->H;
    if (nk == 0) { /* the ring's fully masked block: the empty partial */
        for (int64_t i = 0; i < rows; i++) {
            memset(J->o + i * J->ldq, 0, (size_t)H * sizeof *J->o);
            J->m[i * J->Nl] = -INFINITY, J->l[i * J->Nl] = 0.0f;
        }
        return;
    }
    const float scale = 1.0f / sqrtf((float)H);
    bf16_gemm_own(J->ctx, J->S, J->q, J->k, rows, nk, H, false, true, J->ldq, J->ldk, nk, false);
    for (int64_t i = 0; i < rows; i++) {
        float *s = J->S + i * nk, mi = -INFINITY, zi = 0.0f;
        kern_bf16 *p = J->P + i * nk;
        const int64_t seen = kern_attn_part_seen(J->kpos, nk, J->qpos[i]);
        for (int64_t j = 0; j < seen; j++) s[j] *= scale;
        if (seen > 0) kern_softmax_row_inl(s, seen, &mi, &zi);
        for (int64_t j = 0; j < nk; j++) p[j] = j < seen ? kern_bf16_of_inl(s[j]) : 0;
        J->m[i * J->Nl] = mi, J->l[i * J->Nl] = zi;
    }
    bf16_gemm_own(J->ctx, J->o, J->P, J->v, rows, H, nk, false, false, nk, J->ldk, J->ldq, false);
}

void kern_attn_part_fwd_bf16(kern_bf16_ctx *ctx, float *restrict o, float *restrict m,
                             float *restrict l, float *restrict scratch, const kern_bf16 *q,
                             const kern_bf16 *k, const kern_bf16 *v, const int32_t *restrict qpos,
                             const int32_t *restrict kpos, int64_t B, int64_t Tq, int64_t Tk,
                             int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, G = Nl / Kl;
    const int64_t rows = Tq < KERN_ATTN_BLOCK ? Tq : KERN_ATTN_BLOCK;
    kern_bf16 *P = (kern_bf16 *)(void *)(scratch + rows * Tk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++) {
            const int64_t qo = b * Tq * ldq + h * H, kvo = b * Tk * ldk + (h / G) * H;
            for (int64_t i0 = 0, i1; i0 < Tq; i0 = i1) {
                i1 = kern_attn_part_block_end(qpos, Tq, i0);
                const int64_t r = (b * Tq + i0) * Nl + h;
                const brows_job J = {.ctx = ctx, .q = q + qo + i0 * ldq, .k = k + kvo,
                                     .v = v + kvo, .qpos = qpos + i0, .kpos = kpos, .ldq = ldq,
                                     .ldk = ldk, .Nl = Nl, .Tk = Tk, .H = H,
                                     .o = o + qo + i0 * ldq, .m = m + r, .l = l + r,
                                     .S = scratch, .P = P};
                brows_fwd(&J, i1 - i0);
            }
        }
}

void kern_attn_part_delta_bf16(float *restrict D, const kern_bf16 *dout, const float *restrict o,
                               int64_t R, int64_t Nl, int64_t H) {
    for (int64_t rh = 0; rh < R * Nl; rh++) {
        float acc = 0.0f;
        for (int64_t c = 0; c < H; c++) acc += kern_bf16_val_inl(dout[rh * H + c]) * o[rh * H + c];
        D[rh] = acc;
    }
}
