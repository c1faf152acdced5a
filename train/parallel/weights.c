/* weights: the model's weights as the passes read them over the data axes X, and the update's
 * view of them.
 *
 * ZeRO-3 (FSDP): AllGather_X of a layer's shards just in time, into one of two slots
 * (par_gathers), the next layer's prefetched with --overlap; the non-layer weights gathered when
 * used. With --bucket the layer's shards are packed into buckets (plan_weight_buckets): each
 * bucket one AllGather_X, so that a layer of many small tensors pays the hop latency a few times
 * instead of once per tensor; gathers only move data, bit-identical to the per-tensor ones.
 * With --compute-dtype bf16 the matrices (a layer's and the unembedding) move in bf16 on the wire
 * (PLAN_Z3_GATHER_BF16, one gather per tensor): the bf16 rounding of the shards, the copy the
 * model multiplies; the gains stay fp32.
 *
 * ZeRO-1/2 (par_update): after updating its shard of a parameter a rank AllGather_X's the
 * updated shards back into the whole parameter. With --overlap those gathers are deferred to the
 * next step, started layer by layer in the order the forward reads the parameters (the embedding,
 * layers l0 .. l1−1, the final norm and the unembedding) and waited for, layer by layer, only
 * when the forward reads it, so that they hide behind the forward's compute instead of the short
 * update's. The parameters' state (par_params_state) shows where a reader stands: a reader
 * outside the model's hooks waits for WHOLE (par_params_sync). */
#include <string.h>

#include "kernels/bf16.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- ZeRO-3's layer gathers */

typedef struct {
    struct par *p;
    int64_t l;
    int k, async, started;
} wgather;

/* Visitor: copies the tensor's shard into the send staging; the bucket's last tensor starts
 * its gather. */
static void bucket_pack(void *ctx, param_id id, int64_t b0, int64_t blen, int64_t at) {
    wgather *w = ctx;
    struct par *p = w->p;
    const int64_t cnt = plan_geo_block(&p->pl->g[id]) / p->pl->data.n;
    const int64_t bi = plan_block_index(p->pl, id, w->l); /* < 0: a MoE block's dense MLP */
    if (bi >= 0)
        floats_copy(p->w.send[w->k] + b0 + at, p->w.shards + p->pl->shard_offset[id] + bi * cnt,
                    cnt);
    if (at + cnt < blen) return;
    float *dst = p->w.stage[w->k] + b0 * p->pl->data.n;
    const float *src = p->w.send[w->k] + b0;
    if (w->async)
        p->w.reqs[w->k][w->started++] = par_start(p, PLAN_Z3_GATHER, dst, src, blen);
    else
        par_run(p, PLAN_Z3_GATHER, dst, src, blen);
}

/* Visitor: rank j's part of the tensor, at stage + b0·|data| + j·blen + at, into its slot of the
 * gathered layer (a column-sharded tensor's part j is its columns [j·C/|data|, (j+1)·C/|data|)). */
static void bucket_scatter(void *ctx, param_id id, int64_t b0, int64_t blen, int64_t at) {
    const wgather *w = ctx;
    struct par *p = w->p;
    const plan_geo *g = &p->pl->g[id];
    const int64_t nX = p->pl->data.n, cnt = plan_geo_block(g) / nX, cl = g->C / nX;
    float *dst = par_layer_slot(p, p->w.layer[w->k], id);
    if (mesh_no_data(plan_geo_block(g) * (int64_t)sizeof(float))) return;
    for (int64_t j = 0; j < nX; j++) {
        const float *part = p->w.stage[w->k] + b0 * nX + j * blen + at;
        if (par_column_sharded(g))
            for (int64_t r = 0; r < g->R; r++)
                floats_copy(dst + r * g->C + j * cl, part + r * cl, cl);
        else
            floats_copy(dst + j * cnt, part, cnt);
    }
}

/* ---- in bf16 (plan_z3_bf16): the matrices gathered and held in bf16, the norm gains fp32 ---- */

