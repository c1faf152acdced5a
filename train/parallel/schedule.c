/* schedule: the plan's third list, what this rank runs in a step (see plan.h): the order of its
 * stages' forwards and backwards under --schedule, with the pipeline's receives and sends around
 * them, as calc/schedule.h's actions (GPipe's and 1F1B's written here, the interleaved and
 * zero-bubble ones calc's tables as they are), and what the schedule asks of the rest of the plan:
 * its checks, the rank's chunks and activation slots. Without a pipeline axis the trivial
 * schedule: each micro-batch's forward then backward. The executor (train/step/exec.c) runs the
 * list; the timeline (pipeline.c) simulates the stages' orders. */
#include "train/parallel/plan.h"

#include "mesh/errmsg.h"
#include "mesh/mesh.h"

static sched_action action(sched_op op, int64_t s, int64_t mb) {
    return (sched_action){(int32_t)op, (int32_t)s, (int32_t)mb};
}

int plan_stage_order(pipe_schedule schedule, int64_t P, int64_t s, int64_t M, sched_action *out) {
    int n = 0;
    if (schedule == PIPE_GPIPE) {
        for (int64_t j = 0; j < M; j++) out[n++] = action(SCHED_F, s, j);
        for (int64_t j = 0; j < M; j++) out[n++] = action(SCHED_B, s, j);
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
    return 7 * (int64_t)p->chunks * p->n_micro;
}

sched_kind plan_sched_kind(pipe_schedule s) {
    switch (s) {
    case PIPE_GPIPE:
        return SCHED_GPIPE;
    case PIPE_1F1B:
        return SCHED_1F1B;
    case PIPE_INTERLEAVED:
        return SCHED_INTERLEAVED;
    case PIPE_ZB_V:
        return SCHED_ZB_V;
    default:
        return SCHED_ZB_H1;
    }
}

sched_spec plan_sched_spec(const plan *p) {
    return (sched_spec){plan_sched_kind(p->c.schedule), (int)p->pipe.n, (int)p->c.virtual_stages,
                        (int)p->n_micro, p->s.L};
}

/* The schedules this file lists itself (GPipe's and 1F1B's, the same as calc's); the others are
 * calc's tables. */
static int own_order(const plan *p) {
    return p->pipe.n == 1 || p->c.schedule == PIPE_GPIPE || p->c.schedule == PIPE_1F1B;
}

int plan_schedule_check(const plan *p, char *err, size_t errlen) {
    const config *c = &p->c;
    if (p->pipe.n == 1 && c->virtual_stages <= 1) return 0; /* no pipeline: no schedule */
    const sched_spec sp = plan_sched_spec(p);
    if (sched_check(&sp, err, errlen) < 0) return -1;
    if (c->schedule == PIPE_INTERLEAVED && p->pipe.n > 2 && !p->pipe.wraps[0])
        return errmsg_fail(err, errlen,
                           "--schedule interleaved sends the last pipeline rank's chunk output to "
                           "the first rank: the pipeline axis (%lld ranks) must wrap (do not "
                           "list it in --open; under --emulate the chip's own wraparound "
                           "applies: v5e and v6e wrap an axis of 16, v3 of 32, v4p and v5p "
                           "whole 4x4x4 cubes)",
                           (long long)p->pipe.n);
    return 0;
}

/* Rank r's most (stage, micro-batch) pairs in flight on one stage: from F to B, or to W. */
static int table_slots(const sched_table *t, int r) {
    int inflight[64] = {0}, most = 1;
    for (int64_t i = t->off[r]; i < t->off[r + 1]; i++) {
        const sched_action *a = &t->act[i];
        const int k = a->stage / t->spec.p;
        if (a->op == SCHED_F && ++inflight[k] > most) most = inflight[k];
        if (a->op == SCHED_B || a->op == SCHED_W) inflight[k]--;
    }
    return most;
}

void plan_schedule_stage(plan *p) {
    p->chunks = 1, p->split = 0;
    if (own_order(p)) return;
    sched_table t;
    char err[256];
    const sched_spec sp = plan_sched_spec(p);
    CHECK(sched_init(&t, &sp, err, sizeof err) == 0, "plan: %s (not checked)", err);
    CHECK(t.spec.v <= 64, "plan: %d virtual stages", t.spec.v);
    p->chunks = t.spec.v;
    p->split = t.split;
    p->nslots = table_slots(&t, (int)p->pipe.index);
    sched_free(&t);
}

int plan_pipe_dir(const plan *p, int dir) {
    const int64_t to = p->pipe.index + dir;
    if ((to >= 0 && to < p->pipe.n) || p->pipe.wraps[0]) return dir;
    CHECK(p->pipe.n == 2, "plan: the pipeline's neighbour past an open end");
    return -dir;
}

int64_t plan_rank_stage(const plan *p, int64_t r, int k) {
    if (p->c.schedule == PIPE_ZB_V && p->pipe.n > 1) return k == 0 ? r : 2 * p->pipe.n - 1 - r;
    return k * p->pipe.n + r;
}

int64_t plan_chunk_stage(const plan *p, int k) {
    return plan_rank_stage(p, p->pipe.index, k);
}

int64_t plan_stage_rank(const plan *p, int64_t s) {
    const int64_t P = p->pipe.n;
    if (p->c.schedule == PIPE_ZB_V && P > 1) return s < P ? s : 2 * P - 1 - s;
    return s % P;
}

int plan_holds_head(const plan *p) { /* the last stage: round-robin's on rank |Z|−1, the V's on 0 */
    return p->pipe.index == (p->c.schedule == PIPE_ZB_V && p->pipe.n > 1 ? 0 : p->pipe.n - 1);
}

model_stage_info plan_stage_info(const plan *p) {
    return (model_stage_info){p->l0, p->l1, p->nslots, p->chunks, p->split,
                              p->c.schedule == PIPE_ZB_V && p->pipe.n > 1};
}

/* Appends the forward (fwd) or backward of micro-batch mb on stage s with its receive before and
 * send after it, where the neighbouring stage (of the stages 0 .. |Z|·chunks − 1) is on another
 * rank (the turn of zb-v's V is on one rank: the executor hands the data over). */
static int64_t expand(const plan *p, sched_action *out, int64_t n, int fwd, int64_t s, int64_t mb) {
    const int64_t r = p->pipe.index;
    const int prev = s > 0 && plan_stage_rank(p, s - 1) != r,
              next = s < p->pipe.n * p->chunks - 1 && plan_stage_rank(p, s + 1) != r;
    if (fwd) {
        if (prev) out[n++] = action(SCHED_RECV_F, s, mb);
        out[n++] = action(SCHED_F, s, mb);
        if (next) out[n++] = action(SCHED_SEND_F, s, mb);
    } else {
        if (next) out[n++] = action(SCHED_RECV_B, s, mb);
        out[n++] = action(SCHED_B, s, mb);
        if (prev) out[n++] = action(SCHED_SEND_B, s, mb);
    }
    return n;
}

/* calc's table of this run, this rank's list copied into out; returns its length. */
static int64_t table_actions(const plan *p, sched_action *out) {
    sched_table t;
    char err[256];
    const sched_spec sp = plan_sched_spec(p);
    CHECK(sched_init(&t, &sp, err, sizeof err) == 0, "plan: %s (not checked)", err);
    const int r = (int)p->pipe.index;
    const int64_t n = t.off[r + 1] - t.off[r];
    CHECK(n <= plan_actions_max(p), "plan: %lld actions", (long long)n);
    for (int64_t i = 0; i < n; i++) out[i] = t.act[t.off[r] + i];
    sched_free(&t);
    return n;
}

int64_t plan_actions(const plan *p, int train, sched_action *out) {
    const int64_t M = p->n_micro, s = p->pipe.index;
    int64_t n = 0;
    if (!train) { /* each micro-batch through the pipeline, chunk after chunk */
        for (int64_t j = 0; j < M; j++)
            for (int k = 0; k < p->chunks; k++) n = expand(p, out, n, 1, plan_chunk_stage(p, k), j);
        return n;
    }
    if (p->pipe.n == 1) { /* the trivial schedule: each micro-batch's forward, then its backward */
        for (int64_t j = 0; j < M; j++) n = expand(p, out, expand(p, out, n, 1, 0, j), 0, 0, j);
        return n;
    }
    if (!own_order(p)) return table_actions(p, out);
    /* the stage's order, written at the end of out and read ahead of the expansion, which writes
     * at most 3 entries per order entry from the start: entry i's at most 3i + 2 < 5M + i + 1 */
    sched_action *order = out + plan_actions_max(p) - 2 * M;
    const int len = plan_stage_order(p->c.schedule, p->pipe.n, s, M, order);
    for (int i = 0; i < len; i++) {
        const sched_action a = order[i];
        n = expand(p, out, n, a.op == SCHED_F, s, a.mb);
    }
    return n;
}
