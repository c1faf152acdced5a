/* calc_cp: context parallelism priced for training and serving (see calc_cp.h). */
#include "calc/calc_cp.h"
#include "mesh/names.h"

#include <math.h>
#include <string.h>

#include "mesh/errmsg.h"

static const char *const alg_names[CALC_CP_N_ALGS] = {"allgather", "ring", "ulysses"};

const char *calc_cp_alg_name(calc_cp_alg a) {
    return names_of(alg_names, CALC_CP_N_ALGS, a);
}

int calc_cp_alg_parse(const char *s) {
    return names_find(alg_names, CALC_CP_N_ALGS, s);
}

/* `op` over the CP axis alone, moving the book's V. */
static double cp_coll(const calc_spec *s, int axis, cost_op op, double V) {
    const int sizes[1] = {s->sizes[axis]}, wraps[1] = {s->wraps[axis]};
    const mesh_alg alg = op == COST_OP_PPERMUTE ? MESH_ALG_DEFAULT : s->alg;
    return cost_collective(op, &s->link, sizes, wraps, 1, alg, V, NULL);
}

/* `op` over the tensor axes, and the CP axis too when axis ≥ 0 (0 when they hold one chip). */
static double tensor_coll(const calc_spec *s, int axis, cost_op op, double V) {
    int sizes[COST_MAX_AXES + 1], wraps[COST_MAX_AXES + 1], strides[COST_MAX_AXES + 1], n;
    calc_role_axes(s, CALC_ROLE_TENSOR, sizes, wraps, strides, &n);
    if (axis >= 0) sizes[n] = s->sizes[axis], wraps[n] = s->wraps[axis], strides[n++] = 1;
    return cost_collective_strided(op, &s->link, sizes, wraps, strides, n, s->alg, V, NULL);
}

/* What the three algorithms see: per chip S_c sequences of T_l = T/C tokens at `a` bytes per
 * element, N_Y query and K_Y kv heads of H; attention runs at `rate` FLOP/s. */
typedef struct {
    double C, S_c, T, T_l, N_Y, K_Y, H, a, g, rate; /* g: a gradient's bytes on the wire */
    int contig; /* the contiguous split (2C does not divide T; allgather and ring) */
} cp_dims;

/* Why `alg` cannot split these dims ("" if it can); K_e: the kv heads ulysses moves. */
static void refusal(const cp_dims *d, calc_cp_alg alg, double *K_e, char *why, size_t len) {
    const long long C = (long long)d->C, T = (long long)d->T, N = (long long)d->N_Y;
    const long long K = (long long)d->K_Y;
    why[0] = '\0';
    *K_e = d->C * calc_cp_kv_heads(d->K_Y, d->C);
    if (T % C)
        snprintf(why, len, "T = %lld is not divisible by |cp| = %lld", T, C);
    else if (alg == CALC_CP_ULYSSES && N % C)
        snprintf(why, len, "%lld query heads per tensor rank are not divisible by |cp| = %lld", N,
                 C);
    else if (alg == CALC_CP_ULYSSES && K % C && C % K)
        snprintf(why, len,
                 "%lld kv heads per tensor rank: neither divides nor is divided by |cp| = %lld", K,
                 C);
}

