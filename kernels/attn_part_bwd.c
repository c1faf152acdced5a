/* attn_part_bwd: the backward of one key block of blockwise causal attention (see attn_part.h).
 *
 * Per (sequence, query head), two passes over scratch P[Tq, Tk] and dS[Tq, Tk], laid out and
 * blocked as kern_attn_bwd's (blocks also end where positions jump): row blocks [i0, i1) recompute
 * the scores against the keys their last row sees, P = exp(s − m)·(1/l) (the forward softmax's own
 * two roundings), dP = dO·Vᵀ, dS = P ∘ (dP − D)/sqrt(H) and dQ += dS·K; then key blocks [j0, j1)
 * take dV += Pᵀ·dO and dK += dSᵀ·Q over the rows from the first that sees key j0. Entries of P and
 * dS that a key block reads beyond its rows' scored keys are zeroed, so no product sees garbage. */
#include "kernels/attn_part.h"

#include <math.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/bf16_inl.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16_impl.h"
#include "kernels/vecmath.h"

/* One (sequence, query head): q, dout and dq rows ldq apart, k, v, dk, dv rows ldk apart, m, l, D
 * entries ldml apart (D may be NULL), P and dS [Tq, Tk]. */
typedef struct {
    const float *q, *k, *v, *dout, *m, *l, *D;
    float *dq, *dk, *dv, *P, *dS;
    const int32_t *qpos, *kpos;
    int64_t Tq, Tk, ldq, ldk, ldml, H;
} head_job;

/* The end of the key block (kern_attn_part_block_end from key 0 on) that holds key j. */
static int64_t key_block_end(const int32_t *kpos, int64_t Tk, int64_t j) {
    int64_t j1 = 0;
    while (j1 <= j) j1 = kern_attn_part_block_end(kpos, Tk, j1);
    return j1;
}

/* P and dS of row block [i0, i1), and its dQ. */
static void rows_bwd(const head_job *J, int64_t i0, int64_t i1) {
    const int64_t nk = kern_attn_part_seen(J->kpos, J->Tk, J->qpos[i1 - 1]), Tk = J->Tk, H = J->H;
    if (nk == 0) return; /* these rows see no key: no key block reads them either */
    /* the key blocks that read these rows end at most where the key block holding nk − 1 ends */
    const int64_t zend = key_block_end(J->kpos, Tk, nk - 1);
    const float scale = 1.0f / sqrtf((float)H);
    float *P = J->P + i0 * Tk, *dS = J->dS + i0 * Tk;
    kern_gemm(P, J->q + i0 * J->ldq, J->k, i1 - i0, nk, H, false, true, J->ldq, J->ldk, Tk, scale,
              0.0f);
    kern_gemm(dS, J->dout + i0 * J->ldq, J->v, i1 - i0, nk, H, false, true, J->ldq, J->ldk, Tk,
              1.0f, 0.0f);
    for (int64_t i = i0; i < i1; i++) {
        float *p = P + (i - i0) * Tk, *d = dS + (i - i0) * Tk;
        const int64_t seen = kern_attn_part_seen(J->kpos, nk, J->qpos[i]);
        if (seen > 0) {
            const float mi = J->m[i * J->ldml], inv = 1.0f / J->l[i * J->ldml];
            for (int64_t j = 0; j < seen; j++) p[j] = kern_expf_inl(p[j] - mi) * inv;
            const float pd = J->D ? J->D[i * J->ldml] : kern_dot_inl(p, d, seen);
            for (int64_t j = 0; j < seen; j++) d[j] = p[j] * (d[j] - pd) * scale;
        }
        memset(p + seen, 0, (size_t)(zend - seen) * sizeof *p);
        memset(d + seen, 0, (size_t)(zend - seen) * sizeof *d);
    }
    kern_gemm(J->dq + i0 * J->ldq, dS, J->k, i1 - i0, H, nk, false, false, Tk, J->ldk, J->ldq, 1.0f,
              1.0f);
}

/* The next key block: from key j0 (< Tk) to *j1 (kern_attn_part_block_end), and *r0 the first
 * query row that sees key j0 (rows above it see none of [j0, j1)). Returns 0 when no row sees it,
 * and then none sees a later key either. */
static int key_block_next(const int32_t *qpos, int64_t Tq, const int32_t *kpos, int64_t Tk,
                          int64_t j0, int64_t *j1, int64_t *r0) {
    *j1 = kern_attn_part_block_end(kpos, Tk, j0);
    *r0 = 0;
    while (*r0 < Tq && qpos[*r0] < kpos[j0]) ++*r0;
    return *r0 < Tq;
}

/* Floats between two heads' P, dS [2, Tq, Tk] when the halves keep every head's (a multiple of
 * 16: each head's at the same alignment). */
static int64_t head_stride(int64_t n) {
    return (n + 15) / 16 * 16;
}

int64_t kern_attn_part_bwd_halves_scratch(int64_t B, int64_t Nl, int64_t Tq, int64_t Tk) {
    return B * Nl * head_stride(2 * Tq * Tk);
}

