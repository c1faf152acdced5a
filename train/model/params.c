/* params: the model's parameters by global name and shape (the parameter table), the blocks'
 * kinds (which MLPs are mixtures of experts, a block's index in its kind's stack), their
 * counter-based initialisation, and the whole-tensor extents and slabs of a run on one rank. Pure
 * functions of the shape (model.h); model.c, model_moe.c, the hook tables and the sharding plan
 * read them. Also where a layer's blocks sit in a model's storage (model_layer_blocks, through
 * the caller's accessors: nothing here calls into model.c). */
#include <math.h>
#include <string.h>

#include "kernels/rng.h"
#include "train/model/hooks.h"

int64_t model_moe_layers(const model_shape *s) {
    return shape_moe_layers(s);
}

int model_layer_is_moe(const model_shape *s, int64_t l) {
    return s->moe.E > 0 && (l + 1) % s->moe.every == 0;
}

int64_t model_layer_stack_index(const model_shape *s, int64_t l) {
    if (s->moe.E == 0) return l;
    const int64_t moe_upto = (l + 1) / s->moe.every; /* MoE blocks among 0..l */
    return model_layer_is_moe(s, l) ? moe_upto - 1 : l - moe_upto;
}

/* Block i of the stack of parameter id (i in the stack's own numbering: the layer, or
 * model_layer_stack_index for the MLPs), in local storage (NULL: the block has none of id). */
static float *stacked(model *m, model_store_fn base, model_slab_fn slab, param_id id, int64_t i) {
    const param_slab *sl = slab(m, id);
    int64_t n;
    float *b = base(m, id, &n);
    if (!b || sl->cnt[0] == 0) return NULL;
    return b + (i - sl->off[0]) * (n / sl->cnt[0]);
}

/* Block l's parameter ids of each kind (the MLP's at the stack index of its kind). */
static const param_id block_ids[] = {P_ATTN_NORM, P_WQ, P_WK, P_WV, P_WO, P_MLP_NORM};
static const param_id dense_ids[] = {P_W_GATE, P_W_UP, P_W_DOWN};
static const param_id moe_ids[] = {P_ROUTER,   P_EXP_GATE, P_EXP_UP,  P_EXP_DOWN,
                                   P_SHR_GATE, P_SHR_UP,   P_SHR_DOWN};

void model_layer_blocks(model *m, const model_shape *s, int64_t l, model_store_fn base,
                        model_slab_fn slab, float **ptr) {
    const int64_t i = model_layer_stack_index(s, l);
    const int moe = model_layer_is_moe(s, l);
    int k = 0;
    for (size_t j = 0; j < sizeof block_ids / sizeof *block_ids; j++)
        ptr[k++] = stacked(m, base, slab, block_ids[j], l);
    for (size_t j = 0; j < sizeof dense_ids / sizeof *dense_ids; j++)
        ptr[k++] = moe ? NULL : stacked(m, base, slab, dense_ids[j], i);
    for (size_t j = 0; j < sizeof moe_ids / sizeof *moe_ids; j++)
        ptr[k++] = moe ? stacked(m, base, slab, moe_ids[j], i) : NULL;
}

int64_t model_moe_capacity(const model_shape *s) {
    const moe_shape *mo = &s->moe;
    if (mo->E == 0 || !(mo->capacity > 0)) return 0;
    return (int64_t)ceil(mo->capacity * (double)(mo->k * s->T) / (double)mo->E);
}

