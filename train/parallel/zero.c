/* zero: data parallelism and ZeRO-1/2/3 over the data axes X, as the model's hooks (weights and
 * gradient slots, reductions) and the optimizer's view of a sharded run.
 *
 * ZeRO-3 (FSDP) weights: AllGather_X of a layer's shards just in time, into one of two slots
 * (prefetched with --overlap); the non-layer weights are gathered when used.
 *
 * Per layer, once its backward is done (the book's dW{U_X}):
 *   tensor axis: norm-gain gradients are partial sums over Y (each rank saw only its heads / its
 *     d_ff slice) → AllReduce_Y; a kv head replicated over a group of tensor ranks sums its
 *     gradient over that group (AllGather_Y, fixed-order sum).
 *   data axes: --zero 0: AllReduce_X in place (DP); --zero 1: ReduceScatter_X into the owned
 *     shard, once per step; --zero 2/3: ReduceScatter_X of every micro-batch's transient layer
 *     gradient, added into the owned shard. Off the critical path: with --overlap they are
 *     started asynchronously and completed in par_finish_grads.
 * After the update, ZeRO-1/2 AllGather_X the updated parameter shards; with --overlap these
 * gathers start with the next step, layer by layer, and each layer's is waited for only when its
 * forward reads it (ZeRO-3 gathers the shards just in time in the next forward pass). */
#include <string.h>

#include "kernels/optim.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- helpers */

static int last_micro(const struct par *p) {
    return p->micro == p->n_micro - 1;
}

/* Σ over the axis set of a double, identical on every rank (AllGather + fixed-order sum). */
static double allsum(struct par *p, mesh_axes a, double v) {
    const int n = mesh_axes_size(p->m, a);
    if (n == 1) return v;
    float mine[2], all[2 * 64];
    memcpy(mine, &v, sizeof v);
    CHECK(n <= 64, "allsum over %d ranks", n);
    mesh_all_gather(p->m, a, all, mine, 2, MESH_ALG_MPI);
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        double x;
        memcpy(&x, all + 2 * i, sizeof x);
        s += x;
    }
    return s;
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
        mesh_all_reduce(p->m, p->pl->tensor.axes, g, g, n, p->pl->alg);
    } else if (ge->kv_group) {
        /* ranks sharing kv head k0: tensor ranks whose first query head maps to it */
        mesh_all_gather(p->m, p->pl->tensor.axes, p->kv_exchange, g, n, p->pl->alg);
        const int64_t group = p->pl->s.N / p->pl->s.K; /* query heads per kv head */
        floats_clear(g, n);
        for (int64_t y = 0; y < p->pl->tensor.n; y++)
            if ((y * p->pl->loc.Nl) / group == p->pl->loc.k0)
                kern_add(g, p->kv_exchange + y * n, n);
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
        if (!g->repl && !g->kv_group) continue;
        float *b = base ? par_layer_slot(p, base, (param_id)id)
                        : model_grad(mod, (param_id)id, NULL) + (l - p->pl->l0) * plan_geo_block(g);
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
            par_push(p, mesh_iall_reduce(p->m, p->pl->data.axes, g, g, n, p->pl->alg), NULL, NULL,
                     0);
        else
            mesh_all_reduce(p->m, p->pl->data.axes, g, g, n, p->pl->alg);
        return;
    }
    if (ge->zdim && ge->R > 1) {
        floats_copy(p->column_pack, g, n);
        par_pack_cols(g, p->column_pack, ge->R, ge->C, p->pl->data.n);
    }
    if (bucket_add(p, g, n, acc ? acc : out, acc != NULL)) return;
    if (p->pl->overlap) {
        par_push(
            p, mesh_ireduce_scatter(p->m, p->pl->data.axes, out, g, n / p->pl->data.n, p->pl->alg),
            out, acc, acc ? n / p->pl->data.n : 0);
    } else {
        mesh_reduce_scatter(p->m, p->pl->data.axes, out, g, n / p->pl->data.n, p->pl->alg);
        if (acc) kern_add(acc, out, n / p->pl->data.n);
    }
}

