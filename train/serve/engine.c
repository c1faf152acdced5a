/* engine: the serving engine's forward on every rank (see engine.h). */
#include "train/serve/engine.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/attn_paged.h"
#include "kernels/rng.h"
#include "mesh/bcast.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "train/infer/kvshard.h"
#include "train/model/hooks.h"
#include "train/model/sample.h"
#include "train/serve/kvroute.h"
#include "train/serve/logprob.h"

struct serve_engine {
    config c;
    mesh *m;
    plan pl;  /* the sharding plan (forward only) */
    par *run; /* its sharded run (NULL on one rank) */
    model *mod;
    engine_dims d;
    int32_t nrep, rep;
    int64_t nY;
    int32_t Z, zi;  /* the AllToAll layout: pools of a replica, this rank's (1, 0 otherwise) */
    int32_t mirror; /* pools held (engine_dims.mirror_shards; 1: one) */
    mesh *gm;       /* its group mesh (kv_group_mesh) and group axis */
    mesh_axes gax;
    float *a2a_q, *a2a_o, *qm,
        *om;            /* its exchange [Z, rows, Nl·H]; q, out of my rows [rows, M·H] */
    int64_t *zrows;     /* rows of each shard in a forward */
    mesh_axes tax, dax; /* the tensor axis (vocabulary shards); the data axes (replicas) */
    int64_t L, ldk, bstride;
    precision prec;    /* --compute-dtype resolved: the matmuls' dtype, the bf16 path and context */
    compute_dtype kvd; /* --kv-dtype resolved (auto: prec's dtype): the pool's elements */
    unsigned char *kpool, *vpool;
    /* one forward: rows, tokens, positions, the rows whose logits are wanted */
    int32_t *rtok, *rpos;
    int64_t *out_rows;
    float *ws, *scr, *logits, *lg_loc, *lg_all, *tokbuf, *tokall;
    int32_t *item_out; /* plan item → its row of logits, or −1 */
    float *lp_in;      /* this replica's log-probability records of a step (zeros elsewhere) */
    int32_t *lp_scr;   /* logprob_record's scratch [V] */
    sample_item *items;
    engine_seg *segs;      /* engine_step's segments, one per item of this replica */
    const engine_seg *cur; /* the forward being run, for the attention hook */
    int32_t ncur;
    struct serve_spec *spec; /* speculative decoding's, or NULL */
    /* engine_link: the world of both sides' engines, and where each of its ranks is */
    mesh *wm;
    int32_t wn, *where;    /* world rank r's row where[WHERE·r + WHERE_*]: its replica, tensor
                            * coordinate, tensor degree, pools (engine_kv_shards) */
    unsigned char *xbuf;   /* one slab: a block's heads packed for the move */
    kvroute_piece *pieces; /* a destination's pieces (at most one per world rank) */
};

void engine_set_spec(serve_engine *e, struct serve_spec *sp) {
    e->spec = sp;
}
struct serve_spec *engine_spec(const serve_engine *e) {
    return e->spec;
}

const precision *engine_precision(const serve_engine *e) {
    return &e->prec;
}
model *engine_model(serve_engine *e) {
    return e->mod;
}
par *engine_par(serve_engine *e) {
    return e->run;
}
int32_t engine_replicas(const serve_engine *e) {
    return e->nrep;
}
int32_t engine_replica(const serve_engine *e) {
    return e->rep;
}
int64_t engine_tensor_ranks(const serve_engine *e) {
    return e->nY;
}
int32_t engine_kv_shards(const serve_engine *e) {
    return e->Z;
}
int32_t engine_kv_shard(const serve_engine *e) {
    return e->zi;
}
int32_t engine_kv_elem_bytes(const serve_engine *e) {
    return compute_dtype_bytes(e->kvd);
}
int32_t engine_weight_elem_bytes(const serve_engine *e) {
    return compute_dtype_bytes(engine_precision(e)->dtype);
}
compute_dtype engine_kv_dtype(const serve_engine *e) {
    return e->kvd;
}
int64_t engine_pool_bytes(const serve_engine *e) {
    return 2 * (int64_t)e->d.kv_blocks * e->mirror * e->bstride * engine_kv_elem_bytes(e);
}
int64_t engine_kv_bytes_per_token(const serve_engine *e) {
    return 2 * e->L * e->ldk * (e->nY / e->Z) * engine_kv_elem_bytes(e);
}

/* ---------------------------------------------------------------- attention through the pages */

