/* schedule: the plan's third list, what this rank runs in a step (see plan.h): the order of its
 * stage's forwards and backwards under --schedule, with the pipeline's receives and sends around
 * them. Without a pipeline axis the trivial schedule: each micro-batch's forward then backward.
 * The executor (train/step/exec.c) runs the list; the timeline (pipeline.c) simulates it. */
#include "train/parallel/plan.h"

int plan_stage_order(pipe_schedule schedule, int64_t P, int64_t s, int64_t M, plan_action *out) {
    int n = 0;
    if (schedule == PIPE_GPIPE || P == 1) {
        for (int64_t j = 0; j < M; j++) out[n++] = (plan_action){PLAN_ACT_FWD, j, 0};
        for (int64_t j = M - 1; j >= 0; j--) out[n++] = (plan_action){PLAN_ACT_BWD, j, 0};
        return n;
    }
    const int64_t warm = P - s - 1 < M ? P - s - 1 : M;
    int64_t f = 0, b = 0;
    for (; f < warm; f++) out[n++] = (plan_action){PLAN_ACT_FWD, f, 0};
    for (; f < M; f++, b++) {
        out[n++] = (plan_action){PLAN_ACT_FWD, f, 0};
        out[n++] = (plan_action){PLAN_ACT_BWD, b, 0};
    }
    for (; b < M; b++) out[n++] = (plan_action){PLAN_ACT_BWD, b, 0};
    return n;
}

int64_t plan_actions_max(const plan *p) {
    return 6 * p->n_micro;
}

/* Appends a forward (fwd) or backward of micro-batch mb in slot k, with its stage's receive
 * before and send after. */
static int64_t expand(const plan *p, plan_action *out, int64_t n, int fwd, int64_t mb, int k) {
    const int first = p->pipe.index == 0, last = p->pipe.index == p->pipe.n - 1;
    if (fwd) {
        if (!first) out[n++] = (plan_action){PLAN_ACT_RECV_ACT, mb, k};
        out[n++] = (plan_action){PLAN_ACT_FWD, mb, k};
        if (!last) out[n++] = (plan_action){PLAN_ACT_SEND_ACT, mb, k};
    } else {
        if (!last) out[n++] = (plan_action){PLAN_ACT_RECV_GRAD, mb, k};
        out[n++] = (plan_action){PLAN_ACT_BWD, mb, k};
        if (!first) out[n++] = (plan_action){PLAN_ACT_SEND_GRAD, mb, k};
    }
    return n;
}

int64_t plan_actions(const plan *p, int train, plan_action *out) {
    const int64_t M = p->n_micro;
    int64_t n = 0;
    if (!train) {
        for (int64_t j = 0; j < M; j++) n = expand(p, out, n, 1, j, 0);
        return n;
    }
    if (p->pipe.n == 1) { /* the trivial schedule: each micro-batch's forward, then its backward */
        for (int64_t j = 0; j < M; j++) n = expand(p, out, expand(p, out, n, 1, j, 0), 0, j, 0);
        return n;
    }
    /* the stage's order, written after the receives and sends in place (2M entries at the end) */
    plan_action *order = out + plan_actions_max(p) - 2 * M;
    const int len = plan_stage_order(p->c.schedule, p->pipe.n, p->pipe.index, M, order);
    for (int i = 0; i < len; i++) {
        const plan_action a = order[i];
        n = expand(p, out, n, a.op == PLAN_ACT_FWD, a.mb, (int)(a.mb % p->nslots));
    }
    return n;
}
