/* model_moe: a MoE block's MLP on one rank (see model_impl.h and config.h's moe_shape).
 *
 * How it works. Forward on BT rows, groups of G consecutive rows being one sequence's tokens:
 *   h2 = rmsnorm(x2)·mlp_norm;  logits = h2·router   (fp32, [BT, E])
 *   prob = softmax(logits); idx, w = the k largest logits (ties to the lower expert) and the
 *     softmax over those k (renormalised, as Mixtral)                      (kern_router_fwd)
 *   the plan: slot (t, j) is kept unless t's sequence has already sent `cap` earlier slots to
 *     expert idx[t, j] (cap = ceil(c·k·T/E), or none: dropless)              (kern_moe_plan)
 *   xs = the kept slots' rows of h2, grouped by expert in slot order; ys = expert_e(xs) on each
 *     group (SwiGLU of width F_e)                                (kern_moe_gather, _mlp_fwd)
 *   out = x2 + Σ_s shared_s(h2) + Σ_j w_j·ys[pos(t, j)], j in the router's order (kern_moe_combine)
 * A dropped slot adds nothing; its weight is not given to the others, and a token whose slots
 * are all dropped keeps x2 (and the shared experts'). The sum's order is fixed by the slots, not
 * by the order the experts ran in, so expert parallelism can return the rows in any order.
 *
 * The losses, per MoE block, for sequence g of T tokens (T·k slots):
 *   aux_g = E·Σ_e f_e·P_e, f_e = the share of g's slots the router sends to e (before capacity),
 *           P_e = the mean over g's tokens of prob_e;   z_t = logsumexp(logits_t)²;
 * the objective adds aux_coef·mean_g(aux_g) + z_coef·mean_t(z_t) for every MoE block, beside the
 * mean cross-entropy. f is a count and has no gradient (Switch). Each is a mean over whole
 * sequences of a per-sequence term, like the cross-entropy: micro-batches and data shards (and
 * an expert axis, which moves tokens but not their sequence's router statistics) split the sum,
 * never a sequence, so neither the value nor the gradient depends on the split. */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/moe.h"
#include "kernels/moe_bf16.h"
#include "kernels/optim.h"
#include "kernels/swiglu.h"
#include "train/config/alloc.h"
#include "train/model/model_impl.h"

/* The rows an expert-axis AllToAll receives for the rows a and b it sends: n floats each of their
 * own under expert parallelism, else a and b themselves (nothing moves). */
static void carve_recv(const model *m, carver *c, int64_t n, float *a, float *b, float **ar,
                       float **br) {
    *ar = m->loc.ep_n > 1 ? carve(c, n) : a;
    *br = m->loc.ep_n > 1 ? carve(c, n) : b;
}

void moe_carve_act(const model *m, carver *c, carver *cb, layer_act *A, int64_t R, int64_t groups) {
    const moe_shape *mo = &m->s.moe;
    const int64_t E = mo->E, k = mo->k, D = m->s.D, Fe = m->loc.Fel, SF = mo->shared * Fe;
    const int64_t Rz = R * k * m->loc.ep_n; /* rows this rank's experts may take */
    /* bf16 compute, training: xs, xr, eh, sh are the forward's transients (mixed_transients) */
    const int b16 = m->cmp.bf16 != 0, kept = b16 && cb, ep = m->loc.ep_n > 1;
    A->rlog = carve(c, R * E);
    A->prob = carve(c, R * E);
    A->lse = carve(c, R);
    A->w = carve(c, R * k);
    A->idx = (int32_t *)carve(c, R * k);
    A->pos = (int32_t *)carve(c, R * k);
    A->src = (int32_t *)carve(c, R * k);
    A->cnt = (int32_t *)carve(c, groups * E);
    A->gbal = moe_cp_carve(m, c, groups);
    A->offs = (int64_t *)carve(c, 2 * (E + 1));
    A->kept = (int64_t *)carve(c, 2 * E);
    A->loffs = (int64_t *)carve(c, 2 * (E + 1));
    A->epc = (int64_t *)carve(c, 2 * model_moe_counts_n(E, m->loc.ep_n));
    A->xs = kept ? NULL : carve(c, R * k * D);
    A->ea = carve(c, Rz * Fe);
    A->eb = carve(c, Rz * Fe);
    A->eh = kept ? NULL : carve(c, Rz * Fe);
    A->ys = carve(c, R * k * D);
    A->xr = kept ? NULL : ep ? carve(c, Rz * D) : A->xs;
    A->yr = ep ? carve(c, Rz * D) : A->ys;
    A->sa = carve(c, R * SF);
    A->sb = carve(c, R * SF);
    A->sh = kept ? NULL : carve(c, R * SF);
    if (!b16) return;
    carver *cr = cb ? cb : c; /* the products' bf16 inputs the backward multiplies */
    A->xrb = carve_b(cr, Rz * D);
    A->ehb = carve_b(cr, Rz * Fe);
    A->shb = carve_b(cr, R * SF);
}

