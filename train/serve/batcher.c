/* batcher: the iteration-level scheduler (see batcher.h). */
#include "train/serve/batcher.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "mesh/mesh.h"

typedef struct {
    int64_t id;
    int32_t *tok; /* prompt + generated: len of plen + max_new */
    int64_t len, plen, max_new, ngen;
    batch_sampling sp;
    int32_t replica, shard; /* its replica and, in the AllToAll layout, the pool there */
    int32_t *table;         /* block table: at most ceil((plen + max_new) / bs) (padded: T) */
    uint64_t *bhash;        /* chained hashes of the first npub (full, published) blocks */
    int32_t nblocks, npub;
    int64_t computed; /* positions whose keys and values are in the cache */
    int64_t dcomputed; /* in the drafter's cache (speculative decoding; computed − 1 or computed) */
    int stepped;       /* has an item in the step being planned */
    /* BATCH_STATIC_PADDED: held (no token sampled since it joined its batch), the end of its
     * padded prefill (positions [0, pad_end)) and how far it got, ghost (ended, still run) */
    int held, ghost;
    int64_t pad_end, padded;
} seq;

struct batcher {
    batch_opts o;
    int32_t npool;   /* the pools of every replica (pool_base) */
    kvb_pool **pool; /* pool pool_base(r) + z: replica r's shard z */
    seq **wait;      /* FIFO; preempted sequences go back to the front */
    int64_t nwait, cap_wait;
    seq ***run; /* per replica, oldest admitted first */
    int32_t *nrun;
    seq **step_seq;                         /* the sequence of each item of the last plan */
    int32_t *budget, *no_admit, *was_empty; /* per replica, during batcher_step */
    batch_counts counts;
    batch_spec_fn spec; /* drafting items' outcomes, to spec_ctx */
    void *spec_ctx;
};

void batcher_set_spec_fn(batcher *s, batch_spec_fn fn, void *ctx) {
    s->spec = fn, s->spec_ctx = ctx;
}

