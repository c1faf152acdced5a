/* model_split: the backward split into an input part and a weight part (zero-bubble schedules;
 * fp32 or bf16 compute, the weight part rounding its operands as the whole backward does).
 * The input part (block_bwd with keep, model.c) runs every matmul's dX and the norms' backwards and
 * keeps the matmuls' output gradients in the layer's activations; the weight part here runs their
 * dW later. Where the model holds the gradients (below ZeRO-2) the input part adds the norm gains'
 * gradients into them at once; where a sharded run hands out a transient gradient slot per layer
 * and reduces it when the layer is done (ZeRO-2/3), no slot is taken until the weight part: the
 * gains' gradients wait in the layer's d_n, cleared, and are copied into the slot (cleared too)
 * there, the same numbers the whole backward accumulates into it; the head's final norm gain
 * likewise (slot_act's dgf: the run clears its non-layer transients at each backward part). */
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "train/config/alloc.h"
#include "train/model/model_impl.h"
#include "train/observe/trace.h"

layer_g split_bwd_grads(model *m, layer_act *A, int64_t l) {
    if (m->grads) return m->hk.layer_grads(m->hk.ctx, m, l);
    layer_g g;
    memset(&g, 0, sizeof g);
    floats_clear(A->d_n, 2 * m->s.D);
    g.attn_norm = A->d_n, g.mlp_norm = A->d_n + m->s.D;
    return g;
}

/* An output projection's dw[K, N] += a[M, K]ᵀ · dy[M, N]; with bf16 compute a as the forward kept
 * it (ab) and dy rounded, as the whole backward has them (sublayer_out_bwd). */
static void out_dw(model *m, float *dw, const float *a, const kern_bf16 *ab, const float *dy,
                   int64_t M, int64_t K, int64_t N) {
    if (!m->cmp.bf16) {
        kern_matmul_dw(dw, a, dy, M, K, N);
        return;
    }
    const kern_bf16 *a16 = mixed_saved(ab, m->sb[1], a, M * K);
    mixed_pack(m->sb[2], dy, M * N);
    kern_matmul_dw_bf16(m->cmp.ctx, dw, a16, m->sb[2], M, K, N);
}

/* The in-projections' dw_k += hᵀ · dy_k (sublayer_in_dw), whose bf16 operands dy_k the whole
 * backward's sublayer_in_dx rounded: rounded here the same way. */
static void in_dw(model *m, float *const *dw, const float *h, const kern_bf16 *hb, int nw,
                  float *const *dy, const int64_t *nk, int64_t BT) {
    for (int k = 0; k < nw && m->cmp.bf16; k++) mixed_pack(m->sb[1 + k], dy[k], BT * nk[k]);
    sublayer_in_dw(m, dw, h, hb, nw, dy, nk, BT);
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
    out_dw(m, g.w_down, A->g, A->gb, A->d_mlp, BT, Fl, D);
    POLL(m);
    float *const dgu[2] = {A->d_a, A->d_b}, *const ggu[2] = {g.w_gate, g.w_up};
    const int64_t ngu[2] = {Fl, Fl};
    in_dw(m, ggu, A->h2, A->h2b, 2, dgu, ngu, BT);
    trace_end(m->tr, TRACE_MLP);
    m->hk.mlp_grads_done(m->hk.ctx, m, l);
    if (kept) floats_copy(g.attn_norm, A->d_n, D);
    trace_begin(m->tr, TRACE_ATTN, l);
    out_dw(m, g.wo, A->att, A->attb, A->d_attn, BT, NHl, D);
    POLL(m);
    float *const dqkv[3] = {A->d_q, A->d_k, A->d_v}, *const gqkv[3] = {g.wq, g.wk, g.wv};
    const int64_t nqkv[3] = {NHl, KHl, KHl};
    in_dw(m, gqkv, A->h1, A->h1b, 3, dqkv, nqkv, BT);
    trace_end(m->tr, TRACE_ATTN);
    m->hk.layer_grads_done(m->hk.ctx, m, l);
}

