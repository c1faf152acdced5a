/* plan: the book's cost model of a training step for one sharding. See calc.h.
 *
 * How a step is modelled (the training chapter, generalised from the book's MLP block to the
 * meshtrain transformer: an attention block and a gated-MLP block per layer, each with the book's
 * collectives). Per chip, per layer, with b = B/X tokens per data shard:
 *   Tensor axes Y (Megatron, the training chapter), per block, critical path:
 *     fwd  AllGather_Y In[B_X,D_Y]→[B_X,D]  and  ReduceScatter_Y Out[B_X,D]{U_Y}→[B_X,D_Y]
 *     bwd  AllGather_Y dOut                  and  ReduceScatter_Y dIn{U_Y}
 *     each moving V = 2·b·D bytes (the book's 4BD per block per pass, split in AG + RS);
 *     a recomputed forward (remat) repeats its forward pair.
 *   Data axes X (the training chapter), per layer's weights W (attention 2DH(N+K), MLP 3DF, each
 * /Y): ZeRO-3 (FSDP): fwd AllGather_X W (prefetchable); bwd AllGather_X W again (prefetchable, it
 * also serves the recompute) and ReduceScatter_X dW (async); ZeRO-1/2: bwd ReduceScatter_X dW
 * (async); the updated shards are all-gathered before use in the next forward (prefetchable) — the
 * same bytes as an AllReduce, as the training chapter says; ZeRO-0 (DP): bwd AllReduce_X dW
 * (async). Pipeline axis P (not in the book: a standard GPipe model): L/P layers per chip, M
 * microbatches, a GPipe bubble (M+P−1)/M, and one ppermute of each microbatch's [b/M, D_Y] per
 * boundary each way. Times: each phase (forward, backward) of a layer costs max(T_math, ΣT_comms)
 * overlapped — the book's lower bound, with the X- and Y-axis comms summed, not overlapped with
 * each other (training chapter) — and T_math + ΣT_comms serial. The embedding/unembedding "head" is
 * a segment of its own.
 *
 * Split axes (plan.h): a role's collectives run over its own part of each physical axis — the
 * tensor block of k as an open line of k, the data part as a strided sub-axis of n/k that wraps
 * if the axis does, at W/k per link and k·T_min per step (cost_collective_strided). Because the
 * book sums the X and Y comms rather than overlapping them, the two roles never compete for the
 * links they share on a split axis within one phase. */
#include "calc/calc.h"
#include "calc/calc_cp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

/* Chips of axis i that `role` spans (its extent), whether its ring wraps, and its stride. */
static void role_axis(const calc_spec *s, calc_role role, int i, int *size, int *wrap,
                      int *stride) {
    const int split = calc_axis_split(s, i), k = s->tensor_block[i];
    *size = s->sizes[i];
    *wrap = s->wraps[i];
    *stride = 1;
    if (split && role == CALC_ROLE_TENSOR) {
        *size = k;
        *wrap = 0; /* a block of k < n chips has no wraparound link inside it */
    } else if (split && (role == CALC_ROLE_DATA || role == CALC_ROLE_EXPERT_DATA)) {
        *size = s->sizes[i] / k;
        *stride = k;
    }
}

/* The pipeline axis as FSDP (role data, ZeRO-3) or as TP (role tensor). s is one pod's spec. */
static void alternative(const calc_spec *s, calc_role role, calc_axis_choice *c) {
    calc_spec a = *s;
    char axis[8], axes[24];
    calc_axes_str(s, CALC_ROLE_PIPE, axis, sizeof axis);
    a.tokens = s->tokens * s->pods; /* calc_compute splits the global batch over the pods */
    a.pipe_mask = 0;
    a.virtual_stages = 0;
    if (role == CALC_ROLE_DATA)
        a.data_mask |= s->pipe_mask, a.zero = 3;
    else
        a.tensor_mask |= s->pipe_mask;
    calc_axes_str(&a, role, axes, sizeof axes);
    snprintf(c->label, sizeof c->label, "%s over %s (%s)", role == CALC_ROLE_DATA ? "FSDP" : "TP",
             axis, axes);
    calc_result *ra = malloc(sizeof *ra);
    c->ok = ra && calc_compute(&a, ra, c->why, sizeof c->why) == 0;
    if (!ra) snprintf(c->why, sizeof c->why, "out of memory");
    if (c->ok) c->t_step = ra->t_step_max, c->t_comm = ra->t_comm, c->mem_total = ra->mem_total;
    free(ra);
}

/* ---- building the list of collectives ---- */

typedef struct {
    const calc_spec *s;
    calc_result *r;
    char dsub[16], tsub[16]; /* "xyz/4", "z:4" (at most 3 axes of ≤ 2-digit blocks) */
    char zsub[16], esub[16]; /* the expert axis, the data axes without it */
} builder;

