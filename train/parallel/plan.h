/* plan: the sharding plan as a value. plan_build makes it once from the model's shape, the
 * config's sharding flags, the size of each axis role and this rank's index in it, and the run's
 * two choices (the gradient bucket, the collective matmuls). Pure arithmetic: no MPI and no mesh
 * handle (the axes it names are numbers; par.c reads them off a mesh, tests/parallel/test_layout.c
 * writes them by hand). Everything that allocates, frees, counts memory, prints the layout,
 * executes a collective or predicts one reads this value:
 *   - the axis roles, each defined once: batch (every data axis: the batch's B_X), data (the ICI
 *     data axes ZeRO shards over and gradients are reduce-scattered over: the batch axes without
 *     --dcn's), dcn, tensor (Y) and pipeline (Z), with their sizes and this rank's indices;
 *   - the micro-batch on this rank: micro_seqs sequences, rows = micro_seqs · T tokens (the one
 *     definition of "tokens per micro-batch per data shard");
 *   - the pipeline stage's layers and activation slots, the local extents, every parameter's
 *     geometry (TP slab, ZeRO shard) and the shards' offsets;
 *   - the list of every buffer of the run (plan_buf): element count, element type, category and
 *     owner — the model's storage, the optimizer's moments, the sharded run's buffers (par.c),
 *     the executor's pipeline buffers;
 *   - the schedule of the collectives of one layer and of the step (plan_call): op, axes, count,
 *     bytes, path and wire format.
 * Depends on config, the model's parameter table and hook types (model.h, hooks.h) and the cost
 * model (mesh/cost.h: the bucket size it picks). Not collective; nothing here talks to the mesh. */
#ifndef MT_TRAIN_PLAN_H
#define MT_TRAIN_PLAN_H
#include <stddef.h>
#include <stdint.h>

#include "calc/schedule.h" /* sched_action: the executor's list, calc's pipeline tables */
#include "mesh/coll.h"     /* mesh_op, mesh_wire, mesh_axes (types only) */
#include "mesh/cost.h"
#include "train/config/config.h"
#include "train/model/hooks.h"

typedef struct plan plan;

/* One role's axes: which mesh axes play it (ordered, major first; none: n = 1, index 0), their
 * sizes and wraparound (the cost model), the algorithm --alg resolves to over them, and their
 * names as the book's subscripts ("XY"). */
typedef struct {
    mesh_axes axes;
    int64_t n, index;
    int sizes[MESH_MAX_AXES], wraps[MESH_MAX_AXES];
    mesh_alg alg;
    char sub[MESH_MAX_AXES + 1];
} plan_axes;

/* What plan_build takes: the config (after config_for_mesh: the pipeline's micro-batch resolved),
 * each role's axes, and the run's choices: the gradient bucket asked for, in elements (0 = one
 * reduction per tensor; plan_build caps it, see plan.bucket_cap), and whether the tensor axis
 * runs its collective matmuls. forward_only: generation (the model holds no gradients and no
 * saved activations, there is no optimizer and no pipeline schedule). */
typedef struct {
    config c;
    plan_axes batch, data, dcn, tensor, pipe;
    plan_axes expert; /* --expert: the axis the routed experts are sharded over (one of batch's) */
    plan_axes erep;   /* the data axes without --expert's: where copies of one routed expert live */
    plan_axes cp;     /* --cp: the context axis, which shards T (also one of data's) */
    int64_t bucket;
    int cmatmul;
    int forward_only;
} plan_in;

/* Geometry of one parameter as blocks: nb blocks (the stage's layers for a stacked parameter,
 * else 1; 0 when another pipeline stage holds it) of a 2D matrix [R, C]. The TP slab of a block
 * is rows [r0, r0+R) × cols [c0, c0+C) of the global block [Rg, Cg]; under ZeRO the TP slab is
 * split over the data axes along `zdim` (0 rows, 1 cols). `repl`: the TP slab is replicated over
 * the tensor axis (norm gains); `kv_group`: over a group of tensor ranks that share a kv head. */
typedef struct {
    int stacked;
    int64_t nb, Rg, Cg, R, C, r0, c0;
    int zdim;
    int repl, kv_group;
    int64_t shard_n; /* elements of this rank's ZeRO shard (all blocks) */
} plan_geo;

/* Elements of one TP-local block. */
static inline int64_t plan_geo_block(const plan_geo *g) {
    return g->R * g->C;
}

/* ---- the buffers ---- */

/* The memory line's categories. */
typedef enum {
    PLAN_MEM_PARAMS,
    PLAN_MEM_GRADS,
    PLAN_MEM_OPTIMIZER,
    PLAN_MEM_ACTIVATIONS,
    PLAN_MEM_GATHERED,
    PLAN_MEM_BUFFERS, /* communication and transient buffers, scratch */
    PLAN_MEM_COUNT
} plan_mem;

/* Element types. A buffer's element size is plan_dtype_bytes(dtype). */
typedef enum { PLAN_F32, PLAN_BF16, PLAN_I32 } plan_dtype;
int plan_dtype_bytes(plan_dtype t);

