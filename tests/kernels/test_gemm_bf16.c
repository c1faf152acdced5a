/* kern_gemm_bf16 on the path MESHTRAIN_BF16_PATH forces (unset: auto), against its naive twin in
 * double. A path this CPU lacks skips (exit 77) with the reason. CTest runs one process per path.
 *
 * The bound, per element. The inputs are bf16, so the twin's sum of their products is exact up to
 * its final rounding to fp32 (≤ u·|ref|, u = 2^-24). The path sums K products (exact in fp32:
 * 8 + 8 significand bits) and, when accumulating, C₀: K + 1 terms in fp32, in whatever order, so
 * its rounding error is at most γ_{K+1}·Σ|terms| (γ_n = n·u/(1 − n·u), Higham's bound for any
 * order of summation). vdpbf16ps and AMX also flush denormals: an input under 2^-126 taken as 0
 * loses |a·b| ≤ 2^-126·|b| (or ·|a|), and each of the ≤ 2K + 1 operations whose result is under
 * 2^-126 loses less than 2^-126. Hence
 *   |c − ref| ≤ γ_{K+1}·(Σ|a·b| + |C₀|) + 2^-126·(Σ(|a| + |b|) + 2K + 1) + u·|ref|,
 * checked element by element; the worst element (as a fraction of its bound) is printed.
 *
 * Shapes: M, N, K each of 1, 7, 33, 100 and 300 (past a K block of 256 and an M block of 168),
 * M of 2 and 4 (the streaming kernel's rows in registers), N = 4100 and 16400 (past a block of 1024
 * columns and a streaming chunk of 16384), M = 1 with N = 65600 (past the one-row kernel's chunk of
 * 65536) and with K = 1411 (groups of 8 rows prefetching the next, and a last group of 3), all
 * four transposes, padded strides, accumulate and overwrite (over NaN garbage), rows scaled by
 * powers of two; inputs with bf16 denormals; the model's three products. Also: run to run
 * bit-identical; on the own paths a row's result equal bit for bit whatever M (each row alone vs
 * all at once), and the avx2 path equal bit for bit to the portable one (these three on products
 * of up to 2e6 multiply-adds, to keep the test fast); on the own paths 3 threads equal to 1 bit
 * for bit (the products past 2^20 multiply-adds are split). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_bf16_impl.h"
#include "ktest.h"

static kern_bf16_ctx *ctx, *plain_ctx; /* plain_ctx: the portable path, for the avx2 path */
static kern_bf16_ctx
    *ctx3;              /* own paths: the same path on 3 threads; avx512bf16 with pair copies: 2 */
static int own;         /* the path is one of meshtrain's own */
static int pair_copies; /* one() registers B's pair copy (avx512bf16: its own kernel, any M) */

/* n bf16 values, uniform in [-1, 1) from seed, each row of `cols` scaled by 2^(row % 7 − 3). */
static kern_bf16 *bf16_matrix(int64_t n, int64_t cols, uint64_t seed) {
    float *f = kt_floats(n);
    kern_bf16 *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (!h) exit(1);
    kt_fill(f, n, seed, -1, 1);
    for (int64_t i = 0; i < n; i++) f[i] = ldexpf(f[i], (int)((i / cols) % 7) - 3);
    kern_bf16_pack(h, f, n);
    free(f);
    return h;
}

typedef struct {
    int64_t M, N, K, lda, ldb, ldc;
    bool ta, tb, acc;
} shape;

/* |op(X)| as a dense fp32 [rows, cols] matrix. */
static float *abs_op(const kern_bf16 *X, int64_t rows, int64_t cols, int64_t ld, bool t) {
    float *f = kt_floats(rows * cols);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            f[i * cols + j] = fabsf(kern_bf16_val(t ? X[j * ld + i] : X[i * ld + j]));
    return f;
}

/* Checks C (the path's result) against R (the twin's) with C0 (C before the product) element by
 * element under the bound above; prints one line with the worst element. Returns 1 on failure.
 * Σ|a·b| is |op(A)|·|op(B)| by sgemm, raised by its own relative error (≤ 2K·u); Σ(|a| + |b|) is
 * a row sum of |op(A)| plus a column sum of |op(B)|. */
