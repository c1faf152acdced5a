/* attn_part: causal attention one block of keys at a time, for a sequence or a KV cache sharded
 * over a mesh axis (context parallelism, sequence-sharded decode). Rows are tokens at GLOBAL
 * positions (their place in the whole sequence), given as ascending lists: query row i sits at
 * qpos[i], key row j at kpos[j], and key j is visible to query i iff kpos[j] ≤ qpos[i]. Heads as
 * in attention.h: q[rows, Nl·H], k, v[rows, Kl·H], query head h uses kv head h / (Nl/Kl), scale
 * 1/sqrt(H). Depends on gemm.h, attention.h (its row block) and bf16.h (a bf16 cache shard's
 * elements); no MPI, no allocation (the caller gives the scratch); each kernel has a naive twin
 * in double (_ref; the bf16 cached partial's is kern_attn_cached_bf16_ref, against which its
 * merged partials are tested).
 *
 * A partial is the attention of the query rows to one block of keys, kept per query row and head
 * as the triple (m, l, O): m the largest visible score, l = Σ exp(s − m) over the visible keys and
 * O = Σ exp(s − m)·v / l, the block's own softmax output. A row that sees no key of the block has
 * (−inf, 0, 0). Partials of disjoint key blocks merge in any order (the online softmax,
 * kern_attn_part_merge):
 *     m = max(m1, m2),  a_i = l_i·exp(m_i − m),  l = a1 + a2,  O = (a1·O1 + a2·O2) / l.
 * When every key block is merged, O is the attention output and (m, l) the row's softmax max and
 * sum (m + log l is flash attention's log-sum-exp): there is no separate normalisation at the
 * end, because each partial is already normalised (as flash attention's kernels return their
 * output with its log-sum-exp). Normalising per block, where FlashAttention-2 keeps Σ e·v and
 * divides once at the end, is what lets one block run kern_attn_fwd's own arithmetic, P = e·(1/z)
 * before P·V, and so equal it bit for bit.
 *
 * The backward of one key block is given the FINAL (m, l) of its query rows and
 * D = rowsum(dO ∘ O) of the final output (kern_attn_part_delta), recomputes P = exp(s − m)/l and
 * accumulates
 *     dP = dO·Vᵀ,  dS = P ∘ (dP − D) / sqrt(H),  dQ += dS·K,  dK += dSᵀ·Q,  dV += Pᵀ·dO,
 * as flash attention's backward does: D = Σ_j P_ij dP_ij, so no rank needs a whole row of P.
 *
 * Work stays inside the visible part: query rows go in blocks of at most KERN_ATTN_BLOCK rows of
 * consecutive positions (a block ends where the positions jump, as at the seam of a zigzag
 * rank's two chunks), and block [i0, i1) scores only the keys its last row sees, as
 * kern_attn_fwd does; the key-side gradients of keys [j0, j1) (blocked the same way) use only the
 * rows that see key j0. Breaking blocks at the jumps keeps every zigzag rank's work equal, also
 * when a chunk is not a whole number of blocks.
 * kern_attn_part_visibility tells a fully masked block, which a ring skips.
 *
 * Bit-equality: with one block holding every key (qpos = kpos = 0..T−1), the forward runs
 * kern_attn_fwd's row blocks, gemms and softmax, so O equals its output bit for bit, and (m, l)
 * are its softmax max and sum; the backward with D = NULL (D then taken as Σ_j P_ij dP_ij over the
 * block, which needs every key of each row in the block, as kern_attn_bwd does) equals
 * kern_attn_bwd's dq, dk, dv bit for bit (onto zeroed dq, dk, dv). D from the output, several
 * blocks or another split agree within rounding (the tolerance is derived in
 * tests/kernels/test_attn_part.c). */
#ifndef MT_KERNELS_ATTN_PART_H
#define MT_KERNELS_ATTN_PART_H
#include <stdint.h>

#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"

/* How much of a key block the query rows see. */
typedef enum {
    KERN_ATTN_PART_NONE, /* no query row sees any key: nothing to compute, the ring skips it */
    KERN_ATTN_PART_SOME, /* the causal mask cuts through the block */
    KERN_ATTN_PART_ALL   /* every query row sees every key */
} kern_attn_part_vis;

