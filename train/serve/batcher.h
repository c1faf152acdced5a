/* batcher: the serving engine's iteration-level scheduler, run by the rank that talks to clients.
 * Each step it decides, for every replica (the --dp axes hold independent replicas, each with its
 * own KV pool), which sequences run and which of their tokens: every running sequence that is
 * decoding gets its one token, sequences whose prompt is not yet in the cache get a chunk of at
 * most --prefill-chunk tokens, and waiting requests are admitted in arrival order while the
 * replica's token budget (--max-batch-tokens rows per forward), its sequence cap and its blocks
 * allow. A new sequence first shares the full blocks of its prompt found in the prefix cache.
 *
 * When a sequence needs a block and none is left, the youngest running sequence that has no work
 * in this step is preempted by recompute: its blocks are released (published ones stay in the
 * prefix cache) and it waits at the head of the queue with its prompt and the tokens generated so
 * far, which a later prefill recomputes. The oldest sequence therefore always progresses, and a
 * request that fits the pool alone (batcher_fits) always finishes.
 *
 * With static_batches the scheduler is a baseline without continuous batching:
 * a replica admits only when it is empty, then takes up to --max-seqs waiting requests at once as
 * its batch (their prefills run as the budget allows), and the batch runs until every sequence
 * in it ends. BATCH_STATIC computes only the sequences still going (a finished one leaves the
 * batch's steps, so it pays for no padding). BATCH_STATIC_PADDED is the conventional static
 * batch (`generate`'s, a server without iteration-level scheduling): every row computes the
 * batch's longest prompt, P − 1 positions, its own prompt then filler rows (its last prompt token
 * repeated, written to its own positions len − 1 .. P − 2, which the row overwrites before it
 * reads them), no row samples before every row's prefill is done, then every row samples its
 * first token in one step and decodes every step until the batch's longest output ends: a
 * finished row keeps running (an item recomputing its last computed position, its token thrown
 * away) and keeps its KV blocks unless preempted (it then just ends). The prefix cache is off
 * (batcher_create turns it off: nothing matched, nothing published) and no drafter runs.
 *
 * The step's decisions form a batch_plan, a flat value every rank receives (serve_cli.c) and
 * the engine runs; the sampled tokens come back through batcher_commit. Pure: no MPI, no model. */
#ifndef MT_TRAIN_SERVE_BATCHER_H
#define MT_TRAIN_SERVE_BATCHER_H
#include <stddef.h>
#include <stdint.h>

#include "train/serve/kvblocks.h"

typedef struct {
    int32_t replicas;         /* independent replicas, one KV pool each */
    int32_t kv_blocks;        /* blocks per replica */
    int32_t kv_block;         /* positions per block */
    int32_t max_batch_tokens; /* rows of one forward, per replica */
    int32_t prefill_chunk;    /* most tokens of one sequence in one step */
    int32_t max_seqs;         /* running sequences per replica (<= max_batch_tokens) */
    int32_t context;          /* positions of a sequence (the model's T) */
    int prefix_cache;
    int static_batches;   /* batch_mode: BATCH_CONTINUOUS (0), BATCH_STATIC, BATCH_STATIC_PADDED */
    int32_t draft_tokens; /* speculative decoding: tokens a decode drafts (0: none) */
    /* disaggregated serving: replicas [0, n) only prefill, the others only decode; a sequence
     * whose prompt is done moves to a decode replica, its KV blocks shipped (batch_xfer) (0:
     * every replica does both) */
    int32_t prefill_replicas;
    /* the AllToAll kv layout (engine.h): each replica's sequences split over `shards` pools of
     * kv_blocks blocks, pool z held by the tensor ranks of group coordinate z; a sequence stays
     * in one (0 or 1: one pool per replica) */
    int32_t shards;
    /* disaggregated serving with a tensor degree per side: the pools of a prefill replica (0:
     * shards); a sequence then moves to any pool of a decode replica, else to its own shard */
    int32_t prefill_shards;
} batch_opts;

typedef enum { BATCH_CONTINUOUS = 0, BATCH_STATIC = 1, BATCH_STATIC_PADDED = 2 } batch_mode;

