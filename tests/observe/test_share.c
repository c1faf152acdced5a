/* test_share: the step's prediction on a shared host (train/observe/share.h).
 *  - The model of synthetic placements, worked by hand: 1, 2 and 4 ranks per CPU, fewer ranks
 *    than CPUs, an odd 3 ranks on 2 CPUs, BLAS threads > 1 (the kernels timed on the wall clock
 *    at the host's share: the compute's factor stays 1), several hosts (the most shared one sets
 *    the pace).
 *  - Steps priced on those placements, worked by hand: the replay (predict.h) of a blocking
 *    collective and of a non-blocking one that the shared host's longer compute hides.
 *  - The report (report.h) on this run's own placement, which the test makes: every rank pinned
 *    to one CPU (sched_setaffinity) while the report finds the hosts, so N ranks share it; a step
 *    of blocking AllReduces with 50 ms of predicted compute is then predicted (N − 1)·50 ms
 *    longer than on a CPU per rank, and with 2 BLAS threads not at all; with a CPU per rank
 *    (when the machine has N CPUs) the prediction is the one on a CPU per rank, bit for bit.
 * Nothing is timed: the checks are of what the model computed. Usage: mpirun -np N test_share */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "mesh/coll.h"
#include "mesh/mesh_mpi.h"
#include "train/observe/predict.h"
#include "train/observe/report.h"
#include "train/observe/share.h"

/* The model of hosts h[0..n) for t threads, against per_cpu, compute factor and shared. */
static void model(const char *what, const share_host *h, int n, int t, double per_cpu,
                  double compute, int shared) {
    const share_model m = share_model_of(h, n, t, 1);
    check_expect(fabs(m.per_cpu - per_cpu) < 1e-12 && m.compute == compute && m.shared == shared,
                 "%s: %.3g threads per CPU (want %.3g), compute x%.3g (x%.3g), shared %d (%d)",
                 what, m.per_cpu, per_cpu, m.compute, compute, m.shared, shared);
}

/* The replay of ev[0..n) over [0, t_end] with `compute` s on placement h (t threads): the
 * shared step and the one on a CPU per rank, against the values worked by hand. */
static void step(const char *what, const share_host *h, int t, predict_event *ev, int n,
                 double t_end, double compute, double want, double want_dedicated,
                 double want_exposed) {
    const share_model m = share_model_of(h, 1, t, 1);
    predict_result s, d;
    predict_replay(ev, n, 0, t_end, compute, &d);
    predict_replay(ev, n, 0, t_end, m.compute * compute, &s);
    check_expect(fabs(s.step - want) < 1e-12 && fabs(d.step - want_dedicated) < 1e-12 &&
                     fabs(s.exposed - want_exposed) < 1e-12,
                 "%s: step %g s (want %g), on a CPU per rank %g (%g), exposed %g (%g)", what,
                 s.step, want, d.step, want_dedicated, s.exposed, want_exposed);
}

static void synthetic(void) {
    const share_host one[] = {{2, 2}}, two[] = {{4, 2}}, four[] = {{8, 2}}, few[] = {{2, 4}};
    const share_host odd[] = {{3, 2}}, hosts[] = {{2, 2}, {6, 2}, {4, 4}};
    model("1 rank per CPU (2 on 2)", one, 1, 1, 1, 1, 0);
    model("2 ranks per CPU (4 on 2)", two, 1, 1, 2, 2, 1);
    model("4 ranks per CPU (8 on 2)", four, 1, 1, 4, 4, 1);
    model("fewer ranks than CPUs (2 on 4)", few, 1, 1, 0.5, 1, 0);
    model("3 ranks on 2 CPUs", odd, 1, 1, 1.5, 1.5, 1);
    model("2 BLAS threads, 1 rank per CPU: 2 threads per CPU, timed at that share", one, 1, 2, 2, 1,
          1);
    model("2 BLAS threads, 2 ranks per CPU", two, 1, 2, 4, 1, 1);
    model("hosts of 2/2, 6/2 and 4/4: the 6 ranks on 2 CPUs set the pace", hosts, 3, 1, 3, 3, 1);
    const share_model w = share_model_of(hosts, 3, 1, 0);
    check_expect(w.ranks == 6 && w.cpus == 2 && w.yields == 0,
                 "the most shared host: %d ranks on %d CPUs (6, 2), yields %d (0)", w.ranks, w.cpus,
                 w.yields);
    /* a blocking call [4, 6] of 1 s (0.25 latency) in a step of 10 s measured, 4 s of compute
     * predicted: on a CPU per rank the 8 s of stretches scale by 0.5: 2 + 1 + 2 = 5. With k ranks
     * per CPU the compute is 4k: 2k + 1 + 2k */
    predict_event b[] = {{PREDICT_BLOCKING, 4, 6, 0, 1.0, 0.25}};
    step("blocking call, 1 rank per CPU: unchanged", one, 1, b, 1, 10, 4, 5, 5, 1);
    step("blocking call, 2 ranks per CPU: 4 + 1 + 4", two, 1, b, 1, 10, 4, 9, 5, 1);
    step("blocking call, 4 ranks per CPU: 8 + 1 + 8", four, 1, b, 1, 10, 4, 17, 5, 1);
    step("blocking call, 3 ranks on 2 CPUs: 3 + 1 + 3", odd, 1, b, 1, 10, 4, 7, 5, 1);
    step("blocking call, 2 BLAS threads per rank on 1 CPU each: unchanged", one, 2, b, 1, 10, 4, 5,
         5, 1);
    /* a 10 s non-blocking call issued at 2, waited for at [8, 9], 9 s of compute (the stretches
     * [0, 8] and [9, 10], scale 1): on a CPU per rank it ends at 12 and the caller, at 8, waits
     * 4 s: 13. With 2 ranks per CPU (scale 2) it is issued at T = 4, ends at 14, and the caller
     * reaches its wait at T = 16: hidden; 16 + 2 = 18 */
    predict_event x[] = {{PREDICT_ISSUE, 2, 0, 7, 10.0, 5.0}, {PREDICT_WAIT, 8, 9, 7, 0, 0}};
    step("non-blocking call, 2 ranks per CPU: hidden by the longer compute", two, 1, x, 2, 10, 9,
         18, 13, 0);
}

