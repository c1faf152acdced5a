/* moe: the mixture-of-experts kernels on one rank's rows — the router (softmax, top-k, the
 * renormalised weights of the k chosen), the dispatch plan (which (token, expert) slots an expert
 * takes, in a fixed order, under an optional capacity), the gather of token rows into per-expert
 * groups, the grouped SwiGLU MLP, the combine (the weighted sum of a token's k expert outputs, in
 * the order of its choices) and every backward. Each has a naive twin (double accumulation).
 * Depends on gemm.h and swiglu.h. No MPI, no allocation: scratch comes from the caller.
 *
 * Rows are tokens: x[M, D]; a token's k slots are (r, j), j = 0..k-1 in the router's order
 * (largest logit first). Slot (r, j) goes to expert idx[r·k + j]; the dispatched rows of expert
 * e are rows [offs[e], offs[e+1]) of the expert-sorted buffer, in slot order (r, then j), and
 * pos[r·k + j] is the slot's row there (−1: dropped). */
#ifndef MT_KERNELS_MOE_H
#define MT_KERNELS_MOE_H
#include <stdint.h>

/* Per row of logits[M, E]: prob[M, E] = softmax, lse[M] = logsumexp, idx[M, k] the experts of
 * the k largest logits, largest first, ties to the lower index; w[M, k] = the softmax over those
 * k logits (the chosen weights renormalised to sum to 1). Overwrites all four; 1 ≤ k ≤ E. */
void kern_router_fwd(float *restrict prob, float *restrict lse, int32_t *restrict idx,
                     float *restrict w, const float *restrict logits, int64_t M, int64_t E,
                     int64_t k);
void kern_router_fwd_ref(float *prob, float *lse, int32_t *idx, float *w, const float *logits,
                         int64_t M, int64_t E, int64_t k);

/* The dispatch plan of M rows. Row r belongs to group grp[r] (grp NULL: group r / G), whose
 * slots already taken by expert e are cnt[grp·cstride + e] (the caller's counters: zero for a
 * fresh group; incremented here). In row order, then slot order, slot (r, j) is kept when
 * cap ≤ 0 (dropless) or its group has given expert idx[r·k + j] fewer than cap slots so far.
 * Writes kept[E] (the slots each expert takes in this call), offs[E + 1] (their prefix sums),
 * pos[M·k] and src[offs[E]] (src[p]: the row of dispatched row p). Overwrites all but cnt. */
void kern_moe_plan(int32_t *restrict pos, int32_t *restrict src, int64_t *restrict offs,
                   int64_t *restrict kept, int32_t *restrict cnt, const int32_t *restrict idx,
                   const int32_t *restrict grp, int64_t M, int64_t E, int64_t k, int64_t G,
                   int64_t cstride, int64_t cap);
/* The twin: for every slot, its group's earlier slots counted afresh (quadratic). */
void kern_moe_plan_ref(int32_t *pos, int32_t *src, int64_t *offs, int64_t *kept, int32_t *cnt,
                       const int32_t *idx, const int32_t *grp, int64_t M, int64_t E, int64_t k,
                       int64_t G, int64_t cstride, int64_t cap);

/* xs[n, D] = x[src[i], :] for i < n. Overwrites xs. */
void kern_moe_gather(float *restrict xs, const float *restrict x, const int32_t *restrict src,
                     int64_t n, int64_t D);
/* out[r, :] += Σ_j w[r·k + j]·ys[pos[r·k + j], :] over the kept slots, j in order (accumulates;
 * the same sum whatever order the experts ran in). */
void kern_moe_combine(float *restrict out, const float *restrict ys, const int32_t *restrict pos,
                      const float *restrict w, int64_t M, int64_t k, int64_t D);
void kern_moe_combine_ref(float *out, const float *ys, const int32_t *pos, const float *w,
                          int64_t M, int64_t k, int64_t D);
/* The combine's backward from dout[M, D]: dys[pos, :] = w·dout[r, :] for each kept slot
 * (overwrites those rows), dw[r·k + j] = dout[r, :]·ys[pos, :] (0 for a dropped slot;
 * overwrites). */
void kern_moe_combine_bwd(float *restrict dys, float *restrict dw, const float *restrict dout,
                          const float *restrict ys, const int32_t *restrict pos,
                          const float *restrict w, int64_t M, int64_t k, int64_t D);