/* The most alternatives a token's log-probabilities list (top_logprobs). */
#define BATCH_TOP_LOGPROBS_MAX 20

typedef struct {
    double temperature;   /* 0: greedy */
    int64_t top_k;        /* 0: no cut */
    uint64_t seed;        /* the sampler's RNG stream for this request */
    int32_t logprobs;     /* 1: every token comes with its log-probability (batch_lp_floats) */
    int32_t top_logprobs; /* and the log-probabilities of the n most likely tokens (n <= MAX) */
} batch_sampling;

/* One sequence's share of a step: its tokens at positions [p0, p0 + n), their keys and values
 * stored through the block table tab[tab_off .. tab_off + tab_len) (covering every position up
 * to p0 + n + draft − 1), tokens tok[tok_off .. tok_off + n).
 *
 * With speculative decoding (batch_opts.draft_tokens > 0) a decoding sequence (n = 1) drafts
 * `draft` tokens: the drafter writes positions [p0, p0 + draft), the target scores the
 * p0 + draft + 1 rows [the token, the drafts] and keeps what the rule keeps (train/infer/
 * spec_rule.h), so the item yields 1 to draft + 1 tokens. The drafter's cache may lag the
 * target's by one position (after a round that kept every draft): it starts at d0 = p0 − 1 with
 * the token dtok, else d0 = p0. */
typedef struct {
    int64_t id;
    int32_t replica, n, p0, tok_off, tab_off, tab_len;
    int32_t sample;    /* 1: the last row's logits give the sequence's next token */
    int32_t tok_index; /* that token's index among the sequence's generated ones */
    int64_t top_k;
    uint64_t seed;
    double temperature;
    int32_t draft, d0, dtok;
    int32_t logprobs, top_logprobs; /* the request's (batch_sampling) */
    int32_t shard;                  /* the pool of its replica that holds it (batch_opts.shards) */
} batch_item;

/* Log-probabilities: each token of an item with logprobs = 1 comes with a record of
 * batch_lp_floats(item) floats: [log p(token), id_1, log p(id_1), ..., id_n, log p(id_n)], the n =
 * top_logprobs most likely tokens in decreasing order (train/serve/logprob.h). A step's records
 * lie back to back in plan order, draft + 1 of them for each sampling item that asks (a drafting
 * item's kept tokens use the first ones). */
int64_t batch_lp_floats(const batch_item *it);

typedef enum { BATCH_PLAN_STEP = 1, BATCH_PLAN_EXIT = 2 } batch_plan_kind;

/* Disaggregated serving: sequence id's KV blocks xtab[tab_off .. tab_off + nblocks) of replica
 * src's pool shard go to blocks xtab[tab_off + nblocks .. tab_off + 2·nblocks) of replica dst's
 * pool dshard, before the step's forward (the sequence's item, if any, is already dst's). */
typedef struct {
    int64_t id;
    int32_t src, dst, nblocks, tab_off;
    int32_t shard, dshard; /* the pool on each side (batch_opts.shards, prefill_shards) */
} batch_xfer;

/* A step plan: the items (each replica's decodes, then its running prefills, then the new
 * sequences of every replica), their tokens and block tables back to back; the KV transfers to
 * make first. */
typedef struct {
    int32_t kind, nitems, ntok, ntab, nxfer, nxtab;
    batch_item *items;
    int32_t *tok, *tab;
    batch_xfer *xfer;
    int32_t *xtab;
    int32_t cap_items, cap_tok, cap_tab, cap_xfer, cap_xtab;
} batch_plan;

/* The floats of plan p's records (0: no item asks). */
int64_t batch_plan_lp_floats(const batch_plan *p);

/* Why a sequence ended. */
typedef enum { BATCH_END_NONE = 0, BATCH_END_LENGTH, BATCH_END_STOP, BATCH_END_CANCEL } batch_end;

