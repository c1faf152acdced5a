/* The pipelined step's prediction (train/step/pipe_pred.h) with injected costs, no MPI: plans from
 * the real constructor (plan_build) on a pipeline axis alone, kernel times written by hand in
 * place of ktime's measurement.
 * - The stage costs: a rank's blocks split evenly over its chunks per micro-batch, the head's on
 *   the last stage's chunk (P = 2 and 3, interleaved v = 2 included).
 * - Simulated by hand (tests/calc/test_pipesched.c's worked case): P = 2, m = 2, stage 0 / 1 F
 *   1 / 2, B 3 / 4, W 1 / 1, a message 0.5: 1f1b makespan 17, ranks idle 9 and 5; zb-h1 15, idle
 *   7 and 3. A host sharing factor of 2 with the message 1 doubles every time.
 * - Unit costs (F = W = 1, B = 2, no message time): the closed forms, 1f1b and gpipe 3(m+P−1),
 *   interleaved 3(v·m+P−1), zb-h1 3m + (P−1) + max(0, P−m).
 * - A step's measured figures (pipe_pred_figures): a run that goes as calc's simulation (each
 *   rank's span to its last action's end, its busy time) gives the simulation's makespan and
 *   bubble, and its chunks' costs gathered into stages simulate to it again, for every schedule
 *   on P = 2 and 3 with unequal stages and a message time; spans 10 and 8, busy 6 and 7, waits 1
 *   and 0.5 by hand give the bubble 1 − 13/20, of it 1.5/20 receiving and 3.5/20 neither.
 * - The tensor axis's collectives in the stage costs (|Y| = 2 and 3, 2 stages, 1F1B, m = 4):
 *   each layer's forward makes two ReduceScatters and two AllGathers of [rows, D/|Y|] on the
 *   critical path, its backward two of each too; priced 2 ms and 1 ms per thousand elements, a
 *   chunk of 2 layers adds 2 · 2 · 3 µs · rows · D/|Y| to F and to B, and the simulated makespan
 *   is (m + P − 1)(F + B) with them; no tensor axis adds nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/parallel/plan.h"
#include "train/step/pipe_pred.h"

/* Rank `index` of a pipeline of P ranks: schedule s, v chunks (0: the schedule's), m micro-batches
 * of one sequence, L layers. */
static plan *plan_of(pipe_schedule s, int64_t P, int64_t index, int64_t v, int64_t m, int64_t L) {
    config c;
    config_defaults(&c);
    c.shape.L = L;
    c.batch = m, c.micro_batch = 1;
    c.microbatches = m, c.schedule = s, c.virtual_stages = v;
    plan_in in;
    plan_in_single(&in, &c);
    const mesh_axes one = {1, {0, 0, 0}};
    const int size = (int)P, wrap = 1, coord = (int)index;
    in.pipe = plan_axes_of(&one, &size, &wrap, &coord, "z", MESH_ALG_BIDIR);
    plan *p = malloc(sizeof *p);
    char err[256] = "";
    if (!p || plan_build(p, &in, err, sizeof err) < 0) exit(check_expect(0, "plan: %s", err));
    return p;
}

/* Kernel times of a step of m micro-batches: the blocks' forward f, backward b (of which w is
 * weight gradients) per micro-batch, the head's hf, hb, hw on the last rank. */
static ktime_step times(double m, double f, double b, double w, double hf, double hb, double hw) {
    ktime_step k;
    memset(&k, 0, sizeof k);
    k.part[PART_FWD_ATTN] = 0.25 * m * f, k.part[PART_FWD_MLP] = 0.75 * m * f;
    k.part[PART_BWD_ATTN] = 0.5 * m * b, k.part[PART_BWD_MLP] = 0.5 * m * b;
    k.part[PART_FWD_OTHER] = m * hf, k.part[PART_BWD_OTHER] = m * hb;
    k.part[PART_REST] = 123; /* the optimizer: not the pipeline's */
    k.wgrad[0] = m * w, k.wgrad[1] = m * hw;
    return k;
}

static int near(double a, double b) {
    return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b) + 1);
}

static void test_rank_costs(void) {
    /* interleaved, P = 3, v = 2: rank 2's chunks are stages 2 and 5 (the last) */
    pipe_stage_cost c[2];
    const ktime_step k = times(6, 4, 8, 2, 1, 3, 0.5);
    plan *p = plan_of(PIPE_INTERLEAVED, 3, 2, 2, 6, 6);
    pipe_pred_rank_costs(p, &k, NULL, 1.0, c);
    check_expect(p->chunks == 2 && near(c[0].f, 2) && near(c[0].b, 4) && near(c[0].w, 1) &&
                     near(c[1].f, 3) && near(c[1].b, 7) && near(c[1].w, 1.5),
                 "interleaved P=3 v=2, last rank: chunk costs (%g %g %g) (%g %g %g), want (2 4 1) "
                 "(3 7 1.5)",
                 c[0].f, c[0].b, c[0].w, c[1].f, c[1].b, c[1].w);
    free(p);
    p = plan_of(PIPE_INTERLEAVED, 3, 0, 2, 6, 6);
    const ktime_step k0 = times(6, 4, 8, 2, 0, 0, 0);
    pipe_pred_rank_costs(p, &k0, NULL, 1.0, c);
    check_expect(near(c[0].f, 2) && near(c[1].f, 2) && near(c[1].b, 4),
                 "interleaved P=3 v=2, first rank: both chunks (2 4 1)");
    free(p);
}

