/* logprob: log-softmax records of a token and its alternatives (see logprob.h). */
#include "train/serve/logprob.h"

#include <math.h>

static double finite_or_ninf(float x) {
    return isfinite(x) ? (double)x : -INFINITY;
}

/* Whether id a ranks before id b: the larger logit, the lower id on ties. */
static int before(const float *lg, int32_t a, int32_t b) {
    const double x = finite_or_ninf(lg[a]), y = finite_or_ninf(lg[b]);
    return x > y || (x == y && a < b);
}

void logprob_record(float *rec, const float *logits, int64_t V, int32_t token, int32_t top,
                    int32_t *scratch) {
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        if (finite_or_ninf(logits[v]) > mx) mx = finite_or_ninf(logits[v]);
    double sum = 0;
    for (int64_t v = 0; v < V && isfinite(mx); v++) sum += exp(finite_or_ninf(logits[v]) - mx);
    const double lse = isfinite(mx) ? mx + log(sum) : 0.0;
    rec[0] = (float)(finite_or_ninf(logits[token]) - lse);
    /* the top ids by insertion into a sorted prefix of scratch (top is small) */
    int32_t n = 0;
    const int32_t k = top < V ? top : (int32_t)V;
    for (int32_t v = 0; v < (int32_t)V && k > 0; v++) {
        if (n == k && !before(logits, v, scratch[n - 1])) continue;
        int32_t at = n < k ? n++ : k - 1;
        while (at > 0 && before(logits, v, scratch[at - 1])) scratch[at] = scratch[at - 1], at--;
        scratch[at] = v;
    }
    for (int32_t i = 0; i < top; i++) {
        const int32_t id = i < n ? scratch[i] : 0;
        rec[1 + 2 * i] = (float)id;
        rec[2 + 2 * i] = i < n ? (float)(finite_or_ninf(logits[id]) - lse) : -INFINITY;
    }
}
