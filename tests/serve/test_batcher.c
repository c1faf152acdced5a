/* The scheduler and the block pool against a model of what they must do, on randomised runs at
 * fixed seeds (block sizes 1 to 16, pools small enough to force preemption, chunk sizes 1 to 40,
 * 1 to 3 replicas, prefix cache on and off, static batches, random arrivals and cancellations):
 *  - the block pool's invariants and the block tables' references hold after every step
 *    (batcher_check: free + used + evictable = total, no negative reference, every published
 *    block's chained hash, the LRU list and the hash table consistent);
 *  - a fake engine stores at every position the hash of the sequence's tokens up to it and, for
 *    every row of a step, checks that the row's token is the sequence's and that every position
 *    it attends to through the block table holds the hash of the right prefix (so a block shared
 *    from the prefix cache, or recomputed after preemption, holds what the sequence would have
 *    computed itself);
 *  - the fake model's next token is a function of the whole prefix, so every request's output
 *    must equal that request run alone, whatever the schedule;
 *  - disaggregated runs (prefill replicas, the rest decode): the fake engine makes the plan's
 *    KV transfers first (copies the blocks' rows from the prefill replica to the decode one), a
 *    decode replica runs only one-row sampling items, and the checks above hold across the move;
 *  - AllToAll runs (1 to 3 shards a replica, each its own pool): the fake engine keeps each
 *    pool's rows apart and reads a row through the item's shard, so a sequence read from another
 *    shard's pool than it wrote, or a block shared across shards, gives wrong rows;
 *  - disaggregated runs whose prefill replicas have another number of pools (prefill_shards, a
 *    tensor degree per side): a move copies from the source's pool to the destination's
 *    (batch_xfer.dshard, any pool of the decode replica; its own shard when the counts are
 *    equal), and every item's shard is one of its replica's;
 *  - padded static batches: a row's filler positions (past its tokens) hold a garbage tag, so a
 *    row that read one before overwriting it would attend to a wrong cache row;
 *  - at the end every block is back (used = 0), and across the runs preemption, prefix-cache
 *    hits, chunked prefill and transfers each happened (so the checks above were exercised).
 * And by hand, counted: a static batch's step plans, rows per step, with finished rows dropped
 * (static) and kept with the prompts padded to the longest (static-padded). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/infer/gen_cli.h"
#include "train/serve/cost.h"
#include "train/serve/kvblocks.h"
#include "train/serve/batcher.h"

#define MAXREQ 48
#define CTX 64

static uint64_t rng_state;
static int64_t shard_items[3]; /* items run in each shard, over every run */
static int64_t cross_moves[2]; /* moves between sides of other pool counts: all, to another shard */
static uint64_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return rng_state >> 33;
}
static int64_t rndi(int64_t n) {
    return (int64_t)(rnd() % (uint64_t)n);
}

/* Hash of tokens[0..n): what the fake engine stores at position n − 1. */
static uint64_t prefix_hash(const int32_t *t, int64_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint64_t)t[i]) * 1099511628211ULL;
    return h;
}
/* The fake model's next token after n positions whose cache rows hold tags[0..n): a function of
 * every row attended to. */
static int32_t fake_next_of(uint64_t tag_sum) {
    return (int32_t)((tag_sum >> 17) % 251);
}
static int32_t fake_next(const int32_t *t, int64_t n) {
    uint64_t sum = 0;
    for (int64_t i = 1; i <= n; i++) sum += prefix_hash(t, i);
    return fake_next_of(sum);
}

typedef struct {
    int32_t tok[CTX]; /* prompt + generated (the truth the schedule must reproduce) */
    int64_t plen, max_new, ngen;
    int added, done, cancelled;
    int32_t want[CTX]; /* the request alone */
} req;

typedef struct {
    req r[MAXREQ];
    uint64_t *kv;                    /* [replicas, shards, blocks, bs] (shards: the most) */
    int32_t nb, bs, prefill, shards; /* prefill: disaggregated, the prefill replicas */
    int32_t pshards, dshards;        /* the pools of a prefill replica and of the others */
    int bad;
    int stops; /* emit ends every 3rd request halfway by a stop, and cancels request 4 */
} world;

