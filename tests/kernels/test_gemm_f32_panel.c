/* The fp32 panel product (kern_f32_panel_gemm over kern_f32_panel_pack's copy, and kern_gemm
 * reading a registered copy) against the naive double-accumulating twin (kern_gemm_ref), on
 * shapes around the tiles (6 rows, 16 columns, blocks of 72 rows and 512 of K: M, N, K of 1, 7,
 * 33, 100 and past each; M of 8, 32 and 130, whose blocks split into slivers of 4, 5 and 6 rows),
 * overwriting NaN garbage and accumulating, with padded strides; then
 * the claim that a row's bits depend neither on M nor on its place: the product of all rows at
 * once equals each row alone (M = 1 takes the one-row kernel, the others the tiles); then a
 * context's table of registered copies (kern_gemm_ctx): a whole weight and blocks of a larger
 * one (rows, and columns from a multiple of 16) are found, another block is not, kern_gemm
 * without the context reads no copy, a weight registered again with a new copy reads the new
 * one, and a dropped copy is not read. Where kern_f32_panels is 0 the context must refuse
 * copies, and the checks that need the tiles are skipped, saying so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "ktest.h"

/* A sum of K products of values in [-1, 1], one fp32 chain: its rounding error is at most about
 * K·eps·Σ|a·b|, so 4K + 4 (as for gemm_nn) bounds it with margin. */
static double tol(int64_t K) {
    return 4.0 * (double)K + 4.0;
}

/* C[M, N] (row stride ldc) as a dense [M, N] copy. */
static void window(float *out, const float *C, int64_t M, int64_t N, int64_t ldc) {
    for (int64_t i = 0; i < M; i++) memcpy(out + i * N, C + i * ldc, sizeof *out * (size_t)N);
}

static void one(int64_t M, int64_t N, int64_t K, int acc) {
    const int64_t lda = K + 3, ldb = N + 5, ldc = N + 2;
    kt_bufs b = {0};
    float *A, *Bm, *P, *C, *C0, *R, *Q, *row, *cw, *rw;
    kt_bufs_floats(&b, M * lda, &A, NULL);
    kt_bufs_floats(&b, K * ldb, &Bm, NULL);
    kt_bufs_floats(&b, kern_f32_panel_elems(K, N), &P, NULL);
    kt_bufs_floats(&b, M * ldc, &C, &C0, &R, &Q, NULL);
    kt_bufs_floats(&b, M * N, &cw, &rw, &row, NULL);
    kt_fill(A, M * lda, 31 + (uint64_t)M, -1, 1);
    kt_fill(Bm, K * ldb, 32 + (uint64_t)N, -1, 1);
    kt_fill(C, M * ldc, 33 + (uint64_t)K, -1, 1);
    if (!acc)
        for (int64_t i = 0; i < M * ldc; i++) C[i] = NAN; /* overwriting ignores C */
    memcpy(R, C, sizeof *C * (size_t)(M * ldc));
    memcpy(C0, C, sizeof *C * (size_t)(M * ldc));
    memcpy(Q, C, sizeof *C * (size_t)(M * ldc));
    kern_f32_panel_pack(P, Bm, K, N, ldb);
    kern_f32_panel_gemm(C, A, P, 16 * K, M, N, K, lda, ldc, acc);
    kern_f32_panel_gemm_plain(Q, A, P, 16 * K, M, N, K, lda, ldc, acc);
    kern_gemm_ref(R, A, Bm, M, N, K, false, false, lda, ldb, ldc, 1.0f, acc ? 1.0f : 0.0f);
    int pad_ok = 1, rows_ok = 1;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++)
            if (memcmp(&C[i * ldc + j], &R[i * ldc + j], sizeof *C)) pad_ok = 0;
    char what[96];
    snprintf(what, sizeof what, "f32 panels M=%lld N=%lld K=%lld %s", (long long)M, (long long)N,
             (long long)K, acc ? "+=" : "=");
    window(cw, C, M, N, ldc);
    window(rw, R, M, N, ldc);
    kt_close(what, cw, rw, M * N, tol(K));
    window(cw, Q, M, N, ldc);
    kt_close("  the plain loop on the same", cw, rw, M * N, tol(K));
    check_expect(pad_ok, "%s: padding columns untouched", what);
    for (int64_t i = 0; i < M && rows_ok; i++) { /* each row alone, from C's start: same bits */
        memcpy(row, C0 + i * ldc, sizeof *row * (size_t)N);
        kern_f32_panel_gemm(row, A + i * lda, P, 16 * K, 1, N, K, lda, ldc, acc);
        if (memcmp(row, C + i * ldc, sizeof *row * (size_t)N)) rows_ok = 0;
    }
    check_expect(rows_ok, "%s: every row alone gives the same bits", what);
    if (!acc && M > 2) { /* and the rows [1, M) as a batch of their own */
        kern_f32_panel_gemm(Q + ldc, A + lda, P, 16 * K, M - 1, N, K, lda, ldc, 0);
        check_expect(!memcmp(Q + ldc, C + ldc, sizeof *C * (size_t)((M - 2) * ldc + N)),
                     "%s: rows 1.. as a batch give the same bits", what);
    }
    kt_bufs_free(&b);
}

