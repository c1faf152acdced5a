/* panels_f32: fp32 inference's panel copies of the weights (model_compute.panels in MODEL_FP32,
 * where kern_f32_panels says kern_gemm reads them: an AVX2 CPU without AVX-512).
 *
 * Each dense matrix of the model's own layers (wq, wk, wv, wo, w_gate, w_up, w_down; a MoE
 * block's experts are not copied) and the unembedding are packed into kernels/gemm.h's panel
 * layout when the model is made and again whenever model_params_changed says the weights changed
 * (a checkpoint loaded), and each copy is registered with the kernels under its weight's address:
 * the forward's products on those weights, and on blocks of them (a tensor axis's norm gathers
 * blocks of rows), then read the copy and no longer pay sgemm's packing of the weight on every
 * call. Every element is still one fma chain over k in order, so prefill, decode and a server's
 * batches give the same bits for a row. Training makes no copies (model_compute.panels is 0). */
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "mesh/mesh.h"
#include "train/model/model_impl.h"

void model_matrix_dims(const model *m, int i, int64_t *K, int64_t *N) {
    const int64_t D = m->s.D, NH = m->loc.Nl * m->s.H, KH = m->loc.Kl * m->s.H, F = m->loc.Fl;
    const int64_t k[8] = {D, D, D, NH, D, D, F, D}, n[8] = {NH, KH, KH, D, F, F, D, m->loc.Vl};
    *K = k[i], *N = n[i];
}

/* Block i of the stack of parameter id in the model's own storage (NULL: none here). */
static const float *own_block(const model *m, param_id id, int64_t i) {
    const param_slab *sl = &m->slab[id];
    if (!m->cnt[id] || !sl->cnt[0]) return NULL;
    return m->params + m->off[id] + (i - sl->off[0]) * (m->cnt[id] / sl->cnt[0]);
}

/* Layer l's matrices as the forward multiplies them (NULL where the block has none: a MoE
 * block's MLP), as the hooks hand over the model's own weights (model_layer_weights_local). */
static void layer_mats(const model *m, int64_t l, const float *w[7]) {
    static const param_id ids[7] = {P_WQ, P_WK, P_WV, P_WO, P_W_GATE, P_W_UP, P_W_DOWN};
    const int moe = model_layer_is_moe(&m->s, l);
    for (int i = 0; i < 7; i++)
        w[i] = i < 4 ? own_block(m, ids[i], l)
               : moe ? NULL
                     : own_block(m, ids[i], model_layer_stack_index(&m->s, l));
}

/* Calls fn for every matrix copied, in order: its weight, [K, N] and its copy's offset. */
static int64_t each_matrix(model *m,
                           void (*fn)(model *, const float *, int64_t, int64_t, int64_t)) {
    int64_t off = 0, K, N;
    for (int64_t l = m->l0; l < m->l1; l++) {
        const float *w[7];
        layer_mats(m, l, w);
        for (int i = 0; i < 7; i++) {
            if (!w[i]) continue;
            model_matrix_dims(m, i, &K, &N);
            if (fn) fn(m, w[i], K, N, off);
            off += kern_f32_panel_elems(K, N);
        }
    }
    if (m->last) {
        model_matrix_dims(m, 7, &K, &N);
        if (fn) fn(m, m->params + m->off[P_UNEMBED], K, N, off);
        off += kern_f32_panel_elems(K, N);
    }
    return off;
}

int panels_f32_alloc(model *m) {
    if (!m->cmp.panels || m->cmp.bf16 != MODEL_FP32 || !kern_f32_panels()) return 0;
    m->pan32_elems = each_matrix(m, NULL);
    if (!m->pan32_elems) return 0;
    m->pan32 = aligned_alloc(64, (size_t)(m->pan32_elems + 15) / 16 * 16 * sizeof(float));
    return m->pan32 ? 0 : -1;
}

static void make_one(model *m, const float *w, int64_t K, int64_t N, int64_t off) {
    float *P = m->pan32 + off;
    kern_f32_panel_pack(P, w, K, N, N);
    CHECK(kern_f32_add_panel(w, K, N, N, P) == 0, "fp32 panel copies: no memory to register one");
}

void panels_f32_make(model *m) {
    if (m->pan32 && !mesh_no_data(m->pan32_elems * (int64_t)sizeof(float)))
        each_matrix(m, make_one);
}

void panels_f32_free(model *m) {
    if (m->pan32) kern_f32_drop_panels(m->pan32, m->pan32_elems);
    free(m->pan32);
    m->pan32 = NULL;
}

int64_t panels_f32_bytes(const model *m) {
    return m->pan32 ? m->pan32_elems * (int64_t)sizeof(float) : 0;
}
