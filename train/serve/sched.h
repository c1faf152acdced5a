/* sched: the serving engine's iteration-level scheduler, run by the rank that talks to clients.
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
 * request that fits the pool alone (sched_fits) always finishes.
 *
 * With static_batches the scheduler is the baseline a server without continuous batching is:
 * a replica admits only when it is empty, and its batch runs until every sequence in it ends.
 *
 * The step's decisions form a sched_plan, a flat value every rank receives (serve_cli.c) and
 * the engine runs; the sampled tokens come back through sched_commit. Pure: no MPI, no model. */
#ifndef MT_TRAIN_SERVE_SCHED_H
#define MT_TRAIN_SERVE_SCHED_H
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
    int static_batches;
} sched_opts;

typedef struct {
    double temperature; /* 0: greedy */
    int64_t top_k;      /* 0: no cut */
    uint64_t seed;      /* the sampler's RNG stream for this request */
} sched_sampling;

/* One sequence's share of a step: its tokens at positions [p0, p0 + n), their keys and values
 * stored through the block table tab[tab_off .. tab_off + tab_len) (covering every position up
 * to p0 + n − 1), tokens tok[tok_off .. tok_off + n). */
typedef struct {
    int64_t id;
    int32_t replica, n, p0, tok_off, tab_off, tab_len;
    int32_t sample;    /* 1: the last row's logits give the sequence's next token */
    int32_t tok_index; /* that token's index among the sequence's generated ones */
    int64_t top_k;
    uint64_t seed;
    double temperature;
} sched_item;

typedef enum { SCHED_PLAN_STEP = 1, SCHED_PLAN_EXIT = 2 } sched_plan_kind;

/* A step plan: the items (each replica's decodes, then its running prefills, then the new
 * sequences of every replica), their tokens and block tables back to back. */
typedef struct {
    int32_t kind, nitems, ntok, ntab;
    sched_item *items;
    int32_t *tok, *tab;
    int32_t cap_items, cap_tok, cap_tab;
} sched_plan;

/* Why a sequence ended. */
typedef enum { SCHED_END_NONE = 0, SCHED_END_LENGTH, SCHED_END_STOP, SCHED_END_CANCEL } sched_end;

/* Called by sched_commit for every token a sequence produces: its index among the generated
 * ones (0 = the first) and SCHED_END_LENGTH when it was the last allowed. Returns SCHED_END_STOP
 * or SCHED_END_CANCEL to end the sequence now, else SCHED_END_NONE. */
typedef sched_end (*sched_emit_fn)(void *ctx, int64_t id, int32_t token, int64_t index,
                                   sched_end end);

typedef struct sched sched;

/* Not collective. Checks the options (NULL with the reason in err). */
sched *sched_create(const sched_opts *o, char *err, size_t errlen);
void sched_destroy(sched *s); /* accepts NULL */
const sched_opts *sched_options(const sched *s);
/* Whether a request of plen prompt tokens and max_new new ones fits a replica alone: its
 * positions within the context and its blocks within the pool. 0, or −1 with the reason. */
int sched_fits(const sched *s, int64_t plen, int64_t max_new, char *err, size_t errlen);
/* Queues a request (checked with sched_fits by the caller). 0, or −1 out of memory. */
int sched_add(sched *s, int64_t id, const int32_t *prompt, int64_t plen, int64_t max_new,
              const sched_sampling *sp);
/* Ends request id wherever it is (waiting or running): its blocks come back. 1 if it was
 * known. */
int sched_cancel(sched *s, int64_t id);
int64_t sched_waiting(const sched *s);
int64_t sched_running(const sched *s);

/* Buffers of a plan for these options (sched_plan_free releases them). −1 out of memory. */
int sched_plan_init(sched_plan *p, const sched_opts *o);
void sched_plan_free(sched_plan *p);
/* The next step into p (kind SCHED_PLAN_STEP). Returns p->nitems (0: nothing to run). */
int32_t sched_step(sched *s, sched_plan *p);
/* After the engine ran p: next[k] is the token of the k-th item with sample = 1 (plan order).
 * Advances every sequence, calls emit per token, publishes the blocks that became full, and
 * retires the sequences that ended (their blocks come back). */
void sched_commit(sched *s, const sched_plan *p, const int32_t *next, sched_emit_fn emit,
                  void *ctx);

/* Counters: preemptions, tokens taken from the prefix cache at admission, prompt tokens
 * admitted (recomputed ones included). */
typedef struct {
    int64_t preemptions, cached_tokens, prefill_tokens, steps;
} sched_counts;
sched_counts sched_get_counts(const sched *s);
/* Replica r's pool (counts, checks). */
const kvb_pool *sched_pool(const sched *s, int32_t r);
/* Checks every pool's invariants and that the running sequences' block tables hold exactly the
 * references the pools count. 0, or −1 with err. */
int sched_check(const sched *s, char *err, size_t errlen);
#endif
