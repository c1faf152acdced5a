/* par: the sharded run on this rank: the buffers the sharding plan (plan.h) lists for it, the
 * model's hook table for a sharded run (see model/hooks.h for the hook points), and the
 * step-level communication the trainer needs. Every function accepts p == NULL, the run without
 * communication (a trivial plan: the single-rank hooks). Depends on the plan, mesh/ and the
 * model's public API (model.h, hooks.h); the model does not depend on it. */
#ifndef MT_TRAIN_PAR_H
#define MT_TRAIN_PAR_H
#include <stdint.h>
#include "mesh/cost.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/model/hooks.h"
#include "train/parallel/plan.h"

typedef struct par par;

/* ---- the plan from a mesh ---- */
/* Not collective (every rank computes the same). The plan's input for config c on mesh m: the
 * rules that need the mesh (config_for_mesh, which may change c's micro-batch: in->c holds the
 * result), each role's axes read off m, --alg resolved over them, and the choices off (no bucket,
 * no collective matmuls: the caller sets in->bucket and in->cmatmul). Returns 0, or −1 with the
 * reason in err. */
int par_plan_in(const config *c, mesh *m, plan_in *in, char *err, size_t errlen);

/* ---- lifetime and the step-level communication (trainer.c) ---- */
/* Collective over: world. The sharded run of plan pl on mesh m: allocates every buffer the plan
 * lists for it (PLAN_OWNER_PAR). *out = NULL for a trivial plan (no communication: the
 * single-rank hooks). pl must outlive the run. Returns 0, or −1 with the message in err (the same
 * on every rank) when memory runs out on any rank. */
int par_create(const plan *pl, mesh *m, par **out, char *err, size_t errlen);
void par_destroy(par *p); /* accepts NULL */
/* The hook table to create the model with (model_create): the single-rank table for p == NULL.
 * Valid until par_destroy. */
const model_hooks *par_model_hooks(par *p);
/* Start of a step (zeroes the gradient shards) and of micro-batch j of n. */
void par_step_begin(par *p);
void par_micro_begin(par *p, int64_t j, int64_t n);
/* Completes every gradient reduction of the step (DP AllReduce / ZeRO ReduceScatter). */
void par_finish_grads(par *p, model *m);
/* Not collective. --collective-matmul auto: whether the collective matmuls expose less
 * communication than the plain ReduceScatter and AllGather they replace, by the cost model (r's
 * links, a block's matmul at `flops` FLOP/s): per sublayer, the plain pair's predicted time
 * against (|Y| − 1) ring steps that each expose max(0, one block's transfer − one block's
 * matmul; on a line a step is two ppermutes at once, one each way). 0 without a tensor axis. */
struct report;
int par_cmatmul_wins(const plan *pl, const struct report *r, double flops);
/* Σ g² over the global gradient (each element counted once), identical on every rank. */
double par_grad_sumsq(par *p, model *m);
/* The slice of parameter id this rank updates: params, grads, and the offset of the slice in the
 * optimizer-state vector (which holds only owned slices). *n = 0 when it owns nothing. */
typedef struct {
    float *p, *g;
    int64_t n, state_off;
} par_owned;
par_owned par_owned_slice(par *p, model *m, param_id id);
/* The wire format of the run's calls. Inside a training step or an evaluation (on: the trainer
 * brackets them) every call moves in the plan's (--comm-dtype); between them (sampling, the
 * parameters' sync for a checkpoint: the model's forward-only uses) in fp32, as a forward-only
 * plan's do. Off when created. */
void par_in_step(par *p, int on);
/* The collectives of kind k the run has made since it was created (0 for p == NULL). */
int64_t par_calls(const par *p, plan_coll k);
/* Where the model's parameters stand between steps. ZeRO-1/2 with --overlap finish step s's
 * update inside step s+1's forward: the updated shards' gathers are deferred (UPDATED while the
 * update runs, DUE once it is complete), then started layer by layer (GATHERING: layer l is whole
 * once its gathers retired, which the forward waits for as it reads it). A reader outside the
 * model's hooks (checkpoints, sampling, tests) reads the parameters only when WHOLE:
 * par_params_sync brings them there (trainer_model does). Without ZeRO-1/2 --overlap, and for
 * p == NULL, always WHOLE. */