/* Rank's shard of layer l's matrix id rounded to bf16 at send (an even count: a zero pads it). */
static void pack_shard_b(struct par *p, param_id id, int64_t l, uint16_t *send) {
    const int64_t cnt = plan_geo_block(&p->pl->g[id]) / p->pl->data.n;
    const int64_t bi = plan_block_index(p->pl, id, l);
    if (mesh_no_data(cnt * 2)) return;
    kern_bf16_pack(send, p->w.shards + p->pl->shard_offset[id] + bi * cnt, cnt);
    if (plan_z3_bf16_count(p->pl, id) > cnt) send[cnt] = 0;
}

/* Starts (or runs) a bf16 gather of count elements a rank into out, as request r of slot k. */
static void gather_b(struct par *p, int k, int r, int async, uint16_t *out, const uint16_t *in,
                     int64_t count) {
    if (async)
        p->w.reqs[k][r] = par_start_b(p, PLAN_Z3_GATHER_BF16, out, in, count);
    else
        par_run_b(p, PLAN_Z3_GATHER_BF16, out, in, count);
}

/* Visitor (plan_weight_buckets in bf16, 2-byte elements): packs the matrix's shard at its place
 * in the bucket's send; the bucket's last one starts its gather into the stage at b0·|data|. */
static void bucket_pack_b(void *ctx, param_id id, int64_t b0, int64_t blen, int64_t at) {
    wgather *w = ctx;
    struct par *p = w->p;
    pack_shard_b(p, id, w->l, p->w.send_b[w->k] + b0 + at);
    if (at + plan_z3_bf16_count(p->pl, id) < blen) return;
    gather_b(p, w->k, w->started++, w->async, p->w.stage_b[w->k] + b0 * p->pl->data.n,
             p->w.send_b[w->k] + b0, blen);
}

/* Visitor: the matrix's n parts (blen apart in the stage) into its place in the slot. */
static void bucket_scatter_b(void *ctx, param_id id, int64_t b0, int64_t blen, int64_t at) {
    const wgather *w = ctx;
    struct par *p = w->p;
    const plan_geo *g = &p->pl->g[id];
    const int64_t nX = p->pl->data.n, cnt = plan_geo_block(g) / nX;
    uint16_t *dst = p->w.layer_b[w->k] + plan_layer_offset_b(p->pl, id);
    const uint16_t *src = p->w.stage_b[w->k] + b0 * nX + at;
    if (g->zdim)
        par_unpack_cols_b(dst, src, g->R, g->C, nX, blen);
    else
        par_unpack_cols_b(dst, src, 1, cnt * nX, nX, blen);
}

/* Starts (or runs) the gathers of layer l's shards into slot k: the norm gains in fp32 straight
 * into the slot (one row: their column sharding is a concatenation); the matrices' shards rounded
 * to bf16 at send, with --bucket packed into buckets (plan_weight_buckets) gathered into the
 * stage, else each gathered straight into the slot where its parts land in place (a row-sharded
 * block of even shards), or into the stage. */
static void gather_layer_start_b(struct par *p, int64_t l, int k, int async) {
    int r = 0;
    for (int id = 0; id < P_COUNT; id++) {
        const int64_t bi = plan_block_index(p->pl, (param_id)id, l);
        if (!plan_is_layer_norm((param_id)id) || bi < 0) continue;
        const plan_geo *g = &p->pl->g[id];
        const int64_t cnt = plan_geo_block(g) / p->pl->data.n;
        CHECK(g->R == 1, "a norm gain of %lld rows", (long long)g->R);
        float *dst = (float *)(void *)(p->w.layer_b[k] + plan_layer_offset_b(p->pl, (param_id)id));
        const float *src = p->w.shards + p->pl->shard_offset[id] + bi * cnt;
        if (async)
            p->w.reqs[k][r++] = par_start(p, PLAN_Z3_GATHER, dst, src, cnt);
        else
            par_run(p, PLAN_Z3_GATHER, dst, src, cnt);
    }
    if (p->pl->bucket_cap) {
        wgather w = {p, l, k, async, r};
        plan_weight_buckets(p->pl, bucket_pack_b, &w);
        return;
    }
    int64_t soff = 0;
    for (int id = 0; id < P_COUNT; id++) {
        if (!plan_is_layer_param((param_id)id) || plan_is_layer_norm((param_id)id) ||
            plan_block_index(p->pl, (param_id)id, l) < 0)
            continue;
        const plan_geo *g = &p->pl->g[id];
        const int64_t c2 = plan_z3_bf16_count(p->pl, (param_id)id);
        const int64_t off = plan_layer_offset_b(p->pl, (param_id)id);
        uint16_t *send = p->w.send_b[k] + soff;
        soff += c2;
        pack_shard_b(p, (param_id)id, l, send);
        const int in_place = !g->zdim && c2 == plan_geo_block(g) / p->pl->data.n;
        gather_b(p, k, r++, async, (in_place ? p->w.layer_b[k] : p->w.stage_b[k]) + off, send, c2);
    }
}

