/* par_impl: the sharding plan's internals, shared by par.c (its lifetime), layout.c (geometry),
 * layout_print.c (printing it) and the schemes: zero.c (data axes: ZeRO weights, gradient
 * reduction, ownership, norms), tensor.c (tensor axis), pipeline.c (pipeline axis). Internal. */
#ifndef MT_TRAIN_PAR_IMPL_H
#define MT_TRAIN_PAR_IMPL_H
#include "mesh/coll.h"
#include "train/model/hooks.h"
#include "train/parallel/par.h"
#include "train/parallel/plan.h"

/* One call in flight (a gradient reduction of a block or of a bucket, or a gather of updated
 * parameters) and where its result goes. */
typedef struct {
    mesh_req *req;
    float *out; /* RS result staging (NULL for in-place AllReduce) */
    float *acc; /* shard gradient to add `out` into */
    int64_t n;
    int bucket; /* k + 1: the reduction of bucket slot k (bucket.c); 0: a block's */
} pending_red;

#define PAR_MAX_PENDING 256
#define PAR_BUCKET_SEGS 256 /* blocks one bucket may hold */

/* Where one block's part of a bucket's result goes: dst[0, n) = (or +=, add) res[off, off+n). */
typedef struct {
    float *dst;
    int64_t off, n;
    int add;
} bucket_seg;

struct par {
    mesh *m;
    const plan *pl;    /* the plan (the caller's, outliving this) */
    model_hooks hooks; /* the table par_model_hooks returns, ctx = this */
    plan_ptrs bufs;    /* the buffers the plan lists for the sharded run, views below */
    /* ZeRO shards (zero >= 1): params (zero 3 only: the model's storage) and gradients, each
     * param's shard contiguous, block-major, param id's at shard_offset[id]. */
    float *shard_params, *shard_grads;
    /* zero 1/2: the shard of the parameter being updated, staged (without --overlap one at a
     * time). With --overlap every parameter's shard is staged (at shard_offset) and the gathers of
     * the updated shards are deferred: the next step starts them layer by layer (the embedding,
     * then layer l0, l0+1, ..., then the final norm and the unembedding) and its forward waits for
     * each layer's just before it reads it (par_hk_layer_weights, par_hk_weight), so that they
     * hide behind the forward's compute instead of the short update's. Tickets count pending
     * calls ever started (n_retired + n_pending): the gathers start after ticket ug_base,
     * ug_first of them before the first layer, ug_layer per layer, and end at ug_end. ug_deferred:
     * par_owned_done deferred gathers of model ug_mod's parameters during the update in progress;
     * ug_due: the update is complete (par_after_update) and they have not started yet. */
    float *update_stage;
    int64_t ug_base, ug_end;
    int ug_first, ug_layer, ug_deferred, ug_due;
    model *ug_mod;
    /* zero 3: the gathered (TP-local) weights of a layer, two slots so that the next layer's
     * gather can run ahead (prefetch), with their staging for column-sharded gathers; and the
     * gathered non-layer params (embedding, final norm gain, unembedding). */
    float *gathered_layer[2], *gather_stage[2];
    float *gathered_embed, *gathered_final_norm, *gathered_unembed;
    int64_t gathered_layer_id[2];      /* the layer each slot holds, -1 none */
    mesh_req *gather_reqs[2][P_COUNT]; /* each slot's gathers in flight */
    int gather_pending[2];             /* slot holds a started, not yet finished prefetch */
    /* zero 2/3: transient full (TP-local) gradients of a layer (two slots, so that one reduces
     * while the next layer's backward fills the other) with the reduce-scatter's output of each
     * slot, and of each non-layer param */
    float *layer_grads_full[2], *layer_grads_scattered[2], *param_grads_full[P_COUNT];
    pending_red pending[PAR_MAX_PENDING]; /* gradient reductions in flight, oldest first */
    int n_pending;
    int64_t n_retired;   /* pending calls completed so far */
    int slot_pending[2]; /* layer_grads_full[k] is in use by the first slot_pending[k] of them */
    /* gradient buckets (bucket.c): two staging slots of the plan's bucket_cap elements, 0 = off.
     * bucket_fill: elements in the open bucket (AllReduce) or in each of its n_data shard regions
     * (RS) */
    int64_t bucket_fill;
    float *bucket_stage[2], *bucket_result[2]; /* each slot's gradients and reduced result */
    float *gather_send[2]; /* zero 3 with buckets: a layer's shards packed for its gathers */
    int bucket_open;       /* the slot being filled */
    int bucket_busy[2];    /* slot k is in use by the first bucket_busy[k] pending reductions */
    bucket_seg bucket_segs[2][PAR_BUCKET_SEGS]; /* where each slot's result goes, block by block */
    int bucket_nsegs[2];
    /* scratch: two tensor-axis packing buffers [BT, D], the column packing of a block, the
     * kv-group exchange, --dcn's flat gradient */
    float *tensor_scratch_a, *tensor_scratch_b, *column_pack, *kv_exchange, *dcn_buf;
    /* the collective matmuls' scratch (tensor.c, cmatmul.h); NULL: off */
    float *cmatmul_scratch;
    mesh_req *partial_req;  /* the collective matmul's backward ReduceScatter_Y in flight */
    int64_t micro, n_micro; /* the micro-batch running and how many this step has */
};

