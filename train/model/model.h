/* model: the LLaMA-style decoder (fp32, no biases): parameters by global name and shape, their
 * local slabs on this rank, counter-based initialisation, and the forward/backward pass over a
 * local micro-batch. The only module (with the schemes built on it) that knows it is a
 * transformer. Depends on kernels/ (math) and config.h (model_shape); a sharded run's
 * communication comes in through the hook table of hooks.h.
 *
 * Global parameters (stacked over layers, the book's W_in[L, D, F]):
 *   embed[V,D] attn_norm[L,D] wq[L,D,N·H] wk[L,D,K·H] wv[L,D,K·H] wo[L,N·H,D] mlp_norm[L,D]
 *   w_gate[L,D,F] w_up[L,D,F] w_down[L,F,D] final_norm[D] unembed[D,V]
 * With experts (config.h moe_shape), the dense MLP weights are stacked over the L_d dense blocks
 * only, and the Lm = L / every MoE blocks hold, in block order,
 *   router[Lm,D,E] expert_gate[Lm,E,D,F_e] expert_up[Lm,E,D,F_e] expert_down[Lm,E,F_e,D]
 *   shared_gate[Lm,S,D,F_e] shared_up[Lm,S,D,F_e] shared_down[Lm,S,F_e,D]
 * (a dense model's have 0 elements). Activations are row vectors (q = x · wq[l]); head h is
 * columns [h·H, (h+1)·H) of q; the kv head of query head h is h / (N/K). */
#ifndef MT_TRAIN_MODEL_H
#define MT_TRAIN_MODEL_H
#include <stdint.h>

#include "kernels/gemm_bf16.h"
#include "train/config/config.h"

typedef enum {
    P_EMBED,
    P_ATTN_NORM,
    P_WQ,
    P_WK,
    P_WV,
    P_WO,
    P_MLP_NORM,
    P_W_GATE,
    P_W_UP,
    P_W_DOWN,
    P_FINAL_NORM,
    P_UNEMBED,
    /* P_COUNT: the dense model's parameters, the ones every sharding scheme (train/parallel)
     * handles; the mixture-of-experts ones follow, handled on one rank only (P_ALL: all) */
    P_COUNT,
    P_ROUTER = P_COUNT,
    P_EXP_GATE,
    P_EXP_UP,
    P_EXP_DOWN,
    P_SHR_GATE,
    P_SHR_UP,
    P_SHR_DOWN,
    P_ALL
} param_id;

#define PARAM_MAX_DIMS 4

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[PARAM_MAX_DIMS]; /* global shape (1 past ndim) */
    int decay;                     /* weight decay applies (matrices yes, norm gains no) */
    float init_std;                /* N(0, std); 0 means "ones" (norm gain) */
} param_info;

/* A rank's slab of a global parameter: dims [off, off+cnt) in each dimension (cnt 1 and off 0
 * past ndim). */
typedef struct {
    int64_t off[PARAM_MAX_DIMS], cnt[PARAM_MAX_DIMS];
} param_slab;

/* The blocks' MLPs: whether block l's is MoE, and its index in the stack of its kind (the MoE
 * stack of Lm blocks, or the dense stack of L − Lm). */
int model_layer_is_moe(const model_shape *s, int64_t l);
int64_t model_layer_stack_index(const model_shape *s, int64_t l);
int64_t model_moe_layers(const model_shape *s); /* Lm */
/* ceil(capacity·k·T/E): the tokens of one sequence an expert takes; 0 when dropless. */
int64_t model_moe_capacity(const model_shape *s);

/* The parameter ids a model of shape s has: P_COUNT for a dense model, P_ALL with experts. */
static inline int model_param_ids(const model_shape *s) {
    return s->moe.E > 0 ? P_ALL : P_COUNT;
}
/* Elements of a slab of parameter pi (its first ndim extents). */
int64_t model_slab_numel(const param_info *pi, const param_slab *sl);
/* Not collective. Global name, shape, decay flag and init scale of parameter id. */
param_info model_param_info(const model_shape *s, param_id id);
/* Number of elements of a global parameter / of all of them. */
int64_t model_param_numel(const model_shape *s, param_id id);
int64_t model_param_total(const model_shape *s);
/* Fills a slab of parameter id from the counter-based RNG: element with global flat index g is
 * std·normal(seed, id, g) (or 1 for gains). out holds the slab in row-major order. */
void model_param_init_slab(float *out, const model_shape *s, param_id id, const param_slab *slab,
                           uint64_t seed);

