/* sample: top-k / temperature sampling with counter-based randomness (see sample.h). */
#include "train/model/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"
#include "mesh/mesh.h"

/* Larger logit first; equal logits by lower id, so the order is total and the same everywhere. */
static int item_cmp(const void *pa, const void *pb) {
    const sample_item *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Greedy: the first (lowest id) of the largest finite logits, 0 for none; the sort's first item
 * without the sort. */
static int32_t argmax(const float *logits, int64_t V) {
    int64_t best = -1;
    for (int64_t i = 0; i < V; i++)
        if (isfinite(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
    return best < 0 ? 0 : (int32_t)best;
}

int32_t sample_pick(const float *logits, int64_t V, double temperature, int64_t top_k, double u,
                    sample_item *scratch) {
    if (temperature <= 0.0) return argmax(logits, V);
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (isfinite(logits[i])) scratch[n++] = (sample_item){logits[i], (int32_t)i};
    qsort(scratch, (size_t)n, sizeof *scratch, item_cmp);
    return sample_pick_sorted(scratch, n, temperature, top_k, u);
}

int32_t sample_pick_sorted(const sample_item *scratch, int64_t n, double temperature,
                           int64_t top_k, double u) {
    if (n == 0) return 0;
    if (temperature <= 0.0) return scratch[0].id;
    if (top_k > 0 && top_k < n) n = top_k;
    /* Weights relative to the largest logit, in double: w_0 = 1, so the total is ≥ 1. */
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += exp(((double)scratch[i].logit - (double)scratch[0].logit) / temperature);
    const double target = u * total;
    double cum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        cum += exp(((double)scratch[i].logit - (double)scratch[0].logit) / temperature);
        if (cum > target) return scratch[i].id;
    }
    return scratch[n - 1].id; /* u·total rounded up to the total */
}

void sample_generate(model *m, const int32_t *prompt, int64_t plen, int64_t n, const sample_cfg *sc,
                     int32_t *out, FILE *echo) {
    const model_shape *s = model_shape_of(m);
    CHECK(plen >= 1, "sample_generate: empty prompt");
    int32_t *text = malloc((size_t)(plen + n) * sizeof *text);
    float *logits = malloc((size_t)s->V * sizeof *logits);
    sample_item *scratch = malloc((size_t)s->V * sizeof *scratch);
    CHECK(text && logits && scratch, "sample_generate: out of memory (%lld tokens)",
          (long long)(plen + n));
    memcpy(text, prompt, (size_t)plen * sizeof *text);
    for (int64_t i = 0; i < n; i++) {
        const int64_t len = plen + i, w = len < s->T ? len : s->T;
        model_next_logits(m, text + len - w, w, logits);
        const double u = kern_rng_uniform(sc->seed, SAMPLE_STREAM, (uint64_t)i);
        text[len] = sample_pick(logits, s->V, sc->temperature, sc->top_k, u, scratch);
        out[i] = text[len];
        if (echo) {
            fputc((unsigned char)text[len], echo);
            fflush(echo);
        }
    }
    free(text);
    free(logits);
    free(scratch);
}
