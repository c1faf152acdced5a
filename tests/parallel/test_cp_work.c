/* Context parallelism's balance: the attention FLOPs each rank of the context axis counted in one
 * training step (par_cp_flops: kern_attn_part_flops of every block it attended, masked part of
 * its row blocks included) are equal to within one block's work under the zigzag split, with
 * --cp-alg ring and allgather, and a chunk of T/(2|C|) = 72 tokens that is not a whole number of
 * KERN_ATTN_BLOCK rows; under the contiguous split (T not divisible by 2|C|) the last rank does
 * more than one block more than the first (the counter sees the split), for allgather and for
 * ring, whose rank i then skips the blocks of the |C| − 1 − i ranks after it, forward and
 * backward (par_cp_skipped: exactly 2·(|C| − 1 − i) per layer and micro-batch, and none under
 * zigzag, where every block is half visible). One
 * block: 4 · KERN_ATTN_BLOCK rows · T/|C| keys · H, per sequence, query head, layer and
 * micro-batch. Also: the RoPE positions of every rank's rows are the global ones
 * (plan_cp_pos against the split's definition), and the model's activations per rank are at most
 * 1/|C| of the 1-rank run's (as the plan counts them, which is what model_create allocates).
 * bf16 compute, ring: the ppermute bytes this rank sent in one step equal the plan's calls' (count
 * × wire bytes × times per layer and micro-batch), in fp32 and bf16 compute, and the K, V hops'
 * planned bytes in bf16 are half fp32's (K, V move in bf16; dK, dV stay fp32); with --overlap the
 * same bytes, sent and planned, and |C| − 1 of the backward's dK, dV hops a layer and micro-batch
 * waited behind the next block's rows' half (par_cp_dkv_behind; none without). usage:
 * test_cp_work --mesh x=N --cp x */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "mesh/mesh_mpi.h"
#include "stream.h"
#include "targs.h"
#include "train/step/trainer.h"

static int positions_ok(const plan *pl);

/* The model's saved activations per rank (BUF_ACTIVATIONS) × |C| against the 1-rank plan's at the
 * same batch: at most 1 (the rows fall by |C|, and the T×T probabilities are the context hooks'
 * business, BUF_CP_SAVED, counted beside). Prints both. */
static double act_ratio(const plan *pl, int rank) {
    plan_in in;
    plan_in_single(&in, &pl->c);
    plan ref;
    char err[256];
    if (plan_build(&ref, &in, err, sizeof err) < 0) mesh_exit_error("%s", err);
    const plan_buf *a = plan_buffer(pl, BUF_ACTIVATIONS, 0);
    const plan_buf *a1 = plan_buffer(&ref, BUF_ACTIVATIONS, 0);
    const plan_buf *sv = plan_buffer(pl, BUF_CP_SAVED, 0);
    const double r = (double)a->n * (double)pl->cp.n / (double)a1->n;
    if (rank == 0)
        printf("  activations per rank %lld floats (+ %lld saved by the attention) vs 1 rank %lld: "
               "x|C| = %.3f of it\n",
               (long long)a->n, (long long)(sv ? sv->n : 0), (long long)a1->n, r);
    return r;
}

/* A fresh trainer of c with --cp-alg alg and T after its first step (the mesh's stats reset just
 * before it). */
static trainer *first_step(config c, const char *alg, int64_t T, mesh *m) {
    snprintf(c.cp_alg, sizeof c.cp_alg, "%s", alg);
    c.shape.T = T;
    char err[512];
    trainer *t = trainer_create(&c, m, err, sizeof err);
    if (!t) mesh_exit_error("%s", err);
    int64_t row0, nrows;
    trainer_rows(t, &row0, &nrows);
    int32_t *tok = malloc((size_t)(nrows * (T + 1)) * sizeof(int32_t));
    test_stream_batch(tok, row0, nrows, T, 0);
    step_stats st;
    mesh_stats_reset(m);
    trainer_step(t, 0, tok, &st);
    free(tok);
    return t;
}

/* One step of a fresh trainer with --cp-alg alg and T; fills every rank's counted FLOPs into
 * all[n] (rank order) and returns one block's work for that run; *pos &= its plan's positions
 * are the zigzag's (when it splits so). */
