/* gen: generation with a KV cache on the mesh (see gen.h for the sharding). */
#include "train/infer/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_bf16.h"
#include "kernels/attn_cache.h"
#include "kernels/rng.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "train/infer/kvshard.h"
#include "train/model/hooks.h"
#include "train/model/sample.h"
#include "train/step/precision.h"

/* K or V of this rank: [L, Bc, S, Kc, H], Bc sequences (local indices [c0, c0 + Bc)), Kc kv
 * heads (the model's local ones), elements of `elem` bytes: fp32, or bf16 (--kv-dtype bf16). */
typedef struct {
    int64_t L, Bc, S, Kc, H, c0, elem;
    unsigned char *k, *v;
} kvcache;

static void *kv_row(const kvcache *kv, unsigned char *base, int64_t l, int64_t b, int64_t pos) {
    return base + (((l * kv->Bc + b) * kv->S + pos) * kv->Kc) * kv->H * kv->elem;
}

/* n fp32 values into the cache's elements at dst (bf16: rounded to nearest even). */
static void kv_put(const kvcache *kv, void *dst, const float *src, int64_t n) {
    if (kv->elem == 2)
        kern_bf16_pack(dst, src, n);
    else
        memcpy(dst, src, (size_t)n * sizeof(float));
}

struct gen {
    config c;
    mesh *m;
    mesh *gm;      /* the mesh with the tensor axis split into (kv head, group): AllToAll */
    mesh_axes gax; /* the group axis of gm */
    mesh_axes tax; /* the tensor axis of m (vocabulary shards), nY ranks (1 without) */
    int64_t nY;
    int64_t Z;         /* ranks sharing a kv head in the AllToAll layout (1 otherwise) */
    plan pl;           /* the sharding plan (forward only) */
    precision prec;    /* --compute-dtype resolved: the matmuls' dtype, the bf16 path and context */
    compute_dtype kvd; /* --kv-dtype resolved */
    kern_bf16_ctx *kvctx;   /* bf16 cache: the context of its attention (prec's, or own_ctx) */
    kern_bf16_ctx *own_ctx; /* bf16 cache with fp32 compute: the own kernels' context */
    par *run;               /* its sharded run (NULL on one rank) */
    model *mod;
    gen_kv_mode mode;
    gen_dims d;
    char kv_axis;   /* --kv-shard's axis, or 0 */
    int cp_prefill; /* gen_create_cp: the prefill's prompts over kv_axis too */
    int64_t nX, B_loc, row0;
    kvcache kv;
    kvshard ks; /* --kv-shard: the cache's positions over a mesh axis (P = 1 without) */
    /* per local sequence: next position, tokens generated so far */
    int32_t *pos;
    int64_t *ntok;
    /* with experts and a capacity factor: each row's local sequence, and each sequence's slots
     * per MoE block and expert so far [B_loc, Lm, E] (model_rows_capacity) */
    int32_t *moe_seq, *moe_cnt;
    int64_t moe_per_seq; /* Lm·E */
    /* one forward: rows, their tokens and positions, the rows whose logits are wanted */
    int32_t *rtok, *rpos;
    int64_t *out_rows;
    float *ws, *logits, *scr, *qm, *om, *a2a;
    kern_bf16 *kb, *vb;     /* bf16 cache: a prefill sequence's keys and values, rounded */
    float *lg_loc, *lg_all; /* one forward's logits of this vocab shard [n, Vl]; all [nY, n, Vl] */
    sample_item *items;
    /* the step being run, for the attention hook */
    int prefill;
    const int32_t *ext_n;     /* gen_extend: rows of each local sequence */
    const int64_t *chunk_len; /* prefill: lengths of the chunk's sequences */
    int64_t chunk_b0, chunk_n;
    double kv_bytes, attn_flops;
};

const precision *gen_precision(const gen *g) {
    return &g->prec;
}

model *gen_model(gen *g) {
    return g->mod;
}
par *gen_par(gen *g) {
    return g->run;
}
gen_kv_mode gen_mode(const gen *g) {
    return g->mode;
}
void gen_rows(const gen *g, int64_t *row0, int64_t *n) {
    *row0 = g->row0;
    *n = g->B_loc;
}
int64_t gen_cache_bytes(const gen *g) {
    const kvcache *kv = &g->kv;
    return 2 * kv->L * kv->Bc * kv->S * kv->Kc * kv->H * kv->elem;
}
compute_dtype gen_kv_dtype(const gen *g) {
    return g->kvd;
}
int64_t gen_kv_shard(const gen *g, int64_t *index) {
    *index = g->ks.p;
    return g->ks.P;
}
const float *gen_logits(const gen *g) {
    return g->logits;
}

/* ---------------------------------------------------------------- attention with the cache */

/* Stores n rows of k and v (row stride KH) at positions t0.. of local cache sequence b: the ones
 * this rank owns when the positions are sharded. */
