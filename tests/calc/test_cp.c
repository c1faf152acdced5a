/* test_cp: context parallelism in the calculator (calc/calc_cp.c) against the formulas of
 * calc_cp.h, evaluated here by hand with the book's collective costs on one wrapping axis of n
 * chips (sharding chapter): AllGather, ReduceScatter max(T_min·⌈n/2⌉, V/W); AllToAll
 * max(T_min·⌈n/2⌉, V/(4W)); a ppermute max(T_min, V/W_1) (W = 2·W_1 bidirectional).
 *
 * Training: LLaMA-3-70B on a v5p 4x4x4, tensor z (Y = 4), context parallel over y (C = 4), data
 * x (X = 4), 16 sequences: S_c = 16/4 = 4 sequences per chip, each split 4 ways.
 * Serving: LLaMA-3-70B on a v5e 4x4, tensor x (Y = 4), the KV cache over the sequence by y;
 * there the axes are open (v5e wraps only a full 16), so a collective over n chips costs the
 * book's open-axis max(T_min·(n−1), (n−1)/n·V/W_1), an AllToAll half that bandwidth term. */
#include "calc/calc_cp.h"
#include "check.h"
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static calc_spec spec(const char *chip, int a, int b, int c, int n_axes) {
    calc_spec m; /* only its shape: the preset */
    const int sizes[3] = {a, b, c};
    calc_model_preset(&m.shape, "llama3-70b");
    return test_spec(chip, sizes, n_axes, &m.shape);
}

/* The training spec: x data, y CP (among the data axes, as meshplan puts it), z tensor. */
static calc_spec train_spec(double T, double seqs) {
    calc_spec s = spec("v5p", 4, 4, 4, 3);
    s.shape.T = (long long)T;
    s.tokens = seqs * T;
    s.data_mask = 1 | 2, s.tensor_mask = 4, s.zero = 3, s.remat = CALC_REMAT_BLOCK;
    return s;
}

static int run(const calc_spec *s, calc_cp_alg alg, calc_result *r, calc_cp_result *cr, char *err,
               size_t len) {
    const calc_cp_opt o = {1, alg};
    if (calc_compute(s, r, err, len) < 0) return -1;
    return calc_cp(s, r, &o, cr, err, len);
}

static void must_run(const calc_spec *s, calc_cp_alg alg, calc_result *r, calc_cp_result *cr) {
    char err[256];
    if (run(s, alg, r, cr, err, sizeof err) < 0) {
        printf("FAIL calc_cp: %s\n", err);
        exit(1);
    }
}

static const double W1 = 9e10, W = 1.8e11, TMIN = 1e-6, CHIP = 4.59e14; /* v5p */

static double ag(double V) { /* AllGather / ReduceScatter on a wrapping ring of 4 */
    return fmax(TMIN * 2, V / W);
}
static double a2a(double V) {
    return fmax(TMIN * 2, V / (4 * W));
}
static double pp(double V) {
    return fmax(TMIN, V / W1);
}