void moe_carve_scratch(model *m, carver *c, carver *cb) {
    const moe_shape *mo = &m->s.moe;
    const int64_t E = mo->E, k = mo->k, D = m->s.D, Fe = m->loc.Fel, SF = mo->shared * Fe;
    const int64_t BT = m->BT;
    if (E == 0 || BT == 0) return;
    moe_scratch *z = &m->ms;
    const int64_t Rz = BT * k * m->loc.ep_n;
    z->dys = carve(c, BT * k * D);
    z->dxs = carve(c, BT * k * D);
    carve_recv(m, c, Rz * D, z->dys, z->dxs, &z->dyr, &z->dxr);
    z->dea = carve(c, Rz * Fe);
    z->deb = carve(c, Rz * Fe);
    z->dsa = carve(c, BT * SF);
    z->dsb = carve(c, BT * SF);
    z->dlog = carve(c, BT * E);
    z->dw = carve(c, BT * k);
    z->frac = carve(c, E);
    z->pmean = carve(c, E);
    z->ga = carve(c, m->Bl * E);
    z->cprec = moe_cp_carve_scratch(m, c);
    if (!m->cmp.bf16) return;
    z->xs_t = carve(c, BT * k * D);
    z->xr_t = m->loc.ep_n > 1 ? carve(c, Rz * D) : z->xs_t;
    z->eh_t = carve(c, Rz * Fe);
    z->sh_t = carve(c, BT * SF);
    kern_bf16 **const ob[5] = {&z->dyrb, &z->deab, &z->debb, &z->dsab, &z->dsbb};
    const int64_t on[5] = {Rz * D, Rz * Fe, Rz * Fe, BT * SF, BT * SF};
    for (int i = 0; i < 5; i++) *ob[i] = carve_b(cb, on[i]); /* the products' bf16 operands */
}

/* An operand of a product: fp32 values, and with bf16 compute their bf16 copy. */
typedef struct {
    const float *f;
    const kern_bf16 *b;
} operand;

/* x and its bf16 copy xb (NULL: fp32 compute), off elements on (either may be NULL: not held). */
static operand at(const float *x, const kern_bf16 *xb, int64_t off) {
    return (operand){x ? x + off : NULL, xb ? xb + off : NULL};
}

/* C[M, N] (=, or += when acc) op(a)·op(b) as kern_gemm's arguments say: on the bf16 copies when
 * a has one (bf16 compute, kern_gemm_bf16), else on the fp32 values. */
static void product(const model *m, float *C, operand a, operand b, int64_t M, int64_t N, int64_t K,
                    bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, bool acc) {
    if (a.b)
        kern_gemm_bf16(m->cmp.ctx, C, a.b, b.b, M, N, K, ta, tb, lda, ldb, ldc, acc);
    else
        kern_gemm(C, a.f, b.f, M, N, K, ta, tb, lda, ldb, ldc, 1.0f, acc ? 1.0f : 0.0f);
}

/* The shared experts, Σ_s swiglu(h2·s_gate[s], h2·s_up[s])·s_down[s], their columns side by side
 * in sa, sb, sh [BT, S·F_e] (s_down [S, F_e, D] is one [S·F_e, D] matrix; F_e this rank's share),
 * in two parts that run while the rows travel: shared_in the products with h2 and SwiGLU into
 * sh, shared_out out[BT, D] = base + sh·s_down (base: x2, or 0 under a tensor axis). bf16
 * compute (wb): h2b, the weights' bf16 copies, and sh rounded into shb. */