void kern_moe_combine_bwd_ref(float *dys, float *dw, const float *dout, const float *ys,
                              const int32_t *pos, const float *w, int64_t M, int64_t k, int64_t D);
/* The gather's backward: dx[r, :] += Σ_j dxs[pos[r·k + j], :] over the kept slots, j in order
 * (accumulates). */
void kern_moe_scatter_add(float *restrict dx, const float *restrict dxs,
                          const int32_t *restrict pos, int64_t M, int64_t k, int64_t D);

/* The load balance of one group of G rows: frac[E] = the share of its G·k slots the router sends
 * to each expert (before any capacity), pmean[E] = each expert's mean probability over the rows.
 * Overwrites both. */
void kern_router_balance(float *restrict frac, float *restrict pmean, const int32_t *restrict idx,
                         const float *restrict prob, int64_t G, int64_t E, int64_t k);
/* The router's backward, dlogits[M, E] (overwrites), the sum of three parts:
 *  - the chosen weights' softmax: at e = idx[r·k + j], w_j·(dw_j − Σ_i w_i·dw_i), from dw[M, k];
 *  - the balance loss through the full softmax: prob·(ga − Σ_e prob·ga), ga[g·E + e] the gradient
 *    with respect to the probabilities of group g = r / G (ga NULL: none);
 *  - the z-loss: zs·lse[r]·prob (the derivative of (zs/2)·lse²). */
void kern_router_bwd(float *restrict dlogits, const float *restrict dw, const int32_t *restrict idx,
                     const float *restrict w, const float *restrict prob, const float *restrict lse,
                     const float *restrict ga, float zs, int64_t M, int64_t E, int64_t k,
                     int64_t G);
void kern_router_bwd_ref(float *dlogits, const float *dw, const int32_t *idx, const float *w,
                         const float *prob, const float *lse, const float *ga, float zs, int64_t M,
                         int64_t E, int64_t k, int64_t G);

/* The grouped SwiGLU MLP: for each expert e, on rows [offs[e], offs[e+1]) of xs[n, D],
 * a = xs·wg[e], b = xs·wu[e] ([n, F]), h = silu(a)·b, ys = h·wd[e] ([n, D]); wg, wu [E, D, F],
 * wd [E, F, D]. Overwrites a, b, h and ys; counts its offs[E] rows (traffic.h, as the bf16 one). */
void kern_moe_mlp_fwd(float *ys, float *a, float *b, float *h, const float *xs, const float *wg,
                      const float *wu, const float *wd, const int64_t *offs, int64_t E, int64_t D,
                      int64_t F);
void kern_moe_mlp_fwd_ref(float *ys, float *a, float *b, float *h, const float *xs, const float *wg,
                          const float *wu, const float *wd, const int64_t *offs, int64_t E,
                          int64_t D, int64_t F);
/* Its backward from dys[n, D]: dxs[n, D] = da·wg[e]ᵀ + db·wu[e]ᵀ (overwrites), dwg, dwu, dwd +=
 * (accumulate; all three NULL: none, left to kern_moe_mlp_dw); da, db [n, F] are overwritten
 * with the gradients of the products xs·wg, xs·wu (da may be the caller's scratch for dh too). */
void kern_moe_mlp_bwd(float *dxs, float *dwg, float *dwu, float *dwd, float *da, float *db,
                      const float *dys, const float *xs, const float *a, const float *b,
                      const float *h, const float *wg, const float *wu, const float *wd,
                      const int64_t *offs, int64_t E, int64_t D, int64_t F);
/* The weight gradients of kern_moe_mlp_bwd alone, from the dys, da and db it was given and left
 * (a split backward's weight part): the same products, so the same bits. */
void kern_moe_mlp_dw(float *dwg, float *dwu, float *dwd, const float *dys, const float *xs,
                     const float *da, const float *db, const float *h, const int64_t *offs,
                     int64_t E, int64_t D, int64_t F);
void kern_moe_mlp_bwd_ref(float *dxs, float *dwg, float *dwu, float *dwd, float *da, float *db,
                          const float *dys, const float *xs, const float *a, const float *b,
                          const float *h, const float *wg, const float *wu, const float *wd,
                          const int64_t *offs, int64_t E, int64_t D, int64_t F);
#endif
