/* drafter: the speculative-decoding tests' drafters (see drafter.h). */
#include "drafter.h"

#include <math.h>

#include "kernels/rng.h"

#define NOISE 0.3 /* the noisy drafter's unembedding noise, in units of its rms */

void test_drafter_make(model *m, drafter_kind kind) {
    int64_t n;
    float *w = model_param(m, P_UNEMBED, &n);
    double rms = 0;
    for (int64_t i = 0; i < n; i++) rms += (double)w[i] * w[i] / (double)n;
    rms = sqrt(rms);
    for (int64_t i = 0; i < n; i++) {
        if (kind == DRAFTER_WRONG) w[i] = -w[i];
        if (kind == DRAFTER_NOISY) /* of the local index: the drafter differs by mesh, as it may */
            w[i] += (float)(NOISE * rms * kern_rng_normal(5, 9, (uint64_t)i));
    }
    model_params_changed(m); /* bf16 compute: the weights' copy made again */
}

const char *test_drafter_name(drafter_kind kind) {
    return kind == DRAFTER_RIGHT ? "right" : kind == DRAFTER_WRONG ? "wrong" : "noisy";
}
