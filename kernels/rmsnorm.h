/* RMSNorm over the last dimension: y = x / sqrt(mean(x²) + 1e-5) · g. Local rows, full D. */
#ifndef MT_KERNELS_RMSNORM_H
#define MT_KERNELS_RMSNORM_H
#include <stdint.h>

#define KERN_RMSNORM_EPS 1e-5f

/* y[M,D] = rmsnorm(x[M,D]) · g[D]; rstd[M] = 1/sqrt(mean(x²)+eps) saved for backward.
 * Overwrites y and rstd. y may not alias x. */
void kern_rmsnorm_fwd(float *restrict y, float *restrict rstd, const float *restrict x,
                      const float *restrict g, int64_t M, int64_t D);
/* dx[M,D] += dL/dx and dg[D] += dL/dg given dy[M,D], x, g, rstd. Accumulates both. */
void kern_rmsnorm_bwd(float *restrict dx, float *restrict dg, const float *restrict dy,
                      const float *restrict x, const float *restrict g, const float *restrict rstd,
                      int64_t M, int64_t D);
void kern_rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *g, int64_t M,
                          int64_t D);
void kern_rmsnorm_bwd_ref(float *dx, float *dg, const float *dy, const float *x, const float *g,
                          const float *rstd, int64_t M, int64_t D);
#endif