param_info model_param_info(const model_shape *s, param_id id) {
    const int64_t L = s->L, D = s->D, NH = s->N * s->H, KH = s->K * s->H, F = s->F, V = s->V;
    const int64_t Ld = L - model_moe_layers(s); /* the dense MLPs */
    const int64_t Lm = model_moe_layers(s), E = s->moe.E, S = s->moe.shared, Fe = s->moe.F;
    const float std = 0.02f, std_out = (float)(0.02 / sqrt(2.0 * (double)L));
    /* name, dims, global shape, decay, init std (0: ones) */
    const param_info all[P_ALL] = {
        [P_EMBED] = {"embed", 2, {V, D, 1}, 1, std},
        [P_ATTN_NORM] = {"attn_norm", 2, {L, D, 1}, 0, 0.0f},
        [P_WQ] = {"wq", 3, {L, D, NH}, 1, std},
        [P_WK] = {"wk", 3, {L, D, KH}, 1, std},
        [P_WV] = {"wv", 3, {L, D, KH}, 1, std},
        [P_WO] = {"wo", 3, {L, NH, D}, 1, std_out},
        [P_MLP_NORM] = {"mlp_norm", 2, {L, D, 1}, 0, 0.0f},
        [P_W_GATE] = {"w_gate", 3, {Ld, D, F}, 1, std},
        [P_W_UP] = {"w_up", 3, {Ld, D, F}, 1, std},
        [P_W_DOWN] = {"w_down", 3, {Ld, F, D}, 1, std_out},
        [P_FINAL_NORM] = {"final_norm", 1, {D, 1, 1}, 0, 0.0f},
        [P_UNEMBED] = {"unembed", 2, {D, V, 1}, 1, std},
        /* the mixture of experts' */
        [P_ROUTER] = {"router", 3, {Lm, D, E, 1}, 1, std},
        [P_EXP_GATE] = {"expert_gate", 4, {Lm, E, D, Fe}, 1, std},
        [P_EXP_UP] = {"expert_up", 4, {Lm, E, D, Fe}, 1, std},
        [P_EXP_DOWN] = {"expert_down", 4, {Lm, E, Fe, D}, 1, std_out},
        [P_SHR_GATE] = {"shared_gate", 4, {Lm, S, D, Fe}, 1, std},
        [P_SHR_UP] = {"shared_up", 4, {Lm, S, D, Fe}, 1, std},
        [P_SHR_DOWN] = {"shared_down", 4, {Lm, S, Fe, D}, 1, std_out},
    };
    if ((unsigned)id >= P_ALL) return (param_info){"?", 0, {0, 0, 0, 0}, 0, 0.0f};
    return all[id];
}

int64_t model_param_numel(const model_shape *s, param_id id) {
    param_info pi = model_param_info(s, id);
    int64_t n = 1;
    for (int i = 0; i < pi.ndim; i++) n *= pi.shape[i];
    return n;
}

int64_t model_param_total(const model_shape *s) {
    int64_t n = 0;
    for (int id = 0; id < P_ALL; id++) n += model_param_numel(s, (param_id)id);
    return n;
}

int64_t model_slab_numel(const param_info *pi, const param_slab *sl) {
    int64_t n = 1;
    for (int i = 0; i < pi->ndim; i++) n *= sl->cnt[i];
    return n;
}

void model_param_init_slab(float *out, const model_shape *s, param_id id, const param_slab *slab,
                           uint64_t seed) {
    param_info pi = model_param_info(s, id);
    const int64_t *c = slab->cnt, *o = slab->off, *S = pi.shape;
    /* dims 0..2 as the loops (1 past ndim, the dense tensors' padding), dim 3 contiguous */
    const int64_t c3 = pi.ndim == 4 ? c[3] : 1, o3 = pi.ndim == 4 ? o[3] : 0;
    const int64_t S3 = pi.ndim == 4 ? S[3] : 1;
    int64_t k = 0;
    for (int64_t i0 = 0; i0 < c[0]; i0++)
        for (int64_t i1 = 0; i1 < c[1]; i1++)
            for (int64_t i2 = 0; i2 < (pi.ndim == 4 ? c[2] : 1); i2++) {
                const int64_t n = pi.ndim == 4 ? c3 : c[2];
                if (pi.init_std == 0.0f) {
                    for (int64_t i = 0; i < n; i++) out[k + i] = 1.0f;
                    k += n;
                    continue;
                }
                const int64_t g =
                    pi.ndim == 4 ? (((i0 + o[0]) * S[1] + (i1 + o[1])) * S[2] + i2 + o[2]) * S3 + o3
                                 : ((i0 + o[0]) * S[1] + (i1 + o[1])) * S[2] + o[2];
                kern_rng_fill_normal(out + k, seed, (uint64_t)id, (uint64_t)g, n, pi.init_std);
                k += n;
            }
}

/* ---------------------------------------------------------------- one rank's extents and slabs */

void model_extents_full(const model_shape *s, model_extents *o) {
    *o = (model_extents){
        .Nl = s->N, .Kl = s->K, .Fl = s->F, .Vl = s->V, .Dl = s->D, .El = s->moe.E, .ep_n = 1,
        .Fel = s->moe.F};
}

void model_slab_full(const model_shape *s, param_id id, param_slab *o) {
    param_info pi = model_param_info(s, id);
    *o = (param_slab){{0, 0, 0, 0}, {pi.shape[0], pi.shape[1], pi.shape[2], pi.shape[3]}};
}
