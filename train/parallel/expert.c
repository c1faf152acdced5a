/* expert: the expert axis Z in the sharded run (--expert AXIS, one of the data axes: the book's
 * case, where the experts' ranks also hold different tokens).
 *
 * Dispatch (moe_to_experts). A MoE block's dispatched rows on each rank are grouped by expert
 * (offs[E + 1]: the model's plan, made on the token's home rank, per sequence); the rank of Z
 * with index j holds experts [j·E_Z, (j+1)·E_Z). Counts first: an AllGather over Z of every
 * rank's rows per expert (exact, as int64), from which every rank knows the AllToAll's rows per
 * (sender, receiver) and how its received rows split by expert. Then an AllToAllv of the rows
 * (mesh_all_to_allv): the block for rank j is the home rows of j's experts, contiguous in offs's
 * order; rank j receives from each sender i its rows for j's experts in expert order, and
 * regroups them by local expert, senders in rank order. The return (moe_from_experts) runs the
 * same in reverse: regroup by sender, then the AllToAllv with the transposed counts, which lands
 * every row where it left the home rank. The combine then sums each token's k outputs on its
 * home rank in the router's order, so results do not depend on the order rows travel in.
 *
 * The backward moves the rows' gradients the same two ways (dL/dys to the experts with the
 * forward's counts, dL/dxs back), the two AllToAlls of the forward run in reverse.
 *
 * With bf16 compute the way to the experts moves its rows in bf16 (plan_ep_dispatch: the rounding
 * the experts' products make of them anyway, the same bits in half the bytes); the way back
 * carries the experts' fp32 outputs (the combine sums them in fp32) in the wire format in force.
 *
 * The weights' and gradients' side over the data axes (DP, ZeRO): expert_zero.c. */
#include <stdlib.h>
#include <string.h>

#include "kernels/optim.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

/* Copies the rows received from (forward) or sent to (backward) each rank of Z between the
 * AllToAll's order (stage: by sender, within it by expert) and the experts' (x: by local expert,
 * within it by sender). to_x: stage → x. */
static void regroup(const struct par *p, const int64_t *rows, float *x, float *stage, int to_x,
                    int64_t w) {
    const int64_t nz = p->pl->expert.n, E = p->pl->s.moe.E, El = p->pl->loc.El, e0 = p->pl->loc.e0;
    int64_t at = 0;
    for (int64_t e = 0; e < El; e++)
        for (int64_t i = 0; i < nz; i++) {
            int64_t s = 0; /* where i's rows for expert e0 + e start in stage */
            for (int64_t j = 0; j < i; j++)
                for (int64_t f = 0; f < El; f++) s += rows[j * E + e0 + f];
            for (int64_t f = 0; f < e; f++) s += rows[i * E + e0 + f];
            const int64_t n = rows[i * E + e0 + e] * w;
            if (to_x)
                floats_copy(x + at, stage + s * w, n);
            else
                floats_copy(stage + s * w, x + at, n);
            at += n;
        }
}

/* The counts of a dispatch: every rank's rows per expert, gathered over Z (exact: int64 moved
 * bit for bit), the AllToAll's rows per (sender, receiver), and this rank's experts' groups. */
static void dispatch_counts(struct par *p, int64_t *c, const int64_t *offs, int64_t *loffs) {
    const int64_t nz = p->pl->expert.n, E = p->pl->s.moe.E, El = p->pl->loc.El;
    int64_t own[4096];
    CHECK(E <= 4096, "at most 4096 experts");
    for (int64_t e = 0; e < E; e++) own[e] = offs[e + 1] - offs[e];
    par_run(p, PLAN_EP_COUNTS, (float *)(void *)c, (const float *)(const void *)own, 2 * E);
    int64_t *M = c + nz * E;
    for (int64_t i = 0; i < nz; i++)
        for (int64_t j = 0; j < nz; j++) {
            M[i * nz + j] = 0;
            for (int64_t f = 0; f < El; f++) M[i * nz + j] += c[i * E + j * El + f];
        }
    loffs[0] = 0;
    for (int64_t e = 0; e < El; e++) {
        loffs[e + 1] = loffs[e];
        for (int64_t i = 0; i < nz; i++) loffs[e + 1] += c[i * E + p->pl->loc.e0 + e];
    }
}

/* The AllToAll's elements per (sender, receiver) for rows of w floats, transposed for the
 * return. */
static const int64_t *elements(const struct par *p, int64_t *c, int64_t w, int back) {
    const int64_t nz = p->pl->expert.n, E = p->pl->s.moe.E;
    const int64_t *M = c + nz * E;
    int64_t *el = c + nz * E + nz * nz;
    for (int64_t i = 0; i < nz; i++)
        for (int64_t j = 0; j < nz; j++)
            el[i * nz + j] = (back ? M[j * nz + i] : M[i * nz + j]) * w;
    return el;
}

/* The AllToAllv (kind k) of rows from in to out with elements el per (sender, receiver), then
 * for a dispatch (dst) the rows regrouped from the staging into dst: blocking, or left in flight
 * when the model armed it (moe_start), the regrouping done at the wait. */