static void reduce_layer(struct par *p, model *mod, int64_t l, int part) {
    if (p->pl->zero <= 1 && !last_micro(p)) return;
    const int k = (int)(l % 2);
    for (int id = 0; id < P_COUNT; id++) {
        if (!in_part((param_id)id, part)) continue;
        const plan_geo *g = &p->pl->g[id];
        const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
        float *shard =
            p->pl->zero ? p->shard_grads + p->pl->shard_offset[id] + (l - p->pl->l0) * ns : NULL;
        if (p->pl->zero <= 1) {
            float *gb = model_grad(mod, (param_id)id, NULL) + (l - p->pl->l0) * n;
            reduce_block(p, (param_id)id, gb, shard, NULL);
        } else {
            float *gb = par_layer_slot(p, p->layer_grads_full[k], (param_id)id);
            /* layer_grads_scattered[k] is laid out like layer_grads_full[k] at 1/n_data scale */
            float *out =
                p->layer_grads_scattered[k] + (gb - p->layer_grads_full[k]) / p->pl->data.n;
            reduce_block(p, (param_id)id, gb, out, shard);
        }
    }
    p->slot_pending[k] = p->n_pending; /* slot k is free once these have completed */
}

/* A part of layer l's gradients is complete: its fixups and reductions start (with --overlap the
 * MLP's reductions run during the attention's backward, so that the last layer's leave less to
 * wait for once the backward is done). */
static void layer_part_done(struct par *p, model *mod, int64_t l, int part) {
    if (p->pl->zero >= 2 || last_micro(p))
        tp_fix_layer(p, mod, l, p->pl->zero >= 2 ? p->layer_grads_full[l % 2] : NULL, part);
    if (p->pl->data.n > 1) reduce_layer(p, mod, l, part);
}

void par_hk_mlp_grads_done(void *ctx, model *mod, int64_t l) {
    layer_part_done(ctx, mod, l, 0);
    par_poll(ctx);
}

void par_hk_layer_grads_done(void *ctx, model *mod, int64_t l) {
    layer_part_done(ctx, mod, l, 1);
    par_poll(ctx);
}

