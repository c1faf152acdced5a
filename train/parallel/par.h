/* par: how the model is sharded over the mesh (the sharding plan), the model's hook table for a
 * sharded run (see model/hooks.h for the hook points), and the step-level communication the
 * trainer needs. Every function accepts p == NULL, the single-rank run. Depends on mesh/ and on
 * the model's public API (model.h, hooks.h); the model does not depend on it. */
#ifndef MT_TRAIN_PAR_H
#define MT_TRAIN_PAR_H
#include <stdint.h>
#include "mesh/cost.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/model/hooks.h"

typedef struct par par;

/* ---- plan lifetime and the step-level communication (trainer.c) ---- */
/* Collective over: world. Builds the plan from the config's sharding flags on mesh m; returns
 * NULL with a message in err when the request is impossible (an axis used twice for one
 * dimension, a dimension not divisible by its shard count, ...), or when no sharding applies
 * (*trivial set to 1: run the single-rank path). */
par *par_create(const config *c, mesh *m, int *trivial, char *err, size_t errlen);
void par_destroy(par *p); /* accepts NULL */
/* The hook table to create the model with (model_create): the single-rank table for p == NULL.
 * Valid until par_destroy. */
const model_hooks *par_model_hooks(par *p);
/* Number of data shards (product of the data axes) and this rank's shard index. */
int64_t par_data_shards(const par *p);
int64_t par_data_index(const par *p);
/* Start of a step (zeroes the gradient shards) and of micro-batch j of n. */
void par_step_begin(par *p);
void par_micro_begin(par *p, int64_t j, int64_t n);
/* Completes every gradient reduction of the step (DP AllReduce / ZeRO ReduceScatter). */
void par_finish_grads(par *p, model *m);
/* Not collective (the same on every rank). Groups the data-axis gradient reductions into
 * buckets of `elems` elements, at most par_bucket_limit (0: one reduction per tensor, as
 * without; none for DP over --dcn, which reduces the whole gradient at once). Allocates the two
 * staging buffers; returns 0, or −1 out of memory (buckets off). */
int par_set_bucket(par *p, int64_t elems);
/* The gradient elements this rank reduces over the data axes in a step (its stage's, TP-local),
 * rounded up to a multiple of the data axes' size: no bucket need be larger. 0 without. */
int64_t par_bucket_limit(const par *p);
/* Not collective (the same on every rank). Turns tensor parallelism's collective matmuls
 * (tensor.c) on or off: allocates or frees their scratch. Returns 0, or −1 out of memory (off).
 * No-op without a tensor axis. par_cmatmul: on (1) or off (0). */
int par_set_cmatmul(par *p, int on);
int par_cmatmul(const par *p);
/* Not collective. --collective-matmul auto: whether the collective matmuls expose less
 * communication than the plain ReduceScatter and AllGather they replace, by the cost model (r's
 * links, a block's matmul at `flops` FLOP/s): per sublayer, the plain pair's predicted time
 * against (|Y| − 1) ring steps that each expose max(0, one block's transfer − one block's
 * matmul), steps of two ppermutes on a line. */
struct report;
int par_cmatmul_wins(const par *p, const struct report *r, double flops);
/* The major data axis (its links carry the data-axis reductions), −1 without. */
int par_data_axis(const par *p);
/* Elements of a bucket (0: off). */
int64_t par_bucket(const par *p);
/* Not collective. The bucket the cost model picks (mesh/cost.h cost_bucket_bytes): the fewest
 * elements (of wire_bytes each) whose data-axis reduction, over links `link`, has its hop
 * latency at most `overhead` × its transfer, rounded up to a power of two. Deterministic for a
 * chip's constants (cost_chip_link); measured ones vary from run to run, and with them the
 * size and the order of the additions. 0 without data axes. */
int64_t par_bucket_auto(const par *p, const cost_link *link, int wire_bytes, double overhead);
/* Σ g² over the global gradient (each element counted once), identical on every rank. */
double par_grad_sumsq(par *p, model *m);
/* The slice of parameter id this rank updates: params, grads, and the offset of the slice in the
 * optimizer-state vector (which holds only owned slices). *n = 0 when it owns nothing. */
typedef struct {
    float *p, *g;
    int64_t n, state_off;
} par_owned;
par_owned par_owned_slice(par *p, model *m, param_id id);
/* After updating parameter id's slice: ZeRO-1/2 AllGather the updated shard into the whole
 * parameter (without --overlap one parameter's shard is staged at a time, so slices are used one
 * by one; with --overlap the gathers start with the next step and complete as its forward reads
 * each layer, or in par_params_sync). */
void par_owned_done(par *p, model *m, param_id id);
int64_t par_state_size(par *p, model *m);
/* After the whole update (ZeRO-3: the gathered copies are stale). */
void par_after_update(par *p, model *m);
/* Completes ZeRO-1/2 --overlap's deferred gathers of the updated shards, so that the model's
 * parameters are whole (for a reader outside the model's hooks: checkpoints, tests, sampling). */
void par_params_sync(par *p);
/* Checkpoint geometry. The global slab this rank's optimizer-state slice of parameter id covers
 * (par_owned_slice's n elements, row-major), and whether this rank is the one that writes a
 * block held by several ranks (parameters: kind 0, optimizer state: kind 1). */
param_slab par_state_slab(par *p, model *m, param_id id);
int par_is_writer(par *p, param_id id, int kind);
/* After parameters were loaded into the model's storage: refresh derived copies (ZeRO-1/2
 * master shards, ZeRO-3 gathered caches). */
void par_params_loaded(par *p, model *m);
/* Memory per rank by category, in bytes. */
typedef struct {
    int64_t params, grads, optimizer, activations, gathered, buffers;
} par_mem;
void par_memory(par *p, model *m, const config *c, par_mem *out);
/* Rank 0 prints the sharding layout: shardings in the book's notation, one layer's collectives
 * with V, path and predicted time, memory per rank. r supplies the link constants. */
struct report;
struct report_case;
void par_print_layout(par *p, model *m, const config *c, const struct report *r, FILE *out);
/* Fills the summary's description of the run (scheme name written into buf). */
void par_report_case(par *p, const config *c, struct report_case *k, char *buf, size_t len);
/* Pipelining: the pipeline axis (−1 if none), its size P and this rank's stage s. */
void par_pipe_axis(const par *p, int *axis, int64_t *P, int64_t *s);
/* Mean of a per-stage value over the pipeline stages, on every rank. */
double par_pipe_mean(par *p, double v);
/* A value known on the last stage (0 elsewhere) → its mean over the data shards, on every rank. */
double par_pipe_last_value(par *p, double v);
/* Mean over the data shards of a per-rank value (loss). */
double par_data_mean(par *p, double v);
#endif
