/* draft: speculative decoding for `meshtrain generate --draft CKPT --draft-tokens k`. A drafter
 * (a smaller model with the same vocabulary, its own gen on the same ranks and sharding) proposes
 * k tokens per sequence, one cached decode step each; the target scores the k + 1 positions
 * [the last token, d_1..d_k] in one cached forward (gen_extend), and spec_rule.h's rule keeps
 * the longest acceptable prefix and adds one token (the correction, or the bonus when all k are
 * kept). Then both caches roll back to what was kept (gen_set_pos): the target's to the kept
 * tokens, the drafter's likewise, except that after a round that kept all k the drafter has not
 * yet seen d_k, so its next round starts with two rows (d_k and the new token).
 *
 * Each sequence drafts k_b = min(k, tokens left − 1) so that no round writes past its cache;
 * sequences advance by different amounts and finish in different rounds, each replica on its
 * own (no collective across replicas inside the loop). Greedy decoding gives exactly the tokens
 * of plain greedy decoding; sampling gives the target's distribution (spec_rule.h), drawn at the
 * sequence's RNG key (global index << 32 | token index, generate's layout) in the rule's
 * streams. Depends on gen, spec_rule, mesh. */
#ifndef MT_TRAIN_INFER_DRAFT_H
#define MT_TRAIN_INFER_DRAFT_H
#include <stdint.h>

#include "train/infer/gen.h"
#include "train/infer/prompts.h"

/* Drafted tokens and their fate: kept, or judged and rejected (at most one per round; the ones
 * after a rejection are never judged). α = accepted / (accepted + rejected) estimates the
 * probability that a drafted token is kept, the α of the book's (1 − α^(k+1))/(1 − α). */
typedef struct {
    int64_t drafted, accepted, rejected;
} spec_counts;

/* α of c (0 when nothing was judged). */
double spec_alpha(const spec_counts *c);

typedef struct {
    spec_counts all;
    spec_counts *seq;    /* per local sequence [nb] (allocated by spec_generate) */
    int64_t rounds;      /* target forwards (verify steps) */
    int64_t draft_steps; /* drafter forwards */
    int64_t seq_steps;   /* (sequence, round) pairs: the sequences' target steps */
    int64_t tokens;      /* tokens produced by the rounds (the first token of prefill excluded) */
    double *draft_s, *verify_s;     /* this rank's step times, [draft_steps] and [rounds] */
    gen_step draft_sum, verify_sum; /* this rank's figures summed over the steps */
    double pick_sec;  /* the drafter's token picks after its steps, in all (s) */
    double rule_sec;  /* the acceptance rule and the caches' rollback after the verify steps (s) */
    double loop_sec;  /* the rounds from the first drafter step to the last verdict (s) */
} spec_run;

void spec_run_free(spec_run *r); /* accepts a zeroed run */

/* Collective over: the tensor axis. After gen_prefill of the target tg (first[b]: the first new
 * token of local sequence b) and of the drafter dg on the same prompts ps (global; local
 * sequence b is ps's row0 + b), continues every local sequence to n ≥ 1 tokens,
 * out[b·n + i] (out[b·n] = first[b]), drafting k ≥ 1 tokens a round; sampling with temperature,
 * top_k and seed (0 temperature: greedy). *r is filled (spec_run_free releases it). */
void spec_generate(gen *tg, gen *dg, const prompt_set *ps, int64_t n, int k, double temperature,
                   int64_t top_k, uint64_t seed, const int32_t *first, int32_t *out, spec_run *r);
#endif
