/* layout: the geometry of every parameter on this rank (local extents, TP slabs, ZeRO shards, the
 * column packing collectives need), pure arithmetic on the plan's axis sizes and indices.
 *
 * How it works (the book's notation, X = the data axes, Y = the tensor axis):
 *   embed[V_Y, D_X]  attn_norm[L, D_X]  wq[L, D_X, (N·H)_Y]  wk,wv[L, D_X, (K·H)_Y]
 *   wo[L, (N·H)_Y, D_X]  w_gate,w_up[L, D_X, F_Y]  w_down[L, F_Y, D_X]  final_norm[D_X]
 *   unembed[D_X, V_Y]
 * The _Y subscripts are Megatron tensor sharding (heads, d_ff, vocabulary); when there are fewer
 * kv heads than |Y|, each kv head is replicated over the |Y|/K tensor ranks whose query heads
 * use it. The _X subscripts apply to the weights only with --zero 3 (FSDP); with --zero 1/2 they
 * describe the optimizer-state (and gradient) shards; with --zero 0 everything is replicated over
 * X (pure data parallelism). The batch is always sharded over X: In[B_X, D_Y]. */
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

int par_is_layer_param(param_id id) {
    return id != P_EMBED && id != P_FINAL_NORM && id != P_UNEMBED;
}

void par_pack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n) {
    const int64_t c = C / n;
    if (mesh_no_data(R * C * (int64_t)sizeof(float))) return;
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < R; r++) floats_copy(dst + (j * R + r) * c, src + r * C + j * c, c);
}

void par_unpack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n) {
    const int64_t c = C / n;
    if (mesh_no_data(R * C * (int64_t)sizeof(float))) return;
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < R; r++) floats_copy(dst + r * C + j * c, src + (j * R + r) * c, c);
}

float *par_layer_slot(struct par *p, float *buf, param_id id) {
    int64_t off = 0;
    for (int j = 0; j < (int)id; j++)
        if (par_is_layer_param((param_id)j)) off += pgeo_block(&p->g[j]);
    return buf + off;
}

void par_layout_extents(struct par *p) {
    const model_shape *s = &p->s;
    model_extents *lc = &p->loc;
    const int64_t n_tensor = p->n_tensor, y = p->tensor_index;
    lc->Nl = s->N / n_tensor;
    lc->n0 = y * lc->Nl;
    if (s->K >= n_tensor) {
        lc->Kl = s->K / n_tensor;
        lc->k0 = y * lc->Kl;
    } else {
        lc->Kl = 1;
        lc->k0 = lc->n0 / (s->N / s->K);
    }
    lc->Fl = s->F / n_tensor;
    lc->f0 = y * lc->Fl;
    lc->Vl = s->V / n_tensor;
    lc->v0 = y * lc->Vl;
    lc->Dl = s->D / n_tensor;
    lc->d0 = y * lc->Dl;
}

void par_layout_geometry(struct par *p) {
    const model_shape *s = &p->s;
    const model_extents *lc = &p->loc;
    const int64_t H = s->H;
    for (int id = 0; id < P_COUNT; id++) {
        param_info pi = model_param_info(s, (param_id)id);
        pgeo *g = &p->g[id];
        memset(g, 0, sizeof *g);
        g->stacked = par_is_layer_param((param_id)id);
        g->nb = g->stacked ? p->l1 - p->l0 : 1;
        if ((id == P_EMBED && p->l0 != 0) ||
            ((id == P_FINAL_NORM || id == P_UNEMBED) && p->l1 != s->L))
            g->nb = 0; /* held by another pipeline stage */
        if (pi.ndim == 3)
            g->Rg = pi.shape[1], g->Cg = pi.shape[2];
        else if (pi.ndim == 2 && g->stacked)
            g->Rg = 1, g->Cg = pi.shape[1];
        else if (pi.ndim == 2)
            g->Rg = pi.shape[0], g->Cg = pi.shape[1];
        else
            g->Rg = 1, g->Cg = pi.shape[0];
        g->R = g->Rg, g->C = g->Cg;
        switch ((param_id)id) {
        case P_EMBED:
            g->R = lc->Vl, g->r0 = lc->v0, g->zdim = 1;
            break;
        case P_WQ:
            g->C = lc->Nl * H, g->c0 = lc->n0 * H;
            break;
        case P_WK:
        case P_WV:
            g->C = lc->Kl * H, g->c0 = lc->k0 * H;
            g->kv_group = s->K < p->n_tensor;
            break;
        case P_WO:
            g->R = lc->Nl * H, g->r0 = lc->n0 * H, g->zdim = 1;
            break;
        case P_W_GATE:
        case P_W_UP:
            g->C = lc->Fl, g->c0 = lc->f0;
            break;
        case P_W_DOWN:
            g->R = lc->Fl, g->r0 = lc->f0, g->zdim = 1;
            break;
        case P_UNEMBED:
            g->C = lc->Vl, g->c0 = lc->v0;
            break;
        default: /* norm gains: replicated over the tensor axis */
            g->repl = p->n_tensor > 1, g->zdim = 1;
            break;
        }
        g->shard_n = p->zero >= 1 ? g->nb * pgeo_block(g) / p->n_data : 0;
    }
}

/* Block-local rectangle → the parameter's native (global) slab. */
static param_slab native_slab(const struct par *p, param_id id, int64_t ra, int64_t rn, int64_t ca,
                              int64_t cn) {
    const pgeo *g = &p->g[id];
    param_info pi = model_param_info(&p->s, id);
    if (pi.ndim == 3) return (param_slab){{p->l0, ra, ca}, {g->nb, rn, cn}};
    if (g->stacked) return (param_slab){{p->l0, ca, 0}, {g->nb, cn, 1}};
    if (g->nb == 0) return (param_slab){{0, 0, 0}, {0, 0, 0}};
    if (pi.ndim == 2) return (param_slab){{ra, ca, 0}, {rn, cn, 1}};
    return (param_slab){{ca, 0, 0}, {cn, 1, 1}};
}

param_slab par_tp_slab(const struct par *p, param_id id) {
    const pgeo *g = &p->g[id];
    return native_slab(p, id, g->r0, g->R, g->c0, g->C);
}

param_slab par_shard_slab(const struct par *p, param_id id) {
    const pgeo *g = &p->g[id];
    if (g->zdim == 0) {
        int64_t rn = g->R / p->n_data;
        return native_slab(p, id, g->r0 + p->data_index * rn, rn, g->c0, g->C);
    }
    int64_t cn = g->C / p->n_data;
    return native_slab(p, id, g->r0, g->R, g->c0 + p->data_index * cn, cn);
}

void par_hk_extents(void *ctx, const model_shape *s, model_extents *out) {
    struct par *p = ctx;
    (void)s;
    *out = p->loc;
}

void par_hk_slab(void *ctx, const model_shape *s, param_id id, param_slab *out) {
    struct par *p = ctx;
    (void)s;
    *out = p->zero == 3 ? par_shard_slab(p, id) : par_tp_slab(p, id);
}

int par_hk_has_grads(void *ctx) {
    struct par *p = ctx;
    return p->zero <= 1;
}

void par_hk_stage(void *ctx, const model_shape *s, int64_t *l0, int64_t *l1, int *nslots) {
    struct par *p = ctx;
    (void)s;
    *l0 = p->l0, *l1 = p->l1, *nslots = p->nslots;
}
