/* engine: the serving engine's compute on every rank. Holds the model (sharded as `generate`
 * shards it: Megatron over heads, F and V on the --tensor axis, independent replicas on the --dp
 * axes) and this rank's part of its replica's paged KV cache, and runs a step plan (batcher.h): the
 * replica's items as one forward of their rows, each row at its own position, attention through
 * each sequence's block table (kernels/attn_paged.h), then the sampled tokens of every replica on
 * every rank.
 *
 * The paged cache: kv_blocks blocks per replica, each holding kv_block positions of every layer,
 * block b layer l position i at pool + b·L·bs·ldk + l·bs·ldk + i·ldk, ldk = Kl·H (this rank's kv
 * heads: K/|Y| of them, or its one head when |Y| > K). A block is one contiguous slab so that it
 * can be copied or shipped whole; its elements are fp32, or bf16 with --kv-dtype bf16 (half the
 * bytes; attention then kern_attn_paged_bf16, generate's bf16 cache's arithmetic).
 *
 * With |Y| > K the Z = |Y|/K ranks sharing a kv head (its group: tensor coordinates k·Z .. k·Z +
 * Z − 1) either each hold it for every sequence (kv_replicate, generate --kv-replicate), or, by
 * default, split the sequences as generate's AllToAll layout does: the replica's pool is Z pools
 * of kv_blocks blocks (batch_opts.shards), a sequence lives in one (batch_item.shard), and group
 * rank z holds pool z. Every rank of the group computes every row's q (its Nl query heads), k
 * and v (the group's head); the rank holding a row's sequence stores its k and v; one AllToAll
 * over the group sends each row's q to that rank, which attends for the group's M = Nl·Z query
 * heads through the block table, and a second AllToAll brings each rank its heads' outputs back.
 * The blocks stay put; only the rows' q and outputs move.
 *
 * Sampling is generate's: temperature and top-k over the logits with the uniform drawn from the
 * counter-based RNG at (the request's seed, GEN_STREAM, token index), as `generate --seed S` draws
 * for its first sequence, so a request is continued as generate continues that prompt alone. */
#ifndef MT_TRAIN_SERVE_ENGINE_H
#define MT_TRAIN_SERVE_ENGINE_H
#include <stdint.h>

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/infer/gen.h"
#include "train/model/model.h"
#include "train/parallel/par.h"
#include "train/serve/batcher.h"
#include "train/step/precision.h"

typedef struct serve_engine serve_engine;

typedef struct {
    int32_t kv_blocks; /* blocks of the pool (per replica) */
    int32_t kv_block;  /* positions per block */
    int32_t max_rows;  /* rows of one forward (--max-batch-tokens) */
    /* one side of disaggregated serving on meshes of its own (0, 0: the mesh's replicas alone):
     * its replicas are rep0, rep0 + 1, ... of nrep in all (both sides') */
    int32_t rep0, nrep;
    int kv_replicate; /* |Y| > K: every rank of a group holds its kv head for every sequence */
    /* a drafter's pool mirroring a target in the AllToAll layout (speculative decoding): this
     * engine, replicated, holds all of the target's pools (0 or 1: one), a segment's blocks in
     * its shard's */
    int32_t mirror_shards;
} engine_dims;

/* Not collective. The pools of a replica (batch_opts.shards): Z = |Y|/K in the AllToAll layout
 * (|Y| > K without kv_replicate), else 1. */
int32_t engine_kv_groups(const config *c, const mesh *m, int kv_replicate);

/* What serve refuses of a config (as engine_create does, before any work): generate's refusals
 * and experts with a capacity. 0 or −1 with err. */
int engine_refuse(const config *c, char *err, size_t errlen);

/* Collective over: world. Checks the request (the schemes generation refuses; the pool against
 * this host's memory), builds the plan, the model (initialised from c->seed; load a checkpoint
 * into engine_model) and the pool. NULL with one message in err (the same on every rank). */
serve_engine *engine_create(const config *c, mesh *m, const engine_dims *d, char *err,
                            size_t errlen);
void engine_destroy(serve_engine *e); /* accepts NULL */
model *engine_model(serve_engine *e);
/* The run's precision (--compute-dtype resolved; bf16: the matmuls on bf16 operands with fp32
 * accumulation, as generate's). */
const precision *engine_precision(const serve_engine *e);
par *engine_par(serve_engine *e);
/* Replicas (--dp shards) and this rank's. */
int32_t engine_replicas(const serve_engine *e);
int32_t engine_replica(const serve_engine *e);
int64_t engine_tensor_ranks(const serve_engine *e); /* |Y| (1 without --tensor) */
/* The pools of a replica (engine_kv_groups) and the one this rank holds. */
int32_t engine_kv_shards(const serve_engine *e);
int32_t engine_kv_shard(const serve_engine *e);
/* Bytes of one cache element, of one weight element the forward reads (its bf16 copy with bf16
 * compute), of this rank's pool, and of one position of a sequence in the whole replica (every
 * layer, K and V, all kv heads). */
