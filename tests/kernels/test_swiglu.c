/* kern_expf: relative error vs double exp on a dense sweep of [-87, 88] and its edge cases;
 * SwiGLU fwd/bwd vs the naive twins (libm exp, double), bwd vs finite differences in double, and
 * bit for bit vs the kernels' formulas evaluated here one element at a time (the kernels take an
 * AVX-512 copy of their loops where the CPU has it: it must give the plain loop's bits). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/swiglu.h"
#include "kernels/vecmath.h"
#include "ktest.h"

static void expf_checks(void) {
    double worst = 0.0, at = 0.0;
    for (int64_t i = 0; i <= 2000000; i++) {
        float x = (float)(-87.0 + 175.0 * (double)i / 2000000.0);
        double e = exp((double)x), rel = fabs((double)kern_expf(x) - e) / e;
        if (rel > worst) worst = rel, at = x;
    }
    /* Cephes expf is ~1 ulp; 2e-7 (~1.7·FLT_EPSILON) is the brief's bound */
    check_expect(worst <= 2e-7,
                 "kern_expf max rel err %.3g (%.2f eps) at x=%.9g over 2e6 points of [-87,88]",
                 worst, worst / FLT_EPSILON, at);
    check_expect(kern_expf(0.0f) == 1.0f, "kern_expf(0) = %.9g", kern_expf(0.0f));
    check_expect(kern_expf(-100.0f) == 0.0f && kern_expf(-INFINITY) == 0.0f,
                 "kern_expf(-100) = %g, (-inf) = %g (flush to 0)", kern_expf(-100.0f),
                 kern_expf(-INFINITY));
    float e88 = kern_expf(88.0f);
    check_expect(isfinite(e88) && kern_expf(100.0f) == e88 && kern_expf(INFINITY) == e88,
                 "kern_expf saturates at exp(88) = %g above 88", e88);
    check_expect(isnan(kern_expf(NAN)), "kern_expf(NaN) is NaN");
}

/* The elements of x[n] whose bits differ from y[n]'s (printing the first). */
static int64_t bits_differ(const char *what, const float *x, const float *y, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof x[i]) && !bad++)
            printf("  %s: element %lld is %.9g, the formula gives %.9g\n", what, (long long)i, x[i],
                   y[i]);
    return bad;
}

/* The kernels against their formulas, one element at a time (volatile: no vector copy here). */
static void bits_checks(const float *a, const float *b, const float *dh, const float *h,
                        const float *da, const float *db, int64_t n) {
    float *w = malloc((size_t)(3 * n) * sizeof *w);
    check_expect(w != NULL, "swiglu bits: out of memory");
    if (!w) return;
    for (volatile int64_t i = 0; i < n; i++) {
        const float s = kern_sigmoid_inl(a[i]);
        w[i] = a[i] * s * b[i];
        w[n + i] = dh[i] * a[i] * s;
        w[2 * n + i] = dh[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
    }
    const int64_t bad = bits_differ("fwd h", h, w, n) + bits_differ("bwd db", db, w + n, n) +
                        bits_differ("bwd da", da, w + 2 * n, n);
    check_expect(bad == 0,
                 "swiglu n=%lld (AVX-512 copy %s): %lld values differ in their bits "
                 "from the formulas'",
                 (long long)n, kern_cpu_has(KERN_CPU_AVX512) ? "taken" : "absent", (long long)bad);
    free(w);
}

static void run(int64_t n) {
    kt_bufs bufs = {0};
    float *a, *b, *dh, *h, *hr, *da, *db, *dar, *dbr;
    double *fa, *fb;
    kt_bufs_floats(&bufs, n, &a, &b, &dh, &h, &hr, &da, &db, &dar, &dbr, NULL);
    kt_bufs_doubles(&bufs, n, &fa, &fb, NULL);
    char what[96];
    kt_fill(a, n, 1, -12, 12);
    kt_fill(b, n, 2, -2, 2);
    kt_fill(dh, n, 3, -1, 1);
    kern_swiglu_fwd(h, a, b, n);
    kern_swiglu_fwd_ref(hr, a, b, n);
    snprintf(what, sizeof what, "swiglu fwd vs ref n=%lld", (long long)n);
    kt_close(what, h, hr, n, 8); /* exp (~1 ulp), a division, two products: k = 8 */
    kern_swiglu_bwd(da, db, dh, a, b, n);
    kern_swiglu_bwd_ref(dar, dbr, dh, a, b, n);
    snprintf(what, sizeof what, "swiglu bwd da vs ref n=%lld", (long long)n);
    kt_close(what, da, dar, n, 16);
    snprintf(what, sizeof what, "swiglu bwd db vs ref n=%lld", (long long)n);
    kt_close(what, db, dbr, n, 16);
    bits_checks(a, b, dh, h, da, db, n);
    /* elementwise, so FD of L = Σ dh·silu(a)·b perturbs one element at a time */
    const double e = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
#define H_D(x_, y_) ((x_) / (1.0 + exp(-(x_))) * (y_))
        fa[i] = dh[i] * (H_D(x + e, y) - H_D(x - e, y)) / (2 * e);
        fb[i] = dh[i] * (H_D(x, y + e) - H_D(x, y - e)) / (2 * e);
#undef H_D
    }
    snprintf(what, sizeof what, "swiglu bwd da vs FD(double) n=%lld", (long long)n);
    kt_close_d(what, da, fa, n, 16);
    snprintf(what, sizeof what, "swiglu bwd db vs FD(double) n=%lld", (long long)n);
    kt_close_d(what, db, fb, n, 16);
    kt_bufs_free(&bufs);
}

int main(void) {
    expf_checks();
    run(1);
    run(7);
    run(13);
    run(1031);
    run(100003);
    return check_finish("test_kern_swiglu");
}
