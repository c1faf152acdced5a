/* par: the sharded run's lifetime: the plan's input read off the mesh (par_plan_in), the buffers
 * the plan lists for the run allocated and freed (plan_alloc), and the model's hook table
 * assembled from each scheme's entries (layout.c, weights.c, zero.c, tensor.c, pipeline.c). */
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- the plan's input */

/* A role's axes as the plan takes them: sizes, wraparound, this rank's coordinates, names, and
 * --alg resolved over them. */
static plan_axes role(const mesh *m, mesh_axes a, mesh_alg alg) {
    int sizes[MESH_MAX_AXES], wraps[MESH_MAX_AXES], coords[MESH_MAX_AXES];
    char names[MESH_MAX_AXES + 1] = "";
    for (int k = 0; k < a.n; k++) {
        sizes[k] = mesh_axis_size(m, a.ax[k]);
        wraps[k] = mesh_axis_wraps(m, a.ax[k]);
        coords[k] = mesh_axis_coord(m, a.ax[k]);
        names[k] = mesh_axis_name(m, a.ax[k]);
    }
    return plan_axes_of(&a, sizes, wraps, coords, names, mesh_alg_resolve(m, a, alg));
}

int par_plan_in(const config *c, mesh *m, plan_in *in, char *err, size_t errlen) {
    memset(in, 0, sizeof *in);
    in->c = *c;
    if (config_for_mesh(&in->c, m, err, errlen) != 0) return -1;
    const config *cm = &in->c;
    const mesh_alg alg = cm->alg;
    char dp[CONFIG_AXES_LEN];
    config_data_axes(cm, m, dp);
    mesh_axes batch, data, dcn = {0, {0, 0, 0}}, tensor, pipe, expert, erep = {0, {0, 0, 0}}, cp;
    CHECK(mesh_axes_parse(m, dp, &batch) == 0 &&
              mesh_axes_parse(m, cm->expert_axis, &expert) == 0 &&
              mesh_axes_parse(m, cm->tensor_axis, &tensor) == 0 &&
              mesh_axes_parse(m, cm->pipe_axis, &pipe) == 0 &&
              mesh_axes_parse(m, cm->cp_axis, &cp) == 0,
          "par_plan_in: axes checked by config_for_mesh do not parse");
    /* --dcn: the batch axes as parsed; the DCN axis (config_for_mesh checked that it is one of
     * them) moves from the data axes to dcn, so that data keeps the ICI data axes */
    data = batch;
    if (cm->dcn_axis[0]) {
        const int d = mesh_axis_index(m, cm->dcn_axis[0]);
        int at = -1;
        for (int k = 0; k < batch.n; k++)
            if (batch.ax[k] == d) at = k;
        CHECK(d >= 0 && at >= 0, "--dcn %s is not a data axis: the config was not validated",
              cm->dcn_axis);
        dcn = (mesh_axes){1, {d, 0, 0}};
        for (int k = at; k + 1 < data.n; k++) data.ax[k] = data.ax[k + 1];
        data.ax[--data.n] = 0;
    }
    /* --cp: the context axis joins the data axes (the gradients' reduction, ZeRO's shards), not
     * the batch's: its ranks hold the same sequences' different tokens */
    if (cp.n) data.ax[data.n++] = cp.ax[0];
    in->batch = role(m, batch, alg), in->data = role(m, data, alg), in->dcn = role(m, dcn, alg);
    in->cp = role(m, cp, alg);
    in->tensor = role(m, tensor, alg), in->pipe = role(m, pipe, alg);
    in->expert = role(m, expert, alg);
    for (int k = 0; k < data.n; k++) /* a routed expert's copies: the data axes without Z */
        if (!expert.n || data.ax[k] != expert.ax[0]) erep.ax[erep.n++] = data.ax[k];
    in->erep = role(m, erep, alg);
    return 0;
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
        .weight_b16 = par_hk_weight_b16,
        .grad = par_hk_grad,
        .head_grads_done = par_hk_head_grads_done,
        .embed_grads_done = par_hk_embed_grads_done,
        /* tensor.c: the tensor axis */
        .reduce_out = par_hk_reduce_out,
        .gather_out = par_hk_gather_out,
        .gather_cols = par_hk_gather_cols,
        .gather_tensor = par_hk_gather_tensor,
        .embed_reduce = par_hk_embed_reduce,
        .gather_vocab = par_hk_gather_vocab,
        .partial_end = par_hk_partial_end,
        .partial_done = par_hk_partial_done,
        .poll = par_hk_poll,
        /* expert.c: the expert axis */
        .moe_to_experts = par_hk_moe_to_experts,
        .moe_from_experts = par_hk_moe_from_experts,
        .moe_start = par_hk_moe_start,
        .moe_wait = par_hk_moe_wait,
        .moe_tensor_sum = par_hk_moe_tensor_sum,
        /* cp.c: the context axis */
        .cp_attn_fwd = par_hk_cp_attn_fwd,
        .cp_attn_bwd = par_hk_cp_attn_bwd,
        .moe_cp_sum = par_hk_moe_cp_sum, /* cp_moe.c */
        /* pipeline.c: the pipeline axis outside a training step */
        .stage_recv = par_hk_stage_recv,
        .stage_send = par_hk_stage_send,
        .pipe_share_last = par_hk_pipe_share_last,
    };
}

