/* par: the model hooks of a sharded run (see par_plan.c for the layout). Every hook accepts
 * p == NULL, the single-rank run.
 *
 * Tensor axis Y (Megatron, critical path, blocking):
 *   forward  Out[B, D]{U_Y} → ReduceScatter_Y → Out[B, D_Y] (+ residual) → AllGather_Y → In[B, D]
 *   backward dOut: AllGather_Y of the residual gradient; dIn[B, D]{U_Y} → ReduceScatter_Y.
 *   Vocabulary: embedding rows of other shards are 0, so one AllReduce_Y sums them exactly; the
 *   cross-entropy combines (max, Σexp, target) per row over Y, no rank holds all logits.
 * Data axes X (ZeRO-3 weights): AllGather_X of a layer's shards just in time (prefetched with
 *   --overlap). Gradients: see par_step.c. */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/optim.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- ZeRO-3 weight gathers */

/* Starts (or runs) the gathers of layer l's shards into slot k. */
static void gather_layer_start(struct par *p, int64_t l, int k, int async) {
    for (int id = 0; id < P_COUNT; id++) {
        if (!par_is_layer_param((param_id)id)) continue;
        const pgeo *g = &p->g[id];
        const int64_t cnt = pgeo_block(g) / p->nX;
        const float *src = p->sh_p + p->sh_off[id] + (l - p->l0) * cnt;
        float *dst = par_layer_slot(p, g->zdim ? p->wstage[k] : p->wbuf[k], (param_id)id);
        if (async)
            p->wreq[k][id] = mesh_iall_gather(p->m, p->dax, dst, src, cnt, p->alg);
        else
            mesh_all_gather(p->m, p->dax, dst, src, cnt, p->alg);
    }
    p->wlayer[k] = l;
}

static void gather_layer_finish(struct par *p, int k) {
    for (int id = 0; id < P_COUNT; id++) {
        mesh_wait(p->wreq[k][id]);
        p->wreq[k][id] = NULL;
    }
    for (int id = 0; id < P_COUNT; id++) {
        const pgeo *g = &p->g[id];
        if (!par_is_layer_param((param_id)id) || !g->zdim) continue;
        par_unpack_cols(par_layer_slot(p, p->wbuf[k], (param_id)id),
                        par_layer_slot(p, p->wstage[k], (param_id)id), g->R, g->C, p->nX);
    }
}

layer_w mpar_layer_weights(struct par *p, model *m, int64_t l, int dir) {
    if (!p || p->zero < 3) return mpar_layer_weights_local(m, l);
    const int k = (int)(l % 2);
    if (p->wlayer[k] != l) {
        for (int id = 0; id < P_COUNT; id++) mesh_wait(p->wreq[k][id]), p->wreq[k][id] = NULL;
        gather_layer_start(p, l, k, 0);
        gather_layer_finish(p, k);
    } else if (p->wpending[k]) {
        gather_layer_finish(p, k);
    }
    p->wpending[k] = 0;
    const int64_t next = l + dir;
    if (p->overlap && next >= p->l0 && next < p->l1 && p->wlayer[1 - k] != next)
        gather_layer_start(p, next, 1 - k, 1), p->wpending[1 - k] = 1;
    layer_w w;
    const float *b = p->wbuf[k];
    w.attn_norm = par_layer_slot(p, (float *)b, P_ATTN_NORM);
    w.wq = par_layer_slot(p, (float *)b, P_WQ);
    w.wk = par_layer_slot(p, (float *)b, P_WK);
    w.wv = par_layer_slot(p, (float *)b, P_WV);
    w.wo = par_layer_slot(p, (float *)b, P_WO);
    w.mlp_norm = par_layer_slot(p, (float *)b, P_MLP_NORM);
    w.w_gate = par_layer_slot(p, (float *)b, P_W_GATE);
    w.w_up = par_layer_slot(p, (float *)b, P_W_UP);
    w.w_down = par_layer_slot(p, (float *)b, P_W_DOWN);
    return w;
}

void mpar_layer_release(struct par *p, model *m, int64_t l) {
    (void)p, (void)m, (void)l; /* slots are recycled two layers later */
}

static float *nonlayer_buf(struct par *p, param_id id) {
    return id == P_EMBED ? p->ebuf : id == P_FINAL_NORM ? p->hbuf_norm : p->hbuf_un;
}

const float *mpar_weight(struct par *p, model *m, param_id id) {
    if (!p || p->zero < 3) return model_param(m, id, NULL);
    float *dst = nonlayer_buf(p, id);
    const pgeo *g = &p->g[id];
    const int64_t cnt = pgeo_block(g) / p->nX;
    const float *src = p->sh_p + p->sh_off[id];
    if (g->zdim) {
        mesh_all_gather(p->m, p->dax, p->pack, src, cnt, p->alg);
        par_unpack_cols(dst, p->pack, g->R, g->C, p->nX);
    } else {
        mesh_all_gather(p->m, p->dax, dst, src, cnt, p->alg);
    }
    return dst;
}

/* ---------------------------------------------------------------- gradient slots */

