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
 * buckets of at most bucket_cap elements, staged in gather_send (allocated here with the buckets).
 *
 * The queue of reductions in flight (par_push, par_drain) lives here too: buckets and single
 * blocks complete through it, in the order they were started. */
#include <stdlib.h>
#include <string.h>

#include "kernels/optim.h"
#include "mesh/cost.h"
#include "mesh/link.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

int64_t par_bucket_auto(const par *p, const cost_link *link, int wire_bytes, double overhead) {
    if (!p || p->n_data == 1) return 0;
    int sizes[MESH_MAX_AXES], wraps[MESH_MAX_AXES];
    for (int k = 0; k < p->data_axes.n; k++) {
        sizes[k] = mesh_axis_size(p->m, p->data_axes.ax[k]);
        wraps[k] = mesh_axis_wraps(p->m, p->data_axes.ax[k]);
    }
    const mesh_alg alg = mesh_alg_resolve(p->m, p->data_axes, p->alg);
    const double bytes = cost_bucket_bytes(p->zero ? COST_OP_REDUCE_SCATTER : COST_OP_ALL_REDUCE,
                                           link, sizes, wraps, p->data_axes.n, alg, overhead);
    if (!(bytes > 0)) return 0;
    /* a power of two at least that large: should the link constants move a little (the caller
     * passes a chip's, which do not), the size, and so the order of the additions, does not */
    int64_t elems = 1;
    while ((double)elems * wire_bytes < bytes) elems *= 2;
    return elems;
}

int64_t par_bucket_limit(const par *p) {
    if (!p || p->n_data == 1) return 0;
    int64_t all = 0;
    for (int id = 0; id < P_COUNT; id++) all += p->g[id].nb * pgeo_block(&p->g[id]);
    return (all + p->n_data - 1) / p->n_data * p->n_data;
}

int par_set_bucket(par *p, int64_t elems) {
    if (!p) return 0;
    bucket_free(p);
    /* (DP with --dcn reduces the whole gradient at once, in zero.c's dcn_reduce: no buckets) */
    if (elems <= 0 || p->n_data == 1 || (p->zero == 0 && p->dcn_axes.n)) return 0;
    const int64_t most = par_bucket_limit(p);
    if (elems > most) elems = most;
    const int64_t cap = elems < p->n_data ? p->n_data : elems / p->n_data * p->n_data;
    for (int k = 0; k < 2; k++) {
        p->bucket_stage[k] = malloc((size_t)cap * sizeof(float));
        p->bucket_result[k] = p->zero ? malloc((size_t)(cap / p->n_data) * sizeof(float)) : NULL;
        p->gather_send[k] =
            p->zero == 3 ? malloc((size_t)(p->layer_elems / p->n_data) * sizeof(float)) : NULL;
        if (!p->bucket_stage[k] || (p->zero && !p->bucket_result[k]) ||
            (p->zero == 3 && !p->gather_send[k])) {
            bucket_free(p);
            return -1;
        }
    }
    p->bucket_cap = cap;
    return 0;
}

int par_data_axis(const par *p) {
    return p && p->data_axes.n ? p->data_axes.ax[0] : -1;
}

int64_t par_bucket(const par *p) {
    return p ? p->bucket_cap : 0;
}

void bucket_free(struct par *p) {
    for (int k = 0; k < 2; k++) {
        free(p->bucket_stage[k]);
        free(p->bucket_result[k]);
        free(p->gather_send[k]);
        p->bucket_stage[k] = p->bucket_result[k] = p->gather_send[k] = NULL;
        p->bucket_nsegs[k] = p->bucket_busy[k] = 0;
    }
    p->bucket_cap = p->bucket_fill = 0;
    p->bucket_open = 0;
}

/* Elements of the open bucket's region (the whole buffer for an AllReduce). */
static int64_t region(const struct par *p) {
    return p->zero ? p->bucket_cap / p->n_data : p->bucket_cap;
}

int bucket_add(struct par *p, float *g, int64_t n, float *dst, int add) {
    const int64_t per = p->zero ? n / p->n_data : n;
    if (p->bucket_cap == 0 || per > region(p)) return 0;
    if (p->bucket_fill + per > region(p) || p->bucket_nsegs[p->bucket_open] == PAR_BUCKET_SEGS)
        bucket_flush(p);
    const int k = p->bucket_open;
    if (p->bucket_fill == 0 && p->bucket_busy[k] > 0)
        par_drain_upto(p, p->bucket_busy[k]); /* slot free */
    float *buf = p->bucket_stage[k];
    if (p->zero)
        for (int64_t j = 0; j < p->n_data; j++)
            floats_copy(buf + j * region(p) + p->bucket_fill, g + j * per, per);
    else
        floats_copy(buf + p->bucket_fill, g, n);
    p->bucket_segs[k][p->bucket_nsegs[k]++] = (bucket_seg){dst, p->bucket_fill, per, add};
    p->bucket_fill += per;
    return 1;
}

void bucket_flush(struct par *p) {
    if (p->bucket_cap == 0 || p->bucket_fill == 0) return;
    const int k = p->bucket_open;
    const int64_t c = p->bucket_fill;
    float *buf = p->bucket_stage[k];
    if (p->zero) { /* close the regions up: RS block j at j·c */
        const int move = !mesh_no_data(c * p->n_data * (int64_t)sizeof(float));
        for (int64_t j = 1; j < p->n_data && move; j++)
            floats_move(buf + j * c, buf + j * region(p), c);
        if (p->overlap) {
            if (p->n_pending == PAR_MAX_PENDING) par_drain(p);
            p->pending[p->n_pending++] = (pending_red){
                mesh_ireduce_scatter(p->m, p->data_axes, p->bucket_result[k], buf, c, p->alg), NULL,
                NULL, 0, k + 1};
        } else {
            mesh_reduce_scatter(p->m, p->data_axes, p->bucket_result[k], buf, c, p->alg);
        }
    } else if (p->overlap) {
        if (p->n_pending == PAR_MAX_PENDING) par_drain(p);
        p->pending[p->n_pending++] = (pending_red){
            mesh_iall_reduce(p->m, p->data_axes, buf, buf, c, p->alg), NULL, NULL, 0, k + 1};
    } else {
        mesh_all_reduce(p->m, p->data_axes, buf, buf, c, p->alg);
    }
    if (p->overlap)
        p->bucket_busy[k] = p->n_pending;
    else
        bucket_complete(p, k);
    p->bucket_open = k ^ 1;
    p->bucket_fill = 0;
}

void bucket_complete(struct par *p, int slot) {
    const float *res = p->zero ? p->bucket_result[slot] : p->bucket_stage[slot];
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