static int64_t div_up(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

/* The pools of replica r: prefill_shards on a prefill replica, shards on the others. */
static int32_t shards_of(const batcher *s, int32_t r) {
    return r < s->o.prefill_replicas ? s->o.prefill_shards : s->o.shards;
}
/* The index of replica r's first pool: the replicas before it, each with its pools. */
static int32_t pool_base(const batcher *s, int32_t r) {
    const int32_t P = s->o.prefill_replicas;
    return r < P ? r * s->o.prefill_shards : P * s->o.prefill_shards + (r - P) * s->o.shards;
}
/* Pool i's replica, and its shard there into *z: the prefill replicas' pools first, then the
 * others', each run replicas of equal pool counts. */
static int32_t pool_replica(const batcher *s, int32_t i, int32_t *z) {
    const int32_t P = s->o.prefill_replicas, prefill_pools = P * s->o.prefill_shards;
    if (i < prefill_pools) {
        *z = i % s->o.prefill_shards;
        return i / s->o.prefill_shards;
    }
    *z = (i - prefill_pools) % s->o.shards;
    return P + (i - prefill_pools) / s->o.shards;
}

/* Replica r's pool of shard z. */
static kvb_pool *pool_at(const batcher *s, int32_t r, int32_t z) {
    return s->pool[pool_base(s, r) + z];
}
static kvb_pool *pool_of(const batcher *s, const seq *q) {
    return pool_at(s, q->replica, q->shard);
}

batcher *batcher_create(const batch_opts *o, char *err, size_t errlen) {
    if (o->replicas < 1 || o->kv_blocks < 1 || o->kv_block < 1 || o->prefill_chunk < 1 ||
        o->max_seqs < 1 || o->context < 1 || o->max_batch_tokens < o->max_seqs) {
        errmsg_fail(err, errlen,
                    "the scheduler needs replicas, --kv-blocks, --kv-block, --prefill-chunk and "
                    "--max-seqs >= 1, and --max-batch-tokens %d >= --max-seqs %d (every running "
                    "sequence decodes each step)",
                    (int)o->max_batch_tokens, (int)o->max_seqs);
        return NULL;
    }
    if (o->shards < 0 || o->prefill_shards < 0) {
        errmsg_fail(err, errlen, "the scheduler needs shards >= 0 (%d, prefill %d asked)",
                    (int)o->shards, (int)o->prefill_shards);
        return NULL;
    }
    if (o->prefill_replicas < 0 || o->prefill_replicas >= o->replicas ||
        (o->prefill_replicas > 0 && (o->static_batches || o->draft_tokens > 0))) {
        errmsg_fail(err, errlen,
                    "disaggregated serving needs 1 to %d prefill replicas of the %d (at least one "
                    "decodes), continuous batching and no drafter (%d asked)",
                    (int)o->replicas - 1, (int)o->replicas, (int)o->prefill_replicas);
        return NULL;
    }
    if (o->static_batches < BATCH_CONTINUOUS || o->static_batches > BATCH_STATIC_PADDED ||
        (o->static_batches == BATCH_STATIC_PADDED && o->draft_tokens > 0)) {
        errmsg_fail(err, errlen,
                    "batching mode %d: padded static batches run no drafter (--draft goes with "
                    "continuous or static batching)",
                    (int)o->static_batches);
        return NULL;
    }
    batcher *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = *o;
    if (o->static_batches == BATCH_STATIC_PADDED) s->o.prefix_cache = 0; /* generate has none */
    if (s->o.shards < 1) s->o.shards = 1;
    if (s->o.prefill_shards < 1) s->o.prefill_shards = s->o.shards;
    const int32_t R = o->replicas;
    s->npool = pool_base(s, R);
    s->pool = calloc((size_t)s->npool, sizeof *s->pool);
    s->run = calloc((size_t)R, sizeof *s->run);
    s->nrun = calloc((size_t)R, sizeof *s->nrun);
    s->budget = calloc((size_t)R, sizeof *s->budget);
    s->no_admit = calloc((size_t)R, sizeof *s->no_admit);
    s->was_empty = calloc((size_t)R, sizeof *s->was_empty);
    s->step_seq = calloc((size_t)R * (size_t)o->max_seqs, sizeof *s->step_seq);
    int ok =
        s->pool && s->run && s->nrun && s->budget && s->no_admit && s->was_empty && s->step_seq;
    for (int32_t i = 0; ok && i < s->npool; i++)
        ok = (s->pool[i] = kvb_create(o->kv_blocks, o->kv_block, s->o.prefix_cache)) != NULL;
    for (int32_t r = 0; ok && r < R; r++)
        ok = (s->run[r] = calloc((size_t)o->max_seqs, sizeof *s->run[r])) != NULL;
    if (!ok) {
        batcher_destroy(s);
        errmsg_fail(err, errlen, "out of memory creating the scheduler (%d blocks per replica)",
                    (int)o->kv_blocks);
        return NULL;
    }
    return s;
}

static void seq_free(seq *q) {
    if (q) free(q->tok), free(q->table), free(q->bhash), free(q);
}

void batcher_destroy(batcher *s) {
    if (!s) return;
    for (int64_t i = 0; i < s->nwait; i++) seq_free(s->wait[i]);
    for (int32_t r = 0; s->run && r < s->o.replicas; r++) {
        for (int32_t i = 0; s->run[r] && i < s->nrun[r]; i++) seq_free(s->run[r][i]);
        free(s->run[r]);
    }
    for (int32_t i = 0; s->pool && i < s->npool; i++) kvb_destroy(s->pool[i]);
    free(s->pool), free(s->run), free(s->nrun), free(s->budget), free(s->no_admit),
        free(s->was_empty);
    free(s->step_seq), free(s->wait), free(s);
}

const batch_opts *batcher_options(const batcher *s) {
    return &s->o;
}
int64_t batcher_waiting(const batcher *s) {
    return s->nwait;
}
int64_t batcher_running(const batcher *s) {
    int64_t n = 0;
    for (int32_t r = 0; r < s->o.replicas; r++) n += s->nrun[r];
    return n;
}
batch_counts batcher_get_counts(const batcher *s) {
    return s->counts;
}
int32_t batcher_pools(const batcher *s) {
    return s->npool;
}
const kvb_pool *batcher_pool(const batcher *s, int32_t i) {
    return s->pool[i];
}

int batcher_fits(const batcher *s, int64_t plen, int64_t max_new, char *err, size_t errlen) {
    if (plen < 1) return errmsg_fail(err, errlen, "the prompt is empty");
    if (plen >= s->o.context)
        return errmsg_fail(err, errlen,
                           "the prompt (%lld tokens) is longer than the model's context of %d "
                           "positions less the one new token it needs",
                           (long long)plen, (int)s->o.context);
    if (plen + max_new > s->o.context)
        return errmsg_fail(err, errlen,
                           "the prompt (%lld tokens) + max_tokens (%lld) = %lld positions, more "
                           "than the model's context of %d",
                           (long long)plen, (long long)max_new, (long long)(plen + max_new),
                           (int)s->o.context);
    const int64_t blocks = div_up(plen + max_new, s->o.kv_block);
    if (blocks > s->o.kv_blocks)
        return errmsg_fail(err, errlen,
                           "the request needs %lld KV blocks of %d positions, more than the %d "
                           "a pool has (--kv-blocks)",
                           (long long)blocks, (int)s->o.kv_block, (int)s->o.kv_blocks);
    return 0;
}

static int padded_mode(const batcher *s) {
    return s->o.static_batches == BATCH_STATIC_PADDED;
}

/* Room for one more waiting sequence. −1 out of memory. */
static int wait_reserve(batcher *s) {
    if (s->nwait < s->cap_wait) return 0;
    const int64_t cap = s->cap_wait ? 2 * s->cap_wait : 64;
    seq **w = realloc(s->wait, (size_t)cap * sizeof *w);
    if (!w) return -1;
    s->wait = w, s->cap_wait = cap;
    return 0;
}

int batcher_add(batcher *s, int64_t id, const int32_t *prompt, int64_t plen, int64_t max_new,
                const batch_sampling *sp) {
    if (wait_reserve(s) < 0) return -1;
    seq *q = calloc(1, sizeof *q);
    /* a padded batch's row may hold positions up to the batch's longest prompt */
    const int64_t nb = div_up(padded_mode(s) ? s->o.context : plen + max_new, s->o.kv_block);
    if (q) {
        q->tok = malloc((size_t)(plen + max_new) * sizeof *q->tok);
        q->table = malloc((size_t)nb * sizeof *q->table);
        q->bhash = malloc((size_t)nb * sizeof *q->bhash);
    }
    if (!q || !q->tok || !q->table || !q->bhash) {
        seq_free(q);
        return -1;
    }
    memcpy(q->tok, prompt, (size_t)plen * sizeof *q->tok);
    q->id = id, q->len = q->plen = plen, q->max_new = max_new, q->sp = *sp, q->replica = -1;
    s->wait[s->nwait++] = q;
    return 0;
}

/* ---------------------------------------------------------------- blocks of a sequence */

/* Releases q's blocks, last first (so that the end of a sequence leaves the cache first). */
static void release_blocks(batcher *s, seq *q) {
    for (int32_t b = q->nblocks - 1; b >= 0; b--) kvb_release(pool_of(s, q), q->table[b]);
    q->nblocks = q->npub = 0;
    q->computed = q->dcomputed = 0;
}

/* New blocks q needs to hold positions up to end − 1. */
static int64_t blocks_needed(const batcher *s, const seq *q, int64_t end) {
    const int64_t n = div_up(end, s->o.kv_block) - q->nblocks;
    return n > 0 ? n : 0;
}

static void grow(batcher *s, seq *q, int64_t end) {
    for (int64_t n = blocks_needed(s, q, end); n > 0; n--) {
        const int32_t b = kvb_alloc(pool_of(s, q));
        CHECK(b >= 0, "batcher: a block was counted available but none could be allocated");
        q->table[q->nblocks++] = b;
    }
}

static void run_remove(batcher *s, int32_t r, const seq *q) {
    for (int32_t i = 0; i < s->nrun[r]; i++)
        if (s->run[r][i] == q) {
            memmove(s->run[r] + i, s->run[r] + i + 1, (size_t)(s->nrun[r] - i - 1) * sizeof(seq *));
            s->nrun[r]--;
            return;
        }
}

static void retire(batcher *s, seq *q) {
    release_blocks(s, q);
    run_remove(s, q->replica, q);
    seq_free(q);
}

/* BATCH_STATIC_PADDED: a batch whose rows have all ended (finished rows only) ends, and its
 * blocks come back. */
static void end_padded_batches(batcher *s) {
    for (int32_t r = 0; r < s->o.replicas; r++) {
        int live = 0;
        for (int32_t i = 0; i < s->nrun[r]; i++) live += !s->run[r][i]->ghost;
        while (!live && s->nrun[r] > 0) retire(s, s->run[r][s->nrun[r] - 1]);
    }
}

/* Preemption by recompute: q goes back to the head of the queue without blocks (a padded
 * batch's finished row, whose tokens are all out, just ends). */
static void preempt(batcher *s, seq *q) {
    const int32_t r = q->replica;
    if (q->ghost) {
        retire(s, q);
        return;
    }
    release_blocks(s, q);
    q->padded = 0;
    run_remove(s, r, q);
    q->replica = -1;
    CHECK(wait_reserve(s) == 0, "batcher: out of memory preempting a sequence");
    memmove(s->wait + 1, s->wait, (size_t)s->nwait * sizeof *s->wait);
    s->wait[0] = q;
    s->nwait++;
    s->no_admit[r] = 1;
    s->counts.preemptions++;
}

int batcher_cancel(batcher *s, int64_t id) {
    for (int64_t i = 0; i < s->nwait; i++)
        if (s->wait[i]->id == id) {
            seq_free(s->wait[i]);
            memmove(s->wait + i, s->wait + i + 1, (size_t)(s->nwait - i - 1) * sizeof *s->wait);
            s->nwait--;
            return 1;
        }
    for (int32_t r = 0; r < s->o.replicas; r++)
        for (int32_t i = 0; i < s->nrun[r]; i++)
            if (s->run[r][i]->id == id) {
                retire(s, s->run[r][i]);
                end_padded_batches(s);
                return 1;
            }
    return 0;
}

/* ---------------------------------------------------------------- planning */

/* Appends q's rows at positions [p0, p0 + n) to the plan, sampling the last one's token or not,
 * with `draft` tokens to draft after it (its blocks already held). Past the sequence's tokens
 * (a padded prefill's filler) the rows take its last token. */
static void add_rows(batcher *s, batch_plan *p, seq *q, int64_t p0, int32_t n, int32_t draft,
                     int sample) {
    CHECK(p->nitems < p->cap_items && p->ntok + n <= p->cap_tok &&
              p->ntab + q->nblocks <= p->cap_tab,
          "batcher: the step plan is full");
    const int64_t d0 = s->o.draft_tokens > 0 ? q->dcomputed : q->computed;
    p->items[p->nitems] = (batch_item){q->id,
                                       q->replica,
                                       n,
                                       (int32_t)p0,
                                       p->ntok,
                                       p->ntab,
                                       q->nblocks,
                                       sample,
                                       (int32_t)q->ngen,
                                       q->sp.top_k,
                                       q->sp.seed,
                                       q->sp.temperature,
                                       draft,
                                       (int32_t)d0,
                                       d0 < q->computed ? q->tok[d0] : 0,
                                       q->sp.logprobs,
                                       q->sp.top_logprobs,
                                       q->shard};
    for (int32_t i = 0; i < n; i++)
        p->tok[p->ntok + i] = q->tok[p0 + i < q->len ? p0 + i : q->len - 1];
    memcpy(p->tab + p->ntab, q->table, (size_t)q->nblocks * sizeof *p->tab);
    s->step_seq[p->nitems++] = q;
    p->ntok += n, p->ntab += q->nblocks;
    s->budget[q->replica] -= n + draft;
    q->stepped = 1;
}

/* Appends q's share [q->computed, q->computed + n) to the plan (see add_rows). */
static void add_item(batcher *s, batch_plan *p, seq *q, int32_t n, int32_t draft) {
    if (q->len - q->computed > 1) s->counts.prefill_tokens += n;
    add_rows(s, p, q, q->computed, n, draft, q->computed + n == q->len);
}

/* The youngest running sequence of replica r and shard z without work in this step. */
static seq *youngest_idle(batcher *s, int32_t r, int32_t z) {
    for (int32_t i = s->nrun[r] - 1; i >= 0; i--)
        if (!s->run[r][i]->stepped && s->run[r][i]->shard == z) return s->run[r][i];
    return NULL;
}

/* Tokens a decoding sequence drafts this step: up to --draft-tokens, leaving room for the
 * correction or bonus token within max_new, within the rows left in the budget; none while the
 * token fed is the prompt's last (its row gives the first token, as generate --draft's prefill
 * does), so the rounds are the same however the prompt was chunked or found in the cache. */
static int64_t draft_count(const batcher *s, const seq *q) {
    if (q->computed < q->plen) return 0;
    int64_t k = s->o.draft_tokens;
    if (k > q->max_new - q->ngen - 1) k = q->max_new - q->ngen - 1;
    if (k > s->budget[q->replica] - 1) k = s->budget[q->replica] - 1;
    return k > 0 ? k : 0;
}

/* Blocks for q's positions up to from + *want − 1, preempting younger idle sequences, or q
 * itself, when not one block is left; with `shrink` fewer rows (*want) rather than preempting.
 * Returns 0 when q was preempted. */
static int make_room(batcher *s, seq *q, int64_t from, int64_t *want, int shrink) {
    for (;;) {
        const int64_t avail = kvb_available(pool_of(s, q));
        const int64_t fit = (q->nblocks + avail) * s->o.kv_block - from;
        if (blocks_needed(s, q, from + *want) <= avail) break;
        if (shrink && fit >= 1) { /* fewer rows now rather than preempting */
            *want = fit;
            break;
        }
        seq *v = youngest_idle(s, q->replica, q->shard);
        preempt(s, v);
        if (v == q) return 0;
    }
    grow(s, q, from + *want);
    return 1;
}

/* BATCH_STATIC_PADDED: whether every row of replica r that has not sampled yet has its padded
 * prefill done (the batch samples its first tokens together). */
static int batch_ready(const batcher *s, int32_t r) {
    for (int32_t i = 0; i < s->nrun[r]; i++)
        if (s->run[r][i]->held && s->run[r][i]->padded < s->run[r][i]->pad_end) return 0;
    return 1;
}

/* BATCH_STATIC_PADDED: a finished row recomputes its last computed position, its token thrown
 * away (no block needed); a held row runs its padded prefill's next chunk. Returns 0 when q was
 * preempted. */
static int plan_padded(batcher *s, batch_plan *p, seq *q) {
    if (q->ghost) {
        s->counts.padding_rows++;
        add_rows(s, p, q, q->computed - 1, 1, 0, 1);
        return 1;
    }
    int64_t want = q->pad_end - q->padded;
    if (want > s->o.prefill_chunk) want = s->o.prefill_chunk;
    if (want > s->budget[q->replica]) want = s->budget[q->replica];
    if (want < 1) return 1;
    if (!make_room(s, q, q->padded, &want, 1)) return 0;
    int64_t real = q->len - 1 - q->padded; /* rows before the filler */
    real = real < 0 ? 0 : real < want ? real : want;
    s->counts.padding_rows += want - real;
    s->counts.prefill_tokens += real;
    add_rows(s, p, q, q->padded, (int32_t)want, 0, 0);
    return 1;
}

/* Work for running sequence q: its decode token (with its drafts), or a prefill chunk that fits
 * the budget and the blocks (make_room). Returns 0 when q was preempted. */
static int plan_running(batcher *s, batch_plan *p, seq *q) {
    const int32_t r = q->replica;
    const int64_t rem = q->len - q->computed;
    if (q->ghost || (q->held && q->padded < q->pad_end)) return plan_padded(s, p, q);
    if (q->held && !batch_ready(s, r)) return 1;           /* the batch samples together */
    if (rem == 1 && r < s->o.prefill_replicas) return 1;   /* waits for a decode replica */
    int64_t want = rem == 1 ? 1 + draft_count(s, q) : rem; /* rows: the tokens and the drafts */
    if (rem > 1 && want > s->o.prefill_chunk) want = s->o.prefill_chunk;
    if (want > s->budget[r]) want = s->budget[r];
    if (want < 1) return 1;
    if (!make_room(s, q, q->computed, &want, rem > 1 || want > 1)) return 0;
    s->counts.prefill_tokens += q->held; /* a padded batch's last prompt token */
    add_item(s, p, q, rem == 1 ? 1 : (int32_t)want, rem == 1 ? (int32_t)want - 1 : 0);
    return 1;
}

/* Running sequences of replica r held in its shard z. */
static int64_t shard_seqs(const batcher *s, int32_t r, int32_t z) {
    int64_t n = 0;
    for (int32_t i = 0; i < s->nrun[r]; i++) n += s->run[r][i]->shard == z;
    return n;
}

/* The pool the head of the queue goes to: of a replica with room for it (sequences, budget, no
 * preemption this step, and with static batches an empty replica), the one with the most room,
 * its blocks available plus those of the prompt's prefix it caches (which the sequence shares
 * rather than allocates: a pool holding the prefix wins unless it has that many blocks fewer
 * available), then the fewest sequences, then the first (replica, then shard); −1 if none. */
static int32_t pick_pool(const batcher *s) {
    const seq *q = s->wait[0];
    const int32_t most = (int32_t)((q->len - 1) / s->o.kv_block); /* as admit matches */
    int32_t best = -1;
    int64_t best_avail = 0, best_seqs = 0;
    const int32_t nr = s->o.prefill_replicas > 0 ? s->o.prefill_replicas : s->o.replicas;
    for (int32_t r = 0; r < nr; r++) {
        if (s->no_admit[r] || s->nrun[r] >= s->o.max_seqs) continue;
        if (s->o.static_batches ? !s->was_empty[r] : s->budget[r] < 1) continue;
        for (int32_t z = 0; z < shards_of(s, r); z++) {
            const kvb_pool *pl = pool_at(s, r, z);
            const int64_t a = kvb_available(pl) + kvb_peek(pl, q->tok, q->len - 1, most),
                          n = shard_seqs(s, r, z);
            if (best < 0 || a > best_avail || (a == best_avail && n < best_seqs))
                best = pool_base(s, r) + z, best_avail = a, best_seqs = n;
        }
    }
    return best;
}

/* Admits the head of the queue to pool i (pick_pool): the prefix cache's blocks there, then a
 * first chunk. 0
 * when it does not fit (nothing changes), except with static batches, where the whole batch
 * joins the empty replica at once and a sequence without room for a chunk yet starts in a later
 * step. */
static int admit(batcher *s, batch_plan *p, int32_t i) {
    seq *q = s->wait[0];
    kvb_pool *pool = s->pool[i];
    int32_t z;
    const int32_t r = pool_replica(s, i, &z);
    const int32_t bs = s->o.kv_block;
    /* at least the last token is computed: its logits give the next one (a padded batch has
     * no prefix cache, so it matches nothing: start_padded plans its rows) */
    const int32_t m =
        kvb_match(pool, q->tok, q->len - 1, (int32_t)((q->len - 1) / bs), q->table, q->bhash);
    q->replica = r, q->shard = z, q->nblocks = q->npub = m,
    q->computed = q->dcomputed = (int64_t)m * bs;
    int64_t want = padded_mode(s) ? 0 : q->len - q->computed;
    if (want > s->o.prefill_chunk) want = s->o.prefill_chunk;
    if (want > s->budget[r]) want = s->budget[r];
    const int64_t avail = kvb_available(pool);
    if (blocks_needed(s, q, q->computed + want) > avail)
        want = (q->nblocks + avail) * bs - q->computed;
    if (want < 1 && !s->o.static_batches) {
        release_blocks(s, q);
        q->replica = -1;
        return 0;
    }
    s->counts.cached_tokens += q->computed;
    memmove(s->wait, s->wait + 1, (size_t)(s->nwait - 1) * sizeof *s->wait);
    s->nwait--;
    s->run[r][s->nrun[r]++] = q;
    if (want < 1) return 1;
    grow(s, q, q->computed + want);
    add_item(s, p, q, (int32_t)want, 0);
    return 1;
}

/* Disaggregated: the decode replica with room for q (its blocks and the next position) and one
 * more sequence, and its pool there (*zd): q's own shard when both sides have as many pools a
 * replica (the same tensor ranks hold it on both), else any; most blocks available first, then
 * the first (replica, then shard); −1 if none. */
static int32_t pick_decode(const batcher *s, const seq *q, int32_t *zd) {
    const int same = s->o.prefill_shards == s->o.shards;
    int32_t best = -1;
    int64_t best_avail = 0;
    for (int32_t r = s->o.prefill_replicas; r < s->o.replicas; r++)
        for (int32_t z = same ? q->shard : 0; z < (same ? q->shard + 1 : s->o.shards); z++) {
            const int64_t a = kvb_available(pool_at(s, r, z));
            if (s->nrun[r] < s->o.max_seqs && a >= div_up(q->computed + 1, s->o.kv_block) &&
                (best < 0 || a > best_avail))
                best = r, *zd = z, best_avail = a;
        }
    return best;
}

/* Disaggregated: q, prefilled (its first token sampled), moves to a decode replica: fresh blocks
 * there, the transfer of its blocks' contents in the plan (made before the step's forward), its
 * prefill blocks released (the published ones stay in that replica's prefix cache). 0 when no
 * decode replica has room: q waits where it is. */
static int migrate(batcher *s, batch_plan *p, seq *q) {
    int32_t zd = 0;
    const int32_t d = pick_decode(s, q, &zd), src = q->replica, nb = q->nblocks;
    if (d < 0) return 0;
    CHECK(p->nxfer < p->cap_xfer && p->nxtab + 2 * nb <= p->cap_xtab,
          "batcher: the step plan's transfers are full");
    p->xfer[p->nxfer++] = (batch_xfer){q->id, src, d, nb, p->nxtab, q->shard, zd};
    memcpy(p->xtab + p->nxtab, q->table, (size_t)nb * sizeof *q->table);
    const int64_t computed = q->computed;
    release_blocks(s, q);
    run_remove(s, src, q);
    q->replica = d, q->shard = zd;
    grow(s, q, computed);
    CHECK(q->nblocks == nb, "batcher: %d blocks moved into %d", (int)nb, (int)q->nblocks);
    q->computed = q->dcomputed = computed;
    memcpy(p->xtab + p->nxtab + nb, q->table, (size_t)nb * sizeof *q->table);
    p->nxtab += 2 * nb;
    s->run[d][s->nrun[d]++] = q;
    s->counts.transfers++, s->counts.transfer_blocks += nb;
    return 1;
}

/* BATCH_STATIC_PADDED: every row of replica r not yet sampled pads to the longest prompt among
 * them, less its last token (recomputed when a row leaves before sampling: preempted or
 * cancelled; a row past a shortened end just has filler it overwrites). */
static void pad_to_longest(batcher *s, int32_t r) {
    int64_t P = 0;
    for (int32_t i = 0; i < s->nrun[r]; i++)
        if (s->run[r][i]->held && s->run[r][i]->len > P) P = s->run[r][i]->len;
    for (int32_t i = 0; i < s->nrun[r]; i++)
        if (s->run[r][i]->held) s->run[r][i]->pad_end = P - 1;
}

/* BATCH_STATIC_PADDED: replica r's new batch (admitted this step): every row's padded prefill
 * and its first chunk (batcher_fits keeps a whole context within the pool, so a row alone always
 * fits). */
static void start_padded(batcher *s, batch_plan *p, int32_t r) {
    for (int32_t i = 0; i < s->nrun[r]; i++)
        s->run[r][i]->held = 1, s->run[r][i]->padded = 0, s->run[r][i]->stepped = 0;
    pad_to_longest(s, r);
    for (int32_t i = 0; i < s->nrun[r]; i++)
        if (!s->run[r][i]->stepped && !plan_running(s, p, s->run[r][i])) i--;
    pad_to_longest(s, r);
}

int32_t batcher_step(batcher *s, batch_plan *p) {
    p->kind = BATCH_PLAN_STEP;
    p->nitems = p->ntok = p->ntab = p->nxfer = p->nxtab = 0;
    for (int32_t r = 0; r < s->o.prefill_replicas; r++)
        for (int32_t i = 0; i < s->nrun[r]; i++)
            if (s->run[r][i]->len - s->run[r][i]->computed == 1 && migrate(s, p, s->run[r][i])) i--;
    for (int32_t r = 0; r < s->o.replicas; r++) {
        s->budget[r] = s->o.max_batch_tokens;
        s->no_admit[r] = 0;
        s->was_empty[r] = s->nrun[r] == 0;
        for (int32_t i = 0; i < s->nrun[r]; i++) s->run[r][i]->stepped = 0;
        if (padded_mode(s)) pad_to_longest(s, r);
        for (int pass = 0; pass < 2; pass++) /* decodes first, then running prefills */
            for (int32_t i = 0; i < s->nrun[r]; i++) {
                seq *q = s->run[r][i];
                if (q->stepped || (pass == 0) != (q->len - q->computed == 1)) continue;
                if (!plan_running(s, p, q)) i--;
            }
    }
    while (s->nwait > 0) {
        const int32_t i = pick_pool(s);
        if (i < 0 || !admit(s, p, i)) break;
    }
    for (int32_t r = 0; r < s->o.replicas && padded_mode(s); r++)
        if (s->was_empty[r] && s->nrun[r] > 0) start_padded(s, p, r);
    s->counts.steps += p->nitems > 0;
    return p->nitems + p->nxfer;
}

/* Publishes q's blocks that became full of positions both caches hold. */
static void publish(batcher *s, seq *q) {
    const int32_t bs = s->o.kv_block;
    const int64_t upto = q->dcomputed < q->computed ? q->dcomputed : q->computed;
    while (s->o.prefix_cache && q->npub < q->nblocks && (int64_t)(q->npub + 1) * bs <= upto) {
        const uint64_t parent = q->npub ? q->bhash[q->npub - 1] : 0;
        q->bhash[q->npub] =
            kvb_publish(pool_of(s, q), q->table[q->npub], parent, q->tok + (int64_t)q->npub * bs);
        q->npub++;
    }
}

int64_t batch_lp_floats(const batch_item *it) {
    return it->logprobs ? 1 + 2 * (int64_t)it->top_logprobs : 0;
}

int64_t batch_plan_lp_floats(const batch_plan *p) {
    int64_t n = 0;
    for (int32_t j = 0; j < p->nitems; j++)
        if (p->items[j].sample) n += (p->items[j].draft + 1) * batch_lp_floats(&p->items[j]);
    return n;
}

void batcher_commit_counts(batcher *s, const batch_plan *p, const int32_t *next,
                           const int32_t *counts, const float *lp, batch_emit_fn emit, void *ctx) {
    int64_t lpo = 0;
    for (int32_t j = 0, k = 0, off = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        seq *q = s->step_seq[j];
        const int32_t c = it->sample ? (counts ? counts[k++] : 1) : 0;
        const int64_t lpn = it->sample && lp ? batch_lp_floats(it) : 0, lp0 = lpo;
        lpo += it->sample ? (it->draft + 1) * lpn : 0;
        if (q->ghost || (q->held && !it->sample)) { /* padded: no token, or one thrown away */
            off += c;
            q->padded = q->ghost ? q->padded : it->p0 + it->n;
            q->computed = q->dcomputed = q->ghost || q->padded >= q->len ? q->len - 1 : q->padded;
            continue;
        }
        q->held = 0;
        CHECK(!it->sample || (c >= 1 && c <= it->draft + 1 && q->len + c <= q->plen + q->max_new),
              "batcher: %d tokens for an item that drafted %d", (int)c, (int)it->draft);
        /* a drafting item keeps its token and c − 1 drafts; the drafter holds p0 + draft − 1 */
        q->computed = it->p0 + (it->draft > 0 ? c : it->n);
        q->dcomputed = it->draft > 0 && c > it->draft ? it->p0 + it->draft : q->computed;
        memcpy(q->tok + q->len, next + off, (size_t)c * sizeof *next);
        publish(s, q);
        if (it->draft > 0 && s->spec) s->spec(s->spec_ctx, q->id, it->draft, c - 1);
        for (int32_t i = 0; i < c; i++) {
            const int32_t t = next[off + i];
            q->len++;
            q->ngen++;
            batch_end end = q->ngen >= q->max_new ? BATCH_END_LENGTH : BATCH_END_NONE;
            const float *rec = lpn ? lp + lp0 + i * lpn : NULL;
            const batch_end asked =
                emit ? emit(ctx, q->id, t, q->ngen - 1, end, rec) : BATCH_END_NONE;
            if (asked != BATCH_END_NONE) end = asked;
            if (end != BATCH_END_NONE) { /* a padded batch's row runs on to the batch's end */
                if (padded_mode(s) && end != BATCH_END_CANCEL)
                    q->ghost = 1;
                else
                    retire(s, q);
                break;
            }
        }
        off += c;
    }
    if (padded_mode(s)) end_padded_batches(s);
}

void batcher_commit(batcher *s, const batch_plan *p, const int32_t *next, batch_emit_fn emit,
                    void *ctx) {
    batcher_commit_counts(s, p, next, NULL, NULL, emit, ctx);
}

/* ---------------------------------------------------------------- plans and checks */

int batch_plan_init(batch_plan *p, const batch_opts *o) {
    memset(p, 0, sizeof *p);
    p->cap_items = o->replicas * o->max_seqs;
    p->cap_tok = o->replicas * o->max_batch_tokens;
    p->cap_tab = p->cap_items * (int32_t)div_up(o->context, o->kv_block);
    p->items = calloc((size_t)p->cap_items, sizeof *p->items);
    p->tok = calloc((size_t)p->cap_tok, sizeof *p->tok);
    p->tab = calloc((size_t)p->cap_tab, sizeof *p->tab);
    p->cap_xfer = o->prefill_replicas > 0 ? p->cap_items : 0;
    p->cap_xtab = 2 * p->cap_tab;
    p->xfer = calloc((size_t)p->cap_xfer + 1, sizeof *p->xfer);
    p->xtab = calloc((size_t)p->cap_xtab, sizeof *p->xtab);
    return p->items && p->tok && p->tab && p->xfer && p->xtab ? 0 : -1;
}

void batch_plan_free(batch_plan *p) {
    free(p->items), free(p->tok), free(p->tab), free(p->xfer), free(p->xtab);
    memset(p, 0, sizeof *p);
}

/* Pool i's invariants and that the running sequences it holds have exactly the references it
 * counts. 0, or −1 with err. */
static int check_pool(const batcher *s, int32_t i, char *err, size_t errlen) {
    int32_t z;
    const int32_t r = pool_replica(s, i, &z);
    char why[256];
    if (kvb_check(s->pool[i], why, sizeof why) < 0)
        return errmsg_fail(err, errlen, "replica %d shard %d: %s", (int)r, (int)z, why);
    int32_t *refs = calloc((size_t)s->o.kv_blocks, sizeof *refs);
    CHECK(refs, "batcher_check: out of memory");
    int rc = 0;
    for (int32_t k = 0; k < s->nrun[r] && rc == 0; k++) {
        const seq *q = s->run[r][k];
        if (q->replica != r || q->shard < 0 || q->shard >= shards_of(s, r) ||
            (int64_t)q->nblocks * s->o.kv_block < q->computed || q->npub > q->nblocks ||
            q->computed >= q->len)
            rc = errmsg_fail(err, errlen,
                             "replica %d: sequence %lld (shard %d) holds %d blocks for %lld "
                             "computed of %lld tokens (%d published)",
                             (int)r, (long long)q->id, (int)q->shard, (int)q->nblocks,
                             (long long)q->computed, (long long)q->len, (int)q->npub);
        for (int32_t b = 0; b < q->nblocks && q->shard == z; b++) refs[q->table[b]]++;
    }
    for (int32_t b = 0; b < s->o.kv_blocks && rc == 0; b++)
        if (refs[b] != kvb_refs(s->pool[i], b))
            rc = errmsg_fail(err, errlen,
                             "replica %d shard %d: block %d has %d references, the block tables "
                             "hold %d",
                             (int)r, (int)z, (int)b, (int)kvb_refs(s->pool[i], b), (int)refs[b]);
    free(refs);
    return rc;
}

int batcher_check(const batcher *s, char *err, size_t errlen) {
    for (int32_t i = 0; i < s->npool; i++)
        if (check_pool(s, i, err, errlen) < 0) return -1;
    for (int64_t i = 0; i < s->nwait; i++)
        if (s->wait[i]->nblocks || s->wait[i]->replica >= 0)
            return errmsg_fail(err, errlen, "waiting sequence %lld holds blocks",
                               (long long)s->wait[i]->id);
    return 0;
}