static void store_kv(gen *g, int64_t l, int64_t b, int64_t t0, int64_t n, const float *k,
                     const float *v, int64_t KH) {
    const kvcache *kv = &g->kv;
    if (g->ks.ax.n == 0) {
        kv_put(kv, kv_row(kv, kv->k, l, b, t0), k, n * KH);
        kv_put(kv, kv_row(kv, kv->v, l, b, t0), v, n * KH);
        g->kv_bytes += 2.0 * (double)(n * KH * kv->elem);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t row = kvshard_row(&g->ks, t0 + i);
        if (row < 0) continue;
        kv_put(kv, kv_row(kv, kv->k, l, b, row), k + i * KH, KH);
        kv_put(kv, kv_row(kv, kv->v, l, b, row), v + i * KH, KH);
        g->kv_bytes += 2.0 * (double)(KH * kv->elem);
    }
}

/* out[n, Nl·H] = attention of q's n rows at positions p0.. against the cache rows kc, vc
 * [p0 + n, ldk] in the cache's element type: fp32 (kern_attn_cached), or bf16
 * (kern_attn_cached_bf16: q and the probabilities rounded to bf16, fp32 accumulation). */
static void attend(gen *g, float *out, const float *q, const void *kc, const void *vc, int64_t p0,
                   int64_t n, int64_t Nl, int64_t Kl, int64_t ldk) {
    const int64_t H = g->c.shape.H;
    if (g->kv.elem == 2)
        kern_attn_cached_bf16(g->kvctx, out, g->scr, q, kc, vc, p0, n, Nl, Kl, H, ldk);
    else
        kern_attn_cached(out, g->scr, q, kc, vc, p0, n, Nl, Kl, H, ldk);
}

/* Prefill: each sequence of the chunk attends to its own rows; the cached ones are stored. */
static void attn_prefill(gen *g, const model_attn_io *io) {
    const model_extents *lc = model_extents_of(g->mod);
    const int64_t H = g->c.shape.H, NH = lc->Nl * H, KH = lc->Kl * H;
    const kvcache *kv = &g->kv;
    int64_t r0 = 0;
    for (int64_t i = 0; i < g->chunk_n; i++) {
        const int64_t n = g->chunk_len[i], b = g->chunk_b0 + i - kv->c0;
        const void *k = io->k + r0 * KH, *v = io->v + r0 * KH;
        if (kv->elem == 2) { /* the rows as the cache holds them, so decode sees the same keys */
            kern_bf16_pack(g->kb, io->k + r0 * KH, n * KH);
            kern_bf16_pack(g->vb, io->v + r0 * KH, n * KH);
            k = g->kb, v = g->vb;
        }
        attend(g, io->att + r0 * NH, io->q + r0 * NH, k, v, 0, n, lc->Nl, lc->Kl, KH);
        g->attn_flops += 2.0 * (double)(n * (n + 1)) * (double)NH;
        if (b >= 0 && b < kv->Bc) store_kv(g, io->l, b, 0, n, io->k + r0 * KH, io->v + r0 * KH, KH);
        r0 += n;
    }
}

/* Decode, the book's AllToAll algorithm (gen.h): this rank attends for the group's M query heads
 * of its Bc sequences. */
static void attn_alltoall(gen *g, const model_attn_io *io) {
    const model_extents *lc = model_extents_of(g->mod);
    const int64_t H = g->c.shape.H, Nl = lc->Nl, Z = g->Z, Bc = g->kv.Bc, M = Nl * Z;
    const kvcache *kv = &g->kv;
    /* (2) block z of q (rows of the sequences rank z caches) to rank z: Q[B_Z, N_Y, H] */
    mesh_all_to_all(g->gm, g->gax, g->a2a, io->q, Bc * Nl * H, MESH_ALG_DEFAULT);
    for (int64_t i = 0; i < Z; i++)
        for (int64_t b = 0; b < Bc; b++)
            memcpy(g->qm + (b * M + i * Nl) * H, g->a2a + (i * Bc + b) * Nl * H,
                   (size_t)(Nl * H) * 4);
    /* (3) local attention against this rank's cache */
    for (int64_t b = 0; b < Bc; b++) {
        const int64_t p = g->pos[kv->c0 + b];
        attend(g, g->om + b * M * H, g->qm + b * M * H, kv_row(kv, kv->k, io->l, b, 0),
               kv_row(kv, kv->v, io->l, b, 0), p, 1, M, 1, H);
        g->attn_flops += 4.0 * (double)(p + 1) * (double)(M * H);
        g->kv_bytes += 2.0 * (double)((p + 1) * H * kv->elem);
    }
    /* (4) back: heads [i·Nl, (i+1)·Nl) of every local sequence to rank i; O[B, N_YZ, H] */
    for (int64_t i = 0; i < Z; i++)
        for (int64_t b = 0; b < Bc; b++)
            memcpy(g->a2a + (i * Bc + b) * Nl * H, g->om + (b * M + i * Nl) * H,
                   (size_t)(Nl * H) * 4);
    mesh_all_to_all(g->gm, g->gax, io->att, g->a2a, Bc * Nl * H, MESH_ALG_DEFAULT);
}

