/* AdamW vs its double-precision twin over several steps (p, m, v), SGD vs a double formula,
 * sumsq vs a double sum and its determinism (same bits on repeat and for a copy at a different
 * address/alignment), scale and add; AdamW's and sumsq's AVX-512 copies (taken where the
 * CPU has them) vs their plain copies, bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/optim.h"
#include "ktest.h"

static void adamw(int64_t n) {
    float *p = kt_floats(n), *m = kt_floats(n);
    float *v = kt_floats(n), *g = kt_floats(n);
    float *pr = kt_floats(n), *mr = kt_floats(n);
    float *vr = kt_floats(n);
    char what[96];
    kt_fill(p, n, 1, -1, 1);
    for (int64_t i = 0; i < n; i++) pr[i] = p[i], m[i] = mr[i] = 0.0f, v[i] = vr[i] = 0.0f;
    kern_adamw_cfg cfg = {
        .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int64_t t = 1; t <= 5; t++) {
        kt_fill(g, n, 10 + (uint64_t)t, -1, 1);
        if (n > 1) g[1] = 0.0f; /* an element whose update is pure decay at step 1 */
        cfg.step = t;
        kern_adamw(p, m, v, g, n, &cfg);
        /* the twin starts each step from the kernel's state so errors do not compound */
        kern_adamw_ref(pr, mr, vr, g, n, &cfg);
        snprintf(what, sizeof what, "adamw step %lld p vs ref n=%lld", (long long)t, (long long)n);
        kt_close(what, p, pr, n, 4); /* |Δp| ≤ lr·(~1 + wd): float error is ~ulp of p, k = 4 */
        snprintf(what, sizeof what, "adamw step %lld m vs ref n=%lld", (long long)t, (long long)n);
        kt_close(what, m, mr, n, 4);
        snprintf(what, sizeof what, "adamw step %lld v vs ref n=%lld", (long long)t, (long long)n);
        kt_close(what, v, vr, n, 4);
        memcpy(pr, p, sizeof(float) * (size_t)n);
        memcpy(mr, m, sizeof(float) * (size_t)n);
        memcpy(vr, v, sizeof(float) * (size_t)n);
    }
    free(p), free(m), free(v), free(g), free(pr), free(mr), free(vr);
}

static void others(int64_t n) {
    float *x = kt_floats(n), *y = kt_floats(n);
    float *buf = kt_floats(n + 3), *want = kt_floats(n);
    char what[96];
    kt_fill(x, n, 1, -2, 2);
    kt_fill(y, n, 2, -2, 2);
    double s = kern_sumsq(x, n), truth = 0.0;
    for (int64_t i = 0; i < n; i++) truth += (double)x[i] * x[i];
    check_expect(fabs(s - truth) <= 1e-14 * (fabs(truth) + 1),
                 "sumsq n=%lld = %.17g, double sum %.17g", (long long)n, s, truth);
    memcpy(buf + 3, x, sizeof(float) * (size_t)n);
    double s2 = kern_sumsq(x, n), s3 = kern_sumsq(buf + 3, n);
    check_expect(memcmp(&s, &s2, sizeof s) == 0 && memcmp(&s, &s3, sizeof s) == 0,
                 "sumsq n=%lld deterministic: %a %a %a (repeat, copy at offset 3)", (long long)n, s,
                 s2, s3);

    for (int64_t i = 0; i < n; i++)
        want[i] = (float)((double)x[i] - 0.05 * ((double)y[i] + 0.1 * (double)x[i]));
    memcpy(buf, x, sizeof(float) * (size_t)n);
    kern_sgd(buf, y, n, 0.05f, 0.1f);
    snprintf(what, sizeof what, "sgd vs double formula n=%lld", (long long)n);
    kt_close(what, buf, want, n, 4);

    memcpy(buf, x, sizeof(float) * (size_t)n);
    kern_scale(buf, n, 0.5f); /* exact: a power of two */
    for (int64_t i = 0; i < n; i++) want[i] = x[i] * 0.5f;
    snprintf(what, sizeof what, "scale by 0.5 n=%lld", (long long)n);
    kt_equal(what, buf, want, n);
    memcpy(buf, x, sizeof(float) * (size_t)n);
    kern_add(buf, y, n);
    for (int64_t i = 0; i < n; i++) want[i] = (float)((double)x[i] + (double)y[i]);
    snprintf(what, sizeof what, "add n=%lld", (long long)n);
    kt_equal(what, buf, want, n); /* one correctly rounded addition */
    free(x), free(y), free(buf), free(want);
}

/* The plain copy and the one the CPU picks, on the same inputs: the same bits (AdamW's p, m, v
 * over 3 steps, sumsq of the result). */
static void copies(int64_t n) {
    kt_bufs bufs = {0};
    float *g, *p[2], *m[2], *v[2];
    kt_bufs_floats(&bufs, n, &g, &p[0], &p[1], &m[0], &m[1], &v[0], &v[1], NULL);
    kern_adamw_cfg cfg = {
        .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    double ss[2];
    for (int c = 0; c < 2; c++) {
        kern_cpu_vec_plain(c == 0);
        kt_fill(p[c], n, 31, -1, 1);
        memset(m[c], 0, sizeof(float) * (size_t)n);
        memset(v[c], 0, sizeof(float) * (size_t)n);
        for (int64_t t = 1; t <= 3; t++) {
            kt_fill(g, n, 40 + (uint64_t)t, -1, 1);
            cfg.step = t;
            kern_adamw(p[c], m[c], v[c], g, n, &cfg);
        }
        ss[c] = kern_sumsq(p[c], n);
    }
    kern_cpu_vec_plain(0);
    const char *tag = kern_cpu_vec_wide() ? "AVX-512" : "plain";
    char what[96];
    snprintf(what, sizeof what, "adamw p: plain = %s copy n=%lld", tag, (long long)n);
    kt_equal(what, p[1], p[0], n);
    snprintf(what, sizeof what, "adamw v: plain = %s copy n=%lld", tag, (long long)n);
    kt_equal(what, v[1], v[0], n);
    snprintf(what, sizeof what, "adamw m: plain = %s copy n=%lld", tag, (long long)n);
    kt_equal(what, m[1], m[0], n);
    check_expect(memcmp(&ss[0], &ss[1], sizeof ss[0]) == 0, "sumsq n=%lld: plain %a = %s copy %a",
                 (long long)n, ss[0], tag, ss[1]);
    kt_bufs_free(&bufs);
}

int main(void) {
    const int64_t ns[] = {1, 7, 13, 1021};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) adamw(ns[i]), others(ns[i]);
    const int64_t wide[] = {1, 7, 13, 31, 1021, 100003};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) copies(wide[i]);
    return check_finish("test_kern_optim");
}