/* The TP-local block of param id inside a layer-sized buffer `buf` (plan_layer_offset). */
float *par_layer_slot(const struct par *p, float *buf, param_id id);
/* Column packing: src[R, C] → n chunks [R, C/n] (pack) and back (unpack). */
void par_pack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n);
void par_unpack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n);
/* bucket.c: takes block g[n] (RS: packed so that shard j is g[j·n/n_data, (j+1)·n/n_data)) into the
 * open bucket; its result goes to dst (AllReduce: g itself; RS: this rank's shard, added into
 * it when add). Returns 0 when buckets are off or the block is larger than a bucket (the caller
 * reduces it alone). Flushes the bucket first when the block does not fit. */
int bucket_add(struct par *p, float *g, int64_t n, float *dst, int add);
/* Starts the open bucket's reduction (asynchronous with --overlap), if it holds anything. */
void bucket_flush(struct par *p);
/* A bucket's reduction has completed: its results go to their blocks. */
void bucket_complete(struct par *p, int slot);
/* The model's hooks for a sharded run (model/hooks.h says what each does), ctx = the plan; par.c
 * assembles them into one table (hook_table). */
/* layout.c */
void par_hk_extents(void *ctx, const model_shape *s, model_extents *out);
void par_hk_slab(void *ctx, const model_shape *s, param_id id, param_slab *out);
void par_hk_stage(void *ctx, const model_shape *s, int64_t *l0, int64_t *l1, int *nslots);
int par_hk_has_grads(void *ctx);
/* zero.c */
void par_hk_ready(void *ctx, model *mod);
layer_w par_hk_layer_weights(void *ctx, model *mod, int64_t l, int dir);
void par_hk_layer_release(void *ctx, model *mod, int64_t l);
const float *par_hk_weight(void *ctx, model *mod, param_id id);
layer_g par_hk_layer_grads(void *ctx, model *mod, int64_t l);
float *par_hk_grad(void *ctx, model *mod, param_id id);
void par_hk_mlp_grads_done(void *ctx, model *mod, int64_t l);
void par_hk_layer_grads_done(void *ctx, model *mod, int64_t l);
void par_hk_head_grads_done(void *ctx, model *mod);
void par_hk_embed_grads_done(void *ctx, model *mod);
/* tensor.c */
float *par_hk_reduce_out(void *ctx, model *mod, model_product_fn fn, void *fctx, int64_t BT);
int par_hk_gather_out(void *ctx, model *mod, float *out, const float *sh, int64_t BT, int defer);
const float *par_hk_gather_cols(void *ctx, model *mod, float *x, const float *own, int64_t BT,
                                model_block_fn fn, void *fctx);
const float *par_hk_gather_tensor(void *ctx, model *mod, const float *mine, int64_t n);
void par_hk_embed_reduce(void *ctx, model *mod, float *x, int64_t BT);
void par_hk_gather_vocab(void *ctx, model *mod, float *logits, const float *logits_loc);
void par_hk_partial_end(void *ctx, model *mod, float *dr, float *part, int64_t BT);
void par_hk_partial_done(void *ctx, model *mod, float *dr, int64_t BT);
/* pipeline.c */
void par_hk_stage_recv(void *ctx, float *x, int64_t n);
void par_hk_stage_send(void *ctx, const float *x, int64_t n);
void par_hk_pipe_share_last(void *ctx, float *x, int64_t n);
/* The non-blocking calls in flight move on (mesh_poll: in the inline progress mode they run on this
 * thread, only when it polls). Called by the hooks between the model's pieces of compute, so that
 * a reduction or gather started earlier advances while the layers compute. */
static inline void par_poll(struct par *p) {
    mesh_poll(p->m);
}
static inline void par_hk_poll(void *ctx) {
    par_poll(ctx);
}
/* Queues a started reduction (bucket.c): out (an RS result) is added into acc when it completes. */
void par_push(struct par *p, mesh_req *r, float *out, float *acc, int64_t n);
/* Completes all pending gradient reductions (adds RS results into shard grads). */
void par_drain(struct par *p);
void par_drain_upto(struct par *p, int count);
#endif