static void nonlayer_done(struct par *p, model *mod, param_id id) {
    const plan_geo *g = &p->pl->g[id];
    float *gb = p->pl->zero >= 2 ? p->param_grads_full[id] : model_grad(mod, id, NULL);
    if ((p->pl->zero >= 2 || last_micro(p)) && p->pl->tensor.n > 1 && (g->repl || g->kv_group))
        tp_fix_block(p, id, gb);
    if (p->pl->data.n == 1 || (p->pl->zero <= 1 && !last_micro(p))) return;
    float *shard = p->pl->zero ? p->shard_grads + p->pl->shard_offset[id] : NULL;
    if (p->pl->zero <= 1) {
        reduce_block(p, id, gb, shard, NULL);
    } else {
        /* a non-layer transient is reduced synchronously: its staging is the pack buffer */
        par_drain(p);
        const int64_t n = plan_geo_block(g);
        if (g->zdim && g->R > 1) {
            floats_copy(p->column_pack, gb, n);
            par_pack_cols(gb, p->column_pack, g->R, g->C, p->pl->data.n);
        }
        mesh_reduce_scatter(p->m, p->pl->data.axes, p->column_pack, gb, n / p->pl->data.n,
                            p->pl->alg);
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

/* ---------------------------------------------------------------- ZeRO-3 weight gathers */

/* Layer l's weight gathers in buckets (with --bucket, the plan's size; plan_weight_buckets
 * cuts them): the layer's shards, in parameter order, are copied one after another into
 * gather_send[k]; each bucket is one AllGather_X into gather_stage[k] (rank j's part of a bucket
 * of b elements per rank at j·b), so that a layer of many small tensors pays the hop latency a
 * few times instead of once per tensor. The gathered parts then go to their tensors
 * (bucket_scatter). Gathers only move data: bit-identical to the per-tensor gathers. */
typedef struct {
    struct par *p;
    int64_t l;
    int k, async, started;
} wgather;

/* Visitor: copies the tensor's shard into gather_send; the bucket's last tensor starts its gather.
 */
static void bucket_pack(void *ctx, param_id id, int64_t b0, int64_t blen, int64_t at) {
    wgather *w = ctx;
    struct par *p = w->p;
    const int64_t cnt = plan_geo_block(&p->pl->g[id]) / p->pl->data.n;
    floats_copy(p->gather_send[w->k] + b0 + at,
                p->shard_params + p->pl->shard_offset[id] + (w->l - p->pl->l0) * cnt, cnt);
    if (at + cnt < blen) return;
    float *dst = p->gather_stage[w->k] + b0 * p->pl->data.n;
    const float *src = p->gather_send[w->k] + b0;
    if (w->async)
        p->gather_reqs[w->k][w->started++] =
            mesh_iall_gather(p->m, p->pl->data.axes, dst, src, blen, p->pl->alg);
    else
        mesh_all_gather(p->m, p->pl->data.axes, dst, src, blen, p->pl->alg);
}

/* Visitor: rank j's part of the tensor, at gather_stage + b0·n_data + j·blen + at, into its slot of
 * gathered_layer (a column-sharded tensor's part j is its columns [j·C/n_data, (j+1)·C/n_data)). */
static void bucket_scatter(void *ctx, param_id id, int64_t b0, int64_t blen, int64_t at) {
    const wgather *w = ctx;
    struct par *p = w->p;
    const int k = w->k;
    const plan_geo *g = &p->pl->g[id];
    const int64_t cnt = plan_geo_block(g) / p->pl->data.n, cl = g->C / p->pl->data.n;
    float *dst = par_layer_slot(p, p->gathered_layer[k], id);
    if (mesh_no_data(plan_geo_block(g) * (int64_t)sizeof(float))) return;
    for (int64_t j = 0; j < p->pl->data.n; j++) {
        const float *part = p->gather_stage[k] + b0 * p->pl->data.n + j * blen + at;
        if (g->zdim && g->R > 1)
            for (int64_t r = 0; r < g->R; r++)
                floats_copy(dst + r * g->C + j * cl, part + r * cl, cl);
        else
            floats_copy(dst + j * cnt, part, cnt);
    }
}

/* Starts (or runs) the gathers of layer l's shards into slot k. */
static void gather_layer_start(struct par *p, int64_t l, int k, int async) {
    p->gathered_layer_id[k] = l;
    if (p->pl->bucket_cap) {
        wgather w = {p, l, k, async, 0};
        plan_weight_buckets(p->pl, bucket_pack, &w);
        return;
    }
    for (int id = 0; id < P_COUNT; id++) {
        if (!plan_is_layer_param((param_id)id)) continue;
        const plan_geo *g = &p->pl->g[id];
        const int64_t cnt = plan_geo_block(g) / p->pl->data.n;
        const float *src = p->shard_params + p->pl->shard_offset[id] + (l - p->pl->l0) * cnt;
        float *dst =
            par_layer_slot(p, g->zdim ? p->gather_stage[k] : p->gathered_layer[k], (param_id)id);
        if (async)
            p->gather_reqs[k][id] =
                mesh_iall_gather(p->m, p->pl->data.axes, dst, src, cnt, p->pl->alg);
        else
            mesh_all_gather(p->m, p->pl->data.axes, dst, src, cnt, p->pl->alg);
    }
}

static void gather_layer_finish(struct par *p, int k) {
    for (int id = 0; id < P_COUNT; id++) {
        mesh_wait(p->gather_reqs[k][id]);
        p->gather_reqs[k][id] = NULL;
    }
    if (p->pl->bucket_cap) {
        wgather w = {p, 0, k, 0, 0};
        plan_weight_buckets(p->pl, bucket_scatter, &w);
        return;
    }
    for (int id = 0; id < P_COUNT; id++) {
        const plan_geo *g = &p->pl->g[id];
        if (!plan_is_layer_param((param_id)id) || !g->zdim) continue;
        par_unpack_cols(par_layer_slot(p, p->gathered_layer[k], (param_id)id),
                        par_layer_slot(p, p->gather_stage[k], (param_id)id), g->R, g->C,
                        p->pl->data.n);
    }
}

static void update_gathers_start(struct par *p);

/* zero 1/2 --overlap: completes the pending calls up to ticket t (see par_impl.h; the caller
 * starts due gathers first, so that t is theirs). */
static void ticket_wait(struct par *p, int64_t t) {
    if (t > p->n_retired) par_drain_upto(p, (int)(t - p->n_retired));
}

layer_w par_hk_layer_weights(void *ctx, model *mod, int64_t l, int dir) {
    struct par *p = ctx;
    par_poll(p);
    if (p->pl->zero < 3) {
        if (p->ug_due) update_gathers_start(p);
        ticket_wait(p, p->ug_base + p->ug_first + (l - p->pl->l0 + 1) * p->ug_layer);
        return model_layer_weights_local(mod, l);
    }
    const int k = (int)(l % 2);
    if (p->gathered_layer_id[k] != l) {
        for (int id = 0; id < P_COUNT; id++)
            mesh_wait(p->gather_reqs[k][id]), p->gather_reqs[k][id] = NULL;
        gather_layer_start(p, l, k, 0);
        gather_layer_finish(p, k);
    } else if (p->gather_pending[k]) {
        gather_layer_finish(p, k);
    }
    p->gather_pending[k] = 0;
    const int64_t next = l + dir;
    if (p->pl->overlap && next >= p->pl->l0 && next < p->pl->l1 &&
        p->gathered_layer_id[1 - k] != next)
        gather_layer_start(p, next, 1 - k, 1), p->gather_pending[1 - k] = 1;
    layer_w w;
    const float *b = p->gathered_layer[k];
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

void par_hk_layer_release(void *ctx, model *mod, int64_t l) {
    (void)mod, (void)l; /* slots are recycled two layers later */
    par_poll(ctx);
}

static float *nonlayer_buf(struct par *p, param_id id) {
    return id == P_EMBED        ? p->gathered_embed
           : id == P_FINAL_NORM ? p->gathered_final_norm
                                : p->gathered_unembed;
}

const float *par_hk_weight(void *ctx, model *mod, param_id id) {
    struct par *p = ctx;
    if (p->pl->zero < 3) {
        if (p->ug_due) update_gathers_start(p);
        ticket_wait(p, id == P_EMBED ? p->ug_base + p->ug_first : p->ug_end);
        return model_param(mod, id, NULL);
    }
    float *dst = nonlayer_buf(p, id);
    const plan_geo *g = &p->pl->g[id];
    const int64_t cnt = plan_geo_block(g) / p->pl->data.n;
    const float *src = p->shard_params + p->pl->shard_offset[id];
    if (g->zdim) {
        mesh_all_gather(p->m, p->pl->data.axes, p->column_pack, src, cnt, p->pl->alg);
        par_unpack_cols(dst, p->column_pack, g->R, g->C, p->pl->data.n);
    } else {
        mesh_all_gather(p->m, p->pl->data.axes, dst, src, cnt, p->pl->alg);
    }
    return dst;
}

/* ---------------------------------------------------------------- gradient slots */

layer_g par_hk_layer_grads(void *ctx, model *mod, int64_t l) {
    struct par *p = ctx;
    par_poll(p);
    if (p->pl->zero < 2) return model_layer_grads_local(mod, l);
    const int k = (int)(l % 2);
    par_drain_upto(p, p->slot_pending[k]); /* the slot's previous reductions must be complete */
    float *b = p->layer_grads_full[k];
    floats_clear(b, p->pl->layer_elems);
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

float *par_hk_grad(void *ctx, model *mod, param_id id) {
    struct par *p = ctx;
    if (p->pl->zero < 2) return model_grad(mod, id, NULL);
    return p->param_grads_full[id];
}

/* ---------------------------------------------------------------- step level */

void par_step_begin(par *p) {
    if (!p) return;
    if (p->ug_due) update_gathers_start(p); /* zero 1/2 --overlap: the updated shards */
    if (p->shard_grads) floats_clear(p->shard_grads, p->pl->shard_total);
}

void par_micro_begin(par *p, int64_t j, int64_t n) {
    if (!p) return;
    p->micro = j;
    p->n_micro = n;
    for (int id = 0; id < P_COUNT; id++)
        if (p->param_grads_full[id])
            floats_clear(p->param_grads_full[id], plan_geo_block(&p->pl->g[id]));
}

/* --dcn: the data axes are ICI ones (data_axes) and one across the data-center network (dcn_axes);
 * DCN carries 1/|ICI| of the gradient:
 *   --zero 0: the whole TP-local gradient G (flat, padded to n_data equal shards) is
 *     ReduceScatter_ICI → AllReduce_DCN of this rank's 1/|ICI| shard → AllGather_ICI;
 *   --zero >= 1: the per-block ReduceScatter_ICI has already left each rank's shard gradient in
 *     shard_grads; AllReduce_DCN of it, once per step (the AllGather_ICI follows: ZeRO-1/2's gather
 * of the updated shards, ZeRO-3's gathers of the next forward pass). */
static void dcn_reduce(struct par *p, model *mod) {
    if (p->pl->zero >= 1) {
        mesh_all_reduce(p->m, p->pl->dcn.axes, p->shard_grads, p->shard_grads, p->pl->shard_total,
                        p->pl->alg);
        return;
    }
    int64_t n;
    float *G = model_grads_flat(mod, &n), *buf = p->dcn_buf;
    CHECK(n <= p->pl->dcn_n, "flat gradient of %lld exceeds the DCN buffer of %lld", (long long)n,
          (long long)p->pl->dcn_n);
    const int64_t c = p->pl->dcn_n / p->pl->data.n;
    floats_copy(buf, G, n);
    floats_clear(buf + n, p->pl->dcn_n - n);
    float *mine = buf + p->pl->dcn_n; /* this rank's shard */
    mesh_reduce_scatter(p->m, p->pl->data.axes, mine, buf, c, p->pl->alg);
    mesh_all_reduce(p->m, p->pl->dcn.axes, mine, mine, c, p->pl->alg);
    mesh_all_gather(p->m, p->pl->data.axes, buf, mine, c, p->pl->alg);
    floats_copy(G, buf, n);
}

void par_finish_grads(par *p, model *mod) {
    if (!p) return;
    bucket_flush(p);
    par_drain(p);
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
    return allsum(p, p->pl->zero == 0 ? model_axes(p) : all_axes(p), s);
}

/* zero 1/2: this rank's shard of the model's whole (TP-local) parameter, into sh. */
static void shard_select(struct par *p, model *mod, param_id id, float *sh) {
    const plan_geo *g = &p->pl->g[id];
    const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
    const float *full = model_param(mod, id, NULL);
    for (int64_t b = 0; b < g->nb; b++) {
        const float *src = full + b * n;
        if (g->zdim && g->R > 1) {
            par_pack_cols(p->column_pack, src, g->R, g->C, p->pl->data.n);
            src = p->column_pack;
        }
        floats_copy(sh + b * ns, src + p->pl->data.index * ns, ns);
    }
}

par_owned par_owned_slice(par *p, model *mod, param_id id) {
    if (!p || p->pl->zero == 0) {
        int64_t n, off = 0;
        float *w = model_param(mod, id, &n);
        for (int j = 0; j < (int)id; j++) {
            int64_t nj;
            model_param(mod, (param_id)j, &nj);
            off += nj;
        }
        return (par_owned){w, model_grad(mod, id, NULL), n, off};
    }
    float *w = p->shard_params + p->pl->shard_offset[id]; /* zero 3: the model's own shard */
    if (p->pl->zero <= 2) {                               /* zero 1/2: this rank's shard, staged */
        if (p->ug_due) update_gathers_start(p);
        ticket_wait(p, p->ug_end); /* the whole parameters, which shard_select reads */
        w = p->update_stage + (p->pl->overlap ? p->pl->shard_offset[id] : 0);
        shard_select(p, mod, id, w);
    }
    return (par_owned){w, p->shard_grads + p->pl->shard_offset[id], p->pl->g[id].shard_n,
                       p->pl->shard_offset[id]};
}

/* Is parameter id sharded by columns over the data axes (its gathered parts need unpacking)? */
static int column_sharded(const plan_geo *g) {
    return g->zdim && g->R > 1;
}

void par_owned_done(par *p, model *mod, param_id id) {
    if (!p || p->pl->zero == 0 || p->pl->zero == 3) return;
    /* zero 1/2: AllGather_X the updated shard back into the whole (TP-local) parameter; with
     * --overlap deferred to the next step (update_gathers_start; a column-sharded block, which
     * needs unpacking, is gathered now) */
    const plan_geo *g = &p->pl->g[id];
    const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
    float *full = model_param(mod, id, NULL);
    const float *stage = p->update_stage + (p->pl->overlap ? p->pl->shard_offset[id] : 0);
    for (int64_t b = 0; b < g->nb; b++) {
        if (column_sharded(g)) {
            mesh_all_gather(p->m, p->pl->data.axes, p->column_pack, stage + b * ns, ns, p->pl->alg);
            par_unpack_cols(full + b * n, p->column_pack, g->R, g->C, p->pl->data.n);
        } else if (p->pl->overlap) {
            p->ug_mod = mod, p->ug_deferred = 1; /* par_after_update makes them due */
        } else {
            mesh_all_gather(p->m, p->pl->data.axes, full + b * n, stage + b * ns, ns, p->pl->alg);
        }
    }
}

/* Starts the deferred gather of block b of parameter id's updated shard; returns 1 if it did. */
static int update_gather(struct par *p, param_id id, int64_t b) {
    const plan_geo *g = &p->pl->g[id];
    if (g->shard_n == 0 || column_sharded(g) || b >= g->nb) return 0;
    const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
    float *full = model_param(p->ug_mod, id, NULL) + b * n;
    const float *stage = p->update_stage + p->pl->shard_offset[id] + b * ns;
    par_push(p, mesh_iall_gather(p->m, p->pl->data.axes, full, stage, ns, p->pl->alg), NULL, NULL,
             0);
    return 1;
}

/* zero 1/2 --overlap: the gathers par_owned_done deferred, in the order the forward reads the
 * parameters (par_impl.h: the tickets). They start with the next step (par_step_begin), or when
 * the parameters are read before it (an evaluation, a checkpoint), so that on every rank they run
 * inside the step that uses them. */
static void update_gathers_start(struct par *p) {
    p->ug_due = 0;
    p->ug_base = p->n_retired + p->n_pending;
    p->ug_first = update_gather(p, P_EMBED, 0);
    p->ug_layer = 0;
    for (int64_t l = p->pl->l0; l < p->pl->l1; l++) {
        int k = 0;
        for (int id = 0; id < P_COUNT; id++)
            if (plan_is_layer_param((param_id)id))
                k += update_gather(p, (param_id)id, l - p->pl->l0);
        p->ug_layer = k; /* the same for every layer */
    }
    update_gather(p, P_FINAL_NORM, 0);
    update_gather(p, P_UNEMBED, 0);
    p->ug_end = p->n_retired + p->n_pending;
}

void par_hk_ready(void *ctx, model *mod) {
    struct par *p = ctx;
    if (p->pl->zero == 3)
        p->shard_params = model_params_flat(mod, NULL); /* the model stores the shards */
}

void par_after_update(par *p, model *mod) {
    (void)mod;
    if (!p) return;
    par_drain(p);
    if (p->ug_deferred) p->ug_due = 1, p->ug_deferred = 0; /* par_owned_done's */
    if (p->pl->zero == 3)
        p->gathered_layer_id[0] = p->gathered_layer_id[1] = -1; /* gathered copies are stale */
}

void par_params_sync(par *p) {
    if (!p) return;
    if (p->ug_due) update_gathers_start(p);
    ticket_wait(p, p->ug_end);
}

double par_data_mean(par *p, double v) {
    if (!p) return v;
    return allsum(p, p->pl->batch.axes, v) / (double)p->pl->batch.n;
}

param_slab par_state_slab(par *p, model *mod, param_id id) {
    if (!p) return *model_slab(mod, id);
    return p->pl->zero == 0 ? plan_tp_slab(p->pl, id) : plan_shard_slab(p->pl, id);
}

int par_is_writer(par *p, param_id id, int kind) {
    if (!p) return 1;
    const plan_geo *g = &p->pl->g[id];
    if (!counts_once(p, g)) return 0;
    /* replicated over the data axes: parameters unless ZeRO-3, state unless ZeRO >= 1 */
    const int replicated_x = kind == 0 ? p->pl->zero < 3 : p->pl->zero == 0;
    if (p->pl->dcn.axes.n && mesh_axes_index(p->m, p->pl->dcn.axes) != 0)
        return 0; /* replicated over DCN */
    return replicated_x ? p->pl->data.index == 0 : 1;
}

void par_params_loaded(par *p, model *mod) {
    par_after_update(p, mod); /* the same: derived copies of the parameters are stale */
}

double par_pipe_mean(par *p, double v) {
    return p && p->pl->pipe.n > 1 ? allsum(p, p->pl->pipe.axes, v) / (double)p->pl->pipe.n : v;
}

double par_pipe_last_value(par *p, double v) {
    if (!p) return v;
    return par_data_mean(p, allsum(p, p->pl->pipe.axes, v));
}
