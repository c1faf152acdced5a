/* pipe_pred: the predicted pipeline phase of a step. See pipe_pred.h. */
#include "train/step/pipe_pred.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/errmsg.h"

pipe_stage_cost pipe_pred_tensor_layer(const plan *pl, pipe_price_fn price, void *ctx) {
    pipe_stage_cost tp = {0, 0, 0};
    if (pl->tensor.n == 1) return tp;
    for (int i = 0; i < pl->ncall; i++) {
        const plan_call *c = &pl->call[i];
        if (c->role != PLAN_ROLE_TENSOR || c->path != PLAN_CRITICAL ||
            (c->pass != PLAN_FWD && c->pass != PLAN_BWD))
            continue;
        const mesh_coll_call call = plan_coll_call(pl, c->kind, c->count);
        *(c->pass == PLAN_FWD ? &tp.f : &tp.b) += c->times * price(ctx, &call);
    }
    return tp;
}

void pipe_pred_rank_costs(const plan *pl, const ktime_step *kt, const pipe_stage_cost *tp,
                          double share, pipe_stage_cost *out) {
    const double m = (double)pl->n_micro / share, v = (double)pl->chunks; /* per micro-batch × share */
    const double *part = kt->part;
    const pipe_stage_cost body = {(part[PART_FWD_ATTN] + part[PART_FWD_MLP]) / m / v,
                                  (part[PART_BWD_ATTN] + part[PART_BWD_MLP]) / m / v,
                                  kt->wgrad[0] / m / v};
    const pipe_stage_cost head = {part[PART_FWD_OTHER] / m, part[PART_BWD_OTHER] / m,
                                  kt->wgrad[1] / m};
    const int64_t last = pl->pipe.n * pl->chunks - 1;
    const double layers = (double)(pl->l1 - pl->l0) / v; /* a chunk's */
    for (int k = 0; k < pl->chunks; k++) {
        out[k] = body;
        if (tp) out[k].f += layers * tp->f, out[k].b += layers * tp->b;
        if (plan_chunk_stage(pl, k) == last)
            out[k].f += head.f, out[k].b += head.b, out[k].w += head.w;
    }
}

int pipe_pred_simulate(const plan *pl, const pipe_stage_cost *cost, double p2p, double share,
                       double cores, pipe_pred_result *out, char *err, size_t len) {
    sched_table t;
    const sched_spec sp = plan_sched_spec(pl);
    if (sched_init(&t, &sp, err, len) < 0) return -1;
    double *c = malloc(sizeof *c * 4 * (size_t)t.stages);
    if (!c) {
        sched_free(&t);
        return errmsg_fail(err, len, "pipeline prediction: out of memory");
    }
    double *f = c, *b = c + t.stages, *i = b + t.stages, *w = i + t.stages;
    for (int s = 0; s < t.stages; s++) {
        f[s] = share * cost[s].f, b[s] = share * cost[s].b, w[s] = share * cost[s].w;
        i[s] = b[s] - w[s] > 0 ? b[s] - w[s] : 0;
    }
    const sched_costs sc = {0, 0, 0, 0, p2p, f, b, i, w};
    sched_result r;
    const int rc = sched_simulate_shared(&t, &sc, cores, &r, err, len);
    if (rc == 0) {
        out->makespan = r.makespan;
        out->idle = r.makespan - r.busy[pl->pipe.index];
        out->bubble = r.bubble;
        sched_result_free(&r);
    }
    free(c);
    sched_free(&t);
    return rc;
}

/* Collective over: the pipeline axis. Every pipeline rank's n doubles (bit for bit, as 2n floats)
 * into all[P·n] in rank order. */
static void gather(const plan *pl, mesh *m, const double *mine, int n, double *all) {
    const int P = (int)pl->pipe.n;
    float *buf = calloc((size_t)(2 * n * P), sizeof *buf);
    CHECK(buf != NULL, "pipeline figures: out of memory");
    float *own = buf + 2 * n * pl->pipe.index; /* this rank's own block, gathered in place */
    memcpy(own, mine, sizeof *mine * (size_t)n);
    mesh_all_gather(m, pl->pipe.axes, buf, own, 2 * n, MESH_ALG_MPI);
    memcpy(all, buf, sizeof *all * (size_t)(n * P));
    free(buf);
}

