/* The single-rank (no plan) side of the model hooks: local extents equal the global ones, every
 * slab is the whole tensor, and communication points reduce to copies and adds. par.c routes to
 * these when a run has no sharding. */
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/optim.h"
#include "train/model/hooks.h"

void mpar_local_full(const model_shape *s, par_local *o) {
    *o = (par_local){.Nl = s->N, .Kl = s->K, .Fl = s->F, .Vl = s->V, .Dl = s->D};
}

void mpar_slab_full(const model_shape *s, param_id id, param_slab *o) {
    param_info pi = model_param_info(s, id);
    *o = (param_slab){{0, 0, 0}, {pi.shape[0], pi.shape[1], pi.shape[2]}};
}

/* Pointer to layer l's block of a parameter stacked over layers, in local storage. */
static float *stacked(float *base, const param_slab *sl, int64_t l) {
    return base + (l - sl->off[0]) * sl->cnt[1] * sl->cnt[2];
}

layer_w mpar_layer_weights_local(model *m, int64_t l) {
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

layer_g mpar_layer_grads_local(model *m, int64_t l) {
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

void mpar_sublayer_out_local(float *out, const float *xin, const float *act, const float *w,
                             int64_t BT, int64_t Kl, int64_t D) {
    if (out != xin) memcpy(out, xin, (size_t)(BT * D) * sizeof(float));
    kern_gemm(out, act, w, BT, D, Kl, false, false, Kl, D, D, 1.0f, 1.0f);
}
