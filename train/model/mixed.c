/* mixed: bf16 compute's own pieces (model_compute.bf16): the products' bf16 operands, the
 * weights' bf16 copy, attention on bf16 operands, the in-projections' backward products.
 *
 * What is bf16 and what stays fp32 (b(·) is the rounding to bf16, kern_bf16_pack):
 *   - the weights: the fp32 parameters are the master copy (the optimizer, checkpoints); a
 *     layer's matrices (a MoE block's: its routed and shared experts') and the unembedding are
 *     copied to bf16 the first time a pass uses them after model_params_changed (once per
 *     update), into params_b, in the parameters' layout. ZeRO-3 gathers a layer's matrices and
 *     the unembedding in bf16 and hands them over as they are (layer_w.b16, the hook
 *     weight_b16). Norm gains, the router and the embedding (a lookup) stay fp32.
 *   - the activations: those only products read are saved in bf16 alone, rounded once by the
 *     forward where it first multiplies them and multiplied as they are by the backward: the
 *     norms' outputs h1, h2 and hf, attention's q, k, v (after RoPE), its probabilities (Pb) and
 *     output att, and the SwiGLU output g (mixed_carve_act). Their fp32 values live only in the
 *     forward's transient scratch (mixed_transients). What a norm's, RoPE's, SwiGLU's or the
 *     loss's backward reads stays fp32: the residuals x1, x2, the rows' 1/rms, SwiGLU's inputs a
 *     and b, the logits. A context axis's attention (model_extents.cp_reads) reads q, k, v in
 *     bf16 alone too (ulysses none: it keeps its own head shards) and att in bf16 but for the
 *     ring, whose D = rowsum(dO ∘ O) reads att in fp32.
 *     A MoE block keeps h2 in bf16 too (its router's dW unpacks it), and its experts' rows,
 *     hidden values and shared experts' hidden values (model_moe.c). Elsewhere
 *     (model_fwd_rows' workspace) a product's input is rounded where the product consumes it,
 *     into the operand scratch sb[]; rounding an fp32 value gives the same bf16 value whenever
 *     it is done, so either way the numbers are the same.
 *   - the gradients: each product's upstream gradient is rounded once for its two products
 *     (dX and dW); the gradients themselves accumulate in fp32.
 * Attention: S = b(q)·b(k)ᵀ and att = b(P)·b(v) summed in fp32 (kernels/attn_bf16.h), softmax fp32.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_bf16.h"
#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "train/config/alloc.h"
#include "train/model/model_impl.h"

void mixed_pack(kern_bf16 *dst, const float *src, int64_t n) {
    if (!mesh_no_data(n * (int64_t)sizeof(float))) kern_bf16_pack(dst, src, n);
}

const float *mixed_unpack(float *dst, const kern_bf16 *src, int64_t n) {
    if (!mesh_no_data(n * (int64_t)sizeof(float))) kern_bf16_unpack(dst, src, n);
    return dst;
}

const kern_bf16 *mixed_keep(kern_bf16 *saved, kern_bf16 *scratch, const float *x, int64_t n) {
    kern_bf16 *dst = saved ? saved : scratch;
    mixed_pack(dst, x, n);
    return dst;
}

const kern_bf16 *mixed_saved(const kern_bf16 *saved, kern_bf16 *scratch, const float *x, int64_t n) {
    if (saved) return saved;
    mixed_pack(scratch, x, n);
    return scratch;
}

const model_compute *model_compute_of(const model *m) {
    return &m->cmp;
}

/* ---------------------------------------------------------------- saved activations */