/* One algorithm's collectives, times and buffers on one layer (calc_cp.h's formulas). */
static void alg_row(const calc_spec *s, int axis, const cp_dims *d, calc_cp_alg alg,
                    calc_cp_row *w) {
    const double C = d->C, kv = 2 * d->S_c * d->T_l * d->K_Y * d->H * d->a;
    const double dkv = kv / d->a * d->g; /* dK, dV at the gradients' bytes */
    double K_e;
    memset(w, 0, sizeof *w);
    refusal(d, alg, &K_e, w->why, sizeof w->why);
    w->ok = w->why[0] == '\0';
    /* the contiguous split: chip C−1's queries see every earlier chip's block whole, (2C−1)
     * half blocks a layer against the balanced C (ulysses attends whole sequences: none) */
    const double t_blk = 2 * d->S_c * d->T_l * d->T_l * d->N_Y * d->H / d->rate;
    const int contig = d->contig && alg != CALC_CP_ULYSSES;
    if (contig) w->imbalance_fwd = (C - 1) * t_blk, w->imbalance_bwd = 2 * (C - 1) * t_blk;
    if (alg == CALC_CP_ALLGATHER) {
        const double ag = cp_coll(s, axis, COST_OP_ALL_GATHER, C * kv);
        const double rs = cp_coll(s, axis, COST_OP_REDUCE_SCATTER, C * dkv);
        w->op_fwd[0] = w->op_bwd[0] = COST_OP_ALL_GATHER, w->op_bwd[1] = COST_OP_REDUCE_SCATTER;
        w->v_fwd[0] = w->v_bwd[0] = C * kv, w->v_bwd[1] = C * dkv;
        w->calls_fwd[0] = w->calls_bwd[0] = w->calls_bwd[1] = 1;
        w->sent_fwd = (C - 1) * kv, w->sent_bwd = (C - 1) * (kv + dkv);
        w->t_fwd = w->exposed_fwd = ag, w->t_bwd = w->exposed_bwd = ag + rs;
        w->mem = C * (kv + dkv); /* the gathered K, V and, backward, the whole dK, dV */
    } else if (alg == CALC_CP_RING) {
        const double x1 = cp_coll(s, axis, COST_OP_PPERMUTE, kv);
        const double x2 = cp_coll(s, axis, COST_OP_PPERMUTE, kv + dkv);
        const double xd = cp_coll(s, axis, COST_OP_PPERMUTE, dkv);
        w->op_fwd[0] = w->op_bwd[0] = w->op_bwd[1] = COST_OP_PPERMUTE;
        w->v_fwd[0] = kv, w->v_bwd[0] = kv + dkv, w->v_bwd[1] = dkv;
        w->calls_fwd[0] = w->calls_bwd[0] = (int)C - 1, w->calls_bwd[1] = 1;
        w->sent_fwd = (C - 1) * kv, w->sent_bwd = (C - 1) * kv + C * dkv;
        w->t_fwd = (C - 1) * x1, w->t_bwd = (C - 1) * x2 + xd;
        const double f = contig ? 2 : 1; /* the busiest chip's step: a whole block */
        w->exposed_fwd = (C - 1) * fmax(0, x1 - f * t_blk);
        /* a backward step's link carries K, V and dK, dV (x2) behind its 2·f·t_blk (the book's
         * backward, 4 products to the forward's 2, as calc_compute prices every step); the
         * dK, dV must also arrive within the next block's rows' half, as meshtrain's --overlap
         * schedules them: priced f·t_blk, the book's dP and dQ (2 of its 4), consistent with
         * that step. meshtrain's rows' half is 3 of its 5 products (it recomputes the scores,
         * which the book does not count), so at the book's rates its window is 1.5·f·t_blk and
         * this term is conservative for it. */
        w->exposed_bwd = (C - 1) * fmax(0, fmax(x2 - 2 * f * t_blk, xd - f * t_blk)) + xd;
        w->mem = 2 * (kv + dkv); /* K, V in hand and arriving; backward dK, dV too */
        /* meshtrain's kernels hold a block's scores whole: with the backward in halves every
         * sequence's and head's P and dS of one micro-batch's block are kept between them (at
         * a, the bf16 kernels' small per-row terms left out). Counted where the activations are
         * meshtrain's (they hold its probabilities [b, N_Y·T] too); the book's policies assume
         * a fused kernel, whose keys' half recomputes P, dS tile by tile. */
        if (s->remat == CALC_REMAT_MESHTRAIN)
            w->mem += 2 * d->S_c / fmax(1, s->microbatches) * d->N_Y * d->T_l * d->T_l * d->a;
    } else { /* forward Q, K, V and O at a, backward dO at a (rounded before use) and dQ, dK,
              * dV at g */
        const double in_qkv = d->S_c * d->T_l * (d->N_Y + 2 * K_e) * d->H * d->a;
        const double in_o = d->S_c * d->T_l * d->N_Y * d->H * d->a, r = d->g / d->a;
        w->t_fwd = w->exposed_fwd = cp_coll(s, axis, COST_OP_ALL_TO_ALL, C * in_qkv) +
                                    cp_coll(s, axis, COST_OP_ALL_TO_ALL, C * in_o);
        w->t_bwd = w->exposed_bwd = cp_coll(s, axis, COST_OP_ALL_TO_ALL, C * in_o) +
                                    cp_coll(s, axis, COST_OP_ALL_TO_ALL, r * C * in_qkv);
        w->op_fwd[0] = w->op_fwd[1] = w->op_bwd[0] = w->op_bwd[1] = COST_OP_ALL_TO_ALL;
        w->v_fwd[0] = C * in_qkv, w->v_fwd[1] = C * in_o;
        w->v_bwd[0] = C * in_o, w->v_bwd[1] = r * C * in_qkv;
        w->calls_fwd[0] = w->calls_fwd[1] = w->calls_bwd[0] = w->calls_bwd[1] = 1;
        w->sent_fwd = (C - 1) / C * (in_qkv + in_o);
        w->sent_bwd = (C - 1) / C * (in_o + r * in_qkv);
        w->mem = in_qkv + in_o; /* the head-sharded copies */
    }
}

