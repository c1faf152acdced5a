/* model: the decoder's instance on one rank (its parameters' storage, initialised from the
 * parameter table of params.c) and the forward/backward pass of a micro-batch; a sublayer's two
 * ends are sublayer.c's, a MoE block's MLP model_moe.c's. Sharded runs get their local extents and
 * their communication through the hook table of hooks.h, filled in by train/parallel; on one rank
 * every hook is a local copy or add.
 *
 * Forward of block l on the residual stream r[BT, D] (BT = Bl·T rows, one per token):
 *   x1 = r;  h1 = rmsnorm(x1)·attn_norm;  q,k,v = h1·wq, h1·wk, h1·wv;  rope(q), rope(k)
 *   att = causal_attention(q, k, v);  x2 = x1 + att·wo
 *   h2 = rmsnorm(x2)·mlp_norm;  a = h2·w_gate;  b = h2·w_up;  g = silu(a)·b;  r = x2 + g·w_down
 * then hf = rmsnorm(r)·final_norm, logits = hf·unembed, loss = mean cross-entropy.
 * Saved per layer: x1 h1 rstd1 q k v P att x2 h2 rstd2 a b g (bf16 compute: those only products
 * read in bf16 alone; mixed.c says which, and where each rounding is). */
#include "train/model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attn_bf16.h"
#include "kernels/embed.h"
#include "kernels/gemm.h"
#include "kernels/optim.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/xent.h"
#include "train/config/alloc.h"
#include "train/model/hooks.h"
#include "train/model/model_impl.h"
#include "train/observe/trace.h"

/* ---------------------------------------------------------------- instance */

/* A layer's activations of R rows up to its attention (x1 … v), and from its output to the MLP's
 * input (att … rstd2), carved in that order (but those A keeps in bf16 alone). */
static void carve_layer_in(const model *m, carver *c, layer_act *A, int64_t R) {
    const int64_t D = m->s.D, H = m->s.H;
    A->x1 = carve(c, R * D);
    A->h1 = carve_f32(c, A->b16_kept & KEPT_H1, R * D);
    A->rstd1 = carve(c, R);
    A->q = carve_f32(c, A->b16_kept & KEPT_QKV, R * m->loc.Nl * H);
    A->k = carve_f32(c, A->b16_kept & KEPT_QKV, R * m->loc.Kl * H);
    A->v = carve_f32(c, A->b16_kept & KEPT_QKV, R * m->loc.Kl * H);
}
static void carve_layer_mid(const model *m, carver *c, layer_act *A, int64_t R) {
    A->att = carve_f32(c, A->b16_kept & KEPT_ATT, R * m->loc.Nl * m->s.H);
    A->x2 = carve(c, R * m->s.D);
    A->h2 = carve_f32(c, A->b16_kept & KEPT_H2, R * m->s.D);
    A->rstd2 = carve(c, R);
}

/* The saved activations of every slot, with bf16 compute attention's probabilities from cb
 * (sizing pass when c->base is NULL: m->slot and m->acts may then be NULL too). */
static void layout_activations(model *m, carver *c, carver *cb) {
    const int64_t BT = m->BT, D = m->s.D, T = m->s.T;
    const model_extents *lc = &m->loc;
    slot_act dummy_slot;
    layer_act dummy_layer;
    for (int k = 0; k < m->nslots; k++) {
        slot_act *S = c->base ? &m->slot[k] : &dummy_slot;
        if (c->base) S->act = m->acts + k * m->Ls;
        for (int64_t l = 0; l < m->Ls; l++) {
            layer_act *A = c->base ? &S->act[l] : &dummy_layer;
            const int moe = model_layer_is_moe(&m->s, model_layer_global(m, m->l0 + l));
            memset(A, 0, sizeof *A);
            mixed_carve_act(m, cb, A, moe);
            carve_layer_in(m, c, A, BT);
            /* (a context axis's attention keeps its own: cp_attn_fwd) */
            const int own = lc->cp_n <= 1;
            A->P = !m->cmp.bf16 && own ? carve(c, m->Bl * lc->Nl * T * T) : NULL;
            A->Pb = m->cmp.bf16 && own ? carve_b(cb, m->Bl * lc->Nl * T * T) : NULL;
            carve_layer_mid(m, c, A, BT);
            if (moe) {
                moe_carve_act(m, c, cb, A, BT, m->Bl);
            } else {
                A->a = carve(c, BT * lc->Fl);
                A->b = carve(c, BT * lc->Fl);
                A->g = carve_f32(c, A->b16_kept & KEPT_G, BT * lc->Fl);
            }
            if (m->split) split_carve(m, c, cb, A, moe);
        }
        S->xf = carve(c, m->chunks * BT * D); /* each chunk's output (the last one's: the final) */
        if (m->last) {
            mixed_carve_head(m, cb, S);
            S->hf = carve_f32(c, (unsigned)S->hf_kept, BT * D);
            S->rstdf = carve(c, BT);
            S->logits = carve(c, BT * lc->Vl);
            S->lse = carve(c, BT);
            S->stats = carve(c, 3 * BT);
            S->dgf = m->split ? carve(c, D) : NULL;
        }
    }
}

