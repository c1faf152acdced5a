/* gemm_bf16: matmuls on bf16 inputs with fp32 accumulation and fp32 results (a TPU's MXU
 * arithmetic), with the shape conventions of kern_gemm (gemm.h), a naive twin in double, and the
 * measured rate. Depends on bf16.h and cpu.h, and on oneDNN (libdnnl) where the build found it.
 * No MPI; no allocation inside a product (the context holds the workspace).
 *
 * Paths, picked at run time from the CPU (kern_bf16_path_check; MESHTRAIN_BF16_PATH forces one):
 *   amx         oneDNN's matmul with its ISA capped at AVX512_CORE_AMX: AMX tiles (tdpbf16ps).
 *               Needs AMX-BF16 and the OS's grant of the tile state (kern_cpu_amx_grant).
 *   avx512bf16  oneDNN's matmul capped at AVX512_CORE_BF16: vdpbf16ps; but a product against a
 *               weight with a registered panel copy (inference) runs on meshtrain's own
 *               vdpbf16ps kernel over the copy (gemm_bf16_pairs.c), whatever M.
 *   avx512      bf16 operands widened to fp32 and multiplied on AVX-512's FMA units by the fp32
 *               product (gemm_bf16_wide.c: kern_gemm's library, oneDNN's sgemm where
 *               kernels/sgemm_lib.c picks it, else OpenBLAS); rows of few (M ≤ 32) and, once a
 *               panel copy is registered, every product on the avx2 path's kernels. Needs AVX-512F.
 *   avx2        meshtrain's own kernels (gemm_bf16_avx2.c): bf16 widened to fp32 in registers,
 *               AVX2 fmas; decode's rows (M ≤ 32) read B in place, once (one row: its own
 *               matrix-vector kernel, or B's panel copy where one is registered, below).
 *   portable    the same arithmetic in plain C, for any CPU (slow).
 * auto takes the first of these the CPU has, but avx512bf16 only where it outruns the FMAs
 * (kern_bf16_path_outruns_fp32: not on Intel, where vdpbf16ps retires one every ~2 cycles, so
 * avx512's widened fp32 runs about twice as fast). oneDNN's ISA cap is process-wide and set once,
 * so a process runs one oneDNN path; the tests run one process per path. oneDNN 2.6 has no bf16
 * matmul for a CPU without AVX-512 (primitive creation returns "unimplemented"), and libxsmm 1.17's
 * bf16 kernels also need AVX-512: there the own kernels are the only fast path.
 *
 * Numbers (each C element; u = 2^-24):
 *   avx2, portable: one fp32 chain over k = 0..K-1 in order from 0 (or from C when accumulating);
 *     products of bf16 values are exact in fp32, so both paths give the same bits (but for
 *     products under 2^-126 or past fp32's range), and a row's result depends on nothing but its
 *     row of op(A) and op(B): not on M (decode and prefill agree bit for bit), nor on N, the
 *     transposes, the strides, the blocking or the thread count.
 *   avx512: the same exact products, summed in the fp32 library's order over blocks of 512
 *     values of K taken in order (gemm_bf16_wide.c), which may depend on the shape, M and the
 *     library's thread count (OpenBLAS's, kern_set_threads), not on the run: bit-identical run to
 *     run. With M ≤ 32 (B untransposed or not), and on every product once a panel copy is
 *     registered (inference), the avx2 path's chains and bits: a row's result then depends on
 *     nothing but its row, as on the own paths (serve's batch invariance). No flush to zero.
 *   amx, avx512bf16: oneDNN's order of summation (pairs of k per instruction, its blocking of K,
 *     which may depend on the shape and the thread count); denormal inputs and results are
 *     flushed to zero by the instructions. Bit-identical run to run for the same shapes and
 *     thread count (oneDNN's promise, with a fixed thread count); a row's result may depend on
 *     M.
 *   avx512bf16 against a registered panel copy (PAIRS, below): one chain per element over the
 *     pairs of k in order, q = 0..⌈K/2⌉ − 1, from 0 (or from C), each step a vdpbf16ps (its two
 *     products added in the instruction's order; denormals flushed). A row's result depends on
 *     its row of op(A) and on B alone, not on M, the tile, the place in the batch, the strides
 *     or the thread count, as on the own paths; but the order is pairs of k, not the avx2 chain,
 *     so its bits are NOT the avx2 or portable paths' (nor oneDNN's beyond K ≈ 100).
 *   Every path: |c − Σ a·b| ≤ γ_{K+1}·(Σ|a·b| + |C₀|) + 2^-126·(Σ(|a| + |b|) + 2K + 1),
 *   γ_n = n·u/(1 − n·u), against the exact sum of the bf16 inputs' products (the test's bound).
 *
 * What the model calls: weights are kept fp32 (master) and copied to bf16 once per update with
 * kern_bf16_pack (bf16.h); activations a product consumes are stored bf16 (kern_bf16_pack after
 * the fp32 kernel that makes them). The upstream gradient dy of the backward's products is
 * rounded to bf16 ONCE by the caller (kern_bf16_pack into a bf16 buffer), and the same bf16 dy
 * then feeds both kern_matmul_dx_bf16 and kern_matmul_dw_bf16: one pass over dy for the two
 * products, half its bytes read by each. */
