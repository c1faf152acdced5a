/* model_split: the backward split into an input part and a weight part (zero-bubble schedules;
 * fp32 or bf16 compute, the weight part rounding its operands as the whole backward does).
 * The input part (block_bwd with keep, model.c) runs every matmul's dX and the norms' backwards and
 * keeps the matmuls' output gradients in the layer's activations (with bf16 compute in bf16 alone,
 * as its dX products rounded them: the operands the whole backward's dW would take); the weight
 * part here runs their dW later. Where the model holds the gradients (below ZeRO-2) the input
 * part adds the norm gains' gradients into them at once; where a sharded run hands out a transient
 * gradient slot per layer and reduces it when the layer is done (ZeRO-2/3), no slot is taken until
 * the weight part: the gains' gradients wait in the layer's d_n, cleared, and are copied into the
 * slot (cleared too) there, the same numbers the whole backward accumulates into it; the head's
 * final norm gain likewise (slot_act's dgf: the run clears its non-layer transients at each
 * backward part). */
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "train/config/alloc.h"
#include "train/model/model_impl.h"
#include "train/observe/trace.h"

void split_carve(const model *m, carver *c, carver *cb, layer_act *A, int moe) {
    const int64_t BT = m->BT, D = m->s.D, H = m->s.H, Fl = m->loc.Fl;
    const int64_t n[7] = {BT * D, BT * Fl, BT * Fl, BT * D, BT * m->loc.Nl * H,
                          BT * m->loc.Kl * H, BT * m->loc.Kl * H};
    float **f[7] = {&A->d_mlp, &A->d_a, &A->d_b, &A->d_attn, &A->d_q, &A->d_k, &A->d_v};
    kern_bf16 **b[7] = {&A->d_mlpb, &A->d_ab, &A->d_bb, &A->d_attnb, &A->d_qb, &A->d_kb, &A->d_vb};
    const int i0 = moe ? 3 : 0; /* a MoE block: attention's alone */
    split_carve_kept(m, c, cb, f + i0, b + i0, n + i0, 7 - i0);
    A->d_n = carve(c, 2 * D);
    if (moe) moe_split_carve(m, c, cb, A);
}

layer_g split_bwd_grads(model *m, layer_act *A, int64_t l) {
    if (m->grads) return m->hk.layer_grads(m->hk.ctx, m, l);
    layer_g g;
    memset(&g, 0, sizeof g);
    floats_clear(A->d_n, 2 * m->s.D);
    g.attn_norm = A->d_n, g.mlp_norm = A->d_n + m->s.D;
    return g;
}

/* An output projection's dw[K, N] += a[M, K]ᵀ · dy[M, N]; with bf16 compute a as the forward kept
 * it (ab) and dy as the input part rounded it (dyb), the whole backward's operands
 * (sublayer_out_bwd). */
static void out_dw(model *m, float *dw, const float *a, const kern_bf16 *ab, const float *dy,
                   const kern_bf16 *dyb, int64_t M, int64_t K, int64_t N) {
    if (!m->cmp.bf16) {
        kern_matmul_dw(dw, a, dy, M, K, N);
        return;
    }
    const kern_bf16 *a16 = mixed_saved(ab, m->sb[1], a, M * K);
    kern_matmul_dw_bf16(m->cmp.ctx, dw, a16, dyb, M, K, N);
}

/* The in-projections' dw_k += hᵀ · dy_k (sublayer_in_dw); with bf16 compute h as the forward
 * kept it (hb) and the dy_k as the input part's sublayer_in_dx rounded them (dyb), the whole
 * backward's operands. */
static void in_dw(model *m, float *const *dw, const float *h, const kern_bf16 *hb, int nw,
                  float *const *dy, kern_bf16 *const *dyb, const int64_t *nk, int64_t BT) {
    if (!m->cmp.bf16) {
        sublayer_in_dw(m, dw, h, hb, nw, dy, nk, BT);
        return;
    }
    const kern_bf16 *h16 = mixed_saved(hb, m->sb[0], h, BT * m->s.D);
    for (int k = 0; k < nw; k++) {
        if (k == 1) POLL(m);
        kern_matmul_dw_bf16(m->cmp.ctx, dw[k], h16, dyb[k], BT, m->s.D, nk[k]);
    }
}

/* The weight part of a split backward of block l (MODEL_BWD_WEIGHT): each matmul's dW from its
 * input (saved by the forward) and its output's gradient (kept by the input part), the same
 * kernels on the same numbers (bf16 compute: rounded the same way) as the whole backward. */
void split_bwd_weight(model *m, layer_act *A, int64_t l, int64_t BT) {
    const int64_t D = m->s.D, H = m->s.H;
    const model_extents *lc = &m->loc;
    const int64_t NHl = lc->Nl * H, KHl = lc->Kl * H, Fl = lc->Fl;
    layer_g g = m->hk.layer_grads(m->hk.ctx, m, l);
    const int kept = !m->grads; /* the gains' gradients wait in d_n (split_bwd_grads) */
    if (kept) floats_copy(g.mlp_norm, A->d_n + D, D);
    trace_begin(m->tr, TRACE_MLP, l);
    if (model_layer_is_moe(&m->s, l)) {
        moe_block_dw(m, &g, A, BT);
    } else {
        out_dw(m, g.w_down, A->g, A->gb, A->d_mlp, A->d_mlpb, BT, Fl, D);
        POLL(m);
        float *const dgu[2] = {A->d_a, A->d_b}, *const ggu[2] = {g.w_gate, g.w_up};
        kern_bf16 *const dgu16[2] = {A->d_ab, A->d_bb};
        const int64_t ngu[2] = {Fl, Fl};
        in_dw(m, ggu, A->h2, A->h2b, 2, dgu, dgu16, ngu, BT);
    }
    trace_end(m->tr, TRACE_MLP);
    m->hk.mlp_grads_done(m->hk.ctx, m, l);
    if (kept) floats_copy(g.attn_norm, A->d_n, D);
    trace_begin(m->tr, TRACE_ATTN, l);
    out_dw(m, g.wo, A->att, A->attb, A->d_attn, A->d_attnb, BT, NHl, D);
    POLL(m);
    float *const dqkv[3] = {A->d_q, A->d_k, A->d_v}, *const gqkv[3] = {g.wq, g.wk, g.wv};
    kern_bf16 *const dqkv16[3] = {A->d_qb, A->d_kb, A->d_vb};
    const int64_t nqkv[3] = {NHl, KHl, KHl};
    in_dw(m, gqkv, A->h1, A->h1b, 3, dqkv, dqkv16, nqkv, BT);
    trace_end(m->tr, TRACE_ATTN);
    m->hk.layer_grads_done(m->hk.ctx, m, l);
}