/* y = x · (block of W at row r0, column c0, [K, N]) through kern_gemm_ctx, W [KW, NW] registered
 * on ctx. */
static void block(kern_f32_ctx *ctx, const float *W, int64_t NW, const float *x, int64_t M,
                  int64_t r0, int64_t c0, int64_t K, int64_t N, float *y, float *ref) {
    kern_gemm_ctx(ctx, y, x, W + r0 * NW + c0, M, N, K, false, false, K, NW, N, 1.0f, 0.0f);
    kern_gemm_ref(ref, x, W + r0 * NW + c0, M, N, K, false, false, K, NW, N, 1.0f, 0.0f);
}

/* Where the tiles cannot run: the context takes no copy and kern_gemm_ctx is kern_gemm. */
static void registry_off(kern_f32_ctx *ctx, const float *W, const float *P, const float *x,
                         float *y, float *own, int64_t KW, int64_t NW, int64_t M) {
    printf("SKIP the registered copies' checks: kern_f32_panels is 0 here (no AVX2 + FMA, or "
           "AVX-512's gemm_nn, or more than one BLAS thread), so no copy can be registered\n");
    check_expect(kern_f32_ctx_add_panel(ctx, W, KW, NW, NW, P) == KERN_F32_CANNOT,
                 "kern_f32_panels 0: the context refuses a copy");
    kern_matmul_ctx(ctx, y, x, W, M, KW, NW);
    kern_matmul(own, x, W, M, KW, NW);
    check_expect(!memcmp(y, own, sizeof *y * (size_t)(M * NW)) &&
                     kern_f32_ctx_panel_hits(ctx) == 0,
                 "kern_f32_panels 0: kern_matmul_ctx gives kern_matmul's bits");
}

/* W registered again with the copy of another weight W2 (same shape) in P2: products on W read
 * P2, bit for bit the panel kernel over P2; P (the old copy) is filled with NaN, so reading it
 * would show. */
static void reregistered(kern_f32_ctx *ctx, const float *W, float *P, float *P2, const float *x,
                         float *y, float *own, int64_t KW, int64_t NW, int64_t M) {
    kt_bufs b = {0};
    float *W2;
    kt_bufs_floats(&b, KW * NW, &W2, NULL);
    kt_fill(W2, KW * NW, 43, -1, 1);
    kern_f32_panel_pack(P2, W2, KW, NW, NW);
    check_expect(kern_f32_ctx_add_panel(ctx, W, KW, NW, NW, P2) == 0, "a new copy of W registers");
    for (int64_t i = 0; i < kern_f32_panel_elems(KW, NW); i++) P[i] = NAN;
    const int64_t h0 = kern_f32_ctx_panel_hits(ctx);
    kern_matmul_ctx(ctx, y, x, W, M, KW, NW);
    kern_f32_panel_gemm(own, x, P2, 16 * KW, M, NW, KW, KW, NW, 0);
    check_expect(kern_f32_ctx_panel_hits(ctx) - h0 == 1 &&
                     !memcmp(y, own, sizeof *y * (size_t)(M * NW)),
                 "W registered again: its products read the new copy (the old one not)");
    kern_matmul(own, x, W2, M, KW, NW); /* sanity: the new copy is W2's, not W's */
    kt_close("W registered again: x · W2", y, own, M * NW, tol(KW));
    kt_bufs_free(&b);
}

