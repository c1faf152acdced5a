/* Optimizer updates on flat local slices, and the vector helpers a training step needs. */
#ifndef MT_KERNELS_OPTIM_H
#define MT_KERNELS_OPTIM_H
#include <stdint.h>

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step; /* 1-based step, for bias correction */
} kern_adamw_cfg;

/* AdamW with decoupled weight decay, in place on p, m, v:
 *   m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²;  m̂ = m/(1−β1^t);  v̂ = v/(1−β2^t)
 *   p −= lr · (m̂ / (sqrt(v̂) + eps) + wd · p). */
void kern_adamw(float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
                int64_t n, const kern_adamw_cfg *cfg);
void kern_adamw_ref(float *p, float *m, float *v, const float *g, int64_t n,
                    const kern_adamw_cfg *cfg);
/* Plain SGD with decoupled decay: p −= lr · (g + wd · p). */
void kern_sgd(float *restrict p, const float *restrict g, int64_t n, float lr, float wd);
/* Σ x² in double (fixed left-to-right blocked order, deterministic). */
double kern_sumsq(const float *x, int64_t n);
/* x *= s; counted as a copy pass of n floats (traffic.h). */
void kern_scale(float *x, int64_t n, float s);
/* y += x; counted as an add pass of n floats (traffic.h). */
void kern_add(float *restrict y, const float *restrict x, int64_t n);
#endif
