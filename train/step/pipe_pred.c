/* pipe_pred: the predicted pipeline phase of a step. See pipe_pred.h. */
#include "train/step/pipe_pred.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/errmsg.h"

void pipe_pred_rank_costs(const plan *pl, const ktime_step *kt, pipe_stage_cost *out) {
    const double m = (double)pl->n_micro, v = (double)pl->chunks;
    const double *part = kt->part;
    const pipe_stage_cost body = {(part[PART_FWD_ATTN] + part[PART_FWD_MLP]) / m / v,
                                  (part[PART_BWD_ATTN] + part[PART_BWD_MLP]) / m / v,
                                  kt->wgrad[0] / m / v};
    const pipe_stage_cost head = {part[PART_FWD_OTHER] / m, part[PART_BWD_OTHER] / m,
                                  kt->wgrad[1] / m};
    const int64_t last = pl->pipe.n * pl->chunks - 1;
    for (int k = 0; k < pl->chunks; k++) {
        out[k] = body;
        if (plan_chunk_stage(pl, k) == last)
            out[k].f += head.f, out[k].b += head.b, out[k].w += head.w;
    }
}

int pipe_pred_simulate(const plan *pl, const pipe_stage_cost *cost, double p2p, double share,
                       pipe_pred_result *out, char *err, size_t len) {
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
    const int rc = sched_simulate(&t, &sc, &r, err, len);
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

int pipe_pred_measure(const plan *pl, mesh *m, const ktime_step *kt, double p2p, double share,
                      pipe_pred_result out[2], char *err, size_t len) {
    const int P = (int)pl->pipe.n, v = pl->chunks;
    const int64_t per = 2 * 3 * v; /* floats of one rank's v costs (doubles, bit for bit) */
    pipe_stage_cost *mine = calloc((size_t)v, sizeof *mine);
    pipe_stage_cost *stage = calloc((size_t)(P * v), sizeof *stage);
    float *all = calloc((size_t)(P * per), sizeof *all);
    if (mesh_agree(mesh_world_comm(m), mine && stage && all ? 0 : -1) < 0) {
        free(mine), free(stage), free(all);
        return errmsg_fail(err, len, "pipeline prediction: out of memory");
    }
    pipe_pred_rank_costs(pl, kt, mine);
    float *buf = all + pl->pipe.index * per; /* this rank's own block, gathered in place */
    memcpy(buf, mine, sizeof *mine * (size_t)v);
    mesh_all_gather(m, pl->pipe.axes, all, buf, per, MESH_ALG_MPI);
    for (int r = 0; r < P; r++)
        for (int k = 0; k < v; k++)
            memcpy(&stage[plan_rank_stage(pl, r, k)], (const char *)(all + r * per) + sizeof *mine * (size_t)k,
                   sizeof *mine);
    int rc = pipe_pred_simulate(pl, stage, p2p, 1.0, &out[0], err, len);
    if (rc == 0) rc = pipe_pred_simulate(pl, stage, p2p, share, &out[1], err, len);
    free(mine), free(stage), free(all);
    return rc;
}
