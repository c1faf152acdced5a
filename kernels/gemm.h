/* gemm: every matmul of meshtrain goes through here (OpenBLAS sgemm), with a naive twin.
 * Row-major. Depends on cblas only. No MPI; no allocation inside a product (a kern_f32_ctx's
 * table is allocated by its create and add_panel, at load; the start-up measurements allocate
 * their operands). No state but the bug handler's: the panel copies' table is the caller's. */
#ifndef MT_KERNELS_GEMM_H
#define MT_KERNELS_GEMM_H
#include <stdbool.h>
#include <stdint.h>

/* A kernel called with sizes it cannot serve (an extent past cblas's int) is a caller's bug. The
 * handler reports it the program's way (meshtrain: mesh_abort, naming the rank, ending the job)
 * and does not return; without one, the kernel prints to stderr and aborts. */
typedef void (*kern_bug_fn)(const char *msg);
void kern_set_bug_handler(kern_bug_fn fn);

/* C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C[M,N]; op(X) = Xᵀ when the flag is set.
 * lda/ldb/ldc are row strides of A, B, C as stored (A stored [M,K] or, transposed, [K,M]).
 * beta = 0 overwrites C (C may hold garbage); beta = 1 accumulates. No panel copies (those are
 * read through kern_gemm_ctx). */
void kern_gemm(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K, bool ta,
               bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta);
/* Naive twin of kern_gemm (double accumulation). */
void kern_gemm_ref(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                   bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                   float beta);

/* y[M,N] = x[M,K] · w[K,N]. Overwrites y. */
void kern_matmul(float *restrict y, const float *restrict x, const float *restrict w, int64_t M,
                 int64_t K, int64_t N);
/* dw[K,N] += x[M,K]ᵀ · dy[M,N]. Accumulates (weight gradient). */
void kern_matmul_dw(float *restrict dw, const float *restrict x, const float *restrict dy,
                    int64_t M, int64_t K, int64_t N);
/* dx[M,K] (=, or += when acc) dy[M,N] · w[K,N]ᵀ (input gradient). */
void kern_matmul_dx(float *restrict dx, const float *restrict dy, const float *restrict w,
                    int64_t M, int64_t K, int64_t N, bool acc);

/* Sets the number of BLAS threads for this process (1 = single-threaded). */
void kern_set_threads(int n);
/* Measures this process's matmul throughput in FLOP/s (about `seconds` long) over the three
 * products of a training step, y = x·w, dx = dy·wᵀ and dw += xᵀ·dy, each n×n×n, in turn. */
double kern_measure_flops(int64_t n, double seconds);
/* The same for the forward's product y = x·w alone (inference: every product is one), which
 * runs faster than the backward's two when it takes gemm_nn; panels = 1 where kern_f32_panels:
 * on a panel copy of w (registered on a context of its own), as fp32 inference's products run
 * when the model makes copies (the caller says whether it does). */
double kern_measure_flops_fwd(int64_t n, double seconds, int panels);
/* The same on the rate of a core the caller has to itself: with one BLAS thread timed by the
 * thread's CPU clock, so that other processes on the core (other ranks, other jobs) do not lower
 * it; with more BLAS threads the same as kern_measure_flops. */
double kern_measure_core_flops(int64_t n, double seconds);
/* The panel layout of an fp32 weight B[K, N] for the forward's products (gemm_f32_panel.c):
 * panels of 16 columns, each [K][16] contiguous, the last padded with zeros,
 * kern_f32_panel_elems(K, N) values in all: sgemm's packed B, made once instead of per call. */