static void layout_scratch(model *m, carver *c, carver *cb) {
    const int64_t BT = m->BT, D = m->s.D, H = m->s.H, T = m->s.T;
    const model_extents *lc = &m->loc;
    m->rope_cos = carve(c, T * H / 2);
    m->rope_sin = carve(c, T * H / 2);
    m->d_resid = carve(c, BT * D);
    m->d_full = carve(c, BT * D);
    m->d_part = carve(c, BT * D);
    m->s_big = carve(c, BT * (lc->Vl > D ? lc->Vl : D));
    m->s_f1 = carve(c, BT * lc->Fl);
    m->s_f2 = carve(c, BT * lc->Fl);
    m->s_q = carve(c, BT * lc->Nl * H);
    m->s_k = carve(c, BT * lc->Kl * H);
    m->s_v = carve(c, BT * lc->Kl * H);
    m->s_att = carve(c, BT * lc->Nl * H);
    const int64_t attn_b = m->cmp.bf16 ? kern_attn_bf16_scratch(T) : 0;
    m->s_attn = carve(c, attn_b > T * T ? attn_b : T * T);
    moe_carve_scratch(m, c, cb);
    if (m->cmp.bf16) mixed_carve_scratch(m, cb);
    if (c->base && m->cmp.bf16) mixed_transients(m);
}

void model_sizes_of(const model_shape *s, const model_extents *e, int64_t Bl,
                    const model_stage_info *st, int bf16, model_sizes *out) {
    model m = {.s = *s, .Bl = Bl, .BT = Bl * s->T, .l0 = st->l0, .l1 = st->l1};
    m.Ls = st->l1 - st->l0, m.last = st->v_shape ? st->l0 == 0 : st->l1 == s->L;
    m.nslots = st->nslots;
    m.chunks = st->chunks, m.split = st->split, m.Lc = m.Ls / st->chunks;
    m.loc = *e;
    m.cmp.bf16 = bf16;
    carver c = {NULL, 0};
    carver cb = {NULL, 0};
    layout_activations(&m, &c, &cb);
    out->act = c.used, out->act_b = 2 * cb.used; /* cb in floats, two bf16 values each */
    layout_scratch(&m, &c, &cb);
    out->scratch = c.used - out->act, out->scratch_b = 2 * cb.used - out->act_b;
    out->targets = st->nslots * m.BT + 1;
}

int model_chunks(const model *m) {
    return m->chunks;
}

/* Parameter id's slab from the seed; a stack over layers chunk by chunk (each chunk's layers are
 * consecutive in the model, not across chunks; so are its dense MLPs and MoE blocks). */
static void init_param(model *m, param_id id, uint64_t seed) {
    float *out = m->params + m->off[id];
    if (m->chunks == 1 || !model_param_stacked(id) || m->cnt[id] == 0) {
        model_param_init_slab(out, &m->s, id, &m->slab[id], seed);
        return;
    }
    const int64_t per_block = m->cnt[id] / m->slab[id].cnt[0];
    for (int k = 0; k < m->chunks; k++) {
        param_slab sl = m->slab[id];
        model_stack_chunk(m, id, k, &sl.off[0], &sl.cnt[0]);
        model_param_init_slab(out + k * sl.cnt[0] * per_block, &m->s, id, &sl, seed);
    }
}

model *model_create(const model_shape *s, int64_t Bl, uint64_t seed, const model_hooks *hooks) {
    return model_create_compute(s, Bl, seed, hooks, NULL);
}

/* bf16 compute: the weights' copy (none when they come gathered), the layers' copy versions, the
 * bf16 activations and scratch (n floats' room). Returns 0, or −1 out of memory. */
static int alloc_bf16(model *m, int64_t n) {
    m->wver = 1; /* the copies (version 0) are stale */
    if (!m->cmp.bf16) return 0;
    CHECK(m->cmp.ctx, "model_create_compute: bf16 compute without a kern_bf16_ctx");
    if (m->cmp.bf16 != MODEL_BF16_GATHERED)
        m->params_b = (kern_bf16 *)(void *)alloc_floats((m->nparams + 1) / 2);
    m->act_b_block = (kern_bf16 *)(void *)alloc_floats(n);
    m->lver = calloc((size_t)(m->Ls + 1), sizeof *m->lver);
    if (mixed_alloc_panels(m) < 0) return -1;
    return (m->params_b || m->cmp.bf16 == MODEL_BF16_GATHERED) && m->act_b_block && m->lver ? 0
                                                                                            : -1;
}

model *model_create_compute(const model_shape *s, int64_t Bl, uint64_t seed,
                            const model_hooks *hooks, const model_compute *cmp) {
    model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (cmp) m->cmp = *cmp;
    m->s = *s;
    m->Bl = Bl;
    m->BT = Bl * s->T;
    m->hk = *hooks;
    m->hk.extents(m->hk.ctx, s, &m->loc);
    model_stage_info st;
    m->hk.stage(m->hk.ctx, s, &st);
    m->l0 = st.l0, m->l1 = st.l1, m->nslots = st.nslots, m->chunks = st.chunks;
    m->split = st.split && Bl > 0;
    m->Ls = m->l1 - m->l0;
    m->Lc = m->Ls / m->chunks;
    m->v_shape = st.v_shape;
    m->first = m->l0 == 0;
    m->last = st.v_shape ? m->first : m->l1 == s->L; /* holds the last stage */
    m->nparams = 0;
    for (int id = 0; id < P_ALL; id++) {
        m->hk.slab(m->hk.ctx, s, (param_id)id, &m->slab[id]);
        const param_info pi = model_param_info(s, (param_id)id);
        m->off[id] = m->nparams;
        m->cnt[id] = model_slab_numel(&pi, &m->slab[id]);
        m->nparams += m->cnt[id];
    }
    m->params = alloc_floats(m->nparams);
    const int want_grads = Bl > 0 && m->hk.has_grads(m->hk.ctx);
    m->grads = want_grads ? alloc_floats(m->nparams) : NULL;
    m->tally.kept = calloc((size_t)(model_moe_layers(s) * s->moe.E + 1), sizeof(int64_t));
    m->slot = calloc((size_t)m->nslots, sizeof *m->slot);
    m->acts = calloc((size_t)(m->nslots * (m->Ls > 0 ? m->Ls : 1)), sizeof *m->acts);
    carver c = {NULL, 0};
    carver cb = {NULL, 0};
    int ok = m->slot && m->acts;
    if (ok) {
        layout_activations(m, &c, &cb);
        m->act_bytes = (c.used + cb.used) * (int64_t)sizeof(float) / m->nslots;
        layout_scratch(m, &c, &cb);
        m->act_block = alloc_floats(c.used);
        m->tgt_block = calloc((size_t)(m->nslots * m->BT + 1), sizeof(int32_t));
        ok = alloc_bf16(m, cb.used) == 0 && panels_f32_alloc(m) == 0;
    }
    if (!ok || !m->params || (!m->grads && want_grads) || !m->act_block || !m->tgt_block ||
        !m->tally.kept) {
        model_destroy(m);
        return NULL;
    }
    c = (carver){m->act_block, 0};
    cb = (carver){(float *)(void *)m->act_b_block, 0};
    layout_activations(m, &c, &cb);
    layout_scratch(m, &c, &cb);
    for (int k = 0; k < m->nslots; k++) m->slot[k].targets = m->tgt_block + k * m->BT;
    kern_rope_table(m->rope_cos, m->rope_sin, s->T, s->H);
    for (int id = 0; id < P_ALL; id++) init_param(m, (param_id)id, seed);
    panels_f32_make(m);
    m->hk.ready(m->hk.ctx, m);
    return m;
}