static void test_training(void) {
    const double T = 131072, C = 4, S_c = 4, T_l = T / C, K_Y = 2, N_Y = 16, H = 128, a = 2;
    calc_spec s = train_spec(T, 16);
    calc_result r;
    calc_cp_result cr;
    must_run(&s, CALC_CP_RING, &r, &cr);
    const double kv = 2 * S_c * T_l * K_Y * H * a;
    check_near("S_c = B/(T·X): sequences per chip", cr.S_c, S_c, 1e-12);
    check_near("K_Y = K/Y = 8/4, N_Y = N/Y = 64/4: kv heads", cr.K_Y, K_Y, 0);
    check_near("KV = 2·S_c·(T/C)·K_Y·H·a bytes", cr.kv, kv, 1e-12);
    const calc_cp_row *g = &cr.row[CALC_CP_ALLGATHER], *q = &cr.row[CALC_CP_RING];
    const calc_cp_row *u = &cr.row[CALC_CP_ULYSSES];
    /* allgather */
    check_near("allgather fwd: AllGather_C K,V, V = C·KV", g->v_fwd[0], C * kv, 1e-12);
    check_near("allgather fwd time = max(T_min·2, C·KV/W)", g->t_fwd, ag(C * kv), 1e-9);
    check_near("allgather bwd: AllGather again + ReduceScatter dK,dV", g->t_bwd, 2 * ag(C * kv),
               1e-9);
    check_near("allgather sends (C-1)·KV per chip forward", g->sent_fwd, (C - 1) * kv, 1e-12);
    check_near("allgather exposes all of it (critical path)", g->exposed_bwd, g->t_bwd, 0);
    check_near("allgather buffers: gathered K,V and dK,dV, 2·C·KV", g->mem, 2 * C * kv, 1e-12);
    /* ring */
    check_true("ring fwd: C-1 ppermutes of one KV block",
               q->calls_fwd[0] == 3 && q->v_fwd[0] == kv);
    check_near("ring fwd time = (C-1)·max(T_min, KV/W_1)", q->t_fwd, (C - 1) * pp(kv), 1e-9);
    check_near("ring bwd = (C-1)·ppermute(2·KV) + ppermute(KV) home", q->t_bwd,
               (C - 1) * pp(2 * kv) + pp(kv), 1e-9);
    check_near("ring sends what allgather sends forward, (C-1)·KV", q->sent_fwd, g->sent_fwd, 0);
    check_near("ring bwd sends (2C-1)·KV", q->sent_bwd, (2 * C - 1) * kv, 1e-12);
    const double t_blk = 2 * S_c * T_l * T_l * N_Y * H / CHIP;
    check_near("a ring step attends 2·S_c·(T/C)²·N_Y·H FLOPs", cr.t_block, t_blk, 1e-12);
    check_near("at T = 131072 the step hides its transfer: fwd exposes 0", q->exposed_fwd, 0, 0);
    check_near("... bwd exposes only the last dK,dV home", q->exposed_bwd, pp(kv), 1e-9);
    check_near("ring threshold T = C·(C_chip/W_1)·a·K_Y/N_Y = 4·5100·4/16", cr.T_overlap,
               C * (CHIP / W1) * a * K_Y / N_Y, 1e-12);
    check_near("  = 5100 tokens", cr.T_overlap, 5100, 1e-12);
    check_near("latency threshold C·sqrt(T_min·C_chip/(2·S_c·N_Y·H))", cr.T_latency,
               C * sqrt(TMIN * CHIP / (2 * S_c * N_Y * H)), 1e-12);
    /* ulysses: K_Y = 2 < C = 4, so each kv head goes to C/K_Y = 2 chips: K_e = 4 */
    const double in_qkv = S_c * T_l * (N_Y + 2 * C) * H * a, in_o = S_c * T_l * N_Y * H * a;
    check_near("ulysses K_e = max(K_Y, C)", cr.K_e, C, 0);
    check_near("ulysses fwd: AllToAll Q,K,V, V = C·S_c·(T/C)·(N_Y+2K_e)·H·a", u->v_fwd[0],
               C * in_qkv, 1e-12);
    check_near("ulysses fwd time = AllToAll(QKV) + AllToAll(O)", u->t_fwd,
               a2a(C * in_qkv) + a2a(C * in_o), 1e-9);
    check_near("ulysses sends (C-1)/C of its Q,K,V and O", u->sent_fwd,
               (C - 1) / C * (in_qkv + in_o), 1e-12);
    /* the step and memory */
    check_near("step = calc_compute's + L·(exposed fwd + bwd)", q->t_step,
               r.t_step_max + 80 * (q->exposed_fwd + q->exposed_bwd), 1e-12);
    calc_spec idle = s;
    idle.data_mask = 1; /* y holds replicas instead */
    calc_result ri;
    char err[256];
    if (calc_compute(&idle, &ri, err, sizeof err) < 0) printf("FAIL idle: %s\n", err);
    check_near("activations per chip fall by C: with y idle they are C times larger", ri.mem_acts,
               C * cr.mem_acts, 1e-12);
    check_near("  (the result's own count of it)", cr.mem_acts_idle, ri.mem_acts, 1e-12);
}

