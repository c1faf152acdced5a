/* cp: the context axis C's attention hooks (--cp AXIS, hooks.h's cp_attn_fwd/cp_attn_bwd).
 *
 * How it works. Every sequence's T tokens are split over C (plan_cp.c: rank i holds T_C = T/|C|
 * of them, zigzag or contiguous); the model holds this rank's R = B·T_C rows of its B sequences,
 * their norms, MLPs and loss its own. Attention needs the keys and values of every earlier token,
 * which live on the other ranks of C. RoPE first rotates q and k to their GLOBAL positions (the
 * rotary table of the whole T), so that a query-key product equals the unsplit run's.
 *
 *   allgather  forward: AllGather_C K, V [B, T_C, K_Y·H] → every rank's, put in sequence order
 *              [B, T, K_Y·H]; this rank's queries attend them with the blockwise kernel
 *              (kern_attn_part_fwd, one block of every key: qpos the rank's positions, kpos
 *              0..T−1), keeping the softmax's max and sum (m, l) per row and head. Backward:
 *              AllGather_C again (nothing of [B, T] is kept between the passes), the blockwise
 *              backward into dQ and the whole dK, dV [B, T, K_Y·H] of this rank's queries,
 *              ReduceScatter_C of dK, dV back to each key's owner.
 *   ring       forward: |C| steps; at step s the rank holds the K, V block of rank coord − s and
 *              attends it while passing it on to coord + 1 (a ppermute); the partials merge online
 *              (kern_attn_part_merge). The zigzag split makes every step's work equal on every
 *              rank (kernels/seqsplit.h). Backward: the blocks go round again with their dK, dV,
 *              which each rank's queries add to, and finally go home; with --overlap a block's
 *              dK, dV travel while the next block's dQ half is computed (ring_bwd).
 *   ulysses    (contiguous split) forward: one AllToAll_C turns q, k, v [B, T_C, heads] into
 *              [B, T, heads_C] (rank j takes the j-th group of the N_Y/|C| query and K_Y/|C| kv
 *              heads, whose GQA pairing stays within the group; with K_Y < |C| kv heads, the
 *              one kv head its query heads use, sent to each of the |C|/K_Y ranks that share
 *              it, whose dK, dV come back summed in rank order), the whole-sequence kernel
 *              (kern_attn_fwd, as one rank runs it) attends them, and a second AllToAll brings the
 *              output back; saved: the probabilities and the head-sharded q, k, v. Backward: the
 *              same for dO, kern_attn_bwd, and dQ, dK, dV back to their rows. In bf16 compute
 *              the head shards are rounded once and attended by the bf16 kernels one rank uses
 *              (kern_attn_fwd_bf16/bwd_bf16 on the model's context), P, q, k, v saved in bf16:
 *              every head's numbers are then the 1-rank bf16 run's. Q, K, V, O and dO travel
 *              in bf16 then (PLAN_CP_ALL_TO_ALL_BF16): each is rounded to bf16 before a product
 *              reads it (O by the model's wo product), so the bits are the same in half the
 *              bytes; dQ, dK, dV go at --comm-dtype (RoPE's backward and the replicated kv
 *              heads' sums read them in fp32).
 *   bf16       allgather and ring in bf16 compute (plan_cp_blk_bf16): q, k, v and dO are rounded
 *              once, K and V travel in bf16 (half the bytes: PLAN_CP_GATHER_KV_BF16,
 *              PLAN_CP_HOP_BF16) and the blockwise bf16 kernels (kern_attn_part_fwd_bf16/_bwd_bf16,
 *              the 1-rank bf16 kernels' rounding points) attend them; dK, dV stay fp32 (they
 *              accumulate). allgather's forward is then the 1-rank bf16 run's bit for bit (a row's
 *              products depend on its row alone); the ring rounds each block's own probabilities,
 *              normalised by the block's sum, and D = rowsum(bf16 dO ∘ O). The rounded q, k, v
 *              are the model's saved copies (the hooks' b16: written once by the forward, read
 *              by the backward; the model keeps no fp32 q, k, v then); the ring keeps att fp32
 *              for D, the others keep att in bf16 alone (model_extents.cp_reads).
 *
 * With --tensor each rank does this for its N_Y heads and K_Y kv heads. The gradients of the
 * weights are then this rank's tokens' share: the data axes' reduction, which includes C (par.c),
 * sums them. */
#include <math.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attn_bf16.h"
#include "kernels/attn_part.h"
#include "kernels/rope.h"
#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

void cp_init(struct par *p) {
    const plan *pl = p->pl;
    par_cp *c = &p->cp;
    if (pl->cp.n == 1) return;
    const int64_t C = pl->cp.n, T = pl->s.T, H = pl->s.H, Tl = T / C;
    void *(*b)[2] = p->bufs.p;
    c->saved = b[BUF_CP_SAVED][0];
    c->kv = b[BUF_CP_KV][0];
    float *s = b[BUF_CP_SCRATCH][0];
    c->cos = s, c->sin = s + T * H / 2;
    c->qpos = (int32_t *)(void *)(s + T * H);
    c->kpos = c->qpos + Tl;
    c->iota = c->kpos + C * Tl;
    c->ker = (float *)(void *)(c->iota + T);
    kern_rope_table(c->cos, c->sin, T, H);
    plan_cp_pos(pl, pl->cp.index, c->qpos);
    for (int64_t r = 0; r < C; r++) plan_cp_pos(pl, r, c->kpos + r * Tl);
    for (int64_t t = 0; t < T; t++) c->iota[t] = (int32_t)t;
}

