/* model_impl: the model instance's internals, shared by model.c (parameters, the dense decoder's
 * forward and backward), sublayer.c (a sublayer's two ends, with the tensor axis's collectives)
 * and model_moe.c (the mixture-of-experts MLP). Internal to train/model. */
#ifndef MT_TRAIN_MODEL_IMPL_H
#define MT_TRAIN_MODEL_IMPL_H
#include <stdint.h>

#include "kernels/gemm.h"
#include "train/model/hooks.h"
#include "train/model/model.h"

/* Saved activations of one block. The dense MLP's a, b, g, or the MoE MLP's (moe.h's names):
 * router logits rlog[R, E], prob[R, E], lse[R], choices idx[R, k] with weights w[R, k], the
 * dispatch plan pos[R, k], src[R·k], offs[E + 1], kept[E] and the groups' counters cnt[G, E], the
 * dispatched rows xs[R·k, D] and their outputs ys[R·k, D]; the rows this rank's experts take,
 * xr[R·k·ep_n, D] grouped by local expert (loffs[El + 1]), with the experts' ea, eb, eh
 * [R·k·ep_n, F_e] and outputs yr (without an expert axis xr is xs and yr ys); the shared
 * experts' sa, sb, sh [R, S·F_e] (expert s in columns [s·F_e, (s+1)·F_e)). */
typedef struct {
    float *x1, *h1, *rstd1, *q, *k, *v, *P, *att, *x2, *h2, *rstd2, *a, *b, *g;
    /* a split backward's (model_bwd_part): what the input part leaves for the weight part, the
     * gradients of the matmuls' outputs: the MLP's and attention's outputs [BT, D], a and b
     * [BT, F_Y], q [BT, N_Y·H], k and v [BT, K_Y·H] (NULL unless the stage is split; with bf16
     * compute NULL too, and the *b fields hold them as the input part rounded them for its dX
     * products, the operands of the weight part's dW) */
    float *d_mlp, *d_a, *d_b, *d_attn, *d_q, *d_k, *d_v;
    kern_bf16 *d_mlpb, *d_ab, *d_bb, *d_attnb, *d_qb, *d_kb, *d_vb;
    float *d_n; /* [2·D]: the gains' gradients (attn_norm, mlp_norm) kept for the weight part */
    /* a split MoE block's instead of d_mlp, d_a, d_b (moe_split_carve): the rows' output
     * gradients on the experts' ranks [BT·k·ep_n, D] and their products' [BT·k·ep_n, F_e], the
     * block output's gradient [BT, D] and the shared experts' products' [BT, S·F_e] (with shared
     * experts), the router logits' [BT, E]; with bf16 compute the first six as the input part
     * rounded them for its products (the *b fields; the fp32 ones NULL), the router's fp32 */
    float *k_dyr, *k_dea, *k_deb, *k_dr, *k_dsa, *k_dsb, *k_dlog;
    kern_bf16 *k_dyrb, *k_deab, *k_debb, *k_drb, *k_dsab, *k_dsbb;
    float *rlog, *prob, *lse, *w, *xs, *ea, *eb, *eh, *ys, *sa, *sb, *sh, *xr, *yr;
    int32_t *idx, *pos, *src, *cnt;
    float *gbal; /* a context axis's: each group's sequence's f[E] and P[E] (model_moe_cp.c) */
    int64_t *offs, *kept, *loffs, *epc; /* epc: the expert axis's counts (model_moe_counts_n) */
    kern_bf16 *Pb; /* bf16 compute: attention's probabilities in bf16 (P is NULL then) */
    /* bf16 compute: the saved inputs of the products, in bf16, written once by the forward and
     * multiplied as they are by the backward (attention's q, k, v and its output only without a
     * context axis, whose attention reads them in fp32; a MoE block's g is none). Where one
     * is kept, its fp32 field points at the forward's transient scratch (layout_transients);
     * NULL: the fp32 field is the saved one (fp32 compute, model_fwd_rows' workspace). */
    kern_bf16 *h1b, *qb, *kb, *vb, *attb, *h2b, *gb;
    /* bf16 compute in a MoE block: the experts' rows xrb [R·k·ep_n, D] and hidden ehb
     * [R·k·ep_n, F_e], the shared experts' shb [R, S·F_e], the copies their dW multiply (the
     * fp32 xs, xr, eh, sh are then the forward's transients: mixed_transients) */
    kern_bf16 *xrb, *ehb, *shb;
    unsigned b16_kept; /* which of them (KEPT_*): set before any carving, the sizing pass's too */
} layer_act;
enum { KEPT_H1 = 1, KEPT_QKV = 2, KEPT_ATT = 4, KEPT_H2 = 8, KEPT_G = 16 };

