#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* gemm: OpenBLAS sgemm behind one row-major interface, and its naive double-accumulating twin. */
#include "kernels/gemm.h"

#include "kernels/gemm_nn.h"
#include "kernels/measure_impl.h"

#include <cblas.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The bug handler (kern_set_bug_handler); NULL = print to stderr and abort. Set once, before any
 * kernel runs, by the program's main. The other state of kernels/ is the table of registered
 * fp32 panel copies below. */
static kern_bug_fn bug_handler;

void kern_set_bug_handler(kern_bug_fn fn) {
    bug_handler = fn;
}

/* cblas takes int sizes: a larger extent is a caller bug, and going on would corrupt memory. */
static blasint to_blasint(int64_t n, const char *what) {
    if (n < 0 || n > INT_MAX) {
        char msg[128];
        snprintf(msg, sizeof msg, "kern_gemm: %s = %lld does not fit cblas's int", what,
                 (long long)n);
        if (bug_handler) bug_handler(msg);
        fprintf(stderr, "%s\n", msg);
        abort();
    }
    return (blasint)n;
}

/* ---------------------------------------------------------------- registered panel copies */

typedef struct {
    const float *B, *P; /* the weight [K, N] (row stride ldb) and its panel copy */
    int64_t K, N, ldb;
} f32_panel_entry;

/* The table: written at load (kern_f32_add_panel, from the thread that then computes, before it
 * does), read by every product. The last hit and the count are per thread. */
static f32_panel_entry *f32_pan;
static int f32_npan, f32_cap;
static _Thread_local int f32_last;
static _Thread_local int64_t f32_hits;

/* The copies are read by one BLAS thread only (the kernel is not threaded): with more, none is
 * made, so --threads N spends no memory on copies nothing reads. */
int kern_f32_panels(void) {
    const char *v = getenv(KERN_F32_PANELS_ENV); /* "0": off, for A/B runs */
    return kern_f32_panel_available() && !kern_gemm_nn_available() && !(v && !strcmp(v, "0")) &&
           openblas_get_num_threads() == 1;
}

int kern_f32_add_panel(const float *B, int64_t K, int64_t N, int64_t ldb, const float *P) {
    if (!kern_f32_panels() || K < 1 || N < 1 || ldb < N || !B || !P) return -1;
    int i = 0;
    while (i < f32_npan && f32_pan[i].B != B) i++; /* B packed again: its entry is replaced */
    if (i == f32_cap) {
        const int cap = f32_cap ? 2 * f32_cap : 16;
        f32_panel_entry *e = realloc(f32_pan, (size_t)cap * sizeof *e);
        if (!e) return -1;
        f32_pan = e, f32_cap = cap;
    }
    f32_pan[i] = (f32_panel_entry){B, P, K, N, ldb};
    if (i == f32_npan) f32_npan++;
    return 0;
}

void kern_f32_drop_panels(const float *P, int64_t elems) {
    const uintptr_t lo = (uintptr_t)P, hi = lo + (uintptr_t)elems * sizeof *P;
    int n = 0;
    for (int i = 0; i < f32_npan; i++)
        if ((uintptr_t)f32_pan[i].P < lo || (uintptr_t)f32_pan[i].P >= hi)
            f32_pan[n++] = f32_pan[i];
    f32_npan = n;
    if (!n) free(f32_pan), f32_pan = NULL, f32_cap = 0;
}

int64_t kern_f32_panel_hits(void) {
    return f32_hits;
}

/* The panels of a registered copy holding B[K, N] (row stride ldb), a block of the weight that
 * starts on a panel's first column: their start (a row and a panel inside the copy) and *ps, the
 * panel stride; NULL if none holds it. The search starts at the last hit: a pass's products come
 * in the order the copies were registered. */
static const float *find_f32_panel(const float *B, int64_t K, int64_t N, int64_t ldb, int64_t *ps) {
    for (int t = 0; t < f32_npan; t++) {
        const int i = (f32_last + t) % f32_npan;
        const f32_panel_entry *e = &f32_pan[i];
        const uintptr_t b = (uintptr_t)B, e0 = (uintptr_t)e->B;
        if (ldb != e->ldb || b < e0 || b >= e0 + (uintptr_t)(e->K * e->ldb) * sizeof *B) continue;
        const int64_t off = (int64_t)((b - e0) / sizeof *B), r = off / ldb, c = off % ldb;
        if (c % 16 || r + K > e->K || c + N > e->N) continue;
        f32_last = i;
        *ps = 16 * e->K;
        return e->P + (c / 16) * *ps + r * 16;
    }
    return NULL;
}

void kern_gemm(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K, bool ta,
               bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
    if (M == 0 || N == 0) return;
    /* The forward's x·w against a weight with a registered panel copy (one BLAS thread): AVX2
     * tiles over the copy, rows alone or together giving the same bits (gemm_f32_panel.c). */
    if (f32_npan && !ta && !tb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && K > 0 &&
        openblas_get_num_threads() == 1) {
        int64_t ps;
        const float *P = find_f32_panel(B, K, N, ldb, &ps);
        if (P) {
            kern_f32_panel_gemm(C, A, P, ps, M, N, K, lda, ldc, beta == 1.0f);
            f32_hits++;
            return;
        }
    }
    if (M == 1) { /* one row (decode at batch 1): sgemv streams B once, where sgemm would first
                   * copy it into packed panels (measured 3-4x slower on a 2.9 MB weight) */
        if (beta == 0.0f)
            for (int64_t j = 0; j < N; j++) C[j] = 0.0f; /* C may hold garbage (NaN · 0) */
        cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, to_blasint(tb ? N : K, "N"),
                    to_blasint(tb ? K : N, "K"), alpha, B, to_blasint(ldb, "ldb"), A,
                    to_blasint(ta ? lda : 1, "lda"), beta, C, 1);
        return;
    }
    /* Untransposed, alpha 1 (the forward's x·w): AVX-512 register tiles reading the weight in
     * place, 1.3-2x OpenBLAS's sgemm (Haswell kernels, which pack B on every call) from 2 rows up;
     * not with several BLAS threads, which it does not use. */
    if (!ta && !tb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && kern_gemm_nn_available() &&
        openblas_get_num_threads() == 1) {
        kern_gemm_nn(C, A, B, M, N, K, lda, ldb, ldc, beta == 1.0f);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                to_blasint(M, "M"), to_blasint(N, "N"), to_blasint(K, "K"), alpha, A,
                to_blasint(lda, "lda"), B, to_blasint(ldb, "ldb"), beta, C, to_blasint(ldc, "ldc"));
}

