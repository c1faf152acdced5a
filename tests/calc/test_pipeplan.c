/* test_pipeplan: the calculator's pipelines (calc/calc_pipe.c) against the formulas it states.
 * LLaMA-2-13B (L = 40) on v5p 4x4x4, batch over x and y (X = 16), pipeline over z (P = 4):
 *   p2p per boundary and micro-batch  T_p2p = max(T_min, act_bytes·(B/X/M)·D/Y / W_oneway)
 *   p2p per rank and step             t_pipe = 2·M·v·T_p2p
 *   stage costs of one micro-batch    F_s = (L/S)·T_fwd/M (+ the head's T_fwd/M on stage S−1),
 *                                     B_s likewise, I_s = W_s = B_s/2, S = P·v
 *   the step                          the schedule's simulated makespan with those costs
 *   the unit bubble                   gpipe, 1f1b (P−1)/(M+P−1); interleaved (P−1)/(v·M+P−1);
 *                                     zb-h1 (P−1)/(3M+P−1) (M ≥ P)
 *   activations per chip              peak·A/(M·v), A = 20·B·D·L·act_bytes/(X·Y·P) (remat none),
 *                                     peak = the schedule's (stage, micro-batch) pairs held:
 *                                     gpipe M, 1f1b min(P, M), interleaved min((v−1)P+2(P−1)+1, vM)
 *   the axis as FSDP or TP            calc_compute with the axis moved to the data axes (ZeRO-3)
 *                                     or the tensor axes
 * and the book's remark that pipelining wins where the links are slow. */
#include "check.h"
#include "calc/calc.h"
#include "spec.h"

#include <stdlib.h>
#include <string.h>

static calc_spec base(sched_kind k, int v, int M) {
    model_shape m;
    calc_model_preset(&m, "llama2-13b");
    static const int sizes[3] = {4, 4, 4};
    calc_spec s = test_spec("v5p", sizes, 3, &m);
    s.data_mask = 3, s.pipe_mask = 4;
    s.tokens = 1 << 20;
    s.microbatches = M;
    s.schedule = k;
    s.virtual_stages = v;
    return s;
}

static int run(const calc_spec *s, calc_result *r, char *err, size_t len) {
    return calc_compute(s, r, err, len);
}

/* The step from the formulas above, simulated here. */
static double step_by_hand(const calc_spec *s, const calc_result *r, int v) {
    const int S = (int)r->P * v, M = s->microbatches;
    double f[16], b[16], i[16], w[16];
    for (int st = 0; st < S; st++) {
        const double L = (double)s->shape.L / S;
        double ph[2][2];
        for (int g = 0; g < 2; g++)
            for (int k = 0; k < 2; k++)
                ph[g][k] = r->phase[g][k].t_math > r->phase[g][k].t_comm ? r->phase[g][k].t_math
                                                                         : r->phase[g][k].t_comm;
        f[st] = (L * ph[0][0] + (st == S - 1 ? ph[1][0] : 0)) / M;
        b[st] = (L * ph[0][1] + (st == S - 1 ? ph[1][1] : 0)) / M;
        i[st] = w[st] = b[st] / 2;
    }
    const sched_spec sp = {s->schedule, (int)r->P, v, M, s->shape.L};
    sched_table t;
    char err[256];
    if (sched_init(&t, &sp, err, sizeof err) < 0) return -1;
    const sched_costs c = {0, 0, 0, 0, r->t_p2p, f, b, i, w};
    sched_result sr;
    double step = -1;
    if (sched_simulate(&t, &c, &sr, err, sizeof err) == 0) step = sr.makespan;
    sched_result_free(&sr);
    sched_free(&t);
    return step;
}