/* A role's subscript in the collectives' names. */
static const char *role_sub(const builder *b, calc_role role) {
    return role == CALC_ROLE_DATA          ? b->dsub
           : role == CALC_ROLE_EXPERT      ? b->zsub
           : role == CALC_ROLE_EXPERT_DATA ? b->esub
                                           : b->tsub;
}

void calc_role_axes(const calc_spec *s, calc_role role, int *sizes, int *wraps, int *strides,
                    int *n) {
    const int mask = calc_role_mask(s, role);
    *n = 0;
    for (int i = 0; i < s->n_axes; i++)
        if (mask & (1 << i)) {
            role_axis(s, role, i, &sizes[*n], &wraps[*n], &strides[*n]);
            (*n)++;
        }
}

static int add_coll(builder *b, cost_op op, calc_role role, int seg, int bwd, int count,
                    calc_path path, double bytes, const char *what) {
    calc_result *r = b->r;
    if (r->n_coll >= CALC_MAX_COLL) return -1;
    int sizes[COST_MAX_AXES], wraps[COST_MAX_AXES], strides[COST_MAX_AXES], n;
    calc_role_axes(b->s, role, sizes, wraps, strides, &n);
    calc_coll *c = &r->coll[r->n_coll++];
    memset(c, 0, sizeof *c);
    snprintf(c->what, sizeof c->what, "%s", what);
    c->op = op;
    c->axes_mask = calc_role_mask(b->s, role);
    c->role = role;
    snprintf(c->axes, sizeof c->axes, "%s", role_sub(b, role));
    c->seg = seg;
    c->bwd = bwd;
    c->count = count;
    c->path = path;
    c->bytes = bytes;
    mesh_alg alg = op == COST_OP_PPERMUTE ? MESH_ALG_DEFAULT : b->s->alg;
    if (cost_collective_strided(op, &b->s->link, sizes, wraps, strides, n, alg, bytes, &c->est) < 0)
        return -1;
    return 0;
}

/* The AllReduce across pods of the gradient shard each chip holds after the in-pod reduction,
 * `bytes` per chip, over a ring of the pods at the DCN bandwidth per chip. */
static int add_dcn_coll(builder *b, int seg, double bytes, const char *name) {
    const calc_spec *s = b->s;
    calc_result *r = b->r;
    if (r->n_coll >= CALC_MAX_COLL) return -1;
    const int sizes[1] = {s->pods}, wraps[1] = {s->pods > 2};
    const cost_link dcn = {r->dcn_bw / 2, s->link.hop_latency};
    calc_coll *c = &r->coll[r->n_coll++];
    memset(c, 0, sizeof *c);
    snprintf(c->what, sizeof c->what, "AllReduce_pods d%s shard{U_pods} (DCN)", name);
    c->op = COST_OP_ALL_REDUCE;
    c->role = CALC_ROLE_DCN;
    snprintf(c->axes, sizeof c->axes, "pods");
    c->seg = seg;
    c->bwd = 1;
    c->count = 1;
    c->path = CALC_PATH_ASYNC;
    c->bytes = bytes;
    return cost_collective(COST_OP_ALL_REDUCE, &dcn, sizes, wraps, 1, MESH_ALG_BIDIR, bytes,
                           &c->est) < 0
               ? -1
               : 0;
}

/* Weight collectives over the data axes (role DATA, or EXPERT_DATA for the routed experts: the
 * data axes without the expert axis) for weights of `w` elements per chip (already /Y), then the
 * DCN reduction of the pod's gradient shard. */
static int add_ici_weight_colls(builder *b, int seg, double w, const char *name, calc_role dm);
static int add_weight_colls(builder *b, int seg, double w, const char *name, calc_role dm) {
    if (add_ici_weight_colls(b, seg, w, name, dm) < 0) return -1;
    if (b->s->pods <= 1) return 0;
    const char *bracket = strchr(name, '[');
    char short_name[32];
    snprintf(short_name, sizeof short_name, "%.*s", (int)(bracket ? bracket - name : 31), name);
    const double X = dm == CALC_ROLE_DATA ? b->r->X : b->r->X / b->r->Z;
    return add_dcn_coll(b, seg, w * b->s->grad_bytes / X, short_name);
}

