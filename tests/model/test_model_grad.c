/* The whole model against independent truth: the fp32 loss equals a double-precision reference
 * written from the conventions alone, and every parameter tensor's gradient matches central
 * finite differences of that reference's training objective, computed in double. Three tiny
 * configs, all with GQA (N=4, K=2):
 *  - dense;
 *  - every block a mixture of 4 experts, top-2, one shared expert, dropless, with the balance
 *    and z-losses on (the router's gradient from all three terms);
 *  - 3 blocks of which block 1 is MoE (--moe-every 2), 3 experts of their own width, top-2, a
 *    capacity factor of 0.8 that drops slots (checked: the dropped count equals the
 *    reference's, and is not 0). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/rng.h"
#include "refmodel.h"
#include "train/model/hooks.h"
#include "train/model/model.h"

/* The fp32 model's training objective of its last forward: the loss and the MoE losses. */
static double objective32(const model *m, double loss) {
    const model_shape *s = model_shape_of(m);
    model_moe_stats st;
    model_moe_stats_get(m, &st);
    const double Lm = (double)st.layers;
    return loss + s->moe.aux_coef * st.aux * Lm + s->moe.z_coef * st.z * Lm;
}

static int run_case(const char *name, model_shape s) {
    const int64_t B = 2;
    printf("== %s\n", name);
    model *m = model_create(&s, B, 1234, &model_hooks_single);
    if (!m) return 1;
    /* perturb the norm gains away from 1 so their gradients are exercised generically */
    for (int id = 0; id < model_param_ids(&s); id++) {
        param_info pi = model_param_info(&s, (param_id)id);
        if (pi.init_std != 0.0f) continue;
        int64_t n;
        float *w = model_param(m, (param_id)id, &n);
        for (int64_t i = 0; i < n; i++)
            w[i] += 0.3f * (float)kern_rng_normal(9, (uint64_t)id, (uint64_t)i);
    }
    /* larger weights than the init so that attention is not uniform and the router decides */
    int64_t np;
    float *w = model_params_flat(m, &np);
    for (int64_t i = 0; i < np; i++) w[i] *= 4.0f;
    int32_t tokens[2 * 8];
    for (int i = 0; i < 16; i++)
        tokens[i] = (int32_t)(kern_rng_u64(5, 0, (uint64_t)i) % (uint64_t)s.V);

    model_zero_grads(m);
    model_moe_stats_reset(m);
    const double loss32 = model_fwd_bwd(m, tokens, 1.0f), obj32 = objective32(m, loss32);
    const float *g = model_grads_flat(m, NULL);
    double *theta = malloc((size_t)np * sizeof(double));
    for (int64_t i = 0; i < np; i++) theta[i] = w[i];
    ref_moe rm;
    const double loss64 = ref_loss(&s, theta, tokens, B, &rm),
                 obj64 = ref_objective(&s, theta, tokens, B);
    int fail = 0;
    const double dl = fabs(loss32 - loss64) / fabs(loss64), dob = fabs(obj32 - obj64) / fabs(obj64);
    printf("loss fp32 %.9f  ref fp64 %.9f  rel diff %.2e (tol 2e-6)\n", loss32, loss64, dl);
    printf("objective fp32 %.9f  ref fp64 %.9f  rel diff %.2e (tol 2e-6)\n", obj32, obj64, dob);
    if (!(dl <= 2e-6) || !(dob <= 2e-6)) fail = 1;
    if (s.moe.E > 0) {
        model_moe_stats st;
        model_moe_stats_get(m, &st);
        int64_t kept = 0;
        for (int64_t i = 0; i < st.layers * st.E; i++) kept += st.kept[i];
        printf("MoE: aux %.6f (ref %.6f per block) z %.6f | dropped %lld (ref %lld) | kept %lld + "
               "dropped = %lld = slots %lld\n",
               st.aux, rm.aux / (double)st.layers, st.z, (long long)st.dropped,
               (long long)rm.dropped, (long long)kept, (long long)(kept + st.dropped),
               (long long)st.slots);
        if (st.dropped != rm.dropped || kept + st.dropped != st.slots ||
            st.slots != B * s.T * s.moe.k * st.layers)
            fail = 1;
        if (s.moe.capacity > 0 && st.dropped == 0) {
            printf("FAIL: the capacity factor dropped nothing (the case tests nothing)\n");
            fail = 1;
        }
    }

    /* k = 2e-5 relative to the tensor's gradient scale: fp32 backward through 2-3 layers */
    int64_t off = 0;
    for (int id = 0; id < model_param_ids(&s); id++) {
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
            double lp = ref_objective(&s, theta, tokens, B);
            theta[off + i] = keep - h;
            double lm = ref_objective(&s, theta, tokens, B);
            theta[off + i] = keep;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - g[off + i]) / (gscale + 1e-12);
            if (err > worst) worst = err;
        }
        if (n > 0)
            printf("%-12s grad scale %.3e  worst |fd - g| / scale %.2e\n", pi.name, gscale, worst);
        if (n > 0 && (!(worst <= 2e-5) || gscale == 0)) fail = 1;
        off += n;
    }
    free(theta);
    model_destroy(m);
    printf("%s: %s\n", name, fail ? "FAIL" : "PASS");
    return fail;
}

int main(void) {
    const model_shape dense = {.L = 2, .D = 16, .N = 4, .K = 2, .H = 4, .F = 24, .V = 29, .T = 7};
    model_shape moe = dense, mixed = dense;
    moe.moe = (moe_shape){
        .E = 4, .k = 2, .shared = 1, .every = 1, .F = 24, .aux_coef = 0.1, .z_coef = 0.01};
    mixed.L = 3;
    mixed.moe = (moe_shape){
        .E = 3, .k = 2, .every = 2, .F = 12, .capacity = 0.8, .aux_coef = 0.05, .z_coef = 0.02};
    int fail = run_case("dense", dense);
    fail |= run_case("MoE: every block, E 4, top-2, 1 shared expert, dropless", moe);
    fail |= run_case("MoE: block 1 of 3, E 3, top-2, F_e 12, capacity factor 0.8", mixed);
    printf(fail ? "FAIL\n" : "PASS\n");
    return fail;
}
