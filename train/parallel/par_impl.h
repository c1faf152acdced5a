/* par_impl: the sharded run's state, one small struct per concern, and the functions the files
 * of train/parallel share. The plan (plan.h) is the run's geometry, a value none of them writes;
 * each file works on its concern's struct:
 *   par.c      the lifetime, the buffers' views, the hook table
 *   calls.c    par_run/par_start (every collective of the run, made as the plan lists its kind,
 *              in the wire format in force), the step's agreements
 *   queue.c    par_queue: the calls in flight and their tickets
 *   bucket.c   par_buckets: the gradient buckets
 *   zero.c     par_grad_slots and the data axes' gradient reductions (DP, ZeRO, --dcn), the
 *              tensor axis's fix-ups of replicated gradients, the optimizer's view
 *   weights.c  par_gathers (ZeRO-3's gathered weights) and par_update (ZeRO-1/2's updated
 *              shards and their gathers: the parameters' ready state)
 *   tensor.c   par_tensor: the tensor axis's hooks (with cmatmul.c)
 *   layout.c   the hooks that read the geometry, column packing
 *   pipeline.c the sampling hooks of the pipeline axis
 * Internal to train/parallel. */
#ifndef MT_TRAIN_PAR_IMPL_H
#define MT_TRAIN_PAR_IMPL_H
#include "mesh/coll.h"
#include "train/model/hooks.h"
#include "train/parallel/par.h"
#include "train/parallel/plan.h"

#define PAR_MAX_PENDING 256
#define PAR_BUCKET_SEGS PLAN_BUCKET_SEGS /* blocks one bucket may hold */

/* ---- the calls in flight (queue.c) ---- */

/* One non-blocking call (a gradient reduction of a block or of a bucket, or a gather of updated
 * parameters) and what its completion does: done(p, arg) if set (a bucket's: hand slot arg's
 * result to its blocks), else add an RS result `out` into `acc` (n elements) if acc is set. */
typedef struct {
    mesh_req *req;
    float *out, *acc;
    int64_t n;
    void (*done)(struct par *p, int arg);
    int arg;
} par_pending;

/* Calls complete in the order they were started. Tickets number them from 1 in that order: the
 * calls ever started are retired + n, and ticket t has completed once retired >= t. */
typedef struct {
    par_pending call[PAR_MAX_PENDING]; /* in flight, oldest first */
    int n;
    int64_t retired;
} par_queue;

/* ---- gradient buckets (bucket.c) ---- */

/* Where one block's part of a bucket's result goes: dst[0, n) = (or +=, add) res[off, off+n). */
typedef struct {
    float *dst;
    int64_t off, n;
    int add;
} bucket_seg;

/* Two staging slots of the plan's bucket_cap elements (none: off); fill: elements in the open
 * slot (AllReduce) or in each of its |data| shard regions (RS); busy[k]: the ticket of slot k's
 * reduction (free once it retired). */
typedef struct {
    float *stage[2], *result[2];
    int64_t fill, busy[2];
    int open;
    bucket_seg segs[2][PAR_BUCKET_SEGS];
    int nsegs[2];
} par_buckets;

/* ---- the context axis (cp.c) ---- */

/* Views of the context axis's buffers: the saved softmax statistics, the K/V buffers, the
 * rotary tables [T, H/2], the positions (this rank's rows [T_C], every rank's [|C|, T_C],
 * 0..T−1) and the kernels' scratch. */
typedef struct {
    float *saved, *kv, *cos, *sin, *ker;
    int32_t *qpos, *kpos, *iota;
    double flops;       /* the forward's blockwise attention FLOPs on this rank (par_cp_flops) */
    int64_t skipped;    /* ring blocks no query of this rank sees, skipped (par_cp_skipped) */
    int64_t dkv_behind; /* ring dK, dV hops waited after a rows' half (par_cp_dkv_behind) */
    int64_t dkv_hops;   /* and every dK, dV hop */
    double dkv_hidden;  /* the seconds of their transfer hidden */
} par_cp;

/* ---- ZeRO-2/3's transient gradients (zero.c) ---- */

/* A layer's full (TP-local) gradients in two slots, so that one reduces while the next layer's
 * backward fills the other, each slot's ReduceScatter output, and each non-layer parameter's;
 * busy[k]: the ticket of slot k's last reduction. */
typedef struct {
    float *full[2], *scattered[2], *param[P_COUNT];
    int64_t busy[2];
} par_grad_slots;