static int add_ici_weight_colls(builder *b, int seg, double w, const char *name, calc_role dm) {
    const calc_spec *s = b->s;
    const char *sub = role_sub(b, dm);
    char buf[160];
    if ((dm == CALC_ROLE_DATA ? b->r->X : b->r->X / b->r->Z) <= 1) return 0;
    if (s->zero == 3) {
        snprintf(buf, sizeof buf, "AllGather_%s %s (FSDP)", sub, name);
        if (add_coll(b, COST_OP_ALL_GATHER, dm, seg, 0, 1, CALC_PATH_PREFETCH, w * s->param_bytes,
                     buf) < 0 ||
            add_coll(b, COST_OP_ALL_GATHER, dm, seg, 1, 1, CALC_PATH_PREFETCH, w * s->param_bytes,
                     buf) < 0)
            return -1;
    } else if (s->zero >= 1) {
        snprintf(buf, sizeof buf, "AllGather_%s %s (ZeRO-%d update)", sub, name, s->zero);
        if (add_coll(b, COST_OP_ALL_GATHER, dm, seg, 0, 1, CALC_PATH_PREFETCH, w * s->param_bytes,
                     buf) < 0)
            return -1;
    }
    if (s->zero >= 1) {
        snprintf(buf, sizeof buf, "ReduceScatter_%s d%s{U_%s}", sub, name, sub);
        return add_coll(b, COST_OP_REDUCE_SCATTER, dm, seg, 1, 1, CALC_PATH_ASYNC,
                        w * s->grad_bytes, buf);
    }
    snprintf(buf, sizeof buf, "AllReduce_%s d%s{U_%s}", sub, name, sub);
    return add_coll(b, COST_OP_ALL_REDUCE, dm, seg, 1, 1, CALC_PATH_ASYNC, w * s->grad_bytes, buf);
}

/* Megatron activation collectives over the tensor axes: `blocks` blocks per segment, each with
 * its forward pair, backward pair, and `recompute` repeated forward pairs in the backward. */
static int add_tp_colls(builder *b, int seg, int blocks, int recompute, double v) {
    const calc_spec *s = b->s;
    const calc_role tm = CALC_ROLE_TENSOR;
    const int M = s->microbatches;
    const char *d = b->dsub[0] ? b->dsub : "", *t = b->tsub;
    char buf[4][128];
    if (b->r->Y <= 1) return 0;
    snprintf(buf[0], 128, "AllGather_%s In[B%s%s,D_%s]->[B%s%s,D]", t, *d ? "_" : "", d, t,
             *d ? "_" : "", d);
    snprintf(buf[1], 128, "ReduceScatter_%s Out[B%s%s,D]{U_%s}", t, *d ? "_" : "", d, t);
    snprintf(buf[2], 128, "AllGather_%s dOut[B%s%s,D_%s]", t, *d ? "_" : "", d, t);
    snprintf(buf[3], 128, "ReduceScatter_%s dIn[B%s%s,D]{U_%s}", t, *d ? "_" : "", d, t);
    if (add_coll(b, COST_OP_ALL_GATHER, tm, seg, 0, blocks * M, CALC_PATH_CRITICAL, v, buf[0]) ||
        add_coll(b, COST_OP_REDUCE_SCATTER, tm, seg, 0, blocks * M, CALC_PATH_CRITICAL, v,
                 buf[1]) ||
        add_coll(b, COST_OP_ALL_GATHER, tm, seg, 1, (blocks + recompute) * M, CALC_PATH_CRITICAL, v,
                 buf[2]) ||
        add_coll(b, COST_OP_REDUCE_SCATTER, tm, seg, 1, (blocks + recompute) * M,
                 CALC_PATH_CRITICAL, v, buf[3]))
        return -1;
    return 0;
}

/* The degree of a role (product of its extents) and the physical axes it touches (M_X, M_Y:
 * a split axis counts for both roles). Assumes valid blocks (see validate). */
int calc_role_degree(const calc_spec *s, calc_role role, int *n_phys) {
    const int mask = calc_role_mask(s, role);
    int d = 1, size, wrap, stride;
    *n_phys = 0;
    for (int i = 0; i < s->n_axes; i++)
        if ((mask & (1 << i)) && s->sizes[i] > 1) {
            role_axis(s, role, i, &size, &wrap, &stride);
            d *= size;
            (*n_phys)++;
        }
    return d;
}

/* Tensor blocks: each 0 or a divisor ≥ 2 of its axis, only on tensor axes. */
int calc_check_blocks(const calc_spec *s, char *err, size_t errlen) {
    for (int i = 0; i < COST_MAX_AXES; i++) {
        const int k = s->tensor_block[i];
        if (k == 0) continue;
        if (i >= s->n_axes || !(s->tensor_mask & (1 << i))) {
            return errmsg_fail(err, errlen,
                               "a tensor block of %d on axis %c, which is not a tensor axis", k,
                               'x' + i);
        }
        if (k < 2 || k > s->sizes[i] || s->sizes[i] % k) {
            return errmsg_fail(
                err, errlen,
                "tensor block %c:%d: the block must be a divisor >= 2 of axis %c's size %d",
                s->names[i], k, s->names[i], s->sizes[i]);
        }
    }
    return 0;
}