static int check_bound(const char *what, const shape *s, const float *C, const float *R,
                       const float *C0, const kern_bf16 *A, const kern_bf16 *B) {
    const double u = 0x1p-24, tiny = 0x1p-126, n = (double)(s->K + 1);
    const double gamma = n * u / (1.0 - n * u);
    float *aa = abs_op(A, s->M, s->K, s->lda, s->ta), *ab = abs_op(B, s->K, s->N, s->ldb, s->tb);
    float *sab = kt_floats(s->M * s->N);
    double *ra = kt_doubles(s->M), *cb = kt_doubles(s->N);
    kern_gemm(sab, aa, ab, s->M, s->N, s->K, false, false, s->K, s->N, s->N, 1.0f, 0.0f);
    for (int64_t i = 0; i < s->M; i++) {
        ra[i] = 0.0;
        for (int64_t k = 0; k < s->K; k++) ra[i] += aa[i * s->K + k];
    }
    for (int64_t j = 0; j < s->N; j++) {
        cb[j] = 0.0;
        for (int64_t k = 0; k < s->K; k++) cb[j] += ab[k * s->N + j];
    }
    double worst = 0.0;
    int64_t wi = 0, wj = 0;
    for (int64_t i = 0; i < s->M; i++)
        for (int64_t j = 0; j < s->N; j++) {
            const double c0 = s->acc ? fabs((double)C0[i * s->ldc + j]) : 0.0;
            const double r = R[i * s->ldc + j];
            const double sum_ab = (double)sab[i * s->N + j] * (1.0 + 2.0 * n * u);
            const double bound = gamma * (sum_ab + c0) +
                                 tiny * (ra[i] + cb[j] + 2.0 * (double)s->K + 1.0) + u * fabs(r);
            const double dev = fabs((double)C[i * s->ldc + j] - r) / bound;
            if (!(dev <= worst)) worst = dev, wi = i, wj = j; /* NaN is the worst */
        }
    const int bad = !(worst <= 1.0);
    printf("%-4s %-56s worst %.3g of the bound at (%lld,%lld): got %.9g want %.9g\n",
           bad ? "FAIL" : "ok", what, worst, (long long)wi, (long long)wj,
           (double)C[wi * s->ldc + wj], (double)R[wi * s->ldc + wj]);
    if (bad) check_count_failure();
    free(aa), free(ab), free(sab), free(ra), free(cb);
    return bad;
}

/* C's padding columns (past N in each row) unchanged from C0. */
static int pad_kept(const shape *s, const float *C, const float *C0) {
    for (int64_t i = 0; i < s->M; i++)
        if (memcmp(C + i * s->ldc + s->N, C0 + i * s->ldc + s->N,
                   (size_t)(s->ldc - s->N) * sizeof *C) != 0)
            return 0;
    return 1;
}

/* With pair_copies and B untransposed: B's copy in the pair layout, registered on ctx and ctx3
 * (NULL otherwise; freed by the caller after clearing the registrations). */
static kern_bf16 *pair_copy(const shape *s, const kern_bf16 *B) {
    if (!pair_copies || s->tb) return NULL;
    const int64_t pe = kern_bf16_panel_elems(KERN_BF16_PANELS_PAIRS, s->K, s->N);
    kern_bf16 *P = kern_bf16_panel_alloc(pe);
    if (!P) exit(1);
    kern_bf16_panel_pack(KERN_BF16_PANELS_PAIRS, P, B, s->K, s->N, s->ldb);
    check_expect(kern_bf16_ctx_add_panel(ctx, B, s->K, s->N, s->ldb, P) == 0 &&
                     kern_bf16_ctx_add_panel(ctx3, B, s->K, s->N, s->ldb, P) == 0,
                 "pair copy of [%lld, %lld] registered", (long long)s->K, (long long)s->N);
    return P;
}

/* Each row of op(A)·B alone (M = 1) on x, then rows [1, M) as one batch: bit for bit C's rows. */
static int rows_alone(kern_bf16_ctx *x, const shape *s, const kern_bf16 *A, const kern_bf16 *B,
                      const float *C, const float *C0, float *C2) {
    const int64_t nc = s->M * s->ldc;
    memcpy(C2, C0, (size_t)nc * sizeof *C);
    for (int64_t i = 0; i < s->M; i++)
        kern_gemm_bf16(x, C2 + i * s->ldc, s->ta ? A + i : A + i * s->lda, B, 1, s->N, s->K, s->ta,
                       s->tb, s->lda, s->ldb, s->ldc, s->acc);
    int same = memcmp(C, C2, (size_t)nc * sizeof *C) == 0;
    memcpy(C2, C0, (size_t)nc * sizeof *C);
    kern_gemm_bf16(x, C2 + s->ldc, s->ta ? A + 1 : A + s->lda, B, s->M - 1, s->N, s->K, s->ta,
                   s->tb, s->lda, s->ldb, s->ldc, s->acc);
    return same && memcmp(C + s->ldc, C2 + s->ldc, (size_t)(nc - s->ldc) * sizeof *C) == 0;
}