static int64_t padded_stops; /* rows of padded batches that emit ended early */

static batch_end emit(void *ctx, int64_t id, int32_t token, int64_t index, batch_end end,
                      const float *lp) {
    world *w = ctx;
    (void)lp;
    req *q = &w->r[id];
    if (index != q->ngen || q->done) {
        if (w->bad++ < 5)
            printf("  request %lld: token %lld emitted out of order\n", (long long)id,
                   (long long)index);
    }
    q->tok[q->plen + q->ngen++] = token;
    batch_end asked = BATCH_END_NONE;
    if (w->stops && end == BATCH_END_NONE && (id % 3 == 1 || id == 4) && index == q->max_new / 2)
        asked = id == 4 ? BATCH_END_CANCEL : BATCH_END_STOP, padded_stops++;
    if (end != BATCH_END_NONE || asked != BATCH_END_NONE) q->done = 1;
    q->cancelled |= asked == BATCH_END_CANCEL;
    return asked;
}

static uint64_t *kv_at(world *w, int32_t replica, int32_t shard, int32_t block, int64_t pos) {
    return &w->kv[(((int64_t)replica * w->shards + shard) * w->nb + block) * w->bs + pos % w->bs];
}

static int32_t shards_of(const world *w, int32_t replica) {
    return replica < w->prefill ? w->pshards : w->dshards;
}

/* The plan's KV transfers, before its items. */
static void run_moves(world *w, const batch_plan *p) {
    for (int32_t i = 0; i < p->nxfer; i++) {
        const batch_xfer *x = &p->xfer[i];
        const int32_t *from = p->xtab + x->tab_off, *to = from + x->nblocks;
        if ((x->src >= w->prefill || x->dst < w->prefill || x->shard < 0 ||
             x->shard >= w->pshards || x->dshard < 0 || x->dshard >= w->dshards ||
             (w->pshards == w->dshards && x->dshard != x->shard)) &&
            w->bad++ < 5)
            printf("  request %lld: moved from replica %d pool %d to %d pool %d\n",
                   (long long)x->id, (int)x->src, (int)x->shard, (int)x->dst, (int)x->dshard);
        if (w->pshards != w->dshards) cross_moves[0]++, cross_moves[1] += x->dshard != x->shard;
        for (int32_t b = 0; b < x->nblocks; b++)
            memcpy(kv_at(w, x->dst, x->dshard, to[b], 0), kv_at(w, x->src, x->shard, from[b], 0),
                   (size_t)w->bs * sizeof *w->kv);
    }
}

/* The fake engine: stores, checks what each row attends to, and picks the next tokens. */
static void run_plan(world *w, const batch_plan *p, int32_t *next) {
    run_moves(w, p);
    int32_t k = 0;
    for (int32_t j = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        req *q = &w->r[it->id];
        if (w->prefill && it->replica >= w->prefill && (it->n != 1 || !it->sample) && w->bad++ < 5)
            printf("  request %lld: a prefill of %d rows on decode replica %d\n", (long long)it->id,
                   (int)it->n, (int)it->replica);
        const int32_t *tab = p->tab + it->tab_off;
        if (it->shard < 0 || it->shard >= shards_of(w, it->replica)) {
            if (w->bad++ < 5) printf("  request %lld: shard %d\n", (long long)it->id, it->shard);
            continue;
        }
        shard_items[it->shard]++;
        const int64_t known = q->plen + q->ngen; /* past it: a padded prefill's filler rows */
        for (int32_t i = 0; i < it->n; i++) {
            const int64_t pos = it->p0 + i;
            if (pos >= known) {
                *kv_at(w, it->replica, it->shard, tab[pos / w->bs], pos) = 0xdeadULL;
                continue;
            }
            if (p->tok[it->tok_off + i] != q->tok[pos] && w->bad++ < 5)
                printf("  request %lld: position %lld fed token %d, not %d\n", (long long)it->id,
                       (long long)pos, p->tok[it->tok_off + i], q->tok[pos]);
            if (pos / w->bs >= it->tab_len && w->bad++ < 5)
                printf("  request %lld: position %lld past its block table\n", (long long)it->id,
                       (long long)pos);
            *kv_at(w, it->replica, it->shard, tab[pos / w->bs], pos) = prefix_hash(q->tok, pos + 1);
        }
        uint64_t sum = 0;
        int reported = 0;
        for (int64_t pos = 0; pos < it->p0 + it->n && pos < known; pos++) {
            const uint64_t tag = *kv_at(w, it->replica, it->shard, tab[pos / w->bs], pos);
            sum += tag;
            if (tag != prefix_hash(q->tok, pos + 1) && !reported++ && w->bad++ < 5)
                printf("  request %lld: position %lld attends to a wrong cache row (block %d)\n",
                       (long long)it->id, (long long)pos, tab[pos / w->bs]);
        }
        if (it->sample) {
            if (it->tok_index != q->ngen && w->bad++ < 5)
                printf("  request %lld: sampler counter %d, not %lld\n", (long long)it->id,
                       it->tok_index, (long long)q->ngen);
            next[k++] = fake_next_of(sum);
        }
    }
}