/* ---- ZeRO-3's gathered weights (weights.c) ---- */

/* The shards (the model's storage), a layer's gathered (TP-local) weights in two slots so that
 * the next layer's gather can run ahead (prefetch) with their staging (column-sharded gathers,
 * and with buckets the packed shards), the gathered non-layer weights. In bf16 (plan_z3_bf16)
 * the slots, stages and sends are the same buffers seen as 2-byte units (layer_b, stage_b,
 * send_b): the matrices bf16, the norm gains fp32, at plan_layer_offset_b; the unembedding
 * gathered in bf16 (unembed_b) instead of param[]. */
typedef struct {
    float *shards;
    float *layer[2], *stage[2], *send[2], *param[P_COUNT];
    uint16_t *layer_b[2], *stage_b[2], *send_b[2], *unembed_b;
    int64_t layer_id[2];        /* the layer each slot holds, −1 none */
    mesh_req *reqs[2][P_COUNT]; /* each slot's gathers in flight */
    int pending[2];             /* slot holds a started, not yet finished prefetch */
} par_gathers;

/* ---- ZeRO-1/2's updated shards (weights.c) ---- */

/* The shard of the parameter being updated, staged (without --overlap one at a time). With
 * --overlap every shard is staged (at its shard offset) and the gathers of the updated shards
 * are deferred: the next step starts them layer by layer (the embedding, then layer l0, l0+1,
 * ..., then the final norm and the unembedding) and its forward waits for each layer's just
 * before it reads it, so that they hide behind the forward's compute. state says where the
 * model's parameters stand (par.h); while GATHERING, the gathers' tickets start after base:
 * first of them before the first layer, layer per layer, ending at end. mod: whose parameters. */
typedef struct {
    float *stage;
    par_params_state state;
    int64_t base, end;
    int first;
    model *mod;
    /* the dense MLPs' deferred gathers: started, and waited for by a forward before their layer
     * (waited_l: the last layer it waited for since they started) */
    int64_t mlp_started, mlp_waited, waited_l;
} par_update;

/* ---- the tensor axis (tensor.c) ---- */

/* Two packing buffers of [rows, D], the kv-group exchange, the collective matmuls' scratch (NULL:
 * off) and their backward ReduceScatter_Y in flight. */
typedef struct {
    float *a, *b, *kv, *cmatmul;
    mesh_req *partial;
} par_tensor;

/* ---- the expert axis (expert.c) ---- */

/* The AllToAlls' staging (BUF_EP_STAGE) and the step's kept slots summed over the data shards
 * (BUF_EP_COUNTS; a MoE block's exchange keeps its counts in the model's activations); ZeRO's (expert_zero.c): a MoE block's transient gradients, its
 * gathered weights (the MoE block gathered_lm holds, −1 none), the packing of a block's shards,
 * the shard being updated. */
typedef struct {
    float *stage;
    int64_t *counts;
    float *lgrads, *gathered, *pack, *update;
    int64_t gathered_lm;
    /* --overlap: the next exchange may be left in flight (armed: the model's moe_start); the
     * one in flight, and for a dispatch where its rows go at the wait (dst, by rows' counts, of
     * w floats); the exchanges started so far, waited for, and their transfer hidden (s,
     * par_wait_hidden's sum) */
    int armed;
    mesh_req *req;
    float *dst;
    const int64_t *rows;
    int64_t w, started, waited;
    double hidden;
} par_expert;

struct par {
    mesh *m;
    const plan *pl;    /* the plan (the caller's, outliving this) */
    model_hooks hooks; /* the table par_model_hooks returns, ctx = this */
    plan_ptrs bufs;    /* the buffers the plan lists for the sharded run, viewed below */
    /* ZeRO's gradient shards, each param's contiguous, block-major, at its shard offset; the
     * column packing of a block; --dcn's flat gradient */
    float *shard_grads, *column_pack, *dcn;
    par_queue q;
    par_buckets bk;
    par_grad_slots gs;
    par_gathers w;
    par_update up;
    par_tensor tp;
    par_expert ep;
    par_cp cp;
    int64_t micro, n_micro;         /* the backward running (its micro-batch) and how many */
    int64_t calls[PLAN_COLL_COUNT]; /* the collectives made, by kind (par_run, par_start) */
    mesh_wire wire; /* the calls' wire format in force (par_in_step): the plan's, or fp32 */
};