typedef enum {
    PAR_PARAMS_WHOLE,     /* every parameter whole */
    PAR_PARAMS_UPDATED,   /* the update in progress deferred gathers of its shards */
    PAR_PARAMS_DUE,       /* the update is complete; its gathers have not started */
    PAR_PARAMS_GATHERING, /* the gathers run (tickets: par_impl.h) */
} par_params_state;
par_params_state par_params(const par *p);
/* With --overlap under ZeRO-1/2: the dense MLP weights' deferred update gathers started so far,
 * and those a forward waited for just before their layer (the rest: par_params_sync's). */
void par_mlp_gathers(const par *p, int64_t *started, int64_t *waited);
/* With --overlap over an expert axis: the MoE blocks' AllToAlls left in flight beside the
 * model's compute (the shared experts', the router's backward: model_moe.c), those waited for,
 * and the seconds of their transfer hidden behind it, since the run began: per call left in
 * flight, its transfer less the time its wait blocked, at least 0, summed (the measure of
 * par_cp_dkv_behind's hidden time too; blocking calls count none). */
void par_ep_overlap(const par *p, int64_t *started, int64_t *waited, double *hidden);
/* After updating parameter id's slice: ZeRO-1/2 AllGather the updated shard into the whole
 * parameter (without --overlap one parameter's shard is staged at a time, so slices are used one
 * by one; with --overlap the gathers start with the next step and complete as its forward reads
 * each layer, or in par_params_sync). */
void par_owned_done(par *p, model *m, param_id id);
/* After the whole update (ZeRO-3: the gathered copies are stale). */
void par_after_update(par *p, model *m);
/* Completes ZeRO-1/2 --overlap's deferred gathers of the updated shards: the parameters WHOLE
 * (for a reader outside the model's hooks: checkpoints, tests, sampling). */
void par_params_sync(par *p);
/* Checkpoint geometry. The global slab this rank's optimizer-state slice of parameter id covers
 * (par_owned_slice's n elements, row-major), and whether this rank is the one that writes a
 * block held by several ranks (parameters: kind 0, optimizer state: kind 1). */
param_slab par_state_slab(par *p, model *m, param_id id);
int par_is_writer(par *p, param_id id, int kind);
/* After parameters were loaded into the model's storage: refresh derived copies (ZeRO-1/2
 * master shards, ZeRO-3 gathered caches). */
void par_params_loaded(par *p, model *m);
/* Mean of a per-stage value over the pipeline stages, on every rank. */
double par_pipe_mean(par *p, double v);
/* A value known on the last stage (0 elsewhere) → its mean over the data shards, on every rank. */
double par_pipe_last_value(par *p, double v);
/* Collective over: the data axes. What the router did in the step (model_moe_stats), summed over
 * the data shards (the slots kept per expert, dropped and all; the balance and z-losses' means
 * over every shard's sequences). out->kept is valid until the next call. */
void par_moe_stats(par *p, model *mod, model_moe_stats *out);
/* Not collective. The attention FLOPs of the context axis's blockwise forwards on this rank so far
 * (kern_attn_part_flops of every block attended; 0 without --cp). */
double par_cp_flops(const par *p);
/* The ring's blocks (forward and backward) this rank skipped because none of its queries sees
 * them (the contiguous split; never under zigzag), since the run began (0 for NULL). */
int64_t par_cp_skipped(const par *p);
/* The ring backward's dK, dV hops this rank waited for after the rows' half of the next block
 * (--overlap: |C| − 1 a layer and micro-batch; 0 without), since the run began (0 for NULL);
 * *hops: every dK, dV hop (|C| a layer and micro-batch), *hidden: the seconds of the former's
 * transfer that compute hid, measured as par_ep_overlap's (per request left in flight, its
 * transfer less the time its wait blocked, at least 0, summed); either may be NULL. */
int64_t par_cp_dkv_behind(const par *p, int64_t *hops, double *hidden);
/* Mean over the data shards of a per-rank value (loss). */
double par_data_mean(par *p, double v);

/* ---- the plan printed (layout_print.c) ---- */
/* Rank 0 prints the sharding layout: shardings in the book's notation, one layer's collectives
 * with V, path and predicted time (r supplies the link constants), memory per rank from the
 * plan's buffers. Not collective: the caller picks the rank. */
struct report;
struct report_case;
void plan_print_layout(const plan *pl, const struct report *r, FILE *out);
/* Fills the summary's description of the run (scheme name written into buf). */
void plan_report_case(const plan *pl, struct report_case *k, char *buf, size_t len);
#endif