/* Visibility of keys at kpos[Tk] to queries at qpos[Tq] (both ascending, Tq, Tk ≥ 1). */
kern_attn_part_vis kern_attn_part_visibility(const int32_t *qpos, int64_t Tq, const int32_t *kpos,
                                             int64_t Tk);
/* Keys of kpos[Tk] (ascending) visible at position p: the count of kpos[j] ≤ p. */
int64_t kern_attn_part_seen(const int32_t *kpos, int64_t Tk, int32_t p);

/* The end of the block of rows starting at i0 (< n): at most KERN_ATTN_BLOCK rows whose
 * positions pos[i0..) run consecutively. */
int64_t kern_attn_part_block_end(const int32_t *pos, int64_t n, int64_t i0);

/* Floats of scratch: the forward min(Tq, KERN_ATTN_BLOCK)·Tk, the backward 2·Tq·Tk. */
int64_t kern_attn_part_fwd_scratch(int64_t Tq, int64_t Tk);
int64_t kern_attn_part_bwd_scratch(int64_t Tq, int64_t Tk);

/* The partial of queries q[B·Tq, Nl·H] at qpos[Tq] against the key block k, v[B·Tk, Kl·H] at
 * kpos[Tk] (the B sequences share the positions): o[B·Tq, Nl·H] and m, l[B·Tq, Nl] (row r, head
 * h at r·Nl + h). Overwrites o, m, l and scratch. */
void kern_attn_part_fwd(float *restrict o, float *restrict m, float *restrict l,
                        float *restrict scratch, const float *restrict q, const float *restrict k,
                        const float *restrict v, const int32_t *restrict qpos,
                        const int32_t *restrict kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t Nl,
                        int64_t Kl, int64_t H);
/* Merges the partial (o2, m2, l2) into (o, m, l), in place: o[R, Nl·H], m, l[R, Nl]. A side with
 * l = 0 changes nothing (the other is copied exactly). */
void kern_attn_part_merge(float *restrict o, float *restrict m, float *restrict l,
                          const float *restrict o2, const float *restrict m2,
                          const float *restrict l2, int64_t R, int64_t Nl, int64_t H);
/* D[R, Nl] = Σ_c dout[r, h·H + c]·o[r, h·H + c] (o the final output). Overwrites D. */
void kern_attn_part_delta(float *restrict D, const float *restrict dout, const float *restrict o,
                          int64_t R, int64_t Nl, int64_t H);
/* Backward of kern_attn_part_fwd's block, given the final m, l[B·Tq, Nl] and D[B·Tq, Nl] (or
 * D = NULL: Σ_j P_ij dP_ij over this block, right only when the block holds every key the rows
 * see). ACCUMULATES dq[B·Tq, Nl·H] += and dk, dv[B·Tk, Kl·H] +=. scratch: bwd_scratch floats.
 * In halves, for a ring that lets a key block's dK, dV arrive while the first runs
 * (train/parallel/cp.c): KERN_ATTN_PART_ROWS recomputes every (sequence, query head)'s P and dS,
 * keeping each apart in scratch (kern_attn_part_bwd_halves_scratch floats: B·Nl heads'), and
 * accumulates dq +=; KERN_ATTN_PART_KEYS then accumulates dk, dv += from the kept P, dS, the heads
 * in the same order (of the arguments it reads only dout, q and the positions). ROWS then KEYS
 * on the same scratch equal KERN_ATTN_PART_BOTH bit for bit: the same products in the same
 * order, each head's P, dS kept where BOTH reuses one. */
typedef enum { KERN_ATTN_PART_BOTH, KERN_ATTN_PART_ROWS, KERN_ATTN_PART_KEYS } kern_attn_part_half;
void kern_attn_part_bwd(float *restrict dq, float *restrict dk, float *restrict dv,
                        float *restrict scratch, const float *restrict dout, const float *D,
                        const float *restrict m, const float *restrict l, const float *restrict q,
                        const float *restrict k, const float *restrict v,
                        const int32_t *restrict qpos, const int32_t *restrict kpos, int64_t B,
                        int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H,
                        kern_attn_part_half half);