static void shared_in(model *m, const layer_w *w, const layer_wb *wb, layer_act *A,
                      const kern_bf16 *h2b, int64_t BT) {
    const moe_shape *mo = &m->s.moe;
    const int64_t D = m->s.D, Fe = m->loc.Fel, SF = mo->shared * Fe;
    if (SF == 0) return;
    const operand h = at(A->h2, h2b, 0);
    for (int64_t e = 0; e < mo->shared; e++) {
        const int64_t wo = e * D * Fe;
        product(m, A->sa + e * Fe, h, at(w->s_gate, wb ? wb->s_gate : NULL, wo), BT, Fe, D, false,
                false, D, Fe, SF, false);
        POLL(m);
        product(m, A->sb + e * Fe, h, at(w->s_up, wb ? wb->s_up : NULL, wo), BT, Fe, D, false,
                false, D, Fe, SF, false);
        POLL(m);
    }
    kern_swiglu_fwd(A->sh, A->sa, A->sb, BT * SF);
    if (wb) mixed_keep(A->shb, NULL, A->sh, BT * SF);
}

static void shared_out(const model *m, const layer_w *w, const layer_wb *wb, const layer_act *A,
                       float *out, const float *base, int64_t BT) {
    const int64_t D = m->s.D, SF = m->s.moe.shared * m->loc.Fel;
    if (base)
        floats_copy(out, base, BT * D);
    else
        floats_clear(out, BT * D);
    if (SF == 0) return;
    product(m, out, at(A->sh, wb ? A->shb : NULL, 0), at(w->s_down, wb ? wb->s_down : NULL, 0), BT,
            D, SF, false, false, SF, D, D, true);
}

/* The routed experts on the rows this rank's experts took (xr, grouped by loffs): yr. bf16
 * compute (wb): xr rounded into xrb, the experts' hidden values into ehb. */
static void experts_fwd(model *m, const layer_w *w, const layer_wb *wb, layer_act *A) {
    const int64_t D = m->s.D, El = m->loc.El, Fe = m->loc.Fel;
    if (!wb) {
        kern_moe_mlp_fwd(A->yr, A->ea, A->eb, A->eh, A->xr, w->e_gate, w->e_up, w->e_down, A->loffs,
                         El, D, Fe);
        return;
    }
    mixed_pack(A->xrb, A->xr, A->loffs[El] * D);
    kern_moe_mlp_fwd_bf16(m->cmp.ctx, A->yr, A->ea, A->eb, A->eh, A->ehb, A->xrb, wb->e_gate,
                          wb->e_up, wb->e_down, A->loffs, El, D, Fe);
}

/* Group g's balance (the share of its slots each expert takes, each expert's mean probability):
 * its own, or under a context axis its sequence's (gbal, moe_cp_plan). */
static void group_balance(model *m, const layer_act *A, int64_t g, int64_t G, const float **frac,
                          const float **pmean) {
    const int64_t E = m->s.moe.E, k = m->s.moe.k;
    if (A->gbal) {
        *frac = A->gbal + g * 2 * E, *pmean = A->gbal + g * 2 * E + E;
        return;
    }
    kern_router_balance(m->ms.frac, m->ms.pmean, A->idx + g * G * k, A->prob + g * G * E, G, E, k);
    *frac = m->ms.frac, *pmean = m->ms.pmean;
}

/* The router's record of one forward: kept and dropped slots; with stats (groups of G rows that
 * are whole training sequences) the balance and z-losses. */
static void tally(model *m, const layer_act *A, int64_t lm, int64_t BT, int64_t G, int stats) {
    const moe_shape *mo = &m->s.moe;
    const int64_t E = mo->E, k = mo->k;
    if (!stats) return;
    for (int64_t e = 0; e < E; e++) m->tally.kept[lm * E + e] += A->kept[e];
    m->tally.slots += BT * k;
    m->tally.dropped += BT * k - A->offs[E];
    double aux = 0, z = 0;
    for (int64_t g = 0; g < BT / G; g++) {
        const float *f, *P;
        group_balance(m, A, g, G, &f, &P);
        for (int64_t e = 0; e < E; e++) aux += (double)E * f[e] * P[e];
    }
    for (int64_t r = 0; r < BT; r++) z += (double)A->lse[r] * A->lse[r];
    m->tally.aux_sum += aux;
    m->tally.aux_n += BT / G;
    m->tally.z_sum += z;
    m->tally.z_n += BT;
}