/* meshtrain's wire: K, V at the activations' bytes (bf16, a = 2), their gradients dK, dV at the
 * gradients' (--grad-bytes 4: --comm-dtype fp32), whatever the activations travel in. */
static void test_grad_wire(void) {
    const double T = 131072, C = 4, S_c = 4, T_l = T / C, K_Y = 2, H = 128, a = 2;
    calc_spec s = train_spec(T, 16);
    s.grad_bytes = 4;
    calc_result r;
    calc_cp_result cr;
    must_run(&s, CALC_CP_RING, &r, &cr);
    const double kv = 2 * S_c * T_l * K_Y * H * a, dkv = 2 * kv;
    const calc_cp_row *g = &cr.row[CALC_CP_ALLGATHER], *q = &cr.row[CALC_CP_RING];
    const calc_cp_row *u = &cr.row[CALC_CP_ULYSSES];
    check_near("grad wire: ring fwd still moves K, V at a", q->v_fwd[0], kv, 0);
    check_near("grad wire: ring bwd step moves K, V at a with dK, dV at g", q->v_bwd[0], kv + dkv,
               0);
    check_near("grad wire: the last dK, dV home at g", q->v_bwd[1], dkv, 0);
    check_near("grad wire: ring bwd sends (C-1)·KV + C·dKV", q->sent_bwd, (C - 1) * kv + C * dkv,
               1e-12);
    check_near("grad wire: ring bwd time = (C-1)·ppermute(KV + dKV) + ppermute(dKV)", q->t_bwd,
               (C - 1) * pp(kv + dkv) + pp(dkv), 1e-9);
    check_near("grad wire: allgather ReduceScatter dK, dV at g, V = C·dKV", g->v_bwd[1], C * dkv,
               0);
    check_near("grad wire: allgather bwd sends (C-1)·(KV + dKV)", g->sent_bwd,
               (C - 1) * (kv + dkv), 1e-12);
    const double N_Y = 16, in_qkv = S_c * T_l * (N_Y + 2 * C) * H * a,
                 in_o = S_c * T_l * N_Y * H * a;
    check_near("grad wire: ulysses bwd sends dO at a, dQ, dK, dV at g", u->sent_bwd,
               (C - 1) / C * (in_o + 2 * in_qkv), 1e-12);
    check_near("grad wire: ulysses bwd AllToAll of dO at a", u->v_bwd[0], C * in_o, 1e-12);
    /* T = 7168: t_block = 1.41 hops of K, V, between one and two (dK, dV at g = 2a take two):
     * a backward step's three hops' worth fit in its 2·t_block within 0.19 of a hop, but its
     * dK, dV must arrive within the next block's dQ half, t_block: 0.59 of a hop exposed */
    calc_spec s2 = train_spec(7168, 16);
    s2.grad_bytes = 4;
    must_run(&s2, CALC_CP_RING, &r, &cr);
    const double k2 = cr.kv, x1 = pp(k2), tb = cr.t_block;
    const calc_cp_row *q2 = &cr.row[CALC_CP_RING];
    check_true("grad wire T = 7168: t_x < t_block < 2·t_x", x1 < tb && tb < 2 * x1);
    check_near("grad wire: ring bwd exposes (C-1)·max(0, t_x2 - 2·t_block, t_dx - t_block) + t_dx",
               q2->exposed_bwd,
               (C - 1) * fmax(0, fmax(pp(3 * k2) - 2 * tb, pp(2 * k2) - tb)) + pp(2 * k2), 1e-9);
    check_true("  the dQ half binds: more than (C-1)·max(0, t_x2 - 2·t_block) + t_dx",
               q2->exposed_bwd > (C - 1) * fmax(0, pp(3 * k2) - 2 * tb) + pp(2 * k2) + 1e-12);
}

