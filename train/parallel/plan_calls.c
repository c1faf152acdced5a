/* plan_calls: the sharding plan's list of collectives (plan.h). Each kind's op and role; one
 * layer's collectives per micro-batch in the order a step meets them (the context axis's,
 * ZeRO-3's gathers, the tensor axis's, the expert axis's, the pipeline's sends), then the step's
 * (the data axes' reductions and gathers), with their element counts, passes and paths, as
 * layout_print.c prints them and the schemes (zero.c, tensor.c, expert.c, cp.c, the executor)
 * run them. plan.c builds the rest of the plan and calls plan_list_calls last. */
#include <stdio.h>
#include <stdlib.h>

#include "mesh/errmsg.h"
#include "train/parallel/cmatmul.h"
#include "train/parallel/plan.h"

/* ---------------------------------------------------------------- the collectives */

/* The axes of role r. Here, not in plan.c, so that the plan's builder calls its list of
 * collectives and not the other way round. */
const plan_axes *plan_role_axes(const plan *p, plan_role r) {
    return r == PLAN_ROLE_DATA          ? &p->data
           : r == PLAN_ROLE_TENSOR      ? &p->tensor
           : r == PLAN_ROLE_PIPE        ? &p->pipe
           : r == PLAN_ROLE_EXPERT      ? &p->expert
           : r == PLAN_ROLE_EXPERT_DATA ? &p->erep
           : r == PLAN_ROLE_CP          ? &p->cp
                                        : &p->dcn;
}

/* Each kind's op and role. */
static const struct {
    mesh_op op;
    plan_role role;
} kinds[PLAN_COLL_COUNT] = {
    [PLAN_TP_REDUCE_OUT] = {MESH_OP_REDUCE_SCATTER, PLAN_ROLE_TENSOR},
    [PLAN_TP_GATHER_OUT] = {MESH_OP_ALL_GATHER, PLAN_ROLE_TENSOR},
    [PLAN_TP_GATHER_GRAD] = {MESH_OP_ALL_GATHER, PLAN_ROLE_TENSOR},
    [PLAN_TP_REDUCE_GRAD] = {MESH_OP_REDUCE_SCATTER, PLAN_ROLE_TENSOR},
    [PLAN_TP_HOP] = {MESH_OP_PPERMUTE, PLAN_ROLE_TENSOR},
    [PLAN_TP_NORM_GRAD] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_TENSOR},
    [PLAN_TP_KV_GRAD] = {MESH_OP_ALL_GATHER, PLAN_ROLE_TENSOR},
    [PLAN_TP_EMBED] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_TENSOR},
    [PLAN_TP_STATS] = {MESH_OP_ALL_GATHER, PLAN_ROLE_TENSOR},
    [PLAN_TP_VOCAB] = {MESH_OP_ALL_GATHER, PLAN_ROLE_TENSOR},
    [PLAN_Z3_GATHER] = {MESH_OP_ALL_GATHER, PLAN_ROLE_DATA},
    [PLAN_Z3_GATHER_PARAM] = {MESH_OP_ALL_GATHER, PLAN_ROLE_DATA},
    [PLAN_Z3_GATHER_BF16] = {MESH_OP_ALL_GATHER, PLAN_ROLE_DATA},
    [PLAN_DP_REDUCE] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_DATA},
    [PLAN_ZERO_REDUCE] = {MESH_OP_REDUCE_SCATTER, PLAN_ROLE_DATA},
    [PLAN_UPDATE_GATHER] = {MESH_OP_ALL_GATHER, PLAN_ROLE_DATA},
    [PLAN_DCN_SCATTER] = {MESH_OP_REDUCE_SCATTER, PLAN_ROLE_DATA},
    [PLAN_DCN_REDUCE] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_DCN},
    [PLAN_DCN_GATHER] = {MESH_OP_ALL_GATHER, PLAN_ROLE_DATA},
    [PLAN_DCN_SHARDS] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_DCN},
    [PLAN_PIPE_SEND] = {MESH_OP_PPERMUTE, PLAN_ROLE_PIPE},
    [PLAN_PIPE_SHARE] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_PIPE},
    [PLAN_EP_ALL_TO_ALL] = {MESH_OP_ALL_TO_ALL, PLAN_ROLE_EXPERT},
    [PLAN_EP_ALL_TO_ALL_BF16] = {MESH_OP_ALL_TO_ALL, PLAN_ROLE_EXPERT},
    [PLAN_EP_COUNTS] = {MESH_OP_ALL_GATHER, PLAN_ROLE_EXPERT},
    [PLAN_EP_GATHER] = {MESH_OP_ALL_GATHER, PLAN_ROLE_EXPERT_DATA},
    [PLAN_EP_REDUCE] = {MESH_OP_REDUCE_SCATTER, PLAN_ROLE_EXPERT_DATA},
    [PLAN_EP_DP_REDUCE] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_EXPERT_DATA},
    [PLAN_EP_TP_SUM] = {MESH_OP_ALL_GATHER, PLAN_ROLE_TENSOR},
    [PLAN_MOE_GATHER] = {MESH_OP_ALL_GATHER, PLAN_ROLE_DATA},
    [PLAN_MOE_REDUCE] = {MESH_OP_REDUCE_SCATTER, PLAN_ROLE_DATA},
    [PLAN_MOE_DP_REDUCE] = {MESH_OP_ALL_REDUCE, PLAN_ROLE_DATA},
    [PLAN_CP_GATHER_KV] = {MESH_OP_ALL_GATHER, PLAN_ROLE_CP},
    [PLAN_CP_SCATTER_DKV] = {MESH_OP_REDUCE_SCATTER, PLAN_ROLE_CP},
    [PLAN_CP_HOP] = {MESH_OP_PPERMUTE, PLAN_ROLE_CP},
    [PLAN_CP_ALL_TO_ALL] = {MESH_OP_ALL_TO_ALL, PLAN_ROLE_CP},
    [PLAN_CP_GATHER_KV_BF16] = {MESH_OP_ALL_GATHER, PLAN_ROLE_CP},
    [PLAN_CP_HOP_BF16] = {MESH_OP_PPERMUTE, PLAN_ROLE_CP},
    [PLAN_CP_ALL_TO_ALL_BF16] = {MESH_OP_ALL_TO_ALL, PLAN_ROLE_CP},
    [PLAN_CP_MOE_STATS] = {MESH_OP_ALL_GATHER, PLAN_ROLE_CP},
};