/* Heads per tensor rank: N/Y query heads, K/Y kv heads (1 when K < Y: replicated, as TP does). */
static void heads(const calc_spec *s, double Y, double *N_Y, double *K_Y) {
    *N_Y = (double)s->shape.N / Y;
    *K_Y = (double)s->shape.K >= Y ? (double)s->shape.K / Y : 1;
}

/* The CP axis: in the topology, of 2+ chips, whole, not tensor or pipeline. */
static int check_axis(const calc_spec *s, int axis, char *err, size_t len) {
    if (axis < 0 || axis >= s->n_axes)
        return errmsg_fail(err, len, "--cp %c: the %d-axis topology has no axis %c", 'x' + axis,
                           s->n_axes, 'x' + axis);
    if (s->sizes[axis] < 2)
        return errmsg_fail(err, len,
                           "--cp %c: axis %c has 1 chip; context parallelism needs 2 or more",
                           'x' + axis, 'x' + axis);
    if ((s->tensor_mask | s->pipe_mask) & (1 << axis))
        return errmsg_fail(
            err, len, "--cp %c: axis %c is already the %s axis; an axis takes one role", 'x' + axis,
            'x' + axis, (s->tensor_mask & (1 << axis)) ? "tensor" : "pipeline");
    return 0;
}

int calc_cp(const calc_spec *s, const calc_result *r, const calc_cp_opt *o, calc_cp_result *cr,
            char *err, size_t errlen) {
    memset(cr, 0, sizeof *cr);
    if (check_axis(s, o->axis, err, errlen) < 0) return -1;
    if (!(s->data_mask & (1 << o->axis)))
        return errmsg_fail(err, errlen, "internal: the CP axis must be among the data axes");
    const double C = s->sizes[o->axis], T = (double)s->shape.T;
    cr->C = C;
    cr->X = r->X / C;
    cr->S_c = r->tokens_per_pod / (T * cr->X);
    cr->T_l = T / C;
    heads(s, r->Y, &cr->N_Y, &cr->K_Y);
    if (cr->S_c < 1)
        return errmsg_fail(err, errlen,
                           "--cp: %.3g sequences of %.0f tokens per data shard; context "
                           "parallelism splits whole sequences: give at least %.0f sequences (one "
                           "per data shard)",
                           cr->S_c, T, cr->X * (r->pods > 1 ? r->pods : 1));
    const cp_dims d = {C,
                       cr->S_c,
                       T,
                       cr->T_l,
                       cr->N_Y,
                       cr->K_Y,
                       (double)s->shape.H,
                       s->act_bytes,
                       s->grad_bytes,
                       s->chip.flops_bf16,
                       calc_cp_contiguous(T, C)};
    for (int a = 0; a < CALC_CP_N_ALGS; a++) {
        alg_row(s, o->axis, &d, (calc_cp_alg)a, &cr->row[a]);
        calc_cp_row *w = &cr->row[a];
        w->t_step = r->t_step_max + r->layers_per_chip * (w->exposed_fwd + w->exposed_bwd +
                                                          w->imbalance_fwd + w->imbalance_bwd);
    }
    double K_e;
    char why[160];
    refusal(&d, CALC_CP_ULYSSES, &K_e, why, sizeof why);
    cr->K_e = K_e;
    cr->contig = d.contig;
    cr->kv = 2 * d.S_c * d.T_l * d.K_Y * d.H * d.a;
    cr->t_block = 2 * d.S_c * d.T_l * d.T_l * d.N_Y * d.H / d.rate;
    cr->t_xfer = cp_coll(s, o->axis, COST_OP_PPERMUTE, cr->kv);
    cr->t_xfer2 = cp_coll(s, o->axis, COST_OP_PPERMUTE, cr->kv * (1 + d.g / d.a));
    cr->T_overlap = C * (d.rate / s->link.w_oneway) * d.a * d.K_Y / d.N_Y;
    cr->T_latency = C * sqrt(s->link.hop_latency * d.rate / (2 * d.S_c * d.N_Y * d.H));
    cr->mem_acts = r->mem_acts;
    cr->mem_acts_idle = r->mem_acts * C;
    if (!cr->row[o->alg].ok)
        return errmsg_fail(err, errlen, "--cp-alg %s: %s", alg_names[o->alg], cr->row[o->alg].why);
    return 0;
}