/* The staged blocks of slot k into place. */
static void gather_layer_finish_b(struct par *p, int k) {
    const int64_t nX = p->pl->data.n;
    if (p->pl->bucket_cap) {
        wgather w = {p, 0, k, 0, 0};
        plan_weight_buckets(p->pl, bucket_scatter_b, &w);
        return;
    }
    for (int id = 0; id < P_COUNT; id++) {
        const plan_geo *g = &p->pl->g[id];
        if (!plan_is_layer_param((param_id)id) || plan_is_layer_norm((param_id)id) ||
            plan_block_index(p->pl, (param_id)id, p->w.layer_id[k]) < 0)
            continue;
        const int64_t off = plan_layer_offset_b(p->pl, (param_id)id), cnt = plan_geo_block(g) / nX;
        const int64_t c2 = plan_z3_bf16_count(p->pl, (param_id)id);
        if (g->zdim)
            par_unpack_cols_b(p->w.layer_b[k] + off, p->w.stage_b[k] + off, g->R, g->C, nX, c2);
        else if (c2 != cnt)
            par_unpack_cols_b(p->w.layer_b[k] + off, p->w.stage_b[k] + off, 1, cnt * nX, nX, c2);
    }
}

/* The model's view of slot k in bf16: the gains' fp32 pointers and the matrices' bf16 ones. */
static layer_w layer_weights_b(const struct par *p, int k) {
    static const param_id mats[7] = {P_WQ, P_WK, P_WV, P_WO, P_W_GATE, P_W_UP, P_W_DOWN};
    const uint16_t *s = p->w.layer_b[k];
    layer_w w = {0};
    w.attn_norm = (const float *)(const void *)(s + plan_layer_offset_b(p->pl, P_ATTN_NORM));
    w.mlp_norm = (const float *)(const void *)(s + plan_layer_offset_b(p->pl, P_MLP_NORM));
    for (int i = 0; i < 7; i++) w.b16[i] = s + plan_layer_offset_b(p->pl, mats[i]);
    return w;
}

/* ---- the fp32 gathers ---- */

/* Are a layer's weights gathered in buckets (not with bf16 gathers: plan_z3_bf16)? */
static int weight_buckets(const struct par *p) {
    return p->pl->bucket_cap && !plan_z3_bf16(p->pl);
}

/* Starts (or runs) the gathers of layer l's shards into slot k. */
static void gather_layer_start(struct par *p, int64_t l, int k, int async) {
    p->w.layer_id[k] = l;
    if (plan_z3_bf16(p->pl)) {
        gather_layer_start_b(p, l, k, async);
        return;
    }
    if (weight_buckets(p)) {
        wgather w = {p, l, k, async, 0};
        plan_weight_buckets(p->pl, bucket_pack, &w);
        return;
    }
    for (int id = 0; id < P_COUNT; id++) {
        const int64_t bi = plan_block_index(p->pl, (param_id)id, l);
        if (!plan_is_layer_param((param_id)id) || bi < 0) continue; /* (MoE: expert_zero.c) */
        const plan_geo *g = &p->pl->g[id];
        const int64_t cnt = plan_geo_block(g) / p->pl->data.n;
        const float *src = p->w.shards + p->pl->shard_offset[id] + bi * cnt;
        float *dst = par_layer_slot(p, g->zdim ? p->w.stage[k] : p->w.layer[k], (param_id)id);
        if (async)
            p->w.reqs[k][id] = par_start(p, PLAN_Z3_GATHER, dst, src, cnt);
        else
            par_run(p, PLAN_Z3_GATHER, dst, src, cnt);
    }
}

