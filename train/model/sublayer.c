/* sublayer: a sublayer's math at its two ends, with the tensor axis's collectives through the
 * hooks (which only move data): the input norm and in-projections, the output projection with the
 * residual, and their backward; the loss's row statistics combined over the vocabulary shards.
 *
 * How it works under a tensor axis Y (the book's Megatron block, D_Y = this rank's columns):
 *   out = xin + act · W_out: act[BT, K_Y] · W_out[K_Y, D] is a partial sum over Y; the hook
 *     reduce-scatters it (reduce_out: ReduceScatter_Y, or the matmul-ReduceScatter, which asks
 *     for the product block by block), the residual's D_Y columns are added here, and the hook
 *     gathers the rows back (gather_out: AllGather_Y) or leaves them to the next norm.
 *   h = rmsnorm(x) ∘ g, y_k = h · W_k: with x left sharded, the hook gathers x's column blocks
 *     and hands each to norm_block as it arrives (the AllGather-norm-matmul): the norm is a
 *     per-row scale, h · W = diag(1/rms(x)) · Σ_j (x_j ∘ g_j) · W[D_j, :], so each block is
 *     multiplied into every in-projection while the next travels, the rows scaled by 1/rms after
 *     the last (x and h whole afterwards, the bits of rmsnorm on the whole x).
 *   backward: dOut[BT, D_Y] is gathered (gather_cols) and multiplied whole, or block by block
 *     (chunk_products: the AllGather-matmul), into dact = dOut · W_outᵀ and dW_out += actᵀ · dOut.
 * Without a tensor axis (D_Y = D) each end is the plain math: one norm and its matmuls, one
 * accumulating gemm for the output and the residual.
 * bf16 compute (m->cmp.bf16): the same math and order with every product on bf16 operands
 * accumulated in fp32 (kernels/gemm_bf16.h): the weights' bf16 copy (wb, mixed.c); each
 * activation input rounded to bf16 once by the forward, into the layer's saved bf16 copy (the
 * norm's output h, the output projection's input act) that the backward's dW multiplies as it is
 * (without one: into the model's operand scratch m->sb, sb[0] h, sb[1] act); each upstream
 * gradient rounded once for its two products, sb[2] dL/d(out) (a collective matmul's block of
 * it), the same roundings as on one rank. The
 * input side's AllGather-norm-matmul is not used in bf16 (it multiplies x∘g before the norm's
 * 1/rms is known, a rounding one rank does not make): the plain AllGather_Y, then the norm. */
#include <math.h>

#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/optim.h"
#include "kernels/rmsnorm.h"
#include "kernels/traffic.h"
#include "train/config/alloc.h"
#include "train/model/model_impl.h"

/* ---------------------------------------------------------------- the input norm */

typedef struct {
    float *x, *h;
    const float *g;
    int nw;
    const float *const *w;
    const int64_t *nk;
    float *const *y;
    int64_t M, N, nl;
    kern_f32_ctx *f32; /* the model's fp32 panel copies (m->f32) */
} norm_ctx;

/* Block j of x and of h's unnormalised x ∘ g, and y_k (+)= (x_j ∘ g_j) · w_k[block j rows, :]. */
static void norm_block(void *vc, const float *blk, int64_t j, int first) {
    const norm_ctx *c = vc;
    const int64_t M = c->M, N = c->N, nl = c->nl;
    float *xb = c->x + j * nl, *hb = c->h + j * nl;
    const float *gb = c->g + j * nl;
    if (!mesh_no_data(M * N * (int64_t)sizeof(float)))
        for (int64_t r = 0; r < M; r++)
            for (int64_t q = 0; q < nl; q++) {
                xb[r * N + q] = blk[r * nl + q];
                hb[r * N + q] = blk[r * nl + q] * gb[q];
            }
    kern_traffic_count(KERN_PASS_COPY, 2 * M * nl); /* x's block and h's, each a copy */
    for (int k = 0; k < c->nw; k++)
        kern_gemm_ctx(c->f32, c->y[k], hb, c->w[k] + j * nl * c->nk[k], M, c->nk[k], nl, false,
                      false, N, c->nk[k], c->nk[k], 1.0f, first ? 0.0f : 1.0f);
}

