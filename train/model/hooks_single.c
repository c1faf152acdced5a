/* The single-rank hook table (see hooks.h): local extents equal the global ones, every slab is
 * the whole tensor, and communication points reduce to copies and adds. A sharded table reuses
 * the exported building blocks where one of its axes is trivial. */
#include <string.h>

#include "train/config/alloc.h"
#include "train/model/hooks.h"

layer_w model_layer_weights_local(model *m, int64_t l) {
    float *p[16];
    model_layer_blocks(m, model_shape_of(m), l, model_param, model_slab, p);
    return (layer_w){p[0], p[1],  p[2],  p[3],  p[4],  p[5],  p[6],  p[7],  p[8],
                     p[9], p[10], p[11], p[12], p[13], p[14], p[15], {NULL}};
}

layer_g model_layer_grads_local(model *m, int64_t l) {
    float *p[16];
    model_layer_blocks(m, model_shape_of(m), l, model_grad, model_slab, p);
    return (layer_g){p[0], p[1], p[2],  p[3],  p[4],  p[5],  p[6],  p[7],
                     p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]};
}

/* ---------------------------------------------------------------- the table's entries */

static void extents(void *ctx, const model_shape *s, model_extents *out) {
    (void)ctx;
    model_extents_full(s, out);
}
static void slab(void *ctx, const model_shape *s, param_id id, param_slab *out) {
    (void)ctx;
    model_slab_full(s, id, out);
}
static void stage(void *ctx, const model_shape *s, model_stage_info *out) {
    (void)ctx;
    *out = (model_stage_info){0, s->L, 1, 1, 0, 0};
}
static int has_grads(void *ctx) {
    (void)ctx;
    return 1;
}
static void on_model(void *ctx, model *m) {
    (void)ctx, (void)m;
}
static layer_w layer_weights(void *ctx, model *m, int64_t l, int dir) {
    (void)ctx, (void)dir;
    return model_layer_weights_local(m, l);
}
static void on_layer(void *ctx, model *m, int64_t l) {
    (void)ctx, (void)m, (void)l;
}
static layer_g layer_grads(void *ctx, model *m, int64_t l) {
    (void)ctx;
    return model_layer_grads_local(m, l);
}
static const float *weight(void *ctx, model *m, param_id id) {
    (void)ctx;
    return model_param(m, id, NULL);
}
static const uint16_t *weight_b16(void *ctx, model *m, param_id id) {
    (void)ctx, (void)m, (void)id;
    return NULL; /* the model's own weights: it makes their bf16 copy */
}
static float *grad(void *ctx, model *m, param_id id) {
    (void)ctx;
    return model_grad(m, id, NULL);
}
static void on_rows(void *ctx, model *m, float *x, int64_t BT) {
    (void)ctx, (void)m, (void)x, (void)BT;
}
static void gather_vocab(void *ctx, model *m, float *logits, const float *logits_loc) {
    (void)ctx;
    floats_copy(logits, logits_loc, model_extents_of(m)->Vl);
}
/* The tensor axis's hooks: never called on one rank (the model's extents say D_Y = D). */
static float *reduce_out(void *ctx, model *m, model_product_fn fn, void *fctx, int64_t BT) {
    (void)ctx, (void)m, (void)fn, (void)fctx, (void)BT;
    CHECK(0, "reduce_out: no tensor axis on one rank");
    return NULL;
}
static int gather_out(void *ctx, model *m, float *out, const float *shard, int64_t BT, int defer) {
    (void)ctx, (void)m, (void)out, (void)shard, (void)BT, (void)defer;
    CHECK(0, "gather_out: no tensor axis on one rank");
    return 0;
}
static const float *gather_cols(void *ctx, model *m, float *x, const float *own, int64_t BT,
                                model_block_fn fn, void *fctx) {
    (void)ctx, (void)m, (void)own, (void)BT, (void)fn, (void)fctx;
    CHECK(0, "gather_cols: no tensor axis on one rank");
    return x;
}
static const float *gather_tensor(void *ctx, model *m, const float *mine, int64_t n) {
    (void)ctx, (void)m, (void)n;
    CHECK(0, "gather_tensor: no tensor axis on one rank");
    return mine;
}
static void tensor_sum(void *ctx, model *m, float *x, int64_t n) {
    (void)ctx, (void)m, (void)x, (void)n;
    CHECK(0, "moe_tensor_sum: no tensor axis on one rank");
}
/* A piece is the whole sequence: its own statistics, no slots before it. */
static void cp_sum(void *ctx, model *m, double *rec, int64_t n, int64_t E) {
    (void)ctx, (void)m;
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; e < E; e++) rec[(i * 3 + 2) * E + e] = 0.0;
}
static void partial_end(void *ctx, model *m, float *dr, float *part, int64_t BT) {
    (void)ctx, (void)m, (void)dr, (void)part, (void)BT;
}
static void partial_done(void *ctx, model *m, float *dr, int64_t BT) {
    (void)ctx, (void)m, (void)dr, (void)BT;
}
/* The expert axis's hooks without one: the experts' rows are the dispatched rows themselves (the
 * model passes the same buffers), grouped as dispatched. */
void model_moe_to_experts_local(void *ctx, model *m, int64_t *counts, float *dst,
                                const float *src, const int64_t *offs, int64_t *loffs, int64_t w) {
    (void)ctx, (void)counts, (void)w;
    CHECK(dst == src, "moe_to_experts: the rows move nowhere without an expert axis");
    if (offs) memcpy(loffs, offs, (size_t)(model_shape_of(m)->moe.E + 1) * sizeof *offs);
}
void model_moe_from_experts_local(void *ctx, model *m, int64_t *counts, float *dst,
                                  const float *src, int64_t w) {
    (void)ctx, (void)m, (void)counts, (void)w;
    CHECK(dst == src, "moe_from_experts: the rows move nowhere without an expert axis");
}
static void poll(void *ctx) {
    (void)ctx;
}
static void on_values(void *ctx, float *x, int64_t n) {
    (void)ctx, (void)x, (void)n;
}
static void stage_recv(void *ctx, float *x, int64_t n, int dir) {
    (void)ctx, (void)x, (void)n, (void)dir;
}
static void stage_send(void *ctx, const float *x, int64_t n, int dir) {
    (void)ctx, (void)x, (void)n, (void)dir;
}

const model_hooks model_hooks_single = {
    .ctx = NULL,
    .extents = extents,
    .slab = slab,
    .stage = stage,
    .has_grads = has_grads,
    .ready = on_model,
    .layer_weights = layer_weights,
    .layer_release = on_layer,
    .layer_grads = layer_grads,
    .mlp_grads_done = on_layer,
    .layer_grads_done = on_layer,
    .weight = weight,
    .weight_b16 = weight_b16,
    .grad = grad,
    .head_grads_done = on_model,
    .embed_grads_done = on_model,
    .reduce_out = reduce_out,
    .gather_out = gather_out,
    .gather_cols = gather_cols,
    .gather_tensor = gather_tensor,
    .embed_reduce = on_rows,
    .gather_vocab = gather_vocab,
    .partial_end = partial_end,
    .partial_done = partial_done,
    .moe_to_experts = model_moe_to_experts_local,
    .moe_from_experts = model_moe_from_experts_local,
    .moe_start = on_model,
    .moe_wait = on_model,
    .moe_tensor_sum = tensor_sum,
    .moe_cp_sum = cp_sum,
    .poll = poll,
    .stage_recv = stage_recv,
    .stage_send = stage_send,
    .pipe_share_last = on_values,
};
