/* test_predict: the step predictor's replay (train/observe/predict.h) against steps worked by hand:
 * compute alone; a blocking collective; a non-blocking one hidden behind compute and one that
 * is not; two in the queue at once; a step with no compute stretch; events given out of order.
 * The compute model (train/step/ktime.h) times the linear layers of exactly 6·P·tokens FLOPs, P the
 * matmul parameters held (the unembedding only on the last stage), counted by hand, and its
 * parts (train/observe/parts.h) add up to it; the memory passes get a rate each, outside it. The
 * book's crossovers (report_book_boundaries) against the training chapter's numbers. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/traffic.h"
#include "mesh/link.h"
#include "mesh/mesh.h"
#include "train/step/ktime.h"
#include "train/observe/predict.h"
#include "train/observe/report.h"

static void expect(const char *what, const predict_result *r, double step, double exposed,
                   double exposed_lat, double comm, const char *dominant) {
    const double tol = 1e-12;
    check_expect(fabs(r->step - step) < tol && fabs(r->exposed - exposed) < tol &&
                     fabs(r->exposed_latency - exposed_lat) < tol && fabs(r->comm - comm) < tol &&
                     strcmp(r->dominant, dominant) == 0,
                 "%s: step %g (want %g), exposed %g (%g), latency %g (%g), comm %g (%g), %s (%s)",
                 what, r->step, step, r->exposed, exposed, r->exposed_latency, exposed_lat, r->comm,
                 comm, r->dominant, dominant);
}

/* predict_replay of the n events ev over the step [0, t_end] with `compute` s of predicted
 * compute, checked against the result worked by hand. */
static void replay(const char *what, predict_event *ev, int n, double t_end, double compute,
                   double step, double exposed, double exposed_lat, double comm,
                   const char *dominant) {
    predict_result r;
    predict_replay(ev, n, 0, t_end, compute, &r);
    expect(what, &r, step, exposed, exposed_lat, comm, dominant);
}

/* One step of a report whose experts ran `calls` grouped calls of rows[0..calls) rows (sec
 * {0.2, 0.4} s on R rows; a stage without MoE blocks: R 0, no calls), the expert axis `ex`:
 * the step's predicted compute (1 s and the experts repriced) against want, by hand, and its
 * idle against the most compute of any rank (MPI's own max, of the floats the report gathers). */
