/* bucket: gradient buckets for the data-axis reductions, as DDP groups them. A layer's gradients
 * are many small tensors (norm gains of D elements beside matrices of D·F); reduced one by one,
 * each pays the hop latency of every ring step (mesh/cost.h), so at a TPU's T_min·W the small
 * ones are latency-bound. A bucket copies blocks into a staging buffer until it holds bucket_cap
 * elements, then reduces them in one collective, whose latency is then a small part of its
 * transfer (cost_bucket_bytes picks the size for --bucket auto).
 *
 * Layouts. DP (AllReduce_X): the blocks one after another; the result is copied back into
 * each block. ZeRO (ReduceScatter_X): the staging buffer holds n_data regions, region j the blocks'
 * shard j one after another (a block arrives packed so that its shard j is contiguous), so that
 * the RS's block j is the concatenation of the blocks' shards j; the regions are closed up to
 * the bucket's fill before the reduction, and each block's part of the result is copied or
 * added into its shard gradient. Two slots alternate, so that one bucket fills while the other
 * is in flight (--overlap). Every rank adds the same blocks in the same order, so they flush at
 * the same points. The sums are the same as without buckets up to the order of additions.
 *
 * ZeRO-3's weight gathers use the same bucket size (zero.c): a layer's shards gathered in
 * buckets of at most bucket_cap elements (plan_weight_buckets), staged in gather_send. The size
 * is the plan's (bucket_cap: the size asked for, or the cost model's, plan_bucket_auto), and so
 * are the buffers (plan.c).
 *
 * The queue of reductions in flight (par_push, par_drain) lives here too: buckets and single
 * blocks complete through it, in the order they were started. */
#include <stdlib.h>
#include <string.h>

#include "kernels/optim.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

/* Elements of the open bucket's region (the whole buffer for an AllReduce). */
static int64_t region(const struct par *p) {
    return p->pl->zero ? p->pl->bucket_cap / p->pl->data.n : p->pl->bucket_cap;
}

int bucket_add(struct par *p, float *g, int64_t n, float *dst, int add) {
    const int64_t per = p->pl->zero ? n / p->pl->data.n : n;
    if (p->pl->bucket_cap == 0 || per > region(p)) return 0;
    if (p->bucket_fill + per > region(p) || p->bucket_nsegs[p->bucket_open] == PAR_BUCKET_SEGS)
        bucket_flush(p);
    const int k = p->bucket_open;
    if (p->bucket_fill == 0 && p->bucket_busy[k] > 0)
        par_drain_upto(p, p->bucket_busy[k]); /* slot free */
    float *buf = p->bucket_stage[k];
    if (p->pl->zero)
        for (int64_t j = 0; j < p->pl->data.n; j++)
            floats_copy(buf + j * region(p) + p->bucket_fill, g + j * per, per);
    else
        floats_copy(buf + p->bucket_fill, g, n);
    p->bucket_segs[k][p->bucket_nsegs[k]++] = (bucket_seg){dst, p->bucket_fill, per, add};
    p->bucket_fill += per;
    return 1;
}

void bucket_flush(struct par *p) {
    if (p->pl->bucket_cap == 0 || p->bucket_fill == 0) return;
    const int k = p->bucket_open;
    const int64_t c = p->bucket_fill;
    float *buf = p->bucket_stage[k];
    if (p->pl->zero) { /* close the regions up: RS block j at j·c */
        const int move = !mesh_no_data(c * p->pl->data.n * (int64_t)sizeof(float));
        for (int64_t j = 1; j < p->pl->data.n && move; j++)
            floats_move(buf + j * c, buf + j * region(p), c);
        if (p->pl->overlap) {
            if (p->n_pending == PAR_MAX_PENDING) par_drain(p);
            p->pending[p->n_pending++] =
                (pending_red){mesh_ireduce_scatter(p->m, p->pl->data.axes, p->bucket_result[k], buf,
                                                   c, p->pl->alg),
                              NULL, NULL, 0, k + 1};
        } else {
            mesh_reduce_scatter(p->m, p->pl->data.axes, p->bucket_result[k], buf, c, p->pl->alg);
        }
    } else if (p->pl->overlap) {
        if (p->n_pending == PAR_MAX_PENDING) par_drain(p);
        p->pending[p->n_pending++] =
            (pending_red){mesh_iall_reduce(p->m, p->pl->data.axes, buf, buf, c, p->pl->alg), NULL,
                          NULL, 0, k + 1};
    } else {
        mesh_all_reduce(p->m, p->pl->data.axes, buf, buf, c, p->pl->alg);
    }
    if (p->pl->overlap)
        p->bucket_busy[k] = p->n_pending;
    else
        bucket_complete(p, k);
    p->bucket_open = k ^ 1;
    p->bucket_fill = 0;
}

void bucket_complete(struct par *p, int slot) {
    const float *res = p->pl->zero ? p->bucket_result[slot] : p->bucket_stage[slot];
    for (int i = 0; i < p->bucket_nsegs[slot]; i++) {
        const bucket_seg *s = &p->bucket_segs[slot][i];
        if (s->add)
            kern_add(s->dst, res + s->off, s->n);
        else
            floats_copy(s->dst, res + s->off, s->n);
    }
    p->bucket_nsegs[slot] = 0;
}

/* ---------------------------------------------------------------- reductions in flight */

void par_push(struct par *p, mesh_req *r, float *out, float *acc, int64_t n) {
    if (p->n_pending == PAR_MAX_PENDING) par_drain(p);
    p->pending[p->n_pending++] = (pending_red){r, out, acc, n, 0};
}

/* Completes the first `count` pending reductions (they finish in the order started). */
void par_drain_upto(struct par *p, int count) {
    if (count > p->n_pending) count = p->n_pending;
    for (int i = 0; i < count; i++) {
        mesh_wait(p->pending[i].req);
        if (p->pending[i].bucket)
            bucket_complete(p, p->pending[i].bucket - 1);
        else if (p->pending[i].acc)
            kern_add(p->pending[i].acc, p->pending[i].out, p->pending[i].n);
    }
    memmove(p->pending, p->pending + count, (size_t)(p->n_pending - count) * sizeof p->pending[0]);
    p->n_pending -= count;
    p->n_retired += count;
    for (int k = 0; k < 2; k++) {
        p->slot_pending[k] = p->slot_pending[k] > count ? p->slot_pending[k] - count : 0;
        p->bucket_busy[k] = p->bucket_busy[k] > count ? p->bucket_busy[k] - count : 0;
    }
}

void par_drain(struct par *p) {
    par_drain_upto(p, p->n_pending);
}
