/* spec_rule: speculative decoding's acceptance rule (see spec_rule.h). */
#include "train/infer/spec_rule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"

/* sample_pick's order: larger logit first, equal logits by lower id. */
static int item_cmp(const void *pa, const void *pb) {
    const sample_item *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* spec_probs, leaving scratch[0..n) the finite logits in sample_pick's order; returns n. */
static int64_t probs_sorted(double *p, const float *logits, int64_t V, double temperature,
                            int64_t top_k, sample_item *scratch) {
    memset(p, 0, (size_t)V * sizeof *p);
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (isfinite(logits[i])) scratch[n++] = (sample_item){logits[i], (int32_t)i};
    if (n == 0) {
        p[0] = 1;
        return 0;
    }
    qsort(scratch, (size_t)n, sizeof *scratch, item_cmp);
    if (temperature <= 0.0) {
        p[scratch[0].id] = 1;
        return n;
    }
    const int64_t all = n;
    if (top_k > 0 && top_k < n) n = top_k;
    double total = 0.0; /* the weights exactly as sample_pick sums them */
    for (int64_t i = 0; i < n; i++)
        total += exp(((double)scratch[i].logit - (double)scratch[0].logit) / temperature);
    for (int64_t i = 0; i < n; i++)
        p[scratch[i].id] =
            exp(((double)scratch[i].logit - (double)scratch[0].logit) / temperature) / total;
    return all;
}

void spec_probs(double *p, const float *logits, int64_t V, double temperature, int64_t top_k,
                sample_item *scratch) {
    probs_sorted(p, logits, V, temperature, top_k, scratch);
}

double spec_accept_prob(const double *p, const double *q, int32_t d) {
    return q[d] <= 0 || p[d] >= q[d] ? 1.0 : p[d] / q[d];
}

void spec_residual(double *r, const double *p, const double *q, int64_t V) {
    double total = 0;
    for (int64_t i = 0; i < V; i++) {
        r[i] = p[i] > q[i] ? p[i] - q[i] : 0.0;
        total += r[i];
    }
    if (!(total > 0)) {
        memcpy(r, p, (size_t)V * sizeof *r);
        return;
    }
    for (int64_t i = 0; i < V; i++) r[i] /= total;
}

int32_t spec_draw(const double *r, int64_t V, double u) {
    double total = 0;
    int32_t last = 0;
    for (int64_t i = 0; i < V; i++)
        if (r[i] > 0) total += r[i], last = (int32_t)i;
    const double target = u * total;
    double cum = 0;
    for (int64_t i = 0; i < V; i++) {
        cum += r[i];
        if (r[i] > 0 && cum > target) return (int32_t)i;
    }
    return last;
}

int32_t spec_draft_pick(double *q, const float *logits, int64_t V, double temperature,
                        int64_t top_k, uint64_t seed, uint64_t idx, int32_t i,
                        sample_item *scratch) {
    if (temperature <= 0.0) return sample_pick(logits, V, 0.0, 0, 0.0, scratch);
    const int64_t n = probs_sorted(q, logits, V, temperature, top_k, scratch);
    const double u = kern_rng_uniform(seed, SPEC_STREAM_DRAFT, idx + (uint64_t)i);
    return sample_pick_sorted(scratch, n, temperature, top_k, u); /* the one sort for both */
}

spec_verdict spec_verify(const float *tl, const double *q, const int32_t *d, int32_t k, int64_t V,
                         double temperature, int64_t top_k, uint64_t seed, uint64_t idx,
                         double *work, sample_item *scratch) {
    if (temperature <= 0.0) { /* greedy: the longest prefix equal to the target's argmax */
        for (int32_t i = 0; i < k; i++) {
            const int32_t t = sample_pick(tl + (int64_t)i * V, V, 0.0, 0, 0.0, scratch);
            if (t != d[i]) return (spec_verdict){i, t};
        }
        return (spec_verdict){k, sample_pick(tl + (int64_t)k * V, V, 0.0, 0, 0.0, scratch)};
    }
    double *p = work, *r = work + V;
    for (int32_t i = 0; i < k; i++) {
        spec_probs(p, tl + (int64_t)i * V, V, temperature, top_k, scratch);
        const double a = spec_accept_prob(p, q + (int64_t)i * V, d[i]);
        if (kern_rng_uniform(seed, SPEC_STREAM_ACCEPT, idx + (uint64_t)i) < a) continue;
        spec_residual(r, p, q + (int64_t)i * V, V);
        const double u = kern_rng_uniform(seed, SPEC_STREAM_RESID, idx + (uint64_t)i);
        return (spec_verdict){i, spec_draw(r, V, u)};
    }
    spec_probs(p, tl + (int64_t)k * V, V, temperature, top_k, scratch);
    const double u = kern_rng_uniform(seed, SPEC_STREAM_RESID, idx + (uint64_t)k);
    return (spec_verdict){k, spec_draw(p, V, u)};
}
