/* pipe: pipeline parallelism over one mesh axis Z (the book's W_in[L_Z, D, F]).
 *
 * How it works. The L layers are cut into |Z| = P contiguous stages; stage 0 also owns the
 * embedding, stage P−1 the final norm, unembedding and loss. A step's batch (per data shard) is
 * cut into M micro-batches. Stage s runs a list of actions:
 *   GPipe: F0 F1 … F(M−1) then B(M−1) … B0 (activations of all M micro-batches held);
 *   1F1B:  min(P−s−1, M) forwards, then alternately one forward and one backward, then the
 *          remaining backwards (at most P−s micro-batches held).
 * F(j) receives the stage input from s−1 (blocking: a wait here is pipeline bubble), runs the
 * stage's layers and sends the output to s+1 (non-blocking). B(j) receives dL/d(output) from s+1,
 * runs the backward and sends dL/d(input) to s−1. Activations and their gradients are the full
 * residual stream [b·T, D]. Gradient reductions over the data axes start at each stage's last
 * backward, as without pipelining. */
#include "train/parallel/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "train/parallel/par_impl.h"
#include "train/config/alloc.h"
#include "train/observe/trace.h"

int pipe_actions(pipe_schedule schedule, int64_t P, int64_t s, int64_t M, pipe_action *out) {
    int n = 0;
    if (schedule == PIPE_GPIPE) {
        for (int64_t j = 0; j < M; j++) out[n++] = (pipe_action){1, j};
        for (int64_t j = M - 1; j >= 0; j--) out[n++] = (pipe_action){0, j};
        return n;
    }
    int64_t warm = P - s - 1 < M ? P - s - 1 : M, f = 0, b = 0;
    for (; f < warm; f++) out[n++] = (pipe_action){1, f};
    for (; f < M; f++, b++) {
        out[n++] = (pipe_action){1, f};
        out[n++] = (pipe_action){0, b};
    }
    for (; b < M; b++) out[n++] = (pipe_action){0, b};
    return n;
}

struct pipe {
    model *m;
    par *p;
    const plan *pl;
    mesh *mesh;
    int axis;
    pipe_schedule schedule;
    int64_t P, s, M, BT, D;
    int nslots;
    plan_ptrs bufs;            /* the plan's pipeline buffers (PLAN_OWNER_EXEC), views below */
    float *dout;               /* received dL/d(stage output) */
    float *dsend;              /* [nslots][BT·D]: dL/d(input) being sent */
    mesh_p2p **fsend, **bsend; /* per slot: the send in flight */
    pipe_action *acts;
};

pipe *pipe_create(model *mod, par *p, const plan *pl, mesh *mh) {
    pipe *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->m = mod, q->p = p, q->pl = pl, q->mesh = mh, q->schedule = pl->c.schedule;
    q->M = pl->n_micro;
    q->axis = pl->pipe.axes.n ? pl->pipe.axes.ax[0] : -1;
    q->P = pl->pipe.n, q->s = pl->pipe.index;
    q->D = pl->s.D;
    q->BT = pl->rows;
    q->nslots = pl->nslots;
    const int ok = plan_alloc(pl, PLAN_OWNER_EXEC, &q->bufs) == 0;
    q->dout = q->bufs.p[BUF_PIPE_DOUT][0];
    q->dsend = q->bufs.p[BUF_PIPE_DSEND][0];
    q->fsend = calloc((size_t)q->nslots, sizeof *q->fsend);
    q->bsend = calloc((size_t)q->nslots, sizeof *q->bsend);
    q->acts = calloc((size_t)(2 * q->M), sizeof *q->acts);
    if (!ok || !q->fsend || !q->bsend || !q->acts) {
        pipe_destroy(q);
        return NULL;
    }
    return q;
}

void pipe_destroy(pipe *q) {
    if (!q) return;
    for (int k = 0; k < q->nslots && q->fsend; k++) mesh_p2p_wait(q->fsend[k]);
    for (int k = 0; k < q->nslots && q->bsend; k++) mesh_p2p_wait(q->bsend[k]);
    plan_free(q->pl, PLAN_OWNER_EXEC, &q->bufs);
    ALLOC_FREE_ALL(q->fsend, q->bsend, q->acts, q);
}

static int slot_of(const pipe *q, int64_t j) {
    return (int)(j % q->nslots);
}

static double forward(pipe *q, int64_t j, const int32_t *tok) {
    const int k = slot_of(q, j);
    const int64_t n = q->BT * q->D;
    trace_begin(TRACE_PIPE_FWD, j);
    mesh_p2p_wait(q->fsend[k]); /* the slot's previous output has left */
    q->fsend[k] = NULL;
    if (q->s > 0) mesh_recv(q->mesh, q->axis, -1, model_stage_input(q->m, k), n);
    double loss = model_stage_fwd(q->m, k, tok);
    if (q->s < q->P - 1)
        q->fsend[k] = mesh_isend(q->mesh, q->axis, +1, model_stage_output(q->m, k), n);
    trace_end(TRACE_PIPE_FWD);
    return loss;
}

