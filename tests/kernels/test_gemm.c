/* kern_gemm (all four transpose combinations, padded leading dimensions, alpha/beta, beta = 0
 * over NaN garbage) and the matmul wrappers vs the naive double-accumulating twin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/gemm_nn.h"
#include "kernels/sgemm_lib.h"
#include "ktest.h"

/* Sums of up to K = 17 products of values in [-1, 1]: the rounding error of sgemm is a few
 * K·eps·Σ|a·b|, so k = 4·17 bounds it with margin relative to |a|+|b|+1 (4·K past K = 17: the
 * shapes that reach the libraries' blocked kernels). */
#define K_GEMM 68.0

static void one(int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, float beta) {
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
    int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
    float *A = kt_floats(na), *Bm = kt_floats(nb);
    float *C = kt_floats(nc), *R = kt_floats(nc);
    kt_fill(A, na, 1 + (uint64_t)M, -1, 1);
    kt_fill(Bm, nb, 2 + (uint64_t)N, -1, 1);
    kt_fill(C, nc, 3 + (uint64_t)K, -1, 1);
    if (beta == 0.0f)
        for (int64_t i = 0; i < nc; i++) C[i] = NAN; /* beta = 0 must ignore C */
    for (int64_t i = 0; i < nc; i++) R[i] = C[i];
    kern_gemm(C, A, Bm, M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
    kern_gemm_ref(R, A, Bm, M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
    /* compare only the M×N window; the padding columns must be untouched (NaN == NaN fails,
     * so compare them bitwise) */
    float *cw = kt_floats(M * N), *rw = kt_floats(M * N);
    int pad_ok = 1;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            cw[i * N + j] = C[i * ldc + j];
            rw[i * N + j] = R[i * ldc + j];
        }
        for (int64_t j = N; j < ldc; j++)
            if (!(C[i * ldc + j] == R[i * ldc + j] ||
                  (isnan(C[i * ldc + j]) && isnan(R[i * ldc + j]))))
                pad_ok = 0;
    }
    char what[96];
    snprintf(what, sizeof what, "gemm %c%c M=%lld N=%lld K=%lld a=%g b=%g", ta ? 'T' : 'N',
             tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K, alpha, beta);
    kt_close(what, cw, rw, M * N, K > 17 ? 4.0 * (double)K : K_GEMM);
    check_expect(pad_ok, "%s: padding columns untouched", what);
    free(A), free(Bm), free(C), free(R), free(cw), free(rw);
}

static void wrappers(int64_t M, int64_t K, int64_t N) {
    float *x = kt_floats(M * K), *w = kt_floats(K * N);
    float *y = kt_floats(M * N), *yr = kt_floats(M * N);
    float *dw = kt_floats(K * N), *dwr = kt_floats(K * N);
    float *dx = kt_floats(M * K), *dxr = kt_floats(M * K);
    kt_fill(x, M * K, 11, -1, 1);
    kt_fill(w, K * N, 12, -1, 1);
    kern_matmul(y, x, w, M, K, N);
    kern_gemm_ref(yr, x, w, M, N, K, false, false, K, N, N, 1, 0);
    kt_close("matmul y = x·w", y, yr, M * N, K_GEMM);
    kt_fill(dw, K * N, 13, -1, 1);
    for (int64_t i = 0; i < K * N; i++) dwr[i] = dw[i];
    kern_matmul_dw(dw, x, y, M, K, N);
    kern_gemm_ref(dwr, x, y, K, N, M, true, false, K, N, N, 1, 1);
    kt_close("matmul_dw dw += xᵀ·dy", dw, dwr, K * N, K_GEMM * 4);
    for (int acc = 0; acc < 2; acc++) {
        kt_fill(dx, M * K, 14, -1, 1);
        for (int64_t i = 0; i < M * K; i++) dxr[i] = dx[i];
        kern_matmul_dx(dx, y, w, M, K, N, acc);
        kern_gemm_ref(dxr, y, w, M, K, N, false, true, N, N, K, 1, acc ? 1.0f : 0.0f);
        kt_close(acc ? "matmul_dx dx += dy·wᵀ" : "matmul_dx dx = dy·wᵀ", dx, dxr, M * K,
                 K_GEMM * 4);
    }
    free(x), free(w), free(y), free(yr), free(dw), free(dwr), free(dx), free(dxr);
}

/* The forward's product (kern_gemm_nn, kern_gemm's untransposed path from 2 rows): every tile
 * height (1..12 rows, blocks of 48), panel edges (N % 32, N % 16), padded strides, overwrite over
 * NaN garbage and accumulate; then the claim that a row's bits do not depend on M: the product
 * of all rows at once equals each row computed alone (kern_gemm_nn with M = 1). */