void model_destroy(model *m) {
    if (!m) return;
    panels_f32_free(m);
    ALLOC_FREE_ALL(m->params, m->grads, m->slot, m->acts, m->act_block, m->tgt_block, m->tally.kept,
                   m->params_b, m->act_b_block, m->lver, m->pan_block, m);
}

void model_set_trace(model *m, struct trace *tr) {
    m->tr = tr;
}

struct trace *model_trace(const model *m) {
    return m->tr;
}

const model_shape *model_shape_of(const model *m) {
    return &m->s;
}
float *model_param(model *m, param_id id, int64_t *n) {
    if (n) *n = m->cnt[id];
    return m->params + m->off[id];
}
float *model_grad(model *m, param_id id, int64_t *n) {
    if (n) *n = m->cnt[id];
    return m->grads ? m->grads + m->off[id] : NULL;
}
const param_slab *model_slab(const model *m, param_id id) {
    return &m->slab[id];
}
float *model_params_flat(model *m, int64_t *n) {
    if (n) *n = m->nparams;
    return m->params;
}
float *model_grads_flat(model *m, int64_t *n) {
    if (n) *n = m->nparams;
    return m->grads;
}
void model_zero_grads(model *m) {
    if (m->grads) floats_clear(m->grads, m->nparams);
}
int64_t model_activation_bytes(const model *m) {
    return m->act_bytes;
}
void model_moe_stats_get(const model *m, model_moe_stats *out) {
    const int64_t Lm = model_moe_layers(&m->s);
    *out =
        (model_moe_stats){.layers = Lm,
                          .E = m->s.moe.E,
                          .kept = m->tally.kept,
                          .dropped = m->tally.dropped,
                          .slots = m->tally.slots,
                          .aux = m->tally.aux_n ? m->tally.aux_sum / (double)m->tally.aux_n : 0.0,
                          .z = m->tally.z_n ? m->tally.z_sum / (double)m->tally.z_n : 0.0};
}
void model_moe_stats_reset(model *m) {
    for (int64_t i = 0; i < model_moe_layers(&m->s) * m->s.moe.E; i++) m->tally.kept[i] = 0;
    m->tally.dropped = m->tally.slots = m->tally.aux_n = m->tally.z_n = 0;
    m->tally.aux_sum = m->tally.z_sum = 0.0;
}
void model_rows_capacity(model *m, const int32_t *seq, int32_t *counts) {
    m->rows_seq = seq;
    m->rows_cnt = counts;
}
const model_extents *model_extents_of(const model *m) {
    return &m->loc;
}
void model_stage(const model *m, int64_t *l0, int64_t *l1) {
    *l0 = m->l0;
    *l1 = m->l1;
}
int model_slots(const model *m) {
    return m->nslots;
}
int64_t model_local_rows(const model *m) {
    return m->BT;
}
float *model_stage_input(model *m, int slot, int chunk) {
    return m->slot[slot].act[chunk * m->Lc].x1;
}
/* Chunk k's output in slot S. */
static float *chunk_out(const model *m, const slot_act *S, int k) {
    return S->xf + k * m->BT * m->s.D;
}
const float *model_stage_output(model *m, int slot, int chunk) {
    return chunk_out(m, &m->slot[slot], chunk);
}
const float *model_stage_dinput(model *m) {
    return m->d_full;
}

/* ---------------------------------------------------------------- forward */

static void embed_fwd(model *m, float *r, const int32_t *tok, int64_t ldt, int64_t B, int64_t T) {
    const int64_t D = m->s.D;
    /* once per call, not per sequence: under ZeRO-3 each weight() is an AllGather */
    const float *E = m->hk.weight(m->hk.ctx, m, P_EMBED);
    for (int64_t b = 0; b < B; b++)
        kern_embed_fwd(r + b * T * D, E, tok + b * ldt, T, D, m->loc.v0, m->loc.Vl);
}

/* The block up to attention on BT rows of A: h1 = rmsnorm(x1)·attn_norm; q, k, v = h1·wq, h1·wk,
 * h1·wv (not yet rotated). sharded: x1 holds only this rank's D_Y columns (norm_in gathers it). */
