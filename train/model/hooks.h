/* model hooks: the points where the model's forward/backward pass needs communication or storage
 * it does not own, as a table of functions the model calls. The model ships the single-rank table
 * (model_hooks_single: local extents are the global ones, every slab is the whole tensor, and
 * each communication point is a local copy, add or no-op); train/parallel fills in a table for a
 * sharded run (par_model_hooks). The model never calls the parallel code by name, so it builds
 * and is tested alone. Depends on model.h only.
 *
 * The hooks move data; the math is the model's (model.c, sublayer.c). Where a collective matmul
 * interleaves the two, the hook moves the chunks and calls back into the model's math for each
 * one (model_product_fn, model_block_fn).
 *
 * Hook points in the book's notation (In[B_X, D_Y], W_in[D_X, F_Y]):
 *  - reduce_out:         Out[B, D]{U_Y} → ReduceScatter_Y → Out[B, D_Y] (the model then adds the
 *                        residual); with the collective matmul a matmul-ReduceScatter
 *  - gather_out:         Out[B, D_Y] → AllGather_Y → In[B, D], or left to the next norm
 *  - gather_cols:        AllGather_Y of [B, D_Y] blocks: the deferred gather of a norm's input
 *                        (an AllGather-norm-matmul), the residual gradient dOut[B, D_Y] before
 *                        the output projection's backward (an AllGather-matmul), the embedding's
 *  - partial_end/done:   dIn[B, D]{U_Y} → ReduceScatter_Y into the residual gradient
 *  - gather_tensor:      AllGather_Y of a small per-row array (the loss's row statistics)
 *  - layer_weights:      AllGather_X W[D_X, ...] just in time (ZeRO-3 / FSDP)
 *  - layer_grads(_done): AllReduce_X (DP) or ReduceScatter_X (ZeRO-2/3) of dW{U_X}
 * Not collective themselves; a sharded table's hooks are collective over the axis they name. The
 * tensor axis's hooks are called only when the model's extents say it is sharded (D_Y < D). */
#ifndef MT_TRAIN_MODEL_HOOKS_H
#define MT_TRAIN_MODEL_HOOKS_H
#include <stdint.h>

#include "train/model/model.h"

/* Local extents of the model on this rank (all equal to the global ones without TP). */
typedef struct {
    int64_t Nl, Kl, Fl, Vl; /* query heads, kv heads, d_ff, vocab held locally */
    int64_t n0, k0, f0, v0; /* global index of the first local head, kv head, ff column, vocab */
    int64_t Dl, d0;         /* residual-stream columns held between blocks: In[B, D_Y] */
    int64_t El, e0;         /* routed experts held locally and the first one's index: E_Z */
    int64_t Fel, fe0;       /* the experts' d_ff held locally (routed and shared: F_e over Y) */
    int64_t ep_n;           /* ranks of the expert axis Z (1: none): the tokens of ep_n data
                               shards may reach this rank's experts */
    int64_t cp_n;           /* ranks of the context axis C (0 or 1: none): the model's rows are
                               this rank's share of each sequence, attention is cp_attn_*'s */
    unsigned cp_reads;      /* what cp_attn_bwd reads of the saved q, k, v and att (CP_READS_*) */
} model_extents;
enum { CP_READS_QKV = 1, CP_READS_ATT = 2 };

/* Pointers to layer l's weights as the compute uses them (TP-local, FSDP-gathered): a dense
 * block's w_gate, w_up, w_down, or a MoE block's router [D, E], this rank's experts' e_gate, e_up
 * [E_Z, D, F_e], e_down [E_Z, F_e, D] and shared experts' s_gate, s_up [S, D, F_e], s_down
 * [S, F_e, D]. */
typedef struct {
    const float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
    const float *router, *e_gate, *e_up, *e_down, *s_gate, *s_up, *s_down;
    /* bf16 compute: a block's wq, wk, wv, wo, w_gate, w_up, w_down, e_gate, e_up, e_down,
     * s_gate, s_up, s_down as bf16, when the hook holds them so (ZeRO-3 gathers them in bf16;
     * the fp32 pointers are then NULL), or NULLs: the model copies the fp32 weights (mixed.c) */
    const uint16_t *b16[13];
} layer_w;
/* Where layer l's weight gradients accumulate (+=). */
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
    float *router, *e_gate, *e_up, *e_down, *s_gate, *s_up, *s_down;
} layer_g;

/* The model's math a collective matmul runs chunk by chunk: dst[BT, D/nb] = column block b of nb
 * of the product the model reduces (overwrites); blk[BT, D/n], column block j of n of an array
 * being gathered, taken in as it arrives (first: the rank's own, which comes first). */