/* n fp32 values into the pool's elements at byte offset off of pool (bf16: rounded). */
static void pool_put(const serve_engine *e, unsigned char *pool, int64_t off, const float *src,
                     int64_t n) {
    if (e->kvd == COMPUTE_BF16)
        kern_bf16_pack((kern_bf16 *)(pool + off), src, n);
    else
        memcpy(pool + off, src, (size_t)n * sizeof(float));
}

/* Elements from the pool's start to segment sg's pool: a mirror's shard, else 0. */
static int64_t pool_base(const serve_engine *e, const engine_seg *sg) {
    return e->mirror > 1 ? (int64_t)sg->shard * e->d.kv_blocks * e->bstride : 0;
}

/* Segment sg's n rows of attention for Nq query heads through its block table, layer offset
 * `layer` (elements, from its pool's start): kern_attn_paged on an fp32 pool, kern_attn_paged_bf16
 * on a bf16 one (generate's bf16 cache's arithmetic: attn_paged.h). */
static void attend(serve_engine *e, float *out, const float *q, const engine_seg *sg, int64_t layer,
                   int64_t Nq) {
    const int64_t H = e->c.shape.H, bs = e->d.kv_block, Kl = e->ldk / H;
    layer += pool_base(e, sg);
    if (e->kvd == COMPUTE_BF16) {
        const kern_bf16 *k = (const kern_bf16 *)e->kpool, *v = (const kern_bf16 *)e->vpool;
        const kern_kv_pages_bf16 pg = {k + layer, v + layer, {sg->tab, bs, e->bstride, e->ldk}};
        kern_attn_paged_bf16(out, e->scr, q, &pg, sg->p0, sg->n, Nq, Kl, H);
        return;
    }
    const float *k = (const float *)e->kpool, *v = (const float *)e->vpool;
    const kern_kv_pages pg = {k + layer, v + layer, {sg->tab, bs, e->bstride, e->ldk}};
    kern_attn_paged(out, e->scr, q, &pg, sg->p0, sg->n, Nq, Kl, H);
}

/* Segment sg's rows' keys and values (from row r0 of io) into its blocks. */
static void store_rows(serve_engine *e, const model_attn_io *io, const engine_seg *sg, int64_t r0) {
    const int64_t bs = e->d.kv_block, eb = engine_kv_elem_bytes(e);
    const int64_t layer = io->l * bs * e->ldk + pool_base(e, sg);
    for (int64_t i = 0; i < sg->n; i++) {
        const int64_t pos = sg->p0 + i,
                      off = sg->tab[pos / bs] * e->bstride + layer + (pos % bs) * e->ldk;
        pool_put(e, e->kpool, off * eb, io->k + (r0 + i) * e->ldk, e->ldk);
        pool_put(e, e->vpool, off * eb, io->v + (r0 + i) * e->ldk, e->ldk);
    }
}

/* Rows of each shard among the forward's segments into e->zrows; returns the most of any. */
static int64_t shard_rows(serve_engine *e) {
    int64_t blk = 0;
    memset(e->zrows, 0, (size_t)e->Z * sizeof *e->zrows);
    for (int32_t j = 0; j < e->ncur; j++) e->zrows[e->cur[j].shard] += e->cur[j].n;
    for (int32_t z = 0; z < e->Z; z++) blk = e->zrows[z] > blk ? e->zrows[z] : blk;
    return blk;
}

/* The AllToAll layout (engine.h): each row's q to the group rank holding its sequence, which
 * stores the row's k and v and attends for the group's M = Nl·Z heads, and the outputs back. The
 * exchange's blocks are the rows of the busiest shard, padded (the group's ranks share the plan,
 * so they agree on it). */
