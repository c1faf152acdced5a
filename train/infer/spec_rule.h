/* spec_rule: speculative decoding's acceptance rule, shared by `generate --draft` (draft.c) and
 * `serve --draft` (train/serve/spec_engine.c). A drafter proposes k tokens d_1..d_k, drawn from
 * its distributions q_1..q_k; the target scores the k + 1 positions in one forward, giving
 * p_1..p_{k+1}. Then, position by position:
 *  - greedy (temperature 0): d_i is kept while it is the target's argmax (sample_pick's, lowest id
 *    on ties); the first mismatch is replaced by the target's argmax; when all k match, the
 *    target's argmax at position k + 1 is the bonus token. So the tokens are plain greedy's;
 *  - sampling: d_i is kept with probability min(1, p_i(d_i)/q_i(d_i)); at the first rejection
 *    the token is drawn from norm(max(0, p_i − q_i)); when all k are kept the bonus is drawn from
 *    p_{k+1}. The output's distribution is the target's, whatever the drafter.
 * p and q are the sampler's distributions (sample.h: the softmax of logits / temperature over the
 * top_k largest, 0 elsewhere; one-hot when greedy), computed here in double exactly as
 * sample_pick weighs them, so the drafter's draws come from the q this rule divides by.
 *
 * Randomness is counter-based: the draw for drafted position i of a sequence uses index
 * idx + i of the stream (idx: the sequence's RNG key for its first drafted token), the drafter's
 * pick SPEC_STREAM_DRAFT, the acceptance test SPEC_STREAM_ACCEPT, the residual or bonus draw
 * SPEC_STREAM_RESID, so a run is a pure function of the seed. Pure: no MPI, no model. */
#ifndef MT_TRAIN_INFER_SPEC_RULE_H
#define MT_TRAIN_INFER_SPEC_RULE_H
#include <stdint.h>

#include "train/model/sample.h"

#define SPEC_STREAM_DRAFT UINT64_C(0x7370656364)  /* "specd" */
#define SPEC_STREAM_ACCEPT UINT64_C(0x7370656361) /* "speca" */
#define SPEC_STREAM_RESID UINT64_C(0x7370656372)  /* "specr" */

/* Not collective, pure. p[V] = the distribution sample_pick draws from (temperature, top_k) over
 * logits[V]: its top_k largest finite logits (ties to the lower id) weighted
 * exp((l − l_max)/temperature), normalised; 0 elsewhere. Greedy (temperature ≤ 0): 1 at
 * sample_pick's argmax. No finite logit: 1 at token 0 (sample_pick's answer). scratch[V] is
 * overwritten. */
void spec_probs(double *p, const float *logits, int64_t V, double temperature, int64_t top_k,
                sample_item *scratch);

/* Not collective, pure. The probability that drafted token d, drawn from q, is kept against the
 * target's p: min(1, p[d]/q[d]) (1 when q[d] = 0, which a draw from q never gives). */
double spec_accept_prob(const double *p, const double *q, int32_t d);

/* Not collective, pure. r[V] = norm(max(0, p − q)), the distribution of the token that replaces
 * a rejected one. When p ≤ q everywhere (p = q: nothing is ever rejected), r = p. */
void spec_residual(double *r, const double *p, const double *q, int64_t V);

/* Not collective, pure. The token of distribution r[V] at uniform u ∈ [0, 1): inverse CDF in
 * token order (the last token with r > 0 when u·Σr rounds past the sum). */
int32_t spec_draw(const double *r, int64_t V, double u);

typedef struct {
    int32_t accepted; /* drafted tokens kept, 0..k */
    int32_t next;     /* the correction (accepted < k) or the bonus (accepted = k) */
} spec_verdict;

/* Not collective, pure. One round's verdict: k ≥ 0 drafted tokens d[k] drawn from the drafter's
 * distributions q[k, V] (unused when greedy: temperature ≤ 0) against the target's logits at the
 * k + 1 positions tl[k + 1, V] (row i scores the token after d_1..d_i), sampled with
 * temperature and top_k; uniforms at (seed, stream, idx + i). Kept tokens are d[0..accepted).
 * work: 2·V doubles; scratch: V items. */
spec_verdict spec_verify(const float *tl, const double *q, const int32_t *d, int32_t k, int64_t V,
                         double temperature, int64_t top_k, uint64_t seed, uint64_t idx,
                         double *work, sample_item *scratch);

/* Not collective, pure. The drafter's pick at drafted position i from its logits[V]: q[V] gets
 * its distribution (for spec_verify), and the token is drawn at (seed, SPEC_STREAM_DRAFT,
 * idx + i) as sample_pick draws (greedy: its argmax). */
int32_t spec_draft_pick(double *q, const float *logits, int64_t V, double temperature,
                        int64_t top_k, uint64_t seed, uint64_t idx, int32_t i,
                        sample_item *scratch);
#endif