/* The softmax statistics (m, l) of slot k's stored layer l: [2][R, N_Y]. */
static float *saved_at(const struct par *p, int slot, int64_t l) {
    const plan *pl = p->pl;
    return p->cp.saved + ((int64_t)slot * (pl->l1 - pl->l0) + l) * plan_cp_saved(pl);
}

/* x[R, nh·H] rotated to (inverse = 1: back from) this rank's global positions. */
static void rotate(const struct par *p, float *x, int64_t nh, int inverse) {
    const plan *pl = p->pl;
    const int64_t H = pl->s.H, Tl = pl->s.T / pl->cp.n;
    kern_rope_apply_pos(x, p->cp.cos, p->cp.sin, p->cp.qpos, pl->micro_seqs, Tl, nh, H, nh * H,
                        inverse);
}

/* ---------------------------------------------------------------- allgather */

/* Rank-major blocks g[|C|][2][B, T_C, KH] ↔ sequence order full[2][B, T, KH] of es-byte elements
 * (to = 1: into full; 0: back into g). */
static void ag_order(const struct par *p, void *g, void *full, int to, size_t es) {
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, T = pl->s.T, Tl = T / C, Bl = pl->micro_seqs;
    const int64_t KH = pl->loc.Kl * pl->s.H, R = Bl * Tl;
    for (int64_t r = 0; r < C; r++)
        for (int kv = 0; kv < 2; kv++)
            for (int64_t b = 0; b < Bl; b++)
                for (int64_t t = 0; t < Tl; t++) {
                    char *gr = (char *)g + ((r * 2 + kv) * R + b * Tl + t) * KH * (int64_t)es;
                    char *fr = (char *)full +
                               ((kv * Bl + b) * T + p->cp.kpos[r * Tl + t]) * KH * (int64_t)es;
                    if (to)
                        memcpy(fr, gr, (size_t)KH * es);
                    else
                        memcpy(gr, fr, (size_t)KH * es);
                }
}

/* bf16 compute's rounded q and dO [R, NH] (plan_cp_blk_bf16), after the algorithm's regions of
 * BUF_CP_KV, which end `used` floats in. The kernels read q from qr: the model's saved copy, or q
 * rounded into the region where the model keeps none (cp_q_bf16). */
typedef struct {
    kern_bf16 *q, *dout;
    const kern_bf16 *qr;
} cp_b16;
static cp_b16 cp_b16_regions(const struct par *p, int64_t used) {
    kern_bf16 *b = (kern_bf16 *)(void *)(p->cp.kv + used);
    return (cp_b16){b, b + p->pl->rows * p->pl->loc.Nl * p->pl->s.H, NULL};
}

/* The model's saved bf16 q, k, v (b16, NULL where it keeps none): the forward rounds the rotated
 * values into them once; the kernels read q there (cp_q_bf16), and bf16_from copies k, v into the
 * buffers that travel. */
static void cp_keep_qkv(const struct par *p, kern_bf16 *const b16[3], const float *q,
                        const float *k, const float *v) {
    const int64_t R = p->pl->rows, H = p->pl->s.H;
    if (!plan_cp_blk_bf16(p->pl) || !b16[0]) return;
    kern_bf16_pack(b16[0], q, R * p->pl->loc.Nl * H);
    kern_bf16_pack(b16[1], k, R * p->pl->loc.Kl * H);
    kern_bf16_pack(b16[2], v, R * p->pl->loc.Kl * H);
}

/* b->qr: the saved rounded q when the model keeps it (its bits, read in place), else q [R, NH]
 * rounded now into b->q. */
static void cp_q_bf16(const struct par *p, cp_b16 *b, const kern_bf16 *saved, const float *q) {
    b->qr = saved ? saved : b->q;
    if (!saved) kern_bf16_pack(b->q, q, p->pl->rows * p->pl->loc.Nl * p->pl->s.H);
}

/* dst[n] = x rounded: the saved copy's bits when there is one, else rounded now. */
static void bf16_from(kern_bf16 *dst, const kern_bf16 *saved, const float *x, int64_t n) {
    if (saved)
        memcpy(dst, saved, (size_t)n * sizeof *dst);
    else
        kern_bf16_pack(dst, x, n);
}

/* The allgather's regions of BUF_CP_KV: send [2, R·KH], g [|C|, 2, R·KH], full and dfull
 * [2, B, T, KH]. */
typedef struct {
    float *send, *g, *full, *dfull;
    cp_b16 b;
} ag_bufs;
static ag_bufs ag_regions(const struct par *p) {
    const plan *pl = p->pl;
    const int64_t KH = pl->loc.Kl * pl->s.H, R = pl->rows, n = 2 * pl->micro_seqs * pl->s.T * KH;
    float *kv = p->cp.kv;
    return (ag_bufs){kv, kv + 2 * R * KH, kv + 2 * R * KH + n, kv + 2 * R * KH + 2 * n,
                     cp_b16_regions(p, 2 * R * KH + 3 * n)};
}