/* Column block b of nb of the partial sums [BT, D] the block left in c (reduce_out's product). */
typedef struct {
    const float *part;
    int64_t BT, D;
} part_ctx;
static void part_block(void *vc, float *dst, int64_t b, int64_t nb) {
    const part_ctx *c = vc;
    const int64_t nl = c->D / nb;
    for (int64_t r = 0; r < c->BT; r++) floats_copy(dst + r * nl, c->part + r * c->D + b * nl, nl);
}

int moe_block_fwd(model *m, const layer_w *w, const layer_wb *wb, layer_act *A, float *out,
                  int64_t l, int64_t BT, int64_t G, int stats, int sharded, int defer) {
    const model_shape *s = &m->s;
    const moe_shape *mo = &s->moe;
    const int64_t D = s->D, E = mo->E, k = mo->k;
    const int64_t lm = model_layer_stack_index(s, model_layer_global(m, l)); /* the model's */
    const float *const ws[1] = {w->router};
    const int64_t nk[1] = {E};
    float *const ys[1] = {A->rlog};
    sublayer_norm_in(m, A->x2, sharded, A->h2, A->rstd2, w->mlp_norm, 1, ws, NULL, nk, ys, BT,
                     NULL); /* the router in fp32 */
    const kern_bf16 *h2b = wb ? mixed_keep(A->h2b, m->sb[0], A->h2, BT * D) : NULL;
    kern_router_fwd(A->prob, A->lse, A->idx, A->w, A->rlog, BT, E, k);
    const int64_t cap = model_moe_capacity(s);
    if (m->rows_mode && m->rows_seq && cap > 0) { /* each row against its sequence's counts */
        kern_moe_plan(A->pos, A->src, A->offs, A->kept, m->rows_cnt + lm * E, A->idx, m->rows_seq,
                      BT, E, k, 1, model_moe_layers(s) * E, cap);
    } else if (m->loc.cp_n > 1) { /* pieces of sequences: the counters from the earlier pieces */
        CHECK(stats, "moe: a context axis routes training sequences only");
        moe_cp_plan(m, A, BT, G);
    } else { /* groups of G rows, each a sequence from its start (inference rows: dropless) */
        memset(A->cnt, 0, (size_t)((BT + G - 1) / G * E) * sizeof *A->cnt);
        kern_moe_plan(A->pos, A->src, A->offs, A->kept, A->cnt, A->idx, NULL, BT, E, k, G, E,
                      m->rows_mode ? 0 : cap);
    }
    POLL(m);
    kern_moe_gather(A->xs, A->h2, A->src, A->offs[E], D);
    /* the shared experts run while the rows travel (the exchanges left in flight with
     * --overlap over an expert axis): their first products during the dispatch, the down
     * projection during the return */
    const int tp = m->loc.Dl < D, shared = mo->shared > 0;
    if (shared) m->hk.moe_start(m->hk.ctx, m);
    m->hk.moe_to_experts(m->hk.ctx, m, A->epc, A->xr, A->xs, A->offs, A->loffs, D);
    shared_in(m, w, wb, A, h2b, BT);
    m->hk.moe_wait(m->hk.ctx, m);
    experts_fwd(m, w, wb, A);
    if (shared) m->hk.moe_start(m->hk.ctx, m);
    m->hk.moe_from_experts(m->hk.ctx, m, A->epc, A->ys, A->yr, D);
    shared_out(m, w, wb, A, out, tp ? NULL : A->x2, BT);
    tally(m, A, lm, BT, G, stats);
    m->hk.moe_wait(m->hk.ctx, m);
    POLL(m);
    kern_moe_combine(out, A->ys, A->pos, A->w, BT, k, D);
    if (!tp) return 0;
    /* a tensor axis: every product above is this rank's F_e share, out their partial sums over
     * Y: reduce-scattered as a dense MLP's output, the residual's D_Y columns added, gathered */
    part_ctx pc = {out, BT, D};
    float *sh = m->hk.reduce_out(m->hk.ctx, m, part_block, &pc, BT);
    const int64_t Dl = m->loc.Dl, d0 = m->loc.d0;
    for (int64_t r = 0; r < BT; r++) kern_add(sh + r * Dl, A->x2 + r * D + d0, Dl);
    return m->hk.gather_out(m->hk.ctx, m, out, sh, BT, defer);
}

