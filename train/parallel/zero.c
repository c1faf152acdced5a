/* zero: the gradients of data parallelism and ZeRO-1/2/3 over the data axes X, as the model's
 * hooks (gradient slots, reductions), the step's completion of the reductions, the global norm,
 * and the checkpoints' view of who writes what (the weights' side: weights.c).
 *
 * Per layer, once its backward is done (the book's dW{U_X}):
 *   tensor axis: norm-gain gradients are partial sums over Y (each rank saw only its heads / its
 *     d_ff slice) → AllReduce_Y; a kv head replicated over a group of tensor ranks sums its
 *     gradient over that group (AllGather_Y, fixed-order sum).
 *   data axes: --zero 0: AllReduce_X in place (DP); --zero 1: ReduceScatter_X into the owned
 *     shard, once per step; --zero 2/3: ReduceScatter_X of every micro-batch's transient layer
 *     gradient, added into the owned shard. Off the critical path: with --overlap they are
 *     started asynchronously and completed in par_finish_grads.
 * The gradients' slots: ZeRO-2/3's transient layer gradients in two slots (par_grad_slots, a
 * slot free once its reductions' ticket retired), the model's own storage below ZeRO-2. */
#include <string.h>

#include "kernels/optim.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- helpers */

static int last_micro(const struct par *p) {
    return p->micro == p->n_micro - 1;
}

static mesh_axes all_axes(const struct par *p) {
    mesh_axes a = p->pl->data.axes;
    if (p->pl->tensor.axes.n) a.ax[a.n++] = p->pl->tensor.axes.ax[0];
    if (p->pl->pipe.axes.n) a.ax[a.n++] = p->pl->pipe.axes.ax[0];
    return a;
}

/* The tensor and pipeline axes: ranks that hold different parts of one model replica. */
static mesh_axes model_axes(const struct par *p) {
    mesh_axes a = p->pl->tensor.axes;
    if (p->pl->pipe.axes.n) a.ax[a.n++] = p->pl->pipe.axes.ax[0];
    return a;
}

/* ---------------------------------------------------------------- tensor-axis fixups */

/* g holds this micro-batch's (or, zero<=1, the accumulated) partial gradient of a block. */
static void tp_fix_block(struct par *p, param_id id, float *g) {
    const plan_geo *ge = &p->pl->g[id];
    const int64_t n = plan_geo_block(ge);
    if (ge->repl) {
        par_run(p, PLAN_TP_NORM_GRAD, g, g, n);
    } else if (ge->kv_group) {
        /* ranks sharing kv head k0: tensor ranks whose first query head maps to it */
        par_run(p, PLAN_TP_KV_GRAD, p->tp.kv, g, n);
        const int64_t group = p->pl->s.N / p->pl->s.K; /* query heads per kv head */
        floats_clear(g, n);
        for (int64_t y = 0; y < p->pl->tensor.n; y++)
            if ((y * p->pl->loc.Nl) / group == p->pl->loc.k0) kern_add(g, p->tp.kv + y * n, n);
    }
}

/* A layer's parameters in two parts, whose gradients complete one after the other: the MLP
 * sublayer's (part 0; its backward runs first), then the attention sublayer's (part 1). */
static int in_part(param_id id, int part) {
    if (!plan_is_layer_param(id)) return 0;
    const int mlp = id == P_MLP_NORM || id == P_W_GATE || id == P_W_UP || id == P_W_DOWN;
    return mlp == (part == 0);
}

static void tp_fix_layer(struct par *p, model *mod, int64_t l, float *base, int part) {
    if (p->pl->tensor.n == 1) return;
    for (int id = 0; id < P_COUNT; id++) {
        if (!in_part((param_id)id, part)) continue;
        const plan_geo *g = &p->pl->g[id];
        const int64_t bi = plan_block_index(p->pl, (param_id)id, l);
        if ((!g->repl && !g->kv_group) || bi < 0) continue;
        float *b = base ? par_layer_slot(p, base, (param_id)id)
                        : model_grad(mod, (param_id)id, NULL) + bi * plan_geo_block(g);
        tp_fix_block(p, (param_id)id, b);
    }
}