/* g = a (K, V and dK, dV the same bytes) with a hop latency of T_min = 2v, v = KV/W_1 the
 * bandwidth term, at T = 7168 (t_block = 1.41 v): each hop of KV, 2·KV costs T_min = 2v, so a
 * backward step's x2 = 2v fits in its 2·t_block, but its dK, dV (xd = 2v) do not arrive within
 * the next block's rows' half, t_block: the rows' term binds at g = a once the latency shows
 * (2v − T_min = 0 < t_block < T_min). Then the ring's buffers: 2·(KV + dKV) = 4·KV, and with
 * --remat meshtrain (M = 2 micro-batches) also the --overlap kernels' P, dS of every sequence and
 * head of a micro-batch's block, 2·(S_c/M)·N_Y·T_l²·a. */
static void test_ring_latency_scratch(void) {
    const double T = 7168, C = 4, S_c = 4, T_l = T / C, N_Y = 16, a = 2;
    calc_spec s = train_spec(T, 16);
    calc_result r;
    calc_cp_result cr;
    must_run(&s, CALC_CP_RING, &r, &cr);
    const double kv = cr.kv, v = kv / W1, tb = cr.t_block;
    check_near("ring buffers: K, V and dK, dV in hand and arriving, 2·(KV + dKV) = 4·KV",
               cr.row[CALC_CP_RING].mem, 4 * kv, 1e-12);
    s.link.hop_latency = 2 * v;
    must_run(&s, CALC_CP_RING, &r, &cr);
    const calc_cp_row *q = &cr.row[CALC_CP_RING];
    check_true("T_min = 2v: v < t_block < 2v", v < tb && tb < 2 * v);
    check_near("g = a, T_min = 2v: ring bwd exposes (C-1)·(2v - t_block) + 2v", q->exposed_bwd,
               (C - 1) * (2 * v - tb) + 2 * v, 1e-9);
    check_true("  the rows' half binds at g = a: more than (C-1)·max(0, x2 - 2·t_block) + xd",
               q->exposed_bwd > (C - 1) * fmax(0, 2 * v - 2 * tb) + 2 * v + 1e-12);
    calc_spec m = train_spec(T, 16);
    m.remat = CALC_REMAT_MESHTRAIN, m.microbatches = 2;
    must_run(&m, CALC_CP_RING, &r, &cr);
    const double scratch = 2 * (S_c / 2) * N_Y * T_l * T_l * a; /* 411 MB */
    check_near("--remat meshtrain: ring buffers + the halves' P, dS, 2·(S_c/M)·N_Y·T_l²·a",
               cr.row[CALC_CP_RING].mem, 4 * kv + scratch, 1e-12);
    check_near("  allgather's buffers unchanged, 2·C·KV", cr.row[CALC_CP_ALLGATHER].mem, 2 * C * kv,
               1e-12);
}

/* Either side of the ring's threshold (T_overlap = 5100 here, T_latency far below). */
static void test_threshold(void) {
    const double C = 4;
    for (int i = 0; i < 3; i++) {
        const double T = (double[]){2048, 5120, 16384}[i];
        calc_spec s = train_spec(T, 16);
        calc_result r;
        calc_cp_result cr;
        char what[160];
        must_run(&s, CALC_CP_RING, &r, &cr);
        const calc_cp_row *q = &cr.row[CALC_CP_RING];
        snprintf(what, sizeof what,
                 "T = %.0f: t_step/t_transfer = T/T_overlap = %.3f (bandwidth-bound ppermute)", T,
                 T / cr.T_overlap);
        check_near(what, cr.t_block / cr.t_xfer, T / cr.T_overlap, 1e-9);
        snprintf(what, sizeof what, "T = %.0f: fwd exposes (C-1)·max(0, t_x - t_step)", T);
        check_near(what, q->exposed_fwd + 1, (C - 1) * fmax(0, cr.t_xfer - cr.t_block) + 1, 1e-12);
        snprintf(what, sizeof what, "T = %.0f %s the threshold: exposed forward %s 0", T,
                 T > cr.T_overlap ? "above" : "below", T > cr.T_overlap ? "=" : ">");
        check_true(what, (T > cr.T_overlap) == (q->exposed_fwd == 0));
    }
}