/* Every rank on its host's CPU `cpu` (−1: as it was, `own`). */
static void pin(int cpu, const cpu_set_t *own) {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (cpu >= 0) CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, cpu >= 0 ? &s : own);
}

/* One step of 3 blocking AllReduces with 50 ms of predicted compute, into sp. */
static void one_step(report *r, mesh *m, step_split *sp) {
    float a[1024] = {0}, b[1024];
    report_step_begin(r);
    for (int i = 0; i < 3; i++) mesh_all_reduce(m, mesh_all_axes(m), b, a, 1024, MESH_ALG_RING);
    report_step_end(r, 0, sp);
}

static int same_bits(double a, double b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

static void placed(mesh *m) {
    const int n = mesh_nranks(m);
    cpu_set_t own;
    sched_getaffinity(0, sizeof own, &own);
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &own)) first++;
    MPI_Bcast(&first, 1, MPI_INT, 0, MPI_COMM_WORLD);
    pin(first, &own); /* all on one CPU while the report finds the hosts */
    report *r = report_create(m, 1e9);
    pin(-1, &own);
    report_set_compute(r, 0.05);
    const share_model *sm = report_share(r);
    step_split sp;
    one_step(r, m, &sp);
    const int shared = n > 1;
    check_expect(sm->per_cpu == n && sm->shared == shared && sp.pred_share == (shared ? n : 1),
                 "%d ranks on 1 CPU: %g threads per CPU, shared %d, compute x%g", n, sm->per_cpu,
                 sm->shared, sp.pred_share);
    if (shared)
        check_expect(fabs(sp.pred_step - sp.pred_dedicated - (n - 1) * 0.05) < 1e-9 &&
                         fabs(sp.pred_exposed - (sp.pred_step - n * 0.05)) < 1e-12,
                     "%d ranks on 1 CPU: step %.6f s = on a CPU per rank %.6f + %d x 0.05", n,
                     sp.pred_step, sp.pred_dedicated, n - 1);
    else
        check_expect(same_bits(sp.pred_step, sp.pred_dedicated),
                     "1 rank on 1 CPU: the step's prediction is the one on a CPU per rank, bit "
                     "for bit (%.17g)",
                     sp.pred_step);
    report_set_threads(r, 2);
    one_step(r, m, &sp);
    check_expect(report_share(r)->per_cpu == 2 * n && sp.pred_share == 1 &&
                     same_bits(sp.pred_step, sp.pred_dedicated),
                 "2 BLAS threads: %g threads per CPU, the kernels timed at that share: step %.17g "
                 "= on a CPU per rank %.17g",
                 report_share(r)->per_cpu, sp.pred_step, sp.pred_dedicated);
    report_destroy(r);
    /* a CPU per rank: rank i on the i-th CPU of rank 0's set, when it has n of them */
    cpu_set_t set0 = own;
    MPI_Bcast(&set0, (int)sizeof set0, MPI_BYTE, 0, MPI_COMM_WORLD);
    const int have = CPU_COUNT(&set0);
    if (have < n) {
        check_expect(1, "fewer CPUs (%d) than ranks: no run on a CPU per rank", have);
        return;
    }
    int cpu = -1;
    for (int c = 0, i = 0; c < CPU_SETSIZE && cpu < 0; c++)
        if (CPU_ISSET(c, &set0) && i++ == mesh_rank(m)) cpu = c;
    pin(cpu, &own);
    r = report_create(m, 1e9);
    report_set_compute(r, 0.05);
    one_step(r, m, &sp);
    pin(-1, &own);
    check_expect(!report_share(r)->shared && sp.pred_share == 1 &&
                     same_bits(sp.pred_step, sp.pred_dedicated),
                 "%d ranks on %d CPUs: not shared, the step's prediction %.17g s is the one on a "
                 "CPU per rank, bit for bit",
                 n, n, sp.pred_step);
    report_destroy(r);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[256];
    mesh *m = mesh_create(NULL, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    if (mesh_world_rank() == 0) synthetic();
    placed(m);
    mesh_destroy(m);
    int mine = check_finish("test_share") != 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    mesh_mpi_finalize();
    return all;
}
