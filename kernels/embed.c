/* Token embedding lookup and its scatter-add backward on a vocabulary shard. */
#include "kernels/embed.h"

#include <string.h>

#include "kernels/traffic.h"

void kern_embed_fwd(float *restrict x, const float *restrict embed, const int32_t *restrict tokens,
                    int64_t M, int64_t D, int64_t v0, int64_t Vl) {
    int64_t in = 0;
    for (int64_t r = 0; r < M; r++) {
        int64_t t = (int64_t)tokens[r] - v0;
        if (t >= 0 && t < Vl)
            memcpy(x + r * D, embed + t * D, (size_t)D * sizeof *x), in++;
        else
            memset(x + r * D, 0, (size_t)D * sizeof *x);
    }
    kern_traffic_count(KERN_PASS_COPY, in * D);
    kern_traffic_count(KERN_PASS_CLEAR, (M - in) * D);
}

void kern_embed_bwd(float *restrict dembed, const float *restrict dx,
                    const int32_t *restrict tokens, int64_t M, int64_t D, int64_t v0, int64_t Vl) {
    int64_t in = 0;
    for (int64_t r = 0; r < M; r++) {
        int64_t t = (int64_t)tokens[r] - v0;
        if (t < 0 || t >= Vl) continue;
        float *de = dembed + t * D;
        const float *d = dx + r * D;
        for (int64_t i = 0; i < D; i++) de[i] += d[i];
        in++;
    }
    kern_traffic_count(KERN_PASS_ADD, in * D);
}