/* Every rank's rotated k and v, in sequence order into a.full: fp32, or in bf16 compute rounded
 * once (b16: the model's saved copies) and gathered in bf16 (a.full's first half then holds
 * kern_bf16 K, V [2, B, T, KH]). */
static void ag_gather(struct par *p, const ag_bufs *a, const float *k, const float *v,
                      const kern_bf16 *const b16[3]) {
    const int64_t n = p->pl->rows * p->pl->loc.Kl * p->pl->s.H;
    if (plan_cp_blk_bf16(p->pl)) {
        kern_bf16 *s = (kern_bf16 *)(void *)a->send;
        bf16_from(s, b16[1], k, n);
        bf16_from(s + n, b16[2], v, n);
        par_run_b(p, PLAN_CP_GATHER_KV_BF16, (kern_bf16 *)(void *)a->g, s, 2 * n);
        ag_order(p, a->g, a->full, 1, sizeof(kern_bf16));
        return;
    }
    floats_copy(a->send, k, n);
    floats_copy(a->send + n, v, n);
    par_run(p, PLAN_CP_GATHER_KV, a->g, a->send, 2 * n);
    ag_order(p, a->g, a->full, 1, sizeof(float));
}

static void ag_fwd(struct par *p, const model *mod, float *att, float *ms, const float *q,
                   const float *k, const float *v, const kern_bf16 *const b16[3]) {
    const plan *pl = p->pl;
    const int64_t T = pl->s.T, Tl = T / pl->cp.n, Bl = pl->micro_seqs, H = pl->s.H;
    const int64_t Nl = pl->loc.Nl, Kl = pl->loc.Kl, F = Bl * T * Kl * H;
    ag_bufs a = ag_regions(p);
    ag_gather(p, &a, k, v, b16);
    if (plan_cp_blk_bf16(pl)) {
        const kern_bf16 *kf = (const kern_bf16 *)(void *)a.full;
        cp_q_bf16(p, &a.b, b16[0], q);
        kern_attn_part_fwd_bf16(model_compute_of(mod)->ctx, att, ms, ms + pl->rows * Nl, p->cp.ker,
                                a.b.qr, kf, kf + F, p->cp.qpos, p->cp.iota, Bl, Tl, T, Nl, Kl, H);
    } else {
        kern_attn_part_fwd(att, ms, ms + pl->rows * Nl, p->cp.ker, q, a.full, a.full + F,
                           p->cp.qpos, p->cp.iota, Bl, Tl, T, Nl, Kl, H);
    }
    p->cp.flops += kern_attn_part_flops(p->cp.qpos, Tl, p->cp.iota, T, H) * (double)(Bl * Nl);
}

static void ag_bwd(struct par *p, const model *mod, float *dq, float *dk, float *dv,
                   const float *datt, const float *ms, const float *q, const float *k,
                   const float *v, const kern_bf16 *const b16[3]) {
    const plan *pl = p->pl;
    const int64_t T = pl->s.T, Tl = T / pl->cp.n, Bl = pl->micro_seqs, H = pl->s.H;
    const int64_t Nl = pl->loc.Nl, Kl = pl->loc.Kl, R = pl->rows, n = R * Kl * H;
    const int64_t full = Bl * T * Kl * H;
    ag_bufs a = ag_regions(p);
    ag_gather(p, &a, k, v, b16);
    floats_clear(dq, R * Nl * H);
    floats_clear(a.dfull, 2 * full);
    /* D = NULL: the block holds every key the rows see, so D = Σ_j P_ij dP_ij over it */
    if (plan_cp_blk_bf16(pl)) {
        const kern_bf16 *kf = (const kern_bf16 *)(void *)a.full;
        cp_q_bf16(p, &a.b, b16[0], q);
        kern_bf16_pack(a.b.dout, datt, R * Nl * H);
        kern_attn_part_bwd_bf16(model_compute_of(mod)->ctx, dq, a.dfull, a.dfull + full, p->cp.ker,
                                a.b.dout, NULL, ms, ms + R * Nl, a.b.qr, kf, kf + full, p->cp.qpos,
                                p->cp.iota, Bl, Tl, T, Nl, Kl, H, KERN_ATTN_PART_BOTH);
    } else {
        kern_attn_part_bwd(dq, a.dfull, a.dfull + full, p->cp.ker, datt, NULL, ms, ms + R * Nl, q,
                           a.full, a.full + full, p->cp.qpos, p->cp.iota, Bl, Tl, T, Nl, Kl, H,
                           KERN_ATTN_PART_BOTH);
    }
    ag_order(p, a.g, a.dfull, 0, sizeof(float));
    par_run(p, PLAN_CP_SCATTER_DKV, a.send, a.g, 2 * n);
    floats_copy(dk, a.send, n);
    floats_copy(dv, a.send + n, n);
}

/* ---------------------------------------------------------------- ring */