int64_t kern_attn_part_bwd_halves_scratch(int64_t B, int64_t Nl, int64_t Tq, int64_t Tk);
/* Decode against one shard of a sequence's KV cache: n query rows q[n, Nl·H] at qpos[n] against
 * the shard's S cache rows kc, vc[S, ldk] (kv head j at columns [j·H, (j+1)·H), ldk ≥ Kl·H) at
 * kpos[S]: the partial o[n, Nl·H], m, l[n, Nl]. With n = 1 the Nl/Kl query heads of a kv head
 * go through one gemm, reading the shard once per kv head (as kern_attn_cached does). Overwrites
 * o, m, l and scratch (kern_attn_part_cached_scratch floats). */
void kern_attn_part_cached(float *restrict o, float *restrict m, float *restrict l,
                           float *restrict scratch, const float *restrict q,
                           const float *restrict kc, const float *restrict vc,
                           const int32_t *restrict qpos, int64_t n, const int32_t *restrict kpos,
                           int64_t S, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk);
/* n = 1: (Nl/Kl)·S; n > 1: min(n, KERN_ATTN_BLOCK)·S. */
int64_t kern_attn_part_cached_scratch(int64_t n, int64_t S, int64_t Nl, int64_t Kl);
/* kern_attn_part_cached on a bf16 shard kc, vc[S, ldk] (attn_part_bf16.c): each row's query and
 * probabilities rounded to bf16, every sum one fp32 chain in index order, so that a shard of every
 * key gives kern_attn_cached_bf16's output bit for bit (m, l its softmax max and sum). Any n;
 * scratch: kern_attn_part_cached_bf16_scratch floats. Overwrites o, m, l and scratch. */
void kern_attn_part_cached_bf16(float *restrict o, float *restrict m, float *restrict l,
                                float *restrict scratch, const float *restrict q,
                                const kern_bf16 *kc, const kern_bf16 *vc,
                                const int32_t *restrict qpos, int64_t n,
                                const int32_t *restrict kpos, int64_t S, int64_t Nl, int64_t Kl,
                                int64_t H, int64_t ldk);
int64_t kern_attn_part_cached_bf16_scratch(int64_t S, int64_t Nl, int64_t Kl, int64_t H);
/* Training on bf16 operands (context parallelism with --compute-dtype bf16; attn_part_bf16.c and
 * attn_part_bwd.c): kern_attn_part_fwd and _bwd with q, k, v and dout in bf16 and the products on
 * the own bf16 kernels (bf16_gemm_own: one fp32 chain per element, in index order), rounding where
 * kern_attn_fwd_bf16 and _bwd_bf16 (attn_bf16.h) round. Forward: scores fp32, the block's
 * softmax s·scale → exp(s − m)·(1/l) in fp32 (kern_softmax_row_inl), P rounded to bf16, O = P·V in
 * fp32; the partial (m, l, O) merges with kern_attn_part_merge as the fp32 one does. Backward: P
 * recomputed from the final m, l and rounded, dP = dO·Vᵀ fp32, dS = bf16(P∘(dP − D)·scale) (D =
 * NULL: kern_attn_bwd_bf16's rowsum of P∘dP over the block), dQ += dS·K, dK += dSᵀ·Q,
 * dV += Pᵀ·dO, every sum fp32. So with one block of every key (qpos = kpos = 0..T−1) O, dQ, dK, dV
 * equal kern_attn_fwd_bf16's and _bwd_bf16's bit for bit, and with query rows at any positions
 * against every key each row's O and dQ equal that row's of the whole sequence (a row's product
 * depends on nothing but its row). Same shapes, overwrite/accumulate contracts and (m, l) layout
 * as the fp32 kernels; scratch: the _scratch functions' floats. */
void kern_attn_part_fwd_bf16(kern_bf16_ctx *ctx, float *restrict o, float *restrict m,
                             float *restrict l, float *restrict scratch, const kern_bf16 *q,
                             const kern_bf16 *k, const kern_bf16 *v, const int32_t *restrict qpos,
                             const int32_t *restrict kpos, int64_t B, int64_t Tq, int64_t Tk,
                             int64_t Nl, int64_t Kl, int64_t H);
