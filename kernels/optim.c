/* Optimizer updates and vector helpers on flat local slices. AdamW and kern_sumsq are built
 * twice, plainly and for AVX-512, with the same bits (kernels/vecwide.h). */
#include "kernels/optim.h"

#include <math.h>

#include "kernels/traffic.h"
#include "kernels/vecwide.h"

KERN_BODY adamw_body(float *restrict p, float *restrict m, float *restrict v,
                     const float *restrict g, int64_t n, const float *restrict k) {
    const float b1 = k[0], b2 = k[1], lr = k[2], eps = k[3], wd = k[4], c1 = k[5], c2 = k[6];
    for (int64_t i = 0; i < n; i++) {
        float mi = b1 * m[i] + (1.0f - b1) * g[i];
        float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * (mi * c1 / (sqrtf(vi * c2) + eps) + wd * p[i]);
    }
}

KERN_TWO_COPIES(adamw, 512,
                (float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
                 int64_t n, const float *restrict k),
                (p, m, v, g, n, k))

void kern_adamw(float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
                int64_t n, const kern_adamw_cfg *cfg) {
    const float k[7] = {cfg->beta1,
                        cfg->beta2,
                        cfg->lr,
                        cfg->eps,
                        cfg->weight_decay,
                        (float)(1.0 / (1.0 - pow((double)cfg->beta1, (double)cfg->step))),
                        (float)(1.0 / (1.0 - pow((double)cfg->beta2, (double)cfg->step)))};
    KERN_PICK(adamw)(p, m, v, g, n, k);
}

void kern_adamw_ref(float *p, float *m, float *v, const float *g, int64_t n,
                    const kern_adamw_cfg *cfg) {
    double b1 = cfg->beta1, b2 = cfg->beta2, t = (double)cfg->step;
    for (int64_t i = 0; i < n; i++) {
        double mi = b1 * m[i] + (1.0 - b1) * g[i];
        double vi = b2 * v[i] + (1.0 - b2) * (double)g[i] * g[i];
        double mh = mi / (1.0 - pow(b1, t)), vh = vi / (1.0 - pow(b2, t));
        m[i] = (float)mi;
        v[i] = (float)vi;
        p[i] = (float)(p[i] - (double)cfg->lr *
                                  (mh / (sqrt(vh) + cfg->eps) + (double)cfg->weight_decay * p[i]));
    }
}

void kern_sgd(float *restrict p, const float *restrict g, int64_t n, float lr, float wd) {
    for (int64_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
}

/* 8 double lanes over i mod 8, combined in a fixed tree, then the tail: the order depends only
 * on n, so every rank and every run gets the same bits (and either copy: the lanes are the C's). */
static inline __attribute__((always_inline)) double sumsq_body(const float *x, int64_t n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
    double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

static double sumsq_plain(const float *x, int64_t n) {
    return sumsq_body(x, n);
}

static KERN_WIDE(512) double sumsq_wide(const float *x, int64_t n) {
    return sumsq_body(x, n);
}

double kern_sumsq(const float *x, int64_t n) {
    return KERN_PICK(sumsq)(x, n);
}

void kern_scale(float *x, int64_t n, float s) {
    kern_traffic_count(KERN_PASS_COPY, n);
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void kern_add(float *restrict y, const float *restrict x, int64_t n) {
    kern_traffic_count(KERN_PASS_ADD, n);
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}