/* Who allocates and frees a buffer (each owner through plan_alloc/plan_free, but the model, which
 * allocates its storage itself in model_create with the sizes listed here). */
typedef enum { PLAN_OWNER_MODEL, PLAN_OWNER_OPTIMIZER, PLAN_OWNER_PAR, PLAN_OWNER_EXEC } plan_owner;

/* Every buffer a run can have; two-slot buffers are listed once per slot. */
typedef enum {
    /* the model (model_create) */
    BUF_PARAMS,        /* this rank's parameters (ZeRO-3: its shards) */
    BUF_GRADS,         /* their gradients (not with ZeRO-2/3) */
    BUF_ACTIVATIONS,   /* saved activations of every slot */
    BUF_TARGETS,       /* each slot's target tokens (int32) */
    BUF_MODEL_SCRATCH, /* the passes' scratch: rope tables, gradients of a layer, logits */
    /* ... with --compute-dtype bf16 (model.h's model_compute) */
    BUF_PARAMS_BF16,        /* the parameters' bf16 copy, made once per update (not ZeRO-3) */
    BUF_ACTIVATIONS_BF16,   /* attention's probabilities of every slot, in bf16 */
    BUF_MODEL_SCRATCH_BF16, /* the products' bf16 operands (ZeRO-3: a gathered layer's copy) */
    /* the optimizer (trainer.c) */
    BUF_OPT_M,
    BUF_OPT_V, /* AdamW's moments over the slices this rank updates */
    /* the sharded run (par.c): data axes (zero.c, bucket.c) */
    BUF_SHARD_GRADS,     /* ZeRO: the gradient shards */
    BUF_UPDATE_STAGE,    /* ZeRO-1/2: the shard being updated (with --overlap every shard) */
    BUF_LAYER_GRADS,     /* ZeRO-2/3: a layer's transient gradients, two slots */
    BUF_LAYER_SCATTERED, /* ... and their ReduceScatter results, two slots */
    BUF_EMBED_GRAD,
    BUF_FINAL_NORM_GRAD,
    BUF_UNEMBED_GRAD,   /* ZeRO-2/3: non-layer gradients */
    BUF_GATHERED_LAYER, /* ZeRO-3: a layer's gathered weights, two slots */
    BUF_GATHER_STAGE,   /* ... their staging for column-sharded gathers, two slots */
    BUF_GATHERED_EMBED,
    BUF_GATHERED_FINAL_NORM,
    BUF_GATHERED_UNEMBED,
    BUF_COLUMN_PACK,   /* the column packing of a block */
    BUF_DCN,           /* --zero 0 with --dcn: the flat gradient padded to n_data shards + one */
    BUF_BUCKET_STAGE,  /* gradient buckets, two slots */
    BUF_BUCKET_RESULT, /* ZeRO: a bucket's ReduceScatter result, two slots */
    BUF_GATHER_SEND,   /* ZeRO-3 with buckets: a layer's shards packed for its gathers, two slots */
    /* the tensor axis (tensor.c, cmatmul.c) */
    BUF_TENSOR_A,
    BUF_TENSOR_B,    /* packing of [rows, D] */
    BUF_KV_EXCHANGE, /* the gradient exchange of a kv head shared by tensor ranks */
    BUF_CMATMUL,     /* the collective matmuls' scratch */
    /* the executor's pipeline (exec.c) */
    BUF_PIPE_DOUT,  /* the received dL/d(stage output) */
    BUF_PIPE_DSEND, /* dL/d(stage input) being sent, one per slot */
    /* the expert axis (expert.c) */
    BUF_EP_STAGE,  /* the rows an AllToAll of tokens sends or receives, in its order */
    BUF_EP_COUNTS, /* the step's kept slots per MoE block and expert, over the shards and stages */
    /* ... ZeRO of the mixture-of-experts weights (expert_zero.c) */
    BUF_EP_LAYER_GRADS, /* ZeRO-2/3: a MoE block's transient gradients */
    BUF_EP_GATHERED,    /* ZeRO-3: a MoE block's gathered weights */
    BUF_EP_PACK,        /* a MoE block's tensor packed by shard, and a collective's result */
    BUF_EP_UPDATE,      /* ZeRO-1/2: the shard of a MoE weight being updated */
    /* the context axis (cp.c; the executor's token pieces) */
    BUF_CP_TOKENS,  /* this rank's pieces of a micro-batch's sequences, rows of T_p + 1 (int32) */
    BUF_CP_SAVED,   /* every slot's and layer's softmax max and sum m, l [rows, N_Y] (ring,
                       allgather) or probabilities [B, N_YC, T, T] (ulysses) */
    BUF_CP_KV,      /* the gathered, travelling or head-sharded K and V and their gradients */
    BUF_CP_SCRATCH, /* the blockwise kernels' scratch, the rotary tables, the positions */
    BUF_CP_MOE,     /* a MoE block's router statistics: this rank's pieces', every rank's */
    BUF_COUNT
} plan_buf_id;