/* One randomised run; returns the scheduler's counters. */
static batch_counts one_run(uint64_t seed, int *failures) {
    rng_state = seed;
    static const int32_t sizes[] = {1, 2, 3, 4, 8, 16};
    batch_opts o = {.replicas = 1 + (int32_t)rndi(3),
                    .kv_block = sizes[rndi(6)],
                    .prefill_chunk = 1 + (int32_t)rndi(40),
                    .max_seqs = 1 + (int32_t)rndi(8),
                    .context = CTX,
                    .prefix_cache = (int)rndi(4) != 0,
                    .static_batches = rndi(5) == 0 ? 1 + (int)rndi(2) : 0};
    o.max_batch_tokens = o.max_seqs + (int32_t)rndi(48);
    const int32_t min_blocks = (CTX + o.kv_block - 1) / o.kv_block;
    o.kv_blocks = min_blocks + (int32_t)rndi(3 * min_blocks);
    if (o.replicas > 1 && !o.static_batches && rndi(2))
        o.prefill_replicas = 1 + (int32_t)rndi(o.replicas - 1);
    o.shards = rndi(2) ? 1 + (int32_t)rndi(3) : 0; /* the AllToAll layout's pools (0: one) */
    if (o.prefill_replicas > 0 && rndi(2)) /* a tensor degree of its own on the prefill side */
        o.prefill_shards = 1 + (int32_t)rndi(3);
    char err[512];
    batcher *s = batcher_create(&o, err, sizeof err);
    world *w = calloc(1, sizeof *w);
    batch_plan bp;
    if (!s || !w || batch_plan_init(&bp, &o) < 0) {
        printf("setup failed: %s\n", err);
        exit(1);
    }
    w->nb = o.kv_blocks, w->bs = o.kv_block, w->prefill = o.prefill_replicas;
    w->stops = o.static_batches == BATCH_STATIC_PADDED;
    w->dshards = o.shards > 1 ? o.shards : 1;
    w->pshards = o.prefill_shards > 0 ? o.prefill_shards : w->dshards;
    w->shards = w->pshards > w->dshards ? w->pshards : w->dshards;
    w->kv = calloc((size_t)(o.replicas * w->shards) * (size_t)o.kv_blocks * (size_t)o.kv_block,
                   sizeof *w->kv);
    /* prompts: a few shared stems with random tails, so the prefix cache has work */
    int32_t stems[3][CTX];
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < CTX; i++) stems[a][i] = (int32_t)rndi(256);
    const int nreq = 8 + (int)rndi(MAXREQ - 8);
    for (int i = 0; i < nreq; i++) {
        req *q = &w->r[i];
        q->plen = 1 + rndi(CTX - 2);
        q->max_new = 1 + rndi(CTX - q->plen);
        const int stem = (int)rndi(4), shared = stem < 3 ? (int)rndi(q->plen + 1) : 0;
        for (int64_t t = 0; t < q->plen; t++)
            q->tok[t] = t < shared ? stems[stem][t] : (int32_t)rndi(256);
        memcpy(q->want, q->tok, sizeof q->tok);
        for (int64_t t = q->plen; t < q->plen + q->max_new; t++) q->want[t] = fake_next(q->want, t);
    }
    int32_t next[256];
    int added = 0, steps = 0, check_failed = 0;
    while (steps < 5000) {
        for (int n = (int)rndi(4); n > 0 && added < nreq; n--, added++) {
            req *q = &w->r[added];
            const batch_sampling sp = {0, 0, (uint64_t)added, 0, 0};
            if (batcher_add(s, added, q->tok, q->plen, q->max_new, &sp) < 0) exit(1);
            q->added = 1;
        }
        if (rndi(40) == 0 && added > 0) { /* a client goes away */
            const int id = (int)rndi(added);
            if (!w->r[id].done && batcher_cancel(s, id)) w->r[id].cancelled = w->r[id].done = 1;
        }
        if (batcher_step(s, &bp) == 0 && added == nreq && batcher_waiting(s) == 0) break;
        run_plan(w, &bp, next);
        batcher_commit(s, &bp, next, emit, w);
        steps++;
        if (!check_failed && batcher_check(s, err, sizeof err) < 0) {
            printf("  seed %llu step %d: %s\n", (unsigned long long)seed, steps, err);
            check_failed = 1;
        }
    }
    int wrong = 0, unfinished = 0;
    for (int i = 0; i < nreq; i++) {
        const req *q = &w->r[i];
        if (!q->done) unfinished++;
        if (!q->cancelled && memcmp(q->tok, q->want, sizeof(int32_t) * (size_t)(q->plen + q->ngen)))
            wrong++;
    }
    int64_t used = 0;
    for (int32_t i = 0; i < batcher_pools(s); i++) used += kvb_get_counts(batcher_pool(s, i)).used;
    const batch_counts c = batcher_get_counts(s);
    const int ok = !check_failed && !w->bad && !wrong && !unfinished && used == 0;
    if (!ok) {
        (*failures)++;
        printf("  seed %llu (replicas %d, block %d, blocks %d, chunk %d, seqs %d, budget %d, "
               "prefix %d, static %d, prefill replicas %d, shards %d, prefill shards %d): %d "
               "steps, invariants %s, %d engine errors, %d wrong outputs, %d unfinished, %lld "
               "blocks still used\n",
               (unsigned long long)seed, o.replicas, o.kv_block, o.kv_blocks, o.prefill_chunk,
               o.max_seqs, o.max_batch_tokens, o.prefix_cache, o.static_batches, o.prefill_replicas,
               o.shards, o.prefill_shards, steps, check_failed ? "BROKEN" : "ok", w->bad, wrong,
               unfinished, (long long)used);
    }
    batch_plan_free(&bp);
    batcher_destroy(s);
    free(w->kv), free(w);
    return c;
}