/* The shared experts' weight gradients (+=) from their block's output gradient dr [BT, D] and
 * their products' da, db [BT, S·F_e]; bf16 compute (the operands' bf16 copies set): those
 * roundings, and the forward's h2b and shb, multiplied as they are. */
static void shared_dw(const model *m, const layer_g *g, const layer_act *A, operand da, operand db,
                      operand dr, int64_t BT) {
    const moe_shape *mo = &m->s.moe;
    const int64_t D = m->s.D, Fe = m->loc.Fel, SF = mo->shared * Fe;
    if (dr.b)
        kern_matmul_dw_bf16(m->cmp.ctx, g->s_down, A->shb, dr.b, BT, SF, D);
    else
        kern_matmul_dw(g->s_down, A->sh, dr.f, BT, SF, D);
    const operand h = at(A->h2, dr.b ? A->h2b : NULL, 0);
    for (int64_t e = 0; e < mo->shared; e++) {
        const int64_t c = e * Fe, wo = e * D * Fe;
        product(m, g->s_gate + wo, h, at(da.f, da.b, c), D, Fe, BT, true, false, D, SF, Fe, true);
        product(m, g->s_up + wo, h, at(db.f, db.b, c), D, Fe, BT, true, false, D, SF, Fe, true);
    }
}

/* The shared experts' backward but their weight gradients: dh[BT, D] = their dL/dh2
 * (overwrites); returned, the operands of their weight gradients (shared_dw), dr and the
 * products' gradients da, db (keep: kept in A's k_dr, k_dsa, k_dsb for the weight part). bf16
 * compute (wb): dr rounded once for its two products (into sb[2], read by shared_dw), SwiGLU's
 * input gradients once for theirs (keep: those roundings kept in k_drb, k_dsab, k_dsbb, the
 * operands of the weight part). */
typedef struct {
    operand da, db, dr;
} shared_grads;
static shared_grads shared_bwd(model *m, const layer_w *w, const layer_wb *wb, layer_act *A,
                               float *dh, const float *dr, int64_t BT, int keep) {
    const moe_shape *mo = &m->s.moe;
    const int64_t D = m->s.D, Fe = m->loc.Fel, SF = mo->shared * Fe;
    moe_scratch *z = &m->ms;
    const int k32 = keep && !wb, k16 = keep && wb; /* what the weight part gets: fp32, bf16 */
    float *da = k32 ? A->k_dsa : z->dsa, *db = k32 ? A->k_dsb : z->dsb;
    const kern_bf16 *drb = wb ? mixed_keep(k16 ? A->k_drb : NULL, m->sb[2], dr, BT * D) : NULL;
    if (wb) /* dL/d(sh), into da */
        kern_matmul_dx_bf16(m->cmp.ctx, da, drb, wb->s_down, BT, SF, D, false);
    else
        kern_matmul_dx(da, dr, w->s_down, BT, SF, D, false);
    kern_swiglu_bwd_inplace(da, db, A->sa, A->sb, BT * SF);
    const kern_bf16 *dab = wb ? mixed_keep(k16 ? A->k_dsab : NULL, z->dsab, da, BT * SF) : NULL;
    const kern_bf16 *dbb = wb ? mixed_keep(k16 ? A->k_dsbb : NULL, z->dsbb, db, BT * SF) : NULL;
    for (int64_t e = 0; e < mo->shared; e++) {
        const int64_t c = e * Fe, wo = e * D * Fe;
        product(m, dh, at(da, dab, c), at(w->s_gate, wb ? wb->s_gate : NULL, wo), BT, D, Fe, false,
                true, SF, Fe, D, e > 0);
        POLL(m);
        product(m, dh, at(db, dbb, c), at(w->s_up, wb ? wb->s_up : NULL, wo), BT, D, Fe, false,
                true, SF, Fe, D, true);
        POLL(m);
    }
    if (k32) floats_copy(A->k_dr, dr, BT * D);
    return (shared_grads){at(da, dab, 0), at(db, dbb, 0), at(dr, drb, 0)};
}

