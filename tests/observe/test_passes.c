/* test_passes: the memory passes a step makes are counted and priced (kernels/traffic.h,
 * train/observe/passes.h, report.c). The helpers count exactly the floats they touch, by kind
 * (floats_copy/floats_move/floats_clear, kern_add, kern_scale, the embedding's lookup and
 * scatter-add), on the calling thread only; a step's floats go to the part of the step (trace
 * spans) they were made in; and the report's predicted compute of a step is the kernels' time
 * plus floats × seconds per float, in total, by part, and in the step's replay, with rates and
 * counts given by hand (nothing is timed). One rank (report_create is collective). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels/embed.h"
#include "kernels/optim.h"
#include "kernels/traffic.h"
#include "mesh/mesh.h"
#include "train/config/alloc.h"
#include "train/observe/passes.h"
#include "train/observe/report.h"
#include "train/observe/trace.h"

/* The calling thread's floats of each kind since `before` (updated to now). */
static void since(int64_t before[KERN_PASS_COUNT], int64_t d[KERN_PASS_COUNT]) {
    int64_t now[KERN_PASS_COUNT];
    kern_traffic_read(now);
    for (int k = 0; k < KERN_PASS_COUNT; k++) d[k] = now[k] - before[k], before[k] = now[k];
}

static int counts_are(const int64_t d[KERN_PASS_COUNT], int64_t copy, int64_t clear, int64_t add) {
    return d[KERN_PASS_COPY] == copy && d[KERN_PASS_CLEAR] == clear && d[KERN_PASS_ADD] == add;
}

/* Another thread's copy of 4096 floats: its own count, not its caller's. */
static void *other_thread(void *arg) {
    float *buf = arg;
    int64_t before[KERN_PASS_COUNT], d[KERN_PASS_COUNT];
    kern_traffic_read(before);
    floats_copy(buf, buf + 4096, 4096);
    since(before, d);
    return counts_are(d, 4096, 0, 0) ? buf : NULL;
}

static void helpers(void) {
    float *a = alloc_floats(8192), *b = alloc_floats(8192);
    int64_t before[KERN_PASS_COUNT], d[KERN_PASS_COUNT];
    kern_traffic_read(before);
    floats_copy(a, b, 1000);
    since(before, d);
    check_expect(counts_are(d, 1000, 0, 0), "floats_copy of 1000: copy %lld clear %lld add %lld",
                 (long long)d[0], (long long)d[1], (long long)d[2]);
    floats_clear(a, 777);
    since(before, d);
    check_expect(counts_are(d, 0, 777, 0), "floats_clear of 777: clear %lld", (long long)d[1]);
    floats_move(a + 1, a, 300);
    kern_scale(b, 50, 2.0f);
    since(before, d);
    check_expect(counts_are(d, 350, 0, 0), "floats_move of 300, kern_scale of 50: copy %lld",
                 (long long)d[0]);
    kern_add(a, b, 2048);
    since(before, d);
    check_expect(counts_are(d, 0, 0, 2048), "kern_add of 2048: add %lld", (long long)d[2]);
    /* 6 tokens of a shard holding rows [10, 20) of D = 4: 4 in it, 2 outside */
    const int32_t tok[6] = {10, 3, 19, 12, 25, 15};
    kern_embed_fwd(a, b, tok, 6, 4, 10, 10);
    since(before, d);
    check_expect(counts_are(d, 16, 8, 0), "embedding lookup: copy %lld (16), clear %lld (8)",
                 (long long)d[0], (long long)d[1]);
    kern_embed_bwd(b, a, tok, 6, 4, 10, 10);
    since(before, d);
    check_expect(counts_are(d, 0, 0, 16), "embedding scatter-add: add %lld (16)", (long long)d[2]);
    pthread_t th;
    void *res = NULL;
    const int ok = pthread_create(&th, NULL, other_thread, a) == 0 && pthread_join(th, &res) == 0;
    since(before, d);
    check_expect(ok && res == a && counts_are(d, 0, 0, 0),
                 "another thread's copy counts there (%s), not here (copy %lld)",
                 res == a ? "yes" : "no", (long long)d[0]);
    free(a), free(b);
}

