/* Cross-entropy pieces over a vocabulary shard: row statistics forward, softmax−onehot backward. */
#include "kernels/xent.h"

#include <math.h>

#include "kernels/vecmath.h"

void kern_xent_stats(float *restrict rowmax, float *restrict rowsum, float *restrict tlogit,
                     const float *restrict logits, const int32_t *restrict targets, int64_t M,
                     int64_t Vl, int64_t v0) {
    for (int64_t r = 0; r < M; r++) {
        const float *l = logits + r * Vl;
        float m = Vl > 0 ? kern_max_inl(l, Vl) : -INFINITY;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t j = 0;
        for (; j + 8 <= Vl; j += 8)
            for (int q = 0; q < 8; q++) acc[q] += kern_expf_inl(l[j + q] - m);
        float z = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; j < Vl; j++) z += kern_expf_inl(l[j] - m);
        int64_t t = (int64_t)targets[r] - v0;
        rowmax[r] = m;
        rowsum[r] = z;
        tlogit[r] = (t >= 0 && t < Vl) ? l[t] : 0.0f;
    }
}

/* Two loop bodies so that neither needs a runtime alias check: in place (one pointer) and
 * out of place (restrict). */
static void softmax_row_inplace(float *x, float lse, float scale, int64_t Vl) {
    for (int64_t j = 0; j < Vl; j++) x[j] = scale * kern_expf_inl(x[j] - lse);
}

static void softmax_row(float *restrict d, const float *restrict x, float lse, float scale,
                        int64_t Vl) {
    for (int64_t j = 0; j < Vl; j++) d[j] = scale * kern_expf_inl(x[j] - lse);
}

void kern_xent_bwd(float *dlogits, const float *logits, const float *restrict lse,
                   const int32_t *restrict targets, int64_t M, int64_t Vl, int64_t v0,
                   float scale) {
    for (int64_t r = 0; r < M; r++) {
        float *d = dlogits + r * Vl;
        if (dlogits == logits)
            softmax_row_inplace(d, lse[r], scale, Vl);
        else
            softmax_row(d, logits + r * Vl, lse[r], scale, Vl);
        int64_t t = (int64_t)targets[r] - v0;
        if (t >= 0 && t < Vl) d[t] -= scale;
    }
}

void kern_xent_stats_ref(float *rowmax, float *rowsum, float *tlogit, const float *logits,
                         const int32_t *targets, int64_t M, int64_t Vl, int64_t v0) {
    for (int64_t r = 0; r < M; r++) {
        const float *l = logits + r * Vl;
        float m = -INFINITY;
        for (int64_t j = 0; j < Vl; j++)
            if (l[j] > m) m = l[j];
        double z = 0.0;
        for (int64_t j = 0; j < Vl; j++) z += exp((double)l[j] - (double)m);
        rowmax[r] = m;
        rowsum[r] = (float)z;
        int64_t t = (int64_t)targets[r] - v0;
        tlogit[r] = (t >= 0 && t < Vl) ? l[t] : 0.0f;
    }
}

void kern_xent_bwd_ref(float *dlogits, const float *logits, const float *lse,
                       const int32_t *targets, int64_t M, int64_t Vl, int64_t v0, float scale) {
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < Vl; j++) {
            double p = exp((double)logits[r * Vl + j] - (double)lse[r]);
            double onehot = (int64_t)targets[r] - v0 == j ? 1.0 : 0.0;
            dlogits[r * Vl + j] = (float)((double)scale * (p - onehot));
        }
}