/* The half (or both) of one (sequence, query head). */
static void head_bwd(const head_job *J, kern_attn_part_half half) {
    const int64_t Tq = J->Tq, Tk = J->Tk, H = J->H;
    for (int64_t i0 = 0, i1; half != KERN_ATTN_PART_KEYS && i0 < Tq; i0 = i1) {
        i1 = kern_attn_part_block_end(J->qpos, Tq, i0);
        rows_bwd(J, i0, i1);
    }
    if (half == KERN_ATTN_PART_ROWS) return;
    for (int64_t j0 = 0, j1, r0; j0 < Tk && key_block_next(J->qpos, Tq, J->kpos, Tk, j0, &j1, &r0);
         j0 = j1) {
        kern_gemm(J->dv + j0 * J->ldk, J->P + r0 * Tk + j0, J->dout + r0 * J->ldq, j1 - j0, H,
                  Tq - r0, true, false, Tk, J->ldq, J->ldk, 1.0f, 1.0f);
        kern_gemm(J->dk + j0 * J->ldk, J->dS + r0 * Tk + j0, J->q + r0 * J->ldq, j1 - j0, H,
                  Tq - r0, true, false, Tk, J->ldq, J->ldk, 1.0f, 1.0f);
    }
}

void kern_attn_part_bwd(float *restrict dq, float *restrict dk, float *restrict dv,
                        float *restrict scratch, const float *restrict dout, const float *D,
                        const float *restrict m, const float *restrict l, const float *restrict q,
                        const float *restrict k, const float *restrict v,
                        const int32_t *restrict qpos, const int32_t *restrict kpos, int64_t B,
                        int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H,
                        kern_attn_part_half half) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    const int64_t stride = half == KERN_ATTN_PART_BOTH ? 0 : head_stride(2 * Tq * Tk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++) {
            const int64_t qo = b * Tq * ldq + h * H, kvo = b * Tk * ldk + (h / grp) * H;
            const int64_t mo = b * Tq * Nl + h;
            const head_job J = {.q = q + qo,
                                .dout = dout + qo,
                                .dq = dq + qo,
                                .ldq = ldq,
                                .k = k + kvo,
                                .v = v + kvo,
                                .dk = dk + kvo,
                                .dv = dv + kvo,
                                .ldk = ldk,
                                .m = m + mo,
                                .l = l + mo,
                                .D = D ? D + mo : NULL,
                                .ldml = Nl,
                                .P = scratch + (b * Nl + h) * stride,
                                .dS = scratch + (b * Nl + h) * stride + Tq * Tk,
                                .qpos = qpos,
                                .kpos = kpos,
                                .Tq = Tq,
                                .Tk = Tk,
                                .H = H};
            head_bwd(&J, half);
        }
}

/* ---------------------------------------------------------------- bf16 operands */

int64_t kern_attn_part_bwd_bf16_scratch(int64_t Tq, int64_t Tk) {
    const int64_t rows = Tq < KERN_ATTN_BLOCK ? Tq : KERN_ATTN_BLOCK;
    return 2 * rows * Tk + Tq * Tk; /* scores and dP (fp32) of a row block; P and dS (bf16) */
}

/* One (sequence, query head) on bf16 operands: as head_job, with P and dS [Tq, Tk] in bf16 and
 * the fp32 scores and dP of one row block in S, dP [rows, Tk]. */
typedef struct {
    kern_bf16_ctx *ctx;
    const kern_bf16 *q, *k, *v, *dout;
    const float *m, *l, *D;
    float *dq, *dk, *dv, *S, *dP;
    kern_bf16 *P, *dS;
    const int32_t *qpos, *kpos;
    int64_t Tq, Tk, ldq, ldk, ldml, H;
} bhead_job;

/* Row i's P (bf16, from the final m, l: kern_attn_fwd_bf16's exp(s·scale − m)·(1/l), rounded)
 * and dS = bf16(P∘(dP − D)·scale) over its seen keys, D given or kern_attn_bwd_bf16's rowsum
 * (8 partial sums) of P∘dP; zeros from seen to zend. */
static void brow_ds(const bhead_job *J, int64_t i, float *s, float *d, int64_t seen, int64_t zend,
                    float scale) {
    kern_bf16 *p = J->P + i * J->Tk, *ds = J->dS + i * J->Tk;
    if (seen > 0) {
        const float mi = J->m[i * J->ldml], inv = 1.0f / J->l[i * J->ldml];
        for (int64_t j = 0; j < seen; j++) {
            s[j] *= scale;
            p[j] = kern_bf16_of_inl(kern_expf_inl(s[j] - mi) * inv);
        }
        float pd;
        if (J->D) {
            pd = J->D[i * J->ldml];
        } else {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int64_t j = 0;
            for (; j + 8 <= seen; j += 8)
                for (int c = 0; c < 8; c++) acc[c] += kern_bf16_val_inl(p[j + c]) * d[j + c];
            pd = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; j < seen; j++) pd += kern_bf16_val_inl(p[j]) * d[j];
        }
        for (int64_t j = 0; j < seen; j++)
            ds[j] = kern_bf16_of_inl(kern_bf16_val_inl(p[j]) * (d[j] - pd) * scale);
    }
    for (int64_t j = seen; j < zend; j++) p[j] = 0, ds[j] = 0;
}

