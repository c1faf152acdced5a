/* shape: the transformer's shape in the book's letters, and what follows from it alone: its
 * parameter counts and its training FLOPs per token. The calculator (calc/) and the trainer
 * (train/: config.h, the model, the step's FLOP count) both include this header, so that they
 * count the same model the same way. Pure arithmetic; depends on nothing.
 *
 * The model (train/model/model.h): per layer an attention sublayer (wq [D, N·H], wk and wv
 * [D, K·H], wo [N·H, D]: 2·D·H·(N+K) weights) and a gated MLP (w_gate, w_up [D, F], w_down
 * [F, D]: 3·D·F), each behind an RMSNorm gain [D]; then the final norm [D], the embedding [V, D]
 * and an untied unembedding [D, V]. With experts (moe.E > 0) every moe.every-th block's MLP is a
 * mixture of experts instead (the trainer only; the calculator's models are dense). */
#ifndef MT_CALC_SHAPE_H
#define MT_CALC_SHAPE_H
#include <stdint.h>

/* The mixture-of-experts layers (E = 0: a dense model, every other field unused and 0). Every
 * `every`-th block (blocks l with (l + 1) % every == 0) replaces its MLP with E routed experts and
 * `shared` always-on experts, each a SwiGLU MLP of width F; a router (fp32 linear D→E, softmax)
 * sends each token to the k experts of largest router logit (ties to the lower index), weighted
 * by the softmax over those k logits (renormalised, as Mixtral). capacity > 0: each expert takes
 * at most ceil(capacity·k·T/E) tokens of one sequence (T = the model's seq_len), first come first
 * served in position order; 0 is dropless. aux_coef, z_coef: the load-balancing loss
 * E·Σ_e f_e·P_e and the router z-loss mean(logsumexp²), each per sequence, averaged over the
 * sequences and summed over the MoE layers (train/model/model.c). */
typedef struct {
    int64_t E, k, shared, every, F;
    double capacity, aux_coef, z_coef;
} moe_shape;

/* Layers, d_model, query heads, kv heads, head dim, d_ff, vocabulary, sequence length (tokens);
 * the experts (all 0 for a dense model). */
typedef struct {
    int64_t L, D, N, K, H, F, V, T;
    moe_shape moe;
} model_shape;

/* The blocks whose MLP is a mixture of experts: L / every with experts, else 0 (Lm). */
int64_t shape_moe_layers(const model_shape *s);
/* The kv heads [*k0, *k0 + *kl) that tensor coordinate y of Y (a tensor axis sharding the heads)
 * holds: K/Y of them from y·K/Y when Y ≤ K, else the one kv head its first query head uses
 * (replicated over the Y/K coordinates whose query heads use it). The trainer's rule: its plan,
 * its config checks and the serving engine's kv routing read it here. */
void model_tensor_kv_heads(const model_shape *s, int64_t Y, int64_t y, int64_t *k0, int64_t *kl);

/* One layer's attention matrices, 2·D·H·(N+K), and a dense MLP's, 3·D·F. */
double shape_attn_params(const model_shape *s);
double shape_mlp_params(const model_shape *s);
/* Every parameter of the dense model: L·(3·D·F + 2·D·H·(N+K) + 2·D) + 2·D·V + D (norm gains and
 * both embeddings). */
double shape_params(const model_shape *s);
/* The parameters a token's forward multiplies by: L·(2·D·H·(N+K) + 3·D·F) + D·V (the layers'
 * matrices and the unembedding; the embedding is a lookup, the norm gains a scale). With experts a
 * MoE block's MLP counts its router (D·E) and the k + shared experts a token passes through
 * (3·D·moe.F each). */
double shape_matmul_params(const model_shape *s);
/* Causal attention's FLOPs per token in training: QKᵀ and PV, forward 2·2·(T/2)·N·H per layer
 * (T/2 keys per query on average), backward twice that: 6·L·T·N·H. */
double shape_attn_flops(const model_shape *s);
/* Training FLOPs per token: 6 · shape_matmul_params (forward 2, backward 4 per weight) plus
 * shape_attn_flops. The MFU numerator of the trainer's step line and --bench. */
double shape_flops_per_token(const model_shape *s);
#endif
