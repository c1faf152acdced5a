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
    return p->tp.cmatmul &&
           cmm_scratch(BT, p->pl->s.D, p->pl->tensor.n) <= plan_buffer(p->pl, BUF_CMATMUL, 0)->n;
}

float *par_hk_reduce_out(void *ctx, model *mod, model_product_fn fn, void *fctx, int64_t BT) {
    struct par *p = ctx;
    (void)mod;
    const plan *pl = p->pl;
    const int64_t D = pl->s.D, n = pl->tensor.n;
    if (p->tp.cmatmul) {
        cmm_matmul_reduce_scatter(p->m, pl->tensor.axes.ax[0], p->wire, p->tp.a, fn, fctx, BT, D,
                                  p->tp.cmatmul);
        return p->tp.a;
    }
    fn(fctx, p->tp.a, 0, 1);
    par_pack_cols(p->tp.b, p->tp.a, BT, D, n);
    par_run(p, PLAN_TP_REDUCE_OUT, p->tp.a, p->tp.b, BT * pl->loc.Dl);
    return p->tp.a;
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
    par_run(p, PLAN_TP_GATHER_OUT, p->tp.b, sh, BT * pl->loc.Dl);
    par_unpack_cols(out, p->tp.b, BT, pl->s.D, pl->tensor.n);
    return 0;
}

const float *par_hk_gather_cols(void *ctx, model *mod, float *x, const float *own, int64_t BT,
                                model_block_fn fn, void *fctx) {
    struct par *p = ctx;
    (void)mod;
    const plan *pl = p->pl;
    const int64_t Dl = pl->loc.Dl;
    const plan_coll kind = own ? PLAN_TP_GATHER_GRAD : PLAN_TP_GATHER_OUT;
    if (!own) { /* x's own columns, packed: in the collective matmul's scratch past the four
                 * blocks its gather uses, else in the tensor axis's */
        float *o = p->tp.cmatmul ? p->tp.cmatmul + 4 * BT * Dl : p->tp.a;
        own_cols(p, x, o, BT, 1);
        own = o;
    }
    if (fn && p->tp.cmatmul) {
        cmm_gather_blocks(p->m, pl->tensor.axes.ax[0], p->wire, own, BT * Dl, p->tp.cmatmul, fn,
                          fctx);
        return NULL;
    }
    par_run(p, kind, p->tp.b, own, BT * Dl);
    par_unpack_cols(x, p->tp.b, BT, pl->s.D, pl->tensor.n);
    return x;
}

const float *par_hk_gather_tensor(void *ctx, model *mod, const float *mine, int64_t n) {
    struct par *p = ctx;
    (void)mod;
    par_run(p, PLAN_TP_STATS, p->tp.a, mine, n);
    return p->tp.a;
}

void par_hk_embed_reduce(void *ctx, model *mod, float *x, int64_t BT) {
    struct par *p = ctx;
    if (p->pl->tensor.n == 1) return;
    par_run(p, PLAN_TP_EMBED, x, x, BT * model_shape_of(mod)->D);
}

void par_hk_gather_vocab(void *ctx, model *mod, float *logits, const float *logits_loc) {
    struct par *p = ctx;
    const int64_t Vl = model_extents_of(mod)->Vl;
    if (p->pl->tensor.n == 1) {
        floats_copy(logits, logits_loc, Vl);
        return;
    }
    par_run(p, PLAN_TP_VOCAB, logits, logits_loc, Vl);
}

void par_hk_partial_end(void *ctx, model *mod, float *dr, float *part, int64_t BT) {
    struct par *p = ctx;
    (void)mod;
    par_poll(p);
    if (p->pl->tensor.n == 1) return;
    const plan *pl = p->pl;
    const int64_t Dl = pl->loc.Dl;
    par_pack_cols(p->tp.b, part, BT, pl->s.D, pl->tensor.n);
    if (p->tp.cmatmul) { /* completed by partial_done, the weight gradients beside it */
        p->tp.partial = par_start(p, PLAN_TP_REDUCE_GRAD, p->tp.a, p->tp.b, BT * Dl);
        return;
    }
    par_run(p, PLAN_TP_REDUCE_GRAD, p->tp.a, p->tp.b, BT * Dl);
    kern_add(dr, p->tp.a, BT * Dl);
}

void par_hk_partial_done(void *ctx, model *mod, float *dr, int64_t BT) {
    struct par *p = ctx;
    (void)mod;
    par_poll(p);
    if (!p->tp.partial) return;
    mesh_wait(p->tp.partial);
    p->tp.partial = NULL;
    kern_add(dr, p->tp.a, BT * p->pl->loc.Dl);
}

/* ---------------------------------------------------------------- collective matmul's verdict */

int par_cmatmul_wins(const plan *pl, const struct report *r, double flops) {
    if (pl->tensor.n == 1 || !r || !(flops > 0)) return 0;
    const int64_t BT = pl->rows, Dl = pl->loc.Dl, c = BT * Dl, n = pl->tensor.n;
    /* one ring step: a ppermute of a block (on a line one each way at once, on different
     * links), or on an axis of 2 the exchange (cmatmul.c) */
    const mesh_coll_call step = plan_coll_call(pl, PLAN_TP_HOP, c),
                         rsc = plan_coll_call(pl, PLAN_TP_REDUCE_OUT, c),
                         agc = plan_coll_call(pl, PLAN_TP_GATHER_OUT, c);
    const double hop = report_predict(r, &step, NULL);
    const double rs = report_predict(r, &rsc, NULL), plain = rs + report_predict(r, &agc, NULL);
    const int64_t Kl[2] = {pl->loc.Nl * pl->s.H, pl->loc.Fl}; /* attention's wo, the MLP's w_down */
    /* the backward ReduceScatter of the sublayer's input gradient runs beside the weight
     * gradients of its input projections (wq, wk, wv: (Nl + 2·Kl)·H columns; w_gate, w_up) */
    const int64_t In[2] = {(pl->loc.Nl + 2 * pl->loc.Kl) * pl->s.H, 2 * pl->loc.Fl};
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
