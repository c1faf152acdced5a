/* plan: the sharding plan (see plan.h): the roles, the stage, the local extents, every
 * parameter's TP slab and ZeRO shard, the bucket size; then the plan's two lists. The buffers:
 * every buffer of the run, with its owner, category, element type and count; allocated and freed
 * by plan_alloc/plan_free (the model allocates its own in model_create, with the sizes
 * model_sizes_of gives both), summed by plan_memory for the memory line. The collectives: one
 * layer's, per micro-batch, and the step's, listed by plan_calls.c.
 *
 * How the parameters are laid out (the book's notation, X = the data axes, Y = the tensor axis):
 *   embed[V_Y, D_X]  attn_norm[L, D_X]  wq[L, D_X, (N·H)_Y]  wk,wv[L, D_X, (K·H)_Y]
 *   wo[L, (N·H)_Y, D_X]  w_gate,w_up[L, D_X, F_Y]  w_down[L, F_Y, D_X]  final_norm[D_X]
 *   unembed[D_X, V_Y]
 * The _Y subscripts are Megatron tensor sharding (heads, d_ff, vocabulary); when there are fewer
 * kv heads than |Y|, each kv head is replicated over the |Y|/K tensor ranks whose query heads
 * use it. The _X subscripts apply to the weights only with --zero 3 (FSDP); with --zero 1/2 they
 * describe the optimizer-state (and gradient) shards; with --zero 0 everything is replicated over
 * X (pure data parallelism). The batch is always sharded over X: In[B_X, D_Y]. A pipeline axis Z
 * cuts the L layers into |Z| stages of L/|Z| (stage 0 also holds the embedding, the last the final
 * norm and the unembedding). */
#include "train/parallel/plan.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "train/parallel/cmatmul.h"

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

int plan_is_layer_param(param_id id) {
    return id != P_EMBED && id != P_FINAL_NORM && id != P_UNEMBED;
}

plan_axes plan_axes_of(const mesh_axes *a, const int *sizes, const int *wraps, const int *coords,
                       const char *names, mesh_alg alg) {
    plan_axes r;
    memset(&r, 0, sizeof r);
    r.axes = *a;
    r.n = 1;
    for (int k = 0; k < a->n; k++) {
        r.sizes[k] = sizes[k], r.wraps[k] = wraps[k];
        r.n *= sizes[k];
        r.index = r.index * sizes[k] + coords[k];
        r.sub[k] = (char)(names[k] - 'a' + 'A');
    }
    r.alg = alg;
    return r;
}

void plan_in_single(plan_in *in, const config *c) {
    memset(in, 0, sizeof *in);
    in->c = *c;
    const mesh_axes none = {0, {0, 0, 0}};
    in->batch = in->data = in->dcn = in->tensor = in->pipe = in->expert = in->erep = in->cp =
        plan_axes_of(&none, NULL, NULL, NULL, "", MESH_ALG_DEFAULT);
}

int plan_trivial(const plan *p) {
    return p->batch.n == 1 && p->tensor.n == 1 && p->pipe.n == 1 && p->cp.n == 1;
}

/* This rank's local extents: its heads, kv heads, d_ff, vocabulary and residual columns. */
static void extents(plan *p) {
    const model_shape *s = &p->s;
    model_extents *lc = &p->loc;
    const int64_t n = p->tensor.n, y = p->tensor.index;
    lc->Nl = s->N / n;
    lc->n0 = y * lc->Nl;
    model_tensor_kv_heads(s, n, y, &lc->k0, &lc->Kl);
    lc->Fl = s->F / n;
    lc->f0 = y * lc->Fl;
    lc->Fel = s->moe.F / n;
    lc->fe0 = y * lc->Fel;
    lc->Vl = s->V / n;
    lc->v0 = y * lc->Vl;
    lc->Dl = s->D / n;
    lc->d0 = y * lc->Dl;
    lc->cp_n = p->cp.n;
    lc->cp_reads = p->cp_alg == CONFIG_CP_ULYSSES ? 0u
                   : p->cp_alg == CONFIG_CP_RING  ? (unsigned)(CP_READS_QKV | CP_READS_ATT)
                                                  : (unsigned)CP_READS_QKV;
    plan_expert_extents(p);
}

