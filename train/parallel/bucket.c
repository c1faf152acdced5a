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
 * Buckets complete through the queue of calls in flight (queue.c), in the order they were
 * started. */
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
    par_buckets *bk = &p->bk;
    const int64_t per = p->pl->zero ? n / p->pl->data.n : n;
    if (p->pl->bucket_cap == 0 || per > region(p)) return 0;
    if (bk->fill + per > region(p) || bk->nsegs[bk->open] == PAR_BUCKET_SEGS) bucket_flush(p);
    const int k = bk->open;
    if (bk->fill == 0) queue_wait(p, bk->busy[k]); /* the slot free */
    float *buf = bk->stage[k];
    if (p->pl->zero)
        for (int64_t j = 0; j < p->pl->data.n; j++)
            floats_copy(buf + j * region(p) + bk->fill, g + j * per, per);
    else
        floats_copy(buf + bk->fill, g, n);
    bk->segs[k][bk->nsegs[k]++] = (bucket_seg){dst, bk->fill, per, add};
    bk->fill += per;
    return 1;
}

void bucket_flush(struct par *p) {
    par_buckets *bk = &p->bk;
    if (p->pl->bucket_cap == 0 || bk->fill == 0) return;
    const int k = bk->open;
    const int64_t c = bk->fill;
    float *buf = bk->stage[k];
    const plan_coll kind = p->pl->zero ? PLAN_ZERO_REDUCE : PLAN_DP_REDUCE;
    float *out = p->pl->zero ? bk->result[k] : buf; /* RS into the result; AllReduce in place */
    if (p->pl->zero) {                              /* close the regions up: RS block j at j·c */
        const int move = !mesh_no_data(c * p->pl->data.n * (int64_t)sizeof(float));
        for (int64_t j = 1; j < p->pl->data.n && move; j++)
            floats_move(buf + j * c, buf + j * region(p), c);
    }
    if (p->pl->overlap) {
        bk->busy[k] = queue_push(p, (par_pending){.req = par_start(p, kind, out, buf, c),
                                                  .done = bucket_complete,
                                                  .arg = k});
    } else {
        par_run(p, kind, out, buf, c);
        bucket_complete(p, k);
    }
    bk->open = k ^ 1;
    bk->fill = 0;
}

void bucket_complete(struct par *p, int slot) {
    par_buckets *bk = &p->bk;
    const float *res = p->pl->zero ? bk->result[slot] : bk->stage[slot];
    for (int i = 0; i < bk->nsegs[slot]; i++) {
        const bucket_seg *s = &bk->segs[slot][i];
        if (s->add)
            kern_add(s->dst, res + s->off, s->n);
        else
            floats_copy(s->dst, res + s->off, s->n);
    }
    bk->nsegs[slot] = 0;
}