static void gather_layer_finish(struct par *p, int k) {
    for (int id = 0; id < P_COUNT; id++) {
        mesh_wait(p->w.reqs[k][id]);
        p->w.reqs[k][id] = NULL;
    }
    if (plan_z3_bf16(p->pl)) {
        gather_layer_finish_b(p, k);
        return;
    }
    if (weight_buckets(p)) {
        wgather w = {p, 0, k, 0, 0};
        plan_weight_buckets(p->pl, bucket_scatter, &w);
        return;
    }
    for (int id = 0; id < P_COUNT; id++) {
        const plan_geo *g = &p->pl->g[id];
        if (!plan_is_layer_param((param_id)id) || !g->zdim ||
            plan_block_index(p->pl, (param_id)id, p->w.layer_id[k]) < 0)
            continue;
        par_unpack_cols(par_layer_slot(p, p->w.layer[k], (param_id)id),
                        par_layer_slot(p, p->w.stage[k], (param_id)id), g->R, g->C, p->pl->data.n);
    }
}

/* ZeRO-3: layer l gathered into slot l mod 2 (its prefetch completed, or the gathers run now),
 * the next in direction dir prefetched with --overlap. */
static const float *gathered_layer(struct par *p, int64_t l, int dir) {
    par_gathers *w = &p->w;
    const int k = (int)(l % 2);
    if (w->layer_id[k] != l) {
        for (int id = 0; id < P_COUNT; id++) mesh_wait(w->reqs[k][id]), w->reqs[k][id] = NULL;
        gather_layer_start(p, l, k, 0);
        gather_layer_finish(p, k);
    } else if (w->pending[k]) {
        gather_layer_finish(p, k);
    }
    w->pending[k] = 0;
    const int64_t next = l + dir;
    if (p->pl->overlap && next >= p->pl->l0 && next < p->pl->l1 && w->layer_id[1 - k] != next)
        gather_layer_start(p, next, 1 - k, 1), w->pending[1 - k] = 1;
    return w->layer[k];
}

/* ---------------------------------------------------------------- the hooks */

static int update_gather(struct par *p, param_id id, int64_t l, int start);

/* The deferred gathers' tickets the forward waits for before layer l (l0 − 1: the embedding):
 * those started before layer l's and layer l's (a layer's count: its parameters' blocks, a MoE
 * block's without the dense MLP). */
static int64_t update_ticket(struct par *p, int64_t l) {
    const par_update *u = &p->up;
    if (u->state != PAR_PARAMS_GATHERING) return 0;
    int64_t t = u->base + u->first;
    for (int64_t j = p->pl->l0; j <= l; j++)
        for (int id = 0; id < P_COUNT; id++)
            if (plan_is_layer_param((param_id)id)) t += update_gather(p, (param_id)id, j, 0);
    return t;
}

static int mlp_id(int id) {
    return id == P_W_GATE || id == P_W_UP || id == P_W_DOWN;
}

/* Counts the dense MLPs' deferred gathers of the layers up to l that a forward waits for now. */
static void mlp_waits(struct par *p, int64_t l) {
    par_update *u = &p->up;
    if (u->state != PAR_PARAMS_GATHERING) return;
    for (; u->waited_l < l; u->waited_l++)
        for (int id = P_W_GATE; id <= P_W_DOWN; id++)
            u->mlp_waited += update_gather(p, (param_id)id, u->waited_l + 1, 0);
}

layer_w par_hk_layer_weights(void *ctx, model *mod, int64_t l, int dir) {
    struct par *p = ctx;
    par_poll(p);
    if (p->pl->zero < 3) {
        weights_start_due(p);
        mlp_waits(p, l);
        queue_wait(p, update_ticket(p, l));
        return model_layer_weights_local(mod, l);
    }
    float *b[PAR_LAYER_BLOCKS];
    par_layer_blocks(p, (float *)gathered_layer(p, l, dir), b);
    layer_w w = {b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],  b[8],
                 NULL, NULL, NULL, NULL, NULL, NULL, NULL, {NULL}};
    if (plan_z3_bf16(p->pl)) w = layer_weights_b(p, (int)(l % 2));
    if (model_layer_is_moe(&p->pl->s, l)) ep_layer_weights(p, mod, l, &w);
    return w;
}