void sublayer_norm_in(model *m, float *x, int sharded, float *h, float *rstd, const float *gain,
                      int nw, const float *const *w, const kern_bf16 *const *wb, const int64_t *nk,
                      float *const *y, int64_t BT, kern_bf16 *hb) {
    const int64_t D = m->s.D;
    POLL(m);
    if (sharded) { /* x holds only this rank's D_Y columns: the gather brings the others */
        norm_ctx c = {x, h, gain, nw, w, nk, y, BT, D, m->loc.Dl, m->f32};
        /* bf16: not the AllGather-norm-matmul, which would round the unnormalised blocks x∘g
         * (the 1-rank run rounds h): the plain AllGather, then the norm and its products */
        if (!m->hk.gather_cols(m->hk.ctx, m, x, NULL, BT, wb ? NULL : norm_block, &c)) {
            /* x is whole: the norm as one kernel, and the products' rows scaled by 1/rms */
            kern_rmsnorm_fwd(h, rstd, x, gain, BT, D);
            if (mesh_no_data(BT * D * (int64_t)sizeof(float))) return;
            for (int k = 0; k < nw; k++)
                for (int64_t r = 0; r < BT; r++) kern_scale(y[k] + r * nk[k], nk[k], rstd[r]);
            return;
        }
    }
    kern_rmsnorm_fwd(h, rstd, x, gain, BT, D);
    const kern_bf16 *h16 = wb ? mixed_keep(hb, m->sb[0], h, BT * D) : NULL;
    for (int k = 0; k < nw; k++) {
        if (k) POLL(m);
        if (wb)
            kern_matmul_bf16(m->cmp.ctx, y[k], h16, wb[k], BT, D, nk[k]);
        else
            kern_matmul_ctx(m->f32, y[k], h, w[k], BT, D, nk[k]);
    }
}

/* ---------------------------------------------------------------- the output projection */

void sublayer_out_local(kern_f32_ctx *f32, float *out, const float *xin, const float *act,
                        const float *w, int64_t BT, int64_t Kl, int64_t D) {
    if (out != xin) floats_copy(out, xin, BT * D);
    kern_gemm_ctx(f32, out, act, w, BT, D, Kl, false, false, Kl, D, D, 1.0f, 1.0f);
}

typedef struct {
    model *m;
    const float *act, *w;
    const kern_bf16 *act16, *wb; /* bf16 compute (else NULL) */
    int64_t BT, Kl, D;
} product_ctx;

/* dst[BT, D/nb] = column block b of act[BT, Kl] · w[Kl, D]. */
static void product(void *vc, float *dst, int64_t b, int64_t nb) {
    const product_ctx *c = vc;
    const int64_t nl = c->D / nb;
    if (c->wb)
        kern_gemm_bf16(c->m->cmp.ctx, dst, c->act16, c->wb + b * nl, c->BT, nl, c->Kl, false,
                       false, c->Kl, c->D, nl, false);
    else
        kern_gemm_ctx(c->m->f32, dst, c->act, c->w + b * nl, c->BT, nl, c->Kl, false, false, c->Kl,
                      c->D, nl, 1.0f, 0.0f);
}

int sublayer_out(model *m, float *out, const float *xin, const float *act, kern_bf16 *actb,
                 const float *w, const kern_bf16 *wb, int64_t BT, int64_t Kl, int defer) {
    const int64_t D = m->s.D, Dl = m->loc.Dl, d0 = m->loc.d0;
    POLL(m);
    const kern_bf16 *act16 = wb ? mixed_keep(actb, m->sb[1], act, BT * Kl) : NULL;
    if (Dl == D && wb) {
        if (out != xin) floats_copy(out, xin, BT * D);
        kern_gemm_bf16(m->cmp.ctx, out, act16, wb, BT, D, Kl, false, false, Kl, D, D, true);
        return 0;
    }
    if (Dl == D) {
        sublayer_out_local(m->f32, out, xin, act, w, BT, Kl, D);
        return 0;
    }
    product_ctx pc = {m, act, w, act16, wb, BT, Kl, D};
    float *sh = m->hk.reduce_out(m->hk.ctx, m, product, &pc, BT);
    for (int64_t r = 0; r < BT; r++) kern_add(sh + r * Dl, xin + r * D + d0, Dl);
    return m->hk.gather_out(m->hk.ctx, m, out, sh, BT, defer);
}

/* ---------------------------------------------------------------- backward */

typedef struct {
    model *m;
    float *y, *dw;
    const float *w, *a;
    const kern_bf16 *wb, *a16; /* bf16 compute (else NULL) */
    int64_t M, K, N, nl;
} chunk_ctx;

/* y (+)= blk · (w's block j)ᵀ; dw's block j += aᵀ · blk. */
static void chunk_products(void *vc, const float *blk, int64_t j, int first) {
    const chunk_ctx *c = vc;
    const int64_t M = c->M, K = c->K, N = c->N, nl = c->nl;
    if (c->wb) { /* the block rounded to bf16 once for its two products */
        kern_bf16 *b16 = c->m->sb[2];
        mixed_pack(b16, blk, M * nl);
        kern_gemm_bf16(c->m->cmp.ctx, c->y, b16, c->wb + j * nl, M, K, nl, false, true, nl, N, K,
                       !first);
        kern_gemm_bf16(c->m->cmp.ctx, c->dw + j * nl, c->a16, b16, K, nl, M, true, false, K, nl, N,
                       true);
        return;
    }
    kern_gemm(c->y, blk, c->w + j * nl, M, K, nl, false, true, nl, N, K, 1.0f, first ? 0.0f : 1.0f);
    kern_gemm(c->dw + j * nl, c->a, blk, K, nl, M, true, false, K, nl, N, 1.0f, 1.0f);
}