/* ---- a model instance on this rank ---- */
typedef struct model model;
struct model_hooks; /* communication and sharded storage (hooks.h) */
struct trace;       /* the run's timeline and where-notes (train/observe/trace.h) */

/* What the model's matmuls multiply (train/step/precision.h resolves it at start-up). bf16 = 0:
 * the fp32 kernels (kernels/gemm.h). bf16 = MODEL_BF16: bf16 inputs accumulated in fp32 on ctx
 * (kernels/gemm_bf16.h; a context serves one thread: the model computes on its caller's), as a
 * TPU's matrix unit: every matmul of the forward and of the backward (dX and dW) and attention's
 * QKᵀ and PV take bf16 operands; the weights are copied to bf16 once per update
 * (model_params_changed); norms, softmax, RoPE, SwiGLU, the loss, the gradients and the optimizer
 * stay fp32 (mixed.c says where each rounding is). MODEL_BF16_GATHERED: the same where the hooks
 * hand over weights from outside the model's storage (ZeRO-3 gathers them): the model then keeps
 * room to copy one layer's matrices and the unembedding. */
enum { MODEL_FP32 = 0, MODEL_BF16 = 1, MODEL_BF16_GATHERED = 2 };
typedef struct {
    int bf16;
    kern_bf16_ctx *ctx;
    /* inference (generate, serve) in MODEL_BF16 on a context that reads panel copies
     * (kern_bf16_ctx_panels: the avx2, avx512 and avx512bf16 paths): the model also keeps its
     * dense matrices and the unembedding in the context's panel layout (kern_bf16_panel_pack),
     * made with the bf16 copy. avx2, avx512: a product of one row (decode at batch 1) reads them
     * as linear streams; the same bits. avx512bf16: every product on those weights, whatever its
     * rows, runs on the own vdpbf16ps kernel over the copies instead of oneDNN (a row's bits the
     * same in any batch; not the bits of training's oneDNN products).
     * In MODEL_FP32 where model_f32_panels: an fp32 copy in the panel layout of gemm.h, made at
     * creation and by model_params_changed and registered on the model's own kern_f32_ctx, which
     * the forward's products on those weights pass, so that none repacks a weight
     * (panels_f32.c).
     * model_panel_bytes says what either costs. */
    int panels;
} model_compute;

/* Allocates parameters, gradients and activations for micro-batches of Bl local sequences of
 * s->T tokens, and initialises the local slabs from `seed`. `hooks` (copied) gives the local
 * extents, slabs and communication: &model_hooks_single on one rank, par_model_hooks for a
 * sharded run. Returns NULL on allocation failure. Bl = 0: parameters only, no gradients
 * (inference, model_fwd_rows). */
model *model_create(const model_shape *s, int64_t Bl, uint64_t seed,
                    const struct model_hooks *hooks);
/* model_create with the matmuls' dtype (NULL or bf16 = 0: fp32). In bf16 the model also holds
 * its weights' bf16 copy, attention's probabilities in bf16 and the products' bf16 operands
 * (model_sizes_of's act_b, scratch_b, params_b). */
model *model_create_compute(const model_shape *s, int64_t Bl, uint64_t seed,
                            const struct model_hooks *hooks, const model_compute *cmp);
/* The model's compute: what a hook that computes for it multiplies with (the context axis's
 * attention, whose bf16 products run on the model's context, on the model's thread). */
const model_compute *model_compute_of(const model *m);
/* Bytes of the panel copies, bf16 or fp32 (model_compute.panels; 0 when none were made). */
int64_t model_panel_bytes(const model *m);
/* The variable that turns fp32 inference's panel copies off ("0"; for A/B runs of one binary). */
#define MODEL_F32_PANELS_ENV "MESHTRAIN_F32_PANELS"
/* 1 if an fp32 model with model_compute.panels makes its fp32 panel copies here: the kernels can
 * run them (kern_f32_panels: AVX2 + FMA, one BLAS thread) and
 * MODEL_F32_PANELS_ENV is not "0". */
int model_f32_panels(void);
/* Forward products the model has run on its fp32 panel copies (0 when it made none). */
int64_t model_f32_panel_hits(const model *m);
/* What this rank's model keeps of its weights, in bytes: the fp32 parameters (the master copy),
 * their bf16 copy (MODEL_BF16; 0 otherwise) and the panel copies (model_panel_bytes: bf16 and
 * fp32). What the memory lines of generate and serve print (gen_print_memory); a new copy of the
 * weights is counted here. */
