/* The sequence splits of context parallelism (kernels/seqsplit.h) and what rides on them:
 *  - zigzag and contiguous positions: every rank ascending, together a permutation of [0, T),
 *    the zigzag owner of each position agreeing with the lists, chunk r and 2n−1−r on rank r;
 *  - causal work: under zigzag every rank's rows see exactly c·(2n·c + 1) keys (c = T/2n), and
 *    the FLOPs the blockwise kernel does per rank over a ring (kern_attn_part_flops, masked part
 *    of its row blocks included) agree within one block (64 rows against one rank's keys): the
 *    kernel's row blocks end at the seam between a rank's two chunks, except on rank n−1, whose
 *    chunks n−1 and n are adjacent, so there a block may run across it when 64 does not divide
 *    c; under the contiguous split they do not agree (rank n−1 does about 2n−1 times rank 0's
 *    work);
 *  - RoPE at global positions (kern_rope_apply_pos): each rank's rows rotated at their positions
 *    equal, bit for bit, the same rows of the whole sequence rotated by kern_rope_apply, forward
 *    and inverse, and match the table-free double twin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attn_part.h"
#include "kernels/rope.h"
#include "kernels/seqsplit.h"
#include "ktest.h"

/* The positions of every rank: pos[r·Tl + i]. */
static void split(int32_t *pos, int64_t T, int64_t n, int zigzag) {
    for (int64_t r = 0; r < n; r++) {
        if (zigzag)
            kern_seq_zigzag(pos + r * (T / n), T, n, r);
        else
            kern_seq_contig(pos + r * (T / n), T, n, r);
    }
}

static void positions(int64_t T, int64_t n) {
    const int64_t Tl = T / n, c = T / (2 * n);
    int32_t *pos = malloc((size_t)T * sizeof *pos);
    char *seen = calloc((size_t)T, 1);
    for (int z = 0; z < 2; z++) {
        split(pos, T, n, z);
        int perm = 1, asc = 1, owner_ok = 1, chunks_ok = 1;
        memset(seen, 0, (size_t)T);
        for (int64_t i = 0; i < T; i++) {
            perm &= pos[i] >= 0 && pos[i] < T && !seen[pos[i]];
            if (pos[i] >= 0 && pos[i] < T) seen[pos[i]] = 1;
            asc &= i % Tl == 0 || pos[i] > pos[i - 1];
        }
        check_expect(perm && asc, "%s T=%lld n=%lld: ranks ascending, a permutation of [0, T)",
                     z ? "zigzag" : "contig", (long long)T, (long long)n);
        if (!z) continue;
        for (int64_t p = 0; p < T; p++) {
            int64_t r, row;
            kern_seq_zigzag_owner(p, T, n, &r, &row);
            owner_ok &= r >= 0 && r < n && row >= 0 && row < Tl && pos[r * Tl + row] == p;
        }
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < c; i++)
                chunks_ok &=
                    pos[r * Tl + i] == r * c + i && pos[r * Tl + c + i] == (2 * n - 1 - r) * c + i;
        check_expect(owner_ok && chunks_ok,
                     "zigzag T=%lld n=%lld: rank r holds chunks r and 2n-1-r; the owner of every "
                     "position agrees",
                     (long long)T, (long long)n);
    }
    free(pos), free(seen);
}