#ifndef MT_KERNELS_GEMM_BF16_H
#define MT_KERNELS_GEMM_BF16_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"

/* The variable that forces a path (its value: a kern_bf16_path_name, or "auto"). */
#define KERN_BF16_PATH_ENV "MESHTRAIN_BF16_PATH"

typedef enum {
    KERN_BF16_AUTO,
    KERN_BF16_AMX,
    KERN_BF16_AVX512BF16,
    KERN_BF16_AVX512,
    KERN_BF16_AVX2,
    KERN_BF16_PORTABLE,
    KERN_BF16_PATH_COUNT
} kern_bf16_path;

/* "auto", "amx", "avx512bf16", "avx512", "avx2", "portable". */
const char *kern_bf16_path_name(kern_bf16_path p);
/* 1 if path p multiplies faster than fp32 on this CPU, which --compute-dtype auto takes bf16 on:
 * AMX; AVX512-BF16 on AMD (Zen 4: vdpbf16ps twice the FLOPs of an fp32 FMA a cycle), not on
 * Intel without AMX, where vdpbf16ps retires one every ~2 cycles: on an Emerald Rapids core a
 * register-only loop ran 85 GFLOP/s of vdpbf16ps against 175 of fp32 FMAs, and oneDNN's bf16
 * matmul (PyTorch's too) and a hand-written 12x32 vdpbf16ps tile 74-86, oneDNN's fp32 sgemm
 * 100-164 on the same shapes (gemm_bench). Never avx512, avx2 or portable: they multiply in fp32
 * at fp32's rate at best (and widen first), so bf16 buys only halved operand bytes there. */
int kern_bf16_path_outruns_fp32(kern_bf16_path p);
/* Whether this CPU, its OS and this build can run path p (AUTO: always). Returns 0 and sets
 * *resolved (AUTO resolved to the fastest path available); or returns -1 and writes why into
 * msg[size], naming the CPU and the paths it has, e.g. "bf16 path amx: this CPU (AMD EPYC) has no
 * AMX-BF16; paths available here: avx2, portable". */
int kern_bf16_path_check(kern_bf16_path p, kern_bf16_path *resolved, char *msg, size_t size);
/* The path a program starts with: MESHTRAIN_BF16_PATH's value (unset or empty: auto), parsed and
 * checked as kern_bf16_path_check does. Returns 0 and sets *resolved, or -1 with the message in
 * msg (an unknown name lists the known ones). The program prints the message once and exits 2;
 * the kernels neither print nor exit. */
int kern_bf16_path_from_env(kern_bf16_path *resolved, char *msg, size_t size);

/* A bf16 context: the chosen path and what it needs between calls. Own paths: the workspace of
 * the packed panels, a fixed 1.2 MB per thread whatever the shapes (blocking bounds it), so there
 * is nothing to size; with several threads, a pool of workers. oneDNN paths: the engine, the
 * stream and a table of primitives, one per distinct product (shape, strides, transposes,
 * accumulate), made by the product's first call (which allocates and compiles its kernels, ~1 ms:
 * the model's first step makes all of a step's) and reused after; a table that fills up
 * (KERN_BF16_MAX_PRIMS) evicts its least recently used entry. avx512: the own kernels' workspace
 * and the widened blocks', at most 3 MB, grown by the first product of a shape that needs more
 * than it has (so the model's first step sizes it; none after). A context serves one calling thread
 * at a time (a product writes its workspace): one context per thread that multiplies. */