void par_hk_layer_release(void *ctx, model *mod, int64_t l) {
    (void)mod, (void)l; /* slots are recycled two layers later */
    par_poll(ctx);
}

const float *par_hk_weight(void *ctx, model *mod, param_id id) {
    struct par *p = ctx;
    if (p->pl->zero < 3) {
        weights_start_due(p);
        const par_update *u = &p->up;
        queue_wait(p, id == P_EMBED ? update_ticket(p, p->pl->l0 - 1)
                      : u->state == PAR_PARAMS_GATHERING ? u->end
                                                         : 0);
        return model_param(mod, id, NULL);
    }
    float *dst = p->w.param[id];
    if (!dst) return NULL; /* held in bf16 only: par_hk_weight_b16 */
    const plan_geo *g = &p->pl->g[id];
    const int64_t cnt = plan_geo_block(g) / p->pl->data.n;
    const float *src = p->w.shards + p->pl->shard_offset[id];
    if (g->zdim) {
        par_run(p, PLAN_Z3_GATHER_PARAM, p->column_pack, src, cnt);
        par_unpack_cols(dst, p->column_pack, g->R, g->C, p->pl->data.n);
    } else {
        par_run(p, PLAN_Z3_GATHER_PARAM, dst, src, cnt);
    }
    return dst;
}

/* ZeRO-3 in bf16: the unembedding W[D_X, V_Y] gathered in bf16 at each use, its shard rounded
 * at send (packed into the column packing's scratch, which holds any non-layer block in fp32; an
 * odd count padded); the rows are a concatenation of the shards, moved down over the padding in
 * place. */
const uint16_t *par_hk_weight_b16(void *ctx, model *mod, param_id id) {
    struct par *p = ctx;
    (void)mod;
    if (id != P_UNEMBED || !p->w.unembed_b) return NULL;
    const int64_t nX = p->pl->data.n, cnt = plan_geo_block(&p->pl->g[id]) / nX;
    const int64_t c2 = plan_z3_bf16_count(p->pl, id);
    uint16_t *out = p->w.unembed_b, *send = (uint16_t *)(void *)p->column_pack;
    CHECK(!p->pl->g[id].zdim, "the unembedding's ZeRO shards are its rows");
    if (!mesh_no_data(cnt * 2)) {
        kern_bf16_pack(send, p->w.shards + p->pl->shard_offset[id], cnt);
        if (c2 > cnt) send[cnt] = 0;
    }
    par_run_b(p, PLAN_Z3_GATHER_BF16, out, send, c2);
    for (int64_t j = 1; c2 > cnt && j < nX && !mesh_no_data(cnt * 2); j++)
        memmove(out + j * cnt, out + j * c2, (size_t)cnt * sizeof *out);
    return out;
}

void par_hk_ready(void *ctx, model *mod) {
    struct par *p = ctx;
    if (p->pl->zero == 3) p->w.shards = model_params_flat(mod, NULL); /* the model stores them */
}

/* ---------------------------------------------------------------- ZeRO-1/2's update */

/* This rank's shard of the model's whole (TP-local) parameter id, into sh. */
static void shard_select(struct par *p, model *mod, param_id id, float *sh) {
    const plan_geo *g = &p->pl->g[id];
    const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
    const float *full = model_param(mod, id, NULL);
    for (int64_t b = 0; b < g->nb; b++) {
        const float *src = full + b * n;
        if (par_column_sharded(g)) {
            par_pack_cols(p->column_pack, src, g->R, g->C, p->pl->data.n);
            src = p->column_pack;
        }
        floats_copy(sh + b * ns, src + p->pl->data.index * ns, ns);
    }
}

par_owned par_owned_slice(par *p, model *mod, param_id id) {
    if (p && p->pl->zero && id >= P_COUNT) return ep_owned_slice(p, mod, id);
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
    const int64_t off = p->pl->shard_offset[id];
    float *w = p->w.shards + off; /* ZeRO-3: the model's own shard */
    if (p->pl->zero <= 2) {       /* ZeRO-1/2: this rank's shard of the whole parameter, staged */
        par_params_sync(p);
        w = p->up.stage + (p->pl->overlap ? off : 0);
        shard_select(p, mod, id, w);
    }
    return (par_owned){w, p->shard_grads + off, p->pl->g[id].shard_n, off};
}

