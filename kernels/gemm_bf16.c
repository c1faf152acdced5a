/* gemm_bf16: the paths (which this CPU can run, the forced one), the context, the dispatch of a
 * product to its path, the naive twin, the model's three products and the measured rate (see
 * gemm_bf16.h). */
#include "kernels/gemm_bf16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16_inl.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16_impl.h"
#include "kernels/gemm_bf16_x86.h"
#include "kernels/measure_impl.h"
#include "kernels/panel_table.h"
#include "kernels/pool_impl.h"

struct kern_bf16_ctx {
    kern_bf16_path path;
    int threads;      /* own kernels: parts of a product's columns; oneDNN: OpenMP threads */
    bf16_ws *ws;      /* the avx2 kernels' workspace, one per thread (NULL on the portable path) */
    kern_pool *pool;  /* threads − 1 workers (NULL with one thread) */
    bf16_dnnl *dnnl;  /* oneDNN paths */
    int64_t fallback; /* products oneDNN refused, run on the avx2 kernels instead */
    panel_table pan;  /* registered panel copies (kern_bf16_ctx_add_panel), ctx's layout */
    int64_t pan_hits;
    bf16_wide wide; /* the avx512 path's widened blocks */
    int rows_own;   /* avx512: a panel copy was registered, every product on the own kernels */
};

static const char *const path_names[KERN_BF16_PATH_COUNT] = {"auto",   "amx",  "avx512bf16",
                                                             "avx512", "avx2", "portable"};

const char *kern_bf16_path_name(kern_bf16_path p) {
    return p >= 0 && p < KERN_BF16_PATH_COUNT ? path_names[p] : "?";
}

/* Why this process cannot run path p (a phrase), or NULL if it can. */
static const char *missing(kern_bf16_path p) {
    switch (p) {
    case KERN_BF16_AMX:
        if (!kern_cpu_has(KERN_CPU_AMX_BF16) || !kern_cpu_has(KERN_CPU_AVX512BF16))
            return "has no AMX-BF16";
        if (!bf16_dnnl_built()) return "can run AMX but this build has no oneDNN (libdnnl-dev)";
        if (!kern_cpu_amx_grant())
            return "has AMX-BF16 but Linux refused the tile state (arch_prctl "
                   "ARCH_REQ_XCOMP_PERM)";
        return NULL;
    case KERN_BF16_AVX512BF16:
        if (!kern_cpu_has(KERN_CPU_AVX512BF16)) return "has no AVX512-BF16";
        if (!bf16_dnnl_built()) return "has AVX512-BF16 but this build has no oneDNN (libdnnl-dev)";
        return NULL;
    case KERN_BF16_AVX512:
        if (!bf16_wide_built() || !bf16_avx2_built()) return "is not x86-64 (or no GCC or Clang)";
        return kern_cpu_has(KERN_CPU_AVX512) && kern_cpu_has(KERN_CPU_AVX2_FMA) ? NULL
                                                                                : "has no AVX-512";
    case KERN_BF16_AVX2:
        if (!bf16_avx2_built()) return "is not x86-64 (or the compiler not GCC or Clang)";
        return kern_cpu_has(KERN_CPU_AVX2_FMA) ? NULL : "has no AVX2 and FMA";
    case KERN_BF16_PORTABLE:
        return NULL;
    default:
        return "knows no such path";
    }
}

int kern_bf16_path_outruns_fp32(kern_bf16_path p) {
    return p == KERN_BF16_AMX || (p == KERN_BF16_AVX512BF16 && !kern_cpu_intel());
}

int kern_bf16_path_check(kern_bf16_path p, kern_bf16_path *resolved, char *msg, size_t size) {
    if (p == KERN_BF16_AUTO) { /* avx512bf16 where it outruns the FMAs, else on to avx512 */
        for (int q = KERN_BF16_AMX; q < KERN_BF16_PATH_COUNT; q++)
            if (!missing((kern_bf16_path)q) &&
                (q != KERN_BF16_AVX512BF16 || kern_bf16_path_outruns_fp32((kern_bf16_path)q))) {
                *resolved = (kern_bf16_path)q;
                return 0;
            }
    }
    const char *why = missing(p);
    if (!why) {
        *resolved = p;
        return 0;
    }
    char cpu[64], have[96] = "";
    kern_cpu_model(cpu, sizeof cpu);
    for (int q = KERN_BF16_AMX; q < KERN_BF16_PATH_COUNT; q++)
        if (!missing((kern_bf16_path)q))
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", *have ? ", " : "",
                     path_names[q]);
    snprintf(msg, size, "bf16 path %s: this CPU (%s) %s; paths available here: %s",
             kern_bf16_path_name(p), cpu, why, have);
    return -1;
}