/* The ring's regions of BUF_CP_KV: two travelling blocks [4, R·KH] (K, V, dK, dV; in bf16
 * compute K, V are bf16 in the first half of theirs), a partial's o [R, NH], m, l [R, N_Y], the
 * backward's D [R, N_Y], and bf16 compute's rounded q and dO. */
typedef struct {
    float *blk[2], *o2, *m2, *l2, *D;
    cp_b16 b;
} ring_bufs;
static ring_bufs ring_regions(const struct par *p) {
    const plan *pl = p->pl;
    const int64_t R = pl->rows, KH = pl->loc.Kl * pl->s.H, NH = pl->loc.Nl * pl->s.H;
    const int64_t Nl = pl->loc.Nl;
    float *kv = p->cp.kv, *o2 = kv + 8 * R * KH;
    return (ring_bufs){{kv, kv + 4 * R * KH},
                       o2,
                       o2 + R * NH,
                       o2 + R * NH + R * Nl,
                       o2 + R * NH + 2 * R * Nl,
                       cp_b16_regions(p, 8 * R * KH + R * (NH + 3 * Nl))};
}

/* The block's K, V to send on: n = R·KH floats each, or in bf16 compute n bf16 elements each,
 * 2n elements that move as n 4-byte units. Returns the hop's kind; *units its count. */
static plan_coll ring_kv_hop(const struct par *p, int64_t n, int64_t *units) {
    const int b16 = plan_cp_blk_bf16(p->pl);
    *units = b16 ? n : 2 * n;
    return b16 ? PLAN_CP_HOP_BF16 : PLAN_CP_HOP;
}

/* Starts the hop of n units of kind k from `in` to the next rank of C (coord + 1; `out` receives
 * the previous rank's). An axis of 2 has no wraparound link: there the hop is the two ppermutes
 * +1 and −1, each rank the sender of one and the receiver of the other. */
static void ring_hop(struct par *p, plan_coll k, float *out, const float *in, int64_t n,
                     mesh_req *r[2]) {
    mesh_coll_call c = par_call(p, k, n);
    p->calls[k]++;
    r[0] = mesh_coll_start(p->m, &c, out, in);
    r[1] = NULL;
    if (p->pl->cp.n != 2) return;
    c.shift = -1;
    r[1] = mesh_coll_start(p->m, &c, out, in);
}
static void ring_wait(mesh_req *r[2]) {
    mesh_wait(r[0]);
    if (r[1]) mesh_wait(r[1]);
}
/* ring_wait of a dK, dV hop left in flight behind compute: counted, with the transfer it hid
 * (par_wait_hidden, per request: with C = 2 both ppermutes, +1 and −1). */
static void ring_wait_behind(struct par *p, mesh_req *r[2]) {
    for (int i = 0; i < 2 && r[i]; i++) p->cp.dkv_hidden += par_wait_hidden(r[i]);
    p->cp.dkv_behind++;
}

/* The positions of the block in hand at step s (it left rank coord − s). */
static const int32_t *ring_kpos(const struct par *p, int64_t s) {
    const int64_t C = p->pl->cp.n, Tl = p->pl->s.T / C;
    return p->cp.kpos + (p->pl->cp.index - s + C) % C * Tl;
}

/* Forward: the block in hand is attended while it travels on to the next rank; its partial
 * merges into (att, m, l) in the order the blocks arrive (the rank's own first). A block no
 * query sees is skipped (never under the zigzag split, where every block is half visible; under
 * the contiguous split rank i skips the blocks of ranks after it). */
/* The block's K, V (this rank's own) into blk: fp32, or rounded to bf16 (and b.qr set, q read
 * in place; b16: the model's saved copies). */
static void ring_load(const struct par *p, ring_bufs *b, float *blk, const float *q, const float *k,
                      const float *v, const kern_bf16 *const b16[3]) {
    const plan *pl = p->pl;
    const int64_t n = pl->rows * pl->loc.Kl * pl->s.H;
    if (plan_cp_blk_bf16(pl)) {
        kern_bf16 *kb = (kern_bf16 *)(void *)blk;
        bf16_from(kb, b16[1], k, n);
        bf16_from(kb + n, b16[2], v, n);
        cp_q_bf16(p, &b->b, b16[0], q);
        return;
    }
    floats_copy(blk, k, n);
    floats_copy(blk + n, v, n);
}

/* The partial of this rank's queries against the block in hand cur (its keys at kp). */
static void ring_part_fwd(struct par *p, const model *mod, const ring_bufs *b, float *o, float *m,
                          float *l, const float *q, const float *cur, const int32_t *kp) {
    const plan *pl = p->pl;
    const int64_t Tl = pl->s.T / pl->cp.n, n = pl->rows * pl->loc.Kl * pl->s.H;
    const int64_t Bl = pl->micro_seqs, Nl = pl->loc.Nl, Kl = pl->loc.Kl, H = pl->s.H;
    if (plan_cp_blk_bf16(pl)) {
        const kern_bf16 *kb = (const kern_bf16 *)(const void *)cur;
        kern_attn_part_fwd_bf16(model_compute_of(mod)->ctx, o, m, l, p->cp.ker, b->b.qr, kb, kb + n,
                                p->cp.qpos, kp, Bl, Tl, Tl, Nl, Kl, H);
    } else {
        kern_attn_part_fwd(o, m, l, p->cp.ker, q, cur, cur + n, p->cp.qpos, kp, Bl, Tl, Tl, Nl, Kl,
                           H);
    }
}