int32_t engine_kv_elem_bytes(const serve_engine *e);
int32_t engine_weight_elem_bytes(const serve_engine *e);
/* The pool's element type (--kv-dtype resolved): COMPUTE_FP32 or COMPUTE_BF16. */
compute_dtype engine_kv_dtype(const serve_engine *e);
int64_t engine_pool_bytes(const serve_engine *e);
int64_t engine_kv_bytes_per_token(const serve_engine *e);

/* Collective over: world. Runs plan p (every rank holds the same p): this replica's items as one
 * forward (nothing for a replica without items), then next[k] = the token of the k-th item with
 * sample = 1, on every rank, and (lp not NULL) the plan's log-probability records into lp
 * (batcher.h's batch_plan_lp_floats), on every rank. st gets this rank's share of the step
 * (gen.h's figures). */
void engine_step(serve_engine *e, const batch_plan *p, int32_t *next, float *lp, gen_step *st);
/* Not collective. The engine's buffer for n floats of a step's log-probability records, zeroed
 * (each replica writes its items' records; engine_share sums them). */
float *engine_lp_buffer(serve_engine *e, int64_t n);
/* Not collective. Item it's record (logprob.h) of token from logits [V] into rec. */
void engine_lp_record(serve_engine *e, float *rec, const batch_item *it, const float *logits,
                      int32_t token);
/* After engine_step: the logits [V] of plan item j (this replica's, sample = 1), else NULL. */
const float *engine_logits(const serve_engine *e, int32_t j);

/* Disaggregated serving: the KV transfers this rank made in a step (sent and received). */
typedef struct {
    int32_t sent, received; /* sequences */
    int64_t bytes;          /* sent plus received */
    double seconds;
} engine_xfer;
/* Collective over: the data axes (replicas), in the ranks of each transfer's two replicas. Plan
 * p's transfers, in order: each rank of replica src sends its shard of the blocks (its kv heads,
 * K and V of every layer) to the rank of replica dst at the same tensor coordinate, point to
 * point. Returns what this rank moved. */
engine_xfer engine_transfer(serve_engine *e, const batch_plan *p);
/* Collective over: world (every rank of both sides' meshes, one axis over all, world rank order).
 * Disaggregated serving between two meshes, each side its own tensor degree (engine_dims' rep0 and
 * nrep) and kv layout: records where every replica's tensor coordinates are and its pools. From
 * then on a step's tokens are shared over world, and engine_transfer moves each block's kv heads
 * from the source replica's ranks that hold them for the sequence (its pool batch_xfer.shard) to
 * the destination's that hold its pool batch_xfer.dshard there (kvroute.h), point to point over
 * world in one fixed order, packed by head where the two shards differ. */
void engine_link(serve_engine *e, mesh *world);
/* The tensor degree of replica rep and its pools (engine_kv_shards), either side's; without
 * engine_link this engine's. */
int64_t engine_replica_tensor(const serve_engine *e, int32_t rep);
int32_t engine_replica_pools(const serve_engine *e, int32_t rep);
/* The bytes plan p's transfers ship, summed over the receiving ranks (a kv head replicated over
 * Y/K tensor ranks counts once for each; in the AllToAll layout one rank of a group receives
 * it). */
int64_t engine_xfer_bytes(const serve_engine *e, const batch_plan *p);

/* ---- the forward underneath, for steps other than a plan's (speculative decoding) ---- */

typedef enum { ENGINE_OUT_NONE, ENGINE_OUT_LAST, ENGINE_OUT_ALL } engine_out;

/* A sequence's share of a forward: tokens tok[0..n) at positions [p0, p0 + n), their keys and
 * values stored through block table tab (covering position p0 + n − 1), and which rows' logits
 * are wanted. */
typedef struct {
    const int32_t *tok, *tab;
    int32_t p0, n;
    engine_out out;
    int32_t shard; /* the pool of the replica that holds the sequence (engine_kv_shards) */
} engine_seg;

/* Collective over: the tensor axis (every rank of this replica with the same segments), and with
 * an expert axis (--expert) the world: every replica runs each forward, one without rows too. One
 * forward of the segments' rows (at most the engine's max_rows), each attending through its
 * block table: returns n_out, the rows whose logits are wanted, in order (engine_row_logits);
 * st: this rank's time and rows. */
int64_t engine_forward(serve_engine *e, const engine_seg *segs, int32_t nseg, gen_step *st);
/* The logits [V] of the forward's i-th wanted row. */
const float *engine_row_logits(const serve_engine *e, int64_t i);
/* Not collective. The segments of plan p's items of this replica (at most max_rows of them) into
 * segs, each item's last row wanted when it samples; item_out[j] = its wanted row, or −1 (another
 * replica's, or no sample). Returns the number of segments. */
int32_t engine_segs_of_plan(const serve_engine *e, const batch_plan *p, engine_seg *segs,
                            int32_t *item_out);
/* The speculative decoding this engine runs its steps with (spec_engine.h; NULL: none). The
 * engine keeps the pointer only. */
struct serve_spec;
void engine_set_spec(serve_engine *e, struct serve_spec *sp);
struct serve_spec *engine_spec(const serve_engine *e);
/* Collective over: the data axes (replicas). out[n] = the sum of in[n] over the replicas (each
 * replica writes only its own entries, the others 0): every replica's values on every rank. */
void engine_share(serve_engine *e, float *out, const float *in, int64_t n);
#endif