/* Parameter id's blocks as a 2D matrix [Rg, Cg] (global) and [R, C] (TP-local). */
static void geometry_of(plan *p, param_id id) {
    const model_shape *s = &p->s;
    const model_extents *lc = &p->loc;
    const param_info pi = model_param_info(s, id);
    plan_geo *g = &p->g[id];
    memset(g, 0, sizeof *g);
    g->stacked = plan_is_layer_param(id);
    g->nb = g->stacked ? p->l1 - p->l0 : 1;
    if ((id == P_EMBED && p->l0 != 0) ||
        ((id == P_FINAL_NORM || id == P_UNEMBED) && !plan_holds_head(p)))
        g->nb = 0; /* held by another pipeline stage */
    if (g->stacked && s->moe.E > 0 && (id == P_W_GATE || id == P_W_UP || id == P_W_DOWN))
        g->nb = p->mlp_n; /* with experts: the dense MLPs stack the (stage's) dense blocks */
    if (pi.ndim == 3)
        g->Rg = pi.shape[1], g->Cg = pi.shape[2];
    else if (pi.ndim == 2 && g->stacked)
        g->Rg = 1, g->Cg = pi.shape[1];
    else if (pi.ndim == 2)
        g->Rg = pi.shape[0], g->Cg = pi.shape[1];
    else
        g->Rg = 1, g->Cg = pi.shape[0];
    g->R = g->Rg, g->C = g->Cg;
    switch (id) {
    case P_EMBED:
        g->R = lc->Vl, g->r0 = lc->v0, g->zdim = 1;
        break;
    case P_WQ:
        g->C = lc->Nl * s->H, g->c0 = lc->n0 * s->H;
        break;
    case P_WK:
    case P_WV:
        g->C = lc->Kl * s->H, g->c0 = lc->k0 * s->H;
        g->kv_group = s->K < p->tensor.n;
        break;
    case P_WO:
        g->R = lc->Nl * s->H, g->r0 = lc->n0 * s->H, g->zdim = 1;
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
        g->repl = p->tensor.n > 1, g->zdim = 1;
        break;
    }
    g->shard_n = p->zero >= 1 ? g->nb * plan_geo_block(g) / p->data.n : 0;
}

/* Every parameter's geometry, the shards' offsets and the plan's element totals. */
static void geometry(plan *p) {
    extents(p);
    p->layer_elems = p->grad_elems = p->param_elems = p->shard_total = 0;
    p->n_layer_params = 0;
    for (int id = 0; id < P_COUNT; id++) {
        geometry_of(p, (param_id)id);
        const plan_geo *g = &p->g[id];
        if (plan_is_layer_param((param_id)id)) {
            p->layer_elems += plan_geo_block(g);
            p->n_layer_params++;
        }
        p->grad_elems += g->nb * plan_geo_block(g);
        p->shard_offset[id] = p->shard_total;
        p->shard_total += g->shard_n;
        p->param_elems += p->zero == 3 ? g->shard_n : g->nb * plan_geo_block(g);
    }
    /* the MoE parameters: whole but for the routed experts' E_Z (ZeRO-3: their shards); under
     * ZeRO their shards follow the dense ones' in the shard vector */
    plan_expert_shards(p);
    const int64_t dense = p->grad_elems; /* --dcn's flat reduction: the dense gradients */
    p->param_elems += p->zero == 3 ? p->moe_shard_total : p->moe_n * p->moe_layer_elems;
    p->grad_elems += p->moe_n * p->moe_layer_elems;
    p->state_elems = p->zero ? p->shard_total + p->moe_shard_total : p->param_elems;
    p->dcn_n = (dense + p->data.n - 1) / p->data.n * p->data.n;
}

/* The pipeline stage's layers, its activation slots and the micro-batch on this rank. */
static void stage(plan *p) {
    const config *c = &p->c;
    p->l0 = p->pipe.index * (p->s.L / p->pipe.n);
    p->l1 = p->l0 + p->s.L / p->pipe.n;
    p->n_micro = c->batch / c->micro_batch;
    const int64_t M = c->microbatches > 0 ? c->microbatches : 1;
    p->nslots =
        p->pipe.n == 1 ? 1 : (int)(c->schedule == PIPE_1F1B && M > p->pipe.n ? p->pipe.n : M);
    p->micro_seqs = c->micro_batch / p->batch.n;
    plan_cp_shape(p);
    p->rows = p->model_seqs * p->ms.T;
}