static void ring_fwd(struct par *p, const model *mod, float *att, float *ms, const float *q,
                     const float *k, const float *v, const kern_bf16 *const b16[3]) {
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, Tl = pl->s.T / C, Bl = pl->micro_seqs, H = pl->s.H;
    const int64_t Nl = pl->loc.Nl, Kl = pl->loc.Kl, R = pl->rows, n = R * Kl * H;
    ring_bufs b = ring_regions(p);
    int64_t units;
    const plan_coll hop = ring_kv_hop(p, n, &units);
    ring_load(p, &b, b.blk[0], q, k, v, b16);
    int have = 0;
    for (int64_t s = 0; s < C; s++) {
        float *cur = b.blk[s & 1];
        mesh_req *r[2] = {NULL, NULL};
        if (s + 1 < C) ring_hop(p, hop, b.blk[(s + 1) & 1], cur, units, r);
        const int32_t *kp = ring_kpos(p, s);
        if (kern_attn_part_visibility(p->cp.qpos, Tl, kp, Tl) == KERN_ATTN_PART_NONE) {
            p->cp.skipped++;
        } else {
            float *o = have ? b.o2 : att, *m = have ? b.m2 : ms, *l = have ? b.l2 : ms + R * Nl;
            ring_part_fwd(p, mod, &b, o, m, l, q, cur, kp);
            p->cp.flops += kern_attn_part_flops(p->cp.qpos, Tl, kp, Tl, H) * (double)(Bl * Nl);
            if (have) kern_attn_part_merge(att, ms, ms + R * Nl, b.o2, b.m2, b.l2, R, Nl, H);
            have = 1;
        }
        if (s + 1 < C) ring_wait(r);
    }
}

/* Backward: the blocks travel again, each with the dK, dV of the queries it met so far; the
 * block in hand gives this rank's queries their dQ share and adds theirs to its dK, dV (the
 * softmax recomputed from the final m, l, with D = rowsum(dO ∘ O)). K and V go on while the block
 * is computed; dK and dV follow once it is, and after the last step go home. Without --overlap
 * each dK, dV hop is waited at once. With --overlap kern_attn_part_bwd runs in halves: the rows'
 * half (the scores recomputed, dS and dQ: three of its five products) needs no dK, dV, so it runs
 * while the block's dK, dV arrive from the previous rank; the keys' half then adds this rank's
 * share and the dK, dV leave at once, to arrive while the next rank runs its rows' half: |C| − 1
 * hops behind compute, the last (home) waited. The same products in the same order: the same
 * bits either way (every head's P, dS kept between the halves: plan_cp.c's scratch). */
/* The block in hand's share of the backward, or half of it: dQ += and the block's dK, dV (after
 * its K, V) +=. */
static void ring_part_bwd(struct par *p, const model *mod, const ring_bufs *b,
                          kern_attn_part_half half, float *dq, const float *datt, const float *ms,
                          const float *q, float *cur, const int32_t *kp) {
    const plan *pl = p->pl;
    const int64_t Tl = pl->s.T / pl->cp.n, R = pl->rows, n = R * pl->loc.Kl * pl->s.H;
    const int64_t Bl = pl->micro_seqs, Nl = pl->loc.Nl, Kl = pl->loc.Kl, H = pl->s.H;
    if (plan_cp_blk_bf16(pl)) {
        const kern_bf16 *kb = (const kern_bf16 *)(const void *)cur;
        kern_attn_part_bwd_bf16(model_compute_of(mod)->ctx, dq, cur + 2 * n, cur + 3 * n, p->cp.ker,
                                b->b.dout, b->D, ms, ms + R * Nl, b->b.qr, kb, kb + n, p->cp.qpos,
                                kp, Bl, Tl, Tl, Nl, Kl, H, half);
    } else {
        kern_attn_part_bwd(dq, cur + 2 * n, cur + 3 * n, p->cp.ker, datt, b->D, ms, ms + R * Nl, q,
                           cur, cur + n, p->cp.qpos, kp, Bl, Tl, Tl, Nl, Kl, H, half);
    }
}