int plan_coll_wire_fixed(plan_coll k) {
    return k == PLAN_Z3_GATHER_BF16 || k == PLAN_CP_GATHER_KV_BF16 ||
           k == PLAN_EP_ALL_TO_ALL_BF16 || k == PLAN_CP_HOP_BF16 || k == PLAN_CP_ALL_TO_ALL_BF16 ||
           k == PLAN_EP_COUNTS || k == PLAN_CP_MOE_STATS;
}

mesh_coll_call plan_coll_call(const plan *p, plan_coll k, int64_t count) {
    mesh_coll_call c = {kinds[k].op, plan_role_axes(p, kinds[k].role)->axes, 0, count, p->alg,
                        p->wire};
    if (c.op == MESH_OP_PPERMUTE) c.shift = 1;
    if (k == PLAN_Z3_GATHER_BF16 || k == PLAN_CP_GATHER_KV_BF16 || k == PLAN_EP_ALL_TO_ALL_BF16)
        c.wire = MESH_WIRE_BF16;
    else if (plan_coll_wire_fixed(k))
        c.wire = MESH_WIRE_F32; /* bf16 pairs or doubles/integers, copied */
    if (k == PLAN_EP_GATHER && plan_z3_bf16(p)) c.wire = MESH_WIRE_BF16; /* expert_zero.c */
    if (k == PLAN_TP_HOP) { /* on an axis of 2 the step is one exchange: an AllGather (cmatmul.c) */
        c.op = p->tensor.n == 2 ? MESH_OP_ALL_GATHER : MESH_OP_PPERMUTE;
        c.alg = MESH_ALG_DEFAULT;
    }
    return c;
}

static void call(plan *p, plan_coll kind, plan_pass pass, plan_path path, int64_t count, int times,
                 const char *what) {
    CHECK(p->ncall < PLAN_MAX_CALLS, "plan: more than %d kinds of collective", PLAN_MAX_CALLS);
    const mesh_coll_call c = plan_coll_call(p, kind, count);
    plan_call *r = &p->call[p->ncall++];
    const int64_t layers = pass == PLAN_STEP || pass == PLAN_UPDATE ? 1 : p->l1 - p->l0;
    *r = (plan_call){kind, c.op, kinds[kind].role, pass, path, count, times, layers, c.wire, ""};
    snprintf(r->what, sizeof r->what, "%s", what);
}

