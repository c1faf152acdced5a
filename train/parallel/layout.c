/* layout: the data movement the plan's geometry (plan.c) asks for on this rank: the column
 * packing collectives need (a column-sharded block's shards made contiguous), a parameter's block
 * inside a layer-sized buffer, and the model's hooks that read the geometry (local extents,
 * slabs, the pipeline stage). */
#include <stdlib.h>
#include <string.h>

#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

void par_pack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n) {
    const int64_t c = C / n;
    if (mesh_no_data(R * C * (int64_t)sizeof(float))) return;
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < R; r++) floats_copy(dst + (j * R + r) * c, src + r * C + j * c, c);
}

void par_unpack_cols(float *dst, const float *src, int64_t R, int64_t C, int64_t n) {
    const int64_t c = C / n;
    if (mesh_no_data(R * C * (int64_t)sizeof(float))) return;
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < R; r++) floats_copy(dst + r * C + j * c, src + (j * R + r) * c, c);
}

void par_unpack_cols_b(uint16_t *dst, const uint16_t *src, int64_t R, int64_t C, int64_t n,
                       int64_t part) {
    const int64_t c = C / n;
    if (mesh_no_data(R * C * 2)) return;
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < R; r++)
            memcpy(dst + r * C + j * c, src + j * part + r * c, (size_t)c * sizeof *dst);
}

float *par_layer_slot(const struct par *p, float *buf, param_id id) {
    return buf + plan_layer_offset(p->pl, id);
}

void par_layer_blocks(const struct par *p, float *buf, float **out) {
    static const param_id ids[PAR_LAYER_BLOCKS] = {P_ATTN_NORM, P_WQ,     P_WK,   P_WV,    P_WO,
                                                   P_MLP_NORM,  P_W_GATE, P_W_UP, P_W_DOWN};
    for (int k = 0; k < PAR_LAYER_BLOCKS; k++) out[k] = par_layer_slot(p, buf, ids[k]);
}

void par_hk_extents(void *ctx, const model_shape *s, model_extents *out) {
    struct par *p = ctx;
    (void)s;
    *out = p->pl->loc;
}

void par_hk_slab(void *ctx, const model_shape *s, param_id id, param_slab *out) {
    struct par *p = ctx;
    (void)s;
    *out = plan_model_slab(p->pl, id);
}

int par_hk_has_grads(void *ctx) {
    struct par *p = ctx;
    return p->pl->zero <= 1;
}

void par_hk_stage(void *ctx, const model_shape *s, model_stage_info *out) {
    struct par *p = ctx;
    (void)s;
    *out = plan_stage_info(p->pl);
}