/* Decode: one row per local sequence at its position; store the new keys and values, attend. */
static void attn_decode(gen *g, const model_attn_io *io) {
    const model_extents *lc = model_extents_of(g->mod);
    const int64_t H = g->c.shape.H, NH = lc->Nl * H, KH = lc->Kl * H;
    const kvcache *kv = &g->kv;
    const double stored = g->kv_bytes; /* decode counts the store inside the read below */
    for (int64_t b = 0; b < kv->Bc; b++) {
        const int64_t r = kv->c0 + b;
        store_kv(g, io->l, b, g->pos[r], 1, io->k + r * KH, io->v + r * KH, KH);
    }
    g->kv_bytes = stored;
    if (g->ks.ax.n) { /* this rank's positions, the partials merged over the axis */
        kvshard_attend(&g->ks, g->m, io->att, io->q, kv_row(kv, kv->k, io->l, 0, 0),
                       kv_row(kv, kv->v, io->l, 0, 0), kv->S * KH, g->pos, KH, kv->elem == 2);
        for (int64_t r = 0; r < io->R; r++) {
            const double held = (double)kvshard_held(&g->ks, (int64_t)g->pos[r] + 1);
            g->attn_flops += 4.0 * held * (double)NH;
            g->kv_bytes += 2.0 * held * (double)(KH * kv->elem);
        }
        return;
    }
    if (g->mode == GEN_KV_ALLTOALL) {
        attn_alltoall(g, io);
        return;
    }
    for (int64_t r = 0; r < io->R; r++) {
        const int64_t p = g->pos[r];
        attend(g, io->att + r * NH, io->q + r * NH, kv_row(kv, kv->k, io->l, r, 0),
               kv_row(kv, kv->v, io->l, r, 0), p, 1, lc->Nl, lc->Kl, KH);
        g->attn_flops += 4.0 * (double)(p + 1) * (double)NH;
        g->kv_bytes += 2.0 * (double)((p + 1) * KH * kv->elem);
    }
}

/* Extend (gen_extend): sequence b's ext_n[b] rows at positions pos[b].. are stored in its cache,
 * then attend to it causally. */
static void attn_extend(gen *g, const model_attn_io *io) {
    const model_extents *lc = model_extents_of(g->mod);
    const int64_t H = g->c.shape.H, NH = lc->Nl * H, KH = lc->Kl * H;
    const kvcache *kv = &g->kv;
    for (int64_t b = 0, r0 = 0; b < kv->Bc; r0 += g->ext_n[b++]) {
        const int64_t n = g->ext_n[b], p = g->pos[b];
        if (n == 0) continue;
        kv_put(kv, kv_row(kv, kv->k, io->l, b, p), io->k + r0 * KH, n * KH);
        kv_put(kv, kv_row(kv, kv->v, io->l, b, p), io->v + r0 * KH, n * KH);
        attend(g, io->att + r0 * NH, io->q + r0 * NH, kv_row(kv, kv->k, io->l, b, 0),
               kv_row(kv, kv->v, io->l, b, 0), p, n, lc->Nl, lc->Kl, KH);
        g->attn_flops += 4.0 * (double)(n * (p + 1) + n * (n - 1) / 2) * (double)NH;
        g->kv_bytes += 2.0 * (double)((p + n) * KH * kv->elem);
    }
}

/* Prefill with the prompts over the kv axis (gen_create_cp): the rows are this rank's
 * positions of each sequence, which it attends over every rank's keys and caches as they are
 * (its local rows 0, 1, .. are positions p, p + P, ..). A rank that holds no position of the
 * chunk runs one padding row, whose output is zero. */
static void attn_prefill_cp(gen *g, const model_attn_io *io) {
    const model_extents *lc = model_extents_of(g->mod);
    const int64_t H = g->c.shape.H, NH = lc->Nl * H, KH = lc->Kl * H;
    const kvcache *kv = &g->kv;
    const double seen =
        kvshard_prefill(&g->ks, g->m, io->att, io->q, io->k, io->v, g->chunk_len, g->chunk_n,
                        kv->elem == 2);
    g->attn_flops += 4.0 * seen * (double)NH;
    int64_t r0 = 0;
    for (int64_t i = 0; i < g->chunk_n; i++) {
        const int64_t held = kvshard_held(&g->ks, g->chunk_len[i]), b = g->chunk_b0 + i - kv->c0;
        kv_put(kv, kv_row(kv, kv->k, io->l, b, 0), io->k + r0 * KH, held * KH);
        kv_put(kv, kv_row(kv, kv->v, io->l, b, 0), io->v + r0 * KH, held * KH);
        g->kv_bytes += 2.0 * (double)(held * KH * kv->elem);
        r0 += held;
    }
    if (r0 < io->R) memset(io->att + r0 * NH, 0, (size_t)((io->R - r0) * NH) * sizeof(float));
}

static void attn_hook(void *ctx, const model_attn_io *io) {
    gen *g = ctx;
    if (g->prefill && g->cp_prefill)
        attn_prefill_cp(g, io);
    else if (g->prefill)
        attn_prefill(g, io);
    else if (g->ext_n)
        attn_extend(g, io);
    else
        attn_decode(g, io);
}

/* ---------------------------------------------------------------- steps */