typedef struct {
    plan_buf_id id;
    int slot;
    plan_owner owner;
    plan_mem cat;
    plan_dtype dtype;
    int64_t n; /* elements */
} plan_buf;

#define PLAN_MAX_BUFS 64

/* ---- the collectives ---- */

/* The pass a collective belongs to, and where it sits (the path). */
typedef enum { PLAN_FWD, PLAN_BWD, PLAN_STAGE, PLAN_UPDATE, PLAN_STEP } plan_pass;
typedef enum {
    PLAN_CRITICAL,   /* blocks the next matmul */
    PLAN_BLOCKING,   /* blocks, off the matmuls' chain */
    PLAN_PREFETCHED, /* started a layer early (--overlap) */
    PLAN_ASYNC,      /* non-blocking, completed later (--overlap) */
    PLAN_HIDDEN      /* one ring step of a collective matmul, behind its block's matmul */
} plan_path;
typedef enum {
    PLAN_ROLE_DATA,
    PLAN_ROLE_TENSOR,
    PLAN_ROLE_PIPE,
    PLAN_ROLE_DCN,
    PLAN_ROLE_EXPERT,
    PLAN_ROLE_EXPERT_DATA, /* the data axes without the expert axis (plan.erep) */
    PLAN_ROLE_CP
} plan_role;

/* Every kind of collective the run makes. The code that makes one names its kind and the
 * counts; the op, the axes, the algorithm and the wire format are the plan's (plan_coll_call). */
typedef enum {
    /* the tensor axis Y: a sublayer's output and input, their backward */
    PLAN_TP_REDUCE_OUT,  /* ReduceScatter_Y Out[B, D]{U_Y} → Out[B, D_Y] */
    PLAN_TP_GATHER_OUT,  /* AllGather_Y Out[B, D_Y] → In[B, D] */
    PLAN_TP_GATHER_GRAD, /* AllGather_Y dOut[B, D_Y] → dOut[B, D] (and the embedding's) */
    PLAN_TP_REDUCE_GRAD, /* ReduceScatter_Y dIn[B, D]{U_Y} → dIn[B, D_Y] (and the head's) */
    PLAN_TP_HOP,         /* a collective matmul's ring step (the exchange on an axis of 2) */
    PLAN_TP_NORM_GRAD,   /* AllReduce_Y of a norm gain's gradient */
    PLAN_TP_KV_GRAD,     /* AllGather_Y of a shared kv head's gradient */
    PLAN_TP_EMBED,       /* AllReduce_Y of the embedding's vocabulary shards */
    PLAN_TP_STATS,       /* AllGather_Y of the loss's row statistics */
    PLAN_TP_VOCAB,       /* AllGather_Y of a sampled position's logits */
    /* the data axes X */
    PLAN_Z3_GATHER,       /* AllGather_X of a layer's weights (a tensor or a bucket) */
    PLAN_Z3_GATHER_PARAM, /* AllGather_X of a non-layer weight */
    PLAN_Z3_GATHER_BF16,  /* --compute-dtype bf16: AllGather_X of a weight matrix (a layer's or
                             the unembedding) in bf16 on the wire, the 2-byte copy the products
                             multiply (its bf16 rounding, which the model makes in any case) */
    PLAN_DP_REDUCE,       /* AllReduce_X of gradients (a block or a bucket) */
    PLAN_ZERO_REDUCE,     /* ReduceScatter_X of gradients into the shards */
    PLAN_UPDATE_GATHER,   /* AllGather_X of ZeRO-1/2's updated shards */
    PLAN_DCN_SCATTER,     /* --dcn, --zero 0: ReduceScatter over ICI of the whole gradient */
    PLAN_DCN_REDUCE,      /* ... AllReduce over DCN of this rank's shard of it */
    PLAN_DCN_GATHER,      /* ... AllGather over ICI */
    PLAN_DCN_SHARDS,      /* --dcn, ZeRO: AllReduce over DCN of the gradient shards */
    /* the pipeline axis Z */
    PLAN_PIPE_SEND,  /* a stage's activations or gradients to its neighbour (p2p, priced as a
                        ppermute) */
    PLAN_PIPE_SHARE, /* AllReduce_Z of the last stage's values (sampling) */
    /* the expert axis (--expert): a MoE block's dispatch or return of the token rows, an
     * AllToAllv (mesh_all_to_allv) priced as the AllToAll of balanced blocks */
    PLAN_EP_ALL_TO_ALL,
    PLAN_EP_ALL_TO_ALL_BF16, /* --compute-dtype bf16: the dispatch (the rows to the experts, and
                                their gradients in the backward) in bf16 on the wire, the rounding
                                the experts' products make of them in any case; the return moves
                                the experts' fp32 outputs as PLAN_EP_ALL_TO_ALL (plan_ep_bf16) */
    PLAN_EP_COUNTS, /* ... its counts first: an AllGather over the expert axis of each rank's rows
                       per expert, int64 moved bit for bit (fp32 on the wire everywhere) */
    /* the routed experts' weights over the data axes without the expert axis (plan.erep; the
     * router's and the shared experts' go over X as the dense weights' kinds) */
    PLAN_EP_GATHER,    /* AllGather of a routed expert's shards (ZeRO-3 use, ZeRO-1/2 update) */
    PLAN_EP_REDUCE,    /* ReduceScatter of its gradient into the shards (ZeRO) */
    PLAN_EP_DP_REDUCE, /* AllReduce of its gradient (--zero 0) */
    PLAN_EP_TP_SUM,    /* with a tensor axis: AllGather_Y of the partial sums of a MoE block's
                          routing weights' gradient dw[B, k]{U_Y}, summed in rank order */
    /* the router's and the shared experts' weights over the data axes X (replicated like the
     * dense weights, sharded W[D_X, ...] under ZeRO) */
    PLAN_MOE_GATHER,    /* AllGather_X of their shards (ZeRO-3 use, ZeRO-1/2 update) */
    PLAN_MOE_REDUCE,    /* ReduceScatter_X of their gradients into the shards (ZeRO) */
    PLAN_MOE_DP_REDUCE, /* AllReduce_X of their gradients (--zero 0) */
    /* the context axis C (--cp) */
    PLAN_CP_GATHER_KV,   /* allgather: AllGather_C of K, V [B, T_C, K_Y·H] */
    PLAN_CP_SCATTER_DKV, /* allgather: ReduceScatter_C of dK, dV [B, T, K_Y·H] */
    PLAN_CP_HOP,         /* ring: one step of the K, V blocks (and dK, dV) round the axis */
    PLAN_CP_ALL_TO_ALL,  /* ulysses: sequence shards ↔ head shards */
    /* bf16 compute (plan_cp_blk_bf16): K and V rounded once and moved in bf16, bit for bit */
    PLAN_CP_GATHER_KV_BF16,  /* allgather: AllGather_C of bf16 K, V (count: bf16 elements) */
    PLAN_CP_HOP_BF16,        /* ring: one step of the bf16 K, V blocks, moved as count 4-byte units
                                (two bf16 elements each) whatever --comm-dtype says */
    PLAN_CP_ALL_TO_ALL_BF16, /* ulysses (plan_cp_uly_bf16): Q, K, V, O and dO rounded once and
                                moved in bf16, count 4-byte units a block (two bf16 elements
                                each, the block's last half-filled when odd), whatever
                                --comm-dtype says; dQ, dK, dV go as PLAN_CP_ALL_TO_ALL */
    PLAN_CP_MOE_STATS,       /* a MoE block's router counts and probability sums per piece [B, 2E]
                                (double, moved bit for bit: fp32 on the wire everywhere) */
    PLAN_COLL_COUNT
} plan_coll;