static int validate(const calc_spec *s, const calc_result *r, char *err, size_t errlen) {
    const model_shape *m = &s->shape;
    const int all = (1 << s->n_axes) - 1;
    int split = 0;
    for (int i = 0; i < s->n_axes; i++) split |= calc_axis_split(s, i) << i;
    if (s->n_axes < 1) return errmsg_fail(err, errlen, "no topology (give --topology or --mesh)");
    if ((s->data_mask & s->tensor_mask & ~split) || (s->data_mask & s->pipe_mask) ||
        (s->tensor_mask & s->pipe_mask))
        return errmsg_fail(err, errlen,
                           "an axis is given two roles (data, tensor, pipeline); only an axis "
                           "split into a tensor block and a strided data part (--tensor z:4) may "
                           "be both");
    if ((s->data_mask | s->tensor_mask | s->pipe_mask) & ~all)
        return errmsg_fail(err, errlen, "a sharding names an axis the %d-axis topology lacks",
                           s->n_axes);
    if (s->pipe_mask & (s->pipe_mask - 1))
        return errmsg_fail(err, errlen, "--pipeline takes one axis");
    if (m->L < 1 || m->D < 1 || m->N < 1 || m->K < 1 || m->H < 1 || m->F < 1 || m->V < 1 ||
        m->T < 1)
        return errmsg_fail(err, errlen, "the model needs every dimension (or a --model preset)");
    if (m->N % m->K)
        return errmsg_fail(err, errlen, "--heads %lld is not divisible by --kv-heads %lld",
                           (long long)m->N, (long long)m->K);
    if (s->tokens < 1) return errmsg_fail(err, errlen, "give a batch: --batch or --tokens");
    if (s->zero < 0 || s->zero > 3) return errmsg_fail(err, errlen, "--zero %d: use 0..3", s->zero);
    if (s->microbatches < 1) return errmsg_fail(err, errlen, "--microbatches must be >= 1");
    if (m->N % (long long)r->Y || m->F % (long long)r->Y)
        return errmsg_fail(err, errlen,
                           "tensor degree %lld must divide the heads and d_ff (N = %lld); pick "
                           "other --tensor axes",
                           (long long)r->Y, (long long)m->N);
    if (m->L % (long long)r->P)
        return errmsg_fail(err, errlen, "pipeline degree %lld must divide --layers %lld",
                           (long long)r->P, (long long)m->L);
    if (calc_pipe_check(s, r, err, errlen) < 0) return -1;
    if (s->tokens / r->X / s->microbatches < 1)
        return errmsg_fail(err, errlen,
                           "the batch has fewer tokens than data shards x microbatches "
                           "(%lld); the data degree is %lld",
                           (long long)(r->X * s->microbatches), (long long)r->X);
    return 0;
}

static void thresholds(const calc_spec *s, calc_result *r) {
    const double F = (double)s->shape.F, W = 2 * s->link.w_oneway;
    r->alpha = s->chip.flops_bf16 / W;
    r->hbm_intensity = s->chip.flops_bf16 / s->chip.hbm_bw;
    r->tokens_per_x = s->tokens / r->X;
    r->dp_threshold = r->alpha / (r->M_X > 0 ? r->M_X : 1);
    r->tp_limit = (r->M_Y > 0 ? r->M_Y : 1) * F / r->alpha;
    /* Without both schemes, show the book's split of a torus (3D: M_X=2, M_Y=1; 2D: 1, 1). */
    const double mx = r->M_X > 0 && r->M_Y > 0 ? r->M_X : (s->chip.dims == 3 ? 2 : 1);
    const double my = r->M_X > 0 && r->M_Y > 0 ? r->M_Y : 1;
    const double N = r->chips / r->P;
    r->x_opt = sqrt(s->tokens / F * (mx / my) * N);
    r->mixed_threshold = 4 * r->alpha * r->alpha / (mx * my * F);
    r->mixed_min_batch = N * r->mixed_threshold;
    const calc_moe *mo = &s->moe;
    if (mo->E == 0) return;
    r->tokens_per_expert = s->tokens / r->X * r->Z * (double)mo->k / (double)mo->E;
    r->expert_intensity = s->chip.flops_bf16 * s->param_bytes / (2 * s->chip.hbm_bw);
    r->moe_batch_threshold = r->expert_intensity * (double)mo->E / (double)mo->k;
}

