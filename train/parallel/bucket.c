/* bucket: gradient buckets for the data-axis reductions, as DDP groups them. A layer's gradients
 * are many small tensors (norm gains of D elements beside matrices of D·F); reduced one by one,
 * each pays the hop latency of every ring step (mesh/cost.h), so at a TPU's T_min·W the small
 * ones are latency-bound. A bucket copies blocks into a staging buffer until it holds bk_cap
 * elements, then reduces them in one collective, whose latency is then a small part of its
 * transfer (cost_bucket_bytes picks the size for --bucket auto).
 *
 * Layouts. DP (AllReduce_X): the blocks one after another; the result is copied back into
 * each block. ZeRO (ReduceScatter_X): the staging buffer holds nX regions, region j the blocks'
 * shard j one after another (a block arrives packed so that its shard j is contiguous), so that
 * the RS's block j is the concatenation of the blocks' shards j; the regions are closed up to
 * the bucket's fill before the reduction, and each block's part of the result is copied or
 * added into its shard gradient. Two slots alternate, so that one bucket fills while the other
 * is in flight (--overlap). Every rank adds the same blocks in the same order, so they flush at
 * the same points. The sums are the same as without buckets up to the order of additions.
 *
 * ZeRO-3's weight gathers use the same bucket size (zero.c): a layer's shards gathered in
 * buckets of at most bk_cap elements, staged in wsend (allocated here with the buckets).
 *
 * The queue of reductions in flight (par_push, par_drain) lives here too: buckets and single
 * blocks complete through it, in the order they were started. */
#include <stdlib.h>
#include <string.h>

#include "kernels/optim.h"
#include "mesh/cost.h"
#include "mesh/link.h"
#include "train/parallel/par_impl.h"

int64_t par_bucket_auto(const par *p, const cost_link *link, int wire_bytes, double overhead) {
    if (!p || p->nX == 1) return 0;
    int sizes[MESH_MAX_AXES], wraps[MESH_MAX_AXES];
    for (int k = 0; k < p->dax.n; k++) {
        sizes[k] = mesh_axis_size(p->m, p->dax.ax[k]);
        wraps[k] = mesh_axis_wraps(p->m, p->dax.ax[k]);
    }
    const mesh_alg alg = mesh_alg_resolve(p->m, p->dax, p->alg);
    const double bytes = cost_bucket_bytes(p->zero ? COST_OP_REDUCE_SCATTER : COST_OP_ALL_REDUCE,
                                           link, sizes, wraps, p->dax.n, alg, overhead);
    if (!(bytes > 0)) return 0;
    /* a power of two at least that large: the links' constants vary a little between runs
     * (calibrated, or emulated from a measured FLOP/s), the size, and so the order of the
     * additions, must not */
    int64_t elems = 1;
    while ((double)elems * wire_bytes < bytes) elems *= 2;
    return elems;
}

int par_set_bucket(par *p, int64_t elems) {
    if (!p) return 0;
    bucket_free(p);
    if (elems <= 0 || p->nX == 1) return 0;
    const int64_t cap = elems < p->nX ? p->nX : elems / p->nX * p->nX;
    for (int k = 0; k < 2; k++) {
        p->bk_buf[k] = malloc((size_t)cap * sizeof(float));
        p->bk_res[k] = p->zero ? malloc((size_t)(cap / p->nX) * sizeof(float)) : NULL;
        p->wsend[k] =
            p->zero == 3 ? malloc((size_t)(p->layer_elems / p->nX) * sizeof(float)) : NULL;
        if (!p->bk_buf[k] || (p->zero && !p->bk_res[k]) || (p->zero == 3 && !p->wsend[k])) {
            bucket_free(p);
            return -1;
        }
    }
    p->bk_cap = cap;
    return 0;
}

int par_data_axis(const par *p) {
    return p && p->dax.n ? p->dax.ax[0] : -1;
}

int64_t par_bucket(const par *p) {
    return p ? p->bk_cap : 0;
}

void bucket_free(struct par *p) {
    for (int k = 0; k < 2; k++) {
        free(p->bk_buf[k]);
        free(p->bk_res[k]);
        free(p->wsend[k]);
        p->bk_buf[k] = p->bk_res[k] = p->wsend[k] = NULL;
        p->bk_nseg[k] = p->bk_busy[k] = 0;
    }
    p->bk_cap = p->bk_fill = 0;
    p->bk_cur = 0;
}