static void ring_bwd(struct par *p, const model *mod, float *dq, float *dk, float *dv,
                     const float *datt, const float *ms, const float *q, const float *k,
                     const float *v, const float *att, const kern_bf16 *const b16[3]) {
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, Tl = pl->s.T / C, H = pl->s.H;
    const int64_t Nl = pl->loc.Nl, R = pl->rows, n = R * pl->loc.Kl * H;
    ring_bufs b = ring_regions(p);
    if (plan_cp_blk_bf16(pl)) { /* dO rounded once; D = rowsum(bf16 dO ∘ O) */
        kern_bf16_pack(b.b.dout, datt, R * Nl * H);
        kern_attn_part_delta_bf16(b.D, b.b.dout, att, R, Nl, H);
    } else {
        kern_attn_part_delta(b.D, datt, att, R, Nl, H);
    }
    floats_clear(dq, R * Nl * H);
    int64_t units;
    const plan_coll hop = ring_kv_hop(p, n, &units);
    ring_load(p, &b, b.blk[0], q, k, v, b16);
    floats_clear(b.blk[0] + 2 * n, 2 * n);
    const int ov = pl->overlap;
    mesh_req *r[2] = {NULL, NULL}, *d[2] = {NULL, NULL}; /* K, V on; dK, dV on (d[0]: in flight) */
    for (int64_t s = 0; s < C; s++) {
        float *cur = b.blk[s & 1], *nxt = b.blk[(s + 1) & 1];
        if (s + 1 < C) ring_hop(p, hop, nxt, cur, units, r);
        const int32_t *kp = ring_kpos(p, s);
        const int seen = kern_attn_part_visibility(p->cp.qpos, Tl, kp, Tl) != KERN_ATTN_PART_NONE;
        p->cp.skipped += !seen;
        if (seen && ov) ring_part_bwd(p, mod, &b, KERN_ATTN_PART_ROWS, dq, datt, ms, q, cur, kp);
        if (d[0]) ring_wait_behind(p, d); /* this block's dK, dV, behind the rows' half */
        if (seen)
            ring_part_bwd(p, mod, &b, ov ? KERN_ATTN_PART_KEYS : KERN_ATTN_PART_BOTH, dq, datt, ms,
                          q, cur, kp);
        if (s + 1 < C && !ov) ring_wait(r);
        /* the last: home, to rank coord + 1 */
        ring_hop(p, PLAN_CP_HOP, nxt + 2 * n, cur + 2 * n, 2 * n, d);
        p->cp.dkv_hops++;
        if (!ov || s + 1 == C) ring_wait(d), d[0] = NULL;
        if (s + 1 < C && ov) ring_wait(r);
    }
    const float *home = b.blk[C & 1] + 2 * n;
    floats_copy(dk, home, n);
    floats_copy(dv, home + n, n);
}

/* ---------------------------------------------------------------- ulysses */

/* Up to three arrays moved at once between sequence shards loc[a] [R, (C/rep[a])·w[a]] (this
 * rank's rows, every head of the rank) and head shards head[a] [B, T, w[a]] (every row, this
 * rank's group of heads: group j is columns [g·w[a], (g+1)·w[a]) of loc[a], g = j / rep[a]),
 * through one AllToAll_C whose block for rank j holds, row by row, the arrays' group-j columns
 * (to heads) or rank j's rows (back). rep[a] > 1: the rep[a] ranks j of a group share its
 * columns (kv heads replicated when K_Y < |C|): to heads each gets a copy, and back (gradients)
 * their blocks are summed in rank order. b16: the values are rounded to bf16 as they are staged
 * and travel so (PLAN_CP_ALL_TO_ALL_BF16), for arrays the receiver rounds to bf16 before any
 * product reads them: the same bits in half the bytes (copied, never summed). */
typedef struct {
    float *loc[3], *head[3];
    int64_t w[3], rep[3];
    int n, b16;
} uly_set;

static int64_t uly_width(const uly_set *u) {
    int64_t W = 0;
    for (int a = 0; a < u->n; a++) W += u->w[a];
    return W;
}

/* Row r = (b, t) of rank i's shard is row b·T + i·T_C + t of the head shards. */
static int64_t uly_row(const plan *pl, int64_t i, int64_t r) {
    const int64_t Tl = pl->s.T / pl->cp.n;
    return r / Tl * pl->s.T + i * Tl + r % Tl;
}

/* Array a's columns of group j in row r of the sequence shard. */
static float *uly_loc(const uly_set *u, int a, int64_t C, int64_t r, int64_t j) {
    const int64_t w = u->w[a], rep = u->rep[a];
    return u->loc[a] + (r * (C / rep) + j / rep) * w;
}

/* w values from src into the stage at element e: fp32, or rounded to bf16. */
static void uly_put(float *stage, int b16, int64_t e, const float *src, int64_t w) {
    if (b16)
        kern_bf16_pack((kern_bf16 *)(void *)stage + e, src, w);
    else
        memcpy(stage + e, src, (size_t)w * sizeof(float));
}

/* The received w values at element e of the stage into dst: copied, widened from bf16, or (a
 * replicated kv head's gradient, fp32 alone) added: the sharing ranks' sum, in rank order. */
static void uly_take(float *dst, const float *stage, int b16, int add, int64_t e, int64_t w) {
    if (b16)
        kern_bf16_unpack(dst, (const kern_bf16 *)(const void *)stage + e, w);
    else if (!add)
        memcpy(dst, stage + e, (size_t)w * sizeof(float));
    else
        for (int64_t c = 0; c < w; c++) dst[c] += stage[e + c];
}

/* to_heads = 1: loc → head; 0: head → loc. stage: two regions of |C|·R·width floats (b16: the
 * first half of each, blocks of bk elements). */