/* The mesh call of kind k with `count` elements per rank (a ppermute's shift +1): op and axes
 * from the kind, --alg (a collective matmul's steps: the default), the plan's wire format. */
mesh_coll_call plan_coll_call(const plan *p, plan_coll k, int64_t count);
/* 1 if kind k's wire format is its own whatever --comm-dtype (plan_coll_call fixes it): the
 * call keeps it inside the step too (par_call); 0 if it follows the wire in force. */
int plan_coll_wire_fixed(plan_coll k);

/* One row of the printed schedule: `times` calls of kind `kind` per layer and micro-batch (pass
 * PLAN_STEP: per step), `count` elements per rank each (as the mesh call takes them: an
 * AllGather's input, a ReduceScatter's output); op, role and wire as the kind's. `what` in the
 * book's notation. */
typedef struct {
    plan_coll kind;
    mesh_op op;
    plan_role role;
    plan_pass pass;
    plan_path path;
    int64_t count;
    int times;
    int64_t layers; /* the stage's layers that make them (a MoE block's kinds: its MoE blocks) */
    mesh_wire wire;
    char what[64];
} plan_call;

#define PLAN_MAX_CALLS 32

/* The calls of kind k one training step makes on this rank, as the plan's rows count them: times
 * × layers × micro-batches (PLAN_STEP and PLAN_UPDATE rows: times, once). Exact for the kinds a
 * layer makes in every micro-batch's pass (the tensor axis's; the expert axis's AllToAlls, their
 * counts and ZeRO-2/3's reductions); a gather "unless resident" is counted as if never resident.
 * The data axes' dense gradient reductions (PLAN_DP_REDUCE, PLAN_ZERO_REDUCE), whose rows give
 * one layer's tensors, are counted as zero.c and bucket.c make them (plan_data_reduce_calls). */