int64_t plan_bucket_limit(const plan *p) {
    return p->data.n == 1 ? 0 : p->dcn_n;
}

int plan_weight_buckets(const plan *p, plan_wbucket_fn fn, void *ctx) {
    const int b16 = plan_z3_bf16(p); /* the matrices' bf16 gathers: the gains go alone */
    if (p->zero < 3 || p->bucket_cap == 0) return p->n_layer_params - (b16 ? 2 : 0);
    const int64_t cap = (b16 ? 2 : 1) * p->bucket_cap / p->data.n; /* the same bytes */
    int64_t off = 0, b0 = 0;
    int nb = 0;
    param_id ids[P_COUNT];
    int64_t at[P_COUNT], nid = 0;
    for (int id = 0; id <= P_COUNT; id++) {
        const int end = id == P_COUNT;
        if (!end && (!plan_is_layer_param((param_id)id) || (b16 && plan_is_layer_norm(id))))
            continue;
        const int64_t cnt = end   ? 0
                            : b16 ? plan_z3_bf16_count(p, (param_id)id)
                                  : plan_geo_block(&p->g[id]) / p->data.n;
        if (off > b0 && (end || off - b0 + cnt > cap)) { /* close the bucket [b0, off) */
            for (int64_t t = 0; fn && t < nid; t++) fn(ctx, ids[t], b0, off - b0, at[t]);
            nb++, nid = 0, b0 = off;
        }
        if (end) break;
        ids[nid] = (param_id)id, at[nid++] = off - b0;
        off += cnt;
    }
    return nb;
}

/* The bucket asked for, capped at the gradients this rank reduces and rounded down to a multiple
 * of |data| (at least |data|); none for DP over --dcn, which reduces the whole gradient at once. */
static void bucket(plan *p, int64_t elems) {
    p->bucket_cap = 0;
    p->bucket_capped = elems > plan_bucket_limit(p);
    if (elems <= 0 || p->data.n == 1 || (p->zero == 0 && p->dcn.axes.n)) return;
    if (p->bucket_capped) elems = plan_bucket_limit(p);
    p->bucket_cap = elems < p->data.n ? p->data.n : elems / p->data.n * p->data.n;
}

int64_t plan_bucket_auto(const plan *p, const cost_link *link, int wire_bytes, double overhead) {
    if (p->data.n == 1) return 0;
    const double bytes =
        cost_bucket_bytes(p->zero ? COST_OP_REDUCE_SCATTER : COST_OP_ALL_REDUCE, link,
                          p->data.sizes, p->data.wraps, p->data.axes.n, p->data.alg, overhead);
    if (!(bytes > 0)) return 0;
    /* a power of two at least that large: should the link constants move a little (the caller
     * passes a chip's, which do not), the size, and so the order of the additions, does not */
    int64_t elems = 1;
    while ((double)elems * wire_bytes < bytes) elems *= 2;
    return elems;
}

/* Each role divides what it shards (config_for_mesh says so with the flags' names first). */
static int check(const plan *p, char *err, size_t errlen) {
    const model_shape *s = &p->s;
    const int64_t nY = p->tensor.n;
    if (s->L % p->pipe.n || s->N % nY || s->F % nY || s->V % nY || s->D % nY ||
        (s->K >= nY ? s->K % nY : nY % s->K))
        return errmsg_fail(err, errlen, "the tensor or pipeline axis does not divide the model");
    if (p->zero && s->D % p->data.n)
        return errmsg_fail(err, errlen, "d_model D = %lld is not divisible by |data| = %lld",
                           (long long)s->D, (long long)p->data.n);
    if (p->c.batch % p->batch.n || p->c.micro_batch % p->batch.n || p->c.batch % p->c.micro_batch)
        return errmsg_fail(err, errlen, "the batch does not divide over %lld data shards",
                           (long long)p->batch.n);
    return 0;
}

static void plan_list(plan *p, const plan_in *in);