typedef void (*model_product_fn)(void *ctx, float *dst, int64_t b, int64_t nb);
typedef void (*model_block_fn)(void *ctx, const float *blk, int64_t j, int first);

/* A pipeline rank's share of the model: the layers it stores, [l0, l1) (one stack of L/|Z|
 * layers in every case), cut into `chunks` chunks of (l1 − l0)/chunks consecutive layers; chunk k
 * is stage k·|Z| + r of the pipeline (rank r, Megatron's interleaving: model_layer_global), its
 * global layers [(k·|Z| + r)·Lc, …). nslots activation slots, each holding one micro-batch of
 * every chunk. split: backwards run as input gradient then weight gradient (model_chunk_bwd_input,
 * model_chunk_bwd_weight), and each slot keeps what the weight gradient reads between the two.
 * v_shape: zb-v's V instead (2 chunks: rank r's are stages r and 2|Z|−1−r; rank 0 holds the
 * last stage, the head, and rank |Z|−1 both sides of the turn). */
typedef struct {
    int64_t l0, l1;
    int nslots, chunks, split, v_shape;
} model_stage_info;

/* Every hook receives the table's ctx first. */
typedef struct model_hooks {
    void *ctx;
    /* Before the model exists: local extents, each parameter's slab on this rank, the pipeline
     * stage (layers [l0, l1)) and its number of activation slots, and whether the model holds a
     * full (TP-local) gradient for every parameter (no with ZeRO-2/3, where gradients live in the
     * shards and layer gradients in transient buffers). */
    void (*extents)(void *ctx, const model_shape *s, model_extents *out);
    void (*slab)(void *ctx, const model_shape *s, param_id id, param_slab *out);
    void (*stage)(void *ctx, const model_shape *s, model_stage_info *out);
    int (*has_grads)(void *ctx);
    /* Once the parameters are initialised (ZeRO-3 takes the model's storage as its shards). */
    void (*ready)(void *ctx, model *m);
    /* Layer l's weights (with --overlap the next layer in direction dir, +1 forward or −1
     * backward, may be prefetched) and their release after use. */
    layer_w (*layer_weights)(void *ctx, model *m, int64_t l, int dir);
    void (*layer_release)(void *ctx, model *m, int64_t l);
    /* Where layer l's weight gradients accumulate, and the signals that they are complete: the
     * MLP sublayer's (mlp_norm, w_gate, w_up, w_down; its backward runs first), then the
     * layer's others (attention). */
    layer_g (*layer_grads)(void *ctx, model *m, int64_t l);
    void (*mlp_grads_done)(void *ctx, model *m, int64_t l);
    void (*layer_grads_done)(void *ctx, model *m, int64_t l);
    /* The non-layer parameters (P_EMBED, P_FINAL_NORM, P_UNEMBED): the weight as the compute uses
     * it and where its gradient accumulates; final_norm and unembed / embed gradients complete.
     * weight is NULL where the hook holds the weight in bf16 only (bf16 compute: ZeRO-3 gathers
     * the unembedding so), and weight_b16 then hands it over (a NULL hook or result: the model
     * copies the fp32 weight to bf16 itself). */
    const float *(*weight)(void *ctx, model *m, param_id id);
    const uint16_t *(*weight_b16)(void *ctx, model *m, param_id id);
    float *(*grad)(void *ctx, model *m, param_id id);
    void (*head_grads_done)(void *ctx, model *m);
    void (*embed_grads_done)(void *ctx, model *m);
    /* The tensor axis Y (called only with D_Y < D). reduce_out: this rank's D_Y columns of the
     * sum over Y of the product P[BT, D] the model computes with fn (the whole of it, fn(fctx,
     * dst, 0, 1); with the collective matmul block by block while the partial sums travel), as
     * [BT, D_Y] in the hook's scratch, valid until the next hook. */
    float *(*reduce_out)(void *ctx, model *m, model_product_fn fn, void *fctx, int64_t BT);
    /* out[BT, D] = AllGather_Y of the ranks' shard[BT, D_Y]. defer: out goes to a norm next and
     * to nothing else, so the hook may leave the gather to that norm's gather_cols: returns 1
     * when it did (out holds only this rank's D_Y columns), else 0. */
    int (*gather_out)(void *ctx, model *m, float *out, const float *shard, int64_t BT, int defer);
    /* The AllGather_Y of the ranks' [BT, D_Y] column blocks, this rank's `own` (packed; NULL: x's
     * own D_Y columns). With fn, where the collective matmuls are on, fn(fctx, blk, j, first)
     * takes each block as it arrives (the next on the wire meanwhile) and NULL is returned;
     * otherwise x[BT, D] receives the whole array and is returned. */
    const float *(*gather_cols)(void *ctx, model *m, float *x, const float *own, int64_t BT,
                                model_block_fn fn, void *fctx);
    /* dIn[BT, D]{U_Y}: partial_end starts the ReduceScatter_Y of part (this rank's partial sum
     * of dL/d(sublayer input)) into dr[BT, D_Y] (+=), or, with the collective matmul, only starts
     * it, so that the sublayer's weight-gradient matmuls run beside it; partial_done completes
     * it: dr holds the sublayer input's gradient afterwards. Nothing but local compute may come
     * between the two. */
    void (*partial_end)(void *ctx, model *m, float *dr, float *part, int64_t BT);
    void (*partial_done)(void *ctx, model *m, float *dr, int64_t BT);
    /* AllGather_Y of n floats of each rank: [|Y|][n] in the hook's scratch, valid until the next
     * hook (the loss's row statistics). */
    const float *(*gather_tensor)(void *ctx, model *m, const float *mine, int64_t n);
    /* x[BT, D] holds the embedding rows of this vocabulary shard: sum over the vocab shards. */
    void (*embed_reduce)(void *ctx, model *m, float *x, int64_t BT);
    /* logits_loc[Vl] → logits[V]. */
    void (*gather_vocab)(void *ctx, model *m, float *logits, const float *logits_loc);
    /* The expert axis Z (model_extents.ep_n; the single-rank table copies). to_experts moves
     * the dispatched rows src[offs[E], w] of this rank's tokens, grouped by expert (offs[E + 1]),
     * to the ranks holding their experts: dst receives the rows of this rank's El experts from
     * every rank of Z, grouped by local expert (loffs[El + 1], the group of expert e0 + e being
     * its rows from Z rank 0, then 1, ...). counts: the MoE block's workspace for the exchange's
     * counts in this micro-batch's activations (model_moe_counts_n int64), kept from the forward
     * for its backward. offs == NULL: the same movement as the call with offs that filled counts
     * (the backward moves the gradients of the rows so). from_experts is its reverse: src[loffs
     * [El], w] grouped as to_experts left them → dst[offs[E], w] in the order of to_experts' src.
     * Both collective over Z. */
    void (*moe_to_experts)(void *ctx, model *m, int64_t *counts, float *dst, const float *src,
                           const int64_t *offs, int64_t *loffs, int64_t w);
    void (*moe_from_experts)(void *ctx, model *m, int64_t *counts, float *dst, const float *src,
                             int64_t w);
    /* Overlap: after moe_start the next moe_to_experts or moe_from_experts may return with its
     * exchange still in flight (the sharded run's --overlap over an expert axis; else it completes
     * as always), and moe_wait completes it: dst holds the rows, and src and counts may change,
     * only after moe_wait. The model calls moe_start only where compute that reads and writes
     * none of the exchange's buffers (and calls no other hook but moe_tensor_sum and poll) comes
     * before moe_wait, so that it runs while the rows travel; the numbers are the same either
     * way. moe_wait without an exchange in flight does nothing. Not collective. */
    void (*moe_start)(void *ctx, model *m);
    void (*moe_wait)(void *ctx, model *m);
    /* x[n] = the sum over the tensor axis Y of every rank's x[n], in rank order (the same bits on
     * every rank): a MoE block's routing weights' gradient, whose expert outputs are partial sums
     * over Y (their F_e sharded). Called only with D_Y < D; collective over Y. */
    void (*moe_tensor_sum)(void *ctx, model *m, float *x, int64_t n);
    /* The context axis C (model_extents.cp_n > 1): the model's BT rows are this rank's share of
     * its sequences, whose attention needs every rank's keys. cp_attn_fwd rotates q[BT, N_l·H]
     * and k[BT, K_l·H] in place to their global positions, fills att[BT, N_l·H] and keeps what
     * its backward needs for (slot, stored layer l); cp_attn_bwd overwrites dq, dk, dv (the
     * gradients of the projections' outputs, before rotation) from datt and the saved rotated
     * q, k, v and output att. Collective over C. In bf16 compute, b16 holds the layer's saved
     * bf16 q, k, v (NULL where the model keeps none, cp_reads): the forward rounds the rotated
     * q, k, v into them once and the backward reads them there (q, k, v are then not kept). */
    void (*cp_attn_fwd)(void *ctx, model *m, int slot, int64_t l, float *att, float *q, float *k,
                        const float *v, kern_bf16 *const b16[3], int64_t BT);
    void (*cp_attn_bwd)(void *ctx, model *m, int slot, int64_t l, float *dq, float *dk,
                        float *dv, const float *datt, const float *q, const float *k,
                        const float *v, const float *att, const kern_bf16 *const b16[3],
                        int64_t BT);
    /* A MoE block's router statistics under the context axis C (model_extents.cp_n > 1), whose
     * ranks hold pieces of the same sequences. rec[n][3E] has one record per model sequence (a
     * piece of a training sequence): on input [0, E) the piece's slots the router sent to each
     * expert and [E, 2E) each expert's probabilities summed over the piece's tokens; on output
     * [0, 2E) the same for the whole sequence (summed over its pieces in sequence order, so the
     * same bits on every rank of C) and [2E, 3E) the slots of the sequence's tokens before the
     * piece (the capacity's counters at the piece's start). Counts are exact integers. On one
     * rank a piece is the whole sequence. Collective over C. */
    void (*moe_cp_sum)(void *ctx, model *m, double *rec, int64_t n, int64_t E);
    /* Between two of the model's kernels: communication started earlier may move on (a sharded
     * table's non-blocking collectives; nothing on one rank). Cheap; not collective. */
    void (*poll)(void *ctx);
    /* Pipelining outside a training step (sampling): receive the stage input from the previous
     * stage / send the stage output to the next (blocking), that stage being on the pipeline rank
     * at index + dir (dir ±1: +1 the previous stage's in a V's second leg), and give every stage
     * the last stage's values (x[n] is 0 on the other stages: a sum over the pipeline axis). */
    void (*stage_recv)(void *ctx, float *x, int64_t n, int dir);
    void (*stage_send)(void *ctx, const float *x, int64_t n, int dir);
    void (*pipe_share_last)(void *ctx, float *x, int64_t n);
} model_hooks;