/* The tensor axis: the sublayers' output ReduceScatter and input AllGather (or, with the
 * collective matmuls, their ring steps), the backward's, the norm gains' and shared kv heads'
 * gradients. */
static void calls_tensor(plan *p) {
    const int64_t cnt = p->rows * p->loc.Dl, n = p->tensor.n;
    if (p->cmatmul) { /* (cmatmul.c): one ring step per row, two sublayers */
        const int line = n > 2 && !p->tensor.wraps[0]; /* both ways */
        const int steps = (int)(2 * (line ? 2 : 1) * (n - 1));
        call(p, PLAN_TP_HOP, PLAN_FWD, PLAN_HIDDEN, cnt, steps,
             "matmul-RS: Out[B, D_Y]{U_Y} round the ring");
        call(p, PLAN_TP_HOP, PLAN_FWD, PLAN_HIDDEN, cnt, steps,
             "AG-norm-matmul: In[B, D_Y] round the ring");
        call(p, PLAN_TP_HOP, PLAN_BWD, PLAN_HIDDEN, cnt, steps,
             "AG-matmul: dOut[B, D_Y] round the ring");
    } else {
        call(p, PLAN_TP_REDUCE_OUT, PLAN_FWD, PLAN_CRITICAL, cnt, 2,
             "Out[B, D]{U_Y} → Out[B, D_Y] (+ residual)");
        call(p, PLAN_TP_GATHER_OUT, PLAN_FWD, PLAN_CRITICAL, cnt, 2,
             "In[B, D_Y] → In[B, D] (next sublayer)");
        call(p, PLAN_TP_GATHER_GRAD, PLAN_BWD, PLAN_CRITICAL, cnt, 2, "dOut[B, D_Y] → dOut[B, D]");
    }
    call(p, PLAN_TP_REDUCE_GRAD, PLAN_BWD, PLAN_CRITICAL, cnt, 2, "dIn[B, D]{U_Y} → dIn[B, D_Y]");
    call(p, PLAN_TP_NORM_GRAD, PLAN_BWD, PLAN_BLOCKING, p->s.D, 2, "d(norm gain)[D]{U_Y} → [D]");
    if (p->g[P_WK].kv_group)
        call(p, PLAN_TP_KV_GRAD, PLAN_BWD, PLAN_BLOCKING, plan_geo_block(&p->g[P_WK]), 2,
             "dW_kv[D, K·H] of the kv head → its group");
}

/* The data axes: the gradient reductions, ZeRO-1/2's gathers of the updated shards, --dcn's. */
static void calls_data(plan *p) {
    const plan_path path = p->overlap ? PLAN_ASYNC : PLAN_BLOCKING;
    const int nl = p->n_layer_params;
    const int64_t per = p->layer_elems / nl;
    if (p->data.n > 1 && p->zero == 0 && !p->dcn.axes.n)
        call(p, PLAN_DP_REDUCE, PLAN_BWD, path, per, nl, "dW{U_X} → dW (once per step)");
    else if (p->data.n > 1 && p->zero > 0)
        call(p, PLAN_ZERO_REDUCE, PLAN_BWD, path, per / p->data.n, nl,
             p->zero == 1 ? "dW{U_X} → dW[D_X, ...] (once per step)"
                          : "dW{U_X} → dW[D_X, ...] (every micro-batch)");
    if (p->data.n > 1 && (p->zero == 1 || p->zero == 2))
        call(p, PLAN_UPDATE_GATHER, PLAN_UPDATE, path, per / p->data.n, nl,
             "W[D_X, ...] → W[D, ...] after the update"); /* (a column-sharded block's: zero.c) */
    if (p->dcn.axes.n && p->zero == 0) { /* --dcn: the whole gradient, once per step (zero.c) */
        const int64_t cs = p->dcn_n / p->data.n;
        call(p, PLAN_DCN_SCATTER, PLAN_STEP, PLAN_BLOCKING, cs, 1,
             "dG{U_X} → dG[_X] (whole gradient, ICI)");
        call(p, PLAN_DCN_REDUCE, PLAN_STEP, PLAN_BLOCKING, cs, 1,
             "dG[_X]{U_DCN} → dG[_X] (1/|ICI| over DCN)");
        call(p, PLAN_DCN_GATHER, PLAN_STEP, PLAN_BLOCKING, cs, 1, "dG[_X] → dG (ICI)");
    } else if (p->dcn.axes.n) {
        call(p, PLAN_DCN_SHARDS, PLAN_STEP, PLAN_BLOCKING, p->shard_total + p->moe_shard_total, 1,
             "dW[D_X, ...]{U_DCN} → dW[D_X, ...] (DCN)");
    }
}