/* The worked case through the plan: each rank's costs from its kernel times, then simulated. */
static void test_hand(pipe_schedule s, double makespan, const double idle[2]) {
    const ktime_step k[2] = {times(2, 1, 3, 1, 0, 0, 0), times(2, 1, 3, 0.5, 1, 1, 0.5)};
    pipe_stage_cost stage[2];
    for (int r = 0; r < 2; r++) {
        plan *p = plan_of(s, 2, r, 0, 2, 4);
        pipe_pred_rank_costs(p, &k[r], NULL, 1.0, &stage[r]);
        free(p);
    }
    for (int r = 0; r < 2; r++)
        for (int shared = 1; shared <= 2; shared++) {
            plan *p = plan_of(s, 2, r, 0, 2, 4);
            pipe_pred_result out;
            char err[256];
            const int rc = pipe_pred_simulate(p, stage, 0.5 * shared, shared, 0, &out, err, sizeof err);
            check_expect(rc == 0 && near(out.makespan, shared * makespan) &&
                             near(out.idle, shared * idle[r]),
                         "%s P=2 m=2 by hand, rank %d, times x%d: makespan %g idle %g (want %g, %g)",
                         s == PIPE_1F1B ? "1f1b" : "zb-h1", r, shared, out.makespan, out.idle,
                         shared * makespan, shared * idle[r]);
            free(p);
        }
}

static void test_unit(void) {
    int bad = 0, n = 0;
    for (int s = PIPE_GPIPE; s <= PIPE_ZB_H1; s++)
        for (int64_t P = 2; P <= 4; P++)
            for (int64_t m = 1; m <= 9; m++) {
                const int64_t v = s == PIPE_INTERLEAVED ? 2 : 1;
                if (s == PIPE_INTERLEAVED && m % P) continue;
                pipe_stage_cost unit[8];
                for (int i = 0; i < 8; i++) unit[i] = (pipe_stage_cost){1, 2, 1};
                plan *p = plan_of((pipe_schedule)s, P, 0, v, m, 24);
                pipe_pred_result out;
                char err[256];
                const double want = s == PIPE_ZB_H1 ? 3 * m + (P - 1) + (P > m ? P - m : 0)
                                                    : 3 * (v * m + P - 1);
                if (pipe_pred_simulate(p, unit, 0, 1, 0, &out, err, sizeof err) < 0 ||
                    out.makespan != want) {
                    bad++;
                    printf("     schedule %d P=%lld m=%lld: makespan %g, closed form %g\n", s,
                           (long long)P, (long long)m, out.makespan, want);
                }
                n++;
                free(p);
            }
    check_expect(bad == 0, "unit costs: makespan equals the closed form in %d cases", n);
}

/* A run that went as calc's simulation of costs c (stage s: F 1+s/4, B 3+s/2, W 1+s/8, message
 * 0.7), measured as the executor measures it, gives the simulation's figures back. */
static void test_figures_of(pipe_schedule s, int64_t P) {
    const int64_t v = s == PIPE_INTERLEAVED || s == PIPE_ZB_V ? 2 : 1, m = 2 * P;
    plan *p = plan_of(s, P, 0, v, m, 12);
    const sched_spec sp = plan_sched_spec(p);
    sched_table t;
    sched_result r;
    char err[256] = "";
    double f[8], b[8], i[8], w[8];
    pipe_stage_cost stage[8];
    for (int k = 0; k < P * v; k++) {
        stage[k] = (pipe_stage_cost){1 + k / 4.0, 3 + k / 2.0, 1 + k / 8.0};
        f[k] = stage[k].f, b[k] = stage[k].b, w[k] = stage[k].w, i[k] = b[k] - w[k];
    }
    const sched_costs c = {0, 0, 0, 0, 0.7, f, b, i, w};
    if (sched_init(&t, &sp, err, sizeof err) < 0 || sched_simulate(&t, &c, &r, err, sizeof err) < 0)
        exit(check_expect(0, "%s", err));
    const int n = PIPE_STEP_DOUBLES(v);
    double all[4 * PIPE_STEP_DOUBLES(2)];
    for (int q = 0; q < P; q++) {
        double *x = all + q * n;
        x[0] = r.end[t.off[q + 1] - 1], x[1] = r.busy[q], x[2] = 0.5 * q;
        for (int k = 0; k < v; k++) memcpy(x + 3 + 3 * k, &stage[sched_rank_stage(&t, q, k)], sizeof *stage);
    }
    pipe_step_figures fig;
    const int rc = pipe_pred_figures(p, all, 0.7, &fig, err, sizeof err);
    check_expect(rc == 0 && near(fig.makespan, r.makespan) && near(fig.bubble, r.bubble) &&
                     near(fig.sim.makespan, r.makespan) && near(fig.sim.bubble, r.bubble) &&
                     near(fig.wait, 0.5 * P * (P - 1) / 2 / (P * r.makespan)),
                 "%s P=%lld: measured as simulated: makespan %g bubble %g, simulated from the "
                 "gathered costs %g %g; calc's %g %g",
                 sched_kind_name(sp.kind), (long long)P, fig.makespan, fig.bubble,
                 fig.sim.makespan, fig.sim.bubble, r.makespan, r.bubble);
    sched_result_free(&r);
    sched_free(&t);
    free(p);
}