void sublayer_out_bwd(model *m, float *dact, float *dw, float *dr, const float *act,
                      const kern_bf16 *actb, const float *w, const kern_bf16 *wb, int64_t BT,
                      int64_t Kl, float *keep, kern_bf16 *keepb) {
    const int64_t D = m->s.D;
    POLL(m);
    /* (with actb kept, act is a transient of the forward, maybe dact's storage: not read) */
    const kern_bf16 *a16 = wb && dw ? mixed_saved(actb, m->sb[1], act, BT * Kl) : NULL;
    const float *dout = dr;
    if (m->loc.Dl < D) { /* dL/d(out): the residual gradient's D_Y shards, gathered */
        chunk_ctx c = {m, dact, dw, w, act, wb, a16, BT, Kl, D, m->loc.Dl};
        dout = m->hk.gather_cols(m->hk.ctx, m, m->d_full, dr, BT, dw ? chunk_products : NULL, &c);
        if (!dout) return; /* the products ran block by block (the AllGather-matmul) */
    }
    if (keep) floats_copy(keep, dout, BT * D);
    if (wb) { /* dL/d(out) rounded to bf16 once for its two products */
        const kern_bf16 *d16 = mixed_keep(keepb, m->sb[2], dout, BT * D);
        if (dw) kern_matmul_dw_bf16(m->cmp.ctx, dw, a16, d16, BT, Kl, D);
        POLL(m);
        kern_matmul_dx_bf16(m->cmp.ctx, dact, d16, wb, BT, Kl, D, false);
        return;
    }
    if (dw) kern_matmul_dw(dw, act, dout, BT, Kl, D);
    POLL(m);
    kern_matmul_dx(dact, dout, w, BT, Kl, D, false);
}

void sublayer_in_dx(model *m, float *dh, int nw, float *const *dy, const float *const *w,
                    const kern_bf16 *const *wb, const int64_t *nk, int64_t BT,
                    kern_bf16 *const *dyb) {
    const int64_t D = m->s.D;
    const kern_bf16 *d16[3] = {NULL, NULL, NULL};
    for (int k = 0; k < nw && wb; k++)
        d16[k] = mixed_keep(dyb ? dyb[k] : NULL, m->sb[1 + k], dy[k], BT * nk[k]);
    for (int k = 0; k < nw; k++) {
        if (k < 2) POLL(m);
        if (wb)
            kern_matmul_dx_bf16(m->cmp.ctx, dh, d16[k], wb[k], BT, D, nk[k], k > 0);
        else
            kern_matmul_dx(dh, dy[k], w[k], BT, D, nk[k], k > 0);
    }
}

void sublayer_in_dw(model *m, float *const *dw, const float *h, const kern_bf16 *hb, int nw,
                    float *const *dy, const int64_t *nk, int64_t BT) {
    const int64_t D = m->s.D;
    const kern_bf16 *h16 = m->cmp.bf16 ? mixed_saved(hb, m->sb[0], h, BT * D) : NULL;
    for (int k = 0; k < nw; k++) {
        if (k == 1) POLL(m);
        if (m->cmp.bf16)
            kern_matmul_dw_bf16(m->cmp.ctx, dw[k], h16, m->sb[1 + k], BT, D, nk[k]);
        else
            kern_matmul_dw(dw[k], h, dy[k], BT, D, nk[k]);
    }
}

float *sublayer_partial_begin(model *m, float *dr, int64_t BT) {
    POLL(m);
    if (m->loc.Dl == m->s.D) return dr;
    floats_clear(m->d_part, BT * m->s.D);
    return m->d_part;
}

const float *sublayer_resid_grad(model *m, int64_t BT) {
    if (m->loc.Dl == m->s.D) return m->d_resid;
    return m->hk.gather_cols(m->hk.ctx, m, m->d_full, m->d_resid, BT, NULL, NULL);
}

/* ---------------------------------------------------------------- the loss's row statistics */

void sublayer_xent_combine(model *m, float *st, int64_t BT) {
    const int64_t n = m->s.D / m->loc.Dl; /* the tensor axis's ranks */
    if (n == 1) return;
    const float *all = m->hk.gather_tensor(m->hk.ctx, m, st, 3 * BT); /* [n][3][BT] */
    for (int64_t i = 0; i < BT; i++) {
        float mx = -INFINITY;
        for (int64_t s = 0; s < n; s++) mx = fmaxf(mx, all[s * 3 * BT + i]);
        double z = 0.0, t = 0.0;
        for (int64_t s = 0; s < n; s++) {
            const float *a = all + s * 3 * BT;
            z += (double)a[BT + i] * exp((double)a[i] - (double)mx);
            t += (double)a[2 * BT + i];
        }
        st[i] = mx;
        st[BT + i] = (float)z;
        st[2 * BT + i] = (float)t;
    }
}