/* ZeRO-3's gathers of a layer's weights in a pass: one kind, or with bf16 gathers the matrices'
 * (PLAN_Z3_GATHER_BF16) and the norm gains' (fp32). */
static void z3_gathers(plan *p, plan_pass pass, plan_path path, const char *what) {
    const int nwb = p->weight_buckets;
    /* with experts a MoE block gathers no dense MLP: those three only on the dense blocks; in
     * buckets (or bf16) a layer's mean */
    const int64_t mlp = plan_geo_block(&p->g[P_W_GATE]) + plan_geo_block(&p->g[P_W_UP]) +
                        plan_geo_block(&p->g[P_W_DOWN]);
    const int64_t le = p->layer_elems - (p->s.moe.E > 0 ? p->moe_n * mlp / (p->l1 - p->l0) : 0);
    if (!plan_z3_bf16(p) && p->s.moe.E > 0 && nwb == p->n_layer_params) {
        const int na = nwb - 3;
        char dense[64];
        (void)what;
        call(p, PLAN_Z3_GATHER, pass, path, (p->layer_elems - mlp) / p->data.n / na, na,
             pass == PLAN_BWD ? "attention, norms W[D_X, ...] (unless resident)"
                              : "attention, norms W[D_X, ...] → W[D, ...]");
        if (p->mlp_n == 0) return;
        snprintf(dense, sizeof dense, "the dense MLPs' W[D_X, F] (%lld of %lld blocks)",
                 (long long)p->mlp_n, (long long)(p->l1 - p->l0));
        call(p, PLAN_Z3_GATHER, pass, path, mlp / p->data.n / 3, 3, dense);
        p->call[p->ncall - 1].layers = p->mlp_n;
        return;
    }
    if (!plan_z3_bf16(p)) {
        call(p, PLAN_Z3_GATHER, pass, path, le / p->data.n / nwb, nwb, what);
        return;
    }
    const int64_t norms = plan_geo_block(&p->g[P_ATTN_NORM]) + plan_geo_block(&p->g[P_MLP_NORM]);
    const int nm = nwb; /* the matrices' gathers: one each, or one a bucket */
    (void)what;
    call(p, PLAN_Z3_GATHER_BF16, pass, path, (le - norms) / p->data.n / nm, nm,
         pass == PLAN_BWD ? "bf16 W[D_X, ...] → W[D, ...] (not kept)"
         : p->bucket_cap  ? "bf16 W[D_X, ...] → W[D, ...] (matrices, bucketed)"
                          : "bf16 W[D_X, ...] → W[D, ...] (matrices)");
    call(p, PLAN_Z3_GATHER, pass, path, norms / p->data.n / 2, 2, "the norm gains (fp32)");
}

/* A MoE block's AllToAlls over the expert axis, blocks of blk (Lm of the stage's L blocks MoE).
 * --overlap (model_moe.c): behind the shared experts both ways, else only the
 * backward's return, behind the router's backward. bf16 compute: the dispatch each way in bf16
 * (plan_ep_dispatch), the return in the wire format in force, listed apart. */
static void calls_a2a(plan *p, int64_t blk, int64_t Lm, int64_t L) {
    const int ov = p->overlap, sh = p->s.moe.shared > 0;
    const plan_path pf = ov && sh ? PLAN_ASYNC : PLAN_CRITICAL, pr = ov ? PLAN_ASYNC : PLAN_CRITICAL;
    const plan_coll to = plan_ep_dispatch(p), back = PLAN_EP_ALL_TO_ALL;
    char what[64];
    if (to == back) {
        snprintf(what, sizeof what, "X[B·k, D] → its experts' ranks, back (%lld of %lld)",
                 (long long)Lm, (long long)L);
        call(p, to, PLAN_FWD, pf, blk, 2, what);
    } else {
        snprintf(what, sizeof what, "X[B·k, D] (bf16) → its experts' ranks (%lld of %lld)",
                 (long long)Lm, (long long)L);
        call(p, to, PLAN_FWD, pf, blk, 1, what);
        call(p, back, PLAN_FWD, pf, blk, 1, "Y[B·k, D] back");
    }
    if (to == back && pf == pr) {
        call(p, to, PLAN_BWD, pr, blk, 2, "dY[B·k, D] → the experts, dX back");
        return;
    }
    call(p, to, PLAN_BWD, pf, blk, 1,
         to == back ? "dY[B·k, D] → the experts" : "dY[B·k, D] (bf16) → the experts");
    call(p, back, PLAN_BWD, pr, blk, 1, "dX[B·k, D] back");
}

