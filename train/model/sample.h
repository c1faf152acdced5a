/* sample: text generation at the end of a run. Picks the next token from logits with a
 * temperature and a top-k cut, drawing the uniform number from the counter-based RNG at (seed,
 * SAMPLE_STREAM, position), so the generated text is a pure function of the parameters, the
 * prompt and the seed, and every rank holding the same logits picks the same token without
 * talking to the others. Depends on kernels/rng.h and, for generation, train/model/model.h. */
#ifndef MT_TRAIN_SAMPLE_H
#define MT_TRAIN_SAMPLE_H
#include <stdint.h>
#include <stdio.h>

#include "train/model/model.h"

/* RNG stream of the sampler (ASCII "sample"), apart from the parameter streams. */
#define SAMPLE_STREAM UINT64_C(0x73616d706c65)

typedef struct {
    double temperature; /* 0: greedy (argmax, lowest index on ties) */
    int64_t top_k;      /* 0 or >= V: no cut */
    uint64_t seed;
} sample_cfg;

/* Scratch for sample_pick: one entry per vocabulary item. */
typedef struct {
    float logit;
    int32_t id;
} sample_item;

/* Not collective, pure. The token drawn from softmax(logits[V] / temperature) restricted to the
 * top_k largest logits (ties broken towards the lower id), by inverse CDF at u ∈ [0, 1).
 * Non-finite logits count as −∞; if none is finite, returns 0. scratch[V] is overwritten
 * (greedy, temperature ≤ 0: a scan for the largest, scratch untouched). */
int32_t sample_pick(const float *logits, int64_t V, double temperature, int64_t top_k, double u,
                    sample_item *scratch);

/* Not collective, pure. sample_pick's draw from its sorted finite logits scratch[0..n) (larger
 * first, ties by lower id), for a caller that has sorted them already. */
int32_t sample_pick_sorted(const sample_item *scratch, int64_t n, double temperature,
                           int64_t top_k, double u);

/* Collective over: world (model_next_logits may use collectives). Continues prompt[0..plen)
 * (plen ≥ 1) by n tokens into out[n], identical on every rank; the model sees the last T tokens
 * of the text so far. If echo != NULL, each token is written to it as a byte (and flushed) as
 * soon as it is chosen — pass it on one rank only. Its few kilobytes of scratch are allocated
 * here; failing to get them is treated as a bug (CHECK). */
void sample_generate(model *m, const int32_t *prompt, int64_t plen, int64_t n, const sample_cfg *sc,
                     int32_t *out, FILE *echo);
#endif