static void attn_alltoall(serve_engine *e, const model_attn_io *io) {
    const int64_t NH = model_extents_of(e->mod)->Nl * e->c.shape.H, MH = NH * e->Z;
    const int64_t layer = io->l * e->d.kv_block * e->ldk, blk = shard_rows(e),
                  mine = e->zrows[e->zi];
    if (blk == 0) return;
    memset(e->zrows, 0, (size_t)e->Z * sizeof *e->zrows); /* now each shard's rows so far */
    for (int32_t j = 0, r0 = 0; j < e->ncur; r0 += e->cur[j++].n) { /* q[B_Z, N_YZ] blocks */
        const engine_seg *sg = &e->cur[j];
        floats_copy(e->a2a_q + (sg->shard * blk + e->zrows[sg->shard]) * NH, io->q + r0 * NH,
                    sg->n * NH);
        e->zrows[sg->shard] += sg->n;
        if (sg->shard == e->zi) store_rows(e, io, sg, r0);
    }
    mesh_all_to_all(e->gm, e->gax, e->a2a_o, e->a2a_q, blk * NH, MESH_ALG_DEFAULT);
    for (int64_t i = 0; i < e->Z; i++) /* rank i's heads of my rows: q[rows, M] */
        for (int64_t r = 0; r < mine; r++)
            floats_copy(e->qm + r * MH + i * NH, e->a2a_o + (i * blk + r) * NH, NH);
    for (int32_t j = 0, lr = 0; j < e->ncur; j++) { /* my sequences, the group's M heads */
        const engine_seg *sg = &e->cur[j];
        if (sg->shard != e->zi) continue;
        attend(e, e->om + lr * MH, e->qm + lr * MH, sg, layer, MH / e->c.shape.H);
        lr += sg->n;
    }
    for (int64_t i = 0; i < e->Z; i++) /* heads [i·Nl, (i+1)·Nl) of my rows back to rank i */
        for (int64_t r = 0; r < mine; r++)
            floats_copy(e->a2a_q + (i * blk + r) * NH, e->om + r * MH + i * NH, NH);
    mesh_all_to_all(e->gm, e->gax, e->a2a_o, e->a2a_q, blk * NH, MESH_ALG_DEFAULT);
    memset(e->zrows, 0, (size_t)e->Z * sizeof *e->zrows);
    for (int32_t j = 0, r0 = 0; j < e->ncur; r0 += e->cur[j++].n) { /* O[B, N_YZ] */
        const engine_seg *sg = &e->cur[j];
        floats_copy(io->att + r0 * NH, e->a2a_o + (sg->shard * blk + e->zrows[sg->shard]) * NH,
                    sg->n * NH);
        e->zrows[sg->shard] += sg->n;
    }
}

/* Every segment of the forward, in order: store its rows' keys and values in its blocks, then
 * attend through its block table. */
static void attn_hook(void *ctx, const model_attn_io *io) {
    serve_engine *e = ctx;
    if (e->Z > 1) {
        attn_alltoall(e, io);
        return;
    }
    const int64_t NH = model_extents_of(e->mod)->Nl * e->c.shape.H;
    const int64_t layer = io->l * e->d.kv_block * e->ldk;
    int64_t r0 = 0;
    for (int32_t j = 0; j < e->ncur; j++) {
        const engine_seg *sg = &e->cur[j];
        store_rows(e, io, sg, r0);
        attend(e, io->att + r0 * NH, io->q + r0 * NH, sg, layer, NH / e->c.shape.H);
        r0 += sg->n;
    }
}

/* ---------------------------------------------------------------- a step */

/* The rows of the segments: returns R and sets *n_out (rows whose logits are wanted). */
static int64_t gather_rows(serve_engine *e, const engine_seg *segs, int32_t nseg, int64_t *n_out) {
    int64_t R = 0, n = 0;
    for (int32_t j = 0; j < nseg; j++) {
        const engine_seg *sg = &segs[j];
        CHECK(R + sg->n <= e->d.max_rows, "engine: %lld rows, more than the %d of a forward",
              (long long)(R + sg->n), (int)e->d.max_rows);
        for (int32_t i = 0; i < sg->n; i++, R++) {
            e->rtok[R] = sg->tok[i];
            e->rpos[R] = sg->p0 + i;
            if (sg->out == ENGINE_OUT_ALL || (sg->out == ENGINE_OUT_LAST && i == sg->n - 1))
                e->out_rows[n++] = R;
        }
    }
    *n_out = n;
    return R;
}

int64_t engine_forward(serve_engine *e, const engine_seg *segs, int32_t nseg, gen_step *st) {
    const double t0 = mesh_now();
    const int64_t V = e->c.shape.V, Vl = model_extents_of(e->mod)->Vl;
    int64_t n = 0;
    const int64_t R = gather_rows(e, segs, nseg, &n);
    if (st) *st = (gen_step){0, (double)R, 0, 0, 0};
    if (R == 0 && e->pl.expert.n <= 1) return 0; /* (an expert axis's AllToAlls need every rank) */
    e->cur = segs, e->ncur = nseg;
    model_fwd_rows(e->mod, e->nY == 1 ? e->logits : e->lg_loc, e->out_rows, n, e->rtok, e->rpos, R,
                   attn_hook, e, e->ws);
    if (e->nY > 1 && n > 0) { /* every shard of every row: one AllGather over the tensor axis */
        mesh_all_gather(e->m, e->tax, e->lg_all, e->lg_loc, n * Vl, MESH_ALG_DEFAULT);
        for (int64_t y = 0; y < e->nY; y++)
            for (int64_t i = 0; i < n; i++)
                memcpy(e->logits + i * V + y * Vl, e->lg_all + (y * n + i) * Vl,
                       (size_t)Vl * sizeof(float));
    }
    if (st) st->seconds = mesh_now() - t0;
    return n;
}