/* ---------------------------------------------------------------- data-axis reductions */

/* Reduces one TP-local block gradient g over the data axes into its destination. For RS the
 * block is first packed in place so that shard j's elements are contiguous. out: where the RS
 * result lands; acc: shard gradient to add it into (NULL: out is the shard gradient itself). */
static void reduce_block(struct par *p, param_id id, float *g, float *out, float *acc) {
    const plan_geo *ge = &p->pl->g[id];
    const int64_t n = plan_geo_block(ge);
    if (p->pl->zero == 0 && p->pl->dcn.axes.n) return; /* the whole gradient at once: dcn_reduce */
    if (p->pl->zero == 0) {
        if (bucket_add(p, g, n, g, 0)) return;
        if (p->pl->overlap)
            queue_push(p, (par_pending){.req = par_start(p, PLAN_DP_REDUCE, g, g, n)});
        else
            par_run(p, PLAN_DP_REDUCE, g, g, n);
        return;
    }
    if (par_column_sharded(ge)) {
        floats_copy(p->column_pack, g, n);
        par_pack_cols(g, p->column_pack, ge->R, ge->C, p->pl->data.n);
    }
    if (bucket_add(p, g, n, acc ? acc : out, acc != NULL)) return;
    const int64_t ns = n / p->pl->data.n;
    if (p->pl->overlap) {
        mesh_req *r = par_start(p, PLAN_ZERO_REDUCE, out, g, ns);
        queue_push(p, (par_pending){.req = r, .out = out, .acc = acc, .n = acc ? ns : 0});
    } else {
        par_run(p, PLAN_ZERO_REDUCE, out, g, ns);
        if (acc) kern_add(acc, out, ns);
    }
}

static void reduce_layer(struct par *p, model *mod, int64_t l, int part) {
    if (p->pl->zero <= 1 && !last_micro(p)) return;
    const int k = (int)(l % 2);
    for (int id = 0; id < P_COUNT; id++) {
        const int64_t bi = plan_block_index(p->pl, (param_id)id, l);
        if (!in_part((param_id)id, part) || bi < 0) continue; /* (MoE: expert_zero.c) */
        const plan_geo *g = &p->pl->g[id];
        const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
        float *shard = p->pl->zero ? p->shard_grads + p->pl->shard_offset[id] + bi * ns : NULL;
        if (p->pl->zero <= 1) {
            float *gb = model_grad(mod, (param_id)id, NULL) + bi * n;
            reduce_block(p, (param_id)id, gb, shard, NULL);
        } else {
            float *gb = par_layer_slot(p, p->gs.full[k], (param_id)id);
            /* layer_grads_scattered[k] is laid out like layer_grads_full[k] at 1/n_data scale */
            float *out = p->gs.scattered[k] + (gb - p->gs.full[k]) / p->pl->data.n;
            reduce_block(p, (param_id)id, gb, out, shard);
        }
    }
    p->gs.busy[k] = queue_last(&p->q); /* slot k is free once these have completed */
}

/* A part of layer l's gradients is complete: its fixups and reductions start (with --overlap the
 * MLP's reductions run during the attention's backward, so that the last layer's leave less to
 * wait for once the backward is done). */
static void layer_part_done(struct par *p, model *mod, int64_t l, int part) {
    if (p->pl->zero >= 2 || last_micro(p))
        tp_fix_layer(p, mod, l, p->pl->zero >= 2 ? p->gs.full[l % 2] : NULL, part);
    if (p->pl->data.n > 1) reduce_layer(p, mod, l, part);
}

void par_hk_mlp_grads_done(void *ctx, model *mod, int64_t l) {
    layer_part_done(ctx, mod, l, 0);
    ep_mlp_grads_done(ctx, l);
    par_poll(ctx);
}