static void uly_move(struct par *p, const uly_set *u, int to_heads, float *stage) {
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, R = pl->rows, W = uly_width(u);
    const int64_t bk = u->b16 ? (R * W + 1) / 2 * 2 : R * W; /* a block's elements */
    float *send = stage, *recv = stage + C * R * W;
    for (int a = 0; a < u->n; a++) /* back, rep > 1 sums rank j's block into j − j % rep's */
        CHECK(to_heads || !u->b16 || u->rep[a] == 1, "cp: a summed gradient in bf16");
    for (int64_t j = 0; j < C; j++)
        for (int64_t r = 0; r < R; r++) {
            int64_t e = j * bk + r * W;
            for (int a = 0; a < u->n; a++) {
                const int64_t w = u->w[a];
                const float *src =
                    to_heads ? uly_loc(u, a, C, r, j) : u->head[a] + uly_row(pl, j, r) * w;
                uly_put(send, u->b16, e, src, w);
                e += w;
            }
        }
    par_run(p, u->b16 ? PLAN_CP_ALL_TO_ALL_BF16 : PLAN_CP_ALL_TO_ALL, recv, send,
            u->b16 ? bk / 2 : bk);
    for (int64_t i = 0; i < C; i++)
        for (int64_t r = 0; r < R; r++) {
            int64_t e = i * bk + r * W;
            for (int a = 0; a < u->n; a++) {
                const int64_t w = u->w[a];
                const int add = !to_heads && i % u->rep[a] != 0;
                uly_take(to_heads ? u->head[a] + uly_row(pl, i, r) * w : uly_loc(u, a, C, r, i),
                         recv, u->b16, add, e, w);
                e += w;
            }
        }
}

/* The regions: saved per slot and layer P [B, N_c, T, T] then qh, kh, vh [B, T, (N_c + 2K_c)·H];
 * in BUF_CP_KV the AllToAll's stage [2, R·(NH + 2KH)], oh, doh [B, T, N_c·H], dqh, dkh, dvh. */
typedef struct {
    float *P, *qh, *kh, *vh, *stage, *oh, *doh, *dqh, *dkh, *dvh;
} uly_bufs;
static uly_bufs uly_regions(const struct par *p, float *saved) {
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, T = pl->s.T, H = pl->s.H, R = pl->rows, BT = pl->micro_seqs * T;
    const int64_t Nc = pl->loc.Nl / C, Kc = plan_cp_uly_kv(pl), NH = pl->loc.Nl * H,
                  KH = C * Kc * H;
    uly_bufs u;
    u.P = saved;
    u.qh = saved + pl->micro_seqs * Nc * T * T;
    u.kh = u.qh + BT * Nc * H;
    u.vh = u.kh + BT * Kc * H;
    u.stage = p->cp.kv;
    u.oh = u.stage + 2 * R * (NH + 2 * KH);
    u.doh = u.oh + BT * Nc * H;
    u.dqh = u.doh + BT * Nc * H;
    u.dkh = u.dqh + BT * Nc * H;
    u.dvh = u.dkh + BT * Kc * H;
    return u;
}

/* The set of q, k, v (or their gradients) between sequence and head shards. */
static uly_set uly_qkv(const plan *pl, float *q, float *k, float *v, float *qh, float *kh,
                       float *vh) {
    const int64_t C = pl->cp.n, rep = plan_cp_uly_rep(pl), wk = plan_cp_uly_kv(pl) * pl->s.H;
    return (uly_set){{q, k, v}, {qh, kh, vh}, {pl->loc.Nl / C * pl->s.H, wk, wk}, {1, rep, rep}, 3,
                     0};
}

/* bf16 compute's saved regions (plan_cp_uly_saved_b): P, q, k, v of the head shards. */
typedef struct {
    kern_bf16 *P, *q, *k, *v;
} uly_b16;
static uly_b16 uly_saved_b(const plan *pl, float *saved) {
    int64_t off[4];
    plan_cp_uly_saved_b(pl, off);
    kern_bf16 *b = (kern_bf16 *)(void *)saved;
    return (uly_b16){b + off[0], b + off[1], b + off[2], b + off[3]};
}

/* Attention on the head shards, as one rank runs it: fp32 (kern_attn_fwd, q, k, v received into
 * the saved shards), or bf16 (received into the dQ, dK, dV region, rounded once into the saved
 * bf16 shards, the model's bf16 kernels on them). */
static void uly_fwd(struct par *p, const model *mod, float *att, float *saved, float *q, float *k,
                    const float *v) {
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, H = pl->s.H, Nc = pl->loc.Nl / C, Kc = plan_cp_uly_kv(pl);
    const int64_t B = pl->micro_seqs, T = pl->s.T;
    const uly_bufs u = uly_regions(p, saved);
    const int b16 = plan_cp_uly_bf16(pl);
    float *qh = b16 ? u.dqh : u.qh, *kh = b16 ? u.dkh : u.kh, *vh = b16 ? u.dvh : u.vh;
    uly_set in = uly_qkv(pl, q, k, (float *)v, qh, kh, vh);
    in.b16 = b16;
    uly_move(p, &in, 1, u.stage);
    if (b16) {
        const uly_b16 s = uly_saved_b(pl, saved);
        kern_bf16_pack(s.q, qh, B * T * Nc * H);
        kern_bf16_pack(s.k, kh, B * T * Kc * H);
        kern_bf16_pack(s.v, vh, B * T * Kc * H);
        kern_attn_fwd_bf16(model_compute_of(mod)->ctx, u.oh, s.P, p->cp.ker, s.q, s.k, s.v, B, T,
                           Nc, Kc, H);
    } else {
        kern_attn_fwd(u.oh, u.P, qh, kh, vh, B, T, Nc, Kc, H);
    }
    p->cp.flops += kern_attn_part_flops(p->cp.iota, T, p->cp.iota, T, H) * (double)(B * Nc);
    const uly_set out = {{att}, {u.oh}, {Nc * H}, {1}, 1, b16};
    uly_move(p, &out, 0, u.stage);
}