/* (half: as kern_attn_part_bwd's; in halves the fp32 scores and dP of a row block are shared,
 * each head's bf16 P, dS kept apart: kern_attn_part_bwd_bf16_halves_scratch floats.) */
void kern_attn_part_bwd_bf16(kern_bf16_ctx *ctx, float *restrict dq, float *restrict dk,
                             float *restrict dv, float *restrict scratch, const kern_bf16 *dout,
                             const float *D, const float *restrict m, const float *restrict l,
                             const kern_bf16 *q, const kern_bf16 *k, const kern_bf16 *v,
                             const int32_t *restrict qpos, const int32_t *restrict kpos, int64_t B,
                             int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H,
                             kern_attn_part_half half);
int64_t kern_attn_part_bwd_bf16_halves_scratch(int64_t B, int64_t Nl, int64_t Tq, int64_t Tk);
/* min(Tq, KERN_ATTN_BLOCK)·Tk·3/2 (rounded up) and 2·min(Tq, KERN_ATTN_BLOCK)·Tk + Tq·Tk. */
int64_t kern_attn_part_fwd_bf16_scratch(int64_t Tq, int64_t Tk);
int64_t kern_attn_part_bwd_bf16_scratch(int64_t Tq, int64_t Tk);
/* D[R, Nl] = Σ_c dout[r, h·H + c]·o[r, h·H + c] with dout bf16 (the backward's rounded dO), one
 * fp32 chain per entry. Overwrites D. */
void kern_attn_part_delta_bf16(float *restrict D, const kern_bf16 *dout, const float *restrict o,
                               int64_t R, int64_t Nl, int64_t H);
/* The FLOPs kern_attn_part_fwd's two gemms do for one sequence and one query head, masked part
 * of each row block included: Σ over row blocks 4·rows·(keys its last row sees)·H. With positions
 * 0..T−1 in both, this is kern_attn_fwd's count. */
double kern_attn_part_flops(const int32_t *qpos, int64_t Tq, const int32_t *kpos, int64_t Tk,
                            int64_t H);

/* Naive twins in double, same layouts and contracts (the bwd twin accumulates too). */
void kern_attn_part_fwd_ref(float *o, float *m, float *l, const float *q, const float *k,
                            const float *v, const int32_t *qpos, const int32_t *kpos, int64_t B,
                            int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H);
void kern_attn_part_merge_ref(float *o, float *m, float *l, const float *o2, const float *m2,
                              const float *l2, int64_t R, int64_t Nl, int64_t H);
void kern_attn_part_delta_ref(float *D, const float *dout, const float *o, int64_t R, int64_t Nl,
                              int64_t H);
void kern_attn_part_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *D,
                            const float *m, const float *l, const float *q, const float *k,
                            const float *v, const int32_t *qpos, const int32_t *kpos, int64_t B,
                            int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H);
void kern_attn_part_cached_ref(float *o, float *m, float *l, const float *q, const float *kc,
                               const float *vc, const int32_t *qpos, int64_t n, const int32_t *kpos,
                               int64_t S, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk);
/* Twins of the bf16 training kernels in double (attn_bf16_ref.c): every sum exact from the bf16
 * inputs, P and dS rounded to bf16 once from double; the backward's twin accumulates too and
 * needs 2·Tk + 2·B·Tk·Kl·H doubles of scratch. */
void kern_attn_part_fwd_bf16_ref(float *o, float *m, float *l, const kern_bf16 *q,
                                 const kern_bf16 *k, const kern_bf16 *v, const int32_t *qpos,
                                 const int32_t *kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t Nl,
                                 int64_t Kl, int64_t H);
void kern_attn_part_bwd_bf16_ref(float *dq, float *dk, float *dv, double *scratch,
                                 const kern_bf16 *dout, const float *D, const float *m,
                                 const float *l, const kern_bf16 *q, const kern_bf16 *k,
                                 const kern_bf16 *v, const int32_t *qpos, const int32_t *kpos,
                                 int64_t B, int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl,
                                 int64_t H);
#endif