/* Weight bytes and matmul FLOPs of one forward of R rows with n_out logits rows on this rank. */
static void weight_cost(gen *g, int64_t R, int64_t n_out, gen_step *st) {
    const model_shape *s = &g->c.shape;
    const model_extents *lc = model_extents_of(g->mod);
    const int64_t H = s->H;
    const double layer_mm =
        (double)(s->D * (lc->Nl + 2 * lc->Kl) * H + lc->Nl * H * s->D + 3 * s->D * lc->Fl);
    /* with experts (one rank), a token passes through the router and k + S experts of a MoE
     * block; every weight is counted as read */
    const double blocks_mm =
        s->moe.E > 0 ? shape_matmul_params(s) - (double)(s->D * s->V) : (double)s->L * layer_mm;
    /* in bf16 compute the matrices are read as their bf16 copies, 2 bytes an element; the
     * norms' gains (and the embedding's rows, below) stay fp32 */
    const double mat = compute_dtype_bytes(g->prec.dtype);
    double bytes = 0;
    for (int id = 0; id < model_param_ids(s); id++) {
        int64_t n = 0;
        model_param(g->mod, (param_id)id, &n);
        const int gain = id == P_ATTN_NORM || id == P_MLP_NORM || id == P_FINAL_NORM;
        if (id != P_EMBED) bytes += (gain ? 4.0 : mat) * (double)n;
    }
    bytes += 4.0 * (double)(R * s->D) / (double)(s->V / lc->Vl); /* embedding rows */
    st->p_bytes = bytes;
    st->flops = 2.0 * (double)R * blocks_mm + 2.0 * (double)(n_out * s->D * lc->Vl);
}

/* Ranks of the tensor axis: they process the same rows, so each counts its share of them. */
static double tensor_ranks(const gen *g) {
    return (double)(g->c.shape.N / model_extents_of(g->mod)->Nl) * (double)g->ks.P;
}

/* One forward: the model's logits of this vocab shard for n rows, then all shards of all rows in
 * one AllGather over the tensor axis (not one per row) into logits[n, V]. */
static void forward(gen *g, float *logits, int64_t n, int64_t R) {
    const int64_t V = g->c.shape.V, Vl = model_extents_of(g->mod)->Vl;
    model_rows_capacity(g->mod, g->moe_cnt ? g->moe_seq : NULL, g->moe_cnt);
    model_fwd_rows(g->mod, g->nY == 1 ? logits : g->lg_loc, g->out_rows, n, g->rtok, g->rpos, R,
                   attn_hook, g, g->ws);
    if (g->nY == 1) return;
    mesh_all_gather(g->m, g->tax, g->lg_all, g->lg_loc, n * Vl, MESH_ALG_DEFAULT);
    for (int64_t y = 0; y < g->nY; y++) /* shard y holds the vocabulary [y·Vl, (y+1)·Vl) */
        for (int64_t i = 0; i < n; i++)
            memcpy(logits + i * V + y * Vl, g->lg_all + (y * n + i) * Vl, (size_t)Vl * 4);
}

/* The sampler's pick for local sequences [b0, b0 + n) from their rows of the logits. */
static void pick(gen *g, int64_t b0, int64_t n, int32_t *next) {
    const model_shape *s = &g->c.shape;
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = b0 + i, gb = g->row0 + b;
        const double u =
            kern_rng_uniform(g->c.seed, GEN_STREAM, ((uint64_t)gb << 32) | (uint64_t)g->ntok[b]);
        next[b] =
            sample_pick(g->logits + b * s->V, s->V, g->c.temperature, g->c.top_k, u, g->items);
        g->ntok[b]++;
    }
}

/* The sequences of the prefill's chunk from local sequence b0 (whole sequences, up to max_rows
 * rows; 0 past the last) and their rows R. */
static int64_t chunk_of(const gen *g, const prompt_set *ps, int64_t b0, int64_t *R) {
    int64_t n = 0;
    *R = 0;
    for (int64_t r; b0 + n < g->B_loc; n++, *R += r) {
        const int64_t len = ps->len[g->row0 + b0 + n];
        r = g->cp_prefill ? kvshard_prefill_rows(&g->ks, len) : len;
        if (*R + r > g->d.max_rows) break;
    }
    CHECK(n > 0 || b0 == g->B_loc, "gen_prefill: a prompt longer than %lld rows",
          (long long)g->d.max_rows);
    return n;
}

/* The prefill's forwards on every rank: this rank's chunks, and with an expert axis (whose
 * AllToAlls every data rank joins in every forward) the most chunks of any rank, a rank past
 * its last running forwards of no rows. Collective over: world, with an expert axis. */
static int64_t prefill_forwards(const gen *g, const prompt_set *ps) {
    int64_t k = 0, R;
    for (int64_t b0 = 0; b0 < g->B_loc; k++) b0 += chunk_of(g, ps, b0, &R);
    return g->pl.expert.n > 1 ? mesh_agree_max(mesh_world_comm(g->m), k) : k;
}

/* The rows of the prefill's chunk of local sequences [b0, b0 + n): each prompt's tokens at their
 * positions, or with cp_prefill this rank's positions of each (one padding row when it has none);
 * out_rows[i] the row of sequence i's last position (row 0 where another rank holds it). Their
 * count. */
