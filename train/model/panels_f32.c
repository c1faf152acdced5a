/* panels_f32: fp32 inference's panel copies of the weights (model_compute.panels in MODEL_FP32,
 * where model_f32_panels: the kernels can run them, an AVX2 CPU without AVX-512 on one BLAS
 * thread, and MODEL_F32_PANELS_ENV does not turn them off).
 *
 * Each dense matrix of the model's own layers (wq, wk, wv, wo, w_gate, w_up, w_down; a MoE
 * block's router and experts are not copied) and the unembedding are packed into kernels/gemm.h's
 * panel layout when the model is made and again whenever model_params_changed says the weights
 * changed (a checkpoint loaded), and each copy is registered under its weight's address on the
 * model's kern_f32_ctx (m->f32), which the forward's products pass (kern_gemm_ctx): those on the
 * copied weights, and on blocks of them (a tensor axis's norm gathers blocks of rows), then read
 * the copy and no longer pay sgemm's packing of the weight on every call. Each element of such a
 * product is one fma chain over k in order, so a row gets the same bits from prefill, decode and
 * a server's batches where every product of the forward is on a copied weight, i.e. a dense
 * model; a MoE block's router and experts still run on the BLAS, whose sums may depend on the
 * batch. Training makes no copies (model_compute.panels is 0). */
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

/* Parameter id's own storage and its slab, read from the model's fields (not model_param and
 * model_slab: model.c calls this file). */
static float *own_store(model *m, param_id id, int64_t *n) {
    *n = m->cnt[id];
    return m->cnt[id] ? m->params + m->off[id] : NULL;
}
static const param_slab *own_slab(const model *m, param_id id) {
    return &m->slab[id];
}

/* Layer l's matrices as the forward multiplies them (NULL where the block has none: a MoE
 * block's MLP), as the hooks hand over the model's own weights (model_layer_weights_local). */
static void layer_mats(model *m, int64_t l, const float *w[7]) {
    float *p[16]; /* layer_w's order: attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down */
    model_layer_blocks(m, &m->s, l, own_store, own_slab, p);
    for (int i = 0; i < 7; i++) w[i] = p[i < 4 ? 1 + i : 2 + i];
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

int model_f32_panels(void) {
    const char *v = getenv(MODEL_F32_PANELS_ENV); /* "0": off, for A/B runs */
    return kern_f32_panels() && !(v && !strcmp(v, "0"));
}

int64_t model_f32_panel_hits(const model *m) {
    return kern_f32_ctx_panel_hits(m->f32);
}

int panels_f32_alloc(model *m) {
    if (!m->cmp.panels || m->cmp.bf16 != MODEL_FP32 || !model_f32_panels()) return 0;
    m->pan32_elems = each_matrix(m, NULL);
    if (!m->pan32_elems) return 0;
    m->pan32 = aligned_alloc(64, (size_t)(m->pan32_elems + 15) / 16 * 16 * sizeof(float));
    m->f32 = m->pan32 ? kern_f32_ctx_create() : NULL;
    return m->f32 ? 0 : -1;
}

static void make_one(model *m, const float *w, int64_t K, int64_t N, int64_t off) {
    float *P = m->pan32 + off;
    kern_f32_panel_pack(P, w, K, N, N);
    const int r = kern_f32_ctx_add_panel(m->f32, w, K, N, N, P);
    CHECK(r == 0, "fp32 panel copies: registering the copy of a [%lld, %lld] weight failed: %s",
          (long long)K, (long long)N,
          r == KERN_F32_NO_MEMORY ? "no memory for the table"
                                  : "the kernels cannot run copies here (kern_f32_panels is 0: "
                                    "were the BLAS threads changed after the model was made?)");
}

void panels_f32_make(model *m) {
    if (m->pan32 && !mesh_no_data(m->pan32_elems * (int64_t)sizeof(float)))
        each_matrix(m, make_one);
}

void panels_f32_free(model *m) {
    kern_f32_ctx_destroy(m->f32); /* the table of the copies below, which nothing else reads */
    m->f32 = NULL;
    free(m->pan32);
    m->pan32 = NULL;
}

int64_t panels_f32_bytes(const model *m) {
    return m->pan32 ? m->pan32_elems * (int64_t)sizeof(float) : 0;
}