const float *engine_row_logits(const serve_engine *e, int64_t i) {
    return e->logits + i * e->c.shape.V;
}

void engine_share(serve_engine *e, float *out, const float *in, int64_t n) {
    if (e->wm && n > 0) { /* over the world of both sides: one rank of each replica counts */
        const mesh_axes all = {.n = 1, .ax = {0}};
        if (e->pl.tensor.index != 0) memset(out, 0, (size_t)n * sizeof *out), in = out;
        mesh_all_reduce(e->wm, all, out, in, n, MESH_ALG_MPI);
    } else if (e->nrep > 1 && n > 0)
        mesh_all_reduce(e->m, e->dax, out, in, n, MESH_ALG_MPI);
    else
        memcpy(out, in, (size_t)n * sizeof(float));
}

int32_t engine_segs_of_plan(const serve_engine *e, const batch_plan *p, engine_seg *segs,
                            int32_t *item_out) {
    int32_t nseg = 0, n = 0;
    for (int32_t j = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        item_out[j] = -1;
        if (it->replica != e->rep) continue;
        segs[nseg++] = (engine_seg){p->tok + it->tok_off,
                                    p->tab + it->tab_off,
                                    it->p0,
                                    it->n,
                                    it->sample ? ENGINE_OUT_LAST : ENGINE_OUT_NONE,
                                    it->shard};
        if (it->sample) item_out[j] = n++;
    }
    return nseg;
}

float *engine_lp_buffer(serve_engine *e, int64_t n) {
    CHECK(n <= e->nrep * e->d.max_rows * (1 + 2 * BATCH_TOP_LOGPROBS_MAX),
          "engine: %lld floats of log-probabilities, more than a step's", (long long)n);
    memset(e->lp_in, 0, (size_t)n * sizeof *e->lp_in);
    return e->lp_in;
}

void engine_lp_record(serve_engine *e, float *rec, const batch_item *it, const float *logits,
                      int32_t token) {
    logprob_record(rec, logits, e->c.shape.V, token, it->top_logprobs, e->lp_scr);
}

void engine_step(serve_engine *e, const batch_plan *p, int32_t *next, float *lp, gen_step *st) {
    const double t0 = mesh_now();
    const int64_t V = e->c.shape.V, nlp = lp ? batch_plan_lp_floats(p) : 0;
    const int32_t nseg = engine_segs_of_plan(e, p, e->segs, e->item_out);
    gen_step fs;
    engine_forward(e, e->segs, nseg, &fs);
    float *lp_in = nlp ? engine_lp_buffer(e, nlp) : NULL;
    int32_t nsample = 0;
    for (int32_t j = 0, lpo = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        if (!it->sample) continue;
        e->tokbuf[nsample] = 0;
        if (e->item_out[j] >= 0) {
            const double u = kern_rng_uniform(it->seed, GEN_STREAM, (uint64_t)it->tok_index);
            const float *lg = e->logits + e->item_out[j] * V;
            const int32_t t = sample_pick(lg, V, it->temperature, it->top_k, u, e->items);
            e->tokbuf[nsample] = (float)t;
            if (lp_in && it->logprobs) engine_lp_record(e, lp_in + lpo, it, lg, t);
        }
        lpo += (it->draft + 1) * (int32_t)batch_lp_floats(it);
        nsample++;
    }
    /* every replica's tokens on every rank: a sum in which only the owning replica is nonzero */
    engine_share(e, e->tokall, e->tokbuf, nsample);
    if (nlp) engine_share(e, lp, lp_in, nlp);
    for (int32_t k = 0; k < nsample; k++) next[k] = (int32_t)e->tokall[k];
    if (st) *st = (gen_step){mesh_now() - t0, fs.rows, 0, 0, 0};
}

/* ---------------------------------------------------------------- disaggregated: the KV's move */

/* engine_link's table: per world rank its replica, tensor coordinate, tensor degree and pools
 * (WHERE entries). */
enum { WHERE_REPLICA, WHERE_TENSOR, WHERE_DEGREE, WHERE_POOLS, WHERE };