/* The named views of the buffers the plan lists for the sharded run. */
static void views(struct par *p) {
    void *(*b)[2] = p->bufs.p;
    p->shard_grads = b[BUF_SHARD_GRADS][0];
    p->column_pack = b[BUF_COLUMN_PACK][0];
    p->dcn = b[BUF_DCN][0];
    p->up.stage = b[BUF_UPDATE_STAGE][0];
    for (int k = 0; k < 2; k++) {
        p->gs.full[k] = b[BUF_LAYER_GRADS][k];
        p->gs.scattered[k] = b[BUF_LAYER_SCATTERED][k];
        p->w.layer[k] = b[BUF_GATHERED_LAYER][k];
        p->w.stage[k] = b[BUF_GATHER_STAGE][k];
        p->w.send[k] = b[BUF_GATHER_SEND][k];
        if (plan_z3_bf16(p->pl)) { /* the same buffers, 2-byte units (weights.c) */
            p->w.layer_b[k] = b[BUF_GATHERED_LAYER][k];
            p->w.stage_b[k] = b[BUF_GATHER_STAGE][k];
            p->w.send_b[k] = b[BUF_GATHER_SEND][k];
        }
        p->w.layer_id[k] = -1;
        p->bk.stage[k] = b[BUF_BUCKET_STAGE][k];
        p->bk.result[k] = b[BUF_BUCKET_RESULT][k];
    }
    p->gs.param[P_EMBED] = b[BUF_EMBED_GRAD][0];
    p->gs.param[P_FINAL_NORM] = b[BUF_FINAL_NORM_GRAD][0];
    p->gs.param[P_UNEMBED] = b[BUF_UNEMBED_GRAD][0];
    p->w.param[P_EMBED] = b[BUF_GATHERED_EMBED][0];
    p->w.param[P_FINAL_NORM] = b[BUF_GATHERED_FINAL_NORM][0];
    const int ub = plan_z3_bf16(p->pl); /* the unembedding gathered in bf16 (weights.c) */
    p->w.param[P_UNEMBED] = ub ? NULL : b[BUF_GATHERED_UNEMBED][0];
    p->w.unembed_b = ub ? b[BUF_GATHERED_UNEMBED][0] : NULL;
    p->tp.a = b[BUF_TENSOR_A][0];
    p->tp.b = b[BUF_TENSOR_B][0];
    p->tp.kv = b[BUF_KV_EXCHANGE][0];
    p->tp.cmatmul = b[BUF_CMATMUL][0];
    p->ep.stage = b[BUF_EP_STAGE][0];
    p->ep.counts = b[BUF_EP_COUNTS][0];
    p->ep.lgrads = b[BUF_EP_LAYER_GRADS][0];
    p->ep.gathered = b[BUF_EP_GATHERED][0];
    p->ep.pack = b[BUF_EP_PACK][0];
    p->ep.update = b[BUF_EP_UPDATE][0];
    p->ep.gathered_lm = -1;
}

int par_create(const plan *pl, mesh *m, par **out, char *err, size_t errlen) {
    *out = NULL;
    if (plan_trivial(pl)) return 0;
    struct par *p = calloc(1, sizeof *p);
    const int ok = p && plan_alloc(pl, PLAN_OWNER_PAR, &p->bufs) == 0;
    if (mesh_agree(mesh_world_comm(m), ok ? 0 : -1) < 0) {
        if (ok) plan_free(pl, PLAN_OWNER_PAR, &p->bufs);
        free(p);
        return errmsg_fail(err, errlen, "out of memory allocating the sharding buffers");
    }
    p->m = m;
    p->pl = pl;
    views(p);
    cp_init(p);
    p->hooks = hook_table(p);
    *out = p;
    return 0;
}

void par_destroy(par *p) {
    if (!p) return;
    queue_drain(p); /* (ZeRO-3's shards are the model's storage) */
    plan_free(p->pl, PLAN_OWNER_PAR, &p->bufs);
    free(p);
}

const model_hooks *par_model_hooks(par *p) {
    return p ? &p->hooks : &model_hooks_single;
}