static void test_formulas(void) {
    static const struct {
        sched_kind k;
        int v, M;
    } cases[] = {{SCHED_GPIPE, 0, 8},       {SCHED_1F1B, 0, 8},  {SCHED_1F1B, 0, 2},
                 {SCHED_INTERLEAVED, 2, 8}, {SCHED_ZB_H1, 0, 8}, {SCHED_ZB_V, 0, 12}};
    char err[512];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const calc_spec s = base(cases[c].k, cases[c].v, cases[c].M);
        calc_result r;
        if (run(&s, &r, err, sizeof err) < 0) {
            printf("FAIL %s: %s\n", sched_kind_name(cases[c].k), err);
            check_failures++;
            continue;
        }
        const int P = 4, M = cases[c].M, v = r.sched[s.schedule].v;
        const double D = (double)s.shape.D, L = (double)s.shape.L;
        const double X = 16, Y = 1, B = s.tokens;
        char what[160];
        const char *name = sched_kind_name(s.schedule);
        snprintf(what, sizeof what, "%s M=%d: T_p2p = max(T_min, act_bytes (B/X/M) D/Y / W_oneway)",
                 name, M);
        const double V = 2 * (B / X / M) * D / Y;
        check_near(what, r.t_p2p,
                   V / s.link.w_oneway > s.link.hop_latency ? V / s.link.w_oneway
                                                            : s.link.hop_latency,
                   1e-12);
        snprintf(what, sizeof what, "%s M=%d: t_pipe = 2 M v T_p2p", name, M);
        check_near(what, r.t_pipe, 2.0 * M * v * r.t_p2p, 1e-12);
        snprintf(what, sizeof what,
                 "%s M=%d v=%d: the step is the schedule simulated with F_s, "
                 "B_s, I_s = W_s = B_s/2 and T_p2p",
                 name, M, v);
        check_near(what, r.t_step_max, step_by_hand(&s, &r, v), 1e-12);
        const double A = 20 * B * D * L * 2 / (X * Y * P);
        int peak = M;
        if (s.schedule == SCHED_1F1B || s.schedule == SCHED_ZB_H1) peak = P < M ? P : M;
        if (s.schedule == SCHED_INTERLEAVED) peak = (v - 1) * P + 2 * (P - 1) + 1;
        if (s.schedule == SCHED_ZB_V) peak = 2 * P;
        snprintf(what, sizeof what, "%s M=%d: activations per chip = peak A/(M v), peak %d", name,
                 M, peak);
        check_near(what, r.mem_acts, peak * A / (M * v), 1e-12);
        double unit = -1;
        if (s.schedule <= SCHED_1F1B) unit = (P - 1.0) / (M + P - 1);
        if (s.schedule == SCHED_INTERLEAVED) unit = (P - 1.0) / (v * M + P - 1);
        if (s.schedule == SCHED_ZB_H1) unit = (P - 1.0) / (3 * M + P - 1);
        if (s.schedule == SCHED_ZB_V) unit = (P - 1.0) / (6 * M + P - 1);
        snprintf(what, sizeof what, "%s M=%d: unit bubble, the closed form", name, M);
        check_true(what, r.sched[s.schedule].bubble_unit == unit);
        snprintf(what, sizeof what, "%s M=%d: bubble factor = step / busiest rank's compute > 1",
                 name, M);
        check_true(what, r.bubble > 1 && r.pipe_bubble > 0 && r.pipe_bubble < 1);
    }
}