int64_t plan_step_calls(const plan *p, plan_coll k);
/* The blocks one gradient bucket may hold (bucket.c flushes it at that many). */
#define PLAN_BUCKET_SEGS 256
/* The data axes' reductions of the dense gradients (PLAN_DP_REDUCE without ZeRO, else
 * PLAN_ZERO_REDUCE) one step makes on this rank: the blocks in a backward's order (the head's on
 * the last stage, the unembedding then the final gain; the layers from the last, each the MLP's
 * tensors then the attention's, in param_id order; the embedding on the first stage), below
 * ZeRO-2 the last micro-batch's alone, from ZeRO-2 every micro-batch's (there the head's and the
 * embedding's are reduced alone); each block reduced alone, or without a bucket size, or when it
 * is larger than a bucket; else packed into buckets of bucket_cap elements (per rank under ZeRO:
 * bucket_cap / |data|), one reduction a bucket, flushed when the next block does not fit, at
 * PLAN_BUCKET_SEGS blocks, and at the step's end. A split backward (plan.split: zb-h1, zb-v)
 * in this rank's order of actions (plan_actions): the input part hands over the embedding's, the
 * weights' part the head's and the chunk's layers', each part counting its own micro-batches.
 * 0 without data axes, and without ZeRO under --dcn (the whole gradient at once: PLAN_DCN_*). */
int64_t plan_data_reduce_calls(const plan *p);
/* Fills p's list of collectives from its geometry (plan_calls.c); plan_build's last step. */
void plan_list_calls(plan *p);

/* ---- the plan ---- */

struct plan {
    config c;
    model_shape s;
    plan_axes batch, data, dcn, tensor, pipe; /* plan_in's, with dcn split off data */
    plan_axes expert;                         /* --expert's axis (n = 1: none) */
    plan_axes erep;                           /* the data axes without it (n = 1: none) */
    plan_axes cp;                             /* --cp's axis (n = 1: none; also in data) */
    int cp_alg;                               /* --cp-alg (config_cp_alg_t) */
    int cp_pieces;  /* pieces of each sequence on this rank: 2 zigzag, 1 contiguous */
    model_shape ms; /* the shape the model is made with: T = one piece's tokens, T / (C·pieces) */
    int64_t model_seqs; /* the model's sequences of one micro-batch: micro_seqs · pieces */
    int zero, overlap;  /* --zero (0 without data axes), --overlap */
    mesh_alg alg;       /* --alg (MESH_ALG_DEFAULT when not given) */
    mesh_wire wire;     /* --comm-dtype */
    int64_t l0, l1;     /* this pipeline rank's layers, as stored */
    int chunks;         /* its chunks of layers, pipeline stages k·|Z| + index (interleaved) */
    int split;          /* backwards split into input and weight gradients (zb-h1) */
    int nslots;         /* activation slots: micro-batches in flight on this stage */
    int64_t n_micro;    /* micro-batches per step */
    int64_t micro_seqs; /* sequences of one micro-batch on this rank: micro-batch / |batch| */
    int64_t rows;       /* its tokens, micro_seqs · T / |C|: the rows of its [B, D] activations */
    model_extents loc;  /* this rank's local extents */
    plan_geo g[P_COUNT];
    int64_t shard_offset[P_COUNT], shard_total; /* ZeRO: param id's shard in the shard vector */
    /* ZeRO with experts: MoE parameter id's shard at shard_total + moe_shard_off[id − P_COUNT]
     * of the shard vector; a MoE block's elements on this rank (every MoE parameter, unsharded) */
    int64_t moe_shard_off[P_ALL - P_COUNT], moe_shard_total, moe_layer_elems;
    /* with experts, the stage's MoE blocks and dense blocks in their stacks: the MoE weights'
     * blocks [moe0, moe0 + moe_n), the dense MLPs' [mlp0, mlp0 + mlp_n) (model_layer_stack_index)
     */
    int64_t moe0, moe_n, mlp0, mlp_n;
    int64_t layer_elems; /* TP-local elements of one layer (every layer parameter) */
    int n_layer_params;  /* parameters stacked over layers */
    int64_t grad_elems;  /* TP-local gradient elements of the stage (every parameter) */
    int64_t param_elems; /* this rank's stored parameter elements (ZeRO-3: its shards) */
    int64_t state_elems; /* elements of the slices this rank updates (the optimizer's vector) */
    int64_t dcn_n;       /* --zero 0 with --dcn: grad_elems padded to a multiple of |data| */
    int64_t bucket_cap;  /* gradient bucket elements (0: off) */
    int bucket_capped;   /* the bucket asked for exceeded grad_elems (rounded) */
    int weight_buckets;  /* ZeRO-3: weight gathers per layer (one per tensor, or per bucket) */
    int cmatmul;         /* the tensor axis's collective matmuls are on */
    plan_buf buf[PLAN_MAX_BUFS];
    int nbuf;
    plan_call call[PLAN_MAX_CALLS];
    int ncall;
};

/* plan_expert.c: the expert axis's part of the plan. Local experts (extents' El, e0, ep_n); the
 * slab this rank stores of a mixture-of-experts parameter (id >= P_COUNT: the routed experts'
 * [Lm, E_Z, ...], the router's and shared experts' whole; ZeRO-3: their shards) and its
 * elements; the slab of its ZeRO shard; the buffers. */
