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
 * averaged over the data shards.
 *
 * Interleaved and zero-bubble lists are calc's tables: an action's stage s is chunk s / |Z| of
 * this rank, whose input, output and sends in flight are the slot's and the chunk's; the last
 * rank's chunk sends to the first rank's next (the axis wraps; on 2 ranks the other side). A split
 * backward runs as I (the input gradient, sent on at once) and, later, W (the weight gradients
 * from what I kept in the slot); each counts its own micro-batches for par_micro_begin, so the
 * reductions start after the last W. zb-v's V: chunk 0 is stage r, chunk 1 stage 2|Z|−1−r, whose
 * messages go the other way; at the turn (rank |Z|−1 holds stages |Z|−1 and |Z|) the forward
 * copies chunk 0's output into chunk 1's input, and chunk 1's input gradient waits in its send
 * buffer for chunk 0's backward. Every message goes to the rank holding its stage's neighbour,
 * activations and gradients on two p2p channels: a V's receives of one kind come in the order of
 * their sends, not those of both kinds together (calc's sched_fifo). */
#include "train/step/exec.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "train/config/alloc.h"
#include "train/observe/trace.h"
#include "train/step/pipe_pred.h"

struct exec {
    model *m;
    par *p;
    const plan *pl;
    mesh *mh;
    int axis;                   /* the pipeline axis, −1 without */
    int P, chunks;              /* pipeline ranks; chunks (stages) on this rank */
    int64_t M, rows, n;         /* micro-batches; a micro-batch's rows; floats of [rows, D] */
    plan_ptrs bufs;             /* the plan's buffers the executor owns, views below */
    int32_t *cp_tok;            /* --cp: this rank's pieces of a micro-batch's sequences */
    float *dout;                /* received dL/d(stage output) */
    float *dsend;               /* [nslots·chunks][rows·D]: dL/d(input) being sent */
    mesh_p2p **fsend, **bsend;  /* per slot and chunk: the send in flight */
    sched_action *train, *eval; /* the action lists */
    int64_t ntrain, neval;
    sched_action *ran; /* the last step's actions as executed: op, the chunk's stage, micro-batch */
    int64_t nran;
    double bubble_table; /* the bubble of the schedule's table with unit costs (calc) */
    double p2p;          /* seconds per pipeline message, for the simulation of a step */
    pipe_stage_cost *cost; /* [chunks]: the last step's measured costs per micro-batch */
};

/* The bubble calc's simulator gives the run's table with unit costs (0 without a pipeline). */
static double table_bubble(const plan *pl) {
    if (pl->pipe.n == 1) return 0.0;
    sched_table t;
    sched_result res;
    char err[256];
    const sched_spec sp = plan_sched_spec(pl);
    const sched_costs unit = sched_unit_costs();
    double b = 0.0;
    if (sched_init(&t, &sp, err, sizeof err) == 0 &&
        sched_simulate(&t, &unit, &res, err, sizeof err) == 0) {
        b = res.bubble;
        sched_result_free(&res);
    }
    sched_free(&t);
    return b;
}

exec *exec_create(model *m, par *p, const plan *pl, mesh *mh) {
    exec *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->m = m, e->p = p, e->pl = pl, e->mh = mh;
    e->axis = pl->pipe.axes.n ? pl->pipe.axes.ax[0] : -1;
    e->P = (int)pl->pipe.n, e->chunks = pl->chunks;
    e->M = pl->n_micro;
    e->rows = pl->rows;
    e->n = pl->rows * pl->s.D;
    const int ok = plan_alloc(pl, PLAN_OWNER_EXEC, &e->bufs) == 0;
    e->dout = e->bufs.p[BUF_PIPE_DOUT][0];
    e->dsend = e->bufs.p[BUF_PIPE_DSEND][0];
    e->cp_tok = e->bufs.p[BUF_CP_TOKENS][0];
    const size_t nb = (size_t)pl->nslots * (size_t)pl->chunks;
    e->fsend = calloc(nb, sizeof *e->fsend);
    e->bsend = calloc(nb, sizeof *e->bsend);
    const size_t max = (size_t)plan_actions_max(pl);
    e->train = calloc(max, sizeof *e->train);
    e->eval = calloc(max, sizeof *e->eval);
    e->ran = calloc(max, sizeof *e->ran);
    e->cost = calloc((size_t)pl->chunks, sizeof *e->cost);
    if (!ok || !e->fsend || !e->bsend || !e->train || !e->eval || !e->ran || !e->cost) {
        exec_destroy(e);
        return NULL;
    }
    e->ntrain = plan_actions(pl, 1, e->train);
    e->neval = plan_actions(pl, 0, e->eval);
    e->bubble_table = table_bubble(pl);
    return e;
}

/* Waits for every send in flight. */
static void sends_done(exec *e) {
    const int nb = e->pl->nslots * e->pl->chunks;
    for (int k = 0; k < nb && e->fsend; k++) mesh_p2p_wait(e->fsend[k]), e->fsend[k] = NULL;
    for (int k = 0; k < nb && e->bsend; k++) mesh_p2p_wait(e->bsend[k]), e->bsend[k] = NULL;
}

void exec_destroy(exec *e) {
    if (!e) return;
    sends_done(e);
    plan_free(e->pl, PLAN_OWNER_EXEC, &e->bufs);
    ALLOC_FREE_ALL(e->fsend, e->bsend, e->train, e->eval, e->ran, e->cost, e);
}

/* What a run of actions counts: the forwards' losses, the backwards so far of each chunk (whole or
 * input halves, and weight halves), the (stage, micro-batch) activations held; timed (a training
 * step's), the span from the first action's start to the last's end and, per chunk, the seconds
 * in its forwards, backwards (B, or I and W) and weight halves. */
typedef struct {
    double loss;
    int64_t nbwd[64], nw[64], inflight, peak;
    sched_action *ran; /* the actions as run (NULL: not kept) */
    int64_t nran;
    int timed;
    double span, f[64], b[64], w[64];
} exec_run;

/* The p2p direction of the rank holding stage s (a neighbour of one of this rank's stages). */
static int dir_of(const exec *e, int64_t s) {
    const int64_t d = (plan_stage_rank(e->pl, s) - e->pl->pipe.index + e->P) % e->P;
    return plan_pipe_dir(e->pl, d == 1 ? 1 : -1);
}

/* Stage s's neighbour s + d is on this rank (the V's turn). */
static int local(const exec *e, int64_t s, int d) {
    const int64_t t = s + d;
    return t >= 0 && t < e->P * e->chunks && plan_stage_rank(e->pl, t) == e->pl->pipe.index;
}

/* A backward action (B, I or W) of chunk c in slot k; dout: dL/d(stage output) (NULL: the last
 * stage's, from the loss). */
static void backward(exec *e, const sched_action *a, int k, int c, const int32_t *tok, float scale,
                     exec_run *r) {
    const int last = a->stage == e->P * e->chunks - 1;
    const float *dout = last                     ? NULL
                        : local(e, a->stage, +1) ? e->dsend + (int64_t)(k * e->chunks + c + 1) * e->n
                                                 : e->dout;
    const model_bwd_part part = a->op == SCHED_B   ? MODEL_BWD_ALL
                                : a->op == SCHED_I ? MODEL_BWD_INPUT
                                                   : MODEL_BWD_WEIGHT;
    par_micro_begin(e->p, part == MODEL_BWD_WEIGHT ? r->nw[c]++ : r->nbwd[c]++, e->M);
    trace_begin(model_trace(e->m), TRACE_MICRO_BWD, a->mb);
    model_stage_bwd(e->m, k, c, tok, dout, scale, part);
    trace_end(model_trace(e->m), TRACE_MICRO_BWD);
    if (part != MODEL_BWD_WEIGHT && local(e, a->stage, -1)) /* for the turn's other side */
        floats_copy(e->dsend + (int64_t)(k * e->chunks + c) * e->n, model_stage_dinput(e->m), e->n);
    if (part != MODEL_BWD_INPUT) r->inflight--;
}

/* One action on micro-batch a->mb's tokens tok (rows of T+1), in activation slot k. */
static void act(exec *e, const sched_action *a, int k, const int32_t *tok, float scale,
                exec_run *r) {
    const int c = a->stage / e->P, b = k * e->chunks + c; /* its chunk; its send buffers */
    const double t0 = r->timed && a->op <= SCHED_W ? mesh_now() : 0;
    switch ((sched_op)a->op) {
    case SCHED_RECV_F:
        mesh_p2p_wait(e->fsend[b]); /* the slot's previous output has left */
        e->fsend[b] = NULL;
        mesh_recv_on(e->mh, e->axis, dir_of(e, a->stage - 1), 0, model_stage_input(e->m, k, c),
                     e->n);
        break;
    case SCHED_F:
        mesh_p2p_wait(e->fsend[b]);
        e->fsend[b] = NULL;
        if (local(e, a->stage, -1)) /* the V's turn: chunk 0's output is chunk 1's input */
            floats_copy(model_stage_input(e->m, k, c), model_stage_output(e->m, k, c - 1), e->n);
        trace_begin(model_trace(e->m), TRACE_MICRO_FWD, a->mb);
        r->loss += model_stage_fwd(e->m, k, c, tok);
        trace_end(model_trace(e->m), TRACE_MICRO_FWD);
        if (++r->inflight > r->peak) r->peak = r->inflight;
        break;
    case SCHED_SEND_F:
        e->fsend[b] = mesh_isend_on(e->mh, e->axis, dir_of(e, a->stage + 1), 0,
                                    model_stage_output(e->m, k, c), e->n);
        break;
    case SCHED_RECV_B:
        mesh_recv_on(e->mh, e->axis, dir_of(e, a->stage + 1), 1, e->dout, e->n);
        break;
    case SCHED_B:
    case SCHED_I:
    case SCHED_W:
        backward(e, a, k, c, tok, scale, r);
        break;
    case SCHED_SEND_B: {
        mesh_p2p_wait(e->bsend[b]);
        float *buf = e->dsend + (int64_t)b * e->n;
        floats_copy(buf, model_stage_dinput(e->m), e->n);
        e->bsend[b] = mesh_isend_on(e->mh, e->axis, dir_of(e, a->stage - 1), 1, buf, e->n);
        break;
    }
    default:
        CHECK(0, "exec: action %d is not one the executor runs", (int)a->op);
    }
    if (t0 > 0) { /* a compute action's seconds, to its chunk's kind */
        const double d = mesh_now() - t0;
        *(a->op == SCHED_F ? &r->f[c] : &r->b[c]) += d;
        if (a->op == SCHED_W) r->w[c] += d;
    }
    if (r->ran) /* what ran: the stage of the chunk it used */
        r->ran[r->nran++] = (sched_action){a->op, (int32_t)plan_chunk_stage(e->pl, c), a->mb};
}

/* --cp: the model's sequences are this rank's pieces of the micro-batch's (plan_cp.c): piece j of
 * sequence b is the window of T_p + 1 tokens from its first position, inputs and targets. Returns
 * the tokens the model takes (tok itself without --cp). */
static const int32_t *cp_pieces(exec *e, const int32_t *tok) {
    const plan *pl = e->pl;
    if (pl->cp.n == 1) return tok;
    const int64_t T1 = pl->s.T + 1, Tp = pl->ms.T, np = pl->cp_pieces;
    for (int64_t b = 0; b < pl->micro_seqs; b++)
        for (int64_t j = 0; j < np; j++)
            memcpy(e->cp_tok + (b * np + j) * (Tp + 1), tok + b * T1 + plan_cp_piece_start(pl, j),
                   (size_t)(Tp + 1) * sizeof(int32_t));
    return e->cp_tok;
}

/* Runs n actions (train: micro-batch j in slot j mod nslots; an evaluation's all in slot 0);
 * returns the mean loss over the global batch (on every rank). */
static double run(exec *e, const sched_action *list, int64_t n, int train, const int32_t *tokens,
                  exec_run *r) {
    const plan *pl = e->pl;
    const int64_t T1 = pl->s.T + 1;
    /* the global batch's tokens are shared over the batch and the context axes */
    const float scale = 1.0f / (float)(e->M * pl->batch.n * pl->cp.n);
    const double t0 = mesh_now();
    for (int64_t i = 0; i < n; i++) {
        const int k = train ? (int)(list[i].mb % pl->nslots) : 0;
        act(e, &list[i], k, cp_pieces(e, tokens + list[i].mb * pl->micro_seqs * T1), scale, r);
    }
    r->span = mesh_now() - t0;
    sends_done(e);
    return par_pipe_last_value(e->p, plan_holds_head(pl) ? r->loss / (double)e->M : 0.0);
}

/* A training step's pipeline figures in st from what run r timed (collective over the pipeline
 * axis): the bubble over the phase's makespan, as calc's simulator counts it, and the table
 * simulated with the costs the step measured. */
static void step_figures(exec *e, const exec_run *r, double wait, exec_stats *st) {
    double busy = 0;
    for (int c = 0; c < e->chunks; c++) {
        busy += r->f[c] + r->b[c];
        e->cost[c] = (pipe_stage_cost){r->f[c] / (double)e->M, r->b[c] / (double)e->M,
                                       r->w[c] / (double)e->M};
    }
    const pipe_rank_step mine = {r->span, busy, wait, e->cost};
    pipe_step_figures fig;
    char err[256];
    if (pipe_pred_step(e->pl, e->mh, &mine, e->p2p, &fig, err, sizeof err) < 0)
        fig.sim.bubble = fig.sim.makespan = 0; /* a table the run runs simulates */
    st->bubble = fig.bubble;
    st->bubble_wait = fig.wait, st->bubble_other = fig.other;
    st->bubble_run = fig.sim.bubble;
    st->makespan = fig.makespan;
    st->makespan_run = fig.sim.makespan;
}

double exec_step(exec *e, const int32_t *tokens, exec_stats *st) {
    const plan *pl = e->pl;
    exec_run r;
    memset(&r, 0, sizeof r);
    r.ran = e->ran;
    r.timed = st && pl->pipe.n > 1;
    const mesh_stat r0 = mesh_stats(e->mh, MESH_OP_RECV, -1);
    const double loss = run(e, e->train, e->ntrain, 1, tokens, &r);
    e->nran = r.nran;
    if (!st) return loss;
    *st = (exec_stats){0};
    if (pl->pipe.n == 1) return loss;
    const mesh_stat r1 = mesh_stats(e->mh, MESH_OP_RECV, -1);
    st->peak_inflight = r.peak;
    st->act_bytes = r.peak * model_activation_bytes(e->m) / e->chunks;
    st->bubble_ideal = e->bubble_table;
    step_figures(e, &r, r1.wait_seconds - r0.wait_seconds, st);
    return loss;
}

void exec_set_p2p(exec *e, double seconds) {
    e->p2p = seconds;
}

const sched_action *exec_last_step(const exec *e, int64_t *n) {
    *n = e->nran;
    return e->ran;
}

double exec_eval(exec *e, const int32_t *tokens) {
    exec_run r;
    memset(&r, 0, sizeof r);
    return run(e, e->eval, e->neval, 0, tokens, &r);
}