/* A layer's attention, bytes per token as meshtrain keeps it (a < 4: bf16 compute): q, k, v, the
 * output and the probabilities [N_Y, T] per query at a; under a context axis of C = cp_n chips
 * the algorithm's instead (model_extents.cp_reads, plan_cp_saved): allgather and ring keep no
 * probabilities but their (m, l) [2, N_Y] in fp32, and the ring its output in fp32 (its
 * D = rowsum(dO ∘ O) reads it); ulysses keeps its head shards' probabilities, q and k, v,
 * [N_Y·T + N_Y·H + 2·C·K_c·H] a query (K_c = K_Y/C, or 1 when K_Y < C: replicated), in bf16 in
 * bf16 compute, which then keeps no q, k, v of its own. */
static double attn_acts(const calc_spec *s, double Y, double a) {
    const model_shape *m = &s->shape;
    const double H = (double)m->H, T = (double)m->T, N = (double)m->N / Y;
    const double K = fmax((double)m->K / Y, 1), NH = N * H, KH = K * H, C = s->cp_n;
    if (C <= 1) return a * (2 * NH + 2 * KH + N * T);
    if (s->cp_alg != CALC_CP_ULYSSES)
        return a * (NH + 2 * KH) + (s->cp_alg == CALC_CP_RING ? 4 : a) * NH + 4 * 2 * N;
    const double Kc = calc_cp_kv_heads(K, C), b16 = a < 4;
    return (b16 ? 0 : 4 * (NH + 2 * KH)) + a * NH + (b16 ? 2 : 4) * (N * T + NH + 2 * C * Kc * H);
}

double calc_meshtrain_acts(const calc_spec *s, const calc_result *r, double b, int head) {
    const model_shape *m = &s->shape;
    const double D = (double)m->D, Y = r->Y;
    const double F = (double)m->F / Y, V = (double)m->V / Y, a = s->act_bytes;
    const int moe = s->moe.E > 0; /* every block's MLP a mixture (calc_moe_meshtrain_acts) */
    const double layer = 4 * (2 * D + 2) + a * 2 * D + attn_acts(s, Y, a) +
                         (moe ? 0 : 4 * 2 * F + a * F);
    const double chunks = s->virtual_stages > 0 && r->P > 1 ? s->virtual_stages : 1;
    double per_token = (double)m->L / r->P * layer + 4 * chunks * D + 4;
    if (head) per_token += a * D + 4 * (V + 5);
    return b * per_token + (moe ? (double)m->L / r->P * calc_moe_meshtrain_acts(s, r, b) : 0);
}

static void memory(const calc_spec *s, calc_result *r) {
    const model_shape *m = &s->shape;
    const double B = s->tokens, D = (double)m->D, L = (double)m->L, F = (double)m->F;
    const double X = r->X, base = r->Y * r->P;
    double acts;
    switch (s->remat) {
    case CALC_REMAT_BLOCK:
        acts = s->act_bytes * B * D * L;
        break;
    case CALC_REMAT_FFW3:
        acts = s->act_bytes * L * B * (D + 2 * F);
        break;
    case CALC_REMAT_CKPT:
        acts = s->act_bytes * s->ckpt_n * B * D * L;
        break;
    case CALC_REMAT_MESHTRAIN: /* every micro-batch of the chip's shard (a pipeline's peak: later) */
        acts = calc_meshtrain_acts(s, r, B / X / s->microbatches, r->P == 1) * s->microbatches *
               X * r->Y * r->P;
        break;
    default:
        acts = s->act_bytes * 20 * B * D * L;
        break;
    }
    /* the routed experts are sharded over Z whatever the ZeRO stage (E_Z), and over the rest of
     * the data axes with it (D_X): over all X */
    const double Pe = r->expert_params, Pd = r->params - Pe, Z = r->Z;
    r->mem_params = Pd * s->param_bytes / base / (s->zero >= 3 ? X : 1) +
                    Pe * s->param_bytes / base / (s->zero >= 3 ? X : Z);
    r->mem_grads = Pd * s->grad_bytes / base / (s->zero >= 2 ? X : 1) +
                   Pe * s->grad_bytes / base / (s->zero >= 2 ? X : Z);
    r->mem_opt = Pd * s->opt_bytes / base / (s->zero >= 1 ? X : 1) +
                 Pe * s->opt_bytes / base / (s->zero >= 1 ? X : Z);
    r->mem_acts = acts / (X * r->Y * r->P);
    /* FSDP keeps gathered copies: two layers in flight, or the gathered unembedding [D, V_Y]. */
    const double gathered = fmax(2 * r->params_layer, D * (double)m->V) / r->Y;
    r->mem_gathered = s->zero == 3 && X > 1 ? gathered * s->param_bytes : 0;
    r->mem_total = r->mem_params + r->mem_grads + r->mem_opt + r->mem_acts + r->mem_gathered;
    r->hbm = s->chip.hbm_bytes;
    r->fits = r->mem_total <= r->hbm;
    r->mem_global = r->params * (s->param_bytes + s->opt_bytes) + acts;
    r->min_chips_memory = r->mem_global / r->hbm;
}