static void registry(void) {
    const int64_t KW = 70, NW = 90, M = 9;
    kt_bufs b = {0};
    float *W, *P, *P2, *x, *y, *ref, *own;
    kt_bufs_floats(&b, KW * NW, &W, NULL);
    kt_bufs_floats(&b, kern_f32_panel_elems(KW, NW), &P, &P2, NULL);
    kt_bufs_floats(&b, M * KW, &x, NULL);
    kt_bufs_floats(&b, M * NW, &y, &ref, &own, NULL);
    kt_fill(W, KW * NW, 41, -1, 1);
    kt_fill(x, M * KW, 42, -1, 1);
    kern_f32_panel_pack(P, W, KW, NW, NW);
    kern_f32_ctx *ctx = kern_f32_ctx_create();
    check_expect(ctx != NULL, "a panel context");
    if (!ctx) return;
    if (!kern_f32_panels()) {
        registry_off(ctx, W, P, x, y, own, KW, NW, M);
        kern_f32_ctx_destroy(ctx);
        kt_bufs_free(&b);
        return;
    }
    printf("kern_f32_panels: AVX2 + FMA tiles read registered copies\n");
    check_expect(kern_f32_ctx_add_panel(ctx, W, KW, NW, NW, P) == 0, "a copy registers");
    /* the whole weight (kern_matmul_ctx), a block of rows, a block of columns from 32, both */
    kern_matmul_ctx(ctx, y, x, W, M, KW, NW);
    kern_f32_panel_gemm(own, x, P, 16 * KW, M, NW, KW, KW, NW, 0);
    check_expect(!memcmp(y, own, sizeof *y * (size_t)(M * NW)),
                 "kern_matmul_ctx on a registered weight: the panel kernel's bits");
    block(ctx, W, NW, x, M, 0, 0, KW, NW, y, ref);
    kt_close("registered: the whole weight", y, ref, M * NW, tol(KW));
    block(ctx, W, NW, x, M, 20, 0, 33, NW, y, ref);
    kt_close("registered: rows 20..52", y, ref, M * NW, tol(33));
    block(ctx, W, NW, x, M, 7, 32, 50, 41, y, ref);
    kt_close("registered: rows 7..56, columns 32..72", y, ref, M * 41, tol(50));
    block(ctx, W, NW, x, 1, 7, 32, 50, 41, y, ref);
    kt_close("registered: the same, one row", y, ref, 41, tol(50));
    check_expect(kern_f32_ctx_panel_hits(ctx) == 5, "%lld products read the copy",
                 (long long)kern_f32_ctx_panel_hits(ctx));
    block(ctx, W, NW, x, M, 0, 8, KW, 40, y, ref); /* columns from 8: not on a panel's edge */
    kt_close("registered: columns 8..47 (the BLAS)", y, ref, M * 40, tol(KW));
    block(NULL, W, NW, x, M, 0, 0, KW, NW, y, ref); /* no context: kern_gemm, no copy */
    kt_close("registered, no context: the BLAS", y, ref, M * NW, tol(KW));
    check_expect(kern_f32_ctx_panel_hits(ctx) == 5, "a block off the panels, no context: the BLAS");
    reregistered(ctx, W, P, P2, x, y, own, KW, NW, M);
    kern_f32_ctx_drop_panels(ctx, P2, kern_f32_panel_elems(KW, NW));
    for (int64_t i = 0; i < kern_f32_panel_elems(KW, NW); i++) P2[i] = NAN; /* not read again */
    const int64_t h1 = kern_f32_ctx_panel_hits(ctx);
    block(ctx, W, NW, x, M, 0, 0, KW, NW, y, ref);
    kt_close("dropped: the BLAS", y, ref, M * NW, tol(KW));
    check_expect(kern_f32_ctx_panel_hits(ctx) == h1, "a dropped copy is not read");
    kern_f32_ctx_destroy(ctx);
    kt_bufs_free(&b);
}

int main(void) {
    kern_set_threads(1);
    printf("kern_f32_panel_gemm: %s\n",
           kern_f32_panel_available() ? "AVX2 + FMA" : "plain loop (no AVX2 + FMA)");
    const int64_t shapes[][3] = {{1, 1, 1},      {1, 7, 33},    {7, 33, 100},    {33, 100, 7},
                                 {100, 7, 33},   {6, 16, 256},  {5, 15, 257},    {13, 17, 300},
                                 {2, 48, 513},   {170, 40, 19}, {200, 130, 260}, {12, 129, 64},
                                 {73, 31, 1030}, {32, 40, 520}, {8, 33, 64},     {130, 20, 600}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int acc = 0; acc < 2; acc++) one(shapes[s][0], shapes[s][1], shapes[s][2], acc);
    registry();
    return check_finish("test_kern_gemm_f32_panel");
}