typedef struct kern_bf16_ctx kern_bf16_ctx;
#define KERN_BF16_MAX_PRIMS 256

/* Creates the context of path p (AUTO: resolved; every path checked as kern_bf16_path_check
 * does), for `threads` threads (≥ 1). Own kernels: a product of ≥ 2^20 multiply-adds has its
 * columns split over the threads (the caller's and threads − 1 workers made here), each column
 * computed by one thread with the same chains, so the results are the same bits for every thread
 * count. oneDNN paths: the calling thread's OpenMP threads; a oneDNN path also caps oneDNN's ISA
 * for the whole process, which oneDNN allows before its first primitive only. avx512: its widened
 * products run on the fp32 library's threads (OpenBLAS's count, kern_set_threads), the products it
 * gives the own kernels on the context's. Returns NULL with the reason in msg[size]. */
kern_bf16_ctx *kern_bf16_ctx_create(kern_bf16_path p, int threads, char *msg, size_t size);
/* Frees the context (NULL: nothing). */
void kern_bf16_ctx_destroy(kern_bf16_ctx *ctx);
/* The context's path (never AUTO). */
kern_bf16_path kern_bf16_ctx_path(const kern_bf16_ctx *ctx);
/* How many products a oneDNN path could not make a primitive for, or the avx512 path could not
 * grow its workspace for, and ran on the avx2 kernels instead (0 on the own paths; the tests
 * expect 0). */
int64_t kern_bf16_ctx_fallbacks(const kern_bf16_ctx *ctx);

/* Panel copies: a weight B[K, N] (bf16) copied once into a layout the path's own kernels read in
 * place of B, in panels of 16 columns, the last padded with zeros. The layout is the path's
 * (kern_bf16_ctx_panels):
 *   K16    the avx2 path: each panel [K][16] (16-bit lanes interleaved: gemm_bf16_panel.c). A row
 *          of A (M = 1) against a weight with a registered copy reads the copy instead, 8 panels
 *          side by side, each one linear stream, the sums in registers (the weight itself, [K, N]
 *          row-major, can only be read a few rows at a time in short pieces). Every element is
 *          still one fp32 chain over k in order: the same bits as without the copy.
 *   PAIRS  the avx512bf16 path (where this build has AVX512-BF16 code): each panel [⌈K/2⌉][16][2],
 *          k in pairs (B[2q, c], B[2q + 1, c] adjacent; an odd K's last pair padded with a zero),
 *          one 64-byte load an operand of vdpbf16ps. EVERY product against a weight with a
 *          registered copy, whatever M, runs on the own kernel over the copy (gemm_bf16_pairs.c)
 *          instead of oneDNN: each element one chain of vdpbf16ps over the pairs in order, so a
 *          row's bits do not depend on M, the batch or the threads (see Numbers). One row reads
 *          8 panels side by side; several rows run tiles of 12 rows × 2 panels.
 * The amx path keeps oneDNN for every product (NONE). The model registers copies for inference
 * only (train/model/mixed.c); training's products are unchanged. */
typedef enum {
    KERN_BF16_PANELS_NONE,
    KERN_BF16_PANELS_K16,
    KERN_BF16_PANELS_PAIRS
} kern_bf16_panel_layout;
/* Values in the copy of B[K, N] in layout l: K16: K·N16, PAIRS: 2⌈K/2⌉·N16 (N16: N rounded up to
 * a multiple of 16); NONE: 0. */
int64_t kern_bf16_panel_elems(kern_bf16_panel_layout l, int64_t K, int64_t N);
/* Storage for elems values of panel copies, zeroed (its pages touched now, not by the first
 * pack), 2 MB-aligned and advised to the OS for huge pages; NULL when out of memory. Freed with
 * free(). */
kern_bf16 *kern_bf16_panel_alloc(int64_t elems);
/* B[K, N] (row stride ldb) into layout l at P (kern_bf16_panel_elems(l, K, N) values; NONE:
 * nothing). */
void kern_bf16_panel_pack(kern_bf16_panel_layout l, kern_bf16 *P, const kern_bf16 *B, int64_t K,
                          int64_t N, int64_t ldb);
/* The layout of the copies ctx reads (NONE: it reads none, and a caller need not make any). On
 * avx512 (K16) the first copy registered also turns every later product of ctx to the avx2 path's
 * kernels, row-independent (inference's contexts register copies; training's do not). */