static batch_end emit_none(void *ctx, int64_t id, int32_t token, int64_t index, batch_end end,
                           const float *lp) {
    (void)ctx, (void)id, (void)token, (void)index, (void)end, (void)lp;
    return BATCH_END_NONE;
}

/* Steps (every token 7) until request id has an item in the plan, or `steps` steps: that item's
 * shard and first position, or -1. */
static int placed(batcher *s, batch_plan *p, int64_t id, int steps, int32_t *p0) {
    int32_t next[64] = {7};
    for (int i = 0; i < 64; i++) next[i] = 7;
    for (int k = 0; k < steps; k++) {
        batcher_step(s, p);
        int sh = -1;
        for (int32_t j = 0; j < p->nitems; j++)
            if (p->items[j].id == id) sh = p->items[j].shard, *p0 = p->items[j].p0;
        batcher_commit(s, p, next, emit_none, NULL);
        if (sh >= 0) return sh;
    }
    return -1;
}

/* The AllToAll layout's placement, by hand (2 pools of 8 blocks of 4): X (pool 0, the first) and
 * A (pool 1, more room) run, E joins pool 1 (more room), A ends (its 4 full blocks stay cached
 * in pool 1), X ends (pool 0 all available). Then B, A's prompt, goes to pool 1, which has fewer
 * blocks available but its prefix, and takes its 16 positions from the cache. */