static int64_t prefill_rows(gen *g, const prompt_set *ps, int64_t b0, int64_t n) {
    int64_t r = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t len = ps->len[g->row0 + b0 + i], r0 = r;
        const int32_t *tok = ps->tok[g->row0 + b0 + i];
        if (g->cp_prefill) {
            r += kvshard_take(&g->ks, tok, len, g->rtok + r, g->rpos + r);
        } else {
            for (int64_t t = 0; t < len; t++, r++) g->rtok[r] = tok[t], g->rpos[r] = (int32_t)t;
        }
        for (int64_t j = r0; j < r; j++) g->moe_seq[j] = (int32_t)(b0 + i);
        if (g->moe_cnt) /* the sequence starts: no expert has taken any of its tokens */
            memset(g->moe_cnt + (b0 + i) * g->moe_per_seq, 0,
                   (size_t)g->moe_per_seq * sizeof *g->moe_cnt);
        g->out_rows[i] = r > r0 && g->rpos[r - 1] == len - 1 ? r - 1 : 0;
        g->pos[b0 + i] = (int32_t)len;
    }
    if (r == 0) g->rtok[0] = g->rpos[0] = g->moe_seq[0] = 0, r = 1;
    return r;
}

/* cp_prefill: the chunk's logits rows [b0, b0 + n), right on the rank that holds each sequence's
 * last position, zeroed on the others, then summed over the kv axis: one rank's row plus zeros,
 * so every rank of the axis gets the same bits. */
static void share_logits(gen *g, int64_t b0, int64_t n) {
    const int64_t V = g->c.shape.V;
    float *lg = g->logits + b0 * V;
    for (int64_t i = 0; i < n; i++)
        if (kvshard_row(&g->ks, g->chunk_len[i] - 1) < 0) memset(lg + i * V, 0, (size_t)V * 4);
    mesh_all_reduce(g->m, g->ks.ax, lg, lg, n * V, MESH_ALG_DEFAULT);
}

void gen_prefill(gen *g, const prompt_set *ps, int32_t *next, gen_step *st) {
    const double t0 = mesh_now();
    memset(st, 0, sizeof *st);
    g->prefill = 1;
    g->kv_bytes = g->attn_flops = 0;
    const int64_t forwards = prefill_forwards(g, ps);
    for (int64_t b0 = 0, f = 0; f < forwards; f++) { /* chunks of whole sequences */
        int64_t R;
        const int64_t n = chunk_of(g, ps, b0, &R);
        R = prefill_rows(g, ps, b0, n);
        g->chunk_len = ps->len + g->row0 + b0;
        g->chunk_b0 = b0;
        g->chunk_n = n;
        forward(g, g->logits + b0 * g->c.shape.V, n, R);
        if (g->cp_prefill) share_logits(g, b0, n);
        pick(g, b0, n, next);
        gen_step w;
        weight_cost(g, R, n, &w);
        st->p_bytes += w.p_bytes;
        st->flops += w.flops;
        st->rows += (double)R / tensor_ranks(g) * (g->cp_prefill ? (double)g->ks.P : 1.0);
        b0 += n;
    }
    st->flops += g->attn_flops;
    st->kv_bytes = g->kv_bytes;
    st->seconds = mesh_now() - t0;
}

void gen_decode(gen *g, const int32_t *cur, int32_t *next, gen_step *st) {
    const double t0 = mesh_now();
    const int64_t R = g->B_loc;
    g->prefill = 0;
    g->kv_bytes = g->attn_flops = 0;
    for (int64_t r = 0; r < R; r++) {
        g->rtok[r] = cur[r];
        g->rpos[r] = g->pos[r];
        g->out_rows[r] = r;
        g->moe_seq[r] = (int32_t)r;
    }
    forward(g, g->logits, R, R);
    pick(g, 0, R, next);
    for (int64_t r = 0; r < R; r++) g->pos[r]++;
    weight_cost(g, R, R, st);
    st->flops += g->attn_flops;
    st->kv_bytes = g->kv_bytes;
    st->rows = (double)R / tensor_ranks(g);
    st->seconds = mesh_now() - t0;
}

void gen_extend(gen *g, const int32_t *n, const int32_t *tok, gen_step *st) {
    const double t0 = mesh_now();
    CHECK(g->mode != GEN_KV_ALLTOALL && !g->moe_cnt && g->ks.ax.n == 0,
          "gen_extend: the AllToAll layout, experts with a capacity and --kv-shard are not "
          "supported");
    memset(st, 0, sizeof *st);
    int64_t R = 0;
    for (int64_t b = 0; b < g->B_loc; b++) {
        CHECK(n[b] >= 0 && g->pos[b] + n[b] <= g->d.S && R + n[b] <= g->d.max_rows,
              "gen_extend: %d rows at position %d of sequence %lld (cache %lld, rows %lld)",
              (int)n[b], (int)g->pos[b], (long long)b, (long long)g->d.S, (long long)g->d.max_rows);
        for (int32_t i = 0; i < n[b]; i++, R++) {
            g->rtok[R] = tok[R];
            g->rpos[R] = g->pos[b] + i;
            g->out_rows[R] = R;
            g->moe_seq[R] = (int32_t)b;
        }
    }
    if (R == 0 && g->pl.expert.n == 1) return; /* (an expert axis's AllToAlls need every rank) */
    g->prefill = 0;
    g->ext_n = n;
    g->kv_bytes = g->attn_flops = 0;
    forward(g, g->logits, R, R);
    g->ext_n = NULL;
    weight_cost(g, R, R, st);
    st->flops += g->attn_flops;
    st->kv_bytes = g->kv_bytes;
    st->rows = (double)R / tensor_ranks(g);
    st->seconds = mesh_now() - t0;
}