static void experts_step(mesh *m, mesh_axes ex, const int64_t *rows, int calls, double R,
                         double want, const char *what) {
    report *r = report_create(m, 1e9);
    const double parts[PART_COUNT] = {0.1, 0.3, 0.05, 0.2, 0.3, 0.05, 0};
    const double sec[2] = {R > 0 ? 0.2 : 0, R > 0 ? 0.4 : 0};
    report_set_compute(r, 1.0);
    report_set_compute_parts(r, parts);
    report_set_experts(r, sec, R, ex);
    step_split sp;
    report_step_begin(r);
    for (int i = 0; i < calls; i++) kern_traffic_rows(rows[i]);
    report_step_end(r, 0, &sp);
    const double d = want - 1.0; /* the experts' share: a third forward, two thirds backward */
    check_expect(fabs(sp.pred_compute - want) < 1e-12 &&
                     fabs(sp.part_pred_compute[PART_FWD_MLP] - (0.3 + d / 3)) < 1e-12 &&
                     fabs(sp.part_pred_compute[PART_BWD_MLP] - (0.3 + 2 * d / 3)) < 1e-12,
                 "%s (rank %d): predicted compute %.6g s (want %.6g), fwd-mlp %.6g, bwd-mlp %.6g",
                 what, mesh_world_rank(), sp.pred_compute, want,
                 sp.part_pred_compute[PART_FWD_MLP], sp.part_pred_compute[PART_BWD_MLP]);
    float c = (float)sp.compute, mx;
    MPI_Allreduce(&c, &mx, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    check_expect(sp.idle == (double)mx - sp.compute,
                 "%s (rank %d): idle %.6g s = the slowest rank's compute less this one's (%.6g)",
                 what, mesh_world_rank(), sp.idle, (double)mx - sp.compute);
    report_destroy(r);
}

/* The experts repriced on a mesh (argv[1]): its first axis the expert axis, a second one a
 * pipeline's stages (different MoE blocks, different numbers of calls: the busiest rank is looked
 * for among the expert axis's ranks only, those of this rank's stage). Stage 0's calls take
 * 10 + 40, 30 + 20, 25 + 45 rows on expert ranks 0, 1, 2 (R 50 each: 50, 50, 70 rows; on 2 expert
 * ranks the blocks' busiest take 30 + 40 = 70, on 3 30 + 45 = 75); stage 1's one call 9, 5, 7
 * (R 5: the busiest 9), or no MoE blocks at all (every rank still joins the step's gathers). */
static int experts_on_mesh(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[512];
    mesh *m = mesh_create(argv[1], NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    for (int k = 0; k < mesh_ndims(m); k++) mesh_link_set(m, k, 1e9, 1e-6);
    const mesh_axes ex = {1, {0}};
    const int nz = mesh_axis_size(m, 0), z = mesh_axis_coord(m, 0);
    const int stage = mesh_ndims(m) > 1 ? mesh_axis_coord(m, 1) : 0;
    const int64_t s0[3][2] = {{10, 40}, {30, 20}, {25, 45}}, s1[3] = {9, 5, 7};
    const double busiest = nz == 2 ? 70 : 75, one = 1.0 + 0.6 * (busiest / 50 - 1);
    if (stage == 0) {
        experts_step(m, ex, s0[z], 2, 50, one, "stage 0, the busiest expert rank's rows");
        experts_step(m, ex, s0[z], 2, 50, one, "stage 0 beside a stage without MoE blocks");
    } else {
        experts_step(m, ex, &s1[z], 1, 5, 1.0 + 0.6 * (9.0 / 5 - 1),
                     "stage 1, the busiest expert rank's rows");
        experts_step(m, ex, NULL, 0, 0, 1.0, "stage 1 without MoE blocks");
    }
    const int rc = check_finish("test_predict (experts on a mesh)");
    mesh_destroy(m);
    mesh_mpi_finalize();
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1) return experts_on_mesh(argc, argv);
    replay("compute only: the predicted compute", NULL, 0, 10, 5, 5, 0, 0, 0, "compute");

    /* 8 s measured compute around a blocking call [4, 6] → scale 0.5: 2 + 1 + 2 */
    predict_event b[] = {{PREDICT_BLOCKING, 4, 6, 0, 1.0, 0.25}};
    replay("blocking call: compute + its predicted time", b, 1, 10, 4, 5, 1, 0.25, 1, "compute");

    /* issued at 2 for 3 s, waited for at [8, 9]: done at 5, long before T = 8 → hidden */
    predict_event h[] = {{PREDICT_WAIT, 8, 9, 7, 0, 0}, {PREDICT_ISSUE, 2, 0, 7, 3.0, 1.0}};
    replay("non-blocking call hidden behind compute (events out of order)", h, 2, 10, 9, 9, 0, 0, 3,
           "compute");

    /* the same call lasting 10 s: ends at 12, the caller waits 4 s (half of it latency) */
    predict_event x[] = {{PREDICT_ISSUE, 2, 0, 7, 10.0, 5.0}, {PREDICT_WAIT, 8, 9, 7, 0, 0}};
    replay("non-blocking call longer than the compute after it", x, 2, 10, 9, 13, 4, 2, 10,
           "compute");

    /* two 3 s calls issued at 1 and 2 run one after the other: [1, 4], [4, 7]; waited at 6 */
    predict_event q[] = {{PREDICT_ISSUE, 1, 0, 1, 3.0, 0},
                         {PREDICT_ISSUE, 2, 0, 2, 3.0, 0},
                         {PREDICT_WAIT, 6, 6, 1, 0, 0},
                         {PREDICT_WAIT, 6, 6, 2, 0, 0}};
    replay("the queue runs one call at a time", q, 4, 6, 6, 7, 1, 0, 6, "compute");

    /* a step that is all collective: the compute goes at the end; latency dominates */
    predict_event l[] = {{PREDICT_BLOCKING, 0, 2, 0, 3.0, 2.0}};
    replay("no compute stretch; a latency-bound call", l, 1, 2, 1, 4, 3, 2, 3, "latency");

    /* a wait for a call issued before the step, and an event after it: both ignored */
    predict_event o[] = {{PREDICT_WAIT, 1, 1, 99, 0, 0}, {PREDICT_BLOCKING, 11, 12, 0, 5, 0}};
    replay("waits for unknown calls and events after the step cost nothing", o, 2, 10, 2, 2, 0, 0,
           0, "compute");
    /* ktime: L=2 D=16 N·H=16 K·H=8 F=32 V=64, 3 sequences of 8 tokens, 2 micro-batches:
     * per layer D·NH + 2·D·KH + NH·D + 3·D·F = 256 + 256 + 256 + 1536 = 2304, D·V = 1024 */
    ktime_shape ks = {.L = 2,
                      .D = 16,
                      .H = 4,
                      .T = 8,
                      .Nl = 4,
                      .Kl = 2,
                      .Fl = 32,
                      .Vl = 64,
                      .seqs = 3,
                      .micro = 2,
                      .params = 1000,
                      .last = 1};
    ktime_step kt;
    int rc = ktime_measure(&ks, 1e-4, &kt);
    check_expect(rc == 0 && kt.matmul_flops == 6.0 * (2 * 2304 + 1024) * 48,
                 "ktime: linear-layer FLOPs %.0f = 6·(2·2304 + 1024)·48 = %.0f", kt.matmul_flops,
                 6.0 * (2 * 2304 + 1024) * 48);
    check_expect(kt.matmul > 0 && kt.attention > 0 && kt.elementwise > 0 && kt.optimizer > 0 &&
                     kt.total == kt.matmul + kt.attention + kt.elementwise + kt.optimizer,
                 "ktime: every part timed, total = their sum (%.3g s)", kt.total);
    double parts = 0;
    for (int p = 0; p < PART_COUNT; p++) parts += kt.part[p];
    check_expect(fabs(parts - kt.total) <= 1e-12 * kt.total && kt.part[PART_REST] == kt.optimizer,
                 "ktime: the parts add up to the total (%.3g of %.3g s), rest = the optimizer",
                 parts, kt.total);
    check_expect(kt.pass[KERN_PASS_COPY] > 0 && kt.pass[KERN_PASS_CLEAR] > 0 &&
                     kt.pass[KERN_PASS_ADD] > 0,
                 "ktime: every memory pass has a rate (copy %.3g, clear %.3g, add %.3g s/float), "
                 "outside the total",
                 kt.pass[KERN_PASS_COPY], kt.pass[KERN_PASS_CLEAR], kt.pass[KERN_PASS_ADD]);
    check_expect(kt.part[PART_FWD_ATTN] > 0 && kt.part[PART_FWD_MLP] > 0 &&
                     kt.part[PART_FWD_OTHER] > 0 && kt.part[PART_BWD_ATTN] > 0 &&
                     kt.part[PART_BWD_MLP] > 0 && kt.part[PART_BWD_OTHER] > 0,
                 "ktime: every part of a last stage's step has compute");
    ks.last = 0;
    ktime_measure(&ks, 1e-4, &kt);
    check_expect(kt.matmul_flops == 6.0 * 2 * 2304 * 48,
                 "ktime: not the last stage: no unembedding (%.0f FLOPs)", kt.matmul_flops);
    check_expect(kt.part[PART_FWD_OTHER] == 0 && kt.part[PART_BWD_OTHER] == 0,
                 "ktime: not the last stage: no head, nothing in the passes' other parts");

    /* ktime with experts: L=2, one MoE block (Lm 1) and one dense; E=4 experts, top-2, this rank
     * holding 2 of them (an expert axis of 2) of width F_e = 8, one shared expert. Per token:
     * attention 768 per block; the dense block's MLP 3·D·F = 1536; the MoE block's router
     * D·E = 64 (fp32), shared expert 3·D·F_e = 384 and k = 2 expert rows of 384 each (the
     * rows of the axis's 2 shards for its 2 of 4 experts: 2·24·2·2/4 = 48 a micro-batch, as
     * many as its own 24 tokens' 48 slots) = 768; unembedding 1024 */
    ks.last = 1, ks.Lm = 1, ks.E = 4, ks.k = 2, ks.El = 2, ks.Fel = 8, ks.S = 1;
    rc = ktime_measure(&ks, 1e-4, &kt);
    const double moe_tok = 2 * 768 + 1536 + 64 + 384 + 768 + 1024;
    check_expect(rc == 0 && kt.matmul_flops == 6.0 * moe_tok * 48,
                 "ktime, one MoE block of two: linear-layer and expert FLOPs %.0f = 6·%.0f·48 = "
                 "%.0f",
                 kt.matmul_flops, moe_tok, 6.0 * moe_tok * 48);
    ks.Lm = 2, ks.S = 0; /* every block MoE, no shared expert: no dense MLP at all */
    rc = ktime_measure(&ks, 1e-4, &kt);
    check_expect(rc == 0 && kt.matmul_flops == 6.0 * (2 * (768 + 64 + 768) + 1024) * 48,
                 "ktime, two MoE blocks without a shared expert: %.0f FLOPs = 6·(2·(768 + 64 + "
                 "768) + 1024)·48, no dense MLP",
                 kt.matmul_flops);
    check_expect(kt.part[PART_FWD_MLP] > 0 && kt.part[PART_BWD_MLP] > 0,
                 "ktime: the MoE blocks' compute in the MLP parts");
    check_expect(kt.expert_rows == 2 * 2 * 24 * 2 && kt.experts[0] > 0 && kt.experts[1] > 0 &&
                     kt.experts[0] < kt.part[PART_FWD_MLP] && kt.experts[1] < kt.part[PART_BWD_MLP],
                 "ktime: the experts' forward and backward kept apart, on %.0f rows = 2 blocks · "
                 "2 micro-batches · 24 tokens · k 2 (each step reprices them)",
                 kt.expert_rows);
    /* the rows the experts ran, counted by the kernels in call order, and the critical path's:
     * 2 ranks, stride 4 (3 calls kept): blocks of 100/200 and 300/100 rows take 200 + 300 */
    kern_traffic_rows_reset();
    kern_traffic_rows(5), kern_traffic_rows(7);
    int64_t got[KERN_TRAFFIC_ROWS];
    const int64_t calls = kern_traffic_rows_read(got);
    check_expect(calls == 2 && got[0] == 5 && got[1] == 7 && got[2] == 0,
                 "traffic: 2 calls of 5 and 7 rows read back in order (%lld: %lld, %lld)",
                 (long long)calls, (long long)got[0], (long long)got[1]);
    const float er[8] = {2, 100, 300, 0, 2, 200, 100, 0};
    check_expect(predict_expert_rows(er, 2, 4, 3, er) == 500 &&
                     predict_expert_rows(er, 2, 4, 3, er + 4) == 500,
                 "expert rows: each call at its busiest rank's rows, 200 + 300, from either rank");
    const float es[8] = {2, 100, 300, 0, 1, 900, 0, 0};
    check_expect(predict_expert_rows(es, 2, 4, 3, es) == 400 &&
                     predict_expert_rows(es, 2, 4, 3, es + 4) == 900,
                 "expert rows: ranks of other calls (pipeline stages) are not compared: own 400, 900");
    const float eo[8] = {5, 1, 2, 30, 5, 3, 1, 10};
    check_expect(predict_expert_rows(eo, 2, 4, 3, eo) == 35,
                 "expert rows: calls past the kept ones in the last (3 + 2 + 30 = 35)");
    ks.Lm = 0, ks.E = ks.k = ks.El = ks.Fel = 0;

    /* the book's crossovers on v5p (C = 4.59e14, W = 1.8e11 both ways): α = 2550 tokens per
     * chip with bf16 (training chapter), 850 on 3 axes; fp32 doubles the bytes and the boundary;
     * TP F = |Y|·α for the book's 2-matrix MLP (5100 on |Y| = 2), ⅔ of it for a SwiGLU (3400) */
    report_boundaries bd;
    int rb = report_book_boundaries(4.59e14, 1.8e11, 2, 1, 2, 3, &bd);
    check_expect(rb == 0 && fabs(bd.alpha - 2550) < 1e-9 && fabs(bd.data_tokens - 2550) < 1e-9 &&
                     fabs(bd.tensor_F - 3400) < 1e-9,
                 "boundaries, v5p bf16, |Y| = 2, SwiGLU: α %.1f, B/X %.1f, F %.1f = 2550, 2550, "
                 "3400",
                 bd.alpha, bd.data_tokens, bd.tensor_F);
    rb = report_book_boundaries(4.59e14, 1.8e11, 2, 3, 4, 2, &bd);
    check_expect(rb == 0 && fabs(bd.data_tokens - 850) < 1e-9 && fabs(bd.tensor_F - 10200) < 1e-9,
                 "boundaries, 3 data axes, |Y| = 4, the book's MLP: B/X %.1f = 850, F %.1f = 10200",
                 bd.data_tokens, bd.tensor_F);
    rb = report_book_boundaries(4.59e14, 1.8e11, 4, 1, 2, 2, &bd);
    check_expect(rb == 0 && fabs(bd.data_tokens - 5100) < 1e-9 && fabs(bd.tensor_F - 10200) < 1e-9,
                 "boundaries, fp32 on the wire: B/X %.1f = 5100, F %.1f = 10200", bd.data_tokens,
                 bd.tensor_F);
    check_expect(report_book_boundaries(0, 1.8e11, 2, 1, 1, 3, &bd) < 0 &&
                     report_book_boundaries(4.59e14, 1.8e11, 2, 0, 1, 3, &bd) < 0 &&
                     report_book_boundaries(4.59e14, 1.8e11, 2, 1, 1, 0, &bd) < 0,
                 "boundaries: bad input refused");
    return check_finish("test_predict");
}