int plan_build(plan *p, const plan_in *in, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->c = in->c;
    p->s = in->c.shape;
    p->batch = in->batch, p->data = in->data, p->dcn = in->dcn;
    p->tensor = in->tensor, p->pipe = in->pipe, p->expert = in->expert;
    p->erep = in->erep, p->cp = in->cp;
    if (p->expert.axes.n == 0) p->expert.n = 1, p->expert.index = 0;
    if (p->erep.axes.n == 0) p->erep.n = 1, p->erep.index = 0;
    if (p->cp.axes.n == 0) p->cp.n = 1, p->cp.index = 0;
    p->zero = p->data.n == 1 ? 0 : in->c.zero;
    p->overlap = in->c.overlap;
    p->alg = in->c.alg;
    /* --comm-dtype is the training's: generation and serving (forward only) move fp32 */
    p->wire = in->forward_only ? MESH_WIRE_F32 : in->c.comm_dtype;
    if (check(p, err, errlen) < 0) return -1;
    stage(p);
    if (plan_schedule_check(p, err, errlen) < 0) return -1;
    plan_schedule_stage(p);
    geometry(p);
    bucket(p, in->bucket);
    p->weight_buckets = plan_weight_buckets(p, NULL, NULL);
    p->cmatmul = in->cmatmul && p->tensor.n > 1;
    plan_list(p, in);
    return 0;
}

/* ---------------------------------------------------------------- the buffers */

int plan_dtype_bytes(plan_dtype t) {
    return t == PLAN_BF16 ? 2 : 4;
}

static void add(plan *p, plan_buf_id id, int slot, plan_owner owner, plan_mem cat, plan_dtype t,
                int64_t n) {
    CHECK(p->nbuf < PLAN_MAX_BUFS, "plan: more than %d buffers", PLAN_MAX_BUFS);
    p->buf[p->nbuf++] = (plan_buf){id, slot, owner, cat, t, n};
}

/* The model's storage (model_create) and the optimizer's moments (trainer.c). */
static void list_model(plan *p, int forward_only) {
    const int64_t Bl = forward_only ? 0 : p->model_seqs;
    model_sizes ms;
    const int bf16 = plan_model_compute(p);
    const model_stage_info st = plan_stage_info(p);
    model_sizes_of(&p->ms, &p->loc, Bl, &st, bf16, &ms);
    add(p, BUF_PARAMS, 0, PLAN_OWNER_MODEL, PLAN_MEM_PARAMS, PLAN_F32, p->param_elems);
    if (Bl > 0 && p->zero <= 1)
        add(p, BUF_GRADS, 0, PLAN_OWNER_MODEL, PLAN_MEM_GRADS, PLAN_F32, p->param_elems);
    add(p, BUF_ACTIVATIONS, 0, PLAN_OWNER_MODEL, PLAN_MEM_ACTIVATIONS, PLAN_F32, ms.act);
    add(p, BUF_TARGETS, 0, PLAN_OWNER_MODEL, PLAN_MEM_ACTIVATIONS, PLAN_I32, ms.targets);
    add(p, BUF_MODEL_SCRATCH, 0, PLAN_OWNER_MODEL, PLAN_MEM_BUFFERS, PLAN_F32, ms.scratch);
    if (bf16 == MODEL_BF16)
        add(p, BUF_PARAMS_BF16, 0, PLAN_OWNER_MODEL, PLAN_MEM_PARAMS, PLAN_BF16, p->param_elems);
    if (bf16) {
        add(p, BUF_ACTIVATIONS_BF16, 0, PLAN_OWNER_MODEL, PLAN_MEM_ACTIVATIONS, PLAN_BF16,
            ms.act_b);
        add(p, BUF_MODEL_SCRATCH_BF16, 0, PLAN_OWNER_MODEL, PLAN_MEM_BUFFERS, PLAN_BF16,
            ms.scratch_b);
    }
    if (forward_only || p->c.optimizer != OPT_ADAMW) return;
    add(p, BUF_OPT_M, 0, PLAN_OWNER_OPTIMIZER, PLAN_MEM_OPTIMIZER, PLAN_F32, p->state_elems);
    add(p, BUF_OPT_V, 0, PLAN_OWNER_OPTIMIZER, PLAN_MEM_OPTIMIZER, PLAN_F32, p->state_elems);
}

/* The tensor axis's scratch, the column packing, --dcn's flat gradient, the collective matmuls'
 * scratch. */
