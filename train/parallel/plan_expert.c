/* plan_expert: the expert axis Z's part of the sharding plan (plan.h). The routed experts of
 * every MoE block are sharded over Z, this rank holding experts [e0, e0 + E/|Z|) of each
 * (W_in[E_Z, D, F]); the router and the shared experts are replicated, as the dense weights are
 * under data parallelism. With a tensor axis Y every expert's width is sharded as a dense MLP's
 * (W_in[E_Z, D, F_Y], W_out[E_Z, F_Y, D], Megatron), the router replicated over Y. The tokens of the |Z| data shards of the axis may all reach one rank's
 * experts, so the rows its experts take are sized for |Z| shards (dropless: any routing).
 *
 * Under ZeRO the MoE weights are sharded over the data axes as the book writes them,
 * W_in[E_Z, D_X, F] and W_out[E_Z, F, D_X] (router[D_X, E], shared[S, D_X, F]): a routed
 * expert's copies live on the data axes without Z (plan.erep), so its shards are over those;
 * the router's and the shared experts' over every data axis. ZeRO-1 shards their optimizer
 * state, ZeRO-2 their gradients too, ZeRO-3 the weights (gathered before use). */
#include "train/parallel/plan.h"

int plan_is_routed(param_id id) {
    return id == P_EXP_GATE || id == P_EXP_UP || id == P_EXP_DOWN;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

void plan_expert_extents(plan *p) {
    model_extents *lc = &p->loc;
    p->moe0 = p->moe_n = p->mlp0 = p->mlp_n = 0; /* the stage's blocks of either kind */
    for (int64_t l = 0; l < p->l1 && p->s.moe.E > 0; l++) {
        const int moe = model_layer_is_moe(&p->s, l);
        *(l < p->l0 ? moe ? &p->moe0 : &p->mlp0 : moe ? &p->moe_n : &p->mlp_n) += 1;
    }
    const int64_t nz = p->expert.n > 0 ? p->expert.n : 1;
    lc->ep_n = nz;
    lc->El = p->s.moe.E / nz;
    lc->e0 = p->expert.index * lc->El;
}

plan_moe_geo plan_moe_geo_of(const plan *p, param_id id) {
    const model_shape *s = &p->s;
    const param_info pi = model_param_info(s, id);
    plan_moe_geo g = {0, 0, 0, 1, 0, 0};
    if (id == P_ROUTER) {
        g.ne = 1, g.R = pi.shape[1], g.C = pi.shape[2];
    } else { /* an expert's F_e: this rank's F_e/|Y| */
        g.ne = plan_is_routed(id) ? p->loc.El : pi.shape[1];
        g.zdim = id == P_EXP_DOWN || id == P_SHR_DOWN;
        g.R = g.zdim ? p->loc.Fel : pi.shape[2], g.C = g.zdim ? pi.shape[3] : p->loc.Fel;
    }
    if (p->zero > 0) {
        const plan_axes *a = plan_is_routed(id) ? &p->erep : &p->data;
        g.n = a->n, g.j = a->index;
    }
    return g;
}

/* The whole block's slab on this rank: its routed experts E_Z, the experts' F_e over Y. */
static param_slab moe_tp_slab(const plan *p, param_id id) {
    param_slab sl;
    model_slab_full(&p->s, id, &sl);
    sl.off[0] = p->moe0, sl.cnt[0] = p->moe_n; /* the pipeline stage's MoE blocks */
    if (plan_is_routed(id)) sl.off[1] = p->loc.e0, sl.cnt[1] = p->loc.El;
    if (id != P_ROUTER) {
        const int f = id == P_EXP_DOWN || id == P_SHR_DOWN ? 2 : 3; /* the F_e dimension */
        sl.off[f] = p->loc.fe0, sl.cnt[f] = p->loc.Fel;
    }
    return sl;
}

param_slab plan_moe_slab(const plan *p, param_id id) {
    if (p->zero == 3) return plan_moe_shard_slab(p, id);
    return moe_tp_slab(p, id);
}

param_slab plan_moe_shard_slab(const plan *p, param_id id) {
    param_slab sl = moe_tp_slab(p, id);
    const plan_moe_geo g = plan_moe_geo_of(p, id);
    const int d = (id == P_ROUTER ? 1 : 2) + g.zdim; /* the D dimension */
    sl.cnt[d] /= g.n;
    sl.off[d] = g.j * sl.cnt[d];
    return sl;
}

int64_t plan_moe_elems(const plan *p, param_id id) {
    const plan_moe_geo g = plan_moe_geo_of(p, id);
    const int64_t n = p->moe_n * plan_moe_block(&g);
    return p->zero == 3 ? n / g.n : n;
}

int64_t plan_block_index(const plan *p, param_id id, int64_t l) {
    const int mlp = id == P_W_GATE || id == P_W_UP || id == P_W_DOWN;
    if (!mlp || p->s.moe.E == 0) return l - p->l0;
    return model_layer_is_moe(&p->s, l) ? -1 : model_layer_stack_index(&p->s, l) - p->mlp0;
}

void plan_expert_shards(plan *p) {
    const int64_t Lm = p->moe_n;
    p->moe_shard_total = p->moe_layer_elems = 0;
    for (int id = P_COUNT; id < model_param_ids(&p->s); id++) {
        const plan_moe_geo g = plan_moe_geo_of(p, (param_id)id);
        p->moe_shard_off[id - P_COUNT] = p->moe_shard_total;
        if (p->zero > 0) p->moe_shard_total += Lm * plan_moe_block(&g) / g.n;
        p->moe_layer_elems += plan_moe_block(&g);
    }
}

int64_t plan_moe_gathered(const plan *p) {
    if (!plan_z3_bf16(p)) return p->moe_layer_elems;
    int64_t n = 0; /* the router fp32, the experts' blocks in bf16, two to a float */
    for (int id = P_COUNT; id < P_ALL; id++) {
        const plan_moe_geo g = plan_moe_geo_of(p, (param_id)id);
        n += id == P_ROUTER ? plan_moe_block(&g) : (plan_moe_block(&g) + 1) / 2;
    }
    return n;
}

void plan_expert_bufs(const plan *p, plan_ep_bufs *b) {
    const int64_t nz = p->loc.ep_n, Lm = model_moe_layers(&p->s);
    *b = (plan_ep_bufs){0, 0, 0, 0, 0, 0};
    if (p->s.moe.E == 0 || (p->batch.n == 1 && p->pipe.n == 1 && p->cp.n == 1)) return;
    /* int64 counts as pairs of int32: the step's kept slots of every MoE block and expert,
     * summed over the data shards (a block's exchange keeps its counts in the activations) */
    b->counts = 2 * model_moe_layers(&p->s) * p->s.moe.E;
    /* the rows one AllToAll moves, in the order it moves them: at most every slot of the |Z|
     * shards' micro-batches */
    if (nz > 1) b->stage = p->rows * p->s.moe.k * nz * p->s.D;
    if (p->zero == 0 || Lm == 0) return;
    int64_t block = 0, shard = 0;
    for (int id = P_COUNT; id < P_ALL; id++) {
        const plan_moe_geo g = plan_moe_geo_of(p, (param_id)id);
        block = max64(block, plan_moe_block(&g));
        shard = max64(shard, Lm * plan_moe_block(&g) / g.n);
    }
    b->pack = 2 * block; /* the packed block, then a collective's result */
    if (p->zero >= 2) b->layer_grads = p->moe_layer_elems;
    if (p->zero == 3) b->gathered = plan_moe_gathered(p);
    if (p->zero <= 2) b->update = shard;
}