/* ---- serving ---- */

/* Decode with the cache sharded over the sequence (calc_cp.h). */
static void decode(const calc_spec *s, int axis, calc_cp_infer_result *cr, double a) {
    const calc_infer_result *b = &cr->base;
    const double Br = cr->batch_per_replica, L = (double)s->shape.L, K = (double)s->shape.K;
    const double D = (double)s->shape.D, NH = (double)(s->shape.N * s->shape.H);
    double N_Y, K_Y;
    heads(s, cr->Y, &N_Y, &K_Y);
    cr->mem_params = b->mem_params;
    cr->mem_kv = Br * b->kv_bytes_per_seq / (fmin(cr->Y, K * Br) * cr->C);
    cr->memory_per_chip = cr->mem_params + cr->mem_kv;
    cr->fits = cr->memory_per_chip <= b->hbm;
    cr->max_batch =
        cr->mem_params < b->hbm
            ? floor((b->hbm - cr->mem_params) * cr->Y * cr->C / b->kv_bytes_per_seq) * cr->replicas
            : 0;
    cr->t_kv = cr->mem_kv / s->chip.hbm_bw;
    cr->t_params = b->t_params;
    cr->t_flops = b->t_flops;
    const double act = a * Br * D;
    double layer = 2 * (tensor_coll(s, axis, COST_OP_ALL_GATHER, act) +
                        tensor_coll(s, axis, COST_OP_REDUCE_SCATTER, act));
    if (cr->Y > K) layer += 2 * tensor_coll(s, -1, COST_OP_ALL_TO_ALL, a * Br * NH);
    cr->t_tp = L * layer + tensor_coll(s, axis, COST_OP_ALL_GATHER, a * Br * (double)s->shape.V);
    cr->t_gather_q = L * cp_coll(s, axis, COST_OP_ALL_GATHER, a * Br * N_Y * (double)s->shape.H);
    cr->t_combine =
        L * cp_coll(s, axis, COST_OP_ALL_TO_ALL, cr->C * Br * N_Y * (a * (double)s->shape.H + 8));
    cr->t_ici = cr->t_tp + cr->t_gather_q + cr->t_combine;
    cr->regime =
        calc_infer_decode_step(cr->t_kv, cr->t_flops, cr->t_params, cr->t_ici, &cr->decode_step_s);
    cr->tokens_per_s = Br * cr->replicas / cr->decode_step_s;
}

/* meshtrain's generate --kv-shard (calc_cp.h's ks): calc_infer over Y with as many sequences a
 * group as the Y·C sharding has a replica, then the cache over C and the partials' AllGather. */
static void kv_shard(const calc_spec *s, const calc_infer_opt *io, int axis,
                     calc_cp_infer_result *cr) {
    calc_infer_opt yo = *io;
    const double chips = cr->base.chips, Br = cr->batch_per_replica, C = cr->C;
    yo.batch = Br * chips / cr->Y; /* calc_infer's replicas are chips/Y: Br sequences each */
    if (calc_infer(s, &yo, &cr->ks.y, cr->ks.why, sizeof cr->ks.why) < 0) return;
    const calc_infer_result *y = &cr->ks.y;
    double N_Y, K_Y;
    heads(s, cr->Y, &N_Y, &K_Y);
    cr->ks.mem_kv = y->mem_kv * ceil(io->context / C) / io->context;
    cr->ks.memory_per_chip = y->mem_params + cr->ks.mem_kv;
    cr->ks.fits = cr->ks.memory_per_chip <= y->hbm;
    cr->ks.t_kv = cr->ks.mem_kv / s->chip.hbm_bw;
    const double q_ml = C * Br * N_Y * ((double)s->shape.H + 2) * 4; /* Q, m, l gathered */
    cr->ks.t_gather = (double)s->shape.L * cp_coll(s, axis, COST_OP_ALL_GATHER, q_ml);
    cr->ks.t_ici = y->t_ici + cr->ks.t_gather;
    cr->ks.regime = calc_infer_decode_step(cr->ks.t_kv, y->t_flops, y->t_params, cr->ks.t_ici,
                                           &cr->ks.decode_step_s);
    cr->ks.tokens_per_s = Br * cr->replicas / cr->ks.decode_step_s;
}

