/* tensor: Megatron tensor parallelism over the tensor axis Y, as the model's hooks (see
 * layout.c for the layout, model/hooks.h for the hook points).
 *
 * Tensor axis Y (Megatron, critical path, blocking):
 *   forward  Out[B, D]{U_Y} → ReduceScatter_Y → Out[B, D_Y] (+ residual) → AllGather_Y → In[B, D]
 *   backward dOut: AllGather_Y of the residual gradient; dIn[B, D]{U_Y} → ReduceScatter_Y.
 *   Vocabulary: embedding rows of other shards are 0, so one AllReduce_Y sums them exactly; the
 *   cross-entropy combines (max, Σexp, target) per row over Y, no rank holds all logits.
 * With a tensor axis of 1 every hook is the model's single-rank one. The data axes' weight
 * gathers and gradient reductions are in zero.c, the pipeline's in pipeline.c.
 *
 * Collective matmul (--collective-matmul, cmatmul.h). Three of a sublayer's four collectives
 * become collective matmuls:
 *   forward  Out[B, D]{U_Y} = act[B, F_Y] · W_out[F_Y, D], then ReduceScatter_Y: the
 *            matmul-ReduceScatter computes Out's column blocks one by one, each added into the
 *            partial sum travelling round the ring while the next block is computed;
 *   backward dOut[B, D_Y] → AllGather_Y → dact = dOut · W_outᵀ, dW_out += actᵀ · dOut: the
 *            AllGather-matmul multiplies the block in hand while the next one travels;
 *   forward  Out[B, D_Y] (+ residual) → AllGather_Y → RMSNorm → the next sublayer's
 *            in-projections: the norm is a per-row scale, h · W = diag(1/rms(x)) · Σ_j (x_j ∘ g_j)
 *            · W[D_j, :], so sublayer_out leaves its output sharded and norm_in multiplies each
 *            block of x ∘ g into every in-projection while the next block travels, scaling the
 *            rows by 1/rms after the last (the gathered x and h stay for the backward). Only the
 *            training forward defers (the next consumer must be a norm_in: the next sublayer's
 *            or the final norm with the unembedding); a pipeline stage's output, inference rows
 *            and sampling's last layer keep the plain AllGather.
 * The backward ReduceScatter_Y of dIn[B, D]{U_Y} (after the norm's backward) is started without
 * blocking (partial_end) and completed (partial_done) after the weight gradients of the
 * sublayer's input projections, which need nothing it makes: those matmuls run beside it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "train/config/alloc.h"
#include "kernels/optim.h"
#include "train/observe/report.h"
#include "train/parallel/cmatmul.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- tensor axis */

/* Whether the collective matmul's scratch holds BT rows. */
static int cmm_fits(const struct par *p, int64_t BT) {
    return p->cmatmul_scratch &&
           cmm_scratch(BT, p->pl->s.D, p->pl->tensor.n) <= plan_buffer(p->pl, BUF_CMATMUL, 0)->n;
}

int par_hk_sublayer_out(void *ctx, model *mod, float *out, const float *xin, const float *act,
                        const float *w, int64_t BT, int64_t Kl, int defer) {
    struct par *p = ctx;
    par_poll(p);
    const int64_t D = model_shape_of(mod)->D;
    if (p->pl->tensor.n == 1) {
        model_sublayer_out_local(out, xin, act, w, BT, Kl, D);
        return 0;
    }
    const int64_t Dl = p->pl->loc.Dl, d0 = p->pl->loc.d0;
    if (p->cmatmul_scratch) {
        cmm_matmul_reduce_scatter(p->m, p->pl->tensor.axes.ax[0], p->tensor_scratch_a, act, w, BT, Kl,
                                  D, p->cmatmul_scratch);
    } else {
        kern_gemm(p->tensor_scratch_a, act, w, BT, D, Kl, false, false, Kl, D, D, 1.0f, 0.0f);
        par_pack_cols(p->tensor_scratch_b, p->tensor_scratch_a, BT, D, p->pl->tensor.n);
        mesh_reduce_scatter(p->m, p->pl->tensor.axes, p->tensor_scratch_a, p->tensor_scratch_b, BT * Dl,
                            p->pl->alg);
    }
    for (int64_t r = 0; r < BT; r++) kern_add(p->tensor_scratch_a + r * Dl, xin + r * D + d0, Dl);
    if (defer && cmm_fits(p, BT)) { /* the AllGather_Y goes with the next norm_in */
        if (!mesh_no_data(BT * D * (int64_t)sizeof(float)))
            for (int64_t r = 0; r < BT; r++)
                floats_copy(out + r * D + d0, p->tensor_scratch_a + r * Dl, Dl);
        return 1;
    }
    mesh_all_gather(p->m, p->pl->tensor.axes, p->tensor_scratch_b, p->tensor_scratch_a, BT * Dl,
                    p->pl->alg);
    par_unpack_cols(out, p->tensor_scratch_b, BT, D, p->pl->tensor.n);
    return 0;
}