void plan_expert_extents(plan *p);
param_slab plan_moe_slab(const plan *p, param_id id);
param_slab plan_moe_shard_slab(const plan *p, param_id id);
int64_t plan_moe_elems(const plan *p, param_id id);
/* One MoE block's part of parameter id on this rank as ne matrices [R, C] one after another
 * (routed experts: its E_Z experts; shared: S; the router: 1), sharded under ZeRO into n parts
 * (this rank's: j) along D, their rows (zdim 0: router, gate, up: W[E_Z, D_X, F]) or columns
 * (zdim 1: down, W[E_Z, F, D_X]); n = 1 without ZeRO. The routed experts' parts are over
 * plan.erep, the others' over plan.data. */
typedef struct {
    int64_t ne, R, C, n, j;
    int zdim;
} plan_moe_geo;
plan_moe_geo plan_moe_geo_of(const plan *p, param_id id);
static inline int64_t plan_moe_block(const plan_moe_geo *g) {
    return g->ne * g->R * g->C;
}
/* Is id a routed expert's weight (sharded over the expert axis)? */
int plan_is_routed(param_id id);
/* The block of parameter id that layer l (as stored) uses, in the parameter's stack: l − l0, or
 * for a dense MLP weight of a model with experts its index among the dense blocks; −1 when the
 * layer has none (a MoE block's dense MLP). */
int64_t plan_block_index(const plan *p, param_id id, int64_t l);
/* The expert axis's buffers: the AllToAlls' staging and counts, ZeRO's (plan.h's BUF_EP_*). */
typedef struct {
    int64_t stage, counts, layer_grads, gathered, pack, update;
} plan_ep_bufs;
void plan_expert_bufs(const plan *p, plan_ep_bufs *b);
/* ZeRO-3: the floats a MoE block's gathered weights take (BUF_EP_GATHERED): moe_layer_elems, or
 * in bf16 (plan_z3_bf16) the router's and the experts' at two to a float. */
int64_t plan_moe_gathered(const plan *p);
/* ZeRO with experts: the MoE parameters' shard offsets, moe_shard_total, moe_layer_elems. */
void plan_expert_shards(plan *p);

/* plan_cp.c: the context axis's part of the plan. plan_cp_shape: the model's shape and sequences
 * (ms, model_seqs; the identity without --cp);
 * plan_cp_pos: the global positions of this rank's rows of one sequence, pos[T / |C|] (its pieces
 * in order); plan_cp_saved: the floats BUF_CP_SAVED keeps per slot and layer. */
void plan_cp_shape(plan *p);
void plan_cp_pos(const plan *p, int64_t rank, int32_t *pos);
int64_t plan_cp_saved(const plan *p);
/* Ulysses' kv heads per head shard: K_Y/|C|, or 1 when K_Y < |C| (K_Y divides |C|, and each kv
 * head goes to the |C|/K_Y ranks whose query heads use it: replicated, as TP replicates them). */
int64_t plan_cp_uly_kv(const plan *p);
/* ... and the ranks of C that hold each kv head: |C|·K_c/K_Y (|C|/K_Y when replicated, else 1). */
int64_t plan_cp_uly_rep(const plan *p);
/* Does ulysses attend in bf16 (--compute-dtype bf16)? Then BUF_CP_SAVED keeps per slot and layer
 * the bf16 probabilities [B, N_YC, T, T] and head shards q [B·T, N_YC·H], k, v [B·T, K_c·H]:
 * plan_cp_uly_saved_b returns their bf16 elements and fills off[4], each region's start. */
int plan_cp_uly_bf16(const plan *p);
/* Do allgather and ring attend in bf16 (--compute-dtype bf16)? Then q, k, v and dO are rounded
 * once and the blockwise bf16 kernels (attn_part.h) attend them; K and V travel in bf16. */
int plan_cp_blk_bf16(const plan *p);
int64_t plan_cp_uly_saved_b(const plan *p, int64_t off[4]);
/* The global position of the first token of this rank's piece j of a sequence. */
int64_t plan_cp_piece_start(const plan *p, int64_t j);
/* Elements of BUF_CP_TOKENS, BUF_CP_SAVED, BUF_CP_KV, BUF_CP_SCRATCH (0 without --cp). */
void plan_cp_bufs(const plan *p, int forward_only, int64_t out[4]);
/* The floats one rank sends in a MoE block's PLAN_CP_MOE_STATS (its pieces' [2E] doubles; 0
 * without --cp or experts); BUF_CP_MOE holds |C| + 1 of them. */
int64_t plan_cp_moe_floats(const plan *p);

/* Not collective. Builds the plan; returns 0, or −1 with err when the input is inconsistent (a
 * role's size not dividing what it shards: config_for_mesh checks those first for a run; what
 * the pipeline schedule refuses: plan_schedule_check). */