/* Prefill of one prompt: tensor parallel over Y, the prompt over C. */
static void prefill(const calc_spec *s, const calc_infer_opt *io, int axis,
                    calc_cp_infer_result *cr, double a) {
    const calc_infer_result *b = &cr->base;
    const double T = io->prefill, L = (double)s->shape.L, K = (double)s->shape.K;
    const double Y = cr->Y, C = cr->C;
    double N_Y, K_Y;
    heads(s, Y, &N_Y, &K_Y);
    const double kvw = L * 2 * (double)s->shape.D * K * (double)s->shape.H * io->param_bytes;
    const double w_chip = (b->param_bytes_total - kvw) / Y + kvw / fmin(Y, K);
    cr->prefill_t_math = b->prefill_t_math; /* the same FLOPs on the same Y·C chips */
    cr->prefill_mem = w_chip + T * b->kv_bytes_per_token / (fmin(Y, K) * C);
    cr->prefill_t_hbm = cr->prefill_mem / s->chip.hbm_bw;
    const double act = a * T / C * (double)s->shape.D;
    cr->prefill_t_ici = L * 2 *
                            (tensor_coll(s, -1, COST_OP_ALL_GATHER, act) +
                             tensor_coll(s, -1, COST_OP_REDUCE_SCATTER, act)) +
                        tensor_coll(s, -1, COST_OP_ALL_GATHER, a * (double)s->shape.V);
    const cp_dims d = {C,    1, T, T / C, N_Y, K_Y, (double)s->shape.H,
                       a,    a, b->C * io->prefill_mfu, calc_cp_contiguous(T, C)};
    const double base = fmax(cr->prefill_t_math, fmax(cr->prefill_t_hbm, cr->prefill_t_ici));
    for (int g = 0; g < CALC_CP_N_ALGS; g++) {
        calc_cp_row w;
        alg_row(s, axis, &d, (calc_cp_alg)g, &w);
        snprintf(cr->prefill_why[g], sizeof cr->prefill_why[g], "%s", w.why);
        cr->prefill_exposed[g] = L * (w.exposed_fwd + w.imbalance_fwd);
        cr->prefill_s[g] = base + cr->prefill_exposed[g];
    }
}

int calc_cp_infer(const calc_spec *s, const calc_infer_opt *io, const calc_cp_opt *o,
                  calc_cp_infer_result *cr, char *err, size_t errlen) {
    memset(cr, 0, sizeof *cr);
    if (check_axis(s, o->axis, err, errlen) < 0) return -1;
    int m;
    calc_spec yc = *s; /* the same chips, tensor parallel over Y·C: the baseline, and its checks */
    yc.tensor_mask |= 1 << o->axis;
    if (calc_infer(&yc, io, &cr->base, err, errlen) < 0) return -1;
    cr->Y = calc_role_degree(s, CALC_ROLE_TENSOR, &m);
    cr->C = s->sizes[o->axis];
    cr->replicas = cr->base.replicas;
    cr->batch_per_replica = cr->base.batch_per_replica;
    decode(s, o->axis, cr, cr->base.act_bytes);
    prefill(s, io, o->axis, cr, cr->base.act_bytes);
    kv_shard(s, io, o->axis, cr);
    if (cr->prefill_why[o->alg][0])
        return errmsg_fail(err, errlen, "--cp-alg %s: the prompt of %.0f tokens: %s",
                           alg_names[o->alg], io->prefill, cr->prefill_why[o->alg]);
    return 0;
}
