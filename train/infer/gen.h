/* gen: generation on the mesh with a KV cache — the sharding for inference, the cache, prefill
 * (every prompt token at once, compute-bound, writes the cache) and decode (one token per
 * sequence per step, reads every weight and the cache), and the sampler's pick.
 *
 * How it is sharded (the book's notation; B = sequences, S = cache positions):
 *   weights as in training with --tensor Y (Megatron over heads, F and V), replicated over the
 *   --dp axes X, which hold independent replicas: sequences B_X, no communication between them.
 *   KV cache K, V[L, B_X, S, K_Y, H]: kv heads over Y. When |Y| > K the |Y|/K ranks that share a
 *   kv head (its group, axis Z below) either
 *   - hold it for all their sequences (--kv-replicate: K replicated, as the training weights), or
 *   - split the sequences, K, V[L, B_XZ, S, K_Y, H], and decode's attention is the book's
 *     AllToAll algorithm: (1) Q[B, N_YZ, H] = X·W_Q; (2) AllToAll_Z B→N: Q[B_Z, N_Y, H], the
 *     group's M = N/K query heads of this rank's sequences; (3) attention against the local
 *     cache; (4) AllToAll_Z back: O[B, N_YZ, H]; (5) X{U_YZ} = O·W_O, reduced as in training.
 *     The cache stays put; only the small Q and O rows move.
 *   Prefill needs no cache to attend (the prompt's own keys are at hand) and stores the rows of
 *   the sequences this rank caches.
 * FSDP (--zero 3) is refused: decode is bound by memory bandwidth, and moving every weight over
 * the links each step costs more than reading it (the book's rule: no FSDP for generation).
 * The caller loads the weights (ckpt_load_params) into gen_model. Depends on model, par, mesh,
 * kernels. */
#ifndef MT_TRAIN_INFER_GEN_H
#define MT_TRAIN_INFER_GEN_H
#include <stdint.h>

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/infer/prompts.h"
#include "train/model/model.h"
#include "train/parallel/par.h"
#include "train/step/precision.h"

/* RNG stream of generation's sampler (ASCII "gener"), apart from training's streams. */
#define GEN_STREAM UINT64_C(0x67656e6572)

typedef enum { GEN_KV_HEADS, GEN_KV_REPLICATED, GEN_KV_ALLTOALL } gen_kv_mode;

typedef struct {
    int64_t B;        /* global sequences */
    int64_t S;        /* cache positions per sequence (longest prompt + new tokens) */
    int64_t max_rows; /* rows of one forward (prefill chunk), >= S and >= the local batch */
    int kv_replicate; /* |Y| > K: replicate the kv heads instead of the AllToAll algorithm */
} gen_dims;

/* What one prefill or decode step did on this rank (sums over the step). */
typedef struct {
    double seconds;  /* wall time on this rank */
    double rows;     /* tokens processed (this rank's share when the tensor axis repeats them) */
    double p_bytes;  /* weight bytes read */
    double kv_bytes; /* cache bytes read and written */
    double flops;    /* matmul and attention FLOPs */
} gen_step;

typedef struct gen gen;

/* Not collective. The schemes generation refuses (FSDP, ZeRO-1/2, pipeline, link emulation, each
 * with the reason): 0, or −1 with the message in err. Serving (train/serve) shares the rule. */
int gen_refuse(const config *c, char *err, size_t errlen);
/* Not collective. Bytes this host has available (MemAvailable), or −1 when unknown. */
double gen_mem_available(void);
/* Collective over: world. The sharding plan of forwards of up to max_rows rows per replica (its
 * tensor-parallel buffers hold that many rows; forward only) into *pl, and its sharded run into
 * *out (par_create: NULL on one rank). pl must outlive the run. 0, or −1 with err. */
int gen_plan_create(const config *c, mesh *m, int64_t max_rows, plan *pl, par **out, char *err,
                    size_t errlen);
/* Collective over: world. The model of a generation run over the plan's run (gen_plan_create):
 * c's shape and seed, no training batch, the plan's compute dtype on prec's context, run's hooks.
 * NULL on every rank, with err, when a rank is out of memory. */
