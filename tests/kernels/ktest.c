/* Kernel test helpers (see ktest.h). */
#include "ktest.h"

#include "kernels/cpu.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *alloc_or_exit(int64_t n, size_t size) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * size);
    if (!p) {
        printf("FAIL out of memory for %lld elements\n", (long long)n);
        exit(1);
    }
    return p;
}
float *kt_floats(int64_t n) {
    return alloc_or_exit(n, sizeof(float));
}
double *kt_doubles(int64_t n) {
    return alloc_or_exit(n, sizeof(double));
}

static void *bufs_add(kt_bufs *b, int64_t n, size_t size) {
    if (b->n == (int)(sizeof b->p / sizeof b->p[0])) {
        printf("FAIL kt_bufs: more than %d buffers\n", b->n);
        exit(1);
    }
    return b->p[b->n++] = alloc_or_exit(n, size);
}
void kt_bufs_floats(kt_bufs *b, int64_t n, ...) {
    va_list ap;
    va_start(ap, n);
    for (float **x; (x = va_arg(ap, float **));) *x = bufs_add(b, n, sizeof(float));
    va_end(ap);
}
void kt_bufs_doubles(kt_bufs *b, int64_t n, ...) {
    va_list ap;
    va_start(ap, n);
    for (double **x; (x = va_arg(ap, double **));) *x = bufs_add(b, n, sizeof(double));
    va_end(ap);
}
void kt_bufs_free(kt_bufs *b) {
    while (b->n > 0) free(b->p[--b->n]);
}

static uint64_t lcg_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

void kt_fill_d(double *x, int64_t n, uint64_t seed, double lo, double hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (double)lcg_next(&s) * 0x1.0p-53;
}

void kt_fill(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * (double)lcg_next(&s) * 0x1.0p-53);
}

static int report(const char *what, double worst, int64_t at, double a, double b, int64_t n,
                  double k) {
    int bad = !(worst <= k); /* NaN counts as failure */
    printf("%-4s %-48s n=%-7lld worst %.3g·eps·(|a|+|b|+1) (k=%g) at %lld: got %.9g want %.9g\n",
           bad ? "FAIL" : "ok", what, (long long)n, worst, k, (long long)at, a, b);
    if (bad) check_count_failure();
    return bad;
}

/* kt_close and kt_close_d: the truth b[i] is bf[i] (float) or bd[i] (double), whichever is not
 * NULL; either way compared in double. */
static int close_to(const char *what, const float *a, const float *bf, const double *bd, int64_t n,
                    double k) {
    double worst = 0.0, wa = n ? a[0] : 0.0, wb = n ? (bf ? bf[0] : bd[0]) : 0.0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double b = bf ? (double)bf[i] : bd[i];
        double d = fabs((double)a[i] - b) / (FLT_EPSILON * (fabs((double)a[i]) + fabs(b) + 1.0));
        if (!(d <= worst)) { /* also catches NaN */
            worst = d;
            at = i;
            wa = a[i];
            wb = b;
            if (isnan(d)) break;
        }
    }
    return report(what, worst, at, wa, wb, n, k);
}

int kt_close_d(const char *what, const float *a, const double *b, int64_t n, double k) {
    return close_to(what, a, NULL, b, n, k);
}

int kt_close(const char *what, const float *a, const float *b, int64_t n, double k) {
    return close_to(what, a, b, NULL, n, k);
}

int kt_equal(const char *what, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
            printf("FAIL %-48s n=%-7lld not bit-equal at %lld: %.9g vs %.9g\n", what, (long long)n,
                   (long long)i, a[i], b[i]);
            check_count_failure();
            return 1;
        }
    printf("ok   %-48s n=%-7lld bit-equal\n", what, (long long)n);
    return 0;
}

void kt_fd_grad(double *fd, double *x, int64_t n, double h, double (*loss)(const void *ctx),
                const void *ctx) {
    for (int64_t i = 0; i < n; i++) {
        const double s = x[i];
        x[i] = s + h;
        const double lp = loss(ctx);
        x[i] = s - h;
        const double lm = loss(ctx);
        x[i] = s;
        fd[i] = (lp - lm) / (2 * h);
    }
}

kern_bf16_ctx *kt_bf16_ctx(int *status) {
    char msg[256], cpu[64];
    kern_bf16_path path;
    kern_cpu_model(cpu, sizeof cpu);
    if (kern_bf16_path_from_env(&path, msg, sizeof msg)) {
        printf("SKIP %s\n", msg);
        *status = 77;
        return NULL;
    }
    kern_bf16_ctx *ctx = kern_bf16_ctx_create(path, 1, msg, sizeof msg);
    *status = check_expect(ctx != NULL, "bf16 context of path %s on %s%s%s",
                           kern_bf16_path_name(path), cpu, ctx ? "" : ": ", ctx ? "" : msg);
    return ctx;
}