void moe_split_carve(const model *m, carver *c, carver *cb, layer_act *A) {
    const moe_shape *mo = &m->s.moe;
    const int64_t BT = m->BT, D = m->s.D, Fe = m->loc.Fel, SF = mo->shared * Fe;
    const int64_t Rz = BT * mo->k * m->loc.ep_n;
    const int64_t n[6] = {Rz * D, Rz * Fe, Rz * Fe, SF ? BT * D : 0, BT * SF, BT * SF};
    float **f[6] = {&A->k_dyr, &A->k_dea, &A->k_deb, &A->k_dr, &A->k_dsa, &A->k_dsb};
    kern_bf16 **b[6] = {&A->k_dyrb, &A->k_deab, &A->k_debb, &A->k_drb, &A->k_dsab, &A->k_dsbb};
    split_carve_kept(m, c, cb, f, b, n, 6);
    A->k_dlog = carve(c, BT * mo->E); /* the router's, fp32 */
}

/* The router's dW (+=) from dlog, in fp32 on h2 as the forward kept it: with bf16 compute its
 * bf16 copy unpacked (A->h2 is then a transient, the backward's dh by now). */
static void router_dw(model *m, const layer_g *g, const layer_act *A, const float *dlog,
                      int64_t BT) {
    const int64_t D = m->s.D;
    const float *h2 = A->h2b ? mixed_unpack(m->ms.xs_t, A->h2b, BT * D) : A->h2;
    kern_matmul_dw(g->router, h2, dlog, BT, D, m->s.moe.E);
}

void moe_block_dw(model *m, const layer_g *g, const layer_act *A, int64_t BT) {
    const int64_t D = m->s.D, El = m->loc.El, Fe = m->loc.Fel;
    const int b16 = m->cmp.bf16 != 0;
    if (b16)
        kern_moe_mlp_dw_bf16(m->cmp.ctx, g->e_gate, g->e_up, g->e_down, A->k_dyrb, A->xrb,
                             A->k_deab, A->k_debb, A->ehb, A->loffs, El, D, Fe);
    else
        kern_moe_mlp_dw(g->e_gate, g->e_up, g->e_down, A->k_dyr, A->xr, A->k_dea, A->k_deb, A->eh,
                        A->loffs, El, D, Fe);
    POLL(m);
    if (m->s.moe.shared > 0)
        shared_dw(m, g, A, at(A->k_dsa, A->k_dsab, 0), at(A->k_dsb, A->k_dsbb, 0),
                  at(A->k_dr, A->k_drb, 0), BT);
    router_dw(m, g, A, A->k_dlog, BT);
}

/* The routed experts' backward on this rank's rows: dxr from dyr, into dea, deb their products'
 * output gradients; their weight gradients += (keep: none). bf16 compute (wb): dyr rounded once
 * for its products, the forward's xrb and ehb multiplied (keep: the bf16 operands of the weight
 * part, dyr's and dea's, deb's roundings, into A's k_dyrb, k_deab, k_debb). */
static void experts_bwd(model *m, const layer_w *w, const layer_wb *wb, const layer_g *g,
                        const layer_act *A, const float *dyr, float *dea, float *deb, int keep) {
    const int64_t D = m->s.D, El = m->loc.El, Fe = m->loc.Fel;
    moe_scratch *z = &m->ms;
    if (!wb) {
        kern_moe_mlp_bwd(z->dxr, keep ? NULL : g->e_gate, keep ? NULL : g->e_up,
                         keep ? NULL : g->e_down, dea, deb, dyr, A->xr, A->ea, A->eb, A->eh,
                         w->e_gate, w->e_up, w->e_down, A->loffs, El, D, Fe);
        return;
    }
    kern_bf16 *dyb = keep ? A->k_dyrb : z->dyrb;
    mixed_pack(dyb, dyr, A->loffs[El] * D);
    kern_moe_mlp_bwd_bf16(m->cmp.ctx, z->dxr, keep ? NULL : g->e_gate, keep ? NULL : g->e_up,
                          keep ? NULL : g->e_down, dea, deb, keep ? A->k_deab : z->deab,
                          keep ? A->k_debb : z->debb, dyb, A->xrb, A->ea, A->eb, A->ehb,
                          wb->e_gate, wb->e_up, wb->e_down, A->loffs, El, D, Fe);
}

/* The balance loss's gradient with respect to the probabilities, ga[g, E] for each group g of G
 * rows: aux_coef·grad_scale·E·f_{g,e}/BT (the loss is a mean over the BT/G groups of a mean over
 * each one's G tokens). Under a context axis a group is a piece of T/|C| tokens of a sequence and
 * f its sequence's: grad_scale's 1/|C| makes the same per-token gradient as one rank's. NULL when
 * the loss is off. */