/* The contiguous split (2C = 8 does not divide T; C = 4 does): T = 4100, between T_overlap/2
 * and T_overlap, so a zigzag step (half a block) would expose its transfer and the contiguous
 * ring's whole blocks hide it, but the busiest chip attends (2C−1) half blocks where zigzag's do
 * C: it pays (C−1)·t_block forward and 2·(C−1)·t_block backward a layer more. */
static void ring_at(double T, calc_result *r, calc_cp_result *cr) {
    const calc_spec s = train_spec(T, 16);
    must_run(&s, CALC_CP_RING, r, cr);
}

static void test_contiguous(void) {
    calc_result r, rz;
    calc_cp_result cr, cz;
    ring_at(4100, &r, &cr);
    ring_at(4096, &rz, &cz);
    const double C = 4, T_l = 4100 / C; /* S_c = 4, K_Y = 2, N_Y = 16, H = 128, a = 2 */
    const double kv = 2 * 4 * T_l * 2 * 128 * 2, t_blk = 2 * 4 * T_l * T_l * 16 * 128 / CHIP;
    const calc_cp_row *g = &cr.row[CALC_CP_ALLGATHER], *q = &cr.row[CALC_CP_RING];
    const calc_cp_row *u = &cr.row[CALC_CP_ULYSSES];
    check_true("T = 4100, 2C = 8 does not divide it: the contiguous split", cr.contig == 1);
    check_near("t_block = 2·S_c·(T/C)²·N_Y·H/C_chip (half a block)", cr.t_block, t_blk, 1e-12);
    check_near("  below the transfer: t_block/t_x = T/T_overlap = 4100/5100",
               cr.t_block / cr.t_xfer, 4100.0 / 5100, 1e-9);
    check_near("ring imbalance fwd = (C-1)·t_block (chip C-1: 2C-1 half blocks, zigzag's C)",
               q->imbalance_fwd, (C - 1) * t_blk, 1e-12);
    check_near("ring imbalance bwd = 2·(C-1)·t_block", q->imbalance_bwd, 2 * (C - 1) * t_blk,
               1e-12);
    check_near("allgather: the same imbalance (chip C-1's queries see (2C-1)/C of the average)",
               g->imbalance_fwd + g->imbalance_bwd, 3 * (C - 1) * t_blk, 1e-12);
    check_near("ulysses attends whole sequences: no imbalance", u->imbalance_fwd + u->imbalance_bwd,
               0, 0);
    check_near("ring fwd exposes (C-1)·max(0, t_x - 2·t_block): whole blocks hide it",
               q->exposed_fwd, (C - 1) * fmax(0, pp(kv) - 2 * t_blk), 0);
    check_near("  = 0 at T = 4100 > T_overlap/2 = 2550", q->exposed_fwd, 0, 0);
    check_near("ring bwd exposes (C-1)·max(0, t_x2 - 4·t_block) + t_x", q->exposed_bwd,
               (C - 1) * fmax(0, pp(2 * kv) - 4 * t_blk) + pp(kv), 1e-9);
    check_near("step = calc_compute's + L·(exposed + imbalance, fwd + bwd)", q->t_step,
               r.t_step_max + 80 * (q->exposed_fwd + q->exposed_bwd + 3 * (C - 1) * t_blk), 1e-12);
    /* zigzag at T = 4096 (nearly the same work): exposes (C-1)·(t_x - t_block), less than the
     * contiguous split's imbalance (C-1)·t_block since t_block > t_x/2 here */
    check_true("zigzag T = 4096: balanced (no imbalance)",
               cz.contig == 0 && cz.row[CALC_CP_RING].imbalance_fwd == 0);
    check_true("  ... and its ring step is shorter than the contiguous split's at T = 4100",
               cz.row[CALC_CP_RING].t_step < q->t_step);
    printf("     (ring step per layer past calc_compute's: zigzag T=4096 %.4g ms, contiguous "
           "T=4100 %.4g ms)\n",
           (cz.row[CALC_CP_RING].t_step - rz.t_step_max) / 80 * 1e3,
           (q->t_step - r.t_step_max) / 80 * 1e3);
}