void mixed_carve_act(const model *m, carver *cb, layer_act *A, int moe) {
    if (!m->cmp.bf16) return;
    const int64_t BT = m->BT, D = m->s.D, NH = m->loc.Nl * m->s.H, KH = m->loc.Kl * m->s.H;
    const unsigned reads = m->loc.cp_n > 1 ? m->loc.cp_reads : CP_READS_QKV;
    A->b16_kept = KEPT_H1 | KEPT_QKV;
    A->h1b = carve_b(cb, BT * D);
    if (reads & CP_READS_QKV) {
        A->qb = carve_b(cb, BT * NH);
        A->kb = carve_b(cb, BT * KH);
        A->vb = carve_b(cb, BT * KH);
    }
    if (!(reads & CP_READS_ATT)) {
        A->b16_kept |= KEPT_ATT;
        A->attb = carve_b(cb, BT * NH);
    }
    A->b16_kept |= KEPT_H2;
    A->h2b = carve_b(cb, BT * D);
    if (moe) return;
    A->b16_kept |= KEPT_G;
    A->gb = carve_b(cb, BT * m->loc.Fl);
}

void mixed_carve_head(const model *m, carver *cb, slot_act *S) {
    S->hf_kept = m->cmp.bf16 != 0;
    S->hfb = S->hf_kept ? carve_b(cb, m->BT * m->s.D) : NULL;
}

/* The fp32 fields of what is kept in bf16 alone: one scratch for every layer and slot, the
 * backward's (which the forward leaves free): the norms' outputs s_big, q, k, v s_q, s_k, s_v,
 * attention's output s_att, SwiGLU's s_f1. Each is rounded into its saved copy before the next
 * product overwrites the scratch. */