/* Sums the comms of each phase, then classifies every collective. */
static void phases(calc_result *r) {
    for (int i = 0; i < r->n_coll; i++) {
        calc_coll *c = &r->coll[i];
        r->phase[c->seg][c->bwd].t_comm += c->count * c->est.seconds;
    }
    for (int i = 0; i < r->n_coll; i++) {
        calc_coll *c = &r->coll[i];
        const calc_phase *p = &r->phase[c->seg][c->bwd];
        c->regime = p->t_math >= p->t_comm ? COST_REGIME_COMPUTE : c->est.regime;
    }
}

/* The routed experts' roofline per layer and chip: its E/Z experts take (B/X)·k rows in all
 * (balanced routing), 2·(B/X)·k·3·D·F_e/Y FLOPs forward, and read their 3·D·F_e/Y weights each
 * from HBM (the backward twice the FLOPs and twice the bytes: weights and gradients). Where the
 * reads take longer than the matmuls (fewer than C·param_bytes/(2·W_hbm) tokens per expert), the
 * difference adds to each phase's math time. */
static void expert_hbm_floor(const calc_spec *s, calc_result *r) {
    const calc_moe *mo = &s->moe;
    const double w = 3.0 * (double)s->shape.D * (double)calc_moe_F(&s->shape, mo) / r->Y;
    const double flops = 2 * s->tokens / r->X * (double)mo->k * w;
    const double bytes = (double)mo->E / r->Z * w * s->param_bytes;
    const double extra = fmax(0.0, bytes / s->chip.hbm_bw - flops / s->chip.flops_bf16);
    r->phase[0][0].t_math += extra;
    r->phase[0][1].t_math += 2 * extra;
    r->t_expert_hbm = 3 * extra;
}

/* Model totals and the FLOPs of each phase per chip (forward 2 per weight per token; causal
 * attention 2·T·N·H per token). Returns the blocks a backward recomputes (remat policy). */
static int flops(const calc_spec *s, calc_result *r) {
    const model_shape *m = &s->shape;
    const double B = s->tokens, D = (double)m->D, T = (double)m->T, V = (double)m->V;
    const double NH = (double)(m->N * m->H), Pa = shape_attn_params(m);
    const double b = B / r->X, Y = r->Y;
    const calc_moe *mo = &s->moe;
    /* with experts: the MLP's FLOPs are the active ones (router, k + S experts), its gathered
     * copy the chip's E/Z experts */
    const double Pm = mo->E ? calc_moe_block_active(m, mo) : shape_mlp_params(m);
    r->params = calc_params_moe(m, mo);
    r->params_active = calc_params_active(m, mo);
    r->params_layer =
        Pa +
        (mo->E ? calc_moe_block_params(m, mo) - r->expert_params / (double)m->L * (1 - 1 / r->Z)
               : Pm) +
        2 * D;
    /* the book's MFU numerator (profiling chapter), of the activated parameters with experts */
    r->flops_model = 6 * r->params_active * B;
    r->flops_attn = shape_attn_flops(m) * B;
    r->layers_per_chip = (double)m->L / r->P;
    r->bubble = 1; /* a pipeline's is simulated (calc_pipe_price) */

    const double f_proj = b / Y * 2 * Pa, f_mlp = b / Y * 2 * Pm, f_core = b / Y * 2 * T * NH;
    const double f_fwd = f_proj + f_mlp + f_core;
    double f_re = 0;
    int re_blocks = 0;
    if (s->remat == CALC_REMAT_BLOCK || s->remat == CALC_REMAT_CKPT) {
        f_re = f_fwd;
        re_blocks = 2;
    } else if (s->remat == CALC_REMAT_FFW3) {
        f_re = f_proj + f_core;
        re_blocks = 1;
    }
    r->flops_recompute = f_re * r->layers_per_chip * r->chips;
    r->phase[0][0].flops = f_fwd;
    r->phase[0][1].flops = 2 * f_fwd + f_re;
    r->phase[1][0].flops = b / Y * 2 * D * V;
    r->phase[1][1].flops = b / Y * 4 * D * V;
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 2; k++)
            r->phase[g][k].t_math = r->phase[g][k].flops / s->chip.flops_bf16;
    if (mo->E) expert_hbm_floor(s, r);
    return re_blocks;
}