int plan_build(plan *p, const plan_in *in, char *err, size_t errlen);
/* plan_in for a run on one rank: every role of size 1 (the 1-rank reference, generation alone). */
void plan_in_single(plan_in *in, const config *c);
/* One role's axes from sizes, wraparound, this rank's coordinates and the axes' letters (test
 * grids, and par.c from a mesh). alg: --alg resolved over them (par.c asks the mesh). */
plan_axes plan_axes_of(const mesh_axes *a, const int *sizes, const int *wraps, const int *coords,
                       const char *names, mesh_alg alg);
/* Every role of size 1: a run without communication (the single-rank hooks). */
int plan_trivial(const plan *p);

/* Is id stacked over layers (one block per layer)? Offset of id's block inside a layer-sized
 * buffer (layer parameters in param_id order, each [R, C]). */
int plan_is_layer_param(param_id id);
int64_t plan_layer_offset(const plan *p, param_id id);
/* Is id a layer's norm gain (fp32 in every precision)? */
static inline int plan_is_layer_norm(param_id id) {
    return id == P_ATTN_NORM || id == P_MLP_NORM;
}
/* ZeRO-3 in bf16 (plan_z3_bf16): a gathered layer's slot holds the matrices in bf16 and the norm
 * gains in fp32 (two 2-byte units an element), each block from a 64-byte boundary and with room
 * for |data| elements of padding (the bf16 gathers move an even count from each rank). The offset
 * of layer parameter id in 2-byte units; id = P_COUNT: the slot's size. */
int64_t plan_layer_offset_b(const plan *p, param_id id);
/* The elements each rank sends in a bf16 gather of layer matrix id: its shard, rounded up to an
 * even count. */
int64_t plan_z3_bf16_count(const plan *p, param_id id);
/* This rank's TP slab and ZeRO shard of parameter id, as native global slabs; the slab the model
 * stores (ZeRO-3: the shard). */
param_slab plan_tp_slab(const plan *p, param_id id);
param_slab plan_shard_slab(const plan *p, param_id id);
param_slab plan_model_slab(const plan *p, param_id id);
/* The gradient elements this rank reduces over the data axes in a step, rounded up to a
 * multiple of |data|: no bucket need be larger (0 without data axes). */
int64_t plan_bucket_limit(const plan *p);
/* The bucket the cost model picks (cost_bucket_bytes): the fewest elements (wire_bytes each)
 * whose data-axis reduction over links `link` has its hop latency at most `overhead` × its
 * transfer, rounded up to a power of two. 0 without data axes. */
int64_t plan_bucket_auto(const plan *p, const cost_link *link, int wire_bytes, double overhead);

/* ZeRO-3's weight gathers of a layer in buckets (with a bucket size): the layer's shards, in
 * parameter order, one after another, cut into buckets of at most bucket_cap / |data| elements
 * per rank (a shard larger than that is a bucket alone). Calls fn for each tensor with its bucket
 * (start b0 and elements per rank blen, in the concatenated shards) and its offset `at` in the
 * bucket, bucket by bucket; fn may be NULL. Returns the number of buckets: the gathers of one
 * layer (without buckets, or below ZeRO-3, the number of layer parameters, and fn is not
 * called). With bf16 gathers (plan_z3_bf16) the buckets hold the matrices alone, in 2-byte
 * elements (plan_z3_bf16_count each), up to the same bytes: twice the elements. */
typedef void (*plan_wbucket_fn)(void *ctx, param_id id, int64_t b0, int64_t blen, int64_t at);
int plan_weight_buckets(const plan *p, plan_wbucket_fn fn, void *ctx);

/* Does ZeRO-3 gather the weight matrices in bf16 (PLAN_Z3_GATHER_BF16: --compute-dtype bf16)?
 * Then each tensor of a layer is a gather of its own (no weight buckets): the norm gains stay
 * fp32 on the wire. */
static inline int plan_z3_bf16(const plan *p) {
    return p->zero == 3 && p->c.compute == COMPUTE_BF16;
}
/* The expert axis's dispatch kind: PLAN_EP_ALL_TO_ALL_BF16 with --compute-dtype bf16, else
 * PLAN_EP_ALL_TO_ALL. */
static inline plan_coll plan_ep_dispatch(const plan *p) {
    return p->c.compute == COMPUTE_BF16 ? PLAN_EP_ALL_TO_ALL_BF16 : PLAN_EP_ALL_TO_ALL;
}
/* The model's compute (model.h's model_compute.bf16): MODEL_FP32, or with --compute-dtype bf16
 * MODEL_BF16, MODEL_BF16_GATHERED under ZeRO-3 (the layers' weights come from the gathers). */
