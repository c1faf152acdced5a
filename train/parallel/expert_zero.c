/* expert_zero: the mixture-of-experts weights over the data axes X: data parallelism and
 * ZeRO-1/2/3 (plan_expert.c's geometry: W_in[E_Z, D_X, F], W_out[E_Z, F, D_X], router[D_X, E]).
 *
 * A routed expert's copies live on the data axes without the expert axis Z (plan.erep): its
 * gradient is complete on its rank of Z (every row sent to it, each already scaled for the
 * global batch's mean) and is summed over those axes only; the router's and the shared
 * experts' are replicated like the dense weights and summed over every data axis.
 *   --zero 0: AllReduce of the gradients once per step (after the backwards);
 *   --zero 1: ReduceScatter into this rank's shard once per step; the optimizer updates the
 *     shard (its state sharded), then AllGather back into the whole weight;
 *   --zero 2: the same, but each MoE block's gradient lives in a transient buffer and is
 *     reduce-scattered into the shard as soon as the block's backward is done, every micro-batch;
 *   --zero 3: the model stores the shards; a MoE block's weights are AllGathered just before
 *     the block runs (forward and backward), its gradients reduce-scattered as under ZeRO-2.
 *     With --compute-dtype bf16 the experts' (routed and shared) move and are held in bf16, the
 *     copy the model multiplies: each shard rounded at send (gather_block_b); the router fp32.
 * A shard is the D rows (or columns) [j·D/n, (j+1)·D/n) of each of the block's matrices;
 * collectives move shards packed one after another (shard_move). The MoE block's collectives
 * are blocking: no prefetch, no overlap with the dense ones in flight. */
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/optim.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

static int64_t shard_off(const struct par *p, param_id id) {
    return p->pl->shard_total + p->pl->moe_shard_off[id - P_COUNT];
}

/* Shards j0 .. j1−1 of a block between its packed form (shard after shard, each its matrices'
 * rows or column pieces in order) and the whole block whole[ne][R][C]. to_packed: whole → packed.
 */
static void shard_move(const plan_moe_geo *g, int64_t j0, int64_t j1, float *packed, float *whole,
                       int to_packed) {
    const int64_t pieces = g->zdim ? g->R : 1;
    const int64_t len = g->zdim ? g->C / g->n : g->R * g->C / g->n;
    float *at = packed;
    for (int64_t j = j0; j < j1; j++)
        for (int64_t e = 0; e < g->ne; e++)
            for (int64_t r = 0; r < pieces; r++, at += len) {
                float *w = whole + e * g->R * g->C + r * g->C + j * len;
                if (to_packed)
                    floats_copy(at, w, len);
                else
                    floats_copy(w, at, len);
            }
}

/* whole[block] = the AllGather of the shards src (ns elements per rank) of parameter id. */
static void gather_block(struct par *p, param_id id, float *whole, const float *src) {
    const plan_moe_geo g = plan_moe_geo_of(p->pl, id);
    const int64_t n = plan_moe_block(&g);
    if (n == 0) return; /* (no shared experts) */
    if (g.n == 1) {
        floats_copy(whole, src, n);
        return;
    }
    const plan_coll k = plan_is_routed(id) ? PLAN_EP_GATHER : PLAN_MOE_GATHER;
    par_run(p, k, p->ep.pack, src, n / g.n);
    shard_move(&g, 0, g.n, p->ep.pack, whole, 0);
}

/* whole[block] in bf16: the AllGather of the shards src (ns elements per rank) of parameter id,
 * each rounded to bf16 at send (an odd ns padded to even on the wire: the gather's parts are ns2
 * apart), then placed as gather_block places them. */
static void gather_block_b(struct par *p, param_id id, uint16_t *whole, const float *src) {
    const plan_moe_geo g = plan_moe_geo_of(p->pl, id);
    const int64_t n = plan_moe_block(&g), ns = n / g.n, ns2 = (ns + 1) / 2 * 2;
    const int data = !mesh_no_data(ns * 2); /* (a dry run moves no data) */
    if (n == 0) return;                     /* (no shared experts) */
    if (g.n == 1) {
        if (data) kern_bf16_pack(whole, src, n);
        return;
    }
    uint16_t *all = (uint16_t *)(void *)p->ep.pack, *send = (uint16_t *)(void *)(p->ep.pack + n);
    if (data) kern_bf16_pack(send, src, ns);
    if (data && ns2 > ns) send[ns] = 0;
    par_run_b(p, plan_is_routed(id) ? PLAN_EP_GATHER : PLAN_MOE_GATHER, all, send, ns2);
    if (!data) return;
    const int64_t pieces = g.zdim ? g.R : 1;
    const int64_t len = g.zdim ? g.C / g.n : g.R * g.C / g.n;
    for (int64_t j = 0; j < g.n; j++) { /* shard j: its experts' rows or column pieces */
        const uint16_t *at = all + j * ns2;
        for (int64_t e = 0; e < g.ne; e++)
            for (int64_t r = 0; r < pieces; r++, at += len)
                memcpy(whole + e * g.R * g.C + r * g.C + j * len, at, (size_t)len * sizeof *at);
    }
}