void engine_link(serve_engine *e, mesh *world) {
    const int32_t W = (int32_t)mesh_nranks(world), me = (int32_t)mesh_rank(world);
    float *in = alloc_floats(WHERE * (int64_t)W), *out = alloc_floats(WHERE * (int64_t)W);
    e->where = calloc((size_t)W * WHERE, sizeof *e->where);
    e->xbuf = (unsigned char *)alloc_floats(e->bstride);
    e->pieces = calloc((size_t)W, sizeof *e->pieces);
    CHECK(in && out && e->where && e->xbuf && e->pieces, "engine_link: out of memory");
    float *mine = in + WHERE * me;
    mine[WHERE_REPLICA] = (float)e->rep, mine[WHERE_TENSOR] = (float)e->pl.tensor.index;
    mine[WHERE_DEGREE] = (float)e->nY, mine[WHERE_POOLS] = (float)e->Z;
    const mesh_axes all = {.n = 1, .ax = {0}};
    mesh_all_reduce(world, all, out, in, WHERE * (int64_t)W, MESH_ALG_MPI);
    for (int64_t i = 0; i < WHERE * (int64_t)W; i++) e->where[i] = (int32_t)out[i];
    e->wm = world, e->wn = W;
    ALLOC_FREE_ALL(in, out);
}

/* Entry k (WHERE_DEGREE or WHERE_POOLS) of replica rep's first rank in engine_link's table
 * (without a link: this engine's). */
static int64_t replica_entry(const serve_engine *e, int32_t rep, int k) {
    for (int32_t r = 0; e->wm && r < e->wn; r++)
        if (e->where[WHERE * r + WHERE_REPLICA] == rep) return e->where[WHERE * r + k];
    return k == WHERE_DEGREE ? e->nY : e->Z;
}

int64_t engine_replica_tensor(const serve_engine *e, int32_t rep) {
    return replica_entry(e, rep, WHERE_DEGREE);
}
int32_t engine_replica_pools(const serve_engine *e, int32_t rep) {
    return (int32_t)replica_entry(e, rep, WHERE_POOLS);
}

/* The world rank of replica rep's tensor coordinate y (engine_link's table). */
static int world_rank_of(const serve_engine *e, int32_t rep, int64_t y) {
    for (int32_t r = 0; r < e->wn; r++)
        if (e->where[WHERE * r + WHERE_REPLICA] == rep && e->where[WHERE * r + WHERE_TENSOR] == y)
            return (int)r;
    CHECK(0, "engine: no rank holds replica %d's tensor coordinate %lld", (int)rep, (long long)y);
    return -1;
}

/* Transfer t's two sides: the replicas' tensor degrees and pools, the sequence's pool in each. */
static void xfer_sides(const serve_engine *e, const batch_xfer *t, kvroute_side *src,
                       kvroute_side *dst) {
    *src =
        (kvroute_side){engine_replica_tensor(e, t->src), engine_replica_pools(e, t->src), t->shard};
    *dst = (kvroute_side){engine_replica_tensor(e, t->dst), engine_replica_pools(e, t->dst),
                          t->dshard};
}

int64_t engine_xfer_bytes(const serve_engine *e, const batch_plan *p) {
    const model_shape *s = &e->c.shape;
    int64_t bytes = 0;
    for (int32_t i = 0; i < p->nxfer; i++) {
        kvroute_side src, dst;
        xfer_sides(e, &p->xfer[i], &src, &dst);
        bytes += (int64_t)p->xfer[i].nblocks * e->d.kv_block * 2 * s->L *
                 kvroute_heads_held(s, &dst) * s->H * engine_kv_elem_bytes(e);
    }
    return bytes;
}

/* Heads [h0, h0 + n) of a block's slab (its L·bs rows of ldk elements, this rank's heads from
 * its k0) to buf, packed (unpack: back from buf). */
static void pack_heads(const serve_engine *e, unsigned char *slab, int64_t h0, int64_t n,
                       int unpack) {
    const int64_t H = e->c.shape.H, eb = engine_kv_elem_bytes(e), rows = e->L * e->d.kv_block;
    const int64_t pb = n * H * eb, at = (h0 - model_extents_of(e->mod)->k0) * H * eb;
    for (int64_t i = 0; i < rows; i++) {
        unsigned char *row = slab + i * e->ldk * eb + at;
        if (unpack)
            memcpy(row, e->xbuf + i * pb, (size_t)pb);
        else
            memcpy(e->xbuf + i * pb, row, (size_t)pb);
    }
}

/* Piece pc of transfer t (to destination coordinate yd of Yd, from a sharding of Ys): every
 * block's K and V heads [h0, h1), from the source's rank to the destination's; a piece that is
 * both ranks' whole shard goes as the slab itself. Returns the bytes this rank moved. (A rank
 * in the AllToAll layout holds one pool, the sequence's: the block tables address it.) */
