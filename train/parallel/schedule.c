/* schedule: the plan's third list, what this rank runs in a step (see plan.h): the order of its
 * stage's forwards and backwards under --schedule, with the pipeline's receives and sends around
 * them, as calc/schedule.h's actions. Without a pipeline axis the trivial schedule: each
 * micro-batch's forward then backward. The executor (train/step/exec.c) runs the list; the
 * timeline (pipeline.c) simulates the stages' orders. */
#include "train/parallel/plan.h"

static sched_action action(sched_op op, int64_t s, int64_t mb) {
    return (sched_action){(int32_t)op, (int32_t)s, (int32_t)mb};
}

int plan_stage_order(pipe_schedule schedule, int64_t P, int64_t s, int64_t M, sched_action *out) {
    int n = 0;
    if (schedule == PIPE_GPIPE) {
        for (int64_t j = 0; j < M; j++) out[n++] = action(SCHED_F, s, j);
        for (int64_t j = M - 1; j >= 0; j--) out[n++] = action(SCHED_B, s, j);
        return n;
    }
    const int64_t warm = P - s - 1 < M ? P - s - 1 : M;
    int64_t f = 0, b = 0;
    for (; f < warm; f++) out[n++] = action(SCHED_F, s, f);
    for (; f < M; f++, b++) {
        out[n++] = action(SCHED_F, s, f);
        out[n++] = action(SCHED_B, s, b);
    }
    for (; b < M; b++) out[n++] = action(SCHED_B, s, b);
    return n;
}

int64_t plan_actions_max(const plan *p) {
    return 6 * p->n_micro;
}

/* Appends the forward (fwd) or backward of micro-batch mb with this stage's receive before and
 * send after it. */
static int64_t expand(const plan *p, sched_action *out, int64_t n, int fwd, int64_t mb) {
    const int64_t s = p->pipe.index;
    const int first = s == 0, last = s == p->pipe.n - 1;
    if (fwd) {
        if (!first) out[n++] = action(SCHED_RECV_F, s, mb);
        out[n++] = action(SCHED_F, s, mb);
        if (!last) out[n++] = action(SCHED_SEND_F, s, mb);
    } else {
        if (!last) out[n++] = action(SCHED_RECV_B, s, mb);
        out[n++] = action(SCHED_B, s, mb);
        if (!first) out[n++] = action(SCHED_SEND_B, s, mb);
    }
    return n;
}

int64_t plan_actions(const plan *p, int train, sched_action *out) {
    const int64_t M = p->n_micro;
    int64_t n = 0;
    if (!train) {
        for (int64_t j = 0; j < M; j++) n = expand(p, out, n, 1, j);
        return n;
    }
    if (p->pipe.n == 1) { /* the trivial schedule: each micro-batch's forward, then its backward */
        for (int64_t j = 0; j < M; j++) n = expand(p, out, expand(p, out, n, 1, j), 0, j);
        return n;
    }
    /* the stage's order, written at the end of out and read ahead of the expansion, which writes
     * at most 3 entries per order entry from the start: entry i's at most 3i + 2 < 4M + i + 1 */
    sched_action *order = out + plan_actions_max(p) - 2 * M;
    const int len = plan_stage_order(p->c.schedule, p->pipe.n, p->pipe.index, M, order);
    for (int i = 0; i < len; i++) {
        const sched_action a = order[i];
        n = expand(p, out, n, a.op == SCHED_F, a.mb);
    }
    return n;
}