static void placement(int prefix) {
    const batch_opts o = {.replicas = 1,
                          .kv_blocks = 8,
                          .kv_block = 4,
                          .max_batch_tokens = 64,
                          .prefill_chunk = 64,
                          .max_seqs = 8,
                          .context = CTX,
                          .prefix_cache = prefix,
                          .shards = 2};
    char err[256];
    batcher *s = batcher_create(&o, err, sizeof err);
    batch_plan p;
    if (!s || batch_plan_init(&p, &o) < 0) exit(1);
    int32_t X[20], A[17], E[3];
    for (int i = 0; i < 20; i++) X[i] = 'x' + i % 3;
    for (int i = 0; i < 17; i++) A[i] = 'a' + i % 5;
    for (int i = 0; i < 3; i++) E[i] = 'e';
    const batch_sampling sp = {0, 0, 1, 0, 0};
    int32_t p0 = 0;
    batcher_add(s, 0, X, 20, 4, &sp);
    batcher_add(s, 1, A, 17, 2, &sp);
    const int sx = placed(s, &p, 0, 1, &p0);
    batcher_add(s, 2, E, 3, 8, &sp);
    const int se = placed(s, &p, 2, 1, &p0);
    placed(s, &p, -1, 3, &p0); /* X and A end */
    const int64_t avail0 = kvb_available(batcher_pool(s, 0)),
                  avail1 = kvb_available(batcher_pool(s, 1));
    batcher_add(s, 3, A, 17, 2, &sp);
    const int sb = placed(s, &p, 3, 1, &p0);
    check_expect(sx == 0 && se == 1 && avail0 == 8 && avail1 < 8 && sb == (prefix ? 1 : 0) &&
                     p0 == (prefix ? 16 : 0),
                 "placement with the prefix cache %s: X in pool %d, E in %d; then %lld and %lld "
                 "blocks available, A's prompt again in pool %d from position %d (want %d, %d)",
                 prefix ? "on" : "off", sx, se, (long long)avail0, (long long)avail1, sb, (int)p0,
                 prefix ? 1 : 0, prefix ? 16 : 0);
    batch_plan_free(&p);
    batcher_destroy(s);
}

/* The virtual clock's bytes (serve_plan_cost) for one decode row and one 6-row prefill chunk on
 * two tensor ranks: the weight matrices at 4 bytes (fp32) or 2 (bf16 compute's copy), the norm
 * gains and the embedding rows fp32 whatever the compute, the cache at its own element's bytes. */
static void plan_cost(void) {
    const model_shape s = {.L = 3, .D = 48, .N = 6, .K = 2, .H = 8, .F = 96, .V = 258, .T = 64};
    batch_item items[2] = {{.replica = 0, .n = 1, .p0 = 20, .sample = 1},
                           {.replica = 0, .n = 6, .p0 = 0, .sample = 0}};
    batch_plan p = {.nitems = 2, .items = items};
    const double mat = 48.0 * (6 + 2 * 2) * 8 + 6 * 8 * 48 + 3.0 * 48 * 96; /* a layer's */
    const double gains = (2 * 3 + 1) * 48.0 * 2, rows = 7 * 48.0;
    const gen_step f = serve_plan_cost(&s, 2, 1, 4, 4, &p), b = serve_plan_cost(&s, 2, 1, 2, 2, &p);
    check_expect(f.p_bytes == 4 * (3 * mat + 48.0 * 258) + 4 * gains + 4 * rows,
                 "fp32 compute reads 4-byte weights: %.0f B", f.p_bytes);
    check_expect(b.p_bytes == 2 * (3 * mat + 48.0 * 258) + 4 * gains + 4 * rows,
                 "bf16 compute reads the 2-byte copy of the matrices (gains, embedding fp32): "
                 "%.0f B",
                 b.p_bytes);
    check_expect(2 * b.kv_bytes == f.kv_bytes && b.flops == f.flops && b.rows == f.rows,
                 "a bf16 cache half the fp32 one's bytes (%.0f, %.0f B), the same FLOPs",
                 b.kv_bytes, f.kv_bytes);
}

