/* inspect: wiring of the inspection flags, and the honest-MFU lines. See inspect.h. */
#include "train/cli/inspect.h"

#include "mesh/coll.h"
#include "mesh/where.h"
#include "train/model/model.h"
#include "train/observe/trace.h"

/* Events one rank records in a step: per micro-batch, per layer two spans and up to ~10 calls
 * (TP gathers and scatters, FSDP gathers, gradient reductions), plus the step's own; generous,
 * since a full buffer drops events. */
static int64_t trace_capacity(const config *c) {
    const int64_t micro =
        c->pipe_axis[0] && c->microbatches > 0 ? c->microbatches : c->batch / c->micro_batch;
    const int64_t per_step = micro * (16 * c->shape.L + 18) + 128;
    const int64_t evals = c->eval_every > 0 ? c->steps / c->eval_every + 1 : 0;
    int64_t cap = (c->steps + evals * c->eval_batches + 2) * per_step + 16384;
    return cap > (1 << 20) ? (1 << 20) : cap;
}

trace *inspect_start(const config *c, mesh *m) {
    char err[1200];
    mesh_where_signal(m);
    mesh_set_verify(m, c->debug_collectives);
    if (c->timeout > 0 && mesh_watchdog_start(m, c->timeout) < 0)
        mesh_exit_error("--timeout %g: cannot start the watchdog thread", c->timeout);
    trace *tr = trace_create(m, c->trace, trace_capacity(c), err, sizeof err);
    if (!tr) mesh_exit_error("%s", err);
    if (!c->quiet && c->timeout > 0)
        mesh_log("watchdog: a collective, p2p wait or step lasting %g s ends the job (--timeout)\n",
                 c->timeout);
    if (!c->quiet && c->debug_collectives)
        mesh_log("checking that the ranks of each axis set make the same collective "
                 "(--debug-collectives)\n");
    return tr;
}

void inspect_finish(const config *c, mesh *m, trace *tr) {
    char err[1200];
    int64_t dropped = 0;
    if (trace_finish(tr, &dropped, err, sizeof err) < 0) mesh_exit_error("%s", err);
    if (c->trace[0] && !c->quiet) {
        mesh_log("wrote the timeline to %s (open it in https://ui.perfetto.dev or "
                 "chrome://tracing)\n",
                 c->trace);
        if (dropped > 0)
            mesh_log("warning: %lld trace events were dropped (the buffer was full): the timeline "
                     "is incomplete\n",
                     (long long)dropped);
    }
    mesh_watchdog_stop(m);
}

double inspect_cpu_peak(mesh *m, int threads, cpupeak *host) {
    cpupeak cp;
    cpupeak_detect(&cp);
    if (host) *host = cp;
    const int on_host = mesh_host_ranks(m);
    double cores = (double)cp.cores / (double)on_host;
    if (cores > threads) cores = threads;
    const float share = cp.known ? (float)(cp.core_flops * cores) : 0.0f;
    const int known = mesh_agree(mesh_world_comm(m), cp.known ? 0 : -1) == 0;
    mesh_axes all = {mesh_ndims(m), {0, 1, 2}};
    float sum = 0;
    mesh_all_reduce(m, all, &sum, &share, 1, MESH_ALG_MPI);
    return known ? (double)sum : 0.0;
}

void inspect_print_mfu(const model_shape *s, double sgemm_peak, double cpu_peak,
                       const cpupeak *host, int nranks, FILE *out) {
    if (mesh_world_rank() != 0) return;
    const double P = shape_matmul_params(s);
    fprintf(out,
            "FLOPs per token = 6·P + 6·L·T·N·H = 6 x %.4g + 6·%lld·%lld·%lld·%lld = %.4g "
            "(P = L·(D·(N+2K)·H + N·H·D + 3·D·F) + D·V: matmul parameters; forward + "
            "backward; causal attention)\n",
            P, (long long)s->L, (long long)s->T, (long long)s->N, (long long)s->H,
            shape_flops_per_token(s));
    fprintf(out, "MFU peaks: measured sgemm %.4g GFLOP/s (%d rank%s together); CPU nominal ",
            sgemm_peak / 1e9, nranks, nranks > 1 ? "s" : "");
    if (cpu_peak > 0)
        fprintf(out,
                "%.4g GFLOP/s (%s: %d cores x %.3g GHz (%s) x %d FP32 FLOP/cycle (%s); "
                "counted: min(cores, ranks x threads))\n",
                cpu_peak / 1e9, host->model[0] ? host->model : "cpu", host->cores, host->ghz,
                host->ghz_from, host->flops_per_cycle, host->isa);
    else
        fprintf(out, "unknown (%s)\n", host->why[0] ? host->why : "another rank's host");
}