static int64_t move_piece(serve_engine *e, const batch_plan *p, const batch_xfer *t,
                          const kvroute_piece *pc, int64_t Ys, int64_t Yd, int64_t yd) {
    const model_shape *s = &e->c.shape;
    const int src = world_rank_of(e, t->src, pc->src), dst = world_rank_of(e, t->dst, yd);
    const int me = mesh_rank(e->wm);
    if (me != src && me != dst) return 0;
    int64_t a, na, c, nc;
    model_tensor_kv_heads(s, Ys, pc->src, &a, &na);
    model_tensor_kv_heads(s, Yd, yd, &c, &nc);
    const int whole = a == pc->h0 && c == pc->h0 && na == pc->h1 - pc->h0 && nc == na;
    const int64_t eb = engine_kv_elem_bytes(e), slab = e->bstride * eb;
    const int64_t n = pc->h1 - pc->h0, bytes = whole ? slab : e->L * e->d.kv_block * n * s->H * eb;
    const int32_t *tab = p->xtab + t->tab_off + (me == src ? 0 : t->nblocks);
    const mesh_comm *wc = mesh_world_comm(e->wm);
    for (int32_t b = 0; b < t->nblocks; b++)
        for (int kv = 0; kv < 2; kv++) {
            unsigned char *blk = (kv ? e->vpool : e->kpool) + tab[b] * slab;
            if (whole) {
                mesh_move_bytes(wc, blk, slab, src, dst);
                continue;
            }
            if (me == src) pack_heads(e, blk, pc->h0, n, 0);
            mesh_move_bytes(wc, e->xbuf, bytes, src, dst);
            if (me == dst) pack_heads(e, blk, pc->h0, n, 1);
        }
    return 2 * bytes * t->nblocks;
}

/* engine_transfer between two tensor shardings (engine_link): for each transfer, each
 * destination coordinate in order (those holding the sequence's pool), its pieces in order
 * (kvroute_pieces, from the source coordinates holding the sequence's pool there). Every rank walks
 * the same list and blocks on its own moves only, so the first unfinished move always has both ends
 * at it.
 */
static void transfer_linked(serve_engine *e, const batch_plan *p, engine_xfer *x) {
    kvroute_piece *pcs = e->pieces;
    for (int32_t i = 0; i < p->nxfer; i++) {
        const batch_xfer *t = &p->xfer[i];
        if (t->src != e->rep && t->dst != e->rep) continue;
        kvroute_side src, dst;
        xfer_sides(e, t, &src, &dst);
        for (int64_t yd = 0; yd < dst.Y; yd++) {
            const int32_t np = kvroute_pieces(&e->c.shape, &src, &dst, yd, pcs);
            for (int32_t k = 0; k < np; k++)
                x->bytes += move_piece(e, p, t, &pcs[k], src.Y, dst.Y, yd);
        }
        x->sent += t->src == e->rep, x->received += t->dst == e->rep;
    }
}

engine_xfer engine_transfer(serve_engine *e, const batch_plan *p) {
    engine_xfer x = {0, 0, 0, 0};
    if (p->nxfer == 0) return x;
    const double t0 = mesh_now();
    if (e->wm) {
        transfer_linked(e, p, &x);
        x.seconds = mesh_now() - t0;
        return x;
    }
    const mesh_comm *dc = mesh_axes_comm(e->m, e->dax);
    CHECK(mesh_axes_index(e->m, e->dax) == e->rep, "engine: replica %d is rank %d of its axes",
          (int)e->rep, mesh_axes_index(e->m, e->dax));
    const int64_t slab = e->bstride * engine_kv_elem_bytes(e);
    for (int32_t i = 0; i < p->nxfer; i++) {
        const batch_xfer *t = &p->xfer[i];
        if ((t->src != e->rep && t->dst != e->rep) || t->shard != e->zi) continue;
        CHECK(t->dshard == t->shard, "engine: a move from pool %d into pool %d on one mesh",
              (int)t->shard, (int)t->dshard);
        const int32_t *tab = p->xtab + t->tab_off + (t->src == e->rep ? 0 : t->nblocks);
        for (int32_t b = 0; b < t->nblocks; b++) {
            mesh_move_bytes(dc, e->kpool + tab[b] * slab, slab, t->src, t->dst);
            mesh_move_bytes(dc, e->vpool + tab[b] * slab, slab, t->src, t->dst);
        }
        x.sent += t->src == e->rep, x.received += t->dst == e->rep;
        x.bytes += 2 * slab * t->nblocks;
    }
    x.seconds = mesh_now() - t0;
    return x;
}