/* What hand_run saw: the rows of each step, the tokens emitted, the fake engine's errors, the
 * scheduler's counters and the pool's at the end. */
typedef struct {
    int32_t rows[32];
    int nsteps, bad;
    int64_t tokens;
    batch_counts c;
    kvb_counts kv;
} hand_result;

/* Requests 0..n−1 (prompts of plen[i] tokens, max_new[i] new ones) on a batcher of one replica
 * with options o, run to the end (32 steps at most) by the fake engine; request `cancel` (−1:
 * none) is cancelled after the first step. */
static hand_result hand_run(const batch_opts *o, int n, const int64_t *plen, const int64_t *max_new,
                            int cancel) {
    char err[256];
    hand_result h = {0};
    batcher *s = batcher_create(o, err, sizeof err);
    batch_plan p;
    world *w = calloc(1, sizeof *w);
    if (!s || !w || batch_plan_init(&p, o) < 0) exit(1);
    w->nb = o->kv_blocks, w->bs = o->kv_block, w->pshards = w->dshards = w->shards = 1;
    w->kv = calloc((size_t)o->kv_blocks * (size_t)o->kv_block, sizeof *w->kv);
    for (int i = 0; i < n; i++) {
        req *q = &w->r[i];
        q->plen = plen[i], q->max_new = max_new[i];
        for (int64_t t = 0; t < q->plen; t++) q->tok[t] = 'a' + (int32_t)((t * 7 + i) % 26);
        const batch_sampling sp = {0, 0, (uint64_t)i, 0, 0};
        batcher_add(s, i, q->tok, q->plen, q->max_new, &sp);
    }
    int32_t next[64];
    while (h.nsteps < 32 && batcher_step(s, &p) > 0) {
        for (int32_t j = 0; j < p.nitems; j++) h.rows[h.nsteps] += p.items[j].n;
        run_plan(w, &p, next);
        batcher_commit(s, &p, next, emit, w);
        if (h.nsteps++ == 0 && cancel >= 0) batcher_cancel(s, cancel);
    }
    for (int i = 0; i < n; i++) h.tokens += w->r[i].ngen;
    h.bad = w->bad, h.c = batcher_get_counts(s), h.kv = kvb_get_counts(batcher_pool(s, 0));
    batch_plan_free(&p);
    batcher_destroy(s);
    free(w->kv), free(w);
    return h;
}

/* A static batch of 4 by hand (prompts of 3, 7, 2 and 5 tokens, 2, 9, 4 and 1 new ones), then a
 * fifth request (4 and 3) alone, rows per step counted: static drops each row when it ends;
 * static-padded computes every prompt to 7 positions (6 rows, then each row's last token
 * together) and all 4 rows every step until the longest output ends (11 + 0 + 10 + 10 rows
 * of padding), the tokens exactly max_tokens a request; with the prefix cache asked for, static
 * publishes its full blocks and static-padded none. */