typedef struct {
    int64_t params, params_bf16, panels;
} model_weight_bytes;
model_weight_bytes model_weight_memory(const model *m);
/* MODEL_BF16: makes now the bf16 copy of every layer's matrices and of the unembedding, and
 * their panel copies, where stale (as the first pass after model_params_changed would), so that a
 * server's first request finds them made; returns how many layers and unembeddings it copied
 * (0 in fp32, under ZeRO-3, or when all are current). Takes the weights from the hooks as a pass
 * does; not collective (outside ZeRO-3, which this leaves alone, the hooks hand over the model's
 * own weights). */
int64_t model_make_bf16(model *m);
/* How many times a layer's or the unembedding's bf16 copy was made (the tests: after
 * model_make_bf16 a pass makes none). */
int64_t model_bf16_copies(const model *m);
/* The parameters changed (an optimizer update, a checkpoint loaded, a test's edit): in bf16 the
 * weights' copy is made again when a pass next uses them; fp32 inference's panel copies are
 * made again now. No-op in fp32 training. */
void model_params_changed(model *m);
void model_destroy(model *m); /* accepts NULL */
/* The trace the model's passes open their spans in (embedding, layers, sublayers, head); NULL
 * (the default): none. The model does not own it; whoever drives the model reads it back with
 * model_trace for its own spans around the model's. */
void model_set_trace(model *m, struct trace *tr);
struct trace *model_trace(const model *m);
const model_shape *model_shape_of(const model *m);
/* Local storage of parameter id (its slab, row-major) and of its gradient; *n = local count. */
float *model_param(model *m, param_id id, int64_t *n);
float *model_grad(model *m, param_id id, int64_t *n);
const param_slab *model_slab(const model *m, param_id id);
/* All local parameters / gradients as one contiguous block (in param_id order). */
float *model_params_flat(model *m, int64_t *n);
float *model_grads_flat(model *m, int64_t *n);
void model_zero_grads(model *m);
/* tokens[Bl, T+1]: inputs tokens[b, 0..T), targets tokens[b, 1..T]. Runs forward and backward,
 * accumulating grad_scale · d(mean loss)/dθ into the gradients (+=). Returns the mean loss over
 * the Bl·T local tokens. */
double model_fwd_bwd(model *m, const int32_t *tokens, float grad_scale);
/* Forward only; mean loss over the Bl·T local tokens. */
double model_fwd_loss(model *m, const int32_t *tokens);
/* Logits[V] of the token following seq[0..len), 1 ≤ len ≤ T, one sequence (for sampling). */
void model_next_logits(model *m, const int32_t *seq, int64_t len, float *logits);
/* ---- pipeline stages (all layers and one activation slot without pipelining) ---- */
/* This rank's layers [l0, l1) as stored (hooks.h, model_stage_info) and its number of activation
 * slots (micro-batches in flight). */
void model_stage(const model *m, int64_t *l0, int64_t *l1);
int model_slots(const model *m);
/* The global layer that stored layer l (l0 ≤ l < l1; parameter slabs count stored layers) is:
 * l itself unless the rank holds several chunks (interleaved pipelining). */
int64_t model_layer_global(const model *m, int64_t l);
/* Whether parameter id is a stack over blocks (over the layers, or with experts the dense MLPs'
 * over the dense blocks and the MoE weights' over the MoE blocks). Chunk k of this rank's: the
 * global index of the first block of id's stack in it and how many; the global index of stored
 * block b of id's stack (b counts as the slabs do: stored layers, or the stage's dense or MoE
 * blocks from the stack's first stored one). */
int model_param_stacked(param_id id);
void model_stack_chunk(const model *m, param_id id, int k, int64_t *g0, int64_t *n);
int64_t model_stack_global(const model *m, param_id id, int64_t b);
/* The chunks of this rank's layers (1 unless interleaved: model_stage_info). */
int model_chunks(const model *m);
/* Rows (tokens) of one local micro-batch: Bl·T. */
int64_t model_local_rows(const model *m);
/* Stage forward of chunk `chunk` (0 without interleaving) on a micro-batch tokens[Bl, T+1] in
 * activation slot `slot`: the first stage (chunk 0 of the first rank) embeds the tokens, the
 * others read model_stage_input(m, slot, chunk) ([Bl·T, D], filled by the caller); the last stage
 * (the last chunk of the last rank) returns the mean loss, the others leave their output in
 * model_stage_output(m, slot, chunk). */
double model_stage_fwd(model *m, int slot, int chunk, const int32_t *tokens);
/* As model_stage_fwd on B rows of T tokens (row stride ldt); want_loss = 0 stops after the final
 * norm (sampling). */
