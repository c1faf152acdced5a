/* tensor: Megatron tensor parallelism over the tensor axis Y, as the model's hooks (the layout:
 * plan.c; the hook points: model/hooks.h; the math on either side of them: model/sublayer.c).
 * The hooks move data; where a collective matmul interleaves the two they move the chunks and
 * call back into the model's math for each one.
 *
 * Tensor axis Y (Megatron, critical path, blocking):
 *   forward  Out[B, D]{U_Y} → ReduceScatter_Y → Out[B, D_Y] (+ residual) → AllGather_Y → In[B, D]
 *   backward dOut: AllGather_Y of the residual gradient; dIn[B, D]{U_Y} → ReduceScatter_Y.
 *   Vocabulary: embedding rows of other shards are 0, so one AllReduce_Y sums them exactly; the
 *   cross-entropy's row statistics (max, Σexp, target) are gathered over Y and combined, no rank
 *   holds all logits.
 * The data axes' weight gathers and gradient reductions are in zero.c, the pipeline's in the
 * step executor (train/step/exec.c).
 *
 * Collective matmul (--collective-matmul, cmatmul.h). Three of a sublayer's four collectives
 * become collective matmuls:
 *   forward  reduce_out: the matmul-ReduceScatter asks the model for Out's column blocks one by
 *            one, each added into the partial sum travelling round the ring while the next block
 *            is computed;
 *   backward gather_cols of dOut[B, D_Y]: the AllGather-matmul hands each block to the model's
 *            products (dact, dW_out) while the next one travels;
 *   forward  gather_out leaves the sublayer's output sharded (defer) and the next norm's
 *            gather_cols hands its blocks to the model's AllGather-norm-matmul. Only the training
 *            forward defers (the next consumer must be a norm: the next sublayer's or the final
 *            norm with the unembedding); a pipeline stage's output, inference rows and sampling's
 *            last layer keep the plain AllGather.
 * The backward ReduceScatter_Y of dIn[B, D]{U_Y} (after the norm's backward) is started without
 * blocking (partial_end) and completed (partial_done) after the weight gradients of the
 * sublayer's input projections, which need nothing it makes: those matmuls run beside it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim.h"
#include "train/config/alloc.h"
#include "train/observe/report.h"
#include "train/parallel/cmatmul.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- tensor axis */

/* Whether the collective matmul's scratch holds BT rows. */
static int cmm_fits(const struct par *p, int64_t BT) {
    return p->cmatmul_scratch &&
           cmm_scratch(BT, p->pl->s.D, p->pl->tensor.n) <= plan_buffer(p->pl, BUF_CMATMUL, 0)->n;
}

float *par_hk_reduce_out(void *ctx, model *mod, model_product_fn fn, void *fctx, int64_t BT) {
    struct par *p = ctx;
    (void)mod;
    const plan *pl = p->pl;
    const int64_t D = pl->s.D, n = pl->tensor.n;
    if (p->cmatmul_scratch) {
        cmm_matmul_reduce_scatter(p->m, pl->tensor.axes.ax[0], p->tensor_scratch_a, fn, fctx, BT, D,
                                  p->cmatmul_scratch);
        return p->tensor_scratch_a;
    }
    fn(fctx, p->tensor_scratch_a, 0, 1);
    par_pack_cols(p->tensor_scratch_b, p->tensor_scratch_a, BT, D, n);
    mesh_reduce_scatter(p->m, pl->tensor.axes, p->tensor_scratch_a, p->tensor_scratch_b,
                        BT * pl->loc.Dl, pl->alg);
    return p->tensor_scratch_a;
}

/* The rows of sh[BT, D_Y] into x's own D_Y columns (inv = 1: x's own columns into sh). */
static void own_cols(const struct par *p, float *x, float *sh, int64_t BT, int inv) {
    const int64_t D = p->pl->s.D, Dl = p->pl->loc.Dl, d0 = p->pl->loc.d0;
    if (mesh_no_data(BT * D * (int64_t)sizeof(float))) return;
    for (int64_t r = 0; r < BT; r++)
        if (inv)
            floats_copy(sh + r * Dl, x + r * D + d0, Dl);
        else
            floats_copy(x + r * D + d0, sh + r * Dl, Dl);
}

int par_hk_gather_out(void *ctx, model *mod, float *out, const float *sh, int64_t BT, int defer) {
    struct par *p = ctx;
    (void)mod;
    const plan *pl = p->pl;
    if (defer && cmm_fits(p, BT)) { /* the AllGather_Y goes with the next norm's gather_cols */
        own_cols(p, out, (float *)sh, BT, 0);
        return 1;
    }
    mesh_all_gather(p->m, pl->tensor.axes, p->tensor_scratch_b, sh, BT * pl->loc.Dl, pl->alg);
    par_unpack_cols(out, p->tensor_scratch_b, BT, pl->s.D, pl->tensor.n);
    return 0;
}

const float *par_hk_gather_cols(void *ctx, model *mod, float *x, const float *own, int64_t BT,
                                model_block_fn fn, void *fctx) {
    struct par *p = ctx;
    (void)mod;
    const plan *pl = p->pl;
    const int64_t Dl = pl->loc.Dl;
    if (!own) { /* x's own columns, packed: in the collective matmul's scratch past the four
                 * blocks its gather uses, else in the tensor axis's */
        float *o = p->cmatmul_scratch ? p->cmatmul_scratch + 4 * BT * Dl : p->tensor_scratch_a;
        own_cols(p, x, o, BT, 1);
        own = o;
    }
    if (fn && p->cmatmul_scratch) {
        cmm_gather_blocks(p->m, pl->tensor.axes.ax[0], own, BT * Dl, p->cmatmul_scratch, fn, fctx);
        return NULL;
    }
    mesh_all_gather(p->m, pl->tensor.axes, p->tensor_scratch_b, own, BT * Dl, pl->alg);
    par_unpack_cols(x, p->tensor_scratch_b, BT, pl->s.D, pl->tensor.n);
    return x;
}

