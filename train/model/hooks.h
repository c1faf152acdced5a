/* model_par: the hooks model.c calls at the points where a sharded run communicates (see par.h
 * for the scheme). Implemented in par.c; every hook accepts par == NULL (single rank, no
 * sharding), where it is a local copy, add or no-op. Internal to train/. */
#ifndef MT_TRAIN_MODEL_PAR_H
#define MT_TRAIN_MODEL_PAR_H
#include "train/model/model.h"
#include "train/parallel/par.h"

/* Accessors model.c offers to par.c. */
struct par *model_par(model *m);
const par_local *model_local(const model *m);

/* Pipeline stage: layers [l0, l1) on this rank and the number of activation slots. */
void mpar_stage(struct par *p, const model_shape *s, int64_t *l0, int64_t *l1, int *nslots);
/* Local extents and each parameter's slab on this rank. */
void mpar_local(struct par *p, const model_shape *s, par_local *out);
void mpar_slab(struct par *p, const model_shape *s, param_id id, param_slab *out);
/* Does the model hold a full (TP-local) gradient for every parameter? (No with ZeRO-2/3, where
 * gradients live in par's shards and layer gradients in transient buffers.) */
int mpar_model_has_grads(struct par *p);
/* Called once the model's parameters are initialised (ZeRO-1/2 take their master shards). */
void mpar_model_ready(struct par *p, model *m);
/* Layer l's weights (FSDP: gathered just in time; with --overlap the next layer in direction
 * dir, +1 forward or −1 backward, is prefetched) and release after use. */
layer_w mpar_layer_weights(struct par *p, model *m, int64_t l, int dir);
void mpar_layer_release(struct par *p, model *m, int64_t l);
/* Where layer l's weight gradients accumulate (+=), and the signal that they are complete. */
layer_g mpar_layer_grads(struct par *p, model *m, int64_t l);
void mpar_layer_grads_done(struct par *p, model *m, int64_t l);
/* The non-layer parameters (P_EMBED, P_FINAL_NORM, P_UNEMBED): weight as the compute uses it
 * (FSDP: gathered) and where its gradient accumulates. */
const float *mpar_weight(struct par *p, model *m, param_id id);
float *mpar_grad(struct par *p, model *m, param_id id);
/* final_norm and unembed gradients complete / embed gradient complete. */
void mpar_head_grads_done(struct par *p, model *m);
void mpar_embed_grads_done(struct par *p, model *m);
/* out[BT, D] = xin[BT, D] + act[BT, Kl] · w[Kl, D] where the product is a partial sum over the
 * tensor axis: ReduceScatter_Y, residual add on the D_Y shard, AllGather_Y for the next block. */
void mpar_sublayer_out(struct par *p, model *m, float *out, const float *xin, const float *act,
                       const float *w, int64_t BT, int64_t Kl);
/* x[BT, D] holds the embedding rows of this vocabulary shard: sum over the tensor axis. */
void mpar_embed_reduce(struct par *p, model *m, float *x, int64_t BT);
/* stats[3, BT] (rowmax, rowsum, target logit) of this vocab shard → combined over shards. */
void mpar_xent_combine(struct par *p, model *m, float *stats, int64_t BT);
/* logits_loc[Vl] → logits[V] gathered over the tensor axis. */
void mpar_gather_vocab(struct par *p, model *m, float *logits, const float *logits_loc);
/* Backward: dL/d(sublayer output) as a full [BT, D] array from the residual gradient dr (D_Y
 * shard with TP, else dr itself). */
const float *mpar_resid_grad_gather(struct par *p, model *m, float *full, float *dr, int64_t BT);
/* Backward: where a sublayer's input gradient (partial over the tensor axis) accumulates:
 * dr itself without TP, else a zeroed [BT, D] buffer `part` that _end reduce-scatters into dr. */
float *mpar_partial_begin(struct par *p, model *m, float *dr, float *part, int64_t BT);
void mpar_partial_end(struct par *p, model *m, float *dr, float *part, int64_t BT);

/* Pipelining outside a training step (sampling): receive the stage input from the previous
 * stage / send the stage output to the next (blocking), and give every stage the last stage's
 * values (x[n] is 0 on the other stages: a sum over the pipeline axis). */
void mpar_stage_recv(struct par *p, float *x, int64_t n);
void mpar_stage_send(struct par *p, const float *x, int64_t n);
void mpar_pipe_share_last(struct par *p, float *x, int64_t n);

/* Single-rank implementations (par_local.c), also the building blocks of the sharded ones. */
void mpar_local_full(const model_shape *s, par_local *o);
void mpar_slab_full(const model_shape *s, param_id id, param_slab *o);
layer_w mpar_layer_weights_local(model *m, int64_t l);
layer_g mpar_layer_grads_local(model *m, int64_t l);
void mpar_sublayer_out_local(float *out, const float *xin, const float *act, const float *w,
                             int64_t BT, int64_t Kl, int64_t D);
#endif