static double step_flops(config c, const char *alg, int64_t T, mesh *m, double *all, int *pos,
                         double *act, int *skips) {
    trainer *t = first_step(c, alg, T, m);
    const double mine = par_cp_flops(trainer_par(t));
    MPI_Allgather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, mesh_world_comm(m)->mpi);
    const plan *pl = trainer_plan(t);
    /* the ring's skipped blocks: 2·(|C| − 1 − i) per layer and micro-batch under the contiguous
     * split, none under zigzag (and none for the other algorithms) */
    const int64_t after =
                      pl->cp_pieces == 1 && !strcmp(alg, "ring") ? pl->cp.n - 1 - pl->cp.index : 0,
                  want = 2 * after * c.shape.L * pl->n_micro, got = par_cp_skipped(trainer_par(t));
    if (got != want) *skips = 0;
    printf("  rank %lld, %s, T = %lld: %lld ring blocks skipped (want %lld)\n",
           (long long)pl->cp.index, alg, (long long)T, (long long)got, (long long)want);
    if (pl->cp_pieces == 2) *pos &= positions_ok(pl);
    *act = fmax(*act, act_ratio(pl, mesh_rank(m)));
    const double block = 4.0 * KERN_ATTN_BLOCK * (double)(T / pl->cp.n) * (double)c.shape.H *
                         (double)(pl->micro_seqs * pl->n_micro * pl->loc.Nl * c.shape.L);
    trainer_destroy(t);
    return block;
}

/* One ring step of a fresh trainer in `dtype` compute (--overlap: ov): the ppermute bytes this
 * rank sent (mesh stats) into *sent, the plan's into *planned; *behind &= the backward's dK, dV
 * hops waited behind the next block's rows' half are |C| − 1 a layer and micro-batch with
 * --overlap, none without, of |C| dK, dV hops, and the ppermutes the step made are its hops,
 * |C| − 1 of K, V forward, as many backward and the |C| dK, dV hops, a layer and micro-batch,
 * each one ppermute, or two on an axis of 2 (+1 and −1: no wraparound link); returns the plan's
 * K, V hops' bytes (the hidden ones, forward and backward). */
static double ring_bytes(config c, compute_dtype dtype, int ov, int64_t T, mesh *m, double *sent,
                         double *planned, int *behind) {
    c.compute = dtype;
    c.overlap = ov;
    trainer *t = first_step(c, "ring", T, m);
    const plan *pl0 = trainer_plan(t);
    const int64_t C = pl0->cp.n, lm = c.shape.L * pl0->n_micro, want = ov ? (C - 1) * lm : 0;
    const int64_t calls_want = (3 * C - 2) * lm * (C == 2 ? 2 : 1);
    int64_t hops;
    const int64_t got = par_cp_dkv_behind(trainer_par(t), &hops, NULL);
    const int64_t calls = mesh_stats(m, MESH_OP_PPERMUTE, -1).calls;
    *behind &= got == want && hops == C * lm && calls == calls_want;
    if (mesh_rank(m) == 0)
        printf("  ring, %s, --overlap %s: %lld dK, dV hops behind a rows' half (want %lld) of "
               "%lld (want %lld); %lld ppermutes (want %lld)\n",
               dtype == COMPUTE_BF16 ? "bf16" : "fp32", ov ? "on" : "off", (long long)got,
               (long long)want, (long long)hops, (long long)(C * lm), (long long)calls,
               (long long)calls_want);
    *sent = (double)mesh_stats(m, MESH_OP_PPERMUTE, -1).bytes;
    const plan *pl = trainer_plan(t);
    double kv = 0;
    *planned = 0;
    for (int i = 0; i < pl->ncall; i++) {
        const plan_call *k = &pl->call[i];
        if (k->op != MESH_OP_PPERMUTE) continue;
        const double b = (double)k->count * mesh_wire_bytes(k->wire) * k->times *
                         (double)k->layers * (double)pl->n_micro;
        *planned += b;
        if (k->path == PLAN_HIDDEN) kv += b;
    }
    trainer_destroy(t);
    return kv;
}

/* max − min of all[n] in blocks; prints the row. */
static double spread(const char *what, const double *all, int n, double block, int rank) {
    double lo = all[0], hi = all[0];
    for (int i = 1; i < n; i++) lo = fmin(lo, all[i]), hi = fmax(hi, all[i]);
    if (rank == 0) {
        printf("%-34s", what);
        for (int i = 0; i < n; i++) printf(" %.4g", all[i]);
        printf("  spread %.3g blocks\n", (hi - lo) / block);
    }
    return (hi - lo) / block;
}