/* Saved activations of one micro-batch in flight on this stage (pipelining keeps several). */
typedef struct {
    layer_act *act; /* [Ls] */
    float *xf;      /* [chunks][BT, D]: each chunk's output residual (the last one's: the final) */
    float *hf, *rstdf, *logits, *lse, *stats;
    kern_bf16 *hfb; /* bf16 compute: the final norm's output (hf: transient then), as layer_act's */
    int hf_kept;
    float *dgf; /* [D] split: the final norm gain's gradient kept for the weight part (model_split.c) */
    int32_t *targets;
} slot_act;

/* The MoE backward's scratch (one block at a time): dys, dxs [BT·k, D], their rows on the
 * experts' ranks dyr, dxr [BT·k·ep_n, D] (dys, dxs without an expert axis), dea, deb
 * [BT·k·ep_n, F_e], dsa, dsb [BT, S·F_e], dlog [BT, E], dw [BT·k], frac, pmean [E], ga [Bl, E].
 * bf16 compute: the bf16 roundings the products take, dyrb [BT·k·ep_n, D], deab, debb
 * [BT·k·ep_n, F_e], dsab, dsbb [BT, S·F_e]; and the forward's fp32 transients xs_t [BT·k, D],
 * xr_t [BT·k·ep_n, D] (xs_t without an expert axis), eh_t [BT·k·ep_n, F_e], sh_t [BT, S·F_e]
 * (the backward unpacks a block's h2 into xs_t for the router's fp32 dW). */
typedef struct {
    float *dys, *dxs, *dyr, *dxr, *dea, *deb, *dsa, *dsb, *dlog, *dw, *frac, *pmean, *ga;
    double *cprec; /* a context axis's: the hook moe_cp_sum's records [Bl, 3E] */
    kern_bf16 *dyrb, *deab, *debb, *dsab, *dsbb;
    float *xs_t, *xr_t, *eh_t, *sh_t;
} moe_scratch;

/* What the router did since the last reset (model_moe_stats): kept slots per MoE block and
 * expert, dropped and all slots; the balance losses summed over the blocks' sequences (aux_n of
 * them) and the z-losses over their tokens (z_n). */
typedef struct {
    int64_t *kept;
    int64_t dropped, slots, aux_n, z_n;
    double aux_sum, z_sum;
} moe_tally;