static void list_common(plan *p) {
    const plan_owner o = PLAN_OWNER_PAR;
    const int64_t BT = p->rows, D = p->s.D, nY = p->tensor.n;
    int64_t big = 0;
    for (int id = 0; id < P_COUNT; id++)
        if (!plan_is_layer_param((param_id)id)) big = max64(big, plan_geo_block(&p->g[id]));
    if (nY > 1) {
        /* (a MoE block's routing weights' gradient, BT·k of each rank: PLAN_EP_TP_SUM) */
        const int64_t tp = max64(max64(BT * D, max64(3, p->s.moe.k) * BT * nY), p->s.V);
        add(p, BUF_TENSOR_A, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, tp);
        add(p, BUF_TENSOR_B, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, tp);
        add(p, BUF_KV_EXCHANGE, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, D * p->s.H * nY);
    }
    add(p, BUF_COLUMN_PACK, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, max64(p->layer_elems, big));
    if (p->zero == 0 && p->dcn.axes.n)
        add(p, BUF_DCN, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, p->dcn_n + p->dcn_n / p->data.n);
    if (p->cmatmul) add(p, BUF_CMATMUL, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, cmm_scratch(BT, D, nY));
    plan_ep_bufs eb;
    plan_expert_bufs(p, &eb);
    if (eb.stage) add(p, BUF_EP_STAGE, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, eb.stage);
    if (eb.counts) add(p, BUF_EP_COUNTS, 0, o, PLAN_MEM_BUFFERS, PLAN_I32, eb.counts);
    if (eb.layer_grads)
        add(p, BUF_EP_LAYER_GRADS, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, eb.layer_grads);
    if (eb.gathered) add(p, BUF_EP_GATHERED, 0, o, PLAN_MEM_GATHERED, PLAN_F32, eb.gathered);
    if (eb.pack) add(p, BUF_EP_PACK, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, eb.pack);
    if (eb.update) add(p, BUF_EP_UPDATE, 0, o, PLAN_MEM_BUFFERS, PLAN_F32, eb.update);
}

/* ZeRO's shards, transient gradients and gathered weights; the buckets. */
static void list_zero(plan *p) {
    const plan_owner o = PLAN_OWNER_PAR;
    const int64_t layer = p->layer_elems, nX = p->data.n;
    static const plan_buf_id grad_of[P_COUNT] = {[P_EMBED] = BUF_EMBED_GRAD,
                                                 [P_FINAL_NORM] = BUF_FINAL_NORM_GRAD,
                                                 [P_UNEMBED] = BUF_UNEMBED_GRAD};
    static const plan_buf_id gathered_of[P_COUNT] = {[P_EMBED] = BUF_GATHERED_EMBED,
                                                     [P_FINAL_NORM] = BUF_GATHERED_FINAL_NORM,
                                                     [P_UNEMBED] = BUF_GATHERED_UNEMBED};
    if (p->zero >= 1) {
        int64_t most = 0;
        for (int id = 0; id < P_COUNT; id++) most = max64(most, p->g[id].shard_n);
        add(p, BUF_SHARD_GRADS, 0, o, PLAN_MEM_GRADS, PLAN_F32,
            p->shard_total + p->moe_shard_total);
        if (p->zero <= 2) /* --overlap: every shard, gathered after the update (zero.c) */
            add(p, BUF_UPDATE_STAGE, 0, o, PLAN_MEM_BUFFERS, PLAN_F32,
                p->overlap ? p->shard_total : most);
    }
    for (int k = 0; k < 2 && p->zero >= 2; k++) {
        add(p, BUF_LAYER_GRADS, k, o, PLAN_MEM_BUFFERS, PLAN_F32, layer);
        add(p, BUF_LAYER_SCATTERED, k, o, PLAN_MEM_BUFFERS, PLAN_F32, layer / nX);
    }
    for (int id = 0; id < P_COUNT && p->zero >= 2; id++)
        if (!plan_is_layer_param((param_id)id))
            add(p, grad_of[id], 0, o, PLAN_MEM_BUFFERS, PLAN_F32, plan_geo_block(&p->g[id]));
    for (int k = 0; k < 2 && p->zero == 3; k++) {
        if (plan_z3_bf16(p)) { /* the matrices in bf16 only, their own shards packed to send */
            const int64_t slot = plan_layer_offset_b(p, P_COUNT);
            int64_t send = 0;
            for (int id = 0; id < P_COUNT; id++)
                if (plan_is_layer_param((param_id)id) && !plan_is_layer_norm((param_id)id))
                    send += plan_z3_bf16_count(p, (param_id)id);
            add(p, BUF_GATHERED_LAYER, k, o, PLAN_MEM_GATHERED, PLAN_BF16, slot);
            add(p, BUF_GATHER_STAGE, k, o, PLAN_MEM_GATHERED, PLAN_BF16, slot);
            add(p, BUF_GATHER_SEND, k, o, PLAN_MEM_GATHERED, PLAN_BF16, send);
            continue;
        }
        add(p, BUF_GATHERED_LAYER, k, o, PLAN_MEM_GATHERED, PLAN_F32, layer);
        add(p, BUF_GATHER_STAGE, k, o, PLAN_MEM_GATHERED, PLAN_F32, layer);
    }
    for (int id = 0; id < P_COUNT && p->zero == 3; id++) {
        if (plan_is_layer_param((param_id)id)) continue;
        if (id == P_UNEMBED && plan_z3_bf16(p)) /* gathered in bf16, the shards padded to even */
            add(p, gathered_of[id], 0, o, PLAN_MEM_GATHERED, PLAN_BF16,
                plan_z3_bf16_count(p, P_UNEMBED) * nX);
        else
            add(p, gathered_of[id], 0, o, PLAN_MEM_GATHERED, PLAN_F32, plan_geo_block(&p->g[id]));
    }
    for (int k = 0; k < 2 && p->bucket_cap > 0; k++) {
        add(p, BUF_BUCKET_STAGE, k, o, PLAN_MEM_BUFFERS, PLAN_F32, p->bucket_cap);
        if (p->zero)
            add(p, BUF_BUCKET_RESULT, k, o, PLAN_MEM_BUFFERS, PLAN_F32, p->bucket_cap / nX);
        if (p->zero == 3 && !plan_z3_bf16(p))
            add(p, BUF_GATHER_SEND, k, o, PLAN_MEM_GATHERED, PLAN_F32, layer / nX);
    }
}