static void block_qkv(model *m, const layer_w *w, const layer_wb *wb, layer_act *A, int64_t BT,
                      int sharded) {
    const int64_t H = m->s.H;
    const model_extents *lc = &m->loc;
    const float *const ws[3] = {w->wq, w->wk, w->wv};
    const kern_bf16 *const ws16[3] = {wb ? wb->wq : NULL, wb ? wb->wk : NULL, wb ? wb->wv : NULL};
    const int64_t nk[3] = {lc->Nl * H, lc->Kl * H, lc->Kl * H};
    float *const ys[3] = {A->q, A->k, A->v};
    sublayer_norm_in(m, A->x1, sharded, A->h1, A->rstd1, w->attn_norm, 3, ws, wb ? ws16 : NULL, nk,
                     ys, BT, A->h1b);
}

/* x2 = x1 + att·wo on BT rows of A (partial sums over the TP axis, reduced by the hook). Returns
 * whether x2 was left sharded over D_Y (defer: see the hook sublayer_out). */
static int block_attn_out(model *m, const layer_w *w, const layer_wb *wb, layer_act *A,
                          int64_t BT, int defer) {
    return sublayer_out(m, A->x2, A->x1, A->att, A->attb, w->wo, wb ? wb->wo : NULL, BT,
                        m->loc.Nl * m->s.H, defer);
}

/* The MLP sublayer of block l on BT rows of A: out[BT, D] = x2 + swiglu(rmsnorm(x2)·w_gate,
 * ·w_up)·w_down, or a MoE block's mixture (rows in groups of G tokens of a sequence: moe_block_fwd;
 * stats: G is a training sequence). sharded: x2 holds only this rank's D_Y columns; defer and the
 * result: as block_attn_out's. */
static int block_mlp(model *m, const layer_w *w, const layer_wb *wb, layer_act *A, float *out,
                     int64_t l, int64_t BT, int64_t G, int stats, int sharded, int defer) {
    if (model_layer_is_moe(&m->s, l))
        return moe_block_fwd(m, w, wb, A, out, l, BT, G, stats, sharded, defer);
    const int64_t Fl = m->loc.Fl;
    const float *const ws[2] = {w->w_gate, w->w_up};
    const kern_bf16 *const ws16[2] = {wb ? wb->w_gate : NULL, wb ? wb->w_up : NULL};
    const int64_t nk[2] = {Fl, Fl};
    float *const ys[2] = {A->a, A->b};
    sublayer_norm_in(m, A->x2, sharded, A->h2, A->rstd2, w->mlp_norm, 2, ws, wb ? ws16 : NULL, nk,
                     ys, BT, A->h2b);
    POLL(m);
    kern_swiglu_fwd(A->g, A->a, A->b, BT * Fl);
    return sublayer_out(m, out, A->x2, A->g, A->gb, w->w_down, wb ? wb->w_down : NULL, BT, Fl,
                        defer);
}

/* The block after attention on BT rows of A: x2 = x1 + att·wo, then the MLP into out[BT, D]
 * (whole rows: inference keeps the plain AllGather_Y). */
static void block_rest(model *m, const layer_w *w, const layer_wb *wb, layer_act *A, float *out,
                       int64_t l, int64_t BT) {
    block_attn_out(m, w, wb, A, BT, 0);
    /* (no rows: a rank of an expert axis joining the others' AllToAlls) */
    block_mlp(m, w, wb, A, out, l, BT, BT > 0 ? BT : 1, 0, 0, 0);
}

/* One block, forward, on BT = B·T rows of slot S; reads x1 of layer l (only this rank's D_Y
 * columns if sharded) and writes the block's output as the next layer's x1 (or to `end`, the
 * chunk's output, after the chunk's last layer). defer: the output goes to a norm_in next; returns whether it was
 * left sharded. */
static int block_fwd(model *m, slot_act *S, int64_t l, int64_t B, int64_t T, int sharded,
                     int defer, float *end) {
    const int64_t H = m->s.H;
    const model_extents *lc = &m->loc;
    const int64_t NHl = lc->Nl * H, KHl = lc->Kl * H;
    layer_act *A = &S->act[l - m->l0];
    layer_w w = m->hk.layer_weights(m->hk.ctx, m, l, +1);
    const layer_wb wb16 = m->cmp.bf16 ? mixed_layer(m, &w, l) : (layer_wb){0};
    const layer_wb *wb = m->cmp.bf16 ? &wb16 : NULL;

    trace_begin(m->tr, TRACE_ATTN, l);
    block_qkv(m, &w, wb, A, B * T, sharded);
    if (lc->cp_n > 1) { /* the context axis: rotary and attention at global positions */
        kern_bf16 *const b16[3] = {A->qb, A->kb, A->vb};
        m->hk.cp_attn_fwd(m->hk.ctx, m, (int)(S - m->slot), l - m->l0, A->att, A->q, A->k, A->v,
                          b16, B * T);
    } else {
        kern_rope_apply(A->q, m->rope_cos, m->rope_sin, B, T, lc->Nl, H, NHl, 0);
        kern_rope_apply(A->k, m->rope_cos, m->rope_sin, B, T, lc->Kl, H, KHl, 0);
        POLL(m);
        if (wb)
            mixed_attn_fwd(m, A, B, T);
        else
            kern_attn_fwd(A->att, A->P, A->q, A->k, A->v, B, T, lc->Nl, lc->Kl, H);
    }
    const int x2_sharded = block_attn_out(m, &w, wb, A, B * T, 1);
    trace_end(m->tr, TRACE_ATTN);
    float *out = (l + 1 - m->l0) % m->Lc ? S->act[l + 1 - m->l0].x1 : end;
    trace_begin(m->tr, TRACE_MLP, l);
    const int out_sharded =
        block_mlp(m, &w, wb, A, out, l, B * T, T, T == m->s.T, x2_sharded, defer);
    trace_end(m->tr, TRACE_MLP);
    m->hk.layer_release(m->hk.ctx, m, l);
    return out_sharded;
}

/* The loss of the slot's logits (hf·unembed); fills the slot's lse. Returns the mean loss over BT
 * rows. */
