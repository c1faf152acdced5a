/* pipe: pipeline parallelism over one mesh axis Z (the book's W_in[L_Z, D, F]).
 *
 * How it works. The L layers are cut into |Z| = P contiguous stages; stage 0 also owns the
 * embedding, stage P−1 the final norm, unembedding and loss. A step's batch (per data shard) is
 * cut into M micro-batches, and each stage runs its list of actions (plan.h, schedule.c): GPipe's
 * or 1F1B's order of forwards and backwards, each forward after the receive of its input from
 * s−1 (blocking: a wait there is pipeline bubble) and before the send of its output to s+1, each
 * backward between the receive of dL/d(output) from s+1 and the send of dL/d(input) to s−1. The
 * step executor (train/step/exec.c) runs the list; activations and their gradients are the full
 * residual stream [b·T, D]. Gradient reductions over the data axes start at each stage's last
 * backward, as without pipelining. Here: the timeline of a schedule (a unit-time simulation of
 * every stage's order), and the model's hooks outside a training step (sampling). */
#include "train/parallel/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "train/parallel/par_impl.h"

void pipe_timeline(pipe_schedule schedule, int64_t P, int64_t M, FILE *out) {
    /* unit-time simulation (F = 1 slot, B = 2 slots): an action starts when its stage is free and
     * its input exists (F: F of the stage before; B: B of the stage after and F of its own) */
    enum { MAXT = 4096 };
    sched_action *acts = calloc((size_t)(2 * M), sizeof *acts);
    int64_t *fdone = calloc((size_t)(P * M), sizeof *fdone),
            *bdone = calloc((size_t)(P * M), sizeof *bdone);
    int *next = calloc((size_t)P, sizeof *next);
    int64_t *free_at = calloc((size_t)P, sizeof *free_at);
    char *grid = calloc((size_t)(P * MAXT), 4);
    if (!acts || !fdone || !bdone || !next || !free_at || !grid) goto done;
    for (int64_t i = 0; i < P * M; i++) fdone[i] = bdone[i] = -1;
    int64_t tmax = 0, remaining = 2 * P * M;
    while (remaining > 0) {
        int progressed = 0;
        for (int64_t s = 0; s < P; s++) {
            const int n = plan_stage_order(schedule, P, s, M, acts);
            if (next[s] >= n) continue;
            const sched_action a = acts[next[s]];
            const int fwd = a.op == SCHED_F;
            int64_t ready;
            if (fwd)
                ready = s == 0 ? 0 : fdone[(s - 1) * M + a.mb];
            else {
                ready = s == P - 1 ? fdone[s * M + a.mb] : bdone[(s + 1) * M + a.mb];
                if (fdone[s * M + a.mb] < 0) ready = -1;
            }
            if (ready < 0) continue;
            int64_t t = ready > free_at[s] ? ready : free_at[s], d = fwd ? 1 : 2;
            for (int64_t u = t; u < t + d && u < MAXT / 4; u++) {
                char *cell = grid + (s * MAXT + u * 4); /* "F7", "B12": micro-batch mod 100 */
                const int mb = (int)(a.mb % 100);
                cell[0] = fwd ? 'F' : 'B';
                if (mb >= 10) *++cell = (char)('0' + mb / 10);
                cell[1] = (char)('0' + mb % 10);
            }
            free_at[s] = t + d;
            (fwd ? fdone : bdone)[s * M + a.mb] = t + d;
            if (t + d > tmax) tmax = t + d;
            next[s]++, remaining--, progressed = 1;
        }
        if (!progressed) break;
    }
    fprintf(out,
            "pipeline timeline (%s, P = %lld stages, M = %lld micro-batches; one column = "
            "one forward time, backward = 2): ideal bubble (P−1)/(M+P−1) = %.3f\n",
            schedule == PIPE_GPIPE ? "GPipe" : "1F1B", (long long)P, (long long)M,
            (double)(P - 1) / (double)(M + P - 1));
    for (int64_t s = 0; s < P; s++) {
        fprintf(out, "  stage %lld |", (long long)s);
        for (int64_t u = 0; u < tmax && u < MAXT / 4; u++) {
            const char *c = grid + (s * MAXT + u * 4);
            fprintf(out, "%-3s", c[0] ? c : " .");
        }
        fprintf(out, "|\n");
    }
done:
    free(acts), free(fdone), free(bdone), free(next), free(free_at), free(grid);
}

/* ---------------------------------------------------------------- the model's hooks outside a
 * training step (sampling) */

void par_hk_stage_recv(void *ctx, float *x, int64_t n, int dir) {
    struct par *p = ctx;
    if (p->pl->pipe.n > 1) mesh_recv(p->m, p->pl->pipe.axes.ax[0], plan_pipe_dir(p->pl, dir), x, n);
}

void par_hk_stage_send(void *ctx, const float *x, int64_t n, int dir) {
    struct par *p = ctx;
    if (p->pl->pipe.n > 1)
        mesh_p2p_wait(mesh_isend(p->m, p->pl->pipe.axes.ax[0], plan_pipe_dir(p->pl, dir), x, n));
}

void par_hk_pipe_share_last(void *ctx, float *x, int64_t n) {
    struct par *p = ctx;
    if (p->pl->pipe.n > 1) par_run(p, PLAN_PIPE_SHARE, x, x, n);
}