/* The context axis's buffers (plan_cp.c). */
static void list_cp(plan *p, int forward_only) {
    int64_t n[4];
    plan_cp_bufs(p, forward_only, n);
    if (!n[0]) return;
    add(p, BUF_CP_TOKENS, 0, PLAN_OWNER_EXEC, PLAN_MEM_BUFFERS, PLAN_I32, n[0]);
    if (n[1]) add(p, BUF_CP_SAVED, 0, PLAN_OWNER_PAR, PLAN_MEM_ACTIVATIONS, PLAN_F32, n[1]);
    add(p, BUF_CP_KV, 0, PLAN_OWNER_PAR, PLAN_MEM_BUFFERS, PLAN_F32, n[2]);
    add(p, BUF_CP_SCRATCH, 0, PLAN_OWNER_PAR, PLAN_MEM_BUFFERS, PLAN_F32, n[3]);
    const int64_t moe = plan_cp_moe_floats(p);
    if (moe) add(p, BUF_CP_MOE, 0, PLAN_OWNER_PAR, PLAN_MEM_BUFFERS, PLAN_F32, (p->cp.n + 1) * moe);
}

static void plan_list(plan *p, const plan_in *in) {
    p->nbuf = p->ncall = 0;
    list_model(p, in->forward_only);
    if (plan_trivial(p)) return;
    list_common(p);
    list_zero(p);
    list_cp(p, in->forward_only);
    if (p->pipe.n > 1 && !in->forward_only) {
        add(p, BUF_PIPE_DOUT, 0, PLAN_OWNER_EXEC, PLAN_MEM_BUFFERS, PLAN_F32, p->rows * p->s.D);
        add(p, BUF_PIPE_DSEND, 0, PLAN_OWNER_EXEC, PLAN_MEM_BUFFERS, PLAN_F32,
            (int64_t)p->nslots * p->chunks * p->rows * p->s.D);
    }
    plan_list_calls(p);
}

/* ---------------------------------------------------------------- reading the list */

const plan_buf *plan_buffer(const plan *p, plan_buf_id id, int slot) {
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].id == id && p->buf[i].slot == slot) return &p->buf[i];
    return NULL;
}

void plan_memory(const plan *p, plan_mem_bytes *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->nbuf; i++)
        out->bytes[p->buf[i].cat] += p->buf[i].n * plan_dtype_bytes(p->buf[i].dtype);
}

