/* moe_bf16: the grouped SwiGLU MLP of moe.h (kern_moe_mlp_fwd / _bwd) with bf16 inputs and fp32
 * accumulation: each of an expert's nine products (forward: gate, up, down; backward: dX and dW
 * of each) runs on kern_gemm_bf16 (gemm_bf16.h), so it takes whichever path the context has
 * (amx, avx512bf16, avx2, portable); the backward's three dW products also alone
 * (kern_moe_mlp_dw_bf16: a split backward's weight part). Each has a naive twin (double sums of
 * the bf16 inputs' products). Depends on gemm_bf16.h and swiglu.h. No MPI, no allocation.
 *
 * What is bf16 and what stays fp32. Inputs of products are bf16: the dispatched rows xs, the
 * weights' bf16 copies wg, wu [E, D, F], wd [E, F, D], the upstream gradient dys (rounded once by
 * the caller), and h and the backward's da, db, which the kernels round themselves (into hb, dab,
 * dbb: kern_bf16_pack of the fp32 values). Results are fp32: a, b (kept for SwiGLU's backward),
 * ys, dxs, and the weight gradients, which accumulate in fp32. Rows are grouped by expert as in
 * moe.h: expert e's rows are [offs[e], offs[e+1]). */
#ifndef MT_KERNELS_MOE_BF16_H
#define MT_KERNELS_MOE_BF16_H
#include <stdint.h>

#include "kernels/gemm_bf16.h"

/* a = xs·wg[e], b = xs·wu[e] ([n, F], fp32), h = silu(a)·b (fp32) and hb = h rounded to bf16,
 * ys = hb·wd[e] ([n, D], fp32). Overwrites a, b, h, hb and ys. */
void kern_moe_mlp_fwd_bf16(kern_bf16_ctx *ctx, float *ys, float *a, float *b, float *h,
                           kern_bf16 *hb, const kern_bf16 *xs, const kern_bf16 *wg,
                           const kern_bf16 *wu, const kern_bf16 *wd, const int64_t *offs, int64_t E,
                           int64_t D, int64_t F);
void kern_moe_mlp_fwd_bf16_ref(float *ys, float *a, float *b, float *h, kern_bf16 *hb,
                               const kern_bf16 *xs, const kern_bf16 *wg, const kern_bf16 *wu,
                               const kern_bf16 *wd, const int64_t *offs, int64_t E, int64_t D,
                               int64_t F);
/* Its backward from dys[n, D] (bf16): dh = dys·wd[e]ᵀ into da, dwd += hbᵀ·dys; da, db = SwiGLU's
 * backward (fp32, overwritten) and dab, dbb their bf16 roundings (overwritten); dxs = dab·wg[e]ᵀ +
 * dbb·wu[e]ᵀ (fp32, overwritten), dwg += xsᵀ·dab, dwu += xsᵀ·dbb (fp32, accumulated; dwg, dwu,
 * dwd all NULL: none, left to kern_moe_mlp_dw_bf16). */
void kern_moe_mlp_bwd_bf16(kern_bf16_ctx *ctx, float *dxs, float *dwg, float *dwu, float *dwd,
                           float *da, float *db, kern_bf16 *dab, kern_bf16 *dbb,
                           const kern_bf16 *dys, const kern_bf16 *xs, const float *a,
                           const float *b, const kern_bf16 *hb, const kern_bf16 *wg,
                           const kern_bf16 *wu, const kern_bf16 *wd, const int64_t *offs, int64_t E,
                           int64_t D, int64_t F);
void kern_moe_mlp_bwd_bf16_ref(float *dxs, float *dwg, float *dwu, float *dwd, float *da, float *db,
                               kern_bf16 *dab, kern_bf16 *dbb, const kern_bf16 *dys,
                               const kern_bf16 *xs, const float *a, const float *b,
                               const kern_bf16 *hb, const kern_bf16 *wg, const kern_bf16 *wu,
                               const kern_bf16 *wd, const int64_t *offs, int64_t E, int64_t D,
                               int64_t F);
/* The weight gradients of kern_moe_mlp_bwd_bf16 alone, from the bf16 operands it multiplied
 * (a split backward's weight part: dys, and the dab, dbb it left): dwd += hbᵀ·dys,
 * dwg += xsᵀ·dab, dwu += xsᵀ·dbb (fp32, accumulated), the same products, so the same bits. */
void kern_moe_mlp_dw_bf16(kern_bf16_ctx *ctx, float *dwg, float *dwu, float *dwd,
                          const kern_bf16 *dys, const kern_bf16 *xs, const kern_bf16 *dab,
                          const kern_bf16 *dbb, const kern_bf16 *hb, const int64_t *offs, int64_t E,
                          int64_t D, int64_t F);
void kern_moe_mlp_dw_bf16_ref(float *dwg, float *dwu, float *dwd, const kern_bf16 *dys,
                              const kern_bf16 *xs, const kern_bf16 *dab, const kern_bf16 *dbb,
                              const kern_bf16 *hb, const int64_t *offs, int64_t E, int64_t D,
                              int64_t F);
#endif
