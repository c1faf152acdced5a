/* The single-rank hook table (see hooks.h): local extents equal the global ones, every slab is
 * the whole tensor, and communication points reduce to copies and adds. A sharded table reuses
 * the exported building blocks where one of its axes is trivial. */
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"
#include "train/config/alloc.h"
#include "train/model/hooks.h"

void model_extents_full(const model_shape *s, model_extents *o) {
    *o = (model_extents){.Nl = s->N, .Kl = s->K, .Fl = s->F, .Vl = s->V, .Dl = s->D};
}

void model_slab_full(const model_shape *s, param_id id, param_slab *o) {
    param_info pi = model_param_info(s, id);
    *o = (param_slab){{0, 0, 0}, {pi.shape[0], pi.shape[1], pi.shape[2]}};
}

/* Pointer to layer l's block of a parameter stacked over layers, in local storage. */
static float *stacked(float *base, const param_slab *sl, int64_t l) {
    return base + (l - sl->off[0]) * sl->cnt[1] * sl->cnt[2];
}

layer_w model_layer_weights_local(model *m, int64_t l) {
    layer_w w;
#define W(field, id) w.field = stacked(model_param(m, id, NULL), model_slab(m, id), l)
    W(attn_norm, P_ATTN_NORM);
    W(wq, P_WQ);
    W(wk, P_WK);
    W(wv, P_WV);
    W(wo, P_WO);
    W(mlp_norm, P_MLP_NORM);
    W(w_gate, P_W_GATE);
    W(w_up, P_W_UP);
    W(w_down, P_W_DOWN);
#undef W
    return w;
}

layer_g model_layer_grads_local(model *m, int64_t l) {
    layer_g g;
#define G(field, id) g.field = stacked(model_grad(m, id, NULL), model_slab(m, id), l)
    G(attn_norm, P_ATTN_NORM);
    G(wq, P_WQ);
    G(wk, P_WK);
    G(wv, P_WV);
    G(wo, P_WO);
    G(mlp_norm, P_MLP_NORM);
    G(w_gate, P_W_GATE);
    G(w_up, P_W_UP);
    G(w_down, P_W_DOWN);
#undef G
    return g;
}

void model_sublayer_out_local(float *out, const float *xin, const float *act, const float *w,
                              int64_t BT, int64_t Kl, int64_t D) {
    if (out != xin) floats_copy(out, xin, BT * D);
    kern_gemm(out, act, w, BT, D, Kl, false, false, Kl, D, D, 1.0f, 1.0f);
}

void model_norm_in_local(const float *x, float *h, float *rstd, const float *gain, int nw,
                         const float *const *w, const int64_t *nk, float *const *y, int64_t BT,
                         int64_t D) {
    kern_rmsnorm_fwd(h, rstd, x, gain, BT, D);
    for (int k = 0; k < nw; k++) kern_matmul(y[k], h, w[k], BT, D, nk[k]);
}

void model_sublayer_out_bwd_local(float *dact, float *dw, const float *act, const float *dout,
                                  const float *w, int64_t BT, int64_t Kl, int64_t D) {
    kern_matmul_dw(dw, act, dout, BT, Kl, D);
    kern_matmul_dx(dact, dout, w, BT, Kl, D, false);
}

/* ---------------------------------------------------------------- the table's entries */