static void nn_one(int64_t M, int64_t N, int64_t K, int acc) {
    const int64_t lda = K + 3, ldb = N + 5, ldc = N + 2;
    float *A = malloc(sizeof(float) * (size_t)(M * lda)),
          *Bm = malloc(sizeof(float) * (size_t)(K * ldb));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc)),
          *R = malloc(sizeof(float) * (size_t)(M * ldc));
    float *G = malloc(sizeof(float) * (size_t)(M * ldc)),
          *row = malloc(sizeof(float) * (size_t)ldc);
    kt_fill(A, M * lda, 21 + (uint64_t)M, -1, 1);
    kt_fill(Bm, K * ldb, 22 + (uint64_t)N, -1, 1);
    kt_fill(C, M * ldc, 23 + (uint64_t)K, -1, 1);
    if (!acc)
        for (int64_t i = 0; i < M * ldc; i++) C[i] = NAN;
    for (int64_t i = 0; i < M * ldc; i++) R[i] = G[i] = C[i];
    kern_gemm_nn(C, A, Bm, M, N, K, lda, ldb, ldc, acc);
    kern_gemm(G, A, Bm, M, N, K, false, false, lda, ldb, ldc, 1.0f, acc ? 1.0f : 0.0f);
    kern_gemm_ref(R, A, Bm, M, N, K, false, false, lda, ldb, ldc, 1.0f, acc ? 1.0f : 0.0f);
    int pad_ok = 1, rows_ok = 1;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = N; j < ldc; j++)
            if (memcmp(&C[i * ldc + j], &R[i * ldc + j], sizeof(float))) pad_ok = 0;
    }
    char what[96];
    snprintf(what, sizeof what, "gemm_nn M=%lld N=%lld K=%lld %s", (long long)M, (long long)N,
             (long long)K, acc ? "+=" : "=");
    float *cw = malloc(sizeof(float) * (size_t)(M * N)),
          *rw = malloc(sizeof(float) * (size_t)(M * N)),
          *gw = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            cw[i * N + j] = C[i * ldc + j];
            rw[i * N + j] = R[i * ldc + j];
            gw[i * N + j] = G[i * ldc + j];
        }
    kt_close(what, cw, rw, M * N, 4.0 * (double)K + 4.0);
    if (M >= 2) /* kern_gemm takes this path from 2 rows when the CPU has it */
        kt_close("  kern_gemm on the same", gw, rw, M * N, 4.0 * (double)K + 4.0);
    check_expect(pad_ok, "%s: padding columns untouched", what);
    if (!acc) { /* each row alone: bit-identical */
        for (int64_t i = 0; i < M && rows_ok; i++) {
            kern_gemm_nn(row, A + i * lda, Bm, 1, N, K, lda, ldb, ldc, 0);
            if (memcmp(row, C + i * ldc, sizeof(float) * (size_t)N)) rows_ok = 0;
        }
        check_expect(rows_ok, "%s: every row alone gives the same bits", what);
    }
    free(A), free(Bm), free(C), free(R), free(G), free(row), free(cw), free(rw), free(gw);
}

int main(void) {
    /* MESHTRAIN_SGEMM picks the library of the products gemm_nn and sgemv do not take (ctest
     * runs kern_gemm_openblas and kern_gemm_onednn; without oneDNN the latter skips) */
    kern_sgemm_lib lib;
    char msg[256], desc[160];
    if (kern_sgemm_lib_check(&lib, msg, sizeof msg)) {
        printf("SKIP: %s\n", msg);
        return 77;
    }
    kern_sgemm_lib_describe(desc, sizeof desc);
    printf("fp32 products: %s\n", desc);
    kern_set_threads(1);
    const int64_t shapes[][3] = {{1, 1, 1},   {7, 13, 17}, {13, 1, 7},     {17, 7, 1},
                                 {1, 17, 13}, {6, 10, 9},  {70, 129, 300}, {129, 65, 257}};
    const float ab[][2] = {{1.0f, 0.0f}, {0.7f, 1.0f}, {-1.3f, -0.5f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (size_t c = 0; c < sizeof ab / sizeof ab[0]; c++)
                one(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t & 2, ab[c][0], ab[c][1]);
    printf("kern_gemm_nn: %s\n", kern_gemm_nn_available() ? "AVX-512" : "plain loop (no AVX-512)");
    const int64_t nn_shapes[][3] = {{1, 1, 1},     {2, 15, 3},   {3, 16, 17},  {5, 17, 64},
                                    {7, 31, 9},    {8, 32, 33},  {9, 33, 5},   {11, 47, 40},
                                    {12, 48, 2},   {13, 70, 31}, {25, 64, 19}, {49, 100, 7},
                                    {50, 129, 65}, {97, 40, 12}};
    for (size_t s = 0; s < sizeof nn_shapes / sizeof nn_shapes[0]; s++)
        for (int acc = 0; acc < 2; acc++)
            nn_one(nn_shapes[s][0], nn_shapes[s][1], nn_shapes[s][2], acc);
    wrappers(7, 13, 5);
    wrappers(1, 17, 3);
    double f = kern_measure_flops(64, 0.02);
    check_expect(f > 1e6 && isfinite(f), "kern_measure_flops(64) = %.3g FLOP/s", f);
    f = kern_measure_flops_fwd(64, 0.02, 0);
    check_expect(f > 1e6 && isfinite(f), "kern_measure_flops_fwd(64) = %.3g FLOP/s", f);
    f = kern_measure_flops_fwd(64, 0.02, 1);
    check_expect(f > 1e6 && isfinite(f), "kern_measure_flops_fwd(64, on panels) = %.3g FLOP/s", f);
    f = kern_measure_core_flops(64, 0.02);
    check_expect(f > 1e6 && isfinite(f), "kern_measure_core_flops(64) = %.3g FLOP/s", f);
    return check_finish("test_kern_gemm");
}