/* One product on ctx vs the twin; also run-to-run, avx2 = portable, and (own paths and pair
 * copies, M > 1) each row alone and rows [1, M) together vs all rows at once. */
static void one(shape s, uint64_t seed) {
    const int64_t na = (s.ta ? s.K : s.M) * s.lda, nb = (s.tb ? s.N : s.K) * s.ldb;
    const int64_t nc = s.M * s.ldc;
    kern_bf16 *A = bf16_matrix(na, s.lda, seed), *B = bf16_matrix(nb, s.ldb, seed + 1);
    float *C0 = kt_floats(nc), *C = kt_floats(nc), *R = kt_floats(nc), *C2 = kt_floats(nc);
    kern_bf16 *P = pair_copy(&s, B);
    const int64_t hits = kern_bf16_ctx_panel_hits(ctx);
    kt_fill(C0, nc, seed + 2, -2, 2);
    for (int64_t i = 0; i < s.M; i++) /* overwrite must ignore C; the padding stays as it was */
        for (int64_t j = 0; j < s.N && !s.acc; j++) C0[i * s.ldc + j] = NAN;
    memcpy(C, C0, (size_t)nc * sizeof *C);
    memcpy(R, C0, (size_t)nc * sizeof *C);
    memcpy(C2, C0, (size_t)nc * sizeof *C);
    kern_gemm_bf16(ctx, C, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
    kern_gemm_bf16_ref(R, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
    char what[128];
    snprintf(what, sizeof what, "gemm_bf16 %c%c M=%lld N=%lld K=%lld %s", s.ta ? 'T' : 'N',
             s.tb ? 'T' : 'N', (long long)s.M, (long long)s.N, (long long)s.K, s.acc ? "+=" : "=");
    int bad = check_bound(what, &s, C, R, C0, A, B);
    if (!pad_kept(&s, C, C0)) bad |= check_expect(0, "%s: padding columns kept", what);
    if ((kern_bf16_ctx_panel_hits(ctx) - hits == 1) != (P != NULL))
        bad |= check_expect(0, "%s: %s the pair copy", what, P ? "read" : "did not read");
    const int small = s.M * s.N * s.K <= (P ? 20000000 : 2000000);
    if (small) kern_gemm_bf16(ctx, C2, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
    if (small && memcmp(C, C2, (size_t)nc * sizeof *C) != 0)
        bad |= check_expect(0, "%s: run to run bit-identical", what);
    if (plain_ctx && own && small) { /* avx2 vs portable: the same chains, the same bits */
        memcpy(C2, C0, (size_t)nc * sizeof *C);
        kern_gemm_bf16(plain_ctx, C2, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
        if (memcmp(C, C2, (size_t)nc * sizeof *C) != 0)
            bad |= check_expect(0, "%s: avx2 bit-equal to portable", what);
    }
    const int avx512 = kern_bf16_ctx_path(ctx) == KERN_BF16_AVX512; /* (its library's threads) */
    if (ctx3 && (own || P ||
                 avx512)) { /* threads: the columns split (from 2^20 multiply-adds), same bits */
        memcpy(C2, C0, (size_t)nc * sizeof *C);
        kern_gemm_bf16(ctx3, C2, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
        if (memcmp(C, C2, (size_t)nc * sizeof *C) != 0)
            bad |= check_expect(0, "%s: %s threads bit-equal to 1", what, P ? "2" : "3");
    }
    for (int c = 0; (own || P) && s.M > 1 && small && c < (P ? 2 : 1); c++)
        if (!rows_alone(c ? ctx3 : ctx, &s, A, B, C, C0, C2)) /* decode's M = 1, prefill's M */
            bad |= check_expect(0, "%s: rows alone and in a batch bit-equal to all rows (%s)", what,
                                c ? "threads" : "1 thread");
    (void)bad;
    if (P) kern_bf16_ctx_clear_panels(ctx), kern_bf16_ctx_clear_panels(ctx3);
    free(A), free(B), free(C0), free(C), free(R), free(C2), free(P);
}

static shape make(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool acc) {
    return (shape){M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 2, N + 5, ta, tb, acc};
}

static void shapes(void) {
    static const int64_t ext[] = {1, 7, 33, 100, 300};
    uint64_t seed = 1;
    for (int t = 0; t < 4; t++)
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 5; b++)
                for (int c = 0; c < 5; c++) {
                    const bool acc = (a + b + c + t) % 2;
                    one(make(ext[a], ext[b], ext[c], t & 1, t & 2, acc), seed += 3);
                }
    for (int t = 0; t < 4; t++)
        for (int64_t M = 2; M <= 4; M += 2) one(make(M, 37, 45, t & 1, t & 2, t == 1), seed += 3);
    one(make(7, 4100, 33, false, false, false), seed += 3);
    one(make(3, 4100, 20, true, false, true), seed += 3);
    one(make(9, 4100, 17, false, true, true), seed += 3);
    one(make(2, 16400, 9, false, false, true), seed += 3); /* past the streaming chunk */
    one(make(9, 16400, 9, true, false, false), seed += 3); /* 3 row groups, narrower chunks */
    one(make(1, 65600, 19, true, false, true), seed += 3); /* one row past its chunk of 65536 */
    one(make(1, 1029, 1411, false, false, false), seed += 3); /* decode's rows: prefetched groups */
    for (int t = 0; t < 4; t++) /* avx512: past its blocks of 512 values of K, 1024 columns */
        one(make(40, 1100, 530, t & 1, t & 2, t % 3 == 0), seed += 3);
    one(make(2100, 17, 20, false, true, true), seed += 3); /* ... and of 2048 rows */
    one(make(2100, 20, 17, true, false, false), seed += 3);
}

/* Inputs with bf16 denormals (under 2^-126) beside normal values: the bound's flush term. */
static void denormals(void) {
    const shape s = make(13, 21, 40, false, false, true);
    const int64_t na = s.M * s.lda, nb = s.K * s.ldb, nc = s.M * s.ldc;
    kern_bf16 *A = bf16_matrix(na, s.lda, 77), *B = bf16_matrix(nb, s.ldb, 78);
    for (int64_t i = 0; i < na; i += 3) A[i] = (kern_bf16)((A[i] & 0x8000) | (i % 127 + 1));
    for (int64_t i = 0; i < nb; i += 5) B[i] = (kern_bf16)((B[i] & 0x8000) | 0x0040);
    float *C0 = kt_floats(nc), *C = kt_floats(nc), *R = kt_floats(nc);
    kt_fill(C0, nc, 79, -1e-37f, 1e-37f);
    memcpy(C, C0, (size_t)nc * sizeof *C);
    memcpy(R, C0, (size_t)nc * sizeof *C);
    kern_bf16 *P = pair_copy(&s, B);
    kern_gemm_bf16(ctx, C, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
    kern_gemm_bf16_ref(R, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
    check_bound(P ? "gemm_bf16 with denormal inputs, pair copy" : "gemm_bf16 with denormal inputs",
                &s, C, R, C0, A, B);
    if (P) kern_bf16_ctx_clear_panels(ctx), kern_bf16_ctx_clear_panels(ctx3);
    free(A), free(B), free(C0), free(C), free(R), free(P);
}

/* kern_matmul_bf16, _dx_bf16, _dw_bf16 against the twin with their documented operands. */
static void wrappers(int64_t M, int64_t K, int64_t N) {
    kern_bf16 *x = bf16_matrix(M * K, K, 91), *w = bf16_matrix(K * N, N, 92);
    kern_bf16 *dy = bf16_matrix(M * N, N, 93);
    float *y = kt_floats(M * N), *yr = kt_floats(M * N), *g0 = kt_floats(M * K + K * N);
    float *dx = kt_floats(M * K), *dxr = kt_floats(M * K), *dw = kt_floats(K * N);
    float *dwr = kt_floats(K * N);
    kt_fill(g0, M * K + K * N, 94, -1, 1);
    memcpy(dw, g0, (size_t)(K * N) * sizeof *dw);
    memcpy(dwr, g0, (size_t)(K * N) * sizeof *dw);
    memcpy(dx, g0 + K * N, (size_t)(M * K) * sizeof *dx);
    memcpy(dxr, g0 + K * N, (size_t)(M * K) * sizeof *dx);
    kern_matmul_bf16(ctx, y, x, w, M, K, N);
    kern_gemm_bf16_ref(yr, x, w, M, N, K, false, false, K, N, N, false);
    shape s = {M, N, K, K, N, N, false, false, false};
    check_bound("matmul_bf16 y = x·w", &s, y, yr, yr, x, w);
    kern_matmul_dx_bf16(ctx, dx, dy, w, M, K, N, true);
    kern_gemm_bf16_ref(dxr, dy, w, M, K, N, false, true, N, N, K, true);
    s = (shape){M, K, N, N, N, K, false, true, true};
    check_bound("matmul_dx_bf16 dx += dy·wᵀ", &s, dx, dxr, g0 + K * N, dy, w);
    kern_matmul_dw_bf16(ctx, dw, x, dy, M, K, N);
    kern_gemm_bf16_ref(dwr, x, dy, K, N, M, true, false, K, N, N, true);
    s = (shape){K, N, M, K, N, N, true, false, true};
    check_bound("matmul_dw_bf16 dw += xᵀ·dy", &s, dw, dwr, g0, x, dy);
    free(x), free(w), free(dy), free(y), free(yr), free(g0), free(dx), free(dxr), free(dw);
    free(dwr);
}

static kern_bf16_ctx *row_ctx; /* avx2 path, no panel copies: the row-major one-row kernel */

/* One row against op(B) = the [K, N] block at row r0, column j0 of a weight W (row stride ldw)
 * with a registered panel copy, on ctx and ctx3: the twin's bound; K16 (avx2): bit for bit the
 * row-major kernels' result (row_ctx's, the portable path's); PAIRS: ctx3's bits ctx's. hit:
 * whether the block must be read from the copy (its first column a multiple of 16 from W's; PAIRS
 * also its first row even, an odd K ending at W's last row). */
static void panel_block(const kern_bf16 *W, int64_t ldw, int64_t r0, int64_t j0, int64_t N,
                        int64_t K, bool ta, bool acc, int hit, uint64_t seed) {
    const shape s = {1, N, K, ta ? 3 : K, ldw, N, ta, false, acc};
    const kern_bf16 *B = W + r0 * ldw + j0;
    const int k16 = kern_bf16_ctx_panels(ctx) == KERN_BF16_PANELS_K16;
    kern_bf16 *A = bf16_matrix(ta ? 3 * K : K, ta ? 3 : K, seed);
    float *C0 = kt_floats(N), *C = kt_floats(N), *R = kt_floats(N), *R2 = kt_floats(N);
    kt_fill(C0, N, seed + 1, -2, 2);
    for (int64_t j = 0; j < N && !acc; j++) C0[j] = NAN;
    memcpy(R, C0, (size_t)N * sizeof *C);
    kern_gemm_bf16_ref(R, A, B, 1, N, K, ta, false, s.lda, ldw, N, acc);
    char what[128];
    snprintf(what, sizeof what, "panel %c row N=%lld K=%lld at (%lld,%lld) %s", ta ? 'T' : 'N',
             (long long)N, (long long)K, (long long)r0, (long long)j0, acc ? "+=" : "=");
    for (int c = 0; c < 2; c++) {
        kern_bf16_ctx *x = c ? ctx3 : ctx;
        const int64_t hits = kern_bf16_ctx_panel_hits(x);
        memcpy(R2, C, (size_t)N * sizeof *C); /* (c = 1: ctx's result) */
        memcpy(C, C0, (size_t)N * sizeof *C);
        kern_gemm_bf16(x, C, A, B, 1, N, K, ta, false, s.lda, ldw, N, acc);
        if (c == 0) check_bound(what, &s, C, R, C0, A, B);
        if (!k16 && c == 1 && hit && memcmp(C, R2, (size_t)N * sizeof *C))
            check_expect(0, "%s: 2 threads bit-equal to 1", what);
        for (int r = 0; k16 && r < 2; r++) {
            memcpy(R2, C0, (size_t)N * sizeof *C);
            kern_gemm_bf16(r ? plain_ctx : row_ctx, R2, A, B, 1, N, K, ta, false, s.lda, ldw, N,
                           acc);
            if (memcmp(C, R2, (size_t)N * sizeof *C))
                check_expect(0, "%s (%d threads): bit-equal to the %s kernel", what, c ? 3 : 1,
                             r ? "portable" : "avx2 row-major");
        }
        if ((kern_bf16_ctx_panel_hits(x) - hits == 1) != hit)
            check_expect(0, "%s: %s the panel copy", what, hit ? "read" : "did not read");
    }
    free(A), free(C0), free(C), free(R), free(R2);
}

/* The panel copy in ctx's layout, in kern_bf16_panel_alloc's storage (checked 2 MB-aligned and
 * zeroed): weights of N (not a multiple of 16 but one) by K, with a padded row stride, whole and by
 * blocks (from row 1 (K16) or 2 (PAIRS) and column 16: read from the copy; from column 3, or
 * (PAIRS) from row 1: not), A's row contiguous or strided, accumulate or overwrite, each against
 * the twin (and K16: the row-major kernels' bits); a cleared copy is not read. Paths without
 * copies refuse one. */
static void panels(void) {
    static const int64_t ns[] = {1, 7, 16, 33, 100, 1029}, ks[] = {1, 7, 33, 100, 1411};
    kern_bf16 dummy = 0;
    char msg[256];
    const kern_bf16_panel_layout l = kern_bf16_ctx_panels(ctx);
    if (l == KERN_BF16_PANELS_NONE) {
        check_expect(kern_bf16_ctx_add_panel(ctx, &dummy, 1, 1, 1, &dummy) < 0,
                     "path %s refuses a panel copy", kern_bf16_path_name(kern_bf16_ctx_path(ctx)));
        return;
    }
    if (l == KERN_BF16_PANELS_K16 &&
        !(row_ctx = kern_bf16_ctx_create(KERN_BF16_AVX2, 1, msg, sizeof msg))) {
        check_expect(0, "contexts for the panel test: %s", msg);
        return;
    }
    if (!ctx3 || (l == KERN_BF16_PANELS_K16 && !plain_ctx)) {
        check_expect(0, "contexts for the panel test");
        return;
    }
    uint64_t seed = 500;
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 5; b++) {
            const int64_t N = ns[a], K = ks[b], ldw = N + 2, r1 = l == KERN_BF16_PANELS_K16 ? 1 : 2;
            const bool ta = (a + b) % 2, acc = (a + 2 * b) % 3 == 1;
            kern_bf16 *W = bf16_matrix(K * ldw, ldw, seed += 7);
            const int64_t pe = kern_bf16_panel_elems(l, K, N);
            kern_bf16 *P = kern_bf16_panel_alloc(pe);
            int64_t nz = 0; /* the storage: 2 MB-aligned (huge pages), zeroed */
            for (int64_t i = 0; P && i < pe; i++) nz += P[i] != 0;
            check_expect(P && (uintptr_t)P % (2u << 20) == 0 && nz == 0,
                         "panel storage of %lld values 2 MB-aligned and zeroed (%lld non-zero)",
                         (long long)pe, (long long)nz);
            if (!P) return;
            kern_bf16_panel_pack(l, P, W, K, N, ldw);
            check_expect(kern_bf16_ctx_add_panel(ctx, W, K, N, ldw, P) == 0 &&
                             kern_bf16_ctx_add_panel(ctx3, W, K, N, ldw, P) == 0,
                         "panel copy of [%lld, %lld] registered", (long long)K, (long long)N);
            panel_block(W, ldw, 0, 0, N, K, ta, acc, 1, seed + 1);
            if (N > 16 && K > r1) /* a block inside: row r1 on, columns 16 on */
                panel_block(W, ldw, r1, 16, N - 16 - (N > 40), K - r1, !ta, !acc, 1, seed + 2);
            if (N > 3) panel_block(W, ldw, 0, 3, N - 3, K, ta, acc, 0, seed + 3);
            if (r1 == 2 && K > 2) /* PAIRS: an odd first row; an odd K short of the last row */
                panel_block(W, ldw, 1, 0, N, K - 1, ta, acc, 0, seed + 5),
                    panel_block(W, ldw, 0, 0, N, K - 1 - K % 2, ta, acc, 0, seed + 6);
            kern_bf16_ctx_clear_panels(ctx);
            kern_bf16_ctx_clear_panels(ctx3);
            panel_block(W, ldw, 0, 0, N, K, ta, acc, 0, seed + 4); /* forgotten */
            free(W), free(P);
        }
    kern_bf16_ctx_destroy(row_ctx);
}

/* avx512 after a panel copy was registered (panels()): every product of ctx on the own
 * kernels, whatever M and the transposes: each row alone equal to the same row in a batch, and
 * the whole equal to the avx2 path's bits, bit for bit (serve's batch invariance). */
static void own_after_panels(void) {
    static const int64_t ext[] = {1, 7, 33, 100};
    char msg[256];
    kern_bf16_ctx *avx2 = kern_bf16_ctx_create(KERN_BF16_AVX2, 1, msg, sizeof msg);
    if (check_expect(avx2 != NULL, "an avx2 context: %s", avx2 ? "made" : msg)) return;
    uint64_t seed = 900;
    for (int t = 0; t < 4; t++)
        for (int e = 0; e < 16; e++) {
            const shape s = make(ext[e % 4] + 40 * (e == 3), ext[(e / 4 + t) % 4], ext[e / 4],
                                 t & 1, t & 2, (e + t) % 2);
            const int64_t na = (s.ta ? s.K : s.M) * s.lda, nb = (s.tb ? s.N : s.K) * s.ldb;
            const int64_t nc = s.M * s.ldc;
            kern_bf16 *A = bf16_matrix(na, s.lda, seed++), *B = bf16_matrix(nb, s.ldb, seed++);
            float *C0 = kt_floats(nc), *C = kt_floats(nc), *R = kt_floats(nc), *C1 = kt_floats(nc);
            kt_fill(C0, nc, seed++, -2, 2);
            memcpy(C, C0, (size_t)nc * sizeof *C);
            memcpy(R, C0, (size_t)nc * sizeof *C);
            memcpy(C1, C0, (size_t)nc * sizeof *C);
            kern_gemm_bf16(ctx, C, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
            kern_gemm_bf16(avx2, R, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
            for (int64_t i = 0; i < s.M; i++)
                kern_gemm_bf16(ctx, C1 + i * s.ldc, s.ta ? A + i : A + i * s.lda, B, 1, s.N, s.K,
                               s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
            check_expect(!memcmp(C, R, (size_t)nc * sizeof *C) &&
                             !memcmp(C, C1, (size_t)nc * sizeof *C),
                         "avx512 with panel copies, %c%c M=%lld N=%lld K=%lld %s: the avx2 "
                         "path's bits, each row alone the batch's",
                         s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', (long long)s.M, (long long)s.N,
                         (long long)s.K, s.acc ? "+=" : "=");
            free(A), free(B), free(C0), free(C), free(R), free(C1);
        }
    kern_bf16_ctx_destroy(avx2);
}

/* avx512bf16 with pair copies (its own kernel, whatever M): shapes() again (M, N, K of 1..300,
 * every transpose, with B's copy registered where B is untransposed), inputs with denormals, and
 * shapes past a tile of 12 rows × 32 columns and the thread split (2 threads), odd K. */
static void pair_shapes(void) {
    char msg[256];
    if (kern_bf16_ctx_panels(ctx) != KERN_BF16_PANELS_PAIRS) return;
    if (!(ctx3 = kern_bf16_ctx_create(KERN_BF16_AVX512BF16, 2, msg, sizeof msg))) {
        check_expect(0, "a context of 2 threads: %s", msg);
        return;
    }
    pair_copies = 1;
    shapes();
    denormals();
    uint64_t seed = 900;
    one(make(70, 129, 300, false, false, false), seed += 3);
    one(make(70, 129, 301, false, false, true), seed += 3);
    one(make(70, 129, 301, true, false, false), seed += 3);
    one(make(25, 1000, 777, false, false, true), seed += 3);
    one(make(1, 3000, 1001, false, false, false), seed += 3);
    pair_copies = 0;
}

/* The path API: each path available exactly when kern_bf16_path_check says so, auto the first
 * available, an unknown name or a path this CPU lacks refused with a message naming what is. */
static void paths_api(void) {
    char msg[256], cpu[64];
    kern_cpu_model(cpu, sizeof cpu);
    check_expect(cpu[0] != '\0' && strlen(cpu) <= 48, "CPU model \"%s\"", cpu);
    kern_bf16_path first = KERN_BF16_PATH_COUNT, r;
    for (int p = KERN_BF16_AMX; p < KERN_BF16_PATH_COUNT; p++) {
        msg[0] = '\0';
        const int ok = kern_bf16_path_check((kern_bf16_path)p, &r, msg, sizeof msg) == 0;
        /* auto: the first available, avx512bf16 only where it outruns the FMAs */
        if (ok && first == KERN_BF16_PATH_COUNT &&
            (p != KERN_BF16_AVX512BF16 || kern_bf16_path_outruns_fp32((kern_bf16_path)p)))
            first = (kern_bf16_path)p;
        check_expect(ok ? r == (kern_bf16_path)p : strstr(msg, "paths available here") != NULL,
                     "path %s: %s", kern_bf16_path_name((kern_bf16_path)p), ok ? "available" : msg);
    }
    check_expect(kern_bf16_path_check(KERN_BF16_AUTO, &r, msg, sizeof msg) == 0 && r == first,
                 "auto resolves to %s", kern_bf16_path_name(first));
    const char *was = getenv(KERN_BF16_PATH_ENV);
    char keep[64] = "";
    if (was) snprintf(keep, sizeof keep, "%s", was);
    setenv(KERN_BF16_PATH_ENV, "tpu", 1);
    check_expect(kern_bf16_path_from_env(&r, msg, sizeof msg) == -1 &&
                     strstr(msg, "unknown bf16 path") && strstr(msg, "avx2"),
                 "an unknown path is refused: %s", msg);
    if (was)
        setenv(KERN_BF16_PATH_ENV, keep, 1);
    else
        unsetenv(KERN_BF16_PATH_ENV);
}

/* --dnnl-glue: the oneDNN paths' code (primitive per key, strides, transposes, sum post-op, the
 * table's eviction) on fp32 operands holding bf16 values, which oneDNN runs on any CPU: products
 * exact in fp32 as on the bf16 paths, so the same bound holds. 512 distinct products, past
 * KERN_BF16_MAX_PRIMS, so the table evicts; then the same products again (made anew). */
static int dnnl_glue(void) {
    char msg[256];
    if (!bf16_dnnl_built()) {
        printf("SKIP this build has no oneDNN\n");
        return 77;
    }
    bf16_dnnl *d = bf16_dnnl_create(BF16_DNNL_ANY, 1, msg, sizeof msg);
    if (check_expect(d != NULL, "oneDNN handle (%s)", d ? "made" : msg))
        return check_finish("kern_bf16_dnnl_glue");
    static const int64_t ext[] = {1, 7, 33, 100};
    uint64_t seed = 5;
    for (int round = 0; round < 2; round++)
        for (int t = 0; t < 8; t++)
            for (int e = 0; e < 64; e++) {
                const shape s = make(ext[e % 4], ext[e / 4 % 4], ext[e / 16], t & 1, t & 2, t & 4);
                const int64_t na = (s.ta ? s.K : s.M) * s.lda, nb = (s.tb ? s.N : s.K) * s.ldb;
                const int64_t nc = s.M * s.ldc;
                kern_bf16 *A = bf16_matrix(na, s.lda, seed++), *B = bf16_matrix(nb, s.ldb, seed++);
                float *fa = kt_floats(na), *fb = kt_floats(nb), *C0 = kt_floats(nc);
                float *C = kt_floats(nc), *R = kt_floats(nc);
                kern_bf16_unpack(fa, A, na);
                kern_bf16_unpack(fb, B, nb);
                kt_fill(C0, nc, seed++, -2, 2);
                for (int64_t i = 0; i < nc && !s.acc; i++)
                    if (i % s.ldc < s.N) C0[i] = NAN;
                memcpy(C, C0, (size_t)nc * sizeof *C);
                memcpy(R, C0, (size_t)nc * sizeof *C);
                const int rc = bf16_dnnl_gemm(d, true, C, fa, fb, s.M, s.N, s.K, s.ta, s.tb, s.lda,
                                              s.ldb, s.ldc, s.acc);
                kern_gemm_bf16_ref(R, A, B, s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.acc);
                char what[128];
                snprintf(what, sizeof what, "oneDNN f32 %c%c M=%lld N=%lld K=%lld %s (round %d)",
                         s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', (long long)s.M, (long long)s.N,
                         (long long)s.K, s.acc ? "+=" : "=", round);
                if (!check_expect(rc == 0, "%s: made and ran", what)) {
                    check_bound(what, &s, C, R, C0, A, B);
                    if (!pad_kept(&s, C, C0)) check_expect(0, "%s: padding columns kept", what);
                }
                free(A), free(B), free(fa), free(fb), free(C0), free(C), free(R);
            }
    bf16_dnnl_destroy(d);
    return check_finish("kern_bf16_dnnl_glue");
}

int main(int argc, char **argv) {
    char msg[256];
    if (argc > 1 && strcmp(argv[1], "--dnnl-glue") == 0) return dnnl_glue();
    paths_api();
    int status;
    if (!(ctx = kt_bf16_ctx(&status))) return status == 77 ? 77 : check_finish("kern_gemm_bf16");
    const kern_bf16_path path = kern_bf16_ctx_path(ctx);
    own = path == KERN_BF16_AVX2 || path == KERN_BF16_PORTABLE;
    if (path == KERN_BF16_AVX2 || path == KERN_BF16_AVX512)
        plain_ctx = kern_bf16_ctx_create(KERN_BF16_PORTABLE, 1, msg, 256);
    if ((own || path == KERN_BF16_AVX512) &&
        !(ctx3 = kern_bf16_ctx_create(path, 3, msg, sizeof msg)))
        check_expect(0, "a context of 3 threads: %s", msg);
    shapes();
    denormals();
    wrappers(67, 33, 50);
    wrappers(1, 100, 300);
    pair_shapes();
    panels();
    if (path == KERN_BF16_AVX512) own_after_panels();
    const double rate = kern_bf16_measure_flops(ctx, 48, 0.01);
    check_expect(rate > 0 && rate < 1e16, "measured bf16 rate %.3g FLOP/s (positive, finite)",
                 rate);
    check_expect(kern_bf16_ctx_fallbacks(ctx) == 0,
                 "no product fell back from oneDNN to the avx2 kernels (%lld did)",
                 (long long)kern_bf16_ctx_fallbacks(ctx));
    kern_bf16_ctx_destroy(ctx);
    kern_bf16_ctx_destroy(plain_ctx);
    kern_bf16_ctx_destroy(ctx3);
    return check_finish("kern_gemm_bf16");
}