/* A MoE block's collectives: the router's and shared experts' weights over the data axes as a
 * dense MLP's; the routed experts' W_in[E_Z, D_X, F_Y] over the data axes without Z; and, with
 * the batch sharded over Z, the two AllToAlls of the routed token rows each way (dispatch and
 * return), each chip's input its tokens' k rows per micro-batch, D_Y of each (the book's V: |Z|
 * times that), repeated in the backward by a remat of the whole block. */
static int expert_colls(builder *bl, int re_blocks, double tokens) {
    const calc_spec *s = bl->s;
    const calc_result *r = bl->r;
    const model_shape *m = &s->shape;
    const calc_moe *mo = &s->moe;
    const double D = (double)m->D, Y = r->Y, Fe = (double)calc_moe_F(m, mo);
    const int M = s->microbatches;
    const char *ts = bl->tsub, *dx = r->X > 1 ? "_" : "", *ds = r->X > 1 ? bl->dsub : "";
    char wr[80], we[80], what[160];
    snprintf(wr, sizeof wr, "W_router+shared[D%s%s,..%s%s]", dx, ds, Y > 1 ? "_" : "",
             Y > 1 ? ts : "");
    snprintf(we, sizeof we, "W_in[E%s%s,D%s%s,F%s%s]", r->Z > 1 ? "_" : "", bl->zsub,
             r->X / r->Z > 1 ? "_" : "", bl->esub, Y > 1 ? "_" : "", Y > 1 ? ts : "");
    const double shared = D * (double)mo->E + 3 * D * Fe * (double)mo->S;
    int rc = add_weight_colls(bl, 0, shared / Y, wr, CALC_ROLE_DATA);
    rc = rc ? rc
            : add_weight_colls(bl, 0, (double)mo->E / r->Z * 3 * D * Fe / Y, we,
                               CALC_ROLE_EXPERT_DATA);
    if (rc || r->Z <= 1) return rc;
    const double rows = r->Z * (double)mo->k * tokens * D / Y;
    const int bwd = M * (re_blocks == 2 ? 2 : 1);
    /* The rows go to the experts at the activations' width (the experts' products round them
     * anyway); the experts' fp32 outputs come back, and are summed into the residual, at the
     * gradients' (--comm-dtype's) width: one row each way when the two differ, else one row of
     * both (the book's two AllToAlls of the same size). */
    const int split = s->act_bytes != s->grad_bytes;
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int ret = 0; ret <= split && !rc; ret++) {
            snprintf(what, sizeof what, "AllToAll_%s X[(B_%s)k,D%s%s] %s", bl->zsub, bl->dsub,
                     Y > 1 ? "_" : "", Y > 1 ? ts : "",
                     !split ? "dispatch + return" : ret ? "return" : "dispatch");
            rc = add_coll(bl, COST_OP_ALL_TO_ALL, CALC_ROLE_EXPERT, 0, pass,
                          (pass ? bwd : M) * (split ? 1 : 2), CALC_PATH_CRITICAL,
                          rows * (ret ? s->grad_bytes : s->act_bytes), what);
        }
    return rc;
}

/* Every collective of a layer and of the head, then the pipeline's ppermutes. */
static int collectives(const calc_spec *s, calc_result *r, int re_blocks) {
    const model_shape *m = &s->shape;
    const double D = (double)m->D, V = (double)m->V, Y = r->Y;
    const double Pa = shape_attn_params(m), Pm = shape_mlp_params(m);
    const int M = s->microbatches;
    builder bl = {s, r, "", "", "", ""};
    calc_axes_str(s, CALC_ROLE_DATA, bl.dsub, sizeof bl.dsub);
    calc_axes_str(s, CALC_ROLE_TENSOR, bl.tsub, sizeof bl.tsub);
    calc_axes_str(s, CALC_ROLE_EXPERT, bl.zsub, sizeof bl.zsub);
    calc_axes_str(s, CALC_ROLE_EXPERT_DATA, bl.esub, sizeof bl.esub);
    char wa[80], wm[80], wh[80];
    const char *ts = bl.tsub, *dx = r->X > 1 ? "_" : "", *ds = r->X > 1 ? bl.dsub : "";
    snprintf(wa, sizeof wa, "W_attn[D%s%s,(N+K)H%s%s]", dx, ds, Y > 1 ? "_" : "", Y > 1 ? ts : "");
    snprintf(wm, sizeof wm, "W_mlp[D%s%s,F%s%s]", dx, ds, Y > 1 ? "_" : "", Y > 1 ? ts : "");
    snprintf(wh, sizeof wh, "W_emb+W_unemb[V%s%s,D%s%s]", Y > 1 ? "_" : "", Y > 1 ? ts : "", dx,
             ds);
    const double b = s->tokens / r->X, v_act = s->act_bytes * b / M * D;
    int rc = add_tp_colls(&bl, 0, 2, re_blocks, v_act);
    rc = rc ? rc : add_weight_colls(&bl, 0, Pa / Y, wa, CALC_ROLE_DATA);
    if (s->moe.E)
        rc = rc ? rc : expert_colls(&bl, re_blocks, b / M);
    else
        rc = rc ? rc : add_weight_colls(&bl, 0, Pm / Y, wm, CALC_ROLE_DATA);
    rc = rc ? rc : add_tp_colls(&bl, 1, 1, 0, v_act);
    rc = rc ? rc : add_weight_colls(&bl, 1, 2 * D * V / Y, wh, CALC_ROLE_DATA);
    if (rc < 0) return -1;
    phases(r);
    return 0;
}

