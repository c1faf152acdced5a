/* The kv heads' routes between two tensor shardings (train/serve/kvroute.h), for every pair of
 * degrees Ys, Yd in {1, 2, 3, 4, 6, 8, 12} that shard N = 24 query heads and K kv heads
 * (K in {1, 2, 3, 4, 6, 8, 12, 24}; Y ≤ K dividing K, or Y > K a multiple of it):
 *  - every destination coordinate's pieces come in source order, are disjoint and cover exactly
 *    the heads it holds, each from a source coordinate that holds them;
 *  - a move through the pieces (each source shard holding the head's number at its place, a
 *    destination shard unpacked from the pieces at the offsets the engine uses) gives each
 *    destination the heads it needs;
 *  - equal degrees ship each rank's whole shard to the same coordinate. */
#include <stdio.h>

#include "check.h"
#include "train/serve/kvroute.h"

static int valid(int64_t K, int64_t Y) {
    return 24 % Y == 0 && (K >= Y ? K % Y == 0 : Y % K == 0);
}

/* Destination coordinate yd's pieces checked; returns the number of faults. */
static int check_dst(int64_t K, int64_t Ys, int64_t Yd, int64_t yd) {
    const model_shape s = {.N = 24, .K = K};
    kvroute_piece pc[24];
    const int32_t np = kvroute_pieces(&s, Ys, Yd, yd, pc);
    int64_t a, n, got[24];
    model_tensor_kv_heads(&s, Yd, yd, &a, &n);
    int bad = np < 1 || (Ys == Yd && (np != 1 || pc[0].src != yd));
    int64_t at = a;
    for (int32_t i = 0; i < np && !bad; i++) {
        int64_t c, m;
        model_tensor_kv_heads(&s, Ys, pc[i].src, &c, &m);
        bad |= pc[i].h0 != at || pc[i].h1 <= pc[i].h0 || pc[i].h0 < c || pc[i].h1 > c + m ||
               (i > 0 && pc[i].src <= pc[i - 1].src);
        int64_t shard[24]; /* the source rank's shard: head c + j at place j */
        for (int64_t j = 0; j < m; j++) shard[j] = c + j;
        for (int64_t h = pc[i].h0; h < pc[i].h1 && !bad; h++) got[h - a] = shard[h - c];
        at = pc[i].h1;
    }
    bad |= at != a + n;
    for (int64_t h = 0; h < n && !bad; h++) bad |= got[h] != a + h;
    if (bad)
        printf("  K=%lld Ys=%lld Yd=%lld yd=%lld: %d pieces wrong\n", (long long)K, (long long)Ys,
               (long long)Yd, (long long)yd, (int)np);
    return bad;
}

int main(void) {
    static const int64_t Ks[] = {1, 2, 3, 4, 6, 8, 12, 24}, Ys[] = {1, 2, 3, 4, 6, 8, 12};
    int pairs = 0, bad = 0, replicated = 0;
    for (int k = 0; k < 8; k++)
        for (int s = 0; s < 7; s++)
            for (int d = 0; d < 7; d++) {
                if (!valid(Ks[k], Ys[s]) || !valid(Ks[k], Ys[d])) continue;
                pairs++;
                replicated += Ys[s] > Ks[k] || Ys[d] > Ks[k];
                for (int64_t yd = 0; yd < Ys[d]; yd++) bad += check_dst(Ks[k], Ys[s], Ys[d], yd);
            }
    check_expect(bad == 0 && pairs > 100 && replicated > 30,
                 "%d pairs of shardings (%d with replicated kv heads): every destination's pieces "
                 "cover its heads once, from holders, in source order (%d wrong)",
                 pairs, replicated, bad);
    return check_finish("test_kvroute");
}