/* shard (+=, or =) this rank's part of the sum over the shard's axes of whole[block]. */
static void reduce_block(struct par *p, param_id id, float *shard, float *whole, int add) {
    const plan_moe_geo g = plan_moe_geo_of(p->pl, id);
    const int64_t n = plan_moe_block(&g), ns = n / g.n;
    if (n == 0) return; /* (no shared experts) */
    float *res = whole;
    if (g.n > 1) {
        shard_move(&g, 0, g.n, p->ep.pack, whole, 1);
        res = p->ep.pack + n;
        par_run(p, plan_is_routed(id) ? PLAN_EP_REDUCE : PLAN_MOE_REDUCE, res, p->ep.pack, ns);
    }
    if (add)
        kern_add(shard, res, ns);
    else
        floats_copy(shard, res, ns);
}

static float *block_of(float *base, const struct par *p, param_id id, int64_t lm, int shard) {
    const plan_moe_geo g = plan_moe_geo_of(p->pl, id);
    return base + lm * plan_moe_block(&g) / (shard ? g.n : 1);
}

/* The MoE block's parameters in a buffer of moe_layer_elems, one after another in id order; b16
 * (ZeRO-3's gathered weights in bf16): the experts' in 2-byte elements (plan_moe_gathered). */
static void layer_ptrs(const struct par *p, float *buf, float **out, int b16) {
    for (int id = P_COUNT; id < P_ALL; id++) {
        out[id - P_COUNT] = buf;
        const plan_moe_geo g = plan_moe_geo_of(p->pl, (param_id)id);
        buf += b16 && id != P_ROUTER ? (plan_moe_block(&g) + 1) / 2 : plan_moe_block(&g);
    }
}

void ep_layer_weights(struct par *p, model *mod, int64_t l, layer_w *w) {
    const int64_t lm = model_layer_stack_index(&p->pl->s, l) - p->pl->moe0; /* the stage's */
    const int b16 = plan_z3_bf16(p->pl); /* the experts gathered in bf16 (the router: fp32) */
    float *b[P_ALL - P_COUNT];
    layer_ptrs(p, p->ep.gathered, b, b16);
    for (int id = P_COUNT; id < P_ALL && p->ep.gathered_lm != lm; id++) {
        const float *src = block_of(model_param(mod, (param_id)id, NULL), p, (param_id)id, lm, 1);
        if (b16 && id != P_ROUTER)
            gather_block_b(p, (param_id)id, (uint16_t *)(void *)b[id - P_COUNT], src);
        else
            gather_block(p, (param_id)id, b[id - P_COUNT], src);
    }
    p->ep.gathered_lm = lm;
    w->w_gate = w->w_up = w->w_down = NULL;
    w->b16[4] = w->b16[5] = w->b16[6] = NULL;
    w->router = b[0];
    if (b16) { /* layer_w.b16's e_gate, e_up, e_down, s_gate, s_up, s_down */
        for (int i = 0; i < 6; i++) w->b16[7 + i] = (const uint16_t *)(const void *)b[1 + i];
        return;
    }
    w->e_gate = b[1], w->e_up = b[2], w->e_down = b[3];
    w->s_gate = b[4], w->s_up = b[5], w->s_down = b[6];
}

void ep_layer_grads(struct par *p, layer_g *g) {
    float *b[P_ALL - P_COUNT];
    floats_clear(p->ep.lgrads, p->pl->moe_layer_elems);
    layer_ptrs(p, p->ep.lgrads, b, 0);
    g->w_gate = g->w_up = g->w_down = NULL;
    g->router = b[0], g->e_gate = b[1], g->e_up = b[2], g->e_down = b[3];
    g->s_gate = b[4], g->s_up = b[5], g->s_down = b[6];
}

void ep_mlp_grads_done(struct par *p, int64_t l) {
    if (p->pl->zero < 2 || !model_layer_is_moe(&p->pl->s, l)) return;
    const int64_t lm = model_layer_stack_index(&p->pl->s, l) - p->pl->moe0; /* the stage's */
    float *b[P_ALL - P_COUNT];
    layer_ptrs(p, p->ep.lgrads, b, 0);
    for (int id = P_COUNT; id < P_ALL; id++)
        reduce_block(p, (param_id)id, block_of(p->shard_grads + shard_off(p, id), p, id, lm, 1),
                     b[id - P_COUNT], 1);
}

