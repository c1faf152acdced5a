/* plan_cp: the context axis C's part of the sharding plan (plan.h). --cp shards every sequence's
 * T tokens over C: rank i holds T/|C| of them, as `pieces` runs of consecutive tokens (the zigzag
 * split's chunks i and 2|C|−1−i, or the contiguous split's one run; kernels/seqsplit.h). The model
 * is made for pieces, not sequences: micro_seqs · pieces sequences of T_p = T/(|C|·pieces) tokens,
 * whose rows lie exactly where a sequence's T/|C| rows would (a sequence's pieces are
 * consecutive), so that its norms, MLPs, embedding and loss need nothing new and its attention
 * (cp.c, through the hooks) sees each sequence's rows at their global positions. Everything else
 * of a data axis applies to C: the gradients reduce, and ZeRO shards, over data × C (par.c puts C
 * among the data axes); the batch is not sharded over C.
 *
 * Buffers per algorithm, with R = micro_seqs · T/|C| rows, KH = K_Y·H, NH = N_Y·H:
 *   allgather  send [2, R·KH], gathered [|C|, 2, R·KH], K and V in sequence order, their
 *              gradients [2, B, T, KH] (the ReduceScatter packs into the gathered region);
 *              saved m, l [R, N_Y] per slot and layer.
 *   ring       the block in hand and the one arriving, each K, V and (backward) dK, dV
 *              [4, R·KH] ×2, a partial's (o, m, l) [R, NH + 2·N_Y], the backward's
 *              D = rowsum(dO ∘ O) [R, N_Y]; saved as allgather.
 *   ulysses    with KH_C = |C|·K_c·H (K_c = plan_cp_uly_kv: KH_C = KH unless the kv heads
 *              are replicated), the AllToAll's send and receive [2, R·(NH + 2·KH_C)], the head
 *              shards' o and dO [B, T, N_YC·H] and dQ, dK, dV (R·(NH + 2·KH_C)); saved the
 *              probabilities [B, N_YC, T, T] and the head shards' q, k, v. In bf16 compute
 *              (plan_cp_uly_bf16) the saved four are bf16, as one rank keeps them: the forward
 *              receives the fp32 head shards in the dQ, dK, dV region and rounds them into the
 *              saved ones, the backward rounds dO into the o region; the kernels' scratch is the
 *              bf16 attention's.
 * allgather and ring in bf16 compute (plan_cp_blk_bf16): the same regions, K and V in bf16 in
 * the first half of theirs (sent, gathered, in sequence order, travelling), and [R, NH] floats
 * more for q and dO rounded to bf16; the scratch is the bf16 blockwise kernels'. */
#include "kernels/attn_bf16.h"
#include "kernels/attn_part.h"
#include "kernels/seqsplit.h"
#include "train/parallel/plan.h"

void plan_cp_shape(plan *p) {
    p->ms = p->s;
    p->model_seqs = p->micro_seqs;
    p->cp_pieces = 1;
    p->cp_alg = 0;
    if (p->cp.n == 1) return;
    p->cp_alg = config_cp_alg(&p->c);
    p->cp_pieces = config_cp_pieces(&p->c, p->cp.n);
    p->ms.T = p->s.T / (p->cp.n * p->cp_pieces);
    p->model_seqs = p->micro_seqs * p->cp_pieces;
}

void plan_cp_pos(const plan *p, int64_t rank, int32_t *pos) {
    if (p->cp_pieces == 2)
        kern_seq_zigzag(pos, p->s.T, p->cp.n, rank);
    else
        kern_seq_contig(pos, p->s.T, p->cp.n, rank);
}

int64_t plan_cp_piece_start(const plan *p, int64_t j) {
    const int64_t C = p->cp.n, r = p->cp.index, Tp = p->ms.T;
    if (p->cp_pieces == 1) return r * Tp;
    return (j == 0 ? r : 2 * C - 1 - r) * Tp;
}

int64_t plan_cp_uly_kv(const plan *p) {
    return p->loc.Kl >= p->cp.n ? p->loc.Kl / p->cp.n : 1;
}

int64_t plan_cp_uly_rep(const plan *p) {
    return p->cp.n * plan_cp_uly_kv(p) / p->loc.Kl;
}