/* Called by batcher_commit for every token a sequence produces: its index among the generated
 * ones (0 = the first), BATCH_END_LENGTH when it was the last allowed, and its log-probability
 * record (batch_lp_floats; NULL when the request asked for none). Returns BATCH_END_STOP or
 * BATCH_END_CANCEL to end the sequence now, else BATCH_END_NONE. */
typedef batch_end (*batch_emit_fn)(void *ctx, int64_t id, int32_t token, int64_t index,
                                   batch_end end, const float *lp);

typedef struct batcher batcher;

/* Not collective. Checks the options (NULL with the reason in err). */
batcher *batcher_create(const batch_opts *o, char *err, size_t errlen);
void batcher_destroy(batcher *s); /* accepts NULL */
const batch_opts *batcher_options(const batcher *s);
/* Whether a request of plen prompt tokens and max_new new ones fits a replica alone: its
 * positions within the context and its blocks within the pool. 0, or −1 with the reason. */
int batcher_fits(const batcher *s, int64_t plen, int64_t max_new, char *err, size_t errlen);
/* Queues a request (checked with batcher_fits by the caller). 0, or −1 out of memory. */
int batcher_add(batcher *s, int64_t id, const int32_t *prompt, int64_t plen, int64_t max_new,
                const batch_sampling *sp);
/* Ends request id wherever it is (waiting or running): its blocks come back. 1 if it was
 * known. */
int batcher_cancel(batcher *s, int64_t id);
int64_t batcher_waiting(const batcher *s);
int64_t batcher_running(const batcher *s);

/* Buffers of a plan for these options (batch_plan_free releases them). −1 out of memory. */
int batch_plan_init(batch_plan *p, const batch_opts *o);
void batch_plan_free(batch_plan *p);
/* The next step into p (kind BATCH_PLAN_STEP). Returns p->nitems + p->nxfer (0: nothing to
 * run). */
int32_t batcher_step(batcher *s, batch_plan *p);
/* After the engine ran p: next[k] is the token of the k-th item with sample = 1 (plan order).
 * Advances every sequence, calls emit per token, publishes the blocks that became full, and
 * retires the sequences that ended (their blocks come back). */
void batcher_commit(batcher *s, const batch_plan *p, const int32_t *next, batch_emit_fn emit,
                    void *ctx);
/* batcher_commit with speculative decoding: the k-th item with sample = 1 yields counts[k] ≥ 1
 * tokens, packed in next in plan order (counts NULL: one each). A drafting item keeps
 * counts[k] − 1 drafts; its cache rolls back to what was kept. lp: the step's log-probability
 * records (batch_plan_lp_floats of them; NULL when no item asks). */
void batcher_commit_counts(batcher *s, const batch_plan *p, const int32_t *next,
                           const int32_t *counts, const float *lp, batch_emit_fn emit, void *ctx);
/* Called by batcher_commit_counts for every item that drafted, before its tokens: the drafted
 * tokens and how many of them the rule kept. */
typedef void (*batch_spec_fn)(void *ctx, int64_t id, int32_t drafted, int32_t kept);
/* The function (and its context) commits report drafting items to; NULL: none. */
void batcher_set_spec_fn(batcher *s, batch_spec_fn fn, void *ctx);

/* Counters: preemptions, tokens taken from the prefix cache at admission, prompt tokens
 * admitted (recomputed ones included), steps; disaggregated: sequences moved to a decode replica
 * and their blocks; BATCH_STATIC_PADDED: the rows computed for padding (filler rows of the padded
 * prompts and finished rows' steps). */
typedef struct {
    int64_t preemptions, cached_tokens, prefill_tokens, steps, transfers, transfer_blocks;
    int64_t padding_rows;
} batch_counts;
batch_counts batcher_get_counts(const batcher *s);
/* The pools: every replica's in replica order (prefill_shards of a prefill replica, shards of
 * the others), each replica's by shard (counts, checks). */
int32_t batcher_pools(const batcher *s);
const kvb_pool *batcher_pool(const batcher *s, int32_t i);
/* Checks every pool's invariants and that the running sequences' block tables hold exactly the
 * references the pools count. 0, or −1 with err. */
int batcher_check(const batcher *s, char *err, size_t errlen);
#endif