/* ---- calls.c ---- */
/* The mesh call of kind k over count elements per rank: the plan's (plan_coll_call) in the wire
 * format in force (par_in_step). */
mesh_coll_call par_call(const struct par *p, plan_coll k, int64_t count);
/* The plan's collective of kind k over count elements per rank: blocking, or started. */
void par_run(struct par *p, plan_coll k, float *out, const float *in, int64_t count);
mesh_req *par_start(struct par *p, plan_coll k, float *out, const float *in, int64_t count);
/* The plan's AllToAllv of kind k (PLAN_EP_ALL_TO_ALL): blocks of counts[n·n] (mesh_coll_run_v):
 * blocking, or started (counts and the buffers valid until mesh_wait). */
void par_run_v(struct par *p, plan_coll k, float *out, const float *in, const int64_t *counts);
mesh_req *par_start_v(struct par *p, plan_coll k, float *out, const float *in,
                      const int64_t *counts);
/* Waits for r, a call left in flight behind compute (NULL: none), and returns the seconds of its
 * transfer that compute hid: its transfer (t_end − t_start) less the time this wait blocked, 0 if
 * the wait blocked longer. The one measure of par_ep_overlap's and par_cp_dkv_behind's hidden
 * time: summed per request, so only the calls left in flight count. */
double par_wait_hidden(mesh_req *r);
/* An AllGather kind on 2-byte elements (bf16 in memory: mesh_all_gather_bf16), count even:
 * blocking, or started (the buffers live until mesh_wait). */
void par_run_b(struct par *p, plan_coll k, uint16_t *out, const uint16_t *in, int64_t count);
mesh_req *par_start_b(struct par *p, plan_coll k, uint16_t *out, const uint16_t *in,
                      int64_t count);
/* Σ over the axis set of a double, identical on every rank (AllGather + fixed-order sum; the
 * step's bookkeeping: losses, norms). */
double par_allsum(struct par *p, mesh_axes a, double v);
/* The non-blocking calls in flight move on (mesh_poll: in the inline progress mode they run on
 * this thread, only when it polls). Called by the hooks between the model's pieces of compute, so
 * that a reduction or gather started earlier advances while the layers compute. */
static inline void par_poll(struct par *p) {
    mesh_poll(p->m);
}
static inline void par_hk_poll(void *ctx) {
    par_poll(ctx);
}

/* ---- expert.c ---- */
void par_hk_moe_to_experts(void *ctx, model *mod, int64_t *c, float *dst, const float *src,
                           const int64_t *offs, int64_t *loffs, int64_t w);
void par_hk_moe_from_experts(void *ctx, model *mod, int64_t *c, float *dst, const float *src,
                             int64_t w);
void par_hk_moe_start(void *ctx, model *mod);
void par_hk_moe_wait(void *ctx, model *mod);
void par_hk_moe_tensor_sum(void *ctx, model *mod, float *x, int64_t n);
/* ---- expert_zero.c: the mixture-of-experts weights over the data axes ---- */
/* ZeRO-3: MoE block l's weights gathered into w (its dense MLP's NULL; in bf16, plan_z3_bf16,
 * the experts' in w->b16, the router's fp32). */
void ep_layer_weights(struct par *p, model *mod, int64_t l, layer_w *w);
/* ZeRO-2/3: a MoE block's gradients in the transient buffer, cleared (its dense MLP's NULL). */
void ep_layer_grads(struct par *p, layer_g *g);
/* ZeRO-2/3: block l's MLP gradients are complete: a MoE block's reduce-scattered into the
 * shards (+=). Nothing for a dense block. */
void ep_mlp_grads_done(struct par *p, int64_t l);
/* After the step's backwards: --zero 0 AllReduce of the MoE gradients (the routed experts' over
 * plan.erep, the others' over the data axes); --zero 1 their ReduceScatter into the shards. */
void ep_reduce_grads(struct par *p, model *mod);
/* Σ g² of the mixture-of-experts gradients, each element once (identical on every rank). */
double ep_grad_sumsq(struct par *p, model *mod);
/* ZeRO's par_owned_slice of a mixture-of-experts parameter (its shards; ZeRO-1/2 staged from
 * the whole weight), its state after the dense shards' (plan.moe_shard_off); par_owned_done's
 * AllGather of the updated shards (ZeRO-1/2). */
par_owned ep_owned_slice(struct par *p, model *mod, param_id id);
void ep_owned_done(struct par *p, model *mod, param_id id);
/* par_is_writer for a mixture-of-experts parameter (kind 0 the weights, else the state). */
int ep_is_writer(const struct par *p, param_id id, int kind);