static double forward_loss(model *m, slot_act *S, const int32_t *tok, int64_t ldt, int64_t B,
                           int64_t T) {
    const int64_t BT = B * T, Vl = m->loc.Vl;
    for (int64_t b = 0; b < B; b++)
        memcpy(S->targets + b * T, tok + b * ldt + 1, (size_t)T * sizeof(int32_t));
    float *st = S->stats; /* [3, BT]: max, sum, target logit */
    kern_xent_stats(st, st + BT, st + 2 * BT, S->logits, S->targets, BT, Vl, m->loc.v0);
    sublayer_xent_combine(m, st, BT);
    double loss = 0.0;
    for (int64_t i = 0; i < BT; i++) {
        S->lse[i] = st[i] + logf(st[BT + i]);
        loss += (double)S->lse[i] - (double)st[2 * BT + i];
    }
    return loss / (double)BT;
}

double model_stage_fwd_rows(model *m, int slot, int chunk, const int32_t *tok, int64_t ldt,
                            int64_t B, int64_t T, int want_loss) {
    slot_act *S = &m->slot[slot];
    const int64_t BT = B * T, c0 = m->l0 + chunk * m->Lc, c1 = c0 + m->Lc;
    const int last = m->last && chunk == m->chunks - 1;
    float *xf = chunk_out(m, S, chunk);
    if (m->first && chunk == 0) {
        trace_begin(m->tr, TRACE_EMBED_FWD, 0);
        embed_fwd(m, S->act[0].x1, tok, ldt, B, T);
        m->hk.embed_reduce(m->hk.ctx, m, S->act[0].x1, BT);
        trace_end(m->tr, TRACE_EMBED_FWD);
    }
    /* a block's output may stay sharded over D_Y when a norm_in takes it next: the next block's
     * or, with the loss, the final norm and the unembedding's */
    int sharded = 0;
    for (int64_t l = c0; l < c1; l++) {
        trace_begin(m->tr, TRACE_FWD, l);
        sharded = block_fwd(m, S, l, B, T, sharded, l + 1 < c1 || (last && want_loss), xf);
        trace_end(m->tr, TRACE_FWD);
    }
    if (!last) return 0.0;
    trace_begin(m->tr, TRACE_HEAD_FWD, 0);
    const float *gain = m->hk.weight(m->hk.ctx, m, P_FINAL_NORM);
    double loss = 0.0;
    if (want_loss) {
        const float *const un[1] = {m->hk.weight(m->hk.ctx, m, P_UNEMBED)};
        const kern_bf16 *const un16[1] = {m->cmp.bf16 ? mixed_unembed(m, un[0]) : NULL};
        const int64_t nk[1] = {m->loc.Vl};
        float *const ys[1] = {S->logits};
        sublayer_norm_in(m, xf, sharded, S->hf, S->rstdf, gain, 1, un, m->cmp.bf16 ? un16 : NULL,
                         nk, ys, BT, S->hfb);
        loss = forward_loss(m, S, tok, ldt, B, T);
    } else {
        kern_rmsnorm_fwd(S->hf, S->rstdf, xf, gain, BT, m->s.D);
    }
    trace_end(m->tr, TRACE_HEAD_FWD);
    return loss;
}

double model_stage_fwd(model *m, int slot, int chunk, const int32_t *tokens) {
    return model_stage_fwd_rows(m, slot, chunk, tokens, m->s.T + 1, m->Bl, m->s.T, 1);
}

double model_fwd_loss(model *m, const int32_t *tokens) {
    return model_stage_fwd(m, 0, 0, tokens);
}

void model_last_logits(model *m, int64_t len, float *logits_loc) {
    const int64_t D = m->s.D;
    slot_act *S = &m->slot[0];
    const float *un = m->hk.weight(m->hk.ctx, m, P_UNEMBED);
    if (m->cmp.bf16) {
        mixed_pack(m->sb[0], S->hf + (len - 1) * D, D);
        kern_matmul_bf16(m->cmp.ctx, S->logits, m->sb[0], mixed_unembed(m, un), 1, D, m->loc.Vl);
    } else {
        kern_matmul_ctx(m->f32, S->logits, S->hf + (len - 1) * D, un, 1, D, m->loc.Vl);
    }
    floats_copy(logits_loc, S->logits, m->loc.Vl);
}

void model_next_logits(model *m, const int32_t *seq, int64_t len, float *logits) {
    const int64_t D = m->s.D;
    /* the chunks in pipeline order: round the ranks, or down the V and back (turning on the
     * rank holding the last layer, l1 = L: its chunk 0's output is its chunk 1's input) */
    const int turn = m->v_shape && m->l1 == m->s.L;
    for (int k = 0; k < m->chunks; k++) {
        const int back = m->v_shape && k == 1; /* the V's second leg: from +1, to −1 */
        if (turn && k == 1)
            floats_copy(model_stage_input(m, 0, 1), chunk_out(m, &m->slot[0], 0), len * D);
        else if (!(m->first && k == 0))
            m->hk.stage_recv(m->hk.ctx, model_stage_input(m, 0, k), len * D, back ? 1 : -1);
        model_stage_fwd_rows(m, 0, k, seq, len, 1, len, 0);
        if (!(m->last && k == m->chunks - 1) && !(turn && k == 0))
            m->hk.stage_send(m->hk.ctx, chunk_out(m, &m->slot[0], k), len * D, back ? -1 : 1);
    }
    if (m->last) {
        model_last_logits(m, len, m->s_big);
        m->hk.gather_vocab(m->hk.ctx, m, logits, m->s_big);
    } else {
        floats_clear(logits, m->s.V);
    }
    m->hk.pipe_share_last(m->hk.ctx, logits, m->s.V);
}

/* ---------------------------------------------------------------- inference rows */