void ep_reduce_grads(struct par *p, model *mod) {
    const plan *pl = p->pl; /* (the context axis is a data axis of its own, not the batch's) */
    if (pl->s.moe.E == 0 || (pl->batch.n == 1 && pl->cp.n == 1) || pl->zero >= 2) return;
    const int64_t Lm = p->pl->moe_n; /* the stage's MoE blocks */
    for (int id = P_COUNT; id < P_ALL; id++) {
        int64_t n;
        float *gr = model_grad(mod, (param_id)id, &n);
        const int routed = plan_is_routed((param_id)id);
        if (n == 0) continue;
        if (p->pl->zero == 1) { /* into the shards, once per step */
            for (int64_t lm = 0; lm < Lm; lm++)
                reduce_block(p, (param_id)id,
                             block_of(p->shard_grads + shard_off(p, id), p, id, lm, 1),
                             block_of(gr, p, id, lm, 0), 0);
        } else {
            if (p->pl->data.n > 1 && (!routed || p->pl->erep.n > 1))
                par_run(p, routed ? PLAN_EP_DP_REDUCE : PLAN_MOE_DP_REDUCE, gr, gr, n);
            if (p->pl->dcn.n > 1) par_run(p, PLAN_DCN_REDUCE, gr, gr, n); /* the other pods */
        }
    }
}

/* a ∪ b (distinct axes). */
static mesh_axes axes_with(mesh_axes a, mesh_axes b) {
    for (int k = 0; k < b.n; k++) a.ax[a.n++] = b.ax[k];
    return a;
}

double ep_grad_sumsq(struct par *p, model *mod) {
    if (p->pl->s.moe.E == 0) return 0.0;
    /* the router is the same on every rank of Y (counted once), the experts' F_e split over Y;
     * each pipeline stage holds its own blocks */
    const mesh_axes z = p->pl->pipe.axes, yz = axes_with(p->pl->tensor.axes, z);
    if (p->pl->zero > 0) { /* the shards: each element on one rank of the ICI data axes */
        const float *sh = p->shard_grads + p->pl->shard_total;
        const int64_t nr = p->pl->moe_shard_off[P_ROUTER + 1 - P_COUNT];
        return par_allsum(p, axes_with(p->pl->data.axes, z), kern_sumsq(sh, nr)) +
               par_allsum(p, axes_with(p->pl->data.axes, yz),
                          kern_sumsq(sh + nr, p->pl->moe_shard_total - nr));
    }
    double s[3] = {0.0, 0.0, 0.0}; /* the router, shared experts, routed experts */
    for (int id = P_COUNT; id < P_ALL; id++) {
        int64_t n;
        const float *g = model_grad(mod, (param_id)id, &n);
        s[id == P_ROUTER ? 0 : plan_is_routed((param_id)id) ? 2 : 1] += kern_sumsq(g, n);
    }
    return par_allsum(p, z, s[0]) + par_allsum(p, yz, s[1]) +
           par_allsum(p, axes_with(p->pl->expert.axes, yz), s[2]);
}

par_owned ep_owned_slice(struct par *p, model *mod, param_id id) {
    const plan_moe_geo g = plan_moe_geo_of(p->pl, id);
    const int64_t Lm = p->pl->moe_n, ns = plan_moe_block(&g) / g.n;
    const int64_t off = shard_off(p, id);
    float *w = model_param(mod, id, NULL); /* ZeRO-3: the model's own shards */
    if (p->pl->zero <= 2) {                /* ZeRO-1/2: this rank's shards of the whole weight */
        w = p->ep.update;
        for (int64_t lm = 0; lm < Lm; lm++)
            shard_move(&g, g.j, g.j + 1, w + lm * ns,
                       block_of(model_param(mod, id, NULL), p, id, lm, 0), 1);
    }
    return (par_owned){w, p->shard_grads + off, Lm * ns, off};
}

void ep_owned_done(struct par *p, model *mod, param_id id) {
    if (p->pl->zero == 0 || p->pl->zero == 3) return;
    const int64_t Lm = p->pl->moe_n; /* the stage's MoE blocks */
    for (int64_t lm = 0; lm < Lm; lm++)
        gather_block(p, id, block_of(model_param(mod, id, NULL), p, id, lm, 0),
                     block_of(p->ep.update, p, id, lm, 1));
}

int ep_is_writer(const struct par *p, param_id id, int kind) {
    if (p->pl->dcn.n > 1 && p->pl->dcn.index != 0) return 0; /* replicated over DCN */
    if (id == P_ROUTER && p->pl->tensor.index != 0) return 0; /* replicated over Y */
    /* sharded over the data axes: the weights under ZeRO-3, the state under ZeRO */
    if (kind == 0 ? p->pl->zero == 3 : p->pl->zero > 0) return 1;
    /* (the ICI data axes, the context axis among them: DCN's replicas are out above) */
    if (!plan_is_routed(id)) return p->pl->data.index == 0;
    return p->pl->erep.index == 0;
}