/* Elements of the open bucket's region (the whole buffer for an AllReduce). */
static int64_t region(const struct par *p) {
    return p->zero ? p->bk_cap / p->nX : p->bk_cap;
}

int bucket_add(struct par *p, float *g, int64_t n, float *dst, int add) {
    const int64_t per = p->zero ? n / p->nX : n;
    if (p->bk_cap == 0 || per > region(p)) return 0;
    if (p->bk_fill + per > region(p) || p->bk_nseg[p->bk_cur] == PAR_BUCKET_SEGS) bucket_flush(p);
    const int k = p->bk_cur;
    if (p->bk_fill == 0 && p->bk_busy[k] > 0) par_drain_upto(p, p->bk_busy[k]); /* slot free */
    float *buf = p->bk_buf[k];
    if (p->zero)
        for (int64_t j = 0; j < p->nX; j++)
            memcpy(buf + j * region(p) + p->bk_fill, g + j * per, (size_t)per * sizeof(float));
    else
        memcpy(buf + p->bk_fill, g, (size_t)n * sizeof(float));
    p->bk_seg[k][p->bk_nseg[k]++] = (bucket_seg){dst, p->bk_fill, per, add};
    p->bk_fill += per;
    return 1;
}

void bucket_flush(struct par *p) {
    if (p->bk_cap == 0 || p->bk_fill == 0) return;
    const int k = p->bk_cur;
    const int64_t c = p->bk_fill;
    float *buf = p->bk_buf[k];
    if (p->zero) { /* close the regions up: RS block j at j·c */
        for (int64_t j = 1; j < p->nX; j++)
            memmove(buf + j * c, buf + j * region(p), (size_t)c * sizeof(float));
        if (p->overlap) {
            if (p->npend == PAR_MAX_PENDING) par_drain(p);
            p->pend[p->npend++] =
                (pending_red){mesh_ireduce_scatter(p->m, p->dax, p->bk_res[k], buf, c, p->alg),
                              NULL, NULL, 0, k + 1};
        } else {
            mesh_reduce_scatter(p->m, p->dax, p->bk_res[k], buf, c, p->alg);
        }
    } else if (p->overlap) {
        if (p->npend == PAR_MAX_PENDING) par_drain(p);
        p->pend[p->npend++] = (pending_red){mesh_iall_reduce(p->m, p->dax, buf, buf, c, p->alg),
                                            NULL, NULL, 0, k + 1};
    } else {
        mesh_all_reduce(p->m, p->dax, buf, buf, c, p->alg);
    }
    if (p->overlap)
        p->bk_busy[k] = p->npend;
    else
        bucket_complete(p, k);
    p->bk_cur = k ^ 1;
    p->bk_fill = 0;
}

void bucket_complete(struct par *p, int slot) {
    const float *res = p->zero ? p->bk_res[slot] : p->bk_buf[slot];
    for (int i = 0; i < p->bk_nseg[slot]; i++) {
        const bucket_seg *s = &p->bk_seg[slot][i];
        if (s->add)
            kern_add(s->dst, res + s->off, s->n);
        else
            memcpy(s->dst, res + s->off, (size_t)s->n * sizeof(float));
    }
    p->bk_nseg[slot] = 0;
}

/* ---------------------------------------------------------------- reductions in flight */

void par_push(struct par *p, mesh_req *r, float *out, float *acc, int64_t n) {
    if (p->npend == PAR_MAX_PENDING) par_drain(p);
    p->pend[p->npend++] = (pending_red){r, out, acc, n, 0};
}

/* Completes the first `count` pending reductions (they finish in the order started). */
void par_drain_upto(struct par *p, int count) {
    if (count > p->npend) count = p->npend;
    for (int i = 0; i < count; i++) {
        mesh_wait(p->pend[i].req);
        if (p->pend[i].bucket)
            bucket_complete(p, p->pend[i].bucket - 1);
        else if (p->pend[i].acc)
            kern_add(p->pend[i].acc, p->pend[i].out, p->pend[i].n);
    }
    memmove(p->pend, p->pend + count, (size_t)(p->npend - count) * sizeof p->pend[0]);
    p->npend -= count;
    for (int k = 0; k < 2; k++) {
        p->slot_pend[k] = p->slot_pend[k] > count ? p->slot_pend[k] - count : 0;
        p->bk_busy[k] = p->bk_busy[k] > count ? p->bk_busy[k] - count : 0;
    }
}

void par_drain(struct par *p) {
    par_drain_upto(p, p->npend);
}