/* Every rank's positions: the zigzag's chunks r and 2n−1−r, ascending, covering 0..T−1 once. */
static int positions_ok(const plan *pl) {
    const int64_t n = pl->cp.n, T = pl->s.T, Tl = T / n, c = T / (2 * n);
    int32_t *pos = malloc((size_t)Tl * sizeof(int32_t));
    int ok = 1;
    for (int64_t r = 0; r < n; r++) {
        plan_cp_pos(pl, r, pos);
        for (int64_t i = 0; i < Tl; i++)
            ok &= pos[i] == (i < c ? r * c + i : (2 * n - 1 - r) * c + i - c);
    }
    free(pos);
    return ok;
}

int main(int argc, char **argv) {
    const model_shape s = {.L = 2, .D = 32, .N = 4, .K = 2, .H = 8, .F = 64, .V = 256, .T = 16};
    config c = targs_init(&argc, &argv, "--batch 2 --micro-batch 2", s);
    c.warmup = 1, c.seed = 5;
    char err[512];
    mesh *m = mesh_create(c.mesh, c.mesh_open, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int n = mesh_nranks(m), rank = mesh_rank(m);
    double *all = malloc((size_t)n * sizeof(double));
    const int64_t zig = 2 * n * 72, contig = n * 145;
    int pos = 1;
    double act = 0;
    int skips = 1;
    double b = step_flops(c, "ring", zig, m, all, &pos, &act, &skips);
    const double ring = spread("ring, zigzag (T = 144·|C|):", all, n, b, rank);
    b = step_flops(c, "allgather", zig, m, all, &pos, &act, &skips);
    const double ag = spread("allgather, zigzag (T = 144·|C|):", all, n, b, rank);
    b = step_flops(c, "allgather", contig, m, all, &pos, &act, &skips);
    const double ct = spread("allgather, contiguous (T = 145·|C|):", all, n, b, rank);
    b = step_flops(c, "ring", contig, m, all, &pos, &act, &skips);
    const double rc = spread("ring, contiguous (T = 145·|C|):", all, n, b, rank);
    MPI_Allreduce(MPI_IN_PLACE, &skips, 1, MPI_INT, MPI_MIN, mesh_world_comm(m)->mpi);
    double s32, p32, s16, p16, so, po;
    int behind = 1;
    const double kv32 = ring_bytes(c, COMPUTE_FP32, 0, 2 * n * 8, m, &s32, &p32, &behind);
    const double kv16 = ring_bytes(c, COMPUTE_BF16, 0, 2 * n * 8, m, &s16, &p16, &behind);
    const double kvo = ring_bytes(c, COMPUTE_BF16, 1, 2 * n * 8, m, &so, &po, &behind);
    MPI_Allreduce(MPI_IN_PLACE, &behind, 1, MPI_INT, MPI_MIN, mesh_world_comm(m)->mpi);
    int bytes = s32 == p32 && s16 == p16 && kv16 > 0 && 2 * kv16 == kv32 && so == s16 &&
                po == p16 && kvo == kv16;
    MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_INT, MPI_MIN, mesh_world_comm(m)->mpi);
    if (rank == 0)
        printf("ring ppermute bytes sent/planned: fp32 %.0f/%.0f, bf16 %.0f/%.0f; K, V hops "
               "planned: fp32 %.0f, bf16 %.0f (half: %s)\n",
               s32, p32, s16, p16, kv32, kv16, 2 * kv16 == kv32 ? "yes" : "NO");
    const int fail = !(ring <= 1.0) || !(ag <= 1.0) || !(ct > 1.0) || !(rc > 1.0) || !pos ||
                     !(act <= 1.0) || !skips || !bytes || !behind;
    if (rank == 0) {
        printf("zigzag within one block: ring %s, allgather %s; contiguous beyond one: allgather "
               "%s, ring %s; the ring's skipped blocks as counted: %s; positions the zigzag's: "
               "%s; activations at most 1/|C| of 1 rank's: %s; the ring's dK, dV behind compute "
               "with --overlap alone, hops and ppermutes as counted: %s\n",
               ring <= 1.0 ? "yes" : "NO", ag <= 1.0 ? "yes" : "NO", ct > 1.0 ? "yes" : "NO",
               rc > 1.0 ? "yes" : "NO", skips ? "yes" : "NO", pos ? "yes" : "NO",
               act <= 1.0 ? "yes" : "NO", behind ? "yes" : "NO");
        printf(fail ? "FAIL\n" : "PASS\n");
    }
    free(all);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return fail;
}