void mixed_transients(model *m) {
    for (int k = 0; k < m->nslots; k++) {
        slot_act *S = &m->slot[k];
        if (S->hfb) S->hf = m->s_big;
        for (int64_t l = 0; l < m->Ls; l++) {
            layer_act *A = &S->act[l];
            if (A->h1b) A->h1 = m->s_big;
            if (A->b16_kept & KEPT_QKV) A->q = m->s_q, A->k = m->s_k, A->v = m->s_v;
            if (A->attb) A->att = m->s_att;
            if (A->h2b) A->h2 = m->s_big;
            if (A->gb) A->g = m->s_f1;
            if (A->xrb) A->xs = m->ms.xs_t, A->xr = m->ms.xr_t, A->eh = m->ms.eh_t;
            if (A->shb) A->sh = m->ms.sh_t;
        }
    }
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* Columns of the widest product operand: D, N_l·H, K_l·H, F_l, V_l. */
static int64_t widest(const model *m) {
    const model_extents *lc = &m->loc;
    const int64_t H = m->s.H;
    return max64(max64(max64(m->s.D, lc->Nl * H), max64(lc->Kl * H, lc->Fl)), lc->Vl);
}

/* Elements of one layer's matrices on this rank: wq, wk, wv, wo, w_gate, w_up, w_down, and a
 * MoE block's e_gate, e_up, e_down (its E_Z experts), s_gate, s_up, s_down (S shared). */
static void layer_counts(const model *m, int64_t n[13]) {
    const model_extents *lc = &m->loc;
    const int64_t D = m->s.D, NH = lc->Nl * m->s.H, KH = lc->Kl * m->s.H, F = lc->Fl;
    const int64_t Ee = lc->El * D * lc->Fel, Se = m->s.moe.shared * D * lc->Fel;
    const int64_t c[13] = {D * NH, D * KH, D * KH, NH * D, D * F, D * F, F * D,
                           Ee,     Ee,     Ee,     Se,     Se,    Se};
    for (int i = 0; i < 13; i++) n[i] = c[i];
}

void mixed_rows_carve(model *m, carver *c, kern_bf16 **sb, int64_t R) {
    for (int i = 0; i < 4; i++) sb[i] = carve_b(c, R * widest(m));
}

void mixed_carve_scratch(model *m, carver *c) {
    for (int i = 0; i < 4; i++) m->sb[i] = m->sb_train[i] = carve_b(c, m->BT * widest(m));
}

/* w's n elements in bf16: the model's own copy (in params_b, made again when stale), or, for a
 * weight from outside the model's storage, a copy made now into *spare (advanced past it). */
static const kern_bf16 *copy_of(model *m, const float *w, int64_t n, int stale, kern_bf16 **spare) {
    const uintptr_t p = (uintptr_t)w, lo = (uintptr_t)m->params;
    const uintptr_t hi = lo + (uintptr_t)m->nparams * sizeof(float);
    if (m->params_b && p >= lo && p + (uintptr_t)n * sizeof(float) <= hi) {
        kern_bf16 *b = m->params_b + (w - m->params);
        if (stale) mixed_pack(b, w, n);
        return b;
    }
    CHECK(*spare, "bf16 compute: a weight from outside the model's storage and no room to copy it");
    kern_bf16 *b = *spare;
    mixed_pack(b, w, n);
    *spare += n;
    return b;
}

/* ---------------------------------------------------------------- panel copies */

/* Elements of the panel copy of matrix i of layer l (i = 7: the unembedding; 0 where none). */
static int64_t panel_elems(const model *m, int64_t l, int i) {
    int64_t K, N;
    model_matrix_dims(m, i, &K, &N);
    if (i == 7 ? !m->last : i >= 4 && model_layer_is_moe(&m->s, l)) return 0;
    return kern_bf16_panel_elems(kern_bf16_ctx_panels(m->cmp.ctx), K, N);
}

/* Where the panel copy of matrix i of layer l starts in pan_block (layers in order, then the
 * unembedding: l = l1, i = 7). */
static int64_t panel_off(const model *m, int64_t l, int i) {
    int64_t off = 0;
    for (int64_t j = m->l0; j < l; j++)
        for (int k = 0; k < 7; k++) off += panel_elems(m, j, k);
    for (int k = 0; k < i && l < m->l1; k++) off += panel_elems(m, l, k);
    return off;
}

int mixed_alloc_panels(model *m) {
    if (!m->cmp.panels || m->cmp.bf16 != MODEL_BF16 || !kern_bf16_ctx_panels(m->cmp.ctx)) return 0;
    m->pan_elems = panel_off(m, m->l1, 7) + panel_elems(m, m->l1, 7);
    /* touched at load (the first-touch faults were most of a first pack's cost), huge pages */
    m->pan_block = m->pan_elems ? kern_bf16_panel_alloc(m->pan_elems) : NULL;
    return m->pan_elems && !m->pan_block ? -1 : 0;
}

int64_t model_panel_bytes(const model *m) {
    return (m->pan_block ? m->pan_elems * (int64_t)sizeof *m->pan_block : 0) +
           panels_f32_bytes(m);
}

/* Matrix i of layer l (the unembedding: l = l1, i = 7) packed again into its panel copy from b,
 * its bf16 copy just made, and registered with the context for b. */
static void panel_make(model *m, int64_t l, int i, const kern_bf16 *b) {
    int64_t K, N;
    model_matrix_dims(m, i, &K, &N);
    if (!m->pan_block || !b || !panel_elems(m, l, i) || mesh_no_data(K * N * 2)) return;
    kern_bf16 *P = m->pan_block + panel_off(m, l, i);
    kern_bf16_panel_pack(kern_bf16_ctx_panels(m->cmp.ctx), P, b, K, N, N);
    CHECK(kern_bf16_ctx_add_panel(m->cmp.ctx, b, K, N, N, P) == 0,
          "bf16 compute: no memory to register a panel copy");
}

layer_wb mixed_layer(model *m, const layer_w *w, int64_t l) {
    const float *f[13] = {w->wq,     w->wk,   w->wv,     w->wo,     w->w_gate, w->w_up,  w->w_down,
                          w->e_gate, w->e_up, w->e_down, w->s_gate, w->s_up,   w->s_down};
    const kern_bf16 *b[13] = {NULL};
    int64_t n[13];
    layer_counts(m, n);
    const int stale = m->lver[l - m->l0] != m->wver;
    kern_bf16 *spare = NULL;     /* a layer's weights are the model's own here */
    for (int i = 0; i < 13; i++) /* (the hook's own bf16 copy: ZeRO-3's gathered layer) */
        b[i] = w->b16[i] ? w->b16[i] : f[i] ? copy_of(m, f[i], n[i], stale, &spare) : NULL;
    for (int i = 0; i < 7 && stale; i++)
        if (!w->b16[i]) panel_make(m, l, i, b[i]);
    m->b16_made += stale;
    m->lver[l - m->l0] = m->wver;
    return (layer_wb){b[0], b[1], b[2], b[3],  b[4],  b[5], b[6],
                      b[7], b[8], b[9], b[10], b[11], b[12]};
}

const kern_bf16 *mixed_unembed(model *m, const float *un) {
    if (!un) { /* the hook holds it in bf16 only */
        const kern_bf16 *b = m->hk.weight_b16 ? m->hk.weight_b16(m->hk.ctx, m, P_UNEMBED) : NULL;
        CHECK(b, "bf16 compute: the hooks hand the unembedding over in neither fp32 nor bf16");
        return b;
    }
    kern_bf16 *spare = NULL; /* the unembedding is the model's own here */
    const kern_bf16 *b = copy_of(m, un, m->s.D * m->loc.Vl, m->uver != m->wver, &spare);
    if (m->uver != m->wver) panel_make(m, m->l1, 7, b), m->b16_made++;
    m->uver = m->wver;
    return b;
}

int64_t model_make_bf16(model *m) {
    if (m->cmp.bf16 != MODEL_BF16) return 0;
    const int64_t made = m->b16_made;
    for (int64_t l = m->l0; l < m->l1; l++) { /* as a pass takes them: the hooks */
        const layer_w w = m->hk.layer_weights(m->hk.ctx, m, l, +1);
        mixed_layer(m, &w, l);
        m->hk.layer_release(m->hk.ctx, m, l);
    }
    if (m->last) mixed_unembed(m, m->hk.weight(m->hk.ctx, m, P_UNEMBED));
    return m->b16_made - made;
}

int64_t model_bf16_copies(const model *m) {
    return m->b16_made;
}

model_weight_bytes model_weight_memory(const model *m) {
    const int64_t b16 = m->params_b ? (m->nparams + 1) / 2 * (int64_t)sizeof(float) : 0;
    return (model_weight_bytes){m->nparams * (int64_t)sizeof(float), b16, model_panel_bytes(m)};
}

void model_params_changed(model *m) {
    m->wver++;
    panels_f32_make(m); /* fp32 inference's copies: packed again now (the bf16 ones when used) */
}

/* ---------------------------------------------------------------- attention */

void mixed_attn_fwd(model *m, layer_act *A, int64_t B, int64_t T) {
    const int64_t BT = B * T, H = m->s.H, Nl = m->loc.Nl, Kl = m->loc.Kl;
    const kern_bf16 *q = mixed_keep(A->qb, m->sb[1], A->q, BT * Nl * H);
    const kern_bf16 *k = mixed_keep(A->kb, m->sb[2], A->k, BT * Kl * H);
    const kern_bf16 *v = mixed_keep(A->vb, m->sb[3], A->v, BT * Kl * H);
    kern_attn_fwd_bf16(m->cmp.ctx, A->att, A->Pb, m->s_attn, q, k, v, B, T, Nl, Kl, H);
}

void mixed_attn_bwd(model *m, const layer_act *A, const float *datt, float *dq, float *dk,
                    float *dv, int64_t B, int64_t T) {
    const int64_t BT = B * T, H = m->s.H, Nl = m->loc.Nl, Kl = m->loc.Kl;
    mixed_pack(m->sb[0], datt, BT * Nl * H);
    const kern_bf16 *q = mixed_saved(A->qb, m->sb[1], A->q, BT * Nl * H);
    const kern_bf16 *k = mixed_saved(A->kb, m->sb[2], A->k, BT * Kl * H);
    const kern_bf16 *v = mixed_saved(A->vb, m->sb[3], A->v, BT * Kl * H);
    kern_attn_bwd_bf16(m->cmp.ctx, dq, dk, dv, m->s_attn, m->sb[0], A->Pb, q, k, v, B, T, Nl, Kl,
                       H);
}