static void backward(pipe *q, int64_t j, const int32_t *tok, float scale) {
    const int k = slot_of(q, j);
    const int64_t n = q->BT * q->D;
    trace_begin(TRACE_PIPE_BWD, j);
    if (q->s < q->P - 1) mesh_recv(q->mesh, q->axis, +1, q->dout, n);
    model_stage_bwd(q->m, k, tok, q->s < q->P - 1 ? q->dout : NULL, scale);
    if (q->s > 0) {
        mesh_p2p_wait(q->bsend[k]);
        float *buf = q->dsend + (int64_t)k * n;
        floats_copy(buf, model_stage_dinput(q->m), n);
        q->bsend[k] = mesh_isend(q->mesh, q->axis, -1, buf, n);
    }
    trace_end(TRACE_PIPE_BWD);
}

double pipe_step(pipe *q, const int32_t *tokens, float scale, pipe_stats *st) {
    const int64_t T1 = model_shape_of(q->m)->T + 1, rows = q->BT / (T1 - 1);
    const int n = pipe_actions(q->schedule, q->P, q->s, q->M, q->acts);
    double loss = 0.0;
    int64_t inflight = 0, peak = 0, nb = 0;
    mesh_stat r0 = mesh_stats(q->mesh, MESH_OP_RECV, -1);
    const double t0 = mesh_now();
    for (int i = 0; i < n; i++) {
        const pipe_action a = q->acts[i];
        const int32_t *tok = tokens + a.mb * rows * T1;
        if (a.fwd) {
            loss += forward(q, a.mb, tok);
            if (++inflight > peak) peak = inflight;
        } else {
            par_micro_begin(q->p, nb++, q->M);
            backward(q, a.mb, tok, scale);
            inflight--;
        }
    }
    for (int k = 0; k < q->nslots; k++) {
        mesh_p2p_wait(q->fsend[k]), q->fsend[k] = NULL;
        mesh_p2p_wait(q->bsend[k]), q->bsend[k] = NULL;
    }
    const double wall = mesh_now() - t0;
    mesh_stat r1 = mesh_stats(q->mesh, MESH_OP_RECV, -1);
    if (st) {
        st->peak_inflight = peak;
        st->act_bytes = peak * model_activation_bytes(q->m);
        st->bubble = par_pipe_mean(q->p, wall > 0 ? (r1.wait_seconds - r0.wait_seconds) / wall : 0);
        st->bubble_ideal = (double)(q->P - 1) / (double)(q->M + q->P - 1);
    }
    return par_pipe_last_value(q->p, q->s == q->P - 1 ? loss / (double)q->M : 0.0);
}

double pipe_eval(pipe *q, const int32_t *tokens) {
    const int64_t T1 = model_shape_of(q->m)->T + 1, rows = q->BT / (T1 - 1);
    double loss = 0.0;
    for (int64_t j = 0; j < q->M; j++) loss += forward(q, j * q->nslots, tokens + j * rows * T1);
    for (int k = 0; k < q->nslots; k++) mesh_p2p_wait(q->fsend[k]), q->fsend[k] = NULL;
    return par_pipe_last_value(q->p, q->s == q->P - 1 ? loss / (double)q->M : 0.0);
}

void pipe_timeline(pipe_schedule schedule, int64_t P, int64_t M, FILE *out) {
    /* unit-time simulation (F = 1 slot, B = 2 slots): an action starts when its stage is free and
     * its input exists (F: F of the stage before; B: B of the stage after and F of its own) */
    enum { MAXT = 4096 };
    pipe_action *acts = calloc((size_t)(2 * M), sizeof *acts);
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
            const int n = pipe_actions(schedule, P, s, M, acts);
            if (next[s] >= n) continue;
            pipe_action a = acts[next[s]];
            int64_t ready;
            if (a.fwd)
                ready = s == 0 ? 0 : fdone[(s - 1) * M + a.mb];
            else {
                ready = s == P - 1 ? fdone[s * M + a.mb] : bdone[(s + 1) * M + a.mb];
                if (fdone[s * M + a.mb] < 0) ready = -1;
            }
            if (ready < 0) continue;
            int64_t t = ready > free_at[s] ? ready : free_at[s], d = a.fwd ? 1 : 2;
            for (int64_t u = t; u < t + d && u < MAXT / 4; u++) {
                char *cell = grid + (s * MAXT + u * 4); /* "F7", "B12": micro-batch mod 100 */
                const int mb = (int)(a.mb % 100);
                cell[0] = a.fwd ? 'F' : 'B';
                if (mb >= 10) *++cell = (char)('0' + mb / 10);
                cell[1] = (char)('0' + mb % 10);
            }
            free_at[s] = t + d;
            (a.fwd ? fdone : bdone)[s * M + a.mb] = t + d;
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

void par_hk_stage_recv(void *ctx, float *x, int64_t n) {
    struct par *p = ctx;
    if (p->pl->pipe.n > 1) mesh_recv(p->m, p->pl->pipe.axes.ax[0], -1, x, n);
}

void par_hk_stage_send(void *ctx, const float *x, int64_t n) {
    struct par *p = ctx;
    if (p->pl->pipe.n > 1) mesh_p2p_wait(mesh_isend(p->m, p->pl->pipe.axes.ax[0], +1, x, n));
}

void par_hk_pipe_share_last(void *ctx, float *x, int64_t n) {
    struct par *p = ctx;
    if (p->pl->pipe.n > 1) mesh_all_reduce(p->m, p->pl->pipe.axes, x, x, n, p->pl->alg);
}