/* A MoE block's: the dispatch and return of its tokens each way (with their counts first), the
 * routed experts' ZeRO-3 gathers and ZeRO-2/3 reductions over the data axes without Z (the
 * router's and shared experts': calls_moe_data). Each row made by the MoE blocks alone. */
static void calls_expert(plan *p) {
    const int64_t Lm = p->moe_n, L = p->l1 - p->l0, E = p->s.moe.E; /* the stage's */
    const int first = p->ncall;
    const plan_moe_geo g = plan_moe_geo_of(p, P_EXP_GATE);
    const int64_t ew = plan_moe_block(&g) / g.n; /* one routed weight's shard, per rank */
    const int fsdp = p->zero == 3 && g.n > 1;
    if (fsdp)
        call(p, PLAN_EP_GATHER, PLAN_FWD, PLAN_BLOCKING, ew, 3, "W[E_Z, D_X, F] → W[E_Z, D, F]");
    if (p->expert.n > 1) {
        const int64_t blk = p->rows * p->s.moe.k * p->s.D / p->expert.n;
        call(p, PLAN_EP_COUNTS, PLAN_FWD, PLAN_BLOCKING, 2 * E, 1, "the rows per (rank, expert)");
        calls_a2a(p, blk, Lm, L);
    }
    if (p->tensor.n > 1)
        call(p, PLAN_EP_TP_SUM, PLAN_BWD, PLAN_BLOCKING, p->rows * p->s.moe.k, 1,
             "dw[B, k]{U_Y} → dw (the routing weights)");
    if (fsdp)
        call(p, PLAN_EP_GATHER, PLAN_BWD, PLAN_BLOCKING, ew, 3, "W[E_Z, D_X, F] (unless resident)");
    if (p->zero >= 2 && g.n > 1)
        call(p, PLAN_EP_REDUCE, PLAN_BWD, PLAN_BLOCKING, ew, 3, "dW{U_X} → dW[E_Z, D_X, F]");
    for (int i = first; i < p->ncall; i++) p->call[i].layers = Lm;
    if (p->erep.n == 1) return; /* the step's: no copies of a routed expert to reduce with */
    if (p->zero == 0)
        call(p, PLAN_EP_DP_REDUCE, PLAN_STEP, PLAN_BLOCKING, Lm * plan_moe_block(&g), 3,
             "dW[Lm, E_Z, D, F]{U_X} → dW (once per step)");
    if (p->zero == 1)
        call(p, PLAN_EP_REDUCE, PLAN_STEP, PLAN_BLOCKING, ew, (int)(3 * Lm),
             "dW{U_X} → dW[E_Z, D_X, F] (once per step)");
    if (p->zero == 1 || p->zero == 2)
        call(p, PLAN_EP_GATHER, PLAN_UPDATE, PLAN_BLOCKING, ew, (int)(3 * Lm),
             "W[E_Z, D_X, F] → W[E_Z, D, F] after the update");
}

/* The router's and the shared experts' weights over the data axes, as the dense weights go: the
 * same kinds of call as the routed experts' (their own, PLAN_MOE_*), for each MoE block. */
static void calls_moe_data(plan *p) {
    const int64_t Lm = p->moe_n, nX = p->data.n;
    const plan_moe_geo r = plan_moe_geo_of(p, P_ROUTER), sg = plan_moe_geo_of(p, P_SHR_GATE);
    const int ns = plan_moe_block(&sg) > 0 ? 3 : 0, n = 1 + ns; /* (no shared: the router) */
    const int64_t per = (plan_moe_block(&r) + ns * plan_moe_block(&sg)) / n; /* a block's mean */
    if (nX == 1 || Lm == 0) return;
    const int first = p->ncall;
    if (p->zero == 3) {
        call(p, PLAN_MOE_GATHER, PLAN_FWD, PLAN_BLOCKING, per / nX, n,
             "router, shared W[D_X, ...] → W[D, ...]");
        call(p, PLAN_MOE_GATHER, PLAN_BWD, PLAN_BLOCKING, per / nX, n,
             "router, shared W[D_X, ...] (unless resident)");
    }
    if (p->zero >= 2)
        call(p, PLAN_MOE_REDUCE, PLAN_BWD, PLAN_BLOCKING, per / nX, n,
             "router, shared dW{U_X} → dW[D_X, ...]");
    for (int i = first; i < p->ncall; i++) p->call[i].layers = Lm;
    if (p->zero == 0) /* (--dcn: over the pod's axes, then PLAN_DCN_REDUCE) */
        call(p, PLAN_MOE_DP_REDUCE, PLAN_STEP, PLAN_BLOCKING, Lm * per, n,
             "router, shared dW[Lm, ...]{U_X} → dW (once per step)");
    if (p->zero == 1)
        call(p, PLAN_MOE_REDUCE, PLAN_STEP, PLAN_BLOCKING, per / nX, (int)(n * Lm),
             "router, shared dW{U_X} → dW[D_X, ...] (once per step)");
    if (p->zero == 1 || p->zero == 2)
        call(p, PLAN_MOE_GATHER, PLAN_UPDATE, PLAN_BLOCKING, per / nX, (int)(n * Lm),
             "router, shared W[D_X, ...] → W[D, ...] after the update");
}