struct model {
    model_shape s;
    int64_t Bl, BT;
    int64_t l0, l1, Ls; /* this stage's layers [l0, l1) */
    int first, last, nslots;
    int chunks, split, v_shape; /* model_stage_info's */
    int64_t Lc;        /* layers per chunk */
    model_extents loc;
    model_hooks hk; /* communication and sharded storage (model_hooks_single on one rank) */
    struct trace *tr; /* spans of the passes (model_set_trace; NULL: none) */
    param_slab slab[P_ALL];
    int64_t off[P_ALL], cnt[P_ALL], nparams;
    float *params, *grads;
    slot_act *slot;
    layer_act *acts;
    float *act_block;
    int32_t *tgt_block;
    int64_t act_bytes;
    /* scratch (reused within a step) */
    float *rope_cos, *rope_sin, *d_resid, *d_full, *d_part, *s_big, *s_f1, *s_f2, *s_q, *s_k, *s_v,
        *s_att, *s_attn;
    /* bf16 compute (mixed.c; NULL in fp32): the products' bf16 operands sb[4] [BT, max(D, N_l·H,
     * F_l, V_l)] each (in model_fwd_rows the rows' own); the bf16 copy of the parameters (in their
     * layout), made for a layer when a pass first uses it after model_params_changed (wver: the
     * parameters' version, lver[l] and uver the version of a layer's and the unembedding's copy;
     * none under ZeRO-3, whose hooks hand the matrices over in bf16) */
    model_compute cmp;
    kern_bf16 *sb[4], *sb_train[4], *params_b, *act_b_block;
    int64_t wver, uver, *lver;
    int64_t b16_made; /* the layers' and unembedding's copies made so far (model_bf16_copies) */
    kern_bf16 *pan_block; /* the panel copies (mixed_alloc_panels), NULL when none */
    int64_t pan_elems;
    float *pan32; /* fp32 compute's panel copies (panels_f32.c), NULL when none */
    kern_f32_ctx *f32; /* their table, which the forward's products pass (NULL when none) */
    int64_t pan32_elems;
    /* mixture of experts */
    moe_scratch ms;
    moe_tally tally;
    float grad_scale; /* of the backward in progress (the balance and z-losses' gradients) */
    int rows_mode;    /* in model_fwd_rows: route against rows_seq / rows_cnt */
    const int32_t *rows_seq;
    int32_t *rows_cnt;
    int64_t rows_cap; /* model_rows_ws's largest R: with an expert axis, the rows any rank may send
                         (its experts' workspace takes ep_n ranks' of them, whatever this R) */
};

/* Carves consecutive 64-byte-aligned views out of one block (sizing pass when base is NULL). */
typedef struct {
    float *base;
    int64_t used;
} carver;
static inline float *carve(carver *c, int64_t n) {
    float *p = c->base ? c->base + c->used : NULL;
    c->used += (n + 15) & ~(int64_t)15;
    return p;
}

/* n bf16 values from c (a carver of a block that holds bf16 values: two in each float). */
static inline kern_bf16 *carve_b(carver *c, int64_t n) {
    return (kern_bf16 *)(void *)carve(c, (n + 1) / 2);
}

/* n floats from c unless the value is kept in bf16 alone (NULL then, the field pointed at a
 * transient later: mixed_transients). */
static inline float *carve_f32(carver *c, unsigned kept, int64_t n) {
    return kept ? NULL : carve(c, n);
}

/* The kept operands of a split backward (split_carve, moe_split_carve), count of them: *f[i]
 * n[i] floats from c with fp32 compute, *b[i] n[i] bf16 values from cb with bf16 compute (the
 * other NULL; both NULL when n[i] is 0). */
static inline void split_carve_kept(const model *m, carver *c, carver *cb, float **const *f,
                                    kern_bf16 **const *b, const int64_t *n, int count) {
    for (int i = 0; i < count; i++) {
        *f[i] = m->cmp.bf16 || n[i] == 0 ? NULL : carve(c, n[i]);
        *b[i] = m->cmp.bf16 && n[i] > 0 ? carve_b(cb, n[i]) : NULL;
    }
}

/* A layer's matrices in bf16 (mixed_layer): a dense block's, or a MoE block's experts' (the
 * router stays fp32). */
typedef struct {
    const kern_bf16 *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    const kern_bf16 *e_gate, *e_up, *e_down, *s_gate, *s_up, *s_down;
} layer_wb;

/* Between kernels: lets the communication in flight move on (the hooks' poll). */
#define POLL(m) (m)->hk.poll((m)->hk.ctx)

