/* spec_engine: speculative decoding in the serving engine (`meshtrain serve --draft CKPT
 * --draft-tokens k`). The drafter is a second serve_engine on the same ranks, sharded as the
 * target, whose paged pool mirrors the target's block for block: a sequence's block table
 * addresses both pools, so the prefix cache, preemption and block accounting stay the
 * batcher's (batcher.h; a block is published only once both caches hold it).
 *
 * One step of plan p, on every rank of each replica (items with draft > 0 are decodes that
 * draft; batch_item says where the drafter's cache stands):
 *  1. the drafter's forward over every item's rows it has not seen ([d0, p0 + n): a prefill
 *     chunk, a decode's token and, after a round that kept all its drafts, the last draft), the
 *     last row's logits giving each drafting item its first draft;
 *  2. draft − 1 more drafter forwards of one row per drafting item;
 *  3. the target's forward: every item as the plain step runs it, a drafting item as the rows
 *     [its token, d_1..d_draft] with every row's logits;
 *  4. the rule (train/infer/spec_rule.h) per drafting item: the kept drafts and the correction
 *     or bonus token, drawn at (the request's seed, token index); the other sampling items as
 *     the plain step samples them;
 *  5. every replica's tokens and counts on every rank (one reduction over the data axes).
 * The rows past what was kept stay in the blocks as stale data: the batcher rolls `computed`
 * back and the next step overwrites them. Depends on engine, batcher, spec_rule, mesh. */
#ifndef MT_TRAIN_SERVE_SPEC_ENGINE_H
#define MT_TRAIN_SERVE_SPEC_ENGINE_H
#include <stddef.h>
#include <stdint.h>

#include "train/serve/batcher.h"
#include "train/serve/engine.h"

typedef struct serve_spec serve_spec;

/* Not collective. Speculative decoding of target e with drafter d (created with the same
 * --kv-blocks and --kv-block, and room for max_batch_tokens + max_seqs rows a forward), drafting
 * at most o->draft_tokens ≥ 1 tokens a decode. NULL with the reason in err. */
serve_spec *serve_spec_create(serve_engine *e, serve_engine *d, const batch_opts *o, char *err,
                              size_t errlen);
void serve_spec_destroy(serve_spec *sp); /* accepts NULL; not the engines */
/* Not collective. The drafter on ranks of its own (`serve --draft-ranks N`): world ranks
 * [0, ntarget) hold the target (e given to serve_spec_create, d NULL), the others the drafter (e
 * NULL, d its engine on their own mesh, one replica drafting for every item); me is this rank's
 * world rank. Each step the
 * drafter's first rank (ntarget) sends the drafts, and the drafter's distributions of the sampled
 * items, to every target rank point to point (mesh_move_bytes over world); the target verifies
 * as with a drafter on its own ranks. */
void serve_spec_remote(serve_spec *sp, const mesh_comm *world, int me, int ntarget);
/* Collective over: world. Runs plan p (the same on every rank): next holds the tokens of the
 * items with sample = 1, packed in plan order, counts[k] ≥ 1 of them for the k-th such item
 * (the kept drafts and one more, or the one token of an item that did not draft), on every
 * rank; lp (unless NULL) the log-probability records of those tokens (batcher.h), each from the
 * target's logits at its position. st: this rank's step (time; rows of the target's forward). */
void serve_spec_step(serve_spec *sp, const batch_plan *p, int32_t *next, int32_t *counts, float *lp,
                     gen_step *st);
#endif