/* P and dS of the row block from i0 on, and its dQ; returns the block's end. */
static int64_t brows_bwd(const bhead_job *J, int64_t i0) {
    const int64_t i1 = kern_attn_part_block_end(J->qpos, J->Tq, i0);
    const int64_t nk = kern_attn_part_seen(J->kpos, J->Tk, J->qpos[i1 - 1]), Tk = J->Tk, H = J->H;
    if (nk == 0) return i1; /* these rows see no key: no key block reads them either */
    const int64_t zend = key_block_end(J->kpos, Tk, nk - 1);
    const float scale = 1.0f / sqrtf((float)H);
    bf16_gemm_own(J->ctx, J->S, J->q + i0 * J->ldq, J->k, i1 - i0, nk, H, false, true, J->ldq,
                  J->ldk, Tk, false);
    bf16_gemm_own(J->ctx, J->dP, J->dout + i0 * J->ldq, J->v, i1 - i0, nk, H, false, true, J->ldq,
                  J->ldk, Tk, false);
    for (int64_t i = i0; i < i1; i++)
        brow_ds(J, i, J->S + (i - i0) * Tk, J->dP + (i - i0) * Tk,
                kern_attn_part_seen(J->kpos, nk, J->qpos[i]), zend, scale);
    bf16_gemm_own(J->ctx, J->dq + i0 * J->ldq, J->dS + i0 * Tk, J->k, i1 - i0, H, nk, false, false,
                  Tk, J->ldk, J->ldq, true);
    return i1;
}

static void bhead_bwd(const bhead_job *J, kern_attn_part_half half) {
    const int64_t Tq = J->Tq, Tk = J->Tk, H = J->H;
    for (int64_t i0 = 0; half != KERN_ATTN_PART_KEYS && i0 < Tq; i0 = brows_bwd(J, i0)) continue;
    if (half == KERN_ATTN_PART_ROWS) return;
    for (int64_t j0 = 0, j1, r0; j0 < Tk && key_block_next(J->qpos, Tq, J->kpos, Tk, j0, &j1, &r0);
         j0 = j1)
        bf16_gemm_own(J->ctx, J->dv + j0 * J->ldk, J->P + r0 * Tk + j0, J->dout + r0 * J->ldq,
                      j1 - j0, H, Tq - r0, true, false, Tk, J->ldq, J->ldk, true),
            bf16_gemm_own(J->ctx, J->dk + j0 * J->ldk, J->dS + r0 * Tk + j0, J->q + r0 * J->ldq,
                          j1 - j0, H, Tq - r0, true, false, Tk, J->ldq, J->ldk, true);
}

int64_t kern_attn_part_bwd_bf16_halves_scratch(int64_t B, int64_t Nl, int64_t Tq, int64_t Tk) {
    const int64_t rows = Tq < KERN_ATTN_BLOCK ? Tq : KERN_ATTN_BLOCK;
    return 2 * rows * Tk + B * Nl * head_stride(Tq * Tk);
}

void kern_attn_part_bwd_bf16(kern_bf16_ctx *ctx, float *restrict dq, float *restrict dk,
                             float *restrict dv, float *restrict scratch, const kern_bf16 *dout,
                             const float *D, const float *restrict m, const float *restrict l,
                             const kern_bf16 *q, const kern_bf16 *k, const kern_bf16 *v,
                             const int32_t *restrict qpos, const int32_t *restrict kpos, int64_t B,
                             int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H,
                             kern_attn_part_half half) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    const int64_t rows = Tq < KERN_ATTN_BLOCK ? Tq : KERN_ATTN_BLOCK;
    const int64_t stride = half == KERN_ATTN_PART_BOTH ? 0 : 2 * head_stride(Tq * Tk);
    kern_bf16 *P0 = (kern_bf16 *)(void *)(scratch + 2 * rows * Tk);
    bhead_job J = {.ctx = ctx, .S = scratch, .dP = scratch + rows * Tk, .qpos = qpos,
                   .kpos = kpos, .Tq = Tq, .Tk = Tk, .ldq = ldq, .ldk = ldk, .ldml = Nl, .H = H};
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++) { /* head h of sequence b, its kv head's rows */
            const int64_t qo = b * Tq * ldq + h * H, kvo = b * Tk * ldk + (h / grp) * H;
            const int64_t mo = b * Tq * Nl + h;
            J.P = P0 + (b * Nl + h) * stride, J.dS = J.P + Tq * Tk;
            J.q = q + qo, J.dout = dout + qo, J.dq = dq + qo;
            J.k = k + kvo, J.v = v + kvo, J.dk = dk + kvo, J.dv = dv + kvo;
            J.m = m + mo, J.l = l + mo, J.D = D ? D + mo : NULL;
            bhead_bwd(&J, half);
        }
}
