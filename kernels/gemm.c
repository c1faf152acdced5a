#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* gemm: OpenBLAS sgemm behind one row-major interface, and its naive double-accumulating twin. */
#include "kernels/gemm.h"

#include "kernels/gemm_nn.h"
#include "kernels/measure_impl.h"
#include "kernels/panel_table.h"
#include "kernels/sgemm_lib.h"

#include <cblas.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The bug handler (kern_set_bug_handler); NULL = print to stderr and abort. Set once, before any
 * kernel runs, by the program's main. (The fp32 panel copies' table hangs on the caller's
 * kern_f32_ctx.) */
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

/* The table: written at load (kern_f32_ctx_add_panel), read by every product on the context. */
struct kern_f32_ctx {
    panel_table pan;
    int64_t hits;
};

/* The copies are read by one BLAS thread only (the kernel is not threaded): with more, the
 * caller makes none, so --threads N spends no memory on copies nothing reads. On AVX-512 too:
 * on an Intel Emerald Rapids core (bench/gemm_bench, a 1 GB fp32 weight) the copies read 14.8
 * GB/s at one row against sgemv's 11.0, and at 8 and 32 rows run 2.5x and 3.3x gemm_nn (which
 * reads a huge weight in 128-byte pieces); on prefill's shapes they run 77-85 GFLOP/s, 1.3-1.5x
 * gemm_nn at K >= 1408, 0.65-0.75x at K = 512. */
int kern_f32_panels(void) {
    return kern_f32_panel_available() && openblas_get_num_threads() == 1;
}

kern_f32_ctx *kern_f32_ctx_create(void) {
    return calloc(1, sizeof(kern_f32_ctx));
}

void kern_f32_ctx_destroy(kern_f32_ctx *ctx) {
    if (ctx) free(ctx->pan.e);
    free(ctx);
}

int kern_f32_ctx_add_panel(kern_f32_ctx *ctx, const float *B, int64_t K, int64_t N, int64_t ldb,
                           const float *P) {
    if (!ctx || !kern_f32_panels() || K < 1 || N < 1 || ldb < N || !B || !P)
        return KERN_F32_CANNOT;
    return panel_table_add(&ctx->pan, (panel_entry){B, P, K, N, ldb}) ? KERN_F32_NO_MEMORY : 0;
}

void kern_f32_ctx_drop_panels(kern_f32_ctx *ctx, const float *P, int64_t elems) {
    const uintptr_t lo = (uintptr_t)P, hi = lo + (uintptr_t)elems * sizeof *P;
    panel_table *t = &ctx->pan;
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if ((uintptr_t)t->e[i].P < lo || (uintptr_t)t->e[i].P >= hi) t->e[n++] = t->e[i];
    t->n = n;
    t->last = 0;
}

int64_t kern_f32_ctx_panel_hits(const kern_f32_ctx *ctx) {
    return ctx ? ctx->hits : 0;
}

void kern_gemm_ctx(kern_f32_ctx *ctx, float *C, const float *A, const float *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   float alpha, float beta) {
    /* The forward's x·w against a weight with a registered panel copy (one BLAS thread): AVX2
     * tiles over the copy, rows alone or together giving the same bits (gemm_f32_panel.c). */
    if (ctx && ctx->pan.n && M > 0 && N > 0 && !ta && !tb && alpha == 1.0f &&
        (beta == 0.0f || beta == 1.0f) && K > 0 && openblas_get_num_threads() == 1) {
        int64_t ps;
        const float *P = panel_table_find(&ctx->pan, B, sizeof *B, K, N, ldb, 1, &ps);
        if (P) {
            kern_f32_panel_gemm(C, A, P, ps, M, N, K, lda, ldc, beta == 1.0f);
            ctx->hits++;
            return;
        }
    }
    kern_gemm(C, A, B, M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
}

void kern_matmul_ctx(kern_f32_ctx *ctx, float *restrict y, const float *restrict x,
                     const float *restrict w, int64_t M, int64_t K, int64_t N) {
    kern_gemm_ctx(ctx, y, x, w, M, N, K, false, false, K, N, N, 1.0f, 0.0f);
}

void kern_gemm(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K, bool ta,
               bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
    if (M == 0 || N == 0) return;
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
     * not with several BLAS threads, which it does not use, nor where the library is oneDNN's
     * sgemm, which runs these products faster still (an Intel Emerald Rapids core, gemm_bench on
     * config (b)'s forward shapes: gemm_nn 65-115 GFLOP/s, oneDNN 140-155). */
    const kern_sgemm_lib lib = kern_sgemm_lib_get();
    if (!ta && !tb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && kern_gemm_nn_available() &&
        openblas_get_num_threads() == 1 && lib != KERN_SGEMM_ONEDNN) {
        kern_gemm_nn(C, A, B, M, N, K, lda, ldb, ldc, beta == 1.0f);
        return;
    }
    /* Where OpenBLAS does not know this CPU (sgemm_lib.h): oneDNN's AVX-512 sgemm. */
    if (lib == KERN_SGEMM_ONEDNN &&
        kern_sgemm_onednn(C, A, B, M, N, K, ta, tb, lda, ldb, ldc, alpha, beta) == 0)
        return;
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

typedef struct {
    fp32_operands o;
    kern_f32_ctx *ctx; /* the forward's weight's panel copy, or NULL */
} fwd_operands;

static void fwd_product(void *operands, int which) {
    const fwd_operands *f = operands;
    (void)which;
    kern_matmul_ctx(f->ctx, f->o.c, f->o.a, f->o.b, f->o.n, f->o.n, f->o.n);
}

/* The forward's weight b[n, n] with a panel copy registered on a context of its own in *ctx, as
 * inference keeps its weights where the model makes copies; NULL (and *ctx NULL) if none. */
static float *measured_panels(const float *b, int64_t n, kern_f32_ctx **ctx) {
    float *P = malloc((size_t)kern_f32_panel_elems(n, n) * sizeof *P);
    *ctx = P ? kern_f32_ctx_create() : NULL;
    if (P) kern_f32_panel_pack(P, b, n, n, n);
    if (P && (!*ctx || kern_f32_ctx_add_panel(*ctx, b, n, n, n, P) < 0)) {
        kern_f32_ctx_destroy(*ctx), *ctx = NULL;
        free(P), P = NULL;
    }
    return P;
}

/* The one kernel that allocates (3 n×n matrices and, for the forward on panels, the weight's
 * panel copy and its context, freed before returning): it is a start-up measurement, not part of
 * a step. Returns 0 if the allocation fails or n < 1. */
static double measure_flops(int64_t n, double seconds, int thread_clock, int fwd_only,
                            int panels) {
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
        fwd_operands f = {o, NULL};
        float *P = fwd_only && panels && kern_f32_panels() ? measured_panels(o.b, n, &f.ctx) : NULL;
        flops = fwd_only ? kern_time_products(fwd_product, &f, n, seconds, thread_clock, 1)
                         : kern_time_products(fp32_product, &o, n, seconds, thread_clock, 0);
        kern_f32_ctx_destroy(f.ctx);
        free(P);
    }
    free(o.a);
    free(o.b);
    free(o.c);
    return flops;
}

double kern_measure_flops(int64_t n, double seconds) {
    return measure_flops(n, seconds, 0, 0, 0);
}

double kern_measure_flops_fwd(int64_t n, double seconds, int panels) {
    return measure_flops(n, seconds, 0, 1, panels);
}

double kern_measure_core_flops(int64_t n, double seconds) {
    return measure_flops(n, seconds, openblas_get_num_threads() == 1, 0, 0);
}
