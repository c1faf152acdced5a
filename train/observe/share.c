/* share: the prediction on a shared host. See share.h. */
#include "train/observe/share.h"

#include <stdio.h>

share_model share_model_of(const share_host *h, int n, int threads, int yields) {
    share_model m = {1.0, 1.0, 0, 1, 1, threads > 1 ? threads : 1, yields};
    double worst = -1;
    for (int i = 0; i < n; i++) {
        const int c = h[i].cpus > 0 ? h[i].cpus : 1;
        const double k = (double)h[i].ranks * m.threads / c;
        if (k > worst) worst = k, m.ranks = h[i].ranks, m.cpus = c;
    }
    m.per_cpu = worst > 0 ? worst : 1.0;
    m.shared = m.per_cpu > 1.0;
    m.compute = m.shared && m.threads == 1 ? m.per_cpu : 1.0;
    return m;
}

const char *share_describe(const share_model *m, char *buf, size_t len) {
    const char *wait = m->yields == 1 ? "MPI's waits yield the CPU"
                       : m->yields == 0
                           ? "MPI's waits spin until the time slice ends (mpirun --mca "
                             "mpi_yield_when_idle 1 makes them yield)"
                           : "MPI does not say whether its waits yield";
    int n = snprintf(buf, len, "%d rank%s x %d BLAS thread%s on %d CPU%s%s: %.2g thread%s per CPU",
                     m->ranks, m->ranks > 1 ? "s" : "", m->threads, m->threads > 1 ? "s" : "",
                     m->cpus, m->cpus > 1 ? "s" : "", m->shared ? " (the most shared host)" : "",
                     m->per_cpu, m->per_cpu > 1 ? "s" : "");
    if (n < 0 || (size_t)n >= len) return buf;
    if (!m->shared)
        snprintf(buf + n, len - (size_t)n, " (no CPU shared: pred is on a CPU per rank)");
    else if (m->compute > 1)
        snprintf(buf + n, len - (size_t)n,
                 "; %s | pred serves each host's compute by its CPUs (x%.2g) and prices the "
                 "collectives by links timed on the shared CPUs; pred_dedicated: a CPU per rank",
                 wait, m->compute);
    else
        snprintf(buf + n, len - (size_t)n,
                 "; %s | the kernels were timed on the wall clock at the host's share: pred = "
                 "pred_dedicated",
                 wait);
    return buf;
}