/* A bucket being filled in plan_data_reduce_calls: its elements (per rank) and blocks, and the
 * reductions made so far. */
typedef struct {
    int64_t fill, calls;
    int segs;
} bucket_sim;

/* One block of n (TP-local) elements reduced over the data axes: alone, or into the bucket. */
static void sim_block(const plan *p, bucket_sim *b, int64_t n, int bucketed) {
    const int64_t per = p->zero ? n / p->data.n : n;
    const int64_t region = p->zero ? p->bucket_cap / p->data.n : p->bucket_cap;
    if (!bucketed || p->bucket_cap == 0 || per > region) {
        b->calls++;
        return;
    }
    if (b->fill + per > region || b->segs == PLAN_BUCKET_SEGS) {
        b->calls += b->fill > 0;
        b->fill = 0, b->segs = 0;
    }
    b->fill += per, b->segs++;
}

/* The blocks of one micro-batch's backward, as zero.c reduces them. */
static void sim_backward(const plan *p, bucket_sim *b) {
    const int last = p->pipe.index == p->pipe.n - 1, first = p->pipe.index == 0;
    const int bucketed_ends = p->zero <= 1; /* ZeRO-2/3 reduce those alone */
    if (last) {
        sim_block(p, b, plan_geo_block(&p->g[P_UNEMBED]), bucketed_ends);
        sim_block(p, b, plan_geo_block(&p->g[P_FINAL_NORM]), bucketed_ends);
    }
    for (int64_t l = p->l1 - 1; l >= p->l0; l--)
        for (int part = 0; part < 2; part++)
            for (int id = P_ATTN_NORM; id <= P_W_DOWN; id++) { /* the layer parameters */
                const int mlp = id >= P_MLP_NORM;
                if (mlp != (part == 0) || plan_block_index(p, (param_id)id, l) < 0) continue;
                sim_block(p, b, plan_geo_block(&p->g[id]), 1);
            }
    if (first) sim_block(p, b, plan_geo_block(&p->g[P_EMBED]), bucketed_ends);
}

/* The blocks one part (op: SCHED_I or SCHED_W) of a split backward of chunk c hands over, as the
 * model's hooks do (model.c, model_split.c): the weights' part the head's on the last stage, then
 * the chunk's layers from its last (each the MLP's tensors, then the attention's); the input
 * part the embedding's on stage 0. */
static void sim_split_part(const plan *p, bucket_sim *b, int op, int c) {
    const int64_t stage = plan_chunk_stage(p, c), Lc = (p->l1 - p->l0) / p->chunks;
    const int64_t c0 = p->l0 + c * Lc;
    const int bucketed_ends = p->zero <= 1;
    if (op == SCHED_I) {
        if (stage == 0) sim_block(p, b, plan_geo_block(&p->g[P_EMBED]), bucketed_ends);
        return;
    }
    if (stage == p->pipe.n * p->chunks - 1) {
        sim_block(p, b, plan_geo_block(&p->g[P_UNEMBED]), bucketed_ends);
        sim_block(p, b, plan_geo_block(&p->g[P_FINAL_NORM]), bucketed_ends);
    }
    for (int64_t l = c0 + Lc - 1; l >= c0; l--)
        for (int part = 0; part < 2; part++)
            for (int id = P_ATTN_NORM; id <= P_W_DOWN; id++) {
                const int mlp = id >= P_MLP_NORM;
                if (mlp != (part == 0) || plan_block_index(p, (param_id)id, l) < 0) continue;
                sim_block(p, b, plan_geo_block(&p->g[id]), 1);
            }
}

