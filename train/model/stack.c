/* stack: where a rank's stored layers and stacked blocks are in the model (model.h;
 * interleaved chunks and a V hold layers that are not consecutive). A rank stores its chunks one
 * after another; chunk k is Lc consecutive layers of the model from model_layer_global. With
 * experts each chunk starts at a multiple of --moe-every (the configuration checks it), so its
 * dense MLPs and MoE blocks are consecutive in their own stacks too. */
#include "train/model/model_impl.h"

int64_t model_layer_global(const model *m, int64_t l) {
    const int64_t i = l - m->l0, k = i / m->Lc;
    if (m->v_shape && k == 1) /* the V's second leg: stage 2|Z|−1−r */
        return (2 * (m->s.L / m->Ls) - 1 - m->l0 / m->Ls) * m->Lc + i % m->Lc;
    return k * (m->s.L / m->chunks) + m->l0 / m->chunks + i % m->Lc;
}

int model_param_stacked(param_id id) {
    return (id >= P_ATTN_NORM && id <= P_W_DOWN) || id >= P_COUNT;
}

/* The blocks of id's stack among layers [0, l): with experts the MoE blocks among them are
 * ⌊l/n⌋ (block j is MoE when n divides j + 1), the dense MLPs the rest. */
static int64_t stack_blocks(const model_shape *s, param_id id, int64_t l) {
    const int mlp = id >= P_W_GATE && id <= P_W_DOWN;
    if (s->moe.E == 0 || (!mlp && id < P_COUNT)) return l;
    const int64_t moe = l / s->moe.every;
    return id >= P_COUNT ? moe : l - moe;
}

void model_stack_chunk(const model *m, param_id id, int k, int64_t *g0, int64_t *n) {
    const int64_t l = model_layer_global(m, m->l0 + k * m->Lc);
    *g0 = stack_blocks(&m->s, id, l);
    *n = stack_blocks(&m->s, id, l + m->Lc) - *g0;
}

int64_t model_stack_global(const model *m, param_id id, int64_t b) {
    const int64_t i = b - stack_blocks(&m->s, id, m->l0);
    int64_t g0, n;
    model_stack_chunk(m, id, 0, &g0, &n);
    if (n == 0) return b;
    model_stack_chunk(m, id, (int)(i / n), &g0, &n);
    return g0 + i % n;
}