/* The stages' costs from every rank's chunks' (rank r's chunk k at all[r·stride + k]). */
static void to_stages(const plan *pl, const pipe_stage_cost *all, int stride,
                      pipe_stage_cost *stage) {
    for (int r = 0; r < (int)pl->pipe.n; r++)
        for (int k = 0; k < pl->chunks; k++)
            stage[plan_rank_stage(pl, r, k)] = all[r * stride + k];
}

int pipe_pred_measure(const plan *pl, mesh *m, const ktime_step *kt, const pipe_stage_cost *tp,
                      double p2p, double share, pipe_pred_result out[3], char *err, size_t len) {
    const int P = (int)pl->pipe.n, v = pl->chunks;
    /* per rank its chunks' costs on a CPU of its own, then with the compute × share */
    pipe_stage_cost *all = calloc((size_t)(2 * P * v), sizeof *all);
    pipe_stage_cost *stage = calloc((size_t)(P * v), sizeof *stage);
    if (mesh_agree(mesh_world_comm(m), all && stage ? 0 : -1) < 0) {
        free(all), free(stage);
        return errmsg_fail(err, len, "pipeline prediction: out of memory");
    }
    pipe_stage_cost *mine = all + 2 * pl->pipe.index * v;
    pipe_pred_rank_costs(pl, kt, tp, 1.0, mine);
    pipe_pred_rank_costs(pl, kt, tp, share, mine + v);
    gather(pl, m, (const double *)mine, 6 * v, (double *)all);
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        to_stages(pl, all + k * v, 2 * v, stage);
        rc = pipe_pred_simulate(pl, stage, p2p, 1.0, 0, &out[k], err, len);
    }
    /* the P ranks on P / share CPUs, each computing at its share of them when it computes */
    to_stages(pl, all, 2 * v, stage);
    if (rc == 0) rc = pipe_pred_simulate(pl, stage, p2p, 1.0, P / share, &out[2], err, len);
    free(all), free(stage);
    return rc;
}

int pipe_pred_figures(const plan *pl, const double *all, double p2p, pipe_step_figures *out,
                      char *err, size_t len) {
    const int P = (int)pl->pipe.n, v = pl->chunks, n = PIPE_STEP_DOUBLES(v);
    pipe_stage_cost *chunks = calloc((size_t)(P * v), sizeof *chunks);
    pipe_stage_cost *stage = calloc((size_t)(P * v), sizeof *stage);
    *out = (pipe_step_figures){0};
    if (!chunks || !stage) {
        free(chunks), free(stage);
        return errmsg_fail(err, len, "pipeline figures: out of memory");
    }
    double busy = 0, wait = 0, other = 0;
    for (int r = 0; r < P; r++) {
        const double *x = all + r * n;
        if (x[0] > out->makespan) out->makespan = x[0];
        busy += x[1], wait += x[2], other += x[0] - x[1] - x[2];
        memcpy(chunks + r * v, x + 3, sizeof *chunks * (size_t)v);
    }
    /* idle over total, one division, as calc's simulator */
    const double total = P * out->makespan;
    out->bubble = total > 0 ? (total - busy) / total : 0;
    out->wait = total > 0 ? wait / total : 0;
    out->other = total > 0 ? other / total : 0;
    to_stages(pl, chunks, v, stage);
    const int rc = pipe_pred_simulate(pl, stage, p2p, 1.0, 0, &out->sim, err, len);
    free(chunks), free(stage);
    return rc;
}

int pipe_pred_step(const plan *pl, mesh *m, const pipe_rank_step *mine, double p2p,
                   pipe_step_figures *out, char *err, size_t len) {
    const int P = (int)pl->pipe.n, v = pl->chunks, n = PIPE_STEP_DOUBLES(v);
    double *own = calloc((size_t)n, sizeof *own), *all = calloc((size_t)(n * P), sizeof *all);
    CHECK(own && all, "pipeline figures: out of memory");
    own[0] = mine->span, own[1] = mine->busy, own[2] = mine->wait;
    memcpy(own + 3, mine->chunk, sizeof *mine->chunk * (size_t)v);
    gather(pl, m, own, n, all);
    const int rc = pipe_pred_figures(pl, all, p2p, out, err, len);
    free(own), free(all);
    return rc;
}