/* A split backward (zb-h1, zb-v): the parts in this rank's order of actions, each chunk's I (or
 * whole B) and W counting their own micro-batches (exec.c), below ZeRO-2 the last one's alone.
 * The input part hands over the embedding before the weights' part of the same micro-batch its
 * layers: below ZeRO-2 the embedding then opens the bucket. */
static void sim_split(const plan *p, bucket_sim *b) {
    sched_action *a = malloc((size_t)plan_actions_max(p) * sizeof *a);
    CHECK(a != NULL, "plan: out of memory");
    const int64_t n = plan_actions(p, 1, a);
    int64_t done[2][64] = {{0}};
    for (int64_t i = 0; i < n; i++) {
        const int op = a[i].op, c = (int)(a[i].stage / p->pipe.n), w = op == SCHED_W;
        if (op != SCHED_B && op != SCHED_I && op != SCHED_W) continue;
        if (done[w][c]++ != p->n_micro - 1 && p->zero <= 1) continue;
        if (op != SCHED_I) sim_split_part(p, b, SCHED_W, c); /* (a whole B: both, in order) */
        if (op != SCHED_W) sim_split_part(p, b, SCHED_I, c);
    }
    free(a);
}

int64_t plan_data_reduce_calls(const plan *p) {
    if (p->data.n == 1 || (p->zero == 0 && p->dcn.axes.n)) return 0;
    bucket_sim b = {0, 0, 0};
    if (p->split)
        sim_split(p, &b);
    else
        for (int64_t j = p->zero >= 2 ? 0 : p->n_micro - 1; j < p->n_micro; j++)
            sim_backward(p, &b);
    return b.calls + (b.fill > 0);
}

int64_t plan_step_calls(const plan *p, plan_coll k) {
    if (k == PLAN_DP_REDUCE || k == PLAN_ZERO_REDUCE)
        return (k == PLAN_ZERO_REDUCE) == (p->zero > 0) ? plan_data_reduce_calls(p) : 0;
    int64_t n = 0;
    for (int i = 0; i < p->ncall; i++) {
        const plan_call *c = &p->call[i];
        if (c->kind != k) continue;
        const int once = c->pass == PLAN_STEP || c->pass == PLAN_UPDATE;
        n += c->times * (once ? 1 : c->layers * p->n_micro);
    }
    return n;
}