static void test_refusals(void) {
    calc_result r;
    calc_cp_result cr;
    char err[256];
    calc_spec s = train_spec(1002, 16);
    check_true("ring: T = 1002 is not divisible by C = 4: refused",
               run(&s, CALC_CP_RING, &r, &cr, err, sizeof err) < 0 && strstr(err, "|cp| = 4"));
    printf("     (%s)\n", err);
    s = train_spec(4096, 16);
    s.shape.N = 24; /* N_Y = 6, not divisible by C = 4 */
    check_true("ulysses: 6 query heads per tensor rank, |cp| = 4: refused",
               run(&s, CALC_CP_ULYSSES, &r, &cr, err, sizeof err) < 0 &&
                   strstr(err, "6 query heads"));
    printf("     (%s)\n", err);
    check_true("  ... while ring runs and shows ulysses refused",
               run(&s, CALC_CP_RING, &r, &cr, err, sizeof err) == 0 && !cr.row[CALC_CP_ULYSSES].ok);
    s = train_spec(4096, 2);
    check_true("2 sequences on 4 data shards: refused (CP splits whole sequences)",
               run(&s, CALC_CP_RING, &r, &cr, err, sizeof err) < 0 && strstr(err, "at least 4"));
    printf("     (%s)\n", err);
    s = train_spec(4096, 16);
    s.tensor_mask = 2, s.data_mask = 1 | 4;
    const calc_cp_opt o = {1, CALC_CP_RING};
    check_true("the tensor axis as CP axis: refused",
               calc_compute(&s, &r, err, sizeof err) == 0 &&
                   calc_cp(&s, &r, &o, &cr, err, sizeof err) < 0 && strstr(err, "one role"));
    printf("     (%s)\n", err);
}