void par_hk_layer_grads_done(void *ctx, model *mod, int64_t l) {
    layer_part_done(ctx, mod, l, 1);
    par_poll(ctx);
}

static void nonlayer_done(struct par *p, model *mod, param_id id) {
    const plan_geo *g = &p->pl->g[id];
    float *gb = p->pl->zero >= 2 ? p->gs.param[id] : model_grad(mod, id, NULL);
    if ((p->pl->zero >= 2 || last_micro(p)) && p->pl->tensor.n > 1 && (g->repl || g->kv_group))
        tp_fix_block(p, id, gb);
    if (p->pl->data.n == 1 || (p->pl->zero <= 1 && !last_micro(p))) return;
    float *shard = p->pl->zero ? p->shard_grads + p->pl->shard_offset[id] : NULL;
    if (p->pl->zero <= 1) {
        reduce_block(p, id, gb, shard, NULL);
    } else {
        /* a non-layer transient is reduced synchronously: its staging is the pack buffer */
        queue_drain(p);
        const int64_t n = plan_geo_block(g);
        if (par_column_sharded(g)) {
            floats_copy(p->column_pack, gb, n);
            par_pack_cols(gb, p->column_pack, g->R, g->C, p->pl->data.n);
        }
        par_run(p, PLAN_ZERO_REDUCE, p->column_pack, gb, n / p->pl->data.n);
        kern_add(shard, p->column_pack, n / p->pl->data.n);
    }
}

void par_hk_head_grads_done(void *ctx, model *mod) {
    struct par *p = ctx;
    nonlayer_done(p, mod, P_UNEMBED);
    nonlayer_done(p, mod, P_FINAL_NORM);
}

void par_hk_embed_grads_done(void *ctx, model *mod) {
    struct par *p = ctx;
    nonlayer_done(p, mod, P_EMBED);
}

/* ---------------------------------------------------------------- gradient slots */