static void test_figures_hand(void) {
    plan *p = plan_of(PIPE_1F1B, 2, 1, 0, 2, 4);
    const double all[12] = {10, 6, 1, 1, 2, 0, 8, 7, 0.5, 1, 2, 0};
    pipe_step_figures fig;
    char err[256] = "";
    const int rc = pipe_pred_figures(p, all, 0, &fig, err, sizeof err);
    check_expect(rc == 0 && fig.makespan == 10 && near(fig.bubble, 0.35) &&
                     near(fig.wait, 0.075) && near(fig.other, 0.175),
                 "spans 10, 8, busy 6, 7, waits 1, 0.5: makespan %g (want 10), bubble %g (0.35), "
                 "wait %g (0.075), other %g (3.5 / 20)",
                 fig.makespan, fig.bubble, fig.wait, fig.other);
    free(p);
}

/* Rank 0 of a 1F1B pipeline of 2 stages × a tensor axis of Y (D = 96, 6 heads, d_ff 192, T = 16),
 * 4 micro-batches of one sequence, 4 layers. */
static plan *plan_tp(int64_t Y) {
    config c;
    config_defaults(&c);
    c.shape = (model_shape){.L = 4, .D = 96, .N = 6, .K = 6, .H = 16, .F = 192, .V = 192, .T = 16};
    c.batch = 4, c.micro_batch = 1, c.microbatches = 4, c.schedule = PIPE_1F1B;
    plan_in in;
    plan_in_single(&in, &c);
    const mesh_axes y = {1, {0, 0, 0}}, z = {1, {1, 0, 0}};
    const int ny = (int)Y, nz = 2, wrap = 0, coord = 0;
    if (Y > 1) in.tensor = plan_axes_of(&y, &ny, &wrap, &coord, "y", MESH_ALG_BIDIR);
    in.pipe = plan_axes_of(&z, &nz, &wrap, &coord, "z", MESH_ALG_BIDIR);
    plan *p = malloc(sizeof *p);
    char err[256] = "";
    if (!p || plan_build(p, &in, err, sizeof err) < 0) exit(check_expect(0, "plan: %s", err));
    return p;
}

/* 2 ms per thousand elements a ReduceScatter, 1 ms an AllGather, else nothing. */
static double price_of(void *ctx, const mesh_coll_call *c) {
    (void)ctx;
    const double per = c->op == MESH_OP_REDUCE_SCATTER ? 2e-6 : c->op == MESH_OP_ALL_GATHER ? 1e-6 : 0;
    return per * (double)c->count;
}

static void test_tensor(int64_t Y) {
    plan *p = plan_tp(Y);
    const pipe_stage_cost tp = pipe_pred_tensor_layer(p, price_of, NULL);
    const double cnt = Y > 1 ? 16.0 * 96 / (double)Y : 0, want = 2 * (2e-6 + 1e-6) * cnt;
    const ktime_step k = times(4, 0.01, 0.03, 0.01, 0, 0, 0);
    pipe_stage_cost c, stage[2];
    pipe_pred_rank_costs(p, &k, &tp, 1.0, &c);
    stage[0] = stage[1] = c;
    pipe_pred_result out;
    char err[256] = "";
    const int rc = pipe_pred_simulate(p, stage, 0, 1.0, 0, &out, err, sizeof err);
    const double F = 0.01 + 2 * want, B = 0.03 + 2 * want;
    check_expect(near(tp.f, want) && near(tp.b, want) && tp.w == 0 && near(c.f, F) &&
                     near(c.b, B) && near(c.w, 0.01) && rc == 0 && near(out.makespan, 5 * (F + B)),
                 "|Y| = %lld: a layer's tensor collectives F %g B %g W %g (want %g %g 0); the "
                 "stage F %g B %g W %g (want %g %g 0.01); makespan %g (want 5 (F + B) = %g)",
                 (long long)Y, tp.f, tp.b, tp.w, want, want, c.f, c.b, c.w, F, B, out.makespan,
                 5 * (F + B));
    free(p);
}

int main(void) {
    for (int64_t Y = 1; Y <= 3; Y++) test_tensor(Y);
    test_figures_hand();
    for (int s = PIPE_GPIPE; s <= PIPE_ZB_V; s++)
        for (int64_t P = 2; P <= 3; P++) test_figures_of((pipe_schedule)s, P);
    test_rank_costs();
    test_hand(PIPE_1F1B, 17, (const double[]){9, 5});
    test_hand(PIPE_ZB_H1, 15, (const double[]){7, 3});
    test_unit();
    return check_finish("test_pipe_pred");
}