static const float *balance_grad(model *m, const layer_act *A, int64_t BT, int64_t G) {
    const moe_shape *mo = &m->s.moe;
    const int64_t E = mo->E;
    if (!(mo->aux_coef > 0)) return NULL;
    const float scale = (float)(mo->aux_coef * (double)m->grad_scale * (double)E / (double)BT);
    for (int64_t g = 0; g < BT / G; g++) {
        const float *f, *P;
        group_balance(m, A, g, G, &f, &P);
        for (int64_t e = 0; e < E; e++) m->ms.ga[g * E + e] = scale * f[e];
    }
    return m->ms.ga;
}

void moe_block_bwd(model *m, const layer_w *w, const layer_wb *wb, const layer_g *g, layer_act *A,
                   float *dh, const float *dr, int64_t BT, int64_t G, int keep) {
    const moe_shape *mo = &m->s.moe;
    const int64_t D = m->s.D, E = mo->E, k = mo->k;
    moe_scratch *z = &m->ms;
    /* the products' output gradients: the scratch, or kept for the weight part (the rows'
     * gradients dys are dyr themselves without an expert axis; bf16 compute keeps their bf16
     * roundings alone, experts_bwd) */
    const int k32 = keep && !wb;
    float *dyr = k32 ? A->k_dyr : z->dyr, *dys = m->loc.ep_n > 1 ? z->dys : dyr;
    float *dea = k32 ? A->k_dea : z->dea, *deb = k32 ? A->k_deb : z->deb;
    float *dlog = keep ? A->k_dlog : z->dlog;
    const int tp = m->loc.Dl < D, shared = mo->shared > 0;
    if (tp) /* dL/d(out): the residual gradient's D_Y shards, gathered */
        dr = m->hk.gather_cols(m->hk.ctx, m, m->d_full, dr, BT, NULL, NULL);
    kern_moe_combine_bwd(dys, z->dw, dr, A->ys, A->pos, A->w, BT, k, D);
    /* the experts' rows' gradients go where the rows went, and come back (the two AllToAlls of
     * the forward, in reverse order of the data's way back); with --overlap over an expert axis
     * the shared experts' input gradient runs while they go, their weight gradients and the
     * router's backward while they come back */
    if (shared) m->hk.moe_start(m->hk.ctx, m);
    m->hk.moe_to_experts(m->hk.ctx, m, A->epc, dyr, dys, NULL, NULL, D);
    shared_grads sg = {{NULL, NULL}, {NULL, NULL}, {NULL, NULL}};
    if (shared)
        sg = shared_bwd(m, w, wb, A, dh, dr, BT, keep);
    else
        floats_clear(dh, BT * D);
    m->hk.moe_wait(m->hk.ctx, m);
    POLL(m);
    experts_bwd(m, w, wb, g, A, dyr, dea, deb, keep);
    m->hk.moe_start(m->hk.ctx, m);
    m->hk.moe_from_experts(m->hk.ctx, m, A->epc, z->dxs, z->dxr, D);
    if (shared && !keep) shared_dw(m, g, A, sg.da, sg.db, sg.dr, BT);
    POLL(m);
    /* a tensor axis: dw's partial sums (ys was this rank's share) summed over Y, so that every
     * rank's router gradient is the same; dh is a partial sum the block's ReduceScatter_Y adds up,
     * so the router's part of it joins on one rank of Y only */
    if (tp) m->hk.moe_tensor_sum(m->hk.ctx, m, z->dw, BT * k);
    const float zs = (float)(2.0 * mo->z_coef * (double)m->grad_scale / (double)BT);
    kern_router_bwd(dlog, z->dw, A->idx, A->w, A->prob, A->lse, balance_grad(m, A, BT, G), zs, BT,
                    E, k, G);
    if (!keep) router_dw(m, g, A, dlog, BT);
    m->hk.moe_wait(m->hk.ctx, m);
    kern_moe_scatter_add(dh, z->dxs, A->pos, BT, k, D);
    POLL(m);
    if (m->loc.d0 == 0) kern_matmul_dx(dh, dlog, w->router, BT, D, E, true);
}