static void extents(void *ctx, const model_shape *s, model_extents *out) {
    (void)ctx;
    model_extents_full(s, out);
}
static void slab(void *ctx, const model_shape *s, param_id id, param_slab *out) {
    (void)ctx;
    model_slab_full(s, id, out);
}
static void stage(void *ctx, const model_shape *s, int64_t *l0, int64_t *l1, int *nslots) {
    (void)ctx;
    *l0 = 0, *l1 = s->L, *nslots = 1;
}
static int has_grads(void *ctx) {
    (void)ctx;
    return 1;
}
static void on_model(void *ctx, model *m) {
    (void)ctx, (void)m;
}
static layer_w layer_weights(void *ctx, model *m, int64_t l, int dir) {
    (void)ctx, (void)dir;
    return model_layer_weights_local(m, l);
}
static void on_layer(void *ctx, model *m, int64_t l) {
    (void)ctx, (void)m, (void)l;
}
static layer_g layer_grads(void *ctx, model *m, int64_t l) {
    (void)ctx;
    return model_layer_grads_local(m, l);
}
static const float *weight(void *ctx, model *m, param_id id) {
    (void)ctx;
    return model_param(m, id, NULL);
}
static float *grad(void *ctx, model *m, param_id id) {
    (void)ctx;
    return model_grad(m, id, NULL);
}
static int sublayer_out(void *ctx, model *m, float *out, const float *xin, const float *act,
                        const float *w, int64_t BT, int64_t Kl, int defer) {
    (void)ctx, (void)defer;
    model_sublayer_out_local(out, xin, act, w, BT, Kl, model_shape_of(m)->D);
    return 0;
}
static void norm_in(void *ctx, model *m, float *x, int sharded, float *h, float *rstd,
                    const float *gain, int nw, const float *const *w, const int64_t *nk,
                    float *const *y, int64_t BT) {
    (void)ctx, (void)sharded;
    model_norm_in_local(x, h, rstd, gain, nw, w, nk, y, BT, model_shape_of(m)->D);
}
static void on_rows(void *ctx, model *m, float *x, int64_t BT) {
    (void)ctx, (void)m, (void)x, (void)BT;
}
static void gather_vocab(void *ctx, model *m, float *logits, const float *logits_loc) {
    (void)ctx;
    floats_copy(logits, logits_loc, model_extents_of(m)->Vl);
}
static void sublayer_out_bwd(void *ctx, model *m, float *dact, float *dw, float *full, float *dr,
                             const float *act, const float *w, int64_t BT, int64_t Kl) {
    (void)ctx, (void)full;
    model_sublayer_out_bwd_local(dact, dw, act, dr, w, BT, Kl, model_shape_of(m)->D);
}
static const float *resid_grad_gather(void *ctx, model *m, float *full, float *dr, int64_t BT) {
    (void)ctx, (void)m, (void)full, (void)BT;
    return dr;
}
static float *partial_begin(void *ctx, model *m, float *dr, float *part, int64_t BT) {
    (void)ctx, (void)m, (void)part, (void)BT;
    return dr;
}
static void partial_end(void *ctx, model *m, float *dr, float *part, int64_t BT) {
    (void)ctx, (void)m, (void)dr, (void)part, (void)BT;
}
static void partial_done(void *ctx, model *m, float *dr, int64_t BT) {
    (void)ctx, (void)m, (void)dr, (void)BT;
}
static void poll(void *ctx) {
    (void)ctx;
}
static void on_values(void *ctx, float *x, int64_t n) {
    (void)ctx, (void)x, (void)n;
}
static void stage_send(void *ctx, const float *x, int64_t n) {
    (void)ctx, (void)x, (void)n;
}

const model_hooks model_hooks_single = {
    .ctx = NULL,
    .extents = extents,
    .slab = slab,
    .stage = stage,
    .has_grads = has_grads,
    .ready = on_model,
    .layer_weights = layer_weights,
    .layer_release = on_layer,
    .layer_grads = layer_grads,
    .mlp_grads_done = on_layer,
    .layer_grads_done = on_layer,
    .weight = weight,
    .grad = grad,
    .head_grads_done = on_model,
    .embed_grads_done = on_model,
    .sublayer_out = sublayer_out,
    .norm_in = norm_in,
    .embed_reduce = on_rows,
    .xent_combine = on_rows,
    .gather_vocab = gather_vocab,
    .sublayer_out_bwd = sublayer_out_bwd,
    .resid_grad_gather = resid_grad_gather,
    .partial_begin = partial_begin,
    .partial_end = partial_end,
    .partial_done = partial_done,
    .poll = poll,
    .stage_recv = on_values,
    .stage_send = stage_send,
    .pipe_share_last = on_values,
};