int64_t gen_pos(const gen *g, int64_t b) {
    return g->pos[b];
}

void gen_set_pos(gen *g, int64_t b, int64_t pos) {
    CHECK(pos >= 0 && pos <= g->d.S, "gen_set_pos: position %lld past the cache of %lld",
          (long long)pos, (long long)g->d.S);
    g->pos[b] = (int32_t)pos;
}

/* ---------------------------------------------------------------- create */

int gen_refuse(const config *c, char *err, size_t errlen) {
    if (c->zero == 3)
        return errmsg_fail(err, errlen,
                           "--zero 3 (FSDP) is refused for generation: decode reads every weight "
                           "once per step and is bound by memory bandwidth, so gathering the "
                           "weights over the links each step would cost more than the step "
                           "itself (never move weights over the links while HBM-bound); use "
                           "--tensor for model parallelism and --dp for replicas");
    if (c->zero > 0)
        return errmsg_fail(err, errlen,
                           "--zero %d shards optimizer state and gradients, which generation "
                           "does not have; drop it",
                           c->zero);
    if (c->pipe_axis[0])
        return errmsg_fail(err, errlen,
                           "--pipeline is not supported by generate: use --tensor and --dp");
    if (c->emulate[0])
        return errmsg_fail(err, errlen,
                           "--emulate is not supported by generate (its links run at this "
                           "machine's speed)");
    return 0;
}

double gen_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024.0;
}

/* Sharding of the batch and of the cache (before the model exists: nothing is allocated until
 * the request is known to fit); checks that the batch divides. */
static int layout(gen *g, char *err, size_t errlen) {
    const model_shape *s = &g->c.shape;
    const int ty = g->c.tensor_axis[0] ? mesh_axis_index(g->m, g->c.tensor_axis[0]) : -1;
    const int64_t nY = ty >= 0 ? mesh_axis_size(g->m, ty) : 1;
    const int64_t yi = ty >= 0 ? mesh_axis_coord(g->m, ty) : 0;
    const mesh_axes rax = kvshard_replica_axes(&g->c, g->m, g->kv_axis);
    const int kva = g->kv_axis ? mesh_axis_index(g->m, g->kv_axis) : -1;
    const int64_t P = kva >= 0 ? mesh_axis_size(g->m, kva) : 1;
    g->nX = kva >= 0 ? mesh_axes_size(g->m, rax) : g->pl.batch.n;
    if (g->d.B % g->nX != 0)
        return errmsg_fail(err, errlen,
                           "%lld prompts do not divide over the %lld replicas (--dp): give a "
                           "multiple of %lld prompts",
                           (long long)g->d.B, (long long)g->nX, (long long)g->nX);
    g->B_loc = g->d.B / g->nX;
    g->nY = nY;
    if (ty >= 0) g->tax = (mesh_axes){.n = 1, .ax = {ty}};
    g->row0 = (kva >= 0 ? mesh_axes_index(g->m, rax) : g->pl.batch.index) * g->B_loc;
    g->mode = nY <= s->K ? GEN_KV_HEADS : g->d.kv_replicate ? GEN_KV_REPLICATED : GEN_KV_ALLTOALL;
    g->Z = g->mode == GEN_KV_ALLTOALL ? nY / s->K : 1;
    if (kva < 0 && g->cp_prefill)
        return errmsg_fail(err, errlen, "the prompts go over the --kv-shard axis: name one");
    if (kva >= 0 && g->mode == GEN_KV_ALLTOALL)
        return errmsg_fail(err, errlen,
                           "--kv-shard with --tensor over %lld ranks > K = %lld kv heads needs "
                           "--kv-replicate (the AllToAll attention splits the cache by batch, "
                           "--kv-shard by position: not both)",
                           (long long)nY, (long long)s->K);
    if (g->mode == GEN_KV_ALLTOALL) {
        if (g->B_loc % g->Z != 0)
            return errmsg_fail(err, errlen,
                               "%lld sequences per replica do not divide over the %lld tensor "
                               "ranks that share a kv head (|Y| = %lld > K = %lld: the AllToAll "
                               "attention splits the cache by batch): give a multiple of %lld "
                               "prompts per replica, or --kv-replicate",
                               (long long)g->B_loc, (long long)g->Z, (long long)nY, (long long)s->K,
                               (long long)g->Z);
        if (mesh_ndims(g->m) >= MESH_MAX_AXES)
            return errmsg_fail(err, errlen,
                               "the AllToAll attention splits the tensor axis in two, and a "
                               "mesh of %d axes has no room for another: use --kv-replicate",
                               mesh_ndims(g->m));
    }
    const int64_t Bc = g->B_loc / g->Z, Kc = s->K >= nY ? s->K / nY : 1;
    g->kv = (kvcache){
        s->L, Bc,  (g->d.S + P - 1) / P, Kc, s->H, (yi % g->Z) * Bc, compute_dtype_bytes(g->kvd),
        NULL, NULL};
    return 0;
}