static void uly_bwd(struct par *p, const model *mod, float *dq, float *dk, float *dv,
                    const float *datt, float *saved) {
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, H = pl->s.H, Nc = pl->loc.Nl / C, Kc = plan_cp_uly_kv(pl);
    const int64_t B = pl->micro_seqs, T = pl->s.T;
    const uly_bufs u = uly_regions(p, saved);
    const int b16 = plan_cp_uly_bf16(pl);
    const uly_set in = {{(float *)datt}, {u.doh}, {Nc * H}, {1}, 1, b16};
    uly_move(p, &in, 1, u.stage);
    if (b16) { /* dO rounded once into the (free) o region */
        const uly_b16 s = uly_saved_b(pl, saved);
        kern_bf16 *dob = (kern_bf16 *)(void *)u.oh;
        kern_bf16_pack(dob, u.doh, B * T * Nc * H);
        kern_attn_bwd_bf16(model_compute_of(mod)->ctx, u.dqh, u.dkh, u.dvh, p->cp.ker, dob, s.P,
                           s.q, s.k, s.v, B, T, Nc, Kc, H);
    } else {
        kern_attn_bwd(u.dqh, u.dkh, u.dvh, p->cp.ker, u.doh, u.P, u.qh, u.kh, u.vh, B, T, Nc, Kc,
                      H);
    }
    const uly_set out = uly_qkv(pl, dq, dk, dv, u.dqh, u.dkh, u.dvh);
    uly_move(p, &out, 0, u.stage);
}

/* ---------------------------------------------------------------- the hooks */

void par_hk_cp_attn_fwd(void *ctx, model *mod, int slot, int64_t l, float *att, float *q, float *k,
                        const float *v, kern_bf16 *const b16[3], int64_t BT) {
    struct par *p = ctx;
    const plan *pl = p->pl;
    CHECK(BT == pl->rows, "cp: %lld rows, the plan's micro-batch has %lld", (long long)BT,
          (long long)pl->rows);
    rotate(p, q, pl->loc.Nl, 0);
    rotate(p, k, pl->loc.Kl, 0);
    float *ms = saved_at(p, slot, l);
    cp_keep_qkv(p, b16, q, k, v);
    const kern_bf16 *const kept[3] = {b16[0], b16[1], b16[2]};
    switch (pl->cp_alg) {
    case CONFIG_CP_ALLGATHER:
        ag_fwd(p, mod, att, ms, q, k, v, kept);
        break;
    case CONFIG_CP_RING:
        ring_fwd(p, mod, att, ms, q, k, v, kept);
        break;
    case CONFIG_CP_ULYSSES:
        uly_fwd(p, mod, att, ms, q, k, v);
        break;
    default:
        CHECK(0, "cp: --cp-alg %s is not built", pl->c.cp_alg);
    }
}

void par_hk_cp_attn_bwd(void *ctx, model *mod, int slot, int64_t l, float *dq, float *dk, float *dv,
                        const float *datt, const float *q, const float *k, const float *v,
                        const float *att, const kern_bf16 *const b16[3], int64_t BT) {
    (void)BT;
    struct par *p = ctx;
    const plan *pl = p->pl;
    const float *ms = saved_at(p, slot, l);
    switch (pl->cp_alg) {
    case CONFIG_CP_ALLGATHER:
        ag_bwd(p, mod, dq, dk, dv, datt, ms, q, k, v, b16);
        break;
    case CONFIG_CP_RING:
        ring_bwd(p, mod, dq, dk, dv, datt, ms, q, k, v, att, b16);
        break;
    case CONFIG_CP_ULYSSES:
        uly_bwd(p, mod, dq, dk, dv, datt, (float *)ms);
        break;
    default:
        CHECK(0, "cp: --cp-alg %s is not built", pl->c.cp_alg);
    }
    rotate(p, dq, pl->loc.Nl, 1);
    rotate(p, dk, pl->loc.Kl, 1);
}

double par_cp_flops(const par *p) {
    return p ? p->cp.flops : 0.0;
}

int64_t par_cp_skipped(const par *p) {
    return p ? p->cp.skipped : 0;
}

int64_t par_cp_dkv_behind(const par *p, int64_t *hops, double *hidden) {
    if (hops) *hops = p ? p->cp.dkv_hops : 0;
    if (hidden) *hidden = p ? p->cp.dkv_hidden : 0;
    return p ? p->cp.dkv_behind : 0;
}
