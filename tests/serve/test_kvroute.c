/* The kv heads' routes between two tensor shardings (train/serve/kvroute.h), for every pair of
 * degrees Ys, Yd in {1, 2, 3, 4, 6, 8, 12} that shard N = 24 query heads and K kv heads
 * (K in {1, 2, 3, 4, 6, 8, 12, 24}; Y ≤ K dividing K, or Y > K a multiple of it), and past K for
 * both layouts of each side (the kv heads replicated over a group, or the AllToAll layout's Z =
 * Y/K pools: the sequence in pool z held by the group ranks y with y mod Z = z), every pair of
 * pools:
 *  - a destination coordinate that does not hold the sequence gets no piece;
 *  - every other destination coordinate's pieces come in source order, are disjoint and cover
 *    exactly the heads it holds, each from a source coordinate that holds them for the sequence;
 *  - a move through the pieces (each source shard holding the head's number at its place, a
 *    destination shard unpacked from the pieces at the offsets the engine uses) gives each
 *    destination the heads it needs;
 *  - over the destination's coordinates each kv head arrives once (AllToAll layout, or Y ≤ K) or
 *    once per rank of its group (replicated), and their sum is kvroute_heads_held (the bytes
 *    the engine counts);
 *  - equal degrees ship each rank's whole shard to the same coordinate when it holds the
 *    sequence. */
#include <stdio.h>

#include "check.h"
#include "train/serve/kvroute.h"

static int valid(int64_t K, int64_t Y) {
    return 24 % Y == 0 && (K >= Y ? K % Y == 0 : Y % K == 0);
}

/* Destination coordinate yd's pieces checked, its heads counted into arrived[]; returns the
 * number of faults. */
static int check_dst(const model_shape *s, const kvroute_side *src, const kvroute_side *dst,
                     int64_t yd, int64_t *arrived) {
    kvroute_piece pc[24];
    const int32_t np = kvroute_pieces(s, src, dst, yd, pc);
    int64_t a, n, got[24];
    model_tensor_kv_heads(s, dst->Y, yd, &a, &n);
    if (!kvroute_holds(dst, yd)) return np != 0;
    int bad =
        np < 1 || (src->Y == dst->Y && kvroute_holds(src, yd) && (np != 1 || pc[0].src != yd));
    int64_t at = a;
    for (int32_t i = 0; i < np && !bad; i++) {
        int64_t c, m;
        model_tensor_kv_heads(s, src->Y, pc[i].src, &c, &m);
        bad |= pc[i].h0 != at || pc[i].h1 <= pc[i].h0 || pc[i].h0 < c || pc[i].h1 > c + m ||
               (i > 0 && pc[i].src <= pc[i - 1].src) || !kvroute_holds(src, pc[i].src);
        int64_t shard[24]; /* the source rank's shard: head c + j at place j */
        for (int64_t j = 0; j < m; j++) shard[j] = c + j;
        for (int64_t h = pc[i].h0; h < pc[i].h1 && !bad; h++) got[h - a] = shard[h - c];
        at = pc[i].h1;
    }
    bad |= at != a + n;
    for (int64_t h = 0; h < n && !bad; h++) bad |= got[h] != a + h, arrived[a + h]++;
    return bad;
}

/* Every destination coordinate of one pair of sides; returns the number of faults. */
static int check_pair(int64_t K, const kvroute_side *src, const kvroute_side *dst) {
    const model_shape s = {.N = 24, .K = K};
    int64_t arrived[24] = {0}, sum = 0;
    int bad = 0;
    for (int64_t yd = 0; yd < dst->Y; yd++) bad += check_dst(&s, src, dst, yd, arrived);
    const int64_t each = dst->Y > K && dst->Z == 1 ? dst->Y / K : 1; /* a head's copies */
    for (int64_t h = 0; h < K; h++) bad += arrived[h] != each, sum += arrived[h];
    bad += sum != kvroute_heads_held(&s, dst);
    if (bad)
        printf("  K=%lld Ys=%lld (Z %d, pool %d) Yd=%lld (Z %d, pool %d): %d faults\n",
               (long long)K, (long long)src->Y, (int)src->Z, (int)src->z, (long long)dst->Y,
               (int)dst->Z, (int)dst->z, bad);
    return bad;
}

/* Both layouts of a side of degree Y past K (the replicated one and Z = Y/K pools), else one. */
static int32_t layouts(int64_t K, int64_t Y, int32_t *Z) {
    Z[0] = 1, Z[1] = (int32_t)(Y / K);
    return Y > K ? 2 : 1;
}

int main(void) {
    static const int64_t Ks[] = {1, 2, 3, 4, 6, 8, 12, 24}, Ys[] = {1, 2, 3, 4, 6, 8, 12};
    int pairs = 0, bad = 0, replicated = 0, a2a = 0, odd = 0;
    for (int k = 0; k < 8; k++)
        for (int s = 0; s < 7; s++)
            for (int d = 0; d < 7; d++) {
                if (!valid(Ks[k], Ys[s]) || !valid(Ks[k], Ys[d])) continue;
                int32_t Zs[2], Zd[2];
                const int32_t ns = layouts(Ks[k], Ys[s], Zs), nd = layouts(Ks[k], Ys[d], Zd);
                for (int i = 0; i < ns; i++)
                    for (int j = 0; j < nd; j++)
                        for (int32_t zs = 0; zs < Zs[i]; zs++)
                            for (int32_t zd = 0; zd < Zd[j]; zd++) {
                                const kvroute_side src = {Ys[s], Zs[i], zs},
                                                   dst = {Ys[d], Zd[j], zd};
                                pairs++;
                                replicated +=
                                    (Ys[s] > Ks[k] && Zs[i] == 1) || (Ys[d] > Ks[k] && Zd[j] == 1);
                                a2a += Zs[i] > 1 || Zd[j] > 1;
                                odd += (Zs[i] > 1 && Zs[i] % 2) || (Zd[j] > 1 && Zd[j] % 2);
                                bad += check_pair(Ks[k], &src, &dst);
                            }
            }
    check_expect(bad == 0 && pairs > 1000 && replicated > 100 && a2a > 1000 && odd > 100,
                 "%d pairs of shardings and pools (%d with replicated kv heads, %d with the "
                 "AllToAll layout on a side, %d of them odd groups): every destination's pieces "
                 "cover its heads once, from holders, in source order; non-holders get none; "
                 "each head arrives once a holder (%d wrong)",
                 pairs, replicated, a2a, odd, bad);
    return check_finish("test_kvroute");
}