/* The workspace of model_fwd_rows for R rows: one layer's activations (every layer reuses them),
 * the final norm. */
static void carve_rows(model *m, carver *c, layer_act *A, float **hf, kern_bf16 **sb, int64_t R) {
    const int64_t D = m->s.D;
    const model_extents *lc = &m->loc;
    memset(A, 0, sizeof *A); /* every value in fp32 (one layer's, rounded where multiplied) */
    carve_layer_in(m, c, A, R);
    carve_layer_mid(m, c, A, R);
    A->a = carve(c, R * lc->Fl);
    A->b = carve(c, R * lc->Fl);
    A->g = carve(c, R * lc->Fl);
    A->P = NULL;
    if (m->s.moe.E > 0) moe_carve_act(m, c, NULL, A, m->loc.ep_n > 1 ? m->rows_cap : R, 1);
    *hf = carve(c, R * (D + 1));
    if (m->cmp.bf16) mixed_rows_carve(m, c, sb, R);
}

int64_t model_rows_ws(model *m, int64_t R) {
    if (R > m->rows_cap) m->rows_cap = R;
    carver c = {NULL, 0};
    layer_act A;
    float *hf;
    kern_bf16 *sb[4];
    carve_rows(m, &c, &A, &hf, sb, R);
    return c.used;
}

void model_fwd_rows(model *m, float *logits_loc, const int64_t *out_rows, int64_t n_out,
                    const int32_t *tok, const int32_t *pos, int64_t R, model_attn_fn attn,
                    void *ctx, float *ws) {
    const int64_t D = m->s.D, H = m->s.H, h2 = m->s.H / 2, Vl = m->loc.Vl;
    const model_extents *lc = &m->loc;
    CHECK(m->first && m->last, "model_fwd_rows: not with pipeline stages");
    carver c = {ws, 0};
    layer_act A;
    float *hf;
    kern_bf16 *sb[4];
    carve_rows(m, &c, &A, &hf, sb, R);
    if (m->cmp.bf16) memcpy(m->sb, sb, sizeof m->sb); /* the rows' operands */
    m->rows_mode = 1;
    kern_embed_fwd(A.x1, m->hk.weight(m->hk.ctx, m, P_EMBED), tok, R, D, lc->v0, lc->Vl);
    m->hk.embed_reduce(m->hk.ctx, m, A.x1, R);
    for (int64_t l = 0; l < m->s.L; l++) {
        layer_w w = m->hk.layer_weights(m->hk.ctx, m, l, +1);
        const layer_wb wb16 = m->cmp.bf16 ? mixed_layer(m, &w, l) : (layer_wb){0};
        const layer_wb *wb = m->cmp.bf16 ? &wb16 : NULL;
        block_qkv(m, &w, wb, &A, R, 0);
        for (int64_t r = 0; r < R; r++) { /* each row at its own position */
            const float *cs = m->rope_cos + pos[r] * h2, *sn = m->rope_sin + pos[r] * h2;
            kern_rope_apply(A.q + r * lc->Nl * H, cs, sn, 1, 1, lc->Nl, H, lc->Nl * H, 0);
            kern_rope_apply(A.k + r * lc->Kl * H, cs, sn, 1, 1, lc->Kl, H, lc->Kl * H, 0);
        }
        attn(ctx, &(model_attn_io){l, R, A.q, A.k, A.v, A.att});
        block_rest(m, &w, wb, &A, A.x1, l, R);
        m->hk.layer_release(m->hk.ctx, m, l);
    }
    m->rows_mode = 0;
    const float *gain = m->hk.weight(m->hk.ctx, m, P_FINAL_NORM),
                *un = m->hk.weight(m->hk.ctx, m, P_UNEMBED);
    float *rstd = hf + R * D;
    for (int64_t i = 0; i < n_out; i++)
        kern_rmsnorm_fwd(hf + i * D, rstd + i, A.x1 + out_rows[i] * D, gain, 1, D);
    if (m->cmp.bf16) {
        mixed_pack(m->sb[0], hf, n_out * D);
        kern_matmul_bf16(m->cmp.ctx, logits_loc, m->sb[0], mixed_unembed(m, un), n_out, D, Vl);
        memcpy(m->sb, m->sb_train, sizeof m->sb);
        return;
    }
    kern_matmul_ctx(m->f32, logits_loc, hf, un, n_out, D, Vl);
}

/* ---------------------------------------------------------------- backward */

/* Backward of one block. dr[BT, D_Y] holds dL/d(block output) and becomes dL/d(block input).
 * keep (MODEL_BWD_INPUT): the matmuls' dW are left to split_bwd_weight, their output gradients
 * kept in the layer's d_* (the scratch of a whole backward). */