/* The single-rank table. */
extern const model_hooks model_hooks_single;

/* The single-rank behaviour of the hooks that a sharded table reuses where an axis is trivial. */
void model_extents_full(const model_shape *s, model_extents *out);
void model_slab_full(const model_shape *s, param_id id, param_slab *out);
layer_w model_layer_weights_local(model *m, int64_t l);
layer_g model_layer_grads_local(model *m, int64_t l);
/* Where block l's parameters are in a model's local storage (params.c; model_layer_weights_local
 * and grads_local, and the fp32 panel copies, which may not call into model.c, read it so):
 * base(m, id, &n) gives parameter id's local storage (NULL: none) and its n values, held as
 * slab(m, id). Fills ptr[16] in layer_w's order, NULL where the block has none of a kind. */
typedef float *(*model_store_fn)(model *m, param_id id, int64_t *n);
typedef const param_slab *(*model_slab_fn)(const model *m, param_id id);
void model_layer_blocks(model *m, const model_shape *s, int64_t l, model_store_fn base,
                        model_slab_fn slab, float **ptr);
void model_moe_to_experts_local(void *ctx, model *m, int64_t *counts, float *dst,
                                const float *src, const int64_t *offs, int64_t *loffs, int64_t w);
void model_moe_from_experts_local(void *ctx, model *m, int64_t *counts, float *dst,
                                  const float *src, int64_t w);