/* Step times: each phase max(T_math, T_comms) (overlapped) or the sum (serial), layers ×
 * L/P; a pipeline's step is its simulated schedule; then MFU and tokens/s. */
static int step_times(const calc_spec *s, calc_result *r, char *err, size_t errlen) {
    double t_max = 0, t_sum = 0, t_math = 0, t_comm = 0;
    for (int g = 0; g < 2; g++) {
        const double reps = g == 0 ? r->layers_per_chip : 1;
        for (int k = 0; k < 2; k++) {
            const calc_phase *p = &r->phase[g][k];
            t_max += reps * (p->t_math > p->t_comm ? p->t_math : p->t_comm);
            t_sum += reps * (p->t_math + p->t_comm);
            t_math += reps * p->t_math;
            t_comm += reps * p->t_comm;
        }
    }
    if (r->P > 1) {
        if (calc_pipe_price(s, r, &t_max, &t_sum, err, errlen) < 0) return -1;
        alternative(s, CALC_ROLE_DATA, &r->alt[0]);
        alternative(s, CALC_ROLE_TENSOR, &r->alt[1]);
    }
    r->t_math = t_math * r->bubble;
    r->t_comm = t_comm + r->t_pipe;
    r->t_step_max = t_max;
    r->t_step_sum = t_sum;
    r->mfu = r->flops_model / (r->chips * s->chip.flops_bf16 * r->t_step_max);
    r->tokens_per_s = s->tokens / r->t_step_max;
    return 0;
}

/* Pods: the step above is one pod's at B/pods; the totals count every pod. */
static void pods(const calc_spec *s, const calc_spec *pod, calc_result *r) {
    r->pods = s->pods;
    r->chips_pod = r->chips;
    r->tokens_per_pod = pod->tokens;
    r->dcn_threshold = s->chip.flops_bf16 / r->dcn_bw;
    if (s->pods <= 1) return;
    r->chips *= s->pods;
    r->flops_model *= s->pods;
    r->flops_attn *= s->pods;
    r->flops_recompute *= s->pods;
    r->tokens_per_s *= s->pods;
}

int calc_compute(const calc_spec *s_all, calc_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    int np;
    if (s_all->pods < 1) return errmsg_fail(err, errlen, "--pods %d: at least 1", s_all->pods);
    calc_spec pod = *s_all; /* one pod, at its share of the batch */
    pod.tokens = s_all->tokens / s_all->pods;
    const calc_spec *s = &pod;
    if (calc_check_blocks(s, err, errlen) < 0) return -1;
    r->X = calc_role_degree(s, CALC_ROLE_DATA, &r->M_X);
    r->Y = calc_role_degree(s, CALC_ROLE_TENSOR, &r->M_Y);
    r->P = calc_role_degree(s, CALC_ROLE_PIPE, &np);
    r->chips = 1;
    for (int i = 0; i < s->n_axes; i++) r->chips *= s->sizes[i];
    r->dcn_bw = s->dcn_bw > 0 ? s->dcn_bw : cost_chip_dcn_bw(&s->chip);
    int nz;
    r->Z = s->moe.E ? calc_role_degree(s, CALC_ROLE_EXPERT, &nz) : 1;
    r->expert_params = s->moe.E ? (double)s->shape.L * (double)s->moe.E * 3 * (double)s->shape.D *
                                      (double)calc_moe_F(&s->shape, &s->moe)
                                : 0;
    if (validate(s, r, err, errlen) < 0 || calc_moe_validate(s, r, err, errlen) < 0) return -1;
    const int re_blocks = flops(s, r);
    if (collectives(s, r, re_blocks) < 0)
        return errmsg_fail(err, errlen, "internal: too many collectives or a bad axis set");
    memory(s, r);
    if (step_times(s, r, err, errlen) < 0) return -1;
    thresholds(s, r);
    pods(s_all, s, r);
    return 0;
}