static void block_bwd(model *m, slot_act *S, int64_t l, int64_t B, int64_t T, int keep) {
    const int64_t BT = B * T, D = m->s.D, H = m->s.H;
    const model_extents *lc = &m->loc;
    const int64_t NHl = lc->Nl * H, KHl = lc->Kl * H, Fl = lc->Fl;
    layer_act *A = &S->act[l - m->l0];
    layer_w w = m->hk.layer_weights(m->hk.ctx, m, l, -1);
    const layer_wb wb = m->cmp.bf16 ? mixed_layer(m, &w, l) : (layer_wb){0};
    const int b16 = m->cmp.bf16 != 0;
    layer_g g = keep ? split_bwd_grads(m, A, l) : m->hk.layer_grads(m->hk.ctx, m, l);
    float *dr = m->d_resid;

    /* MLP sublayer: out = g·w_down, or the mixture of experts */
    trace_begin(m->tr, TRACE_MLP, l);
    /* the kept output gradients: fp32 (A->d_*), or bf16 as the dX products round them */
    const int keep32 = keep && !b16, keep16 = keep && b16;
    float *dg = keep32 ? A->d_a : m->s_f1, *da = dg, *db = keep32 ? A->d_b : m->s_f2;
    float *dh = m->s_big;
    const int moe = model_layer_is_moe(&m->s, l);
    float *const dgu[2] = {da, db}, *const ggu[2] = {g.w_gate, g.w_up};
    const int64_t ngu[2] = {Fl, Fl};
    if (moe) {
        moe_block_bwd(m, &w, b16 ? &wb : NULL, &g, A, dh, dr, BT, T, keep);
    } else {
        sublayer_out_bwd(m, dg, keep ? NULL : g.w_down, dr, A->g, A->gb, w.w_down, wb.w_down, BT,
                         Fl, keep32 ? A->d_mlp : NULL, keep16 ? A->d_mlpb : NULL);
        kern_swiglu_bwd(da, db, dg, A->a, A->b, BT * Fl); /* in place: da aliases dg */
        const float *const wgu[2] = {w.w_gate, w.w_up};
        const kern_bf16 *const wgu16[2] = {wb.w_gate, wb.w_up};
        kern_bf16 *const kgu[2] = {A->d_ab, A->d_bb};
        sublayer_in_dx(m, dh, 2, dgu, wgu, b16 ? wgu16 : NULL, ngu, BT, keep16 ? kgu : NULL);
    }
    float *dx = sublayer_partial_begin(m, dr, BT);
    kern_rmsnorm_bwd(dx, g.mlp_norm, dh, A->x2, w.mlp_norm, A->rstd2, BT, D);
    m->hk.partial_end(m->hk.ctx, m, dr, dx, BT);
    /* the weight gradients need nothing the reduction makes: they run beside it */
    if (!moe && !keep) sublayer_in_dw(m, ggu, A->h2, A->h2b, 2, dgu, ngu, BT);
    m->hk.partial_done(m->hk.ctx, m, dr, BT);
    trace_end(m->tr, TRACE_MLP);
    if (!keep) m->hk.mlp_grads_done(m->hk.ctx, m, l);

    /* attention sublayer: out = att·wo */
    trace_begin(m->tr, TRACE_ATTN, l);
    float *datt = m->s_att, *dq = keep32 ? A->d_q : m->s_q, *dk = keep32 ? A->d_k : m->s_k,
          *dv = keep32 ? A->d_v : m->s_v;
    sublayer_out_bwd(m, datt, keep ? NULL : g.wo, dr, A->att, A->attb, w.wo, wb.wo, BT, NHl,
                     keep32 ? A->d_attn : NULL, keep16 ? A->d_attnb : NULL);
    POLL(m);
    if (lc->cp_n > 1) {
        const kern_bf16 *const kept[3] = {A->qb, A->kb, A->vb};
        m->hk.cp_attn_bwd(m->hk.ctx, m, (int)(S - m->slot), l - m->l0, dq, dk, dv, datt, A->q,
                          A->k, A->v, A->att, kept, BT);
    } else {
        if (b16)
            mixed_attn_bwd(m, A, datt, dq, dk, dv, B, T);
        else
            kern_attn_bwd(dq, dk, dv, m->s_attn, datt, A->P, A->q, A->k, A->v, B, T, lc->Nl,
                          lc->Kl, H);
        kern_rope_apply(dq, m->rope_cos, m->rope_sin, B, T, lc->Nl, H, NHl, 1);
        kern_rope_apply(dk, m->rope_cos, m->rope_sin, B, T, lc->Kl, H, KHl, 1);
    }
    float *const dqkv[3] = {dq, dk, dv}, *const gqkv[3] = {g.wq, g.wk, g.wv};
    const float *const wqkv[3] = {w.wq, w.wk, w.wv};
    const kern_bf16 *const wqkv16[3] = {wb.wq, wb.wk, wb.wv};
    const int64_t nqkv[3] = {NHl, KHl, KHl};
    kern_bf16 *const kqkv[3] = {A->d_qb, A->d_kb, A->d_vb};
    sublayer_in_dx(m, dh, 3, dqkv, wqkv, b16 ? wqkv16 : NULL, nqkv, BT, keep16 ? kqkv : NULL);
    dx = sublayer_partial_begin(m, dr, BT);
    kern_rmsnorm_bwd(dx, g.attn_norm, dh, A->x1, w.attn_norm, A->rstd1, BT, D);
    m->hk.partial_end(m->hk.ctx, m, dr, dx, BT);
    if (!keep) sublayer_in_dw(m, gqkv, A->h1, A->h1b, 3, dqkv, nqkv, BT);
    m->hk.partial_done(m->hk.ctx, m, dr, BT);
    trace_end(m->tr, TRACE_ATTN);
    if (!keep) m->hk.layer_grads_done(m->hk.ctx, m, l);
}

/* The unembedding's weight gradient from the dlogits in the slot's logits (bf16: as the input
 * part rounded them into sb[1]; the final norm's output as the forward kept it). */
static void head_dw(model *m, slot_act *S) {
    const int64_t BT = m->BT, D = m->s.D, Vl = m->loc.Vl;
    float *dun = m->hk.grad(m->hk.ctx, m, P_UNEMBED);
    if (m->cmp.bf16) {
        const kern_bf16 *hf = mixed_saved(S->hfb, m->sb[0], S->hf, BT * D);
        kern_matmul_dw_bf16(m->cmp.ctx, dun, hf, m->sb[1], BT, D, Vl);
    } else {
        kern_matmul_dw(dun, S->hf, S->logits, BT, D, Vl);
    }
}

/* The last stage's head: d(loss) → dL/d(final residual) in dr (the unembedding's weight
 * gradient and the head's completion left to the weight part when part is MODEL_BWD_INPUT). */
