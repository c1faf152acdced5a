/* Shared helpers of the kernel tests: deterministic inputs (a local LCG, independent of the
 * kernels' own RNG), tolerance checks that print the worst deviation and where it is, and central
 * finite differences in double. Failures are counted by tests/common/check (check_expect for
 * plain conditions, check_finish for the exit status). Tolerance convention (house style):
 *   |a − b| ≤ k·eps·(|a| + |b| + 1), eps = FLT_EPSILON, k stated by each caller. */
#ifndef MT_TESTS_KTEST_H
#define MT_TESTS_KTEST_H
#include <stdint.h>

#include "check.h"
#include "kernels/gemm_bf16.h"

/* n floats (doubles), uninitialized, freed with free(); a test that cannot have them prints one
 * FAIL line and exits 1. */
float *kt_floats(int64_t n);
double *kt_doubles(int64_t n);
/* A test's buffers, freed together (kt_bufs_free). */
typedef struct {
    void *p[32];
    int n;
} kt_bufs;
/* n floats (doubles) each for the float ** (double **) arguments, a NULL ending the list, as
 * kt_floats does; recorded in b. */
void kt_bufs_floats(kt_bufs *b, int64_t n, ...);
void kt_bufs_doubles(kt_bufs *b, int64_t n, ...);
void kt_bufs_free(kt_bufs *b);
/* x[i] uniform in [lo, hi) from a fixed LCG stream `seed`. */
void kt_fill(float *x, int64_t n, uint64_t seed, float lo, float hi);
void kt_fill_d(double *x, int64_t n, uint64_t seed, double lo, double hi);
/* Checks a[i] vs b[i] (got vs truth). Prints one line "ok"/"FAIL" with the worst
 * |a−b|/(eps(|a|+|b|+1)) and its index; counts a failure. Returns 1 on failure. */
int kt_close(const char *what, const float *a, const float *b, int64_t n, double k);
int kt_close_d(const char *what, const float *a, const double *b, int64_t n, double k);
/* Bit-exact comparison. */
int kt_equal(const char *what, const float *a, const float *b, int64_t n);
/* Central differences of a double loss: fd[i] = (L(x + h·e_i) − L(x − h·e_i)) / 2h for i < n,
 * where loss(ctx) reads x through ctx; x is restored after each i. */
void kt_fd_grad(double *fd, double *x, int64_t n, double h, double (*loss)(const void *ctx),
                const void *ctx);
/* The bf16 context of the per-path tests: the path MESHTRAIN_BF16_PATH forces (unset: auto).
 * Prints "bf16 path P on CPU"; or returns NULL with *status 77 after "SKIP <why>" when this CPU
 * lacks the path, or with *status 1 (a failure counted) when the context cannot be made. */
kern_bf16_ctx *kt_bf16_ctx(int *status);
#endif
