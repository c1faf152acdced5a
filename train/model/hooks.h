/* model hooks: the points where the model's forward/backward pass needs communication or storage
 * it does not own, as a table of functions the model calls. The model ships the single-rank table
 * (model_hooks_single: local extents are the global ones, every slab is the whole tensor, and
 * each communication point is a local copy, add or no-op); train/parallel fills in a table for a
 * sharded run (par_model_hooks). The model never calls the parallel code by name, so it builds
 * and is tested alone. Depends on model.h only.
 *
 * Hook points in the book's notation (In[B_X, D_Y], W_in[D_X, F_Y]):
 *  - sublayer_out:       Out[B, D]{U_Y} → ReduceScatter_Y → Out[B, D_Y] (+ residual) → AllGather_Y
 *  - norm_in:            the next sublayer's RMSNorm and in-projections (with the collective
 *                        matmul they take sublayer_out's AllGather_Y, as one AllGather-matmul)
 *  - sublayer_out_bwd:   AllGather_Y of the residual gradient dOut[B, D_Y] and the backward of the
 *                        sublayer's output projection (as two matmuls, or one collective matmul)
 *  - resid_grad_gather:  AllGather_Y of the residual gradient (the embedding's backward)
 *  - partial_begin/end/done: dIn[B, D]{U_Y} → ReduceScatter_Y into the residual gradient
 *  - layer_weights:      AllGather_X W[D_X, ...] just in time (ZeRO-3 / FSDP)
 *  - layer_grads(_done): AllReduce_X (DP) or ReduceScatter_X (ZeRO-2/3) of dW{U_X}
 * Not collective themselves; a sharded table's hooks are collective over the axis they name. */
#ifndef MT_TRAIN_MODEL_HOOKS_H
#define MT_TRAIN_MODEL_HOOKS_H
#include <stdint.h>

#include "train/model/model.h"

/* Local extents of the model on this rank (all equal to the global ones without TP). */
typedef struct {
    int64_t Nl, Kl, Fl, Vl; /* query heads, kv heads, d_ff, vocab held locally */
    int64_t n0, k0, f0, v0; /* global index of the first local head, kv head, ff column, vocab */
    int64_t Dl, d0;         /* residual-stream columns held between blocks: In[B, D_Y] */
} model_extents;

/* Pointers to layer l's weights as the compute uses them (TP-local, FSDP-gathered): a dense
 * block's w_gate, w_up, w_down, or a MoE block's router [D, E], experts' e_gate, e_up [E, D, F_e],
 * e_down [E, F_e, D] and shared experts' s_gate, s_up [S, D, F_e], s_down [S, F_e, D] (only the
 * single-rank table fills these in: the sharded one refuses experts). */
typedef struct {
    const float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
    const float *router, *e_gate, *e_up, *e_down, *s_gate, *s_up, *s_down;
} layer_w;
/* Where layer l's weight gradients accumulate (+=). */
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
    float *router, *e_gate, *e_up, *e_down, *s_gate, *s_up, *s_down;
} layer_g;