static void static_plans(int mode) {
    /* 1 replica of 64 blocks of 4, budget and chunk 64, 4 sequences, the prefix cache on */
    const batch_opts o = {1, 64, 4, 64, 64, 4, CTX, 1, mode, 0, 0, 0, 0};
    static const int32_t want_static[] = {17, 3, 2, 2, 1, 1, 1, 1, 1, 4, 1, 1};
    static const int32_t want_padded[] = {24, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 1, 1, 1};
    const int32_t *want = mode == BATCH_STATIC ? want_static : want_padded;
    const int nwant = mode == BATCH_STATIC ? 12 : 14;
    static const int64_t plen[5] = {3, 7, 2, 5, 4}, max_new[5] = {2, 9, 4, 1, 3};
    const hand_result h = hand_run(&o, 5, plen, max_new, -1);
    char got[256] = "";
    for (int k = 0, at = 0; k < h.nsteps && at < 200; k++)
        at += snprintf(got + at, sizeof got - (size_t)at, " %d", (int)h.rows[k]);
    check_expect(
        h.nsteps == nwant && !memcmp(h.rows, want, (size_t)nwant * sizeof *want) && !h.bad &&
            h.tokens == 19 && h.c.padding_rows == (mode == BATCH_STATIC ? 0 : 31) &&
            h.kv.used == 0 && (mode == BATCH_STATIC) == (h.kv.published > 0),
        "%s batches, rows per step:%s (%d steps, %lld tokens, %lld rows of padding, %d "
        "engine errors, %lld blocks published: the prefix cache is off when padded)",
        mode == BATCH_STATIC ? "static" : "static-padded", got, h.nsteps, (long long)h.tokens,
        (long long)h.c.padding_rows, h.bad, (long long)h.kv.published);
}

/* A padded batch of prompts 3 and 20 (chunk 4) whose long row is cancelled after the first step:
 * the short row then pads to its own prompt, which its first chunk already covered, so it
 * samples at once (rows per step 8, 1, 1), rather than padding on to 19 positions. */
static void padded_cancel(void) {
    const batch_opts o = {1, 64, 4, 64, 4, 4, CTX, 1, BATCH_STATIC_PADDED, 0, 0, 0, 0};
    static const int64_t plen[2] = {3, 20}, max_new[2] = {2, 2};
    const hand_result h = hand_run(&o, 2, plen, max_new, 1);
    check_expect(h.nsteps == 3 && h.rows[0] == 8 && h.rows[1] == 1 && h.rows[2] == 1 && !h.bad &&
                     h.tokens == 2 && h.kv.used == 0,
                 "a padded batch's row cancelled before sampling: the other pads to its own "
                 "prompt (rows per step %d %d %d, %d steps, %lld tokens, %d engine errors)",
                 h.rows[0], h.rows[1], h.rows[2], h.nsteps, (long long)h.tokens, h.bad);
}

/* Pricing by hand, on a plan of a 6-row prefill on replica 0 and a decode at position 20 on
 * replica 1 (L 3, D 48, N 6, K 1, H 8, F 96, V 258): with disaggregated serving's sides at their
 * own tensor degrees (the prefill side's 3 ranks replicate the kv head's weights and the cache
 * thrice, the decode side's 1 rank holds one copy), and under bf16 compute against the bf16
 * products' rate rather than sgemm's. */