double model_stage_fwd_rows(model *m, int slot, int chunk, const int32_t *tokens, int64_t ldt,
                            int64_t B, int64_t T, int want_loss);
/* Which part of a backward model_stage_bwd runs: all of it; the input gradient alone (dL/dx
 * through every layer, and the gradients that come with it: the norm gains' and the
 * embedding's); or, later, the weight gradient alone (every matmul's dW, from what the input
 * part kept: a model whose stage info says split). */
typedef enum { MODEL_BWD_ALL, MODEL_BWD_INPUT, MODEL_BWD_WEIGHT } model_bwd_part;
/* Stage backward of chunk `chunk` in slot: the last stage starts from the loss, the others from
 * d_out ([Bl·T, D], dL/d(stage output)); other than the first stage they leave dL/d(stage input)
 * in model_stage_dinput(m) ([Bl·T, D]). Gradients accumulate (+=) with grad_scale. part:
 * model_bwd_part (MODEL_BWD_WEIGHT reads neither d_out nor tokens). */
void model_stage_bwd(model *m, int slot, int chunk, const int32_t *tokens, const float *d_out,
                     float grad_scale, model_bwd_part part);
float *model_stage_input(model *m, int slot, int chunk);
const float *model_stage_output(model *m, int slot, int chunk);
const float *model_stage_dinput(model *m);
/* Last stage, after model_stage_fwd_rows(slot 0, one sequence of len): this vocab shard's logits
 * of the last position. */
void model_last_logits(model *m, int64_t len, float *logits_loc);
/* ---- inference: rows of tokens at given positions, attention supplied by the caller ---- */
/* What the caller's attention sees of layer l: R rows, q[R, Nl·H] and k[R, Kl·H] rotated to each
 * row's position, v[R, Kl·H]; it fills att[R, Nl·H] (local heads, model_extents_of). */
typedef struct {
    int64_t l, R;
    const float *q, *k, *v;
    float *att;
} model_attn_io;
typedef void (*model_attn_fn)(void *ctx, const model_attn_io *io);
/* Floats of workspace model_fwd_rows needs for up to R rows. */
int64_t model_rows_ws(model *m, int64_t R);
/* Collective over the tensor axis (with a plan; no pipeline). Forward of R rows, row r the token
 * tok[r] at position pos[r] (< T) of its sequence: embedding, every block with the attention of
 * attn(ctx, io) (a KV cache: no row sees another row unless attn lets it), final norm; then the
 * logits of this rank's vocabulary shard (model_extents_of: [v0, v0 + Vl)) of rows
 * out_rows[0..n_out) into logits_loc[n_out, Vl]; the caller gathers the shards of all rows at
 * once. ws: the caller's workspace of model_rows_ws(m, R) floats. The model may be created with
 * Bl = 0. */
void model_fwd_rows(model *m, float *logits_loc, const int64_t *out_rows, int64_t n_out,
                    const int32_t *tok, const int32_t *pos, int64_t R, model_attn_fn attn,
                    void *ctx, float *ws);
/* With experts and a capacity factor, model_fwd_rows routes each row against the tokens its
 * sequence has already sent to each expert: row r belongs to sequence seq[r] (rows of one
 * sequence in position order), whose counts are counts[seq·Lm·E + lm·E + e] (the caller's, zeroed
 * before a sequence's first token, updated here). seq = NULL (the default): dropless inference.
 * The pointers are kept until the next call. */
void model_rows_capacity(model *m, const int32_t *seq, int32_t *counts);
/* Bytes of saved activations for one micro-batch on this rank. */
int64_t model_activation_bytes(const model *m);
/* ---- mixture of experts: what the router did ---- */
/* Over the training forwards (whole sequences of T tokens) since the last reset, a training
 * step's micro-batches: per MoE block and expert the (token, expert) slots it computed, the
 * slots dropped past an expert's capacity (kept + dropped = tokens·k), the load-balancing loss
 * E·Σ f_e·P_e (its mean over the blocks and the sequences: 1 is a perfect balance) and the
 * z-loss (its mean over the blocks and the tokens), unscaled by their coefficients. */
typedef struct {
    int64_t layers, E;
    const int64_t *kept; /* [layers, E] */
    int64_t dropped, slots;
    double aux, z; /* means over the MoE blocks */
} model_moe_stats;
void model_moe_stats_get(const model *m, model_moe_stats *out);
void model_moe_stats_reset(model *m);
#endif