static void head_bwd(model *m, slot_act *S, const float *xf, float grad_scale,
                     model_bwd_part part) {
    const int64_t BT = m->BT, D = m->s.D, Vl = m->loc.Vl;
    float *dgf = m->hk.grad(m->hk.ctx, m, P_FINAL_NORM);
    if (part == MODEL_BWD_WEIGHT) {
        if (!m->grads) floats_copy(dgf, S->dgf, D); /* kept below (model_split.c) */
        if (m->cmp.bf16) mixed_pack(m->sb[1], S->logits, BT * Vl); /* as rounded below */
        head_dw(m, S);
        m->hk.head_grads_done(m->hk.ctx, m);
        return;
    }
    /* loss = mean over the global batch: the caller's grad_scale carries 1/(#micro-batches ·
     * #data shards); 1/BT is the local mean. */
    float *dlogits = S->logits;
    kern_xent_bwd(dlogits, S->logits, S->lse, S->targets, BT, Vl, m->loc.v0,
                  grad_scale / (float)BT);
    float *dhf = m->s_big;
    const float *un = m->hk.weight(m->hk.ctx, m, P_UNEMBED);
    if (m->cmp.bf16) { /* the logits' gradient rounded once for its two products */
        mixed_pack(m->sb[1], dlogits, BT * Vl);
        kern_matmul_dx_bf16(m->cmp.ctx, dhf, m->sb[1], mixed_unembed(m, un), BT, D, Vl, false);
    } else {
        kern_matmul_dx(dhf, dlogits, un, BT, D, Vl, false);
    }
    float *dr = m->d_resid;
    floats_clear(dr, BT * m->loc.Dl);
    float *dx = sublayer_partial_begin(m, dr, BT);
    if (part == MODEL_BWD_INPUT && !m->grads) dgf = S->dgf, floats_clear(dgf, D);
    kern_rmsnorm_bwd(dx, dgf, dhf, xf, m->hk.weight(m->hk.ctx, m, P_FINAL_NORM), S->rstdf, BT, D);
    m->hk.partial_end(m->hk.ctx, m, dr, dx, BT);
    if (part == MODEL_BWD_ALL) head_dw(m, S); /* beside the reduction */
    m->hk.partial_done(m->hk.ctx, m, dr, BT);
    if (part == MODEL_BWD_ALL) m->hk.head_grads_done(m->hk.ctx, m);
}

/* The weight part of chunk k's backward in slot S (MODEL_BWD_WEIGHT). */
static void chunk_bwd_weight(model *m, slot_act *S, int k) {
    const int64_t c0 = m->l0 + k * m->Lc;
    if (m->last && k == m->chunks - 1) {
        trace_begin(m->tr, TRACE_HEAD_BWD, 0);
        head_bwd(m, S, chunk_out(m, S, k), 0.0f, MODEL_BWD_WEIGHT);
        trace_end(m->tr, TRACE_HEAD_BWD);
    }
    for (int64_t l = c0 + m->Lc - 1; l >= c0; l--) {
        trace_begin(m->tr, TRACE_BWD, l);
        split_bwd_weight(m, &S->act[l - m->l0], l, m->BT);
        trace_end(m->tr, TRACE_BWD);
    }
}

void model_stage_bwd(model *m, int slot, int chunk, const int32_t *tokens, const float *d_out,
                     float grad_scale, model_bwd_part part) {
    const int64_t B = m->Bl, T = m->s.T, BT = m->BT, D = m->s.D, ldt = T + 1;
    slot_act *S = &m->slot[slot];
    CHECK(part == MODEL_BWD_ALL || m->split,
          "model: a split backward on a stage that keeps no output gradients");
    if (part == MODEL_BWD_WEIGHT) {
        chunk_bwd_weight(m, S, chunk);
        return;
    }
    const int64_t c0 = m->l0 + chunk * m->Lc;
    m->grad_scale = grad_scale;
    if (m->last && chunk == m->chunks - 1) {
        trace_begin(m->tr, TRACE_HEAD_BWD, 0);
        head_bwd(m, S, chunk_out(m, S, chunk), grad_scale, part);
        trace_end(m->tr, TRACE_HEAD_BWD);
    } else { /* this rank's D_Y columns of the gradient of the stage output */
        const int64_t Dl = m->loc.Dl, d0 = m->loc.d0;
        for (int64_t r = 0; r < BT && !mesh_no_data(BT * Dl * (int64_t)sizeof(float)); r++)
            floats_copy(m->d_resid + r * Dl, d_out + r * D + d0, Dl);
    }
    for (int64_t l = c0 + m->Lc - 1; l >= c0; l--) {
        trace_begin(m->tr, TRACE_BWD, l);
        block_bwd(m, S, l, B, T, part == MODEL_BWD_INPUT);
        trace_end(m->tr, TRACE_BWD);
    }
    trace_begin(m->tr, TRACE_EMBED_BWD, 0);
    const float *demb = sublayer_resid_grad(m, BT);
    if (!m->first || chunk > 0) {
        if (demb != m->d_full) floats_copy(m->d_full, demb, BT * D);
        trace_end(m->tr, TRACE_EMBED_BWD);
        return;
    }
    float *dE = m->hk.grad(m->hk.ctx, m, P_EMBED);
    for (int64_t b = 0; b < B; b++)
        kern_embed_bwd(dE, demb + b * T * D, tokens + b * ldt, T, D, m->loc.v0, m->loc.Vl);
    m->hk.embed_grads_done(m->hk.ctx, m);
    trace_end(m->tr, TRACE_EMBED_BWD);
}

double model_fwd_bwd(model *m, const int32_t *tokens, float grad_scale) {
    double loss = model_stage_fwd(m, 0, 0, tokens);
    model_stage_bwd(m, 0, 0, tokens, NULL, grad_scale, MODEL_BWD_ALL);
    return loss;
}
