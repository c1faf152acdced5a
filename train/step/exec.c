/* exec: the step executor (see exec.h).
 *
 * How it works. The plan lists this rank's actions (train/parallel/schedule.c). A forward of
 * micro-batch j in slot k reads its stage input (stage 0: the tokens' embedding; else what the
 * receive put into the slot), runs the stage's layers and keeps the slot's activations; the send
 * after it hands the stage output to the next stage without blocking (the slot is not written
 * again before that send has left). A backward starts from the loss (last stage) or from the
 * received dL/d(stage output), accumulates the gradients with scale 1/(M·|batch|) (the loss is
 * the mean over the global batch: M micro-batches on each of |batch| data shards; the model
 * divides by its rows), and sends dL/d(stage input) back. Before each backward the sharded run
 * learns which micro-batch it is (par_micro_begin: the reductions of ZeRO-1 and DP wait for the
 * last). The loss: the last stage's mean over its micro-batches, given to every stage and
 * averaged over the data shards. */
#include "train/step/exec.h"

#include <stdlib.h>

#include "mesh/coll.h"
#include "train/config/alloc.h"
#include "train/observe/trace.h"

struct exec {
    model *m;
    par *p;
    const plan *pl;
    mesh *mh;
    int axis;                   /* the pipeline axis, −1 without */
    int64_t M, rows, n;         /* micro-batches; a micro-batch's rows; floats of [rows, D] */
    plan_ptrs bufs;             /* the plan's buffers the executor owns, views below */
    float *dout;                /* received dL/d(stage output) */
    float *dsend;               /* [nslots][rows·D]: dL/d(input) being sent */
    mesh_p2p **fsend, **bsend;  /* per slot: the send in flight */
    sched_action *train, *eval; /* the action lists */
    int64_t ntrain, neval;
};

exec *exec_create(model *m, par *p, const plan *pl, mesh *mh) {
    exec *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->m = m, e->p = p, e->pl = pl, e->mh = mh;
    e->axis = pl->pipe.axes.n ? pl->pipe.axes.ax[0] : -1;
    e->M = pl->n_micro;
    e->rows = pl->rows;
    e->n = pl->rows * pl->s.D;
    const int ok = plan_alloc(pl, PLAN_OWNER_EXEC, &e->bufs) == 0;
    e->dout = e->bufs.p[BUF_PIPE_DOUT][0];
    e->dsend = e->bufs.p[BUF_PIPE_DSEND][0];
    e->fsend = calloc((size_t)pl->nslots, sizeof *e->fsend);
    e->bsend = calloc((size_t)pl->nslots, sizeof *e->bsend);
    const size_t max = (size_t)plan_actions_max(pl);
    e->train = calloc(max, sizeof *e->train);
    e->eval = calloc(max, sizeof *e->eval);
    if (!ok || !e->fsend || !e->bsend || !e->train || !e->eval) {
        exec_destroy(e);
        return NULL;
    }
    e->ntrain = plan_actions(pl, 1, e->train);
    e->neval = plan_actions(pl, 0, e->eval);
    return e;
}

/* Waits for every send in flight. */
static void sends_done(exec *e) {
    for (int k = 0; k < e->pl->nslots && e->fsend; k++)
        mesh_p2p_wait(e->fsend[k]), e->fsend[k] = NULL;
    for (int k = 0; k < e->pl->nslots && e->bsend; k++)
        mesh_p2p_wait(e->bsend[k]), e->bsend[k] = NULL;
}

void exec_destroy(exec *e) {
    if (!e) return;
    sends_done(e);
    plan_free(e->pl, PLAN_OWNER_EXEC, &e->bufs);
    ALLOC_FREE_ALL(e->fsend, e->bsend, e->train, e->eval, e);
}

/* What a run of actions counts: the forwards' losses, the backwards so far, the activations held.
 */
typedef struct {
    double loss;
    int64_t nbwd, inflight, peak;
} exec_run;

