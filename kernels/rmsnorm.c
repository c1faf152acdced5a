/* RMSNorm forward/backward: one pass for the row statistic, one fused elementwise pass. */
#include "kernels/rmsnorm.h"

#include <math.h>

#include "kernels/vecmath.h"

void kern_rmsnorm_fwd(float *restrict y, float *restrict rstd, const float *restrict x,
                      const float *restrict g, int64_t M, int64_t D) {
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * D;
        float *yr = y + r * D;
        float s = 1.0f / sqrtf(kern_dot_inl(xr, xr, D) / (float)D + KERN_RMSNORM_EPS);
        rstd[r] = s;
        for (int64_t i = 0; i < D; i++) yr[i] = xr[i] * s * g[i];
    }
}

/* With s = rstd: dx_i = s·g_i·dy_i − x_i·s³/D·Σ_j dy_j g_j x_j;  dg_i = Σ_rows dy_i x_i s. */
void kern_rmsnorm_bwd(float *restrict dx, float *restrict dg, const float *restrict dy,
                      const float *restrict x, const float *restrict g, const float *restrict rstd,
                      int64_t M, int64_t D) {
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * D, *dyr = dy + r * D;
        float *dxr = dx + r * D;
        float s = rstd[r];
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= D; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += dyr[i + l] * g[i + l] * xr[i + l];
        float dot =
            ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; i < D; i++) dot += dyr[i] * g[i] * xr[i];
        float c = s * s * s * dot / (float)D;
        for (i = 0; i < D; i++) {
            dxr[i] += s * g[i] * dyr[i] - c * xr[i];
            dg[i] += dyr[i] * xr[i] * s;
        }
    }
}

void kern_rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *g, int64_t M,
                          int64_t D) {
    for (int64_t r = 0; r < M; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < D; i++) ss += (double)x[r * D + i] * x[r * D + i];
        double s = 1.0 / sqrt(ss / (double)D + (double)KERN_RMSNORM_EPS);
        rstd[r] = (float)s;
        for (int64_t i = 0; i < D; i++) y[r * D + i] = (float)(x[r * D + i] * s * g[i]);
    }
}

void kern_rmsnorm_bwd_ref(float *dx, float *dg, const float *dy, const float *x, const float *g,
                          const float *rstd, int64_t M, int64_t D) {
    for (int64_t r = 0; r < M; r++) {
        double s = rstd[r], dot = 0.0;
        for (int64_t i = 0; i < D; i++) dot += (double)dy[r * D + i] * g[i] * x[r * D + i];
        for (int64_t i = 0; i < D; i++) {
            dx[r * D + i] +=
                (float)(s * g[i] * dy[r * D + i] - s * s * s * dot / (double)D * x[r * D + i]);
            dg[i] += (float)((double)dy[r * D + i] * x[r * D + i] * s);
        }
    }
}