void par_hk_norm_in(void *ctx, model *mod, float *x, int sharded, float *h, float *rstd,
                    const float *gain, int nw, const float *const *w, const int64_t *nk,
                    float *const *y, int64_t BT) {
    struct par *p = ctx;
    par_poll(p);
    const int64_t D = model_shape_of(mod)->D;
    if (!sharded) { /* model_norm_in_local, polling between the in-projections */
        model_norm_in_local(x, h, rstd, gain, 0, w, nk, y, BT, D);
        for (int k = 0; k < nw; k++) {
            if (k) par_poll(p);
            kern_matmul(y[k], h, w[k], BT, D, nk[k]);
        }
        return;
    }
    /* this rank's columns, packed, in the scratch's last two blocks (the gather uses four) */
    const int64_t Dl = p->pl->loc.Dl, d0 = p->pl->loc.d0;
    float *own = p->cmatmul_scratch + 4 * BT * Dl;
    if (!mesh_no_data(BT * D * (int64_t)sizeof(float)))
        for (int64_t r = 0; r < BT; r++) floats_copy(own + r * Dl, x + r * D + d0, Dl);
    cmm_all_gather_norm_matmul(p->m, p->pl->tensor.axes.ax[0], x, h, rstd, gain, own, nw, w, nk, y, BT,
                               D, p->cmatmul_scratch);
}

void par_hk_embed_reduce(void *ctx, model *mod, float *x, int64_t BT) {
    struct par *p = ctx;
    if (p->pl->tensor.n == 1) return;
    mesh_all_reduce(p->m, p->pl->tensor.axes, x, x, BT * model_shape_of(mod)->D, p->pl->alg);
}

void par_hk_xent_combine(void *ctx, model *mod, float *st, int64_t BT) {
    struct par *p = ctx;
    (void)mod;
    if (p->pl->tensor.n == 1) return;
    float *all = p->tensor_scratch_a; /* [n_tensor][3][BT] */
    mesh_all_gather(p->m, p->pl->tensor.axes, all, st, 3 * BT, p->pl->alg);
    for (int64_t i = 0; i < BT; i++) {
        float mx = -INFINITY;
        for (int64_t s = 0; s < p->pl->tensor.n; s++) mx = fmaxf(mx, all[s * 3 * BT + i]);
        double z = 0.0, t = 0.0;
        for (int64_t s = 0; s < p->pl->tensor.n; s++) {
            const float *a = all + s * 3 * BT;
            z += (double)a[BT + i] * exp((double)a[i] - (double)mx);
            t += (double)a[2 * BT + i];
        }
        st[i] = mx;
        st[BT + i] = (float)z;
        st[2 * BT + i] = (float)t;
    }
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

const float *par_hk_resid_grad_gather(void *ctx, model *mod, float *full, float *dr, int64_t BT) {
    struct par *p = ctx;
    if (p->pl->tensor.n == 1) return dr;
    const int64_t D = model_shape_of(mod)->D, Dl = p->pl->loc.Dl;
    mesh_all_gather(p->m, p->pl->tensor.axes, p->tensor_scratch_b, dr, BT * Dl, p->pl->alg);
    par_unpack_cols(full, p->tensor_scratch_b, BT, D, p->pl->tensor.n);
    return full;
}

void par_hk_sublayer_out_bwd(void *ctx, model *mod, float *dact, float *dw, float *full, float *dr,
                             const float *act, const float *w, int64_t BT, int64_t Kl) {
    struct par *p = ctx;
    par_poll(p);
    const int64_t D = model_shape_of(mod)->D;
    if (p->cmatmul_scratch) {
        cmm_all_gather_matmul_t(p->m, p->pl->tensor.axes.ax[0], dact, dw, dr, w, act, BT, Kl, D,
                                p->cmatmul_scratch);
        return;
    }
    const float *dout = par_hk_resid_grad_gather(ctx, mod, full, dr, BT);
    /* model_sublayer_out_bwd_local, polling between its two matmuls */
    kern_matmul_dw(dw, act, dout, BT, Kl, D);
    par_poll(p);
    kern_matmul_dx(dact, dout, w, BT, Kl, D, false);
}

float *par_hk_partial_begin(void *ctx, model *mod, float *dr, float *part, int64_t BT) {
    struct par *p = ctx;
    par_poll(p);
    if (p->pl->tensor.n == 1) return dr;
    floats_clear(part, BT * model_shape_of(mod)->D);
    return part;
}

void par_hk_partial_end(void *ctx, model *mod, float *dr, float *part, int64_t BT) {
    struct par *p = ctx;
    par_poll(p);
    if (p->pl->tensor.n == 1) return;
    const int64_t D = model_shape_of(mod)->D, Dl = p->pl->loc.Dl;
    par_pack_cols(p->tensor_scratch_b, part, BT, D, p->pl->tensor.n);
    if (p->cmatmul_scratch) { /* completed by partial_done, the weight gradients beside it */
        p->partial_req = mesh_ireduce_scatter(p->m, p->pl->tensor.axes, p->tensor_scratch_a,
                                              p->tensor_scratch_b, BT * Dl, p->pl->alg);
        return;
    }
    mesh_reduce_scatter(p->m, p->pl->tensor.axes, p->tensor_scratch_a, p->tensor_scratch_b, BT * Dl,
                        p->pl->alg);
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

/* ---------------------------------------------------------------- collective matmul switch */

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
    const double plain =
        report_predict(r, MESH_OP_REDUCE_SCATTER, Y, alg, c, NULL) +
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