int kern_bf16_path_from_env(kern_bf16_path *resolved, char *msg, size_t size) {
    const char *v = getenv(KERN_BF16_PATH_ENV);
    if (!v || !*v) return kern_bf16_path_check(KERN_BF16_AUTO, resolved, msg, size);
    for (int q = 0; q < KERN_BF16_PATH_COUNT; q++)
        if (strcmp(v, path_names[q]) == 0)
            return kern_bf16_path_check((kern_bf16_path)q, resolved, msg, size);
    snprintf(msg, size,
             "%s=%s: unknown bf16 path (known: auto, amx, avx512bf16, avx512, avx2, "
             "portable)",
             KERN_BF16_PATH_ENV, v);
    return -1;
}

kern_bf16_ctx *kern_bf16_ctx_create(kern_bf16_path p, int threads, char *msg, size_t size) {
    kern_bf16_path r;
    if (kern_bf16_path_check(p, &r, msg, size)) return NULL;
    kern_bf16_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        snprintf(msg, size, "bf16 context: out of memory");
        return NULL;
    }
    ctx->path = r;
    ctx->threads = threads < 1 ? 1 : threads;
    if (r == KERN_BF16_AMX || r == KERN_BF16_AVX512BF16) {
        const bf16_dnnl_isa isa = r == KERN_BF16_AMX ? BF16_DNNL_AMX : BF16_DNNL_AVX512BF16;
        if (!(ctx->dnnl = bf16_dnnl_create(isa, ctx->threads, msg, size))) {
            free(ctx);
            return NULL;
        }
    }
    int ok = ctx->threads == 1 || (ctx->pool = kern_pool_create(ctx->threads)) != NULL;
    if (ok && r != KERN_BF16_PORTABLE) { /* the avx2 workspaces (also the oneDNN paths' own) */
        ok = (ctx->ws = calloc((size_t)ctx->threads, sizeof *ctx->ws)) != NULL;
        for (int t = 0; ok && t < ctx->threads; t++) {
            ctx->ws[t].a = aligned_alloc(64, (BF16_WS_A_FLOATS * sizeof(float) + 63) / 64 * 64);
            ctx->ws[t].b = aligned_alloc(64, (BF16_WS_B_FLOATS * sizeof(float) + 63) / 64 * 64);
            ok = ctx->ws[t].a && ctx->ws[t].b;
        }
    }
    if (!ok) {
        kern_bf16_ctx_destroy(ctx);
        snprintf(msg, size, "bf16 context: no memory or threads for %d thread(s)", threads);
        return NULL;
    }
    return ctx;
}

void kern_bf16_ctx_destroy(kern_bf16_ctx *ctx) {
    if (!ctx) return;
    kern_pool_destroy(ctx->pool);
    bf16_dnnl_destroy(ctx->dnnl);
    for (int t = 0; ctx->ws && t < ctx->threads; t++) {
        free(ctx->ws[t].a);
        free(ctx->ws[t].b);
    }
    free(ctx->ws);
    free(ctx->pan.e);
    free(ctx->wide.ws);
    free(ctx);
}

kern_bf16_path kern_bf16_ctx_path(const kern_bf16_ctx *ctx) {
    return ctx->path;
}

int64_t kern_bf16_ctx_fallbacks(const kern_bf16_ctx *ctx) {
    return ctx->fallback;
}

kern_bf16_panel_layout kern_bf16_ctx_panels(const kern_bf16_ctx *ctx) {
    if (ctx->path == KERN_BF16_AVX2 || ctx->path == KERN_BF16_AVX512) return KERN_BF16_PANELS_K16;
    if (ctx->path == KERN_BF16_AVX512BF16 && bf16_pairs_built()) return KERN_BF16_PANELS_PAIRS;
    return KERN_BF16_PANELS_NONE;
}

int kern_bf16_ctx_add_panel(kern_bf16_ctx *ctx, const kern_bf16 *B, int64_t K, int64_t N,
                            int64_t ldb, const kern_bf16 *P) {
    if (!kern_bf16_ctx_panels(ctx) || K < 1 || N < 1 || ldb < N) return -1;
    if (panel_table_add(&ctx->pan, (panel_entry){B, P, K, N, ldb})) return -1;
    ctx->rows_own = 1; /* avx512: from now on every product row-independent (gemm_bf16.h) */
    return 0;
}

void kern_bf16_ctx_clear_panels(kern_bf16_ctx *ctx) {
    ctx->pan.n = 0;
}

int64_t kern_bf16_ctx_panel_hits(const kern_bf16_ctx *ctx) {
    return ctx->pan_hits;
}