void kern_gemm_ref(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                   bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                   float beta) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (int64_t p = 0; p < K; p++) {
                double a = ta ? A[p * lda + i] : A[i * lda + p];
                double b = tb ? B[j * ldb + p] : B[p * ldb + j];
                acc += a * b;
            }
            double c = (double)alpha * acc;
            if (beta != 0.0f) c += (double)beta * C[i * ldc + j];
            C[i * ldc + j] = (float)c;
        }
}

void kern_matmul(float *restrict y, const float *restrict x, const float *restrict w, int64_t M,
                 int64_t K, int64_t N) {
    kern_gemm(y, x, w, M, N, K, false, false, K, N, N, 1.0f, 0.0f);
}

void kern_matmul_dw(float *restrict dw, const float *restrict x, const float *restrict dy,
                    int64_t M, int64_t K, int64_t N) {
    kern_gemm(dw, x, dy, K, N, M, true, false, K, N, N, 1.0f, 1.0f);
}

void kern_matmul_dx(float *restrict dx, const float *restrict dy, const float *restrict w,
                    int64_t M, int64_t K, int64_t N, bool acc) {
    kern_gemm(dx, dy, w, M, K, N, false, true, N, N, K, 1.0f, acc ? 1.0f : 0.0f);
}

void kern_set_threads(int n) {
    openblas_set_num_threads(n < 1 ? 1 : n);
}

static double now_s(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double kern_time_products(kern_product_fn run, void *operands, int64_t n, double seconds,
                          int thread_clock, int fwd_only) {
    const clockid_t clk = thread_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
    const int kinds = fwd_only ? 1 : 3;
    for (int w = 0; w < kinds; w++) run(operands, w); /* warm-up: threads, page faults, caches */
    int64_t reps = 0;
    double t0 = now_s(clk), t;
    do { /* a training step's three products in equal FLOPs (they differ in speed), or the
          * forward's alone */
        for (int w = 0; w < kinds; w++) run(operands, w);
        reps += kinds;
        t = now_s(clk) - t0;
    } while (t < seconds);
    return 2.0 * (double)n * (double)n * (double)n * (double)reps / t;
}

typedef struct {
    float *a, *b, *c;
    int64_t n;
} fp32_operands;

static void fp32_product(void *operands, int which) {
    const fp32_operands *o = operands;
    if (which == 0)
        kern_matmul(o->c, o->a, o->b, o->n, o->n, o->n);
    else if (which == 1)
        kern_matmul_dx(o->c, o->a, o->b, o->n, o->n, o->n, false);
    else
        kern_matmul_dw(o->c, o->a, o->b, o->n, o->n, o->n);
}

/* The forward's weight b[n, n] with a registered panel copy (where kern_f32_panels: inference
 * keeps its weights so), or NULL. */
static float *measured_panels(const float *b, int64_t n) {
    float *P = kern_f32_panels() ? malloc((size_t)kern_f32_panel_elems(n, n) * sizeof *P) : NULL;
    if (P) kern_f32_panel_pack(P, b, n, n, n);
    if (P && kern_f32_add_panel(b, n, n, n, P) < 0) free(P), P = NULL;
    return P;
}

/* The one kernel that allocates (3 n×n matrices and, for the forward, the weight's panel copy,
 * freed before returning): it is a start-up measurement, not part of a step. Returns 0 if the
 * allocation fails or n < 1. */
static double measure_flops(int64_t n, double seconds, int thread_clock, int fwd_only) {
    if (n < 1) return 0.0;
    fp32_operands o = {malloc((size_t)(n * n) * sizeof(float)),
                       malloc((size_t)(n * n) * sizeof(float)),
                       malloc((size_t)(n * n) * sizeof(float)), n};
    double flops = 0.0;
    if (o.a && o.b && o.c) {
        for (int64_t i = 0; i < n * n; i++) {
            o.a[i] = (float)((i * 7 % 13) - 6) / 13.0f;
            o.b[i] = (float)((i * 5 % 11) - 5) / 11.0f;
        }
        float *P = fwd_only ? measured_panels(o.b, n) : NULL;
        flops = kern_time_products(fp32_product, &o, n, seconds, thread_clock, fwd_only);
        if (P) kern_f32_drop_panels(P, kern_f32_panel_elems(n, n));
        free(P);
    }
    free(o.a);
    free(o.b);
    free(o.c);
    return flops;
}

double kern_measure_flops(int64_t n, double seconds) {
    return measure_flops(n, seconds, 0, 0);
}

double kern_measure_flops_fwd(int64_t n, double seconds) {
    return measure_flops(n, seconds, 0, 1);
}

double kern_measure_core_flops(int64_t n, double seconds) {
    return measure_flops(n, seconds, openblas_get_num_threads() == 1, 0);
}