int plan_alloc(const plan *p, plan_owner owner, plan_ptrs *ptr) {
    memset(ptr, 0, sizeof *ptr);
    for (int i = 0; i < p->nbuf; i++) {
        const plan_buf *b = &p->buf[i];
        if (b->owner != owner) continue;
        /* alloc_floats: 64-byte aligned and zeroed, in whole floats */
        const int64_t floats = (b->n * plan_dtype_bytes(b->dtype) + 3) / 4;
        if (!(ptr->p[b->id][b->slot] = alloc_floats(floats))) {
            plan_free(p, owner, ptr);
            return -1;
        }
    }
    return 0;
}

void plan_free(const plan *p, plan_owner owner, plan_ptrs *ptr) {
    for (int i = 0; i < p->nbuf; i++) {
        const plan_buf *b = &p->buf[i];
        if (b->owner != owner) continue;
        alloc_release(ptr->p[b->id][b->slot], (b->n * plan_dtype_bytes(b->dtype) + 3) / 4);
        ptr->p[b->id][b->slot] = NULL;
    }
}

/* ---------------------------------------------------------------- slabs and names */

int64_t plan_layer_offset(const plan *p, param_id id) {
    int64_t off = 0;
    for (int j = 0; j < (int)id; j++)
        if (plan_is_layer_param((param_id)j)) off += plan_geo_block(&p->g[j]);
    return off;
}

int64_t plan_z3_bf16_count(const plan *p, param_id id) {
    const int64_t cnt = plan_geo_block(&p->g[id]) / p->data.n;
    return cnt + cnt % 2;
}

int64_t plan_layer_offset_b(const plan *p, param_id id) {
    int64_t off = 0;
    for (int j = 0; j < (int)id; j++) {
        if (!plan_is_layer_param((param_id)j)) continue;
        const int64_t n = plan_geo_block(&p->g[j]);
        const int64_t units = plan_is_layer_norm((param_id)j) ? 2 * n : n + p->data.n;
        off += (units + 31) / 32 * 32;
    }
    return off;
}

/* Block-local rectangle → the parameter's native (global) slab. */
static param_slab native_slab(const plan *p, param_id id, int64_t ra, int64_t rn, int64_t ca,
                              int64_t cn) {
    const plan_geo *g = &p->g[id];
    param_info pi = model_param_info(&p->s, id);
    /* the stage's blocks (a model with experts: the dense MLPs stack the dense blocks) */
    const int mlp = p->s.moe.E > 0 && (id == P_W_GATE || id == P_W_UP || id == P_W_DOWN);
    const int64_t b0 = mlp ? p->mlp0 : p->l0;
    if (pi.ndim == 3) return (param_slab){{b0, ra, ca}, {g->nb, rn, cn}};
    if (g->stacked) return (param_slab){{b0, ca, 0}, {g->nb, cn, 1}};
    if (g->nb == 0) return (param_slab){{0, 0, 0}, {0, 0, 0}};
    if (pi.ndim == 2) return (param_slab){{ra, ca, 0}, {rn, cn, 1}};
    return (param_slab){{ca, 0, 0}, {cn, 1, 1}};
}

param_slab plan_tp_slab(const plan *p, param_id id) {
    if (id >= P_COUNT) return plan_moe_slab(p, id);
    const plan_geo *g = &p->g[id];
    return native_slab(p, id, g->r0, g->R, g->c0, g->C);
}

param_slab plan_shard_slab(const plan *p, param_id id) {
    const plan_geo *g = &p->g[id];
    if (g->zdim == 0) {
        int64_t rn = g->R / p->data.n;
        return native_slab(p, id, g->r0 + p->data.index * rn, rn, g->c0, g->C);
    }
    int64_t cn = g->C / p->data.n;
    return native_slab(p, id, g->r0, g->R, g->c0 + p->data.index * cn, cn);
}

param_slab plan_model_slab(const plan *p, param_id id) {
    if (id >= P_COUNT) return plan_moe_slab(p, id);
    return p->zero == 3 ? plan_shard_slab(p, id) : plan_tp_slab(p, id);
}

const char *plan_pass_name(plan_pass s) {
    static const char *const n[] = {"forward", "backward", "stage", "update", "step"};
    return n[s];
}

const char *plan_path_name(plan_path s) {
    static const char *const n[] = {"critical", "blocking", "prefetched", "async", "hidden"};
    return n[s];
}