kern_bf16_panel_layout kern_bf16_ctx_panels(const kern_bf16_ctx *ctx);
/* Registers P, the copy of B[K, N] (row stride ldb) in ctx's layout, which the caller owns and
 * keeps equal to B (packing it again when B changes) until kern_bf16_ctx_clear_panels. From then
 * on a product with B untransposed whose op(B) lies inside that B (same ldb, its first column a
 * multiple of 16 from B's; PAIRS: its first row even from B's, and an odd K ending at B's last
 * row) reads P: K16 when M = 1 (and K ≤ 43016), PAIRS for every M (A transposed: K ≤ 43690).
 * Registering B again replaces its entry. 0, or −1 (nothing registered) when
 * kern_bf16_ctx_panels is NONE or out of memory. */
int kern_bf16_ctx_add_panel(kern_bf16_ctx *ctx, const kern_bf16 *B, int64_t K, int64_t N,
                            int64_t ldb, const kern_bf16 *P);
/* Forgets every registered panel copy. */
void kern_bf16_ctx_clear_panels(kern_bf16_ctx *ctx);
/* Products ctx has run on a panel copy (the tests check the copies were used). */
int64_t kern_bf16_ctx_panel_hits(const kern_bf16_ctx *ctx);

/* C[M,N] (=, or += when acc) op(A)[M,K] · op(B)[K,N]; op(X) = Xᵀ when the flag is set. Row-major:
 * A stored [M,K] (ta: [K,M]) with row stride lda, B stored [K,N] (tb: [N,K]) with row stride ldb,
 * C [M,N] with row stride ldc (strides may exceed the extents). acc = false overwrites C (which
 * may hold garbage); acc = true accumulates. A, B bf16; C fp32. */
void kern_gemm_bf16(kern_bf16_ctx *ctx, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                    int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                    bool acc);
/* Naive twin of kern_gemm_bf16: each element summed in double from the bf16 inputs' exact
 * products (then C₀ added when acc), rounded once to fp32. */
void kern_gemm_bf16_ref(float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M, int64_t N,
                        int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                        bool acc);

/* The model's three products, as kern_matmul / _dx / _dw (gemm.h) on bf16 inputs:
 * y[M,N] = x[M,K] · w[K,N]. Overwrites y (forward). */
void kern_matmul_bf16(kern_bf16_ctx *ctx, float *restrict y, const kern_bf16 *restrict x,
                      const kern_bf16 *restrict w, int64_t M, int64_t K, int64_t N);
/* dx[M,K] (=, or += when acc) dy[M,N] · w[K,N]ᵀ (input gradient; dy rounded by the caller). */
void kern_matmul_dx_bf16(kern_bf16_ctx *ctx, float *restrict dx, const kern_bf16 *restrict dy,
                         const kern_bf16 *restrict w, int64_t M, int64_t K, int64_t N, bool acc);
/* dw[K,N] += x[M,K]ᵀ · dy[M,N]. Accumulates (weight gradient, fp32 like the master weights). */
void kern_matmul_dw_bf16(kern_bf16_ctx *ctx, float *restrict dw, const kern_bf16 *restrict x,
                         const kern_bf16 *restrict dy, int64_t M, int64_t K, int64_t N);

/* The context's bf16 matmul throughput in FLOP/s, as kern_measure_flops (gemm.h): about
 * `seconds` of the three products of a training step (y = x·w, dx = dy·wᵀ, dw += xᵀ·dy, each
 * n×n×n, in turn), timed by the monotonic clock. The start-up plan prints it ("bf16 path avx2 on
 * AMD EPYC: 80 GFLOP/s") and the emulator takes C from it. Allocates its operands (a start-up
 * measurement, not a product of a step); 0 if that fails or n < 1. */
double kern_bf16_measure_flops(kern_bf16_ctx *ctx, int64_t n, double seconds);
/* The same for the forward's product y = x·w alone (inference). */
double kern_bf16_measure_flops_fwd(kern_bf16_ctx *ctx, int64_t n, double seconds);
/* The same on the rate of a core the caller has to itself (kern_measure_core_flops): with one
 * thread (own paths always) timed by the thread's CPU clock, so that other processes on the core
 * do not lower it; a oneDNN path with several threads by the monotonic clock. */
double kern_bf16_measure_core_flops(kern_bf16_ctx *ctx, int64_t n, double seconds);
#endif