static int check_memory(gen *g, char *err, size_t errlen) {
    const double need = (double)gen_cache_bytes(g), avail = gen_mem_available();
    const double per_rank = avail / (double)mesh_host_ranks(g->m);
    int rc = avail > 0 && need > per_rank ? -1 : 0;
    if (mesh_agree(mesh_world_comm(g->m), rc) == 0) return 0;
    const model_shape *s = &g->c.shape;
    return errmsg_fail(
        err, errlen,
        "the KV cache is too big: K and V [L=%lld, B=%lld, S=%lld, K=%lld, "
        "H=%lld] %s = %.2f GB in all, %.2f GB on each rank (its shard [%lld, "
        "%lld, %lld, %lld, %lld]), more than the %.2f GB this host has available "
        "per rank (MemAvailable / %d ranks): use fewer prompts or --tokens, or "
        "more --tensor ranks",
        (long long)s->L, (long long)g->d.B, (long long)g->d.S, (long long)s->K, (long long)s->H,
        compute_dtype_name(g->kvd),
        2.0 * (double)(g->kv.elem * s->L * g->d.B) * (double)(g->d.S * s->K * s->H) / 1e9,
        need / 1e9, (long long)g->kv.L, (long long)g->kv.Bc, (long long)g->kv.S,
        (long long)g->kv.Kc, (long long)g->kv.H, per_rank / 1e9, mesh_host_ranks(g->m));
}

static int alloc_buffers(gen *g) {
    const model_shape *s = &g->c.shape;
    const int64_t R = g->d.max_rows, kvn = gen_cache_bytes(g) / 8;
    const int64_t M = s->N / s->K, Bc = g->kv.Bc, wide = s->N > 64 ? s->N : 64;
    g->kv.k = (unsigned char *)alloc_floats(kvn);
    g->kv.v = (unsigned char *)alloc_floats(kvn);
    g->pos = calloc((size_t)g->B_loc + 1, sizeof *g->pos);
    g->ntok = calloc((size_t)g->B_loc + 1, sizeof *g->ntok);
    g->rtok = calloc((size_t)R, sizeof *g->rtok);
    g->rpos = calloc((size_t)R, sizeof *g->rpos);
    g->out_rows = calloc((size_t)R, sizeof *g->out_rows);
    g->ws = alloc_floats(model_rows_ws(g->mod, R));
    g->logits = alloc_floats(R * s->V);
    g->lg_loc = alloc_floats(R * s->V / g->nY);
    g->lg_all = alloc_floats(R * s->V);
    /* attention's scratch: scores of up to `wide` rows; bf16: their probabilities and the rows
     * of q too */
    g->scr = alloc_floats(g->kv.elem == 2 ? 2 * wide * g->d.S + R * s->N * s->H : wide * g->d.S);
    if (g->kv.elem == 2) {
        g->kb = (kern_bf16 *)alloc_floats(R * s->K * s->H);
        g->vb = (kern_bf16 *)alloc_floats(R * s->K * s->H);
        if (!g->kb || !g->vb) return -1;
    }
    g->qm = alloc_floats(Bc * M * s->H);
    g->om = alloc_floats(Bc * M * s->H);
    g->a2a = alloc_floats(Bc * M * s->H);
    g->items = calloc((size_t)s->V, sizeof *g->items);
    g->moe_seq = calloc((size_t)R, sizeof *g->moe_seq);
    g->moe_per_seq = model_moe_layers(s) * s->moe.E;
    if (model_moe_capacity(s) > 0)
        g->moe_cnt = calloc((size_t)(g->B_loc * g->moe_per_seq), sizeof *g->moe_cnt);
    const model_extents *lc = model_extents_of(g->mod);
    if (kvshard_init(&g->ks, g->m, g->kv_axis, g->B_loc, lc->Nl, lc->Kl, s->H, g->d.S) < 0 ||
        (g->cp_prefill && kvshard_prefill_init(&g->ks, R) < 0))
        return -1;
    const int moe_ok = g->moe_seq && (model_moe_capacity(s) == 0 || g->moe_cnt);
    return moe_ok && g->kv.k && g->kv.v && g->pos && g->ntok && g->rtok && g->rpos && g->out_rows &&
                   g->ws && g->logits && g->lg_loc && g->lg_all && g->scr && g->qm && g->om &&
                   g->a2a && g->items
               ? 0
               : -1;
}

int gen_plan_create(const config *c, mesh *m, int64_t max_rows, plan *pl, par **out, char *err,
                    size_t errlen) {
    *out = NULL;
    config cc = *c; /* the plan's TP buffers hold max_rows rows on every replica */
    cc.batch = cc.micro_batch = (max_rows + c->shape.T - 1) / c->shape.T * mesh_nranks(m);
    plan_in in;
    if (par_plan_in(&cc, m, &in, err, errlen) < 0) return -1;
    in.forward_only = 1;
    if (plan_build(pl, &in, err, errlen) < 0) return -1;
    return par_create(pl, m, out, err, errlen);
}

model *gen_model_create(const config *c, mesh *m, const plan *pl, const precision *prec, par *run,
                        char *err, size_t errlen) {
    const model_compute cmp = {plan_model_compute(pl), prec->ctx, 1}; /* with panel copies */
    model *mod = model_create_compute(&c->shape, 0, c->seed, par_model_hooks(run), &cmp);
    if (mesh_agree(mesh_world_comm(m), mod ? 0 : -1) == 0) return mod;
    model_destroy(mod);
    errmsg_fail(err, errlen, "out of memory allocating the model's parameters");
    return NULL;
}