/* ---- sublayer.c ---- */
/* A sublayer's input norm and in-projections: h[BT, D] = rmsnorm(x) ∘ gain (rstd[BT] the rows'
 * 1/rms), y[k][BT, nk[k]] = h · w[k][D, nk[k]] for k < nw. sharded (sublayer_out returned 1): x
 * holds only this rank's D_Y columns, and the gather of the others into x runs beside the
 * in-projections' blocks. bf16 compute (wb): h is rounded into hb, the copy the backward's dW
 * multiplies (NULL: into the scratch sb[0]). */
void sublayer_norm_in(model *m, float *x, int sharded, float *h, float *rstd, const float *gain,
                      int nw, const float *const *w, const kern_bf16 *const *wb, const int64_t *nk,
                      float *const *y, int64_t BT, kern_bf16 *hb);
/* out[BT, D] = xin[BT, D] + act[BT, Kl] · w[Kl, D] (of xin only this rank's D_Y columns are
 * read: the product is reduce-scattered over the tensor axis); bf16 compute (wb): act rounded
 * into actb, the copy the backward keeps (NULL: into the scratch sb[1]). defer: out goes to a
 * sublayer_norm_in next and to nothing else, which may then gather it: returns 1 when out was
 * left sharded (only this rank's D_Y columns), else 0. sublayer_out_local: the same on one rank,
 * one accumulating gemm (out may alias xin) on f32's panel copies (m->f32; NULL: none). */
int sublayer_out(model *m, float *out, const float *xin, const float *act, kern_bf16 *actb,
                 const float *w, const kern_bf16 *wb, int64_t BT, int64_t Kl, int defer);
void sublayer_out_local(kern_f32_ctx *f32, float *out, const float *xin, const float *act,
                        const float *w, int64_t BT, int64_t Kl, int64_t D);
/* The backward of sublayer_out's product from dr = dL/d(out) [BT, D_Y]: dact[BT, Kl] = dout · wᵀ
 * (overwrites), dw[Kl, D] += actᵀ · dout (bf16 compute: actb, the forward's bf16 copy of act, or
 * NULL: act rounded here). dw NULL: no weight gradient, and keep (when not NULL) gets dout
 * [BT, D] for a later one, or with bf16 compute keepb its bf16 rounding. */
void sublayer_out_bwd(model *m, float *dact, float *dw, float *dr, const float *act,
                      const kern_bf16 *actb, const float *w, const kern_bf16 *wb, int64_t BT,
                      int64_t Kl, float *keep, kern_bf16 *keepb);
/* The backward of nw ≤ 3 in-projections y_k = h·w_k [BT, nk[k]] from dy_k: sublayer_in_dx, dh
 * [BT, D] = Σ_k dy_k·w_kᵀ (overwrites; bf16 compute: wb, the dy_k rounded to bf16 here, into
 * dyb[k] to keep them for a split backward's weight part, or, dyb NULL, the scratch); then,
 * after the norm's backward, sublayer_in_dw, dw_k += hᵀ·dy_k (bf16: the dy_k as the first call
 * rounded them, h the forward's bf16 copy hb, or rounded here when hb is NULL). */
void sublayer_in_dx(model *m, float *dh, int nw, float *const *dy, const float *const *w,
                    const kern_bf16 *const *wb, const int64_t *nk, int64_t BT,
                    kern_bf16 *const *dyb);
void sublayer_in_dw(model *m, float *const *dw, const float *h, const kern_bf16 *hb, int nw,
                    float *const *dy, const int64_t *nk, int64_t BT);
/* Where a sublayer's input gradient accumulates: dr itself without a tensor axis, else the
 * zeroed [BT, D] d_part that the hook partial_end reduce-scatters into dr. */
float *sublayer_partial_begin(model *m, float *dr, int64_t BT);
/* dL/d(embedding output) [BT, D] from the residual gradient d_resid (gathered under a tensor
 * axis, into d_full). */
