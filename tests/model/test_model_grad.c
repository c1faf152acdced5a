/* The whole model against independent truth: the fp32 loss equals a double-precision reference
 * written from the conventions alone, and every parameter tensor's gradient matches central
 * finite differences of that reference, computed in double. Tiny config with GQA (N=4, K=2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/rng.h"
#include "refmodel.h"
#include "train/model/hooks.h"
#include "train/model/model.h"

int main(void) {
    model_shape s = {.L = 2, .D = 16, .N = 4, .K = 2, .H = 4, .F = 24, .V = 29, .T = 7};
    const int64_t B = 2;
    model *m = model_create(&s, B, 1234, &model_hooks_single);
    if (!m) return 1;
    /* perturb the norm gains away from 1 so their gradients are exercised generically */
    for (int id = 0; id < P_COUNT; id++) {
        param_info pi = model_param_info(&s, (param_id)id);
        if (pi.init_std != 0.0f) continue;
        int64_t n;
        float *w = model_param(m, (param_id)id, &n);
        for (int64_t i = 0; i < n; i++)
            w[i] += 0.3f * (float)kern_rng_normal(9, (uint64_t)id, (uint64_t)i);
    }
    /* larger weights than the init so that attention is not uniform */
    int64_t np;
    float *w = model_params_flat(m, &np);
    for (int64_t i = 0; i < np; i++) w[i] *= 4.0f;
    int32_t tokens[2 * 8];
    for (int i = 0; i < 16; i++)
        tokens[i] = (int32_t)(kern_rng_u64(5, 0, (uint64_t)i) % (uint64_t)s.V);

    model_zero_grads(m);
    double loss32 = model_fwd_bwd(m, tokens, 1.0f);
    const float *g = model_grads_flat(m, NULL);
    double *theta = malloc((size_t)np * sizeof(double));
    for (int64_t i = 0; i < np; i++) theta[i] = w[i];
    double loss64 = ref_loss(&s, theta, tokens, B);
    int fail = 0;
    double dl = fabs(loss32 - loss64) / fabs(loss64);
    printf("loss fp32 %.9f  ref fp64 %.9f  rel diff %.2e (tol 2e-6)\n", loss32, loss64, dl);
    if (!(dl <= 2e-6)) fail = 1;

    /* k = 2e-5 relative to the tensor's gradient scale: fp32 backward through 2 layers */
    int64_t off = 0;
    for (int id = 0; id < P_COUNT; id++) {
        param_info pi = model_param_info(&s, (param_id)id);
        int64_t n = model_param_numel(&s, (param_id)id);
        double gscale = 0, worst = 0;
        for (int64_t i = 0; i < n; i++) gscale = fmax(gscale, fabs(g[off + i]));
        int64_t checks = n < 40 ? n : 40;
        for (int64_t c = 0; c < checks; c++) {
            int64_t i =
                n < 40 ? c : (int64_t)(kern_rng_u64(77, (uint64_t)id, (uint64_t)c) % (uint64_t)n);
            double keep = theta[off + i], h = 1e-5;
            theta[off + i] = keep + h;
            double lp = ref_loss(&s, theta, tokens, B);
            theta[off + i] = keep - h;
            double lm = ref_loss(&s, theta, tokens, B);
            theta[off + i] = keep;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - g[off + i]) / (gscale + 1e-12);
            if (err > worst) worst = err;
        }
        printf("%-10s grad scale %.3e  worst |fd - g| / scale %.2e\n", pi.name, gscale, worst);
        if (!(worst <= 2e-5) || gscale == 0) fail = 1;
        off += n;
    }
    free(theta);
    model_destroy(m);
    printf(fail ? "FAIL\n" : "PASS\n");
    return fail;
}
