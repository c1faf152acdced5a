/* plan_expert: the expert axis Z's part of the sharding plan (plan.h). The routed experts of
 * every MoE block are sharded over Z, this rank holding experts [e0, e0 + E/|Z|) of each
 * (W_in[E_Z, D, F]); the router and the shared experts are replicated, as the dense weights are
 * under data parallelism. The tokens of the |Z| data shards of the axis may all reach one rank's
 * experts, so the rows its experts take are sized for |Z| shards (dropless: any routing). */
#include "train/parallel/plan.h"

static int is_routed(param_id id) {
    return id == P_EXP_GATE || id == P_EXP_UP || id == P_EXP_DOWN;
}

void plan_expert_extents(plan *p) {
    model_extents *lc = &p->loc;
    const int64_t nz = p->expert.n > 0 ? p->expert.n : 1;
    lc->ep_n = nz;
    lc->El = p->s.moe.E / nz;
    lc->e0 = p->expert.index * lc->El;
}

param_slab plan_moe_slab(const plan *p, param_id id) {
    param_slab sl;
    model_slab_full(&p->s, id, &sl);
    if (is_routed(id)) sl.off[1] = p->loc.e0, sl.cnt[1] = p->loc.El;
    return sl;
}

int64_t plan_moe_elems(const plan *p, param_id id) {
    const int64_t n = model_param_numel(&p->s, id);
    return is_routed(id) ? n / p->s.moe.E * p->loc.El : n;
}

int64_t plan_expert_counts_at(const plan *p, int64_t lm) {
    const int64_t nz = p->loc.ep_n, E = p->s.moe.E;
    return model_moe_layers(&p->s) * E + lm * (nz * E + 2 * nz * nz);
}

void plan_expert_bufs(const plan *p, int64_t *stage, int64_t *counts) {
    const int64_t nz = p->loc.ep_n, Lm = model_moe_layers(&p->s);
    *stage = *counts = 0;
    if (p->s.moe.E == 0 || p->batch.n == 1) return;
    /* int64 counts as pairs of int32: the step's kept slots summed over the data shards, then
     * per MoE block (plan_expert_counts_at) the rows per (rank of Z, expert), the AllToAll's
     * rows and elements per (sender, receiver) */
    *counts = 2 * plan_expert_counts_at(p, Lm);
    /* the rows one AllToAll moves, in the order it moves them: at most every slot of the |Z|
     * shards' micro-batches */
    if (nz > 1) *stage = p->rows * p->s.moe.k * nz * p->s.D;
}