void par_owned_done(par *p, model *mod, param_id id) {
    if (!p || p->pl->zero == 0 || p->pl->zero == 3) return;
    if (id >= P_COUNT) {
        ep_owned_done(p, mod, id);
        return;
    }
    /* ZeRO-1/2: AllGather_X the updated shard back into the whole (TP-local) parameter; with
     * --overlap deferred to the next step (weights_start_due; a column-sharded block, which
     * needs unpacking, is gathered now) */
    const plan_geo *g = &p->pl->g[id];
    const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
    float *full = model_param(mod, id, NULL);
    const float *stage = p->up.stage + (p->pl->overlap ? p->pl->shard_offset[id] : 0);
    for (int64_t b = 0; b < g->nb; b++) {
        if (par_column_sharded(g)) {
            par_run(p, PLAN_UPDATE_GATHER, p->column_pack, stage + b * ns, ns);
            par_unpack_cols(full + b * n, p->column_pack, g->R, g->C, p->pl->data.n);
        } else if (p->pl->overlap) {
            p->up.mod = mod, p->up.state = PAR_PARAMS_UPDATED; /* par_after_update: DUE */
        } else {
            par_run(p, PLAN_UPDATE_GATHER, full + b * n, stage + b * ns, ns);
        }
    }
}

/* Starts the deferred gather of parameter id's updated shard for layer l (its block in the
 * parameter's stack; a non-layer parameter: l = −1, its one block); returns 1 if it did (start
 * 0: only whether it would). */
static int update_gather(struct par *p, param_id id, int64_t l, int start) {
    const plan_geo *g = &p->pl->g[id];
    const int64_t b = l < 0 ? 0 : plan_block_index(p->pl, id, l); /* < 0: a MoE block's MLP */
    if (g->shard_n == 0 || par_column_sharded(g) || b < 0 || b >= g->nb) return 0;
    if (!start) return 1;
    const int64_t n = plan_geo_block(g), ns = n / p->pl->data.n;
    float *full = model_param(p->up.mod, id, NULL) + b * n;
    const float *stage = p->up.stage + p->pl->shard_offset[id] + b * ns;
    queue_push(p, (par_pending){.req = par_start(p, PLAN_UPDATE_GATHER, full, stage, ns)});
    p->up.mlp_started += mlp_id(id);
    return 1;
}

void weights_start_due(struct par *p) {
    par_update *u = &p->up;
    if (u->state != PAR_PARAMS_DUE) return;
    u->state = PAR_PARAMS_GATHERING;
    u->waited_l = p->pl->l0 - 1;
    u->base = queue_last(&p->q);
    u->first = update_gather(p, P_EMBED, -1, 1);
    for (int64_t l = p->pl->l0; l < p->pl->l1; l++)
        for (int id = 0; id < P_COUNT; id++)
            if (plan_is_layer_param((param_id)id)) update_gather(p, (param_id)id, l, 1);
    update_gather(p, P_FINAL_NORM, -1, 1);
    update_gather(p, P_UNEMBED, -1, 1);
    u->end = queue_last(&p->q);
}

par_params_state par_params(const par *p) {
    return p ? p->up.state : PAR_PARAMS_WHOLE;
}

void par_mlp_gathers(const par *p, int64_t *started, int64_t *waited) {
    *started = p ? p->up.mlp_started : 0, *waited = p ? p->up.mlp_waited : 0;
}

void par_after_update(par *p, model *mod) {
    (void)mod;
    if (!p) return;
    queue_drain(p);
    if (p->up.state == PAR_PARAMS_UPDATED) p->up.state = PAR_PARAMS_DUE; /* par_owned_done's */
    if (p->pl->zero == 3) p->w.layer_id[0] = p->w.layer_id[1] = p->ep.gathered_lm = -1; /* stale */
}

void par_params_sync(par *p) {
    if (!p) return;
    weights_start_due(p);
    if (p->up.state != PAR_PARAMS_GATHERING) return;
    queue_wait(p, p->up.end);
    p->up.state = PAR_PARAMS_WHOLE;
}

void par_params_loaded(par *p, model *mod) {
    par_after_update(p, mod); /* the same: derived copies of the parameters are stale */
}
