/* Kernel-private (not part of the kernels/ API): the paths behind kern_gemm_bf16 (gemm_bf16.h)
 * and the contract they share. Every path computes C[M,N] (=, or += when acc) op(A)[M,K] ·
 * op(B)[K,N] on bf16 A and B with fp32 C, row-major, op(X) = Xᵀ when the flag is set, A stored
 * [M,K] (ta: [K,M]) with row stride lda, B stored [K,N] (tb: [N,K]) with row stride ldb.
 *
 * The own paths (AVX2 and plain C) make every element one fp32 chain over p = 0..K-1 in order,
 * c ← c + a_p·b_p, from 0 (or from C when accumulating). A product of two bf16 values is exact in
 * fp32 (8 + 8 significand bits), so a fused multiply-add and a multiply then add round alike and
 * both paths give the same bits, whatever M, N, K, the transposes, the strides and the blocking
 * (a chain cut at a K block boundary is stored and reloaded in fp32, which changes nothing); only a
 * product under 2^-126 (rounded by the plain path's multiply) or over fp32's range can differ. */
#ifndef MT_KERNELS_GEMM_BF16_IMPL_H
#define MT_KERNELS_GEMM_BF16_IMPL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"

/* The AVX2 path's blocking: register tiles of BF16_MR rows × 16 columns over BF16_KC values of
 * K; A packed (widened to fp32) by blocks of BF16_MC rows, B (also fp32) by blocks of BF16_NC
 * columns. */
#define BF16_MR 6
#define BF16_KC 256
#define BF16_MC 168
#define BF16_NC 1024
/* At most this many rows take the streaming kernel, which reads B (untransposed) in place, row
 * after row, once in all: decode's products (batches of up to 32 sequences). */
#define BF16_STREAM_MAX_M 32

/* The AVX2 path's workspace: A's packed block (BF16_MC × BF16_KC floats and 8 floats of slack)
 * and B's (BF16_KC × BF16_NC floats), 64-byte aligned: 1.2 MB. */
typedef struct {
    float *a, *b;
} bf16_ws;
#define BF16_WS_A_FLOATS (BF16_MC * BF16_KC + 8)
#define BF16_WS_B_FLOATS (BF16_KC * BF16_NC)

/* 1 if this build has the AVX2 path (x86-64 GCC or Clang); the CPU's support is the caller's to
 * check (kern_cpu_has(KERN_CPU_AVX2_FMA)). */
int bf16_avx2_built(void);
void bf16_gemm_avx2(const bf16_ws *ws, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                    int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                    bool acc);
/* One row against a weight in the panel layout (gemm_bf16_panel.c): C[0, N) (=, or += when acc)
 * A[k·sa], k < K, times the panels from P, panel p at P + p·ps (ps ≥ 16·K elements). K ≤
 * BF16_WS_A_FLOATS (A's row is widened into ws->a). Built with the AVX2 path alone
 * (gemm_bf16_x86.h: BF16_X86), the path whose copies are in this layout. */
void bf16_gemv_panel_avx2(const bf16_ws *ws, float *C, const kern_bf16 *A, int64_t sa,
                          const kern_bf16 *P, int64_t ps, int64_t N, int64_t K, bool acc);
/* The avx512bf16 path's product on B's panel copy in the pair layout (gemm_bf16_pairs.c): C[M, N]
 * (=, or += when acc) op(A)[M, K] · the panels from P (panel p at P + p·ps, ps ≥ 32·⌈K/2⌉), A
 * stored [M, K] with row stride lda (ta: [K, M], gathered PR_MR rows at a time into ws->b:
 * needs 12·K ≤ 2·BF16_WS_B_FLOATS). Every element one chain of vdpbf16ps over the pairs of k in
 * order. Call only where bf16_pairs_built() and the CPU has AVX512-BF16. */
int bf16_pairs_built(void);
#define BF16_PAIRS_TA_MAX_K (2 * BF16_WS_B_FLOATS / 12)
void bf16_gemm_pairs(const bf16_ws *ws, float *C, const kern_bf16 *A, const kern_bf16 *P,
                     int64_t ps, int64_t M, int64_t N, int64_t K, bool ta, int64_t lda, int64_t ldc,
                     bool acc);
/* The plain C path: any CPU, no workspace. */
void bf16_gemm_plain(float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M, int64_t N,
                     int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, bool acc);

/* The product on meshtrain's own kernels whatever the context's path: the plain C path on the
 * portable path, the AVX2 kernels on every other (the oneDNN paths run on CPUs with AVX-512, so
 * with AVX2). For the products whose shapes change call after call (attention's key counts), where
 * oneDNN would make a primitive for each. Same contract as kern_gemm_bf16. */
struct kern_bf16_ctx;
void bf16_gemm_own(struct kern_bf16_ctx *ctx, float *C, const kern_bf16 *A, const kern_bf16 *B,
                   int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb,
                   int64_t ldc, bool acc);

/* The avx512 path (gemm_bf16_wide.c): op(A) and op(B) widened to fp32 by blocks into ws (cap
 * floats, grown by the first product that needs more; freed by the context) and multiplied by
 * kern_gemm. */
typedef struct {
    float *ws;
    int64_t cap;
} bf16_wide;
/* 1 if this build has the avx512 path (x86-64 GCC or Clang; the CPU's AVX-512 is the caller's to
 * check). */
int bf16_wide_built(void);
/* The product on the widened operands. 0; 1 when it is one for the own kernels instead (M ≤
 * BF16_STREAM_MAX_M: nothing written); -1 when the workspace could not grow (nothing written). */
int bf16_wide_gemm(bf16_wide *w, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   bool acc);

/* The oneDNN paths (gemm_bf16_dnnl.c, built where CMake found oneDNN: MT_HAVE_DNNL): a handle
 * with oneDNN's engine, stream and the table of matmul primitives. */
typedef struct bf16_dnnl bf16_dnnl;
typedef enum { BF16_DNNL_ANY, BF16_DNNL_AMX, BF16_DNNL_AVX512BF16 } bf16_dnnl_isa;
/* 1 if this build has oneDNN. */
int bf16_dnnl_built(void);
/* Caps oneDNN's ISA (BF16_DNNL_ANY: no cap) and checks oneDNN reaches it; sets the calling
 * thread's OpenMP threads. NULL with the reason in msg. */
bf16_dnnl *bf16_dnnl_create(bf16_dnnl_isa isa, int threads, char *msg, size_t size);
void bf16_dnnl_destroy(bf16_dnnl *d);
/* The product through a oneDNN matmul primitive, on bf16 A and B (f32: fp32 A and B, the glue's
 * own test on any CPU, where oneDNN has fp32 matmuls). Returns 0, or -1 if oneDNN has no
 * implementation for it (nothing written). */
int bf16_dnnl_gemm(bf16_dnnl *d, bool f32, float *C, const void *A, const void *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   bool acc);
#endif