/* pass_count: floats charged to parts, priced by hand. */
static void by_part(void) {
    float *a = alloc_floats(1024), *b = alloc_floats(1024);
    pass_count c;
    pass_count_begin(&c);
    floats_copy(a, b, 100);
    pass_count_charge(&c, PART_FWD_ATTN);
    kern_add(a, b, 200);
    floats_clear(a, 50);
    pass_count_charge(&c, PART_REST);
    pass_count_charge(&c, PART_BWD_MLP); /* nothing since */
    const double rate[KERN_PASS_COUNT] = {1e-9, 2e-9, 3e-9};
    double part[PART_COUNT];
    const double total = pass_count_seconds(&c, rate, part);
    int64_t fl[KERN_PASS_COUNT];
    pass_count_total(&c, fl);
    check_expect(fabs(part[PART_FWD_ATTN] - 100e-9) < 1e-18 &&
                     fabs(part[PART_REST] - (50 * 2e-9 + 200 * 3e-9)) < 1e-18 &&
                     part[PART_BWD_MLP] == 0 && fabs(total - 800e-9) < 1e-18 &&
                     counts_are(fl, 100, 50, 200),
                 "pass_count: fwd-attn %.3g s (1e-7), rest %.3g s (7e-7), total %.3g s (8e-7)",
                 part[PART_FWD_ATTN], part[PART_REST], total);
    free(a), free(b);
}

/* The report: a step of 1000 floats copied outside any pass (rest), 500 added in the forward
 * attention, 250 cleared in the forward's other part; the kernels' compute 0.5 s. */
static void report_step(mesh *m, trace *tr) {
    report *r = report_create(m, 1e9);
    report_watch(r, tr);
    const double rate[KERN_PASS_COUNT] = {1e-6, 2e-6, 4e-6};
    const double parts[PART_COUNT] = {0.1, 0.1, 0.05, 0.1, 0.1, 0.05, 0};
    report_set_compute(r, 0.5);
    report_set_compute_parts(r, parts);
    report_set_pass_rates(r, rate);
    float *a = alloc_floats(1024), *b = alloc_floats(1024);
    step_split sp;
    report_step_begin(r);
    floats_copy(a, b, 1000);
    trace_begin(tr, TRACE_FWD, 0);
    trace_begin(tr, TRACE_ATTN, 0);
    kern_add(a, b, 500);
    trace_end(tr, TRACE_ATTN);
    floats_clear(a, 250);
    trace_end(tr, TRACE_FWD);
    report_step_end(r, 0, &sp);
    const double want = 1000 * 1e-6 + 250 * 2e-6 + 500 * 4e-6; /* 3.5 ms */
    check_expect(counts_are(sp.pass_floats, 1000, 250, 500) && fabs(sp.pred_passes - want) < 1e-15,
                 "report: the step's floats copy %lld clear %lld add %lld, predicted %.4g s (%.4g)",
                 (long long)sp.pass_floats[0], (long long)sp.pass_floats[1],
                 (long long)sp.pass_floats[2], sp.pred_passes, want);
    check_expect(fabs(sp.pred_compute - (0.5 + want)) < 1e-12 &&
                     fabs(sp.pred_step - sp.pred_compute) < 1e-12,
                 "report: predicted compute %.6g s = 0.5 + the passes, the step's replay %.6g s",
                 sp.pred_compute, sp.pred_step);
    check_expect(fabs(sp.part_pred_compute[PART_REST] - 1e-3) < 1e-12 &&
                     fabs(sp.part_pred_compute[PART_FWD_ATTN] - (0.1 + 2e-3)) < 1e-12 &&
                     fabs(sp.part_pred_compute[PART_FWD_OTHER] - (0.05 + 0.5e-3)) < 1e-12 &&
                     sp.part_pred_compute[PART_BWD_MLP] == 0.1,
                 "report: by part rest %.4g (1e-3), fwd-attn %.4g (0.102), fwd-other %.4g "
                 "(0.0505), bwd-mlp %.4g (0.1)",
                 sp.part_pred_compute[PART_REST], sp.part_pred_compute[PART_FWD_ATTN],
                 sp.part_pred_compute[PART_FWD_OTHER], sp.part_pred_compute[PART_BWD_MLP]);
    floats_copy(a, b, 1000); /* between steps: in neither */
    report_step_begin(r);
    report_step_end(r, 0, &sp);
    check_expect(counts_are(sp.pass_floats, 0, 0, 0) && sp.pred_compute == 0.5,
                 "report: a step without passes predicts the kernels alone (%.6g s)",
                 sp.pred_compute);
    const report_totals *t = report_get_totals(r);
    check_expect(fabs(t->pred_compute - (1.0 + want)) < 1e-12,
                 "report: the run's predicted compute %.6g s over both steps", t->pred_compute);
    free(a), free(b);
    report_destroy(r);
}

int main(int argc, char **argv) {
    helpers();
    by_part();
    mesh_mpi_init(&argc, &argv);
    char err[512];
    mesh *m = mesh_create("", NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    trace *tr = trace_create(m, "", 0, err, sizeof err);
    if (!tr) mesh_exit_error("%s", err);
    report_step(m, tr);
    trace_finish(tr, NULL, err, sizeof err);
    trace_destroy(tr);
    const int rc = check_finish("test_passes");
    mesh_destroy(m);
    mesh_mpi_finalize();
    return rc;
}