int plan_cp_uly_bf16(const plan *p) {
    return p->cp.n > 1 && p->cp_alg == CONFIG_CP_ULYSSES && plan_model_compute(p) != MODEL_FP32;
}

int plan_cp_blk_bf16(const plan *p) {
    return p->cp.n > 1 && p->cp_alg != CONFIG_CP_ULYSSES && plan_model_compute(p) != MODEL_FP32;
}

int64_t plan_cp_uly_saved_b(const plan *p, int64_t out[4]) {
    const int64_t T = p->s.T, H = p->s.H, BT = p->micro_seqs * T, Nc = p->loc.Nl / p->cp.n;
    const int64_t Kc = plan_cp_uly_kv(p);
    const int64_t n[4] = {p->micro_seqs * Nc * T * T, BT * Nc * H, BT * Kc * H, BT * Kc * H};
    int64_t at = 0;
    for (int a = 0; a < 4; a++) { /* each region 4-byte aligned */
        if (out) out[a] = at;
        at += n[a] + n[a] % 2;
    }
    return at;
}

int64_t plan_cp_saved(const plan *p) {
    const int64_t T = p->s.T, Nl = p->loc.Nl, R = p->rows, C = p->cp.n;
    if (plan_cp_uly_bf16(p)) return plan_cp_uly_saved_b(p, NULL) / 2;
    if (p->cp_alg == CONFIG_CP_ULYSSES)
        return p->micro_seqs * (Nl / C) * T * T + R * (Nl + 2 * C * plan_cp_uly_kv(p)) * p->s.H;
    return 2 * R * Nl;
}

/* Floats of the algorithm's K/V buffers and of its scratch (the kernels', the rotary tables
 * [T, H/2] twice, the positions as int32: this rank's, every rank's, 0..T−1). */
static void cp_sizes(const plan *p, int64_t *kv, int64_t *scratch) {
    const int64_t C = p->cp.n, T = p->s.T, H = p->s.H, R = p->rows, Bl = p->micro_seqs;
    const int64_t KH = p->loc.Kl * H, NH = p->loc.Nl * H, Tl = T / C, Nl = p->loc.Nl;
    int64_t ker = 0;
    const int b16 = plan_cp_blk_bf16(p); /* and the rounded q and dO [R, NH] in bf16 */
    if (p->cp_alg == CONFIG_CP_ALLGATHER) {
        *kv = 2 * R * KH + 3 * 2 * Bl * T * KH + b16 * R * NH;
        ker = b16 ? kern_attn_part_bwd_bf16_scratch(Tl, T) : kern_attn_part_bwd_scratch(Tl, T);
    } else if (p->cp_alg == CONFIG_CP_RING) {
        *kv = 2 * 4 * R * KH + R * (NH + 3 * Nl) + b16 * R * NH;
        if (p->overlap) /* the backward in halves: every head's P, dS kept between them */
            ker = b16 ? kern_attn_part_bwd_bf16_halves_scratch(Bl, Nl, Tl, Tl)
                      : kern_attn_part_bwd_halves_scratch(Bl, Nl, Tl, Tl);
        else
            ker = b16 ? kern_attn_part_bwd_bf16_scratch(Tl, Tl) : kern_attn_part_bwd_scratch(Tl, Tl);
    } else {
        const int64_t W = NH + 2 * C * plan_cp_uly_kv(p) * H; /* q, k, v per row, every shard */
        *kv = 2 * R * W + 2 * R * NH + R * W;
        ker = plan_cp_uly_bf16(p) ? kern_attn_bf16_scratch(T) : T * T;
    }
    *scratch = ker + T * H + Tl + C * Tl + T;
}

int64_t plan_cp_moe_floats(const plan *p) {
    return p->cp.n > 1 ? p->model_seqs * 4 * p->s.moe.E : 0;
}

void plan_cp_bufs(const plan *p, int forward_only, int64_t out[4]) {
    out[0] = out[1] = out[2] = out[3] = 0;
    if (p->cp.n == 1) return;
    out[0] = p->model_seqs * (p->ms.T + 1);
    out[1] = forward_only ? 0 : (int64_t)p->nslots * (p->l1 - p->l0) * plan_cp_saved(p);
    cp_sizes(p, &out[2], &out[3]);
}