/* Interleaving and zero bubble shorten the step at the same M; the rows say so. */
static void test_rows(void) {
    char err[512];
    const calc_spec s = base(SCHED_1F1B, 0, 8);
    calc_result r;
    if (run(&s, &r, err, sizeof err) < 0) {
        printf("FAIL: %s\n", err);
        check_failures++;
        return;
    }
    const calc_sched_row *g = &r.sched[SCHED_GPIPE], *o = &r.sched[SCHED_1F1B],
                         *in = &r.sched[SCHED_INTERLEAVED], *z = &r.sched[SCHED_ZB_H1];
    check_true("every schedule priced at P = 4, M = 8 (v = 2 for interleaved and zb-v)",
               g->ok && o->ok && in->ok && z->ok && r.sched[SCHED_ZB_V].ok && in->v == 2);
    check_true("gpipe and 1f1b: one unit bubble (P-1)/(M+P-1); 1f1b holds P = 4 micro-batches, "
               "gpipe M = 8; with p2p time 1f1b's steady state waits, gpipe's does not",
               g->bubble_unit == o->bubble_unit && o->peak == 4 && g->peak == 8 &&
                   g->t_step <= o->t_step);
    check_true("interleaved and zb-h1 step faster than 1f1b",
               in->t_step < o->t_step && z->t_step < o->t_step);
    calc_spec bad = base(SCHED_INTERLEAVED, 3, 8);
    check_true("interleaved v = 3 over 40 layers on 4 ranks is refused",
               run(&bad, &r, err, sizeof err) < 0 &&
                   strstr(err, "40 layers do not divide into 4 pipeline ranks x 3") != NULL);
    bad = base(SCHED_1F1B, 2, 8);
    bad.pipe_mask = 0, bad.data_mask = 7;
    check_true("--virtual-stages without a pipeline axis is refused",
               run(&bad, &r, err, sizeof err) < 0 && strstr(err, "needs a pipeline axis") != NULL);
}

/* The axis as FSDP and as TP: calc_compute on the moved sharding; slow links favour pipelining. */
static void test_alternatives(void) {
    char err[512];
    calc_spec s = base(SCHED_ZB_H1, 0, 16);
    calc_result r, a;
    run(&s, &r, err, sizeof err);
    calc_spec fsdp = s;
    fsdp.pipe_mask = 0, fsdp.data_mask = 7, fsdp.zero = 3;
    run(&fsdp, &a, err, sizeof err);
    check_near("FSDP over z: the step of data xyz with ZeRO-3", r.alt[0].t_step, a.t_step_max,
               1e-12);
    calc_spec tp = s;
    tp.pipe_mask = 0, tp.tensor_mask = 4;
    run(&tp, &a, err, sizeof err);
    check_near("TP over z: the step of tensor z", r.alt[1].t_step, a.t_step_max, 1e-12);
    check_true("fast links (v5p ICI): FSDP over z beats pipelining it",
               r.alt[0].ok && r.alt[0].t_step < r.t_step_max);
    s.chip.ici_oneway = 1e9, s.chip.ici_bidi = 2e9;
    s.link = cost_chip_link(&s.chip);
    run(&s, &r, err, sizeof err);
    printf("  1e9 B/s links: pipeline %.4g s, FSDP %.4g s, TP %.4g s\n", r.t_step_max,
           r.alt[0].t_step, r.alt[1].t_step);
    check_true("slow links (1e9 B/s, beyond an NVLink domain): pipelining beats FSDP and TP",
               r.t_step_max < r.alt[0].t_step && r.t_step_max < r.alt[1].t_step);
}

static void test_print(void) {
    char err[512];
    const calc_spec s = base(SCHED_ZB_H1, 0, 4);
    calc_result r;
    run(&s, &r, err, sizeof err);
    FILE *f = tmpfile();
    calc_print_pipe(f, &s, &r);
    calc_print_pipe_grid(f, &s, &r);
    static char buf[16384];
    rewind(f);
    buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
    fclose(f);
    check_true("the pipeline section marks the schedule and names the fastest role",
               strstr(buf, "* zb-h1") != NULL && strstr(buf, "is fastest") != NULL);
    check_true("the grid of zb-h1 P = 4, M = 4: rank 3 starts with 3F0 at step 3, then 3I0",
               strstr(buf, "     3 | 0F3    1F2    2F1    3F0   \n") != NULL &&
                   strstr(buf, "     4 | .      .      .      3I0   \n") != NULL);
}

int main(void) {
    test_formulas();
    test_rows();
    test_alternatives();
    test_print();
    return check_report("test_pipeplan");
}