model *gen_model_create(const config *c, mesh *m, const plan *pl, const precision *prec, par *run,
                        char *err, size_t errlen);
/* Collective over: world. Checks the request (FSDP, pipeline, batch division, the cache's size
 * against this host's memory before allocating it), builds the plan, the model (initialised from
 * c->seed) and the cache. NULL with one message in err (the same on every rank) on bad input. */
gen *gen_create(const config *c, mesh *m, const gen_dims *d, char *err, size_t errlen);
/* gen_create with the cache's positions sharded over the mesh axis kv_shard (kvshard.h; 0: not
 * sharded, as gen_create). */
gen *gen_create_kv(const config *c, mesh *m, const gen_dims *d, char kv_shard, char *err,
                   size_t errlen);
/* gen_create_kv whose prefill shards the prompts over the kv axis too (generate --cp AXIS): each
 * rank computes the positions it caches (kvshard.h), attending every rank's keys. */
gen *gen_create_cp(const config *c, mesh *m, const gen_dims *d, char axis, char *err,
                   size_t errlen);
void gen_destroy(gen *g); /* accepts NULL */
/* Collective over: world. gen_create's checks of the request alone (nothing big allocated), so
 * that a command making several requests checks them all before the first runs. 0 or −1 with
 * err. */
int gen_check(const config *c, mesh *m, const gen_dims *d, char *err, size_t errlen);
model *gen_model(gen *g);
/* The run's precision (--compute-dtype resolved: the matmuls' dtype, in bf16 the path). */
const precision *gen_precision(const gen *g);
par *gen_par(gen *g);
gen_kv_mode gen_mode(const gen *g);
/* The local sequences: global indices [row0, row0 + n) (shared by the ranks of a replica). */
void gen_rows(const gen *g, int64_t *row0, int64_t *n);
/* The size of the --kv-shard axis (1 without) and this rank's index on it. */
int64_t gen_kv_shard(const gen *g, int64_t *index);
/* Bytes of this rank's cache (2 per element with --kv-dtype bf16, 4 with fp32). */
int64_t gen_cache_bytes(const gen *g);
/* The cache's element type, --kv-dtype resolved (auto: the compute dtype): COMPUTE_FP32 or
 * COMPUTE_BF16. A bf16 cache holds K and V rounded to bf16 (prefill attends to them rounded too,
 * as decode will), and attention multiplies bf16 q·Kᵀ and P·V with fp32 accumulation
 * (kern_attn_cached_bf16). */
compute_dtype gen_kv_dtype(const gen *g);
/* Collective over: the tensor axis. Prefill of the local sequences' prompts (ps holds all B):
 * fills the cache and the logits of each one's last position; next[n] gets the sampled first new
 * token. Positions restart at the prompt's end. */
void gen_prefill(gen *g, const prompt_set *ps, int32_t *next, gen_step *st);
/* Collective over: the tensor axis. One decode step: cur[n] is each local sequence's latest token;
 * next[n] the sampled one. */
void gen_decode(gen *g, const int32_t *cur, int32_t *next, gen_step *st);
/* The logits [n, V] of the last step's picks (local sequences, in order); after gen_extend, of
 * every row. */
const float *gen_logits(const gen *g);
/* Collective over: the tensor axis (every rank of a replica with the same n and tok). A cached
 * forward of several rows per local sequence, the target's scoring of drafted tokens (draft.h):
 * sequence b's n[b] ≥ 0 tokens (tok, packed in sequence order) at positions gen_pos(b) ..
 * gen_pos(b) + n[b] − 1, their keys and values stored in its cache, each row attending to the
 * cache before it and to the rows before it; the logits of all Σn rows go to gen_logits. Samples
 * nothing and moves no position: the caller keeps the accepted rows with gen_set_pos (the rows
 * past it are stale and get overwritten). Not for the AllToAll layout nor experts with a
 * capacity. */
void gen_extend(gen *g, const int32_t *n, const int32_t *tok, gen_step *st);
/* Local sequence b's next position (the first cache row not yet valid); set it back to roll the
 * cache back. */
int64_t gen_pos(const gen *g, int64_t b);
void gen_set_pos(gen *g, int64_t b, int64_t pos);
#endif