/* One action on micro-batch a->mb's tokens tok (rows of T+1), in activation slot k. */
static void act(exec *e, const sched_action *a, int k, const int32_t *tok, float scale,
                exec_run *r) {
    switch ((sched_op)a->op) {
    case SCHED_RECV_F:
        mesh_p2p_wait(e->fsend[k]); /* the slot's previous output has left */
        e->fsend[k] = NULL;
        mesh_recv(e->mh, e->axis, -1, model_stage_input(e->m, k), e->n);
        break;
    case SCHED_F:
        mesh_p2p_wait(e->fsend[k]);
        e->fsend[k] = NULL;
        trace_begin(TRACE_MICRO_FWD, a->mb);
        r->loss += model_stage_fwd(e->m, k, tok);
        trace_end(TRACE_MICRO_FWD);
        if (++r->inflight > r->peak) r->peak = r->inflight;
        break;
    case SCHED_SEND_F:
        e->fsend[k] = mesh_isend(e->mh, e->axis, +1, model_stage_output(e->m, k), e->n);
        break;
    case SCHED_RECV_B:
        mesh_recv(e->mh, e->axis, +1, e->dout, e->n);
        break;
    case SCHED_B: {
        const int last = e->pl->pipe.index == e->pl->pipe.n - 1;
        par_micro_begin(e->p, r->nbwd++, e->M);
        trace_begin(TRACE_MICRO_BWD, a->mb);
        model_stage_bwd(e->m, k, tok, last ? NULL : e->dout, scale);
        trace_end(TRACE_MICRO_BWD);
        r->inflight--;
        break;
    }
    case SCHED_SEND_B: {
        mesh_p2p_wait(e->bsend[k]);
        float *buf = e->dsend + (int64_t)k * e->n;
        floats_copy(buf, model_stage_dinput(e->m), e->n);
        e->bsend[k] = mesh_isend(e->mh, e->axis, -1, buf, e->n);
        break;
    }
    default: /* a split backward (SCHED_I, SCHED_W) needs the model's halves */
        CHECK(0, "exec: action %d is not one this model runs", (int)a->op);
    }
}

/* Runs n actions (train: micro-batch j in slot j mod nslots; an evaluation's all in slot 0);
 * returns the mean loss over the global batch (on every rank). */
static double run(exec *e, const sched_action *list, int64_t n, int train, const int32_t *tokens,
                  exec_run *r) {
    const plan *pl = e->pl;
    const int64_t T1 = pl->s.T + 1;
    const float scale = 1.0f / (float)(e->M * pl->batch.n);
    for (int64_t i = 0; i < n; i++) {
        const int k = train ? (int)(list[i].mb % pl->nslots) : 0;
        act(e, &list[i], k, tokens + list[i].mb * pl->micro_seqs * T1, scale, r);
    }
    sends_done(e);
    const int last = pl->pipe.index == pl->pipe.n - 1;
    return par_pipe_last_value(e->p, last ? r->loss / (double)e->M : 0.0);
}

double exec_step(exec *e, const int32_t *tokens, exec_stats *st) {
    const plan *pl = e->pl;
    exec_run r = {0, 0, 0, 0};
    const mesh_stat r0 = mesh_stats(e->mh, MESH_OP_RECV, -1);
    const double t0 = mesh_now();
    const double loss = run(e, e->train, e->ntrain, 1, tokens, &r);
    if (!st) return loss;
    *st = (exec_stats){0, 0, 0, 0};
    if (pl->pipe.n == 1) return loss;
    const double wall = mesh_now() - t0;
    const mesh_stat r1 = mesh_stats(e->mh, MESH_OP_RECV, -1);
    st->peak_inflight = r.peak;
    st->act_bytes = r.peak * model_activation_bytes(e->m);
    st->bubble = par_pipe_mean(e->p, wall > 0 ? (r1.wait_seconds - r0.wait_seconds) / wall : 0);
    st->bubble_ideal = (double)(pl->pipe.n - 1) / (double)(e->M + pl->pipe.n - 1);
    return loss;
}

double exec_eval(exec *e, const int32_t *tokens) {
    exec_run r = {0, 0, 0, 0};
    return run(e, e->eval, e->neval, 0, tokens, &r);
}