/* An empty product (M or N zero: nothing; K zero: C = 0, or C unchanged): 1 if it was one. */
static int empty(float *C, int64_t M, int64_t N, int64_t K, int64_t ldc, bool acc) {
    if (M > 0 && N > 0 && K > 0) return 0;
    if (M > 0 && N > 0 && !acc)
        for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof *C);
    return 1;
}

/* One product on the own kernels, or the part of it that thread t computes: the columns
 * [t·chunk, (t + 1)·chunk) of C (all of them when chunk = N). */
typedef struct {
    kern_bf16_ctx *ctx;
    float *C;
    const kern_bf16 *A, *B;
    int64_t M, N, K, lda, ldb, ldc, chunk;
    bool ta, tb, acc;
    const kern_bf16 *P; /* B's panel copy in the path's layout (panel_for), or NULL */
    int64_t ps;
} own_job;

static void own_part(void *arg, int t) {
    const own_job *o = arg;
    const int64_t j0 = (int64_t)t * o->chunk, n = o->N - j0 < o->chunk ? o->N - j0 : o->chunk;
    if (n <= 0) return;
    const kern_bf16 *B = o->tb ? o->B + j0 * o->ldb : o->B + j0;
    if (o->P && o->ctx->path == KERN_BF16_AVX512BF16) {
        bf16_gemm_pairs(&o->ctx->ws[t], o->C + j0, o->A, o->P + j0 / 16 * o->ps, o->ps, o->M, n,
                        o->K, o->ta, o->lda, o->ldc, o->acc);
        return;
    }
#if BF16_X86 /* (the K16 copies: the avx2 and avx512 paths) */
    if (o->P) {
        bf16_gemv_panel_avx2(&o->ctx->ws[t], o->C + j0, o->A, o->ta ? o->lda : 1,
                             o->P + j0 / 16 * o->ps, o->ps, n, o->K, o->acc);
        return;
    }
#endif
    if (o->ctx->path == KERN_BF16_PORTABLE)
        bf16_gemm_plain(o->C + j0, o->A, B, o->M, n, o->K, o->ta, o->tb, o->lda, o->ldb, o->ldc,
                        o->acc);
    else
        bf16_gemm_avx2(&o->ctx->ws[t], o->C + j0, o->A, B, o->M, n, o->K, o->ta, o->tb, o->lda,
                       o->ldb, o->ldc, o->acc);
}

/* The registered copy o's product reads (o->P, o->ps; counted), or none. K16: a row (M = 1) whose
 * widened row fits the workspace. PAIRS: any M (never a condition on M: a row's bits must not
 * depend on its batch), A transposed when PR_MR of its rows fit the workspace. */
static void panel_for(own_job *o) {
    kern_bf16_ctx *ctx = o->ctx;
    const kern_bf16_panel_layout l = kern_bf16_ctx_panels(ctx);
    if (l == KERN_BF16_PANELS_NONE || !ctx->pan.n || o->tb) return;
    if (l == KERN_BF16_PANELS_K16 && (o->M != 1 || o->K > BF16_WS_A_FLOATS)) return;
    if (l == KERN_BF16_PANELS_PAIRS && o->ta && o->K > BF16_PAIRS_TA_MAX_K) return;
    o->P = panel_table_find(&ctx->pan, o->B, sizeof *o->B, o->K, o->N, o->ldb,
                            l == KERN_BF16_PANELS_PAIRS ? 2 : 1, &o->ps);
    ctx->pan_hits += o->P != NULL;
}

/* Products of fewer multiply-adds stay on one thread: waking the workers costs tens of µs. */
#define OWN_SPLIT_MIN (1 << 20)

/* o on the own kernels, its columns split over the context's threads by whole panels. */
static void own_run(own_job *o) {
    const int T = o->ctx->threads;
    if (T == 1 || (double)o->M * (double)o->N * (double)o->K < OWN_SPLIT_MIN || o->N < 32) {
        own_part(o, 0);
        return;
    }
    o->chunk = ((o->N + T - 1) / T + 15) / 16 * 16; /* whole panels of 16 columns */
    kern_pool_run(o->ctx->pool, own_part, o);
}

void bf16_gemm_own(kern_bf16_ctx *ctx, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   bool acc) {
    if (empty(C, M, N, K, ldc, acc)) return;
    own_job o = {ctx, C, A, B, M, N, K, lda, ldb, ldc, N, ta, tb, acc, NULL, 0};
    panel_for(&o);
    own_run(&o);
}