static void side_costs(void) {
    const model_shape s = {.L = 3, .D = 48, .N = 6, .K = 1, .H = 8, .F = 96, .V = 258, .T = 64};
    batch_item items[2] = {{.replica = 0, .n = 6, .p0 = 0, .sample = 0},
                           {.replica = 1, .n = 1, .p0 = 20, .sample = 1}};
    const batch_plan p = {.nitems = 2, .items = items};
    const serve_side own[2] = {{3, 1}, {1, 1}}, same[2] = {{3, 1}, {3, 1}};
    const gen_step c = serve_plan_cost_sides(&s, own, 1, 4, 4, &p),
                   c3 = serve_plan_cost_sides(&s, same, 1, 4, 4, &p);
    /* weights: 4 B x (3 layers x (48 (6 + 2 Kr) 8 + 6 8 48 + 3 48 96) + 48 x 258) + 4 B x 7 x 48
     * gains a rank; Kr = 3 (20736 a layer), 1 (19200); embedding rows 4 x 48 each */
    const double pre = 4.0 * (3 * 20736 + 48 * 258) + 4.0 * 7 * 48 * 3 + 6 * 4 * 48;
    const double dec1 = 4.0 * (3 * 19200 + 48 * 258) + 4.0 * 7 * 48 + 4 * 48;
    const double dec3 = 4.0 * (3 * 20736 + 48 * 258) + 4.0 * 7 * 48 * 3 + 4 * 48;
    /* cache: (positions attended + rows) x 2 x 3 layers x copies x 8 x 4 B: 27 rows' worth at 3
     * copies, 22 at 1 (or 3) */
    const double kv_pre = 27.0 * 2 * 3 * 3 * 8 * 4, kv_dec = 22.0 * 2 * 3 * 8 * 4;
    check_expect(c.p_bytes == pre + dec1 && c3.p_bytes == pre + dec3 &&
                     c.kv_bytes == kv_pre + kv_dec && c3.kv_bytes == kv_pre + 3 * kv_dec,
                 "each side at its own tensor degree: weights %.0f B (both at 3: %.0f), cache %.0f "
                 "B (%.0f)",
                 c.p_bytes, c3.p_bytes, c.kv_bytes, c3.kv_bytes);
    /* FLOPs: 2 x 7 rows x 3 x 19200, attention 4 x 42 x 3 x 6 x 8, the head 2 x 48 x 258 */
    const double flops = 2.0 * 7 * 3 * 19200 + 4.0 * 42 * 3 * 6 * 8 + 2.0 * 48 * 258;
    const gen_machine mc = {1e12, 1e9, 0, 0, COMPUTE_FP32};
    const gen_machine m32 = gen_machine_dtype(&mc, COMPUTE_FP32, 3e9),
                      m16 = gen_machine_dtype(&mc, COMPUTE_BF16, 3e9);
    const double t32 = gen_predict(&c, &m32), t16 = gen_predict(&c, &m16);
    const double want32 = c.kv_bytes / 1e12 + flops / 1e9, want16 = c.kv_bytes / 1e12 + flops / 3e9;
    check_expect(c.flops == flops && fabs(t32 - want32) <= 1e-12 * want32 &&
                     fabs(t16 - want16) <= 1e-12 * want16 && m32.flops_dtype == COMPUTE_FP32 &&
                     m16.flops_dtype == COMPUTE_BF16,
                 "the step priced at sgemm's 1 GFLOP/s in fp32 (%.6f ms), at the bf16 products' 3 "
                 "in bf16 (%.6f ms, named %s), %.0f FLOPs",
                 1e3 * t32, 1e3 * t16, compute_dtype_name(m16.flops_dtype), c.flops);
}

int main(void) {
    side_costs();
    static_plans(BATCH_STATIC);
    static_plans(BATCH_STATIC_PADDED);
    padded_cancel();
    plan_cost();
    placement(1);
    placement(0);
    int failures = 0;
    batch_counts all = {0};
    const int runs = 300;
    for (int i = 0; i < runs; i++) {
        const batch_counts c = one_run(1000 + (uint64_t)i, &failures);
        all.preemptions += c.preemptions, all.cached_tokens += c.cached_tokens;
        all.prefill_tokens += c.prefill_tokens, all.steps += c.steps;
        all.transfers += c.transfers;
    }
    check_expect(failures == 0,
                 "%d randomised runs: invariants after every step, every row's token and cache "
                 "rows, outputs equal to each request alone, every block back (%d runs failed)",
                 runs, failures);
    check_expect(all.preemptions > 0 && all.cached_tokens > 0 && all.transfers > 0,
                 "the runs exercised preemption (%lld), the prefix cache (%lld tokens shared) "
                 "and disaggregation (%lld requests' KV moved) over %lld steps",
                 (long long)all.preemptions, (long long)all.cached_tokens, (long long)all.transfers,
                 (long long)all.steps);
    check_expect(padded_stops > 0, "%lld rows of padded batches ended early by the client",
                 (long long)padded_stops);
    check_expect(shard_items[1] > 0 && shard_items[2] > 0,
                 "the AllToAll runs put sequences in every shard (items: %lld, %lld, %lld)",
                 (long long)shard_items[0], (long long)shard_items[1], (long long)shard_items[2]);
    check_expect(cross_moves[1] > 0 && cross_moves[1] < cross_moves[0],
                 "moves between sides of other pool counts: %lld, %lld of them into another "
                 "shard than the source's",
                 (long long)cross_moves[0], (long long)cross_moves[1]);
    return check_finish("test_batcher");
}