/* ---- queue.c ---- */
/* Queues a started call c (par_pending: its request and completion); returns its ticket. */
int64_t queue_push(struct par *p, par_pending c);
/* The ticket of the last call started (0 before any). */
static inline int64_t queue_last(const par_queue *q) {
    return q->retired + q->n;
}
/* Completes the calls in flight up to ticket t (all of them). */
void queue_wait(struct par *p, int64_t t);
void queue_drain(struct par *p);

/* ---- bucket.c ---- */
/* Takes block g[n] (RS: packed so that shard j is g[j·n/|data|, (j+1)·n/|data|)) into the open
 * bucket; its result goes to dst (AllReduce: g itself; RS: this rank's shard, added into it when
 * add). Returns 0 when buckets are off or the block is larger than a bucket (the caller reduces
 * it alone). Flushes the bucket first when the block does not fit. */
int bucket_add(struct par *p, float *g, int64_t n, float *dst, int add);
/* Starts the open bucket's reduction (asynchronous with --overlap), if it holds anything. */
void bucket_flush(struct par *p);
/* A bucket's reduction has completed: its results go to their blocks. */
void bucket_complete(struct par *p, int slot);

/* ---- layout.c ---- */
/* The TP-local block of param id inside a layer-sized buffer `buf` (plan_layer_offset); all of a
 * dense layer's, in the order of layer_w's (and layer_g's) fields. */
float *par_layer_slot(const struct par *p, float *buf, param_id id);
/* par_unpack_cols on 2-byte elements whose n parts [R, C/n] start `part` elements apart in src
 * (R = 1, C = n·shard: a row-sharded block whose parts were padded to an even count). */
void par_unpack_cols_b(uint16_t *dst, const uint16_t *src, int64_t R, int64_t C, int64_t n,
                       int64_t part);
#define PAR_LAYER_BLOCKS 9
void par_layer_blocks(const struct par *p, float *buf, float **out);
/* Column packing: src[R, C] → n chunks [R, C/n] (pack) and back (unpack). */
void par_pack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n);
void par_unpack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n);
/* Is block g sharded by columns over the data axes (its gathered parts need unpacking)? */
static inline int par_column_sharded(const plan_geo *g) {
    return g->zdim && g->R > 1;
}

/* ---- weights.c ---- */
/* The ZeRO-1/2 --overlap gathers par_owned_done deferred, started if they are due (the next
 * step's begin, or a read of the parameters before it). */
void weights_start_due(struct par *p);

/* ---- the model's hooks for a sharded run (model/hooks.h says what each does), ctx = the run;
 * par.c assembles them into one table (hook_table) ---- */
/* layout.c */
void par_hk_extents(void *ctx, const model_shape *s, model_extents *out);
void par_hk_slab(void *ctx, const model_shape *s, param_id id, param_slab *out);
void par_hk_stage(void *ctx, const model_shape *s, model_stage_info *out);
int par_hk_has_grads(void *ctx);
/* weights.c */
void par_hk_ready(void *ctx, model *mod);
layer_w par_hk_layer_weights(void *ctx, model *mod, int64_t l, int dir);
void par_hk_layer_release(void *ctx, model *mod, int64_t l);
const float *par_hk_weight(void *ctx, model *mod, param_id id);
const uint16_t *par_hk_weight_b16(void *ctx, model *mod, param_id id);
/* zero.c */
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
/* cp.c (cp_init: the views and tables, once the buffers exist) */
void cp_init(struct par *p);
void par_hk_cp_attn_fwd(void *ctx, model *mod, int slot, int64_t l, float *att, float *q,
                        float *k, const float *v, kern_bf16 *const b16[3], int64_t BT);
void par_hk_cp_attn_bwd(void *ctx, model *mod, int slot, int64_t l, float *dq, float *dk,
                        float *dv, const float *datt, const float *q, const float *k,
                        const float *v, const float *att, const kern_bf16 *const b16[3],
                        int64_t BT);
/* cp_moe.c */
void par_hk_moe_cp_sum(void *ctx, model *mod, double *rec, int64_t n, int64_t E);
/* pipeline.c */
void par_hk_stage_recv(void *ctx, float *x, int64_t n, int dir);
void par_hk_stage_send(void *ctx, const float *x, int64_t n, int dir);
void par_hk_pipe_share_last(void *ctx, float *x, int64_t n);
#endif