const float *engine_logits(const serve_engine *e, int32_t j) {
    return e->item_out[j] >= 0 ? e->logits + e->item_out[j] * e->c.shape.V : NULL;
}

/* ---------------------------------------------------------------- create */

int32_t engine_kv_groups(const config *c, const mesh *m, int kv_replicate) {
    const int ty = c->tensor_axis[0] ? mesh_axis_index(m, c->tensor_axis[0]) : -1;
    const int64_t nY = ty >= 0 ? mesh_axis_size(m, ty) : 1;
    return nY > c->shape.K && !kv_replicate ? (int32_t)(nY / c->shape.K) : 1;
}

/* The sharding: replicas over the data axes, the tensor axis, the pool's layout. */
static int layout(serve_engine *e, char *err, size_t errlen) {
    const model_shape *s = &e->c.shape;
    const int ty = e->c.tensor_axis[0] ? mesh_axis_index(e->m, e->c.tensor_axis[0]) : -1;
    e->nY = ty >= 0 ? mesh_axis_size(e->m, ty) : 1;
    if (ty >= 0) e->tax = (mesh_axes){.n = 1, .ax = {ty}};
    e->nrep = (int32_t)e->pl.batch.n;
    e->rep = (int32_t)e->pl.batch.index;
    if (e->d.nrep > 0) e->rep += e->d.rep0, e->nrep = e->d.nrep; /* one side of two meshes */
    char axes[CONFIG_AXES_LEN];
    config_data_axes(&e->c, e->m, axes);
    if (mesh_axes_parse(e->m, axes, &e->dax) < 0)
        return errmsg_fail(err, errlen, "serve: cannot parse the data axes '%s'", axes);
    const int64_t Kl = s->K >= e->nY ? s->K / e->nY : 1;
    e->Z = engine_kv_groups(&e->c, e->m, e->d.kv_replicate);
    e->zi = ty >= 0 ? (int32_t)(mesh_axis_coord(e->m, ty) % e->Z) : 0;
    e->mirror = e->d.mirror_shards > 1 && e->Z == 1 ? e->d.mirror_shards : 1;
    if (e->Z > 1 && mesh_ndims(e->m) >= MESH_MAX_AXES)
        return errmsg_fail(err, errlen,
                           "the AllToAll kv layout splits the tensor axis in two, and a mesh of "
                           "%d axes has no room for another: use --kv-replicate",
                           mesh_ndims(e->m));
    e->L = s->L;
    e->ldk = Kl * s->H;
    e->bstride = s->L * e->d.kv_block * e->ldk;
    const double need = (double)engine_pool_bytes(e), avail = gen_mem_available();
    const double per_rank = avail / (double)mesh_host_ranks(e->m);
    if (mesh_agree(mesh_world_comm(e->m), avail > 0 && need > per_rank ? -1 : 0) < 0)
        return errmsg_fail(err, errlen,
                           "the KV pool is too big: --kv-blocks %d of %d positions = %.2f GB on "
                           "each rank (K and V [blocks, L=%lld, %d, %lld kv heads, H=%lld] "
                           "%s), more than the %.2f GB this host has available per rank: use "
                           "fewer --kv-blocks or more --tensor ranks",
                           (int)e->d.kv_blocks, (int)e->d.kv_block, need / 1e9, (long long)s->L,
                           (int)e->d.kv_block, (long long)Kl, (long long)s->H,
                           compute_dtype_name(e->kvd), per_rank / 1e9);
    return 0;
}