layer_g mpar_layer_grads(struct par *p, model *m, int64_t l) {
    if (!p || p->zero < 2) return mpar_layer_grads_local(m, l);
    const int k = (int)(l % 2);
    par_drain_upto(p, p->slot_pend[k]); /* the slot's previous reductions must be complete */
    float *b = p->gbuf[k];
    memset(b, 0, (size_t)p->layer_elems * sizeof(float));
    layer_g g;
    g.attn_norm = par_layer_slot(p, b, P_ATTN_NORM);
    g.wq = par_layer_slot(p, b, P_WQ);
    g.wk = par_layer_slot(p, b, P_WK);
    g.wv = par_layer_slot(p, b, P_WV);
    g.wo = par_layer_slot(p, b, P_WO);
    g.mlp_norm = par_layer_slot(p, b, P_MLP_NORM);
    g.w_gate = par_layer_slot(p, b, P_W_GATE);
    g.w_up = par_layer_slot(p, b, P_W_UP);
    g.w_down = par_layer_slot(p, b, P_W_DOWN);
    return g;
}

float *mpar_grad(struct par *p, model *m, param_id id) {
    if (!p || p->zero < 2) return model_grad(m, id, NULL);
    return p->ngbuf[id];
}

/* ---------------------------------------------------------------- tensor axis */

void mpar_sublayer_out(struct par *p, model *m, float *out, const float *xin, const float *act,
                       const float *w, int64_t BT, int64_t Kl) {
    const int64_t D = model_shape_of(m)->D;
    if (!p || p->nY == 1) {
        mpar_sublayer_out_local(out, xin, act, w, BT, Kl, D);
        return;
    }
    const int64_t Dl = p->loc.Dl, d0 = p->loc.d0;
    kern_gemm(p->tp_a, act, w, BT, D, Kl, false, false, Kl, D, D, 1.0f, 0.0f);
    par_pack_cols(p->tp_b, p->tp_a, BT, D, p->nY);
    mesh_reduce_scatter(p->m, p->tax, p->tp_a, p->tp_b, BT * Dl, p->alg);
    for (int64_t r = 0; r < BT; r++) kern_add(p->tp_a + r * Dl, xin + r * D + d0, Dl);
    mesh_all_gather(p->m, p->tax, p->tp_b, p->tp_a, BT * Dl, p->alg);
    par_unpack_cols(out, p->tp_b, BT, D, p->nY);
}

void mpar_embed_reduce(struct par *p, model *m, float *x, int64_t BT) {
    if (!p || p->nY == 1) return;
    mesh_all_reduce(p->m, p->tax, x, x, BT * model_shape_of(m)->D, p->alg);
}

void mpar_xent_combine(struct par *p, model *m, float *st, int64_t BT) {
    (void)m;
    if (!p || p->nY == 1) return;
    float *all = p->tp_a; /* [nY][3][BT] */
    mesh_all_gather(p->m, p->tax, all, st, 3 * BT, p->alg);
    for (int64_t i = 0; i < BT; i++) {
        float mx = -INFINITY;
        for (int64_t s = 0; s < p->nY; s++) mx = fmaxf(mx, all[s * 3 * BT + i]);
        double z = 0.0, t = 0.0;
        for (int64_t s = 0; s < p->nY; s++) {
            const float *a = all + s * 3 * BT;
            z += (double)a[BT + i] * exp((double)a[i] - (double)mx);
            t += (double)a[2 * BT + i];
        }
        st[i] = mx;
        st[BT + i] = (float)z;
        st[2 * BT + i] = (float)t;
    }
}

void mpar_gather_vocab(struct par *p, model *m, float *logits, const float *logits_loc) {
    const int64_t Vl = model_local(m)->Vl;
    if (!p || p->nY == 1) {
        memcpy(logits, logits_loc, (size_t)Vl * sizeof(float));
        return;
    }
    mesh_all_gather(p->m, p->tax, logits, logits_loc, Vl, p->alg);
}

const float *mpar_resid_grad_gather(struct par *p, model *m, float *full, float *dr, int64_t BT) {
    if (!p || p->nY == 1) return dr;
    const int64_t D = model_shape_of(m)->D, Dl = p->loc.Dl;
    mesh_all_gather(p->m, p->tax, p->tp_b, dr, BT * Dl, p->alg);
    par_unpack_cols(full, p->tp_b, BT, D, p->nY);
    return full;
}

float *mpar_partial_begin(struct par *p, model *m, float *dr, float *part, int64_t BT) {
    if (!p || p->nY == 1) return dr;
    memset(part, 0, (size_t)(BT * model_shape_of(m)->D) * sizeof(float));
    return part;
}

void mpar_partial_end(struct par *p, model *m, float *dr, float *part, int64_t BT) {
    if (!p || p->nY == 1) return;
    const int64_t D = model_shape_of(m)->D, Dl = p->loc.Dl;
    par_pack_cols(p->tp_b, part, BT, D, p->nY);
    mesh_reduce_scatter(p->m, p->tax, p->tp_a, p->tp_b, BT * Dl, p->alg);
    kern_add(dr, p->tp_a, BT * Dl);
}

/* ---------------------------------------------------------------- pipeline axis */

void mpar_stage_recv(struct par *p, float *x, int64_t n) {
    if (p && p->nZ > 1) mesh_recv(p->m, p->pax.ax[0], -1, x, n);
}

void mpar_stage_send(struct par *p, const float *x, int64_t n) {
    if (p && p->nZ > 1) mesh_p2p_wait(mesh_isend(p->m, p->pax.ax[0], +1, x, n));
}

void mpar_pipe_share_last(struct par *p, float *x, int64_t n) {
    if (p && p->nZ > 1) mesh_all_reduce(p->m, p->pax, x, x, n, p->alg);
}