layer_g par_hk_layer_grads(void *ctx, model *mod, int64_t l) {
    struct par *p = ctx;
    par_poll(p);
    if (p->pl->zero < 2) return model_layer_grads_local(mod, l);
    const int k = (int)(l % 2);
    queue_wait(p, p->gs.busy[k]); /* the slot's previous reductions must be complete */
    floats_clear(p->gs.full[k], p->pl->layer_elems);
    float *b[PAR_LAYER_BLOCKS];
    par_layer_blocks(p, p->gs.full[k], b);
    layer_g g = {b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                 b[8], NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (model_layer_is_moe(&p->pl->s, l)) ep_layer_grads(p, &g);
    return g;
}

float *par_hk_grad(void *ctx, model *mod, param_id id) {
    struct par *p = ctx;
    if (p->pl->zero < 2) return model_grad(mod, id, NULL);
    return p->gs.param[id];
}

/* ---------------------------------------------------------------- step level */

void par_step_begin(par *p) {
    if (!p) return;
    weights_start_due(p); /* ZeRO-1/2 --overlap: the updated shards' gathers */
    if (p->shard_grads) floats_clear(p->shard_grads, p->pl->shard_total + p->pl->moe_shard_total);
}

void par_micro_begin(par *p, int64_t j, int64_t n) {
    if (!p) return;
    p->micro = j;
    p->n_micro = n;
    for (int id = 0; id < P_COUNT; id++)
        if (p->gs.param[id]) floats_clear(p->gs.param[id], plan_geo_block(&p->pl->g[id]));
}

/* --dcn: the data axes are ICI ones (data_axes) and one across the data-center network (dcn_axes);
 * DCN carries 1/|ICI| of the gradient:
 *   --zero 0: the whole TP-local gradient G (flat, padded to n_data equal shards) is
 *     ReduceScatter_ICI → AllReduce_DCN of this rank's 1/|ICI| shard → AllGather_ICI;
 *   --zero >= 1: the per-block ReduceScatter_ICI has already left each rank's shard gradient in
 *     shard_grads; AllReduce_DCN of it, once per step (the AllGather_ICI follows: ZeRO-1/2's gather
 * of the updated shards, ZeRO-3's gathers of the next forward pass). */
static void dcn_reduce(struct par *p, model *mod) {
    if (p->pl->zero >= 1) { /* (the MoE weights' shards too) */
        par_run(p, PLAN_DCN_SHARDS, p->shard_grads, p->shard_grads,
                p->pl->shard_total + p->pl->moe_shard_total);
        return;
    }
    int64_t n;
    float *G = model_grads_flat(mod, &n), *buf = p->dcn;
    n -= p->pl->moe_n * p->pl->moe_layer_elems; /* the MoE's: ep_reduce_grads */
    CHECK(n <= p->pl->dcn_n, "flat gradient of %lld exceeds the DCN buffer of %lld", (long long)n,
          (long long)p->pl->dcn_n);
    const int64_t c = p->pl->dcn_n / p->pl->data.n;
    floats_copy(buf, G, n);
    floats_clear(buf + n, p->pl->dcn_n - n);
    float *mine = buf + p->pl->dcn_n; /* this rank's shard */
    par_run(p, PLAN_DCN_SCATTER, mine, buf, c);
    par_run(p, PLAN_DCN_REDUCE, mine, mine, c);
    par_run(p, PLAN_DCN_GATHER, buf, mine, c);
    floats_copy(G, buf, n);
}

void par_finish_grads(par *p, model *mod) {
    if (!p) return;
    bucket_flush(p);
    queue_drain(p);
    ep_reduce_grads(p, mod); /* (before --dcn's reduction of the shards, ZeRO-1's among them) */
    if (p->pl->dcn.axes.n) dcn_reduce(p, mod);
}

/* Is this rank the one that counts a TP-replicated block in the global norm? */
static int counts_once(const struct par *p, const plan_geo *g) {
    if (g->repl) return p->pl->tensor.index == 0;
    if (g->kv_group) return p->pl->loc.n0 % (p->pl->s.N / p->pl->s.K) == 0;
    return 1;
}

double par_grad_sumsq(par *p, model *mod) {
    if (!p) {
        int64_t n;
        const float *g = model_grads_flat(mod, &n);
        return kern_sumsq(g, n);
    }
    double s = 0.0;
    for (int id = 0; id < P_COUNT; id++) {
        const plan_geo *g = &p->pl->g[id];
        if (!counts_once(p, g)) continue;
        if (p->pl->zero == 0) {
            int64_t n;
            const float *gr = model_grad(mod, (param_id)id, &n);
            s += kern_sumsq(gr, n);
        } else {
            s += kern_sumsq(p->shard_grads + p->pl->shard_offset[id], g->shard_n);
        }
    }
    /* zero 0: data ranks hold identical (reduced) gradients, sum over the tensor axis only */
    return par_allsum(p, p->pl->zero == 0 ? model_axes(p) : all_axes(p), s) + ep_grad_sumsq(p, mod);
}

param_slab par_state_slab(par *p, model *mod, param_id id) {
    if (!p) return *model_slab(mod, id);
    if (id >= P_COUNT)
        return p->pl->zero ? plan_moe_shard_slab(p->pl, id) : plan_moe_slab(p->pl, id);
    return p->pl->zero == 0 ? plan_tp_slab(p->pl, id) : plan_shard_slab(p->pl, id);
}

int par_is_writer(par *p, param_id id, int kind) {
    if (!p) return 1;
    if (id >= P_COUNT) return ep_is_writer(p, id, kind);
    const plan_geo *g = &p->pl->g[id];
    if (!counts_once(p, g)) return 0;
    /* replicated over the data axes: parameters unless ZeRO-3, state unless ZeRO >= 1 */
    const int replicated_x = kind == 0 ? p->pl->zero < 3 : p->pl->zero == 0;
    if (p->pl->dcn.axes.n && mesh_axes_index(p->m, p->pl->dcn.axes) != 0)
        return 0; /* replicated over DCN */
    return replicated_x ? p->pl->data.index == 0 : 1;
}