const float *par_hk_gather_tensor(void *ctx, model *mod, const float *mine, int64_t n) {
    struct par *p = ctx;
    (void)mod;
    mesh_all_gather(p->m, p->pl->tensor.axes, p->tensor_scratch_a, mine, n, p->pl->alg);
    return p->tensor_scratch_a;
}

void par_hk_embed_reduce(void *ctx, model *mod, float *x, int64_t BT) {
    struct par *p = ctx;
    if (p->pl->tensor.n == 1) return;
    mesh_all_reduce(p->m, p->pl->tensor.axes, x, x, BT * model_shape_of(mod)->D, p->pl->alg);
}

void par_hk_gather_vocab(void *ctx, model *mod, float *logits, const float *logits_loc) {
    struct par *p = ctx;
    const int64_t Vl = model_extents_of(mod)->Vl;
    if (p->pl->tensor.n == 1) {
        floats_copy(logits, logits_loc, Vl);
        return;
    }
    mesh_all_gather(p->m, p->pl->tensor.axes, logits, logits_loc, Vl, p->pl->alg);
}

void par_hk_partial_end(void *ctx, model *mod, float *dr, float *part, int64_t BT) {
    struct par *p = ctx;
    (void)mod;
    par_poll(p);
    if (p->pl->tensor.n == 1) return;
    const plan *pl = p->pl;
    const int64_t Dl = pl->loc.Dl;
    par_pack_cols(p->tensor_scratch_b, part, BT, pl->s.D, pl->tensor.n);
    if (p->cmatmul_scratch) { /* completed by partial_done, the weight gradients beside it */
        p->partial_req = mesh_ireduce_scatter(p->m, pl->tensor.axes, p->tensor_scratch_a,
                                              p->tensor_scratch_b, BT * Dl, pl->alg);
        return;
    }
    mesh_reduce_scatter(p->m, pl->tensor.axes, p->tensor_scratch_a, p->tensor_scratch_b, BT * Dl,
                        pl->alg);
    kern_add(dr, p->tensor_scratch_a, BT * Dl);
}

void par_hk_partial_done(void *ctx, model *mod, float *dr, int64_t BT) {
    struct par *p = ctx;
    (void)mod;
    par_poll(p);
    if (!p->partial_req) return;
    mesh_wait(p->partial_req);
    p->partial_req = NULL;
    kern_add(dr, p->tensor_scratch_a, BT * p->pl->loc.Dl);
}

/* ---------------------------------------------------------------- collective matmul's verdict */

int par_cmatmul_wins(const plan *pl, const struct report *r, double flops) {
    if (pl->tensor.n == 1 || !r || !(flops > 0)) return 0;
    const int64_t BT = pl->rows, Dl = pl->loc.Dl, c = BT * Dl, n = pl->tensor.n;
    const mesh_axes one = {1, {pl->tensor.axes.ax[0], 0, 0}};
    const mesh_axes Y = pl->tensor.axes;
    const mesh_alg alg = pl->alg;
    /* one ring step: a ppermute of a block (two on a line: both ways, one after the other), or
     * on an axis of 2 the exchange (cmatmul.c) */
    const double line = n > 2 && !pl->tensor.wraps[0] ? 2 : 1;
    const double hop = line * n == 2
                           ? report_predict(r, MESH_OP_ALL_GATHER, one, MESH_ALG_DEFAULT, c, NULL)
                           : report_predict(r, MESH_OP_PPERMUTE, one, MESH_ALG_DEFAULT, c, NULL);
    const double plain = report_predict(r, MESH_OP_REDUCE_SCATTER, Y, alg, c, NULL) +
                         report_predict(r, MESH_OP_ALL_GATHER, Y, alg, c, NULL);
    const int64_t Kl[2] = {pl->loc.Nl * pl->s.H, pl->loc.Fl}; /* attention's wo, the MLP's w_down */
    /* the backward ReduceScatter of the sublayer's input gradient runs beside the weight
     * gradients of its input projections (wq, wk, wv: (Nl + 2·Kl)·H columns; w_gate, w_up) */
    const int64_t In[2] = {(pl->loc.Nl + 2 * pl->loc.Kl) * pl->s.H, 2 * pl->loc.Fl};
    const double rs = report_predict(r, MESH_OP_REDUCE_SCATTER, Y, alg, c, NULL);
    double cmm = 0;
    for (int k = 0; k < 2; k++) {
        const double t_rs = 2.0 * (double)(BT * Kl[k] * Dl) / flops; /* forward: one product */
        const double t_ag = 2 * t_rs; /* backward: the block's input and weight gradients */
        /* the forward AllGather of the sublayer input: one block into the in-projections */
        const double t_in = 2.0 * (double)(BT * Dl * In[k]) / flops;
        cmm += (double)(n - 1) * (fmax(0, hop - t_rs) + fmax(0, hop - t_ag) + fmax(0, hop - t_in));
        cmm += fmax(0, rs - 2.0 * (double)(BT * pl->s.D * In[k]) / flops);
    }
    return cmm < 2 * plain + 2 * rs;
}