const float *sublayer_resid_grad(model *m, int64_t BT);
/* stats[3, BT] (rowmax, rowsum, target logit) of this vocabulary shard → combined over the
 * shards (a no-op without a tensor axis). */
void sublayer_xent_combine(model *m, float *st, int64_t BT);

/* ---- mixed.c: bf16 compute (m->cmp.bf16) ---- */
/* dst[i] = b(src[i]), i < n (nothing in a dry run without data). */
void mixed_pack(kern_bf16 *dst, const float *src, int64_t n);
/* dst[i] = src[i]'s value (bf16 to fp32, exact), i < n; returns dst. */
const float *mixed_unpack(float *dst, const kern_bf16 *src, int64_t n);
/* A product's activation input x[n] in bf16. mixed_keep (the forward): rounded now into saved,
 * the copy the backward multiplies, or with none kept (NULL) into scratch. mixed_saved (the
 * backward): saved as it is, or x rounded again into scratch (the same values). */
const kern_bf16 *mixed_keep(kern_bf16 *saved, kern_bf16 *scratch, const float *x, int64_t n);
const kern_bf16 *mixed_saved(const kern_bf16 *saved, kern_bf16 *scratch, const float *x, int64_t n);
/* bf16 compute's saved copies of block A's product inputs (from cb: h1, q, k, v, att without a
 * context axis, h2, g unless moe: a MoE block's own are moe_carve_act's) and the final norm's
 * of slot S (last: the stage
 * holds it); their fp32 fields are pointed at the transients by mixed_transients. */
void mixed_carve_act(const model *m, carver *cb, layer_act *A, int moe);
void mixed_carve_head(const model *m, carver *cb, slot_act *S);
void mixed_transients(model *m);
/* The operand scratch sb[4] of the model's BT rows; in
 * model_fwd_rows the sb[4] of R rows, from its fp32 workspace. */
void mixed_carve_scratch(model *m, carver *c);
void mixed_rows_carve(model *m, carver *c, kern_bf16 **sb, int64_t R);
/* Layer l's matrices in bf16 (w: as the hook handed them over), and the unembedding's. */
layer_wb mixed_layer(model *m, const layer_w *w, int64_t l);
const kern_bf16 *mixed_unembed(model *m, const float *un); /* un NULL: the hook's bf16 one */
/* The panel copies' storage (model_compute.panels on a context that reads them): 0, or −1 out of
 * memory. */
int mixed_alloc_panels(model *m);
/* Attention on B·T rows of A: forward from A's q, k, v (rotated) into att and Pb; backward from
 * datt [BT, N_l·H] into dq, dk, dv (fp32). */
void mixed_attn_fwd(model *m, layer_act *A, int64_t B, int64_t T);
void mixed_attn_bwd(model *m, const layer_act *A, const float *datt, float *dq, float *dk,
                    float *dv, int64_t B, int64_t T);

/* ---- panels_f32.c: fp32 compute's panel copies (model_compute.panels in MODEL_FP32) ---- */
/* Matrix i of a layer as the forward multiplies it, [K, N]: wq, wk, wv, wo, w_gate, w_up, w_down
 * (i < 7); i = 7: the unembedding (mixed.c's bf16 panel copies use it too). */
void model_matrix_dims(const model *m, int i, int64_t *K, int64_t *N);
/* The copies' storage and their context, where the model makes them (model_f32_panels): 0, or
 * −1 out of memory. */
int panels_f32_alloc(model *m);
/* Packs every copy from the weights as they are now and registers it on m->f32 (no-op without
 * copies, or where SMPI's no-data mode leaves the weights unset: the storage is then allocated,
 * not made). */
void panels_f32_make(model *m);
/* Unregisters and frees them, and the context. */
void panels_f32_free(model *m);
/* Their storage's bytes (0 when the model keeps none), counted as allocated: also under SMPI's
 * no-data mode, where panels_f32_make leaves them unpacked. */