int64_t kern_f32_panel_elems(int64_t K, int64_t N);
/* B[K, N] (row stride ldb) into the panel layout at P (kern_f32_panel_elems(K, N) values). */
void kern_f32_panel_pack(float *P, const float *B, int64_t K, int64_t N, int64_t ldb);
/* 1 if this CPU runs kern_f32_panel_gemm's AVX2 + FMA tiles (elsewhere it is a plain loop). */
int kern_f32_panel_available(void);
/* C[M,N] (=, or += when acc) A[M,K] · B[K,N], B given by its panels: panel p (columns 16p..)
 * at P + p·ps, row k of it at + 16k (ps >= 16·K; P may point inside a larger panel copy, at a
 * row and a panel of it). C may hold garbage when acc = 0. Each element is one chain of fmas
 * over k in order from 0 (or from C), whatever M: a row's bits do not depend on its batch. */
void kern_f32_panel_gemm(float *C, const float *A, const float *P, int64_t ps, int64_t M, int64_t N,
                         int64_t K, int64_t lda, int64_t ldc, int acc);
/* The same chains in a plain loop (the tests' twin; the path off AVX2). */
void kern_f32_panel_gemm_plain(float *C, const float *A, const float *P, int64_t ps, int64_t M,
                               int64_t N, int64_t K, int64_t lda, int64_t ldc, int acc);
/* 1 if kern_gemm_ctx can run fp32 panel copies here: this CPU has the AVX2 + FMA tiles (with or
 * without the AVX-512 of kern_gemm_nn, which reads the weight in place), and the BLAS runs one thread
 * (kern_set_threads; the tiles are not threaded). Whether to make copies is the caller's choice;
 * it makes them only where this says 1. */
int kern_f32_panels(void);

/* An fp32 panel context: the table of registered panel copies that kern_gemm_ctx reads, and its
 * counters. Its owner (the model) creates it, registers its copies and frees it; kernels/ keeps
 * no table of its own. A context serves one calling thread at a time (a product updates its
 * last hit and its count). */
typedef struct kern_f32_ctx kern_f32_ctx;
/* An empty context (allocates its struct; its table grows with kern_f32_ctx_add_panel); NULL
 * when out of memory. */
kern_f32_ctx *kern_f32_ctx_create(void);
/* Frees the context and its table, not the copies (NULL: nothing). */
void kern_f32_ctx_destroy(kern_f32_ctx *ctx);
/* Registers P, the panel copy of B[K, N] (row stride ldb), which the caller owns and keeps equal
 * to B (packing it again, and registering it again, when B changes) until
 * kern_f32_ctx_drop_panels. From then on kern_gemm_ctx(ctx, ...)'s untransposed products with
 * alpha 1 and beta 0 or 1 on one BLAS thread whose B is B or a block of it starting on a panel's
 * first column (a multiple of 16) read the copy. Registering B again replaces its entry.
 * Returns 0; KERN_F32_CANNOT (nothing registered) when kern_f32_panels is 0 or the arguments are
 * not a weight and its copy (K, N < 1, ldb < N, NULL); KERN_F32_NO_MEMORY when the table could
 * not grow. */
enum { KERN_F32_CANNOT = -1, KERN_F32_NO_MEMORY = -2 };
int kern_f32_ctx_add_panel(kern_f32_ctx *ctx, const float *B, int64_t K, int64_t N, int64_t ldb,
                           const float *P);
/* Forgets the registered copies stored in P[0, elems) (a model's block of them). */
void kern_f32_ctx_drop_panels(kern_f32_ctx *ctx, const float *P, int64_t elems);
/* Products run on this context's registered copies (the tests check the copies were used). */
int64_t kern_f32_ctx_panel_hits(const kern_f32_ctx *ctx);
/* kern_gemm, reading ctx's registered copies where the product is one they serve (above); ctx
 * NULL or holding none: kern_gemm itself. */
void kern_gemm_ctx(kern_f32_ctx *ctx, float *C, const float *A, const float *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   float alpha, float beta);
/* kern_matmul through kern_gemm_ctx. */
void kern_matmul_ctx(kern_f32_ctx *ctx, float *restrict y, const float *restrict x,
                     const float *restrict w, int64_t M, int64_t K, int64_t N);
#endif