/* Every hook receives the table's ctx first. */
typedef struct model_hooks {
    void *ctx;
    /* Before the model exists: local extents, each parameter's slab on this rank, the pipeline
     * stage (layers [l0, l1)) and its number of activation slots, and whether the model holds a
     * full (TP-local) gradient for every parameter (no with ZeRO-2/3, where gradients live in the
     * shards and layer gradients in transient buffers). */
    void (*extents)(void *ctx, const model_shape *s, model_extents *out);
    void (*slab)(void *ctx, const model_shape *s, param_id id, param_slab *out);
    void (*stage)(void *ctx, const model_shape *s, int64_t *l0, int64_t *l1, int *nslots);
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
     * it and where its gradient accumulates; final_norm and unembed / embed gradients complete. */
    const float *(*weight)(void *ctx, model *m, param_id id);
    float *(*grad)(void *ctx, model *m, param_id id);
    void (*head_grads_done)(void *ctx, model *m);
    void (*embed_grads_done)(void *ctx, model *m);
    /* out[BT, D] = xin[BT, D] + act[BT, Kl] · w[Kl, D], the product a partial sum over the
     * tensor axis (of xin only this rank's D_Y columns are read). defer: out goes next to norm_in
     * and to nothing else, so the hook may leave the AllGather_Y of out to it. Returns 1 when it
     * did (out holds only this rank's D_Y columns: pass norm_in sharded = 1), else 0. */
    int (*sublayer_out)(void *ctx, model *m, float *out, const float *xin, const float *act,
                        const float *w, int64_t BT, int64_t Kl, int defer);
    /* A sublayer's input norm and in-projections: h[BT, D] = rmsnorm(x) ∘ gain (rstd[BT] the
     * rows' 1/rms), y[k][BT, nk[k]] = h · w[k][D, nk[k]] for k < nw. sharded (sublayer_out
     * returned 1): x holds only this rank's D_Y columns, and the hook gathers the rest into x
     * (with the collective matmul, beside the in-projections' blocks). */
    void (*norm_in)(void *ctx, model *m, float *x, int sharded, float *h, float *rstd,
                    const float *gain, int nw, const float *const *w, const int64_t *nk,
                    float *const *y, int64_t BT);
    /* The backward of sublayer_out's product: with dout = dL/d(out) [BT, D] (from the residual
     * gradient dr: its D_Y shard with TP, else dr itself; `full` is the caller's [BT, D] scratch),
     * dact[BT, Kl] = dout · wᵀ (overwrites) and dw[Kl, D] += actᵀ · dout. */
    void (*sublayer_out_bwd)(void *ctx, model *m, float *dact, float *dw, float *full, float *dr,
                             const float *act, const float *w, int64_t BT, int64_t Kl);
    /* x[BT, D] holds the embedding rows of this vocabulary shard: sum over the vocab shards. */
    void (*embed_reduce)(void *ctx, model *m, float *x, int64_t BT);
    /* stats[3, BT] (rowmax, rowsum, target logit) of this vocab shard → combined over shards. */
    void (*xent_combine)(void *ctx, model *m, float *stats, int64_t BT);
    /* logits_loc[Vl] → logits[V]. */
    void (*gather_vocab)(void *ctx, model *m, float *logits, const float *logits_loc);
    /* Backward: dL/d(sublayer output) as a full [BT, D] array from the residual gradient dr (its
     * D_Y shard with TP, else dr itself; `full` is the caller's [BT, D] scratch). */
    const float *(*resid_grad_gather)(void *ctx, model *m, float *full, float *dr, int64_t BT);
    /* Backward: where a sublayer's input gradient accumulates: dr itself without TP, else the
     * zeroed [BT, D] scratch `part` that partial_end reduce-scatters into dr. */
    float *(*partial_begin)(void *ctx, model *m, float *dr, float *part, int64_t BT);
    void (*partial_end)(void *ctx, model *m, float *dr, float *part, int64_t BT);
    /* partial_end may only start the reduction (with the collective matmul, a non-blocking
     * ReduceScatter_Y that the sublayer's weight-gradient matmuls run beside); partial_done
     * completes it: dr holds the sublayer input's gradient afterwards. Nothing but local compute
     * may come between the two. */
    void (*partial_done)(void *ctx, model *m, float *dr, int64_t BT);
    /* Between two of the model's kernels: communication started earlier may move on (a sharded
     * table's non-blocking collectives; nothing on one rank). Cheap; not collective. */
    void (*poll)(void *ctx);
    /* Pipelining outside a training step (sampling): receive the stage input from the previous
     * stage / send the stage output to the next (blocking), and give every stage the last
     * stage's values (x[n] is 0 on the other stages: a sum over the pipeline axis). */
    void (*stage_recv)(void *ctx, float *x, int64_t n);
    void (*stage_send)(void *ctx, const float *x, int64_t n);
    void (*pipe_share_last)(void *ctx, float *x, int64_t n);
} model_hooks;

/* The single-rank table. */
extern const model_hooks model_hooks_single;

/* The single-rank behaviour of the hooks that a sharded table reuses where an axis is trivial. */
void model_extents_full(const model_shape *s, model_extents *out);
void model_slab_full(const model_shape *s, param_id id, param_slab *out);
layer_w model_layer_weights_local(model *m, int64_t l);
layer_g model_layer_grads_local(model *m, int64_t l);
/* out[BT, D] = xin + act[BT, Kl] · w[Kl, D] (out may alias xin). */
void model_sublayer_out_local(float *out, const float *xin, const float *act, const float *w,
                              int64_t BT, int64_t Kl, int64_t D);
/* h = rmsnorm(x[BT, D]) ∘ gain, y[k] = h · w[k][D, nk[k]] for k < nw. */
void model_norm_in_local(const float *x, float *h, float *rstd, const float *gain, int nw,
                         const float *const *w, const int64_t *nk, float *const *y, int64_t BT,
                         int64_t D);
/* dact[BT, Kl] = dout[BT, D] · w[Kl, D]ᵀ (overwrites), dw[Kl, D] += act[BT, Kl]ᵀ · dout. */
void model_sublayer_out_bwd_local(float *dact, float *dw, const float *act, const float *dout,
                                  const float *w, int64_t BT, int64_t Kl, int64_t D);

/* What model_create allocates besides the parameters and their gradients, for micro-batches of
 * Bl sequences of s->T tokens on a stage of layers [l0, l1) with nslots activation slots and
 * local extents e: in floats, the saved activations of every slot and the passes' scratch; the
 * int32 targets of every slot. Not collective; allocates nothing (the sharding plan lists them
 * among the run's buffers). */
typedef struct {
    int64_t act, scratch, targets;
} model_sizes;
void model_sizes_of(const model_shape *s, const model_extents *e, int64_t Bl, int64_t l0, int64_t l1,
                    int nslots, model_sizes *out);

/* This model's local extents. */
const model_extents *model_extents_of(const model *m);
#endif