static void exchange(struct par *p, plan_coll k, float *out, const float *in, const int64_t *el,
                     float *dst, const int64_t *rows, int64_t w) {
    if (!p->ep.armed) {
        par_run_v(p, k, out, in, el);
        if (dst) regroup(p, rows, dst, p->ep.stage, 1, w);
        return;
    }
    CHECK(!p->ep.req, "moe: an exchange started while another is in flight");
    p->ep.armed = 0;
    p->ep.req = par_start_v(p, k, out, in, el);
    p->ep.dst = dst, p->ep.rows = rows, p->ep.w = w;
    p->ep.started++;
}

/* c: the MoE block's counts (model_moe_counts_n) in the micro-batch's activations: rows[i·E + e]
 * from rank i of Z to expert e, then the AllToAll's rows and elements per (sender, receiver),
 * nz·nz each. */
void par_hk_moe_to_experts(void *ctx, model *mod, int64_t *c, float *dst, const float *src,
                           const int64_t *offs, int64_t *loffs, int64_t w) {
    struct par *p = ctx;
    if (p->pl->expert.n == 1) {
        model_moe_to_experts_local(NULL, mod, c, dst, src, offs, loffs, w);
        return;
    }
    if (offs) dispatch_counts(p, c, offs, loffs);
    exchange(p, plan_ep_dispatch(p->pl), p->ep.stage, src, elements(p, c, w, 0), dst, c, w);
}

void par_hk_moe_from_experts(void *ctx, model *mod, int64_t *c, float *dst, const float *src,
                             int64_t w) {
    struct par *p = ctx;
    if (p->pl->expert.n == 1) {
        model_moe_from_experts_local(NULL, mod, c, dst, src, w);
        return;
    }
    regroup(p, c, (float *)src, p->ep.stage, 0, w);
    exchange(p, PLAN_EP_ALL_TO_ALL, dst, p->ep.stage, elements(p, c, w, 1), NULL, NULL, w);
}

void par_hk_moe_start(void *ctx, model *mod) {
    struct par *p = ctx;
    (void)mod;
    p->ep.armed = p->pl->overlap && p->pl->expert.n > 1;
}

void par_hk_moe_wait(void *ctx, model *mod) {
    struct par *p = ctx;
    (void)mod;
    p->ep.armed = 0;
    if (!p->ep.req) return;
    p->ep.hidden += par_wait_hidden(p->ep.req);
    p->ep.req = NULL;
    p->ep.waited++;
    if (p->ep.dst) regroup(p, p->ep.rows, p->ep.dst, p->ep.stage, 1, p->ep.w);
}

void par_ep_overlap(const par *p, int64_t *started, int64_t *waited, double *hidden) {
    *started = p ? p->ep.started : 0, *waited = p ? p->ep.waited : 0;
    *hidden = p ? p->ep.hidden : 0;
}

/* The tensor axis: every rank's x gathered, then summed in rank order (the same bits on each). */
void par_hk_moe_tensor_sum(void *ctx, model *mod, float *x, int64_t n) {
    struct par *p = ctx;
    (void)mod;
    const int64_t ny = p->pl->tensor.n;
    par_run(p, PLAN_EP_TP_SUM, p->tp.a, x, n);
    floats_copy(x, p->tp.a, n);
    for (int64_t y = 1; y < ny; y++) kern_add(x, p->tp.a + y * n, n);
}

void par_moe_stats(par *p, model *mod, model_moe_stats *out) {
    model_moe_stats_get(mod, out);
    const plan *pl = p ? p->pl : NULL;
    if (!p || (pl->batch.n == 1 && pl->pipe.n == 1 && pl->cp.n == 1) || out->E == 0) return;
    /* the data shards, the pipeline's stages and the context axis's pieces of the sequences
     * (whose ranks hold the same sequences' balance losses and their own tokens' z-losses) */
    mesh_axes b = pl->batch.axes;
    for (int k = 0; k < pl->pipe.axes.n; k++) b.ax[b.n++] = pl->pipe.axes.ax[k];
    for (int k = 0; k < pl->cp.axes.n; k++) b.ax[b.n++] = pl->cp.axes.ax[k];
    const int64_t n = out->layers * out->E, nb = mesh_axes_size(p->m, b);
    int64_t *all = malloc((size_t)(n * nb) * sizeof *all), *sum = p->ep.counts;
    CHECK(all, "out of memory");
    const mesh_coll_call g = {MESH_OP_ALL_GATHER, b, 0, 2 * n, MESH_ALG_MPI, MESH_WIRE_F32};
    mesh_coll_run(p->m, &g, (float *)(void *)all, (const float *)(const void *)out->kept);
    for (int64_t i = 0; i < n; i++) {
        sum[i] = 0;
        for (int64_t r = 0; r < nb; r++) sum[i] += all[r * n + i];
    }
    free(all);
    out->kept = sum;
    out->dropped = (int64_t)par_allsum(p, b, (double)out->dropped);
    out->slots = (int64_t)par_allsum(p, b, (double)out->slots);
    /* each shard's means are over as many sequences (tokens) as every other's; a stage's over
     * its MoE blocks (weighted by their number) */
    const double w = p->pl->pipe.n > 1 ? (double)p->pl->moe_n * (double)p->pl->pipe.n /
                                             (double)(out->layers > 0 ? out->layers : 1)
                                       : 1.0;
    out->aux = par_allsum(p, b, out->aux * w) / (double)nb;
    out->z = par_allsum(p, b, out->z * w) / (double)nb;
}