/* The int64 a MoE block's exchange over an expert axis of ep_n ranks keeps per micro-batch: every
 * rank's rows per expert, the rows and elements per (sender, receiver). */
static inline int64_t model_moe_counts_n(int64_t E, int64_t ep_n) {
    return ep_n > 1 ? ep_n * E + 2 * ep_n * ep_n : 0;
}

/* What model_create allocates besides the parameters and their gradients, for micro-batches of
 * Bl sequences of s->T tokens on a pipeline rank's share st (its layers, chunks and slots) and
 * local extents e: in floats, the saved activations of every slot and the passes' scratch; the
 * int32 targets of every slot; with bf16 compute (bf16: model_compute's), in bf16 values,
 * attention's probabilities (act_b) and the products' operands (scratch_b); the weights' bf16
 * copy has one value per stored parameter (none under MODEL_BF16_GATHERED). Not collective;
 * allocates nothing (the sharding plan lists them among the run's buffers). */
typedef struct {
    int64_t act, scratch, targets;
    int64_t act_b, scratch_b;
} model_sizes;
void model_sizes_of(const model_shape *s, const model_extents *e, int64_t Bl,
                    const model_stage_info *st, int bf16, model_sizes *out);

/* This model's local extents. */
const model_extents *model_extents_of(const model *m);
#endif