/* Collective over: world. --kv-dtype resolved (auto: the compute dtype) and, for a bf16 cache,
 * the context of its attention: the run's own in bf16 compute, else one of the own kernels (the
 * attention's products run there on every path: attn_bf16.h). 0, or −1 with err. */
static int kv_setup(gen *g, char *err, size_t errlen) {
    const compute_dtype asked = g->c.kv_dtype;
    g->kvd = g->c.kv_dtype = asked == COMPUTE_AUTO ? g->prec.dtype : asked;
    if (g->kvd != COMPUTE_BF16) return 0;
    g->kvctx = g->prec.ctx;
    if (g->kvctx) return 0;
    char msg[MESH_MSG_MAX] = "";
    const kern_bf16_path own =
        g->prec.path == KERN_BF16_PORTABLE ? KERN_BF16_PORTABLE : KERN_BF16_AVX2;
    g->kvctx = g->own_ctx = kern_bf16_ctx_create(own, 1, msg, sizeof msg);
    if (mesh_agree_msg(mesh_world_comm(g->m), g->own_ctx ? 0 : -1, msg, sizeof msg) < 0)
        return errmsg_fail(err, errlen, "the bf16 KV cache's kernels: %s", msg);
    return 0;
}

/* Collective over: world. The request's plan, layout and memory check, nothing big allocated
 * yet: g, or NULL with err. */
static gen *plan_request(const config *c, mesh *m, const gen_dims *d, char kv_shard, int cp,
                         char *err, size_t errlen) {
    if (gen_refuse(c, err, errlen) < 0) return NULL;
    gen *g = calloc(1, sizeof *g);
    CHECK(g, "gen_create: out of memory");
    g->c = *c;
    g->m = m;
    g->d = *d;
    g->kv_axis = kv_shard;
    g->cp_prefill = cp;
    if (precision_setup(&g->prec, c, m, 0, 0, err, errlen) < 0) {
        free(g);
        return NULL;
    }
    g->c.compute = g->prec.dtype;
    if (kv_setup(g, err, errlen) < 0) {
        gen_destroy(g);
        return NULL;
    }
    config pc; /* the plan's config: the weights replicated over the --kv-shard axis too */
    if (kvshard_config(&g->c, m, kv_shard, &pc, err, errlen) < 0 ||
        gen_plan_create(&pc, m, d->max_rows, &g->pl, &g->run, err, errlen) < 0) {
        precision_free(&g->prec);
        free(g);
        return NULL;
    }
    if (layout(g, err, errlen) < 0 || check_memory(g, err, errlen) < 0) {
        gen_destroy(g);
        return NULL;
    }
    return g;
}

int gen_check(const config *c, mesh *m, const gen_dims *d, char *err, size_t errlen) {
    gen *g = plan_request(c, m, d, 0, 0, err, errlen);
    const int rc = g ? 0 : -1;
    gen_destroy(g);
    return rc;
}

static gen *create(const config *c, mesh *m, const gen_dims *d, char kv_shard, int cp, char *err,
                   size_t errlen) {
    gen *g = plan_request(c, m, d, kv_shard, cp, err, errlen);
    if (!g) return NULL;
    g->mod = gen_model_create(c, m, &g->pl, &g->prec, g->run, err, errlen);
    int rc = g->mod ? 0 : -1;
    if (rc == 0 && g->mode == GEN_KV_ALLTOALL) {
        g->gm = kv_group_mesh(m, g->c.tensor_axis[0], g->c.shape.K, g->Z, &g->gax, err, errlen);
        rc = g->gm ? 0 : -1;
    }
    if (rc == 0 && mesh_agree(mesh_world_comm(m), alloc_buffers(g)) < 0)
        rc = errmsg_fail(err, errlen, "out of memory allocating the KV cache (%.2f GB per rank)",
                         (double)gen_cache_bytes(g) / 1e9);
    if (rc < 0) {
        gen_destroy(g);
        return NULL;
    }
    return g;
}

gen *gen_create(const config *c, mesh *m, const gen_dims *d, char *err, size_t errlen) {
    return gen_create_kv(c, m, d, 0, err, errlen);
}

gen *gen_create_kv(const config *c, mesh *m, const gen_dims *d, char kv_shard, char *err,
                   size_t errlen) {
    return create(c, m, d, kv_shard, 0, err, errlen);
}

gen *gen_create_cp(const config *c, mesh *m, const gen_dims *d, char axis, char *err,
                   size_t errlen) {
    return create(c, m, d, axis, 1, err, errlen);
}

void gen_destroy(gen *g) {
    if (!g) return;
    model_destroy(g->mod);
    precision_free(&g->prec);
    par_destroy(g->run);
    mesh_destroy(g->gm);
    kvshard_free(&g->ks);
    kern_bf16_ctx_destroy(g->own_ctx);
    ALLOC_FREE_ALL(g->kv.k, g->kv.v, g->kb, g->vb, g->pos, g->ntok, g->rtok, g->rpos, g->out_rows,
                   g->ws, g->logits, g->lg_loc, g->lg_all, g->scr, g->qm, g->om, g->a2a, g->items,
                   g->moe_seq, g->moe_cnt, g);
}