/* Work per rank over a ring: exact causal pairs, and the blockwise kernel's FLOPs (one head). */
static void work(int64_t T, int64_t n, int64_t H) {
    const int64_t Tl = T / n, c = T / (2 * n);
    int32_t *pos = malloc((size_t)T * sizeof *pos);
    for (int z = 1; z >= 0; z--) {
        split(pos, T, n, z);
        int64_t pmin = INT64_MAX, pmax = 0;
        double flo = INFINITY, fhi = 0;
        for (int64_t r = 0; r < n; r++) {
            const int64_t pairs = kern_seq_causal_pairs(pos + r * Tl, Tl);
            double f = 0;
            for (int64_t s = 0; s < n; s++)
                f += kern_attn_part_flops(pos + r * Tl, Tl, pos + s * Tl, Tl, H);
            pmin = pairs < pmin ? pairs : pmin, pmax = pairs > pmax ? pairs : pmax;
            flo = fmin(flo, f);
            fhi = fmax(fhi, f);
        }
        const double block = 4.0 * KERN_ATTN_BLOCK * (double)(Tl * H);
        if (z) {
            check_expect(pmin == pmax && pmax == c * (2 * n * c + 1),
                         "zigzag T=%lld n=%lld: causal pairs per rank %lld..%lld, c(2nc+1) = %lld",
                         (long long)T, (long long)n, (long long)pmin, (long long)pmax,
                         (long long)(c * (2 * n * c + 1)));
            check_expect(fhi - flo <= block,
                         "zigzag T=%lld n=%lld: kernel FLOPs per rank %.6g..%.6g, spread %.3g <= "
                         "one block 4*64*(T/n)*H = %.3g",
                         (long long)T, (long long)n, flo, fhi, fhi - flo, block);
        } else if (n > 1 && Tl >= 2 * KERN_ATTN_BLOCK) {
            check_expect(fhi - flo > block,
                         "contig T=%lld n=%lld: kernel FLOPs per rank %.6g..%.6g, spread %.3g > "
                         "one block %.3g (the imbalance zigzag removes); pairs %lld..%lld",
                         (long long)T, (long long)n, flo, fhi, fhi - flo, block, (long long)pmin,
                         (long long)pmax);
        }
    }
    free(pos);
}

/* RoPE on each rank's rows at their global positions vs the whole sequence. */
static void rope(int64_t B, int64_t T, int64_t n, int64_t nh, int64_t H, int64_t pad) {
    const int64_t ld = nh * H + pad, Tl = T / n;
    float *x = kt_floats(B * T * ld), *whole = kt_floats(B * T * ld), *xr = kt_floats(B * T * ld);
    float *mine = kt_floats(B * Tl * ld), *want = kt_floats(B * Tl * ld);
    float *ct = kt_floats(T * H / 2), *st = kt_floats(T * H / 2);
    int32_t *pos = malloc((size_t)Tl * sizeof *pos);
    kt_fill(x, B * T * ld, 31, -1, 1);
    kern_rope_table(ct, st, T, H);
    for (int inv = 0; inv < 2; inv++) {
        memcpy(whole, x, (size_t)(B * T * ld) * 4), memcpy(xr, x, (size_t)(B * T * ld) * 4);
        kern_rope_apply(whole, ct, st, B, T, nh, H, ld, inv);
        kern_rope_apply_ref(xr, B, T, nh, H, ld, inv);
        int bits = 1;
        double dev = 0;
        for (int64_t r = 0; r < n; r++) {
            kern_seq_zigzag(pos, T, n, r);
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < Tl; i++) {
                    memcpy(mine + (b * Tl + i) * ld, x + (b * T + pos[i]) * ld, (size_t)ld * 4);
                    memcpy(want + (b * Tl + i) * ld, whole + (b * T + pos[i]) * ld, (size_t)ld * 4);
                }
            kern_rope_apply_pos(mine, ct, st, pos, B, Tl, nh, H, ld, inv);
            bits &= memcmp(mine, want, (size_t)(B * Tl * ld) * 4) == 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < Tl; i++)
                    memcpy(want + (b * Tl + i) * ld, xr + (b * T + pos[i]) * ld, (size_t)ld * 4);
            dev = fmax(dev, check_worst_dev(mine, want, B * Tl * ld));
        }
        check_expect(bits && dev <= 4,
                     "rope%s B=%lld T=%lld n=%lld zigzag: every rank's rows at their global "
                     "positions bit-equal to the whole sequence's; vs the twin %.3g eps (k=4)",
                     inv ? " inverse" : "", (long long)B, (long long)T, (long long)n, dev);
    }
    free(x), free(whole), free(xr), free(mine), free(want), free(ct), free(st), free(pos);
}

int main(void) {
    for (int64_t n = 1; n <= 5; n++) {
        const int64_t T[] = {2 * n, 6 * n, 128 * n, 200 * n, 262 * n};
        for (int i = 0; i < 5; i++) {
            positions(T[i], n);
            work(T[i], n, 8);
        }
        rope(2, 10 * n, n, 3, 8, 2);
    }
    return check_finish("test_kern_seqsplit");
}
