/* par: the sharding plan's lifetime: the flags checked against the mesh and the model, the
 * layout computed (layout.c), the buffers every scheme needs allocated once (memory.c), and the
 * model's hook table assembled from each scheme's entries (layout.c, zero.c, tensor.c,
 * pipeline.c). */
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- create / destroy */

/* --dcn: batch_axes = the data axes as parsed into data_axes; the DCN axis (config_for_mesh checked
 * that it is one of them) moves from data_axes to dcn_axes, so that data_axes keeps the ICI data
 * axes. */
static void split_dcn(struct par *p, const config *c) {
    p->batch_axes = p->data_axes;
    p->dcn_axes.n = 0;
    if (!c->dcn_axis[0]) return;
    const int d = mesh_axis_index(p->m, c->dcn_axis[0]);
    int at = -1;
    for (int k = 0; k < p->batch_axes.n; k++)
        if (p->batch_axes.ax[k] == d) at = k;
    CHECK(d >= 0 && at >= 0, "--dcn %s is not a data axis: the config was not validated",
          c->dcn_axis);
    p->dcn_axes = (mesh_axes){1, {d, 0, 0}};
    for (int k = at; k + 1 < p->data_axes.n; k++) p->data_axes.ax[k] = p->data_axes.ax[k + 1];
    p->data_axes.ax[--p->data_axes.n] = 0;
}

/* The model's hook table for a sharded run, every entry from the scheme that owns it. */
static model_hooks hook_table(struct par *p) {
    return (model_hooks){
        .ctx = p,
        /* layout.c: geometry */
        .extents = par_hk_extents,
        .slab = par_hk_slab,
        .stage = par_hk_stage,
        .has_grads = par_hk_has_grads,
        /* zero.c: the data axes' weights and gradients */
        .ready = par_hk_ready,
        .layer_weights = par_hk_layer_weights,
        .layer_release = par_hk_layer_release,
        .layer_grads = par_hk_layer_grads,
        .mlp_grads_done = par_hk_mlp_grads_done,
        .layer_grads_done = par_hk_layer_grads_done,
        .weight = par_hk_weight,
        .grad = par_hk_grad,
        .head_grads_done = par_hk_head_grads_done,
        .embed_grads_done = par_hk_embed_grads_done,
        /* tensor.c: the tensor axis */
        .sublayer_out = par_hk_sublayer_out,
        .norm_in = par_hk_norm_in,
        .embed_reduce = par_hk_embed_reduce,
        .xent_combine = par_hk_xent_combine,
        .gather_vocab = par_hk_gather_vocab,
        .sublayer_out_bwd = par_hk_sublayer_out_bwd,
        .resid_grad_gather = par_hk_resid_grad_gather,
        .partial_begin = par_hk_partial_begin,
        .partial_end = par_hk_partial_end,
        .partial_done = par_hk_partial_done,
        .poll = par_hk_poll,
        /* pipeline.c: the pipeline axis outside a training step */
        .stage_recv = par_hk_stage_recv,
        .stage_send = par_hk_stage_send,
        .pipe_share_last = par_hk_pipe_share_last,
    };
}

par *par_create(const config *c, mesh *m, int *trivial, char *err, size_t errlen) {
    *trivial = 0;
    struct par *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->m = m;
    p->cfg = *c;
    p->s = c->shape;
    p->zero = c->zero;
    p->overlap = c->overlap;
    config cm = *c; /* the rules that need the mesh: config_for_mesh (train/config) */
    if (config_for_mesh(&cm, m, err, errlen) != 0) {
        free(p);
        return NULL;
    }
    p->alg = c->alg[0] ? (mesh_alg)mesh_alg_parse(c->alg) : MESH_ALG_DEFAULT;
    CHECK(p->alg >= MESH_ALG_DEFAULT, "--alg %s: the config was not validated", c->alg);
    char dp[CONFIG_AXES_LEN];
    config_data_axes(c, m, dp);
    CHECK(mesh_axes_parse(m, dp, &p->data_axes) == 0 &&
              mesh_axes_parse(m, c->tensor_axis, &p->tensor_axis) == 0 &&
              mesh_axes_parse(m, c->pipe_axis, &p->pipe_axis) == 0,
          "par_create: axes checked by config_for_mesh do not parse");
    split_dcn(p, c);
    p->n_batch = mesh_axes_size(m, p->batch_axes);
    p->batch_index = mesh_axes_index(m, p->batch_axes);
    p->n_data = mesh_axes_size(m, p->data_axes);
    p->data_index = mesh_axes_index(m, p->data_axes);
    p->n_tensor = mesh_axes_size(m, p->tensor_axis);
    p->tensor_index = mesh_axes_index(m, p->tensor_axis);
    p->n_pipe = mesh_axes_size(m, p->pipe_axis);
    p->pipe_index = mesh_axes_index(m, p->pipe_axis);
    if (p->n_batch == 1 && p->n_tensor == 1 && p->n_pipe == 1) {
        *trivial = 1;
        free(p);
        return NULL;
    }
    p->l0 = p->pipe_index * (p->s.L / p->n_pipe);
    p->l1 = p->l0 + p->s.L / p->n_pipe;
    const int64_t M = c->microbatches > 0 ? c->microbatches : 1;
    p->nslots =
        p->n_pipe == 1 ? 1 : (int)(c->schedule == PIPE_1F1B && M > p->n_pipe ? p->n_pipe : M);
    if (p->n_data == 1) p->zero = 0;
    par_layout_extents(p);
    par_layout_geometry(p);
    p->hooks = hook_table(p);
    int ok = par_alloc_buffers(p) == 0;
    if (mesh_agree(mesh_world_comm(m), ok ? 0 : -1) < 0) {
        errmsg_fail(err, errlen, "out of memory allocating the sharding buffers");
        par_destroy(p);
        return NULL;
    }
    return p;
}

void par_destroy(par *p) {
    if (!p) return;
    par_drain(p);
    bucket_free(p);
    for (int k = 0; k < 2; k++) {
        free(p->gathered_layer[k]);
        free(p->gather_stage[k]);
        free(p->layer_grads_full[k]);
        free(p->layer_grads_scattered[k]);
    }
    for (int id = 0; id < P_COUNT; id++) free(p->param_grads_full[id]);
    /* (zero 3's shard_params is the model's storage) */
    ALLOC_FREE_ALL(p->gathered_embed, p->gathered_final_norm, p->gathered_unembed, p->update_stage,
                   p->shard_grads, p->tensor_scratch_a, p->tensor_scratch_b, p->kv_exchange,
                   p->column_pack, p->dcn_buf, p->cmatmul_scratch, p);
}

const model_hooks *par_model_hooks(par *p) {
    return p ? &p->hooks : &model_hooks_single;
}

int64_t par_data_shards(const par *p) {
    return p ? p->n_batch : 1;
}
int64_t par_data_index(const par *p) {
    return p ? p->batch_index : 0;
}