void kern_gemm_bf16(kern_bf16_ctx *ctx, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                    int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                    bool acc) {
    if (empty(C, M, N, K, ldc, acc)) return;
    if (ctx->path == KERN_BF16_AMX || ctx->path == KERN_BF16_AVX512BF16) {
        own_job o = {ctx, C, A, B, M, N, K, lda, ldb, ldc, N, ta, tb, acc, NULL, 0};
        panel_for(&o); /* avx512bf16: a weight's registered copy, read by the own kernel */
        if (o.P) {
            own_run(&o);
            return;
        }
        if (bf16_dnnl_gemm(ctx->dnnl, false, C, A, B, M, N, K, ta, tb, lda, ldb, ldc, acc) == 0)
            return;
        ctx->fallback++;
    }
    if (ctx->path == KERN_BF16_AVX512 && !ctx->rows_own) {
        const int rc = bf16_wide_gemm(&ctx->wide, C, A, B, M, N, K, ta, tb, lda, ldb, ldc, acc);
        if (rc == 0) return;
        ctx->fallback += rc < 0; /* out of memory for the widened blocks */
    }
    bf16_gemm_own(ctx, C, A, B, M, N, K, ta, tb, lda, ldb, ldc, acc);
}

void kern_gemm_bf16_ref(float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M, int64_t N,
                        int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                        bool acc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < K; k++)
                s += (double)kern_bf16_val_inl(ta ? A[k * lda + i] : A[i * lda + k]) *
                     (double)kern_bf16_val_inl(tb ? B[j * ldb + k] : B[k * ldb + j]);
            if (acc) s += C[i * ldc + j];
            C[i * ldc + j] = (float)s;
        }
}

void kern_matmul_bf16(kern_bf16_ctx *ctx, float *restrict y, const kern_bf16 *restrict x,
                      const kern_bf16 *restrict w, int64_t M, int64_t K, int64_t N) {
    kern_gemm_bf16(ctx, y, x, w, M, N, K, false, false, K, N, N, false);
}

void kern_matmul_dx_bf16(kern_bf16_ctx *ctx, float *restrict dx, const kern_bf16 *restrict dy,
                         const kern_bf16 *restrict w, int64_t M, int64_t K, int64_t N, bool acc) {
    kern_gemm_bf16(ctx, dx, dy, w, M, K, N, false, true, N, N, K, acc);
}

void kern_matmul_dw_bf16(kern_bf16_ctx *ctx, float *restrict dw, const kern_bf16 *restrict x,
                         const kern_bf16 *restrict dy, int64_t M, int64_t K, int64_t N) {
    kern_gemm_bf16(ctx, dw, x, dy, K, N, M, true, false, K, N, N, true);
}

typedef struct {
    kern_bf16_ctx *ctx;
    kern_bf16 *a, *b;
    float *c;
    int64_t n;
} bf16_operands;

static void bf16_product(void *operands, int which) {
    const bf16_operands *o = operands;
    if (which == 0)
        kern_matmul_bf16(o->ctx, o->c, o->a, o->b, o->n, o->n, o->n);
    else if (which == 1)
        kern_matmul_dx_bf16(o->ctx, o->c, o->a, o->b, o->n, o->n, o->n, false);
    else
        kern_matmul_dw_bf16(o->ctx, o->c, o->a, o->b, o->n, o->n, o->n);
}

/* As gemm.c's measure_flops, on bf16 operands (x, w, dy: n×n bf16; y: n×n fp32). */
static double measure(kern_bf16_ctx *ctx, int64_t n, double seconds, int thread_clock,
                      int fwd_only) {
    if (n < 1) return 0.0;
    bf16_operands o = {ctx, malloc((size_t)(n * n) * sizeof(kern_bf16)),
                       malloc((size_t)(n * n) * sizeof(kern_bf16)),
                       malloc((size_t)(n * n) * sizeof(float)), n};
    double flops = 0.0;
    if (o.a && o.b && o.c) {
        for (int64_t i = 0; i < n * n; i++) {
            o.a[i] = kern_bf16_of_inl((float)((i * 7 % 13) - 6) / 13.0f);
            o.b[i] = kern_bf16_of_inl((float)((i * 5 % 11) - 5) / 11.0f);
        }
        flops = kern_time_products(bf16_product, &o, n, seconds, thread_clock, fwd_only);
    }
    free(o.a);
    free(o.b);
    free(o.c);
    return flops;
}

double kern_bf16_measure_flops(kern_bf16_ctx *ctx, int64_t n, double seconds) {
    return measure(ctx, n, seconds, 0, 0);
}

double kern_bf16_measure_flops_fwd(kern_bf16_ctx *ctx, int64_t n, double seconds) {
    return measure(ctx, n, seconds, 0, 1);
}

double kern_bf16_measure_core_flops(kern_bf16_ctx *ctx, int64_t n, double seconds) {
    return measure(ctx, n, seconds, ctx->threads == 1, 0);
}