/* The context axis's collectives per layer and micro-batch. */
static void calls_cp(plan *p) {
    if (p->cp.n == 1) return;
    if (p->s.moe.E > 0 && p->moe_n > 0) { /* (MoE blocks only) */
        call(p, PLAN_CP_MOE_STATS, PLAN_FWD, PLAN_BLOCKING, plan_cp_moe_floats(p), 1,
             "router f, P[B, 2E] of the pieces → the sequences'");
        p->call[p->ncall - 1].layers = p->moe_n;
    }
    const int64_t R = p->rows, KH = p->loc.Kl * p->s.H, NH = p->loc.Nl * p->s.H;
    const int C = (int)p->cp.n;
    const int b16 = plan_cp_blk_bf16(p); /* K, V in bf16: 2·R·KH elements, R·KH 4-byte units */
    const plan_coll gather = b16 ? PLAN_CP_GATHER_KV_BF16 : PLAN_CP_GATHER_KV;
    const plan_coll hop = b16 ? PLAN_CP_HOP_BF16 : PLAN_CP_HOP;
    if (p->cp_alg == CONFIG_CP_ALLGATHER) {
        call(p, gather, PLAN_FWD, PLAN_CRITICAL, 2 * R * KH, 1,
             b16 ? "K, V[B, T_C, K_Y·H] (bf16) → [B, T, K_Y·H]"
                 : "K, V[B, T_C, K_Y·H] → [B, T, K_Y·H]");
        call(p, gather, PLAN_BWD, PLAN_CRITICAL, 2 * R * KH, 1,
             b16 ? "K, V[B, T_C, K_Y·H] (bf16) → [B, T, K_Y·H] again"
                 : "K, V[B, T_C, K_Y·H] → [B, T, K_Y·H] again");
        call(p, PLAN_CP_SCATTER_DKV, PLAN_BWD, PLAN_CRITICAL, 2 * R * KH, 1,
             "dK, dV[B, T, K_Y·H]{U_C} → [B, T_C, K_Y·H]");
    } else if (p->cp_alg == CONFIG_CP_RING) {
        call(p, hop, PLAN_FWD, PLAN_HIDDEN, (2 - b16) * R * KH, C - 1,
             b16 ? "K, V[B, T_C, K_Y·H] (bf16) round the ring" : "K, V[B, T_C, K_Y·H] round the ring");
        call(p, hop, PLAN_BWD, PLAN_HIDDEN, (2 - b16) * R * KH, C - 1,
             b16 ? "K, V[B, T_C, K_Y·H] (bf16) round the ring again"
                 : "K, V[B, T_C, K_Y·H] round the ring again");
        if (p->overlap) { /* behind the next block's rows' half (cp.c) */
            call(p, PLAN_CP_HOP, PLAN_BWD, PLAN_ASYNC, 2 * R * KH, C - 1,
                 "dK, dV[B, T_C, K_Y·H] on, behind dQ");
            call(p, PLAN_CP_HOP, PLAN_BWD, PLAN_CRITICAL, 2 * R * KH, 1,
                 "dK, dV[B, T_C, K_Y·H] home");
        } else {
            call(p, PLAN_CP_HOP, PLAN_BWD, PLAN_CRITICAL, 2 * R * KH, C,
                 "dK, dV[B, T_C, K_Y·H] after their block, then home");
        }
    } else {
        const int64_t KHC = C * plan_cp_uly_kv(p) * p->s.H; /* KH, or replicated to |C| */
        const int64_t w = R * (NH + 2 * KHC) / C, o = R * NH / C; /* per block */
        const int ub = plan_cp_uly_bf16(p); /* then Q, K, V, O, dO in bf16 pairs */
        const plan_coll a2a = ub ? PLAN_CP_ALL_TO_ALL_BF16 : PLAN_CP_ALL_TO_ALL;
        const int64_t wb = ub ? (w + 1) / 2 : w, ob = ub ? (o + 1) / 2 : o;
        call(p, a2a, PLAN_FWD, PLAN_CRITICAL, wb, 1,
             ub ? "Q, K, V[B, T_C, heads] (bf16) → [B, T, heads_C]"
                : "Q, K, V[B, T_C, heads] → [B, T, heads_C]");
        call(p, a2a, PLAN_FWD, PLAN_CRITICAL, ob, 1,
             ub ? "O[B, T, N_YC·H] (bf16) → [B, T_C, N_Y·H]" : "O[B, T, N_YC·H] → [B, T_C, N_Y·H]");
        call(p, a2a, PLAN_BWD, PLAN_CRITICAL, ob, 1,
             ub ? "dO[B, T_C, N_Y·H] (bf16) → [B, T, N_YC·H]"
                : "dO[B, T_C, N_Y·H] → [B, T, N_YC·H]");
        call(p, PLAN_CP_ALL_TO_ALL, PLAN_BWD, PLAN_CRITICAL, w, 1,
             "dQ, dK, dV[B, T, heads_C] → [B, T_C, heads]");
    }
}

/* The context axis's collectives, then one layer's in the order a step meets them, then the
 * step's. */
void plan_list_calls(plan *p) {
    calls_cp(p);
    const int nwb = p->weight_buckets;
    char what[64];
    snprintf(what, sizeof what, "W[D_X, ...] → W[D, ...] (%d layer weights%s)", p->n_layer_params,
             nwb < p->n_layer_params ? ", bucketed" : "");
    const plan_path gather = p->overlap ? PLAN_PREFETCHED : PLAN_BLOCKING;
    if (p->zero == 3) z3_gathers(p, PLAN_FWD, gather, what);
    if (p->tensor.n > 1) calls_tensor(p);
    if (p->s.moe.E > 0) calls_expert(p), calls_moe_data(p);
    if (p->zero == 3) z3_gathers(p, PLAN_BWD, gather, "W[D_X, ...] → W[D, ...] (unless resident)");
    if (p->pipe.n > 1) {
        /* one of each per chunk of the rank (interleaved: the chunks' stages) */
        call(p, PLAN_PIPE_SEND, PLAN_STAGE, PLAN_CRITICAL, p->rows * p->s.D, p->chunks,
             "send In[b, D] to the next stage (per micro-batch)");
        call(p, PLAN_PIPE_SEND, PLAN_STAGE, PLAN_CRITICAL, p->rows * p->s.D, p->chunks,
             "send dIn[b, D] to the previous stage");
    }
    calls_data(p);
}