static inline int plan_model_compute(const plan *p) {
    if (p->c.compute != COMPUTE_BF16) return MODEL_FP32;
    return p->zero == 3 ? MODEL_BF16_GATHERED : MODEL_BF16;
}
/* The buffer id/slot of the list, or NULL when the run has none. */
const plan_buf *plan_buffer(const plan *p, plan_buf_id id, int slot);
/* Bytes of the list by category: the memory line. */
typedef struct {
    int64_t bytes[PLAN_MEM_COUNT];
} plan_mem_bytes;
void plan_memory(const plan *p, plan_mem_bytes *out);
/* Allocates (zeroed, 64-byte aligned) every buffer of the list that `owner` owns into
 * ptr[id][slot]; returns 0, or −1 out of memory (what was allocated is freed). plan_free frees
 * them (NULL pointers too) and clears ptr. Not collective. */
typedef struct {
    void *p[BUF_COUNT][2];
} plan_ptrs;
int plan_alloc(const plan *p, plan_owner owner, plan_ptrs *ptr);
void plan_free(const plan *p, plan_owner owner, plan_ptrs *ptr);

/* ---- the actions: what this rank runs in a step ---- */

/* This rank's list of actions, in calc/schedule.h's terms (sched_action: op, stage, micro-batch;
 * the stage is the pipeline stage, chunk k of rank r being stage k·|Z| + r): the forward
 * (SCHED_F) and the whole backward (SCHED_B) or its input and weight halves (SCHED_I, SCHED_W)
 * of a micro-batch on a stage, and the pipeline's receive before and send after them of its
 * activations (SCHED_RECV_F, SCHED_SEND_F, to and from the neighbouring stages) or gradients
 * (SCHED_RECV_B, SCHED_SEND_B). The executor (train/step/exec.c) runs such a list; the
 * trainer's are:
 *   GPipe: F0 .. F(M−1), then B0 .. B(M−1) (calc's gpipe): the weight gradients accumulate in
 *     micro-batch order, as in every other schedule, so every schedule's run is GPipe's bit for
 *     bit on the same mesh;
 *   1F1B: min(P−s−1, M) forwards, then one forward and one backward in turn, then the remaining
 *     backwards (calc's 1f1b, action for action);
 *   interleaved, zb-h1, zb-v: calc's table (sched_init) for this rank, as it is.
 * plan_stage_order: GPipe's and 1F1B's stage s of P (forwards and backwards alone, 2M entries,
 * returns 2M), which pipe_timeline simulates for every stage. plan_actions: this rank's list for
 * a training step (train = 1: its stage's order with the receives and sends around each forward
 * and backward; without a pipeline axis the trivial list F0 B0 F1 B1 ...) or an evaluation
 * (train = 0: the forwards in pipeline order, each chunk's receive and send around it). out:
 * plan_actions_max entries; returns how many. The activation slot of an action is the
 * executor's: micro-batch mod plan.nslots (an evaluation: slot 0); its chunk stage / |Z|. */
int plan_stage_order(pipe_schedule schedule, int64_t P, int64_t s, int64_t M, sched_action *out);
int64_t plan_actions_max(const plan *p);
int64_t plan_actions(const plan *p, int train, sched_action *out);
/* calc's kind of the schedule, and the spec of this run's table (p: the pipeline axis, v the
 * chunks, m the micro-batches, the layers). */
sched_kind plan_sched_kind(pipe_schedule s);
sched_spec plan_sched_spec(const plan *p);
/* What the schedule refuses on this mesh, with one message naming the flags: calc's rules
 * (sched_check: virtual stages without a pipeline or with a schedule of one stage per rank,
 * micro-batches not in whole groups of |Z|, layers not divisible into |Z|·v chunks), interleaving
 * over an open pipeline axis of more than 2 (the last rank's chunk feeds the first rank's next).
 * 0 or −1 with err. */
int plan_schedule_check(const plan *p, char *err, size_t errlen);
/* The chunks, activation slots and split of this rank (nslots: the most micro-batches in flight
 * on one of its stages in its list, F to B, or to W when split). */
void plan_schedule_stage(plan *p);
/* The pipeline neighbour at index + dir (wrapping at the ends) as the mesh's p2p direction: dir,
 * or −dir on a pipeline of 2 that does not wrap (the neighbour both ways). */
int plan_pipe_dir(const plan *p, int dir);
/* The pipeline stage of this rank's chunk k (k < chunks): k·|Z| + index, or in zb-v's V index
 * and 2|Z|−1−index; the rank holding stage s; whether this rank holds the last stage (the final
 * norm, the unembedding and the loss: rank |Z|−1, or 0 in a V). */
int64_t plan_chunk_stage(const plan *p, int k);
int64_t plan_rank_stage(const plan *p, int64_t r, int k); /* pipeline rank r's chunk k */
int64_t plan_stage_rank(const plan *p, int64_t s);
int plan_holds_head(const plan *p);
/* The model's share (hooks.h): layers, chunks, slots, split. */
model_stage_info plan_stage_info(const plan *p);

/* Names for printing: "forward", ...; "critical", ... */
const char *plan_pass_name(plan_pass s);
const char *plan_path_name(plan_path s);
/* The role's axes in the plan (PLAN_ROLE_TENSOR: the tensor axis). */
const plan_axes *plan_role_axes(const plan *p, plan_role r);
#endif