static void test_serving(void) {
    calc_spec s = spec("v5e", 4, 4, 1, 2);
    s.tensor_mask = 1; /* x: Y = 4; y: the CP axis */
    calc_infer_opt io;
    calc_infer_defaults(&io);
    io.context = io.prefill = 131072;
    const calc_cp_opt o = {1, CALC_CP_RING};
    calc_cp_infer_result r;
    char err[256];
    if (calc_cp_infer(&s, &io, &o, &r, err, sizeof err) < 0) {
        printf("FAIL calc_cp_infer: %s\n", err);
        return;
    }
    const double kv_seq = 2 * 2 * 128.0 * 8 * 80 * 131072, L = 80, a = 2, C = 4, N_Y = 16;
    const double W1v = 4.5e10, open = 3e-6; /* v5e one way; T_min·(n − 1) */
    check_near("decode: KV per chip = B·KV_seq/(min(Y, K·B)·C) = KV_seq/16", r.mem_kv, kv_seq / 16,
               1e-12);
    check_near("  head-then-batch over Y·C = 16 chips holds KV_seq/min(16, K·B) = KV_seq/8",
               r.base.mem_kv, kv_seq / 8, 1e-12);
    check_near("decode T_kv = KV per chip / W_hbm", r.t_kv, kv_seq / 16 / 8.1e11, 1e-12);
    check_near("weights over Y·C: T_params as calc_infer's on 16 chips", r.t_params,
               r.base.t_params, 0);
    check_near("T_flops as calc_infer's", r.t_flops, r.base.t_flops, 0);
    check_near("AllGather_C Q [B, N_Y, H] per layer: L·max(3·T_min, (3/4)·a·B·N_Y·H/W_1)",
               r.t_gather_q, L * fmax(open, 0.75 * a * N_Y * 128 / W1v), 1e-9);
    check_near("AllToAll_C of the partials: L·max(3·T_min, (3/8)·C·B·N_Y·(a·H+8)/W_1)", r.t_combine,
               L * fmax(open, 0.375 * C * N_Y * (a * 128 + 8) / W1v), 1e-9);
    check_near("decode step = T_kv + max(T_flops, T_params, T_ici)", r.decode_step_s,
               r.t_kv + fmax(r.t_flops, fmax(r.t_params, r.t_ici)), 1e-12);
    check_true("sequence sharding shortens the step at batch 1 (K·B = 8 < Y·C = 16)",
               r.decode_step_s < r.base.decode_step_s);
    check_true("generate --kv-shard priced", r.ks.why[0] == 0);
    check_near("--kv-shard: KV per chip = KV_seq/min(Y, K·B)·ceil(S/C)/S = KV_seq/16", r.ks.mem_kv,
               kv_seq / 16, 1e-12);
    check_near("--kv-shard: weights over Y = 4 only, 4x the book's per chip", r.ks.y.mem_params,
               4 * r.base.mem_params, 0.02);
    check_near("--kv-shard: AllGather_C of the fp32 partials: L·max(3·T_min, (3/4)·C·B·N_Y·(H+2)·4/W_1)",
               r.ks.t_gather, L * fmax(open, 0.75 * C * N_Y * 130 * 4 / W1v), 1e-9);
    check_near("--kv-shard step = T_kv + max(T_flops, T_params, T_ici) of Y chips", r.ks.decode_step_s,
               r.ks.t_kv + fmax(r.ks.y.t_flops, fmax(r.ks.y.t_params, r.ks.t_ici)), 1e-12);
    check_true("--kv-shard is slower than the book's variant (weights read on every chip of C)",
               r.ks.decode_step_s > r.decode_step_s);
    check_near("prefill: the same FLOPs on the same 16 chips", r.prefill_t_math,
               r.base.prefill_t_math, 0);
    const double kv1 = 2 * (131072 / C) * 2 * 128 * a; /* one prompt: S_c = 1, K_Y = 2 */
    check_near("prefill allgather exposes L·AllGather_C(C·KV)",
               r.prefill_exposed[CALC_CP_ALLGATHER], L * fmax(open, 0.75 * C * kv1 / W1v), 1e-9);
    check_near("prefill ring at T = 131072 exposes nothing", r.prefill_exposed[CALC_CP_RING], 0, 0);
    io.batch = 8;
    if (calc_cp_infer(&s, &io, &o, &r, err, sizeof err) < 0) printf("FAIL: %s\n", err);
    check_near("batch 8 (K·B = 64 >= Y·C): both shardings spread the cache 16 ways", r.mem_kv,
               r.base.mem_kv, 1e-12);
    check_near("--kv-shard at batch 8: the partials' AllGather is bandwidth-bound, "
               "L·(3/4)·C·B·N_Y·(H+2)·4/W_1", r.ks.t_gather, L * 0.75 * C * 8 * N_Y * 130 * 4 / W1v,
               1e-9);
}

int main(void) {
    test_training();
    test_grad_wire();
    test_ring_latency_scratch();
    test_threshold();
    test_contiguous();
    test_refusals();
    test_serving();
    return check_report("test_cp");
}