int64_t panels_f32_bytes(const model *m);

/* ---- model_moe.c ---- */
/* The MoE fields of A for R rows in `groups` groups (their counters); with bf16 compute the
 * copies the backward multiplies from cb (NULL: model_fwd_rows' workspace, every field from c). */
void moe_carve_act(const model *m, carver *c, carver *cb, layer_act *A, int64_t R, int64_t groups);
/* The backward's scratch for the model's BT rows (bf16 compute: its bf16 operands from cb). */
void moe_carve_scratch(model *m, carver *c, carver *cb);
/* Forward of block l's MoE MLP on BT rows of A, whose rows are groups of G consecutive tokens of
 * a sequence (or, in m->rows_mode, each row's sequence's counters): h2 = rmsnorm(x2)·mlp_norm,
 * out[BT, D] = x2 + Σ_s shared_s(h2) + Σ_j w_j·expert_{idx_j}(h2). stats: G is a whole training
 * sequence: tally the balance and z-losses. sharded, defer and the result: as a dense MLP's
 * (sublayer_norm_in, sublayer_out); under a tensor axis the experts' F_e is sharded. */
int moe_block_fwd(model *m, const layer_w *w, const layer_wb *wb, layer_act *A, float *out,
                  int64_t l, int64_t BT, int64_t G, int stats, int sharded, int defer);
/* Its backward up to the norm: dh[BT, D] = dL/dh2 (overwrites) from dr = dL/d(out) (the
 * residual's gradient), the experts', shared experts' and router's weight gradients into g (+=),
 * with the balance and z-losses' gradients for groups of G rows. keep (a split backward's input
 * part): no weight gradient; their products' output gradients kept in A's k_* for moe_block_dw,
 * the weight part, which adds the same products' bits to g. bf16 compute (wb): the experts'
 * products on their bf16 copies, the router's in fp32. */
void moe_block_bwd(model *m, const layer_w *w, const layer_wb *wb, const layer_g *g, layer_act *A,
                   float *dh, const float *dr, int64_t BT, int64_t G, int keep);
void moe_block_dw(model *m, const layer_g *g, const layer_act *A, int64_t BT);
/* The k_* fields of a split MoE block A (fp32 from c; bf16 compute: bf16 from cb). */
void moe_split_carve(const model *m, carver *c, carver *cb, layer_act *A);

/* ---- model_moe_cp.c: routing under a context axis (NULLs without one) ---- */
/* A's balance of each of `groups` groups' sequences, gbal [groups, 2E]; the hook's records. */
float *moe_cp_carve(const model *m, carver *c, int64_t groups);
double *moe_cp_carve_scratch(const model *m, carver *c);
/* The dispatch plan of BT rows of A in pieces of G tokens (A's router output made): the pieces'
 * statistics made whole over C (moe_cp_sum), A->gbal, the capacity of a whole sequence and its
 * counters at each piece's start, then kern_moe_plan. Collective over C. */
void moe_cp_plan(model *m, layer_act *A, int64_t BT, int64_t G);

/* model_split.c: the split backward. split_bwd_grads: where the input part's gradients of block
 * l go (the hook's, or with no gradients held by the model the gains' alone, kept in A->d_n);
 * split_bwd_weight: block l's weight part (every matmul's dW; MODEL_BWD_WEIGHT). */
layer_g split_bwd_grads(model *m, layer_act *A, int64_t l);
/* What the input part keeps of block A for the weight part: the gains' gradients d_n and the
 * products' output gradients, fp32 from c (d_*), or with bf16 compute bf16 from cb (d_*b); of a
 * MoE block (moe) attention's, and the mixture's k_* (moe_split_carve). */
void split_carve(const model *m, carver *c, carver *cb, layer_act *A, int moe);
void split_bwd_weight(model *m, layer_act *A, int64_t l, int64_t BT);
#endif