static int alloc_buffers(serve_engine *e) {
    const model_shape *s = &e->c.shape;
    const int64_t R = e->d.max_rows, pool = engine_pool_bytes(e) / 2 / (int64_t)sizeof(float);
    const int64_t G = s->N / s->K > 0 ? s->N / s->K : 1;
    e->kpool = (unsigned char *)alloc_floats(pool);
    e->vpool = (unsigned char *)alloc_floats(pool);
    e->rtok = calloc((size_t)R, sizeof *e->rtok);
    e->rpos = calloc((size_t)R, sizeof *e->rpos);
    e->out_rows = calloc((size_t)R, sizeof *e->out_rows);
    e->ws = alloc_floats(model_rows_ws(e->mod, R));
    e->scr = alloc_floats(e->kvd == COMPUTE_BF16 ? kern_attn_paged_bf16_scratch(0, s->T, G, 1, s->H)
                                                 : G * s->T);
    e->logits = alloc_floats(R * s->V);
    e->lg_loc = alloc_floats(R * s->V / e->nY);
    e->lg_all = alloc_floats(R * s->V);
    e->tokbuf = alloc_floats((int64_t)e->nrep * R);
    e->tokall = alloc_floats((int64_t)e->nrep * R);
    e->item_out = calloc((size_t)e->nrep * (size_t)R, sizeof *e->item_out);
    e->lp_in = alloc_floats((int64_t)e->nrep * R * (1 + 2 * BATCH_TOP_LOGPROBS_MAX));
    e->lp_scr = calloc((size_t)s->V, sizeof *e->lp_scr);
    e->segs = calloc((size_t)R, sizeof *e->segs);
    e->items = calloc((size_t)s->V, sizeof *e->items);
    if (e->Z > 1) { /* the AllToAll layout's exchange */
        const int64_t NH = model_extents_of(e->mod)->Nl * s->H;
        e->a2a_q = alloc_floats(e->Z * R * NH);
        e->a2a_o = alloc_floats(e->Z * R * NH);
        e->qm = alloc_floats(R * NH * e->Z);
        e->om = alloc_floats(R * NH * e->Z);
        e->zrows = calloc((size_t)e->Z, sizeof *e->zrows);
        if (!e->a2a_q || !e->a2a_o || !e->qm || !e->om || !e->zrows) return -1;
    }
    return e->kpool && e->vpool && e->rtok && e->rpos && e->out_rows && e->ws && e->scr &&
                   e->logits && e->lg_loc && e->lg_all && e->tokbuf && e->tokall && e->item_out &&
                   e->segs && e->items && e->lp_in && e->lp_scr
               ? 0
               : -1;
}

int engine_refuse(const config *c, char *err, size_t errlen) {
    if (gen_refuse(c, err, errlen) < 0) return -1;
    if (model_moe_capacity(&c->shape) > 0)
        return errmsg_fail(err, errlen,
                           "the model's experts drop slots past a capacity (--capacity-factor "
                           "%g), counted per sequence from its first token, which serve's batches "
                           "do not track: run it with `meshtrain generate` (it keeps each "
                           "sequence's counts)",
                           c->shape.moe.capacity);
    return 0;
}

serve_engine *engine_create(const config *c, mesh *m, const engine_dims *d, char *err,
                            size_t errlen) {
    if (engine_refuse(c, err, errlen) < 0) return NULL;
    serve_engine *e = calloc(1, sizeof *e);
    CHECK(e, "engine_create: out of memory");
    e->c = *c;
    e->m = m;
    e->d = *d;
    if (precision_setup(&e->prec, c, m, 0, 0, err, errlen) < 0) {
        free(e);
        return NULL;
    }
    e->c.compute = e->prec.dtype;
    e->kvd = c->kv_dtype == COMPUTE_AUTO ? e->prec.dtype : c->kv_dtype;
    if (gen_plan_create(&e->c, m, d->max_rows, &e->pl, &e->run, err, errlen) < 0) {
        precision_free(&e->prec);
        free(e);
        return NULL;
    }
    int rc = layout(e, err, errlen);
    if (rc == 0) {
        e->mod = gen_model_create(c, m, &e->pl, &e->prec, e->run, err, errlen);
        rc = e->mod ? 0 : -1;
    }
    if (rc == 0 && e->Z > 1) {
        e->gm = kv_group_mesh(m, c->tensor_axis[0], c->shape.K, e->Z, &e->gax, err, errlen);
        rc = e->gm ? 0 : -1;
    }
    if (rc == 0 && mesh_agree(mesh_world_comm(m), alloc_buffers(e)) < 0)
        rc = errmsg_fail(err, errlen, "out of memory allocating the KV pool (%.2f GB per rank)",
                         (double)engine_pool_bytes(e) / 1e9);
    if (rc < 0) {
        engine_destroy(e);
        return NULL;
    }
    return e;
}

void engine_destroy(serve_engine *e) {
    if (!e) return;
    model_destroy(e->mod);
    mesh_destroy(e->gm);
    precision_free(&e->prec);
    par_destroy(e->run);
    ALLOC_FREE_ALL(e->kpool, e->vpool, e->rtok, e->rpos, e->out_rows, e->ws, e->scr, e->logits,
                   e->lg_loc, e->lg_all, e->tokbuf, e->tokall, e->item_out, e->segs, e->items,
                   e->lp_in, e->lp_scr, e->where, e->xbuf, e->pieces, e->a2a_q, e->a2a_o, e->qm,
                   e->om, e->zrows, e);
}
