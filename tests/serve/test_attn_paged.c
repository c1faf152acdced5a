/* kern_attn_paged, the serving engine's attention through a block table:
 *  - bit for bit equal to the same attention on a contiguous cache (one block holding every row),
 *    whatever the block size (1, 3, 4, 16 and one past the rows), wherever the blocks sit in the
 *    pool (a shuffled table, other layers' rows interleaved, row padding full of NaN), and however
 *    the query rows are chunked (one prefill, random chunks, one row at a time as decode does);
 *  - within k·FLT_EPSILON·(|a| + |b| + 1) of its naive double twin, k = 64, and of kern_attn_cached
 *    (the contiguous-cache kernel of `generate`) on the same rows, k = 64;
 * on G = Nl/Kl of 1, 2 and 3, odd head dims, 1 to 70 positions; for the kernel as it runs on this
 * CPU (AVX2 and FMA where there are) and for its plain version. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/attn_cache.h"
#include "kernels/attn_paged.h"
#include "pages.h"

static uint64_t lcg = 2024;
static float rnd(void) {
    return pages_rnd(&lcg);
}

/* The S rows of k and v ([S, Kl·H], contiguous) in a shuffled pool of blocks of bs rows (pages.h);
 * returns the pool. */
static float *paginate(kern_kv_pages *pg, int32_t *table, const float *k, const float *v, int64_t S,
                       int64_t KH, int64_t bs) {
    pages_layout l;
    const float nan = NAN;
    float *pool = pages_pool(&l, table, k, v, S, KH, bs, sizeof(float), &nan, &lcg);
    *pg = (kern_kv_pages){pool + l.k_off, pool + l.n + l.k_off, {table, bs, l.bstride, l.ldk}};
    return pool;
}

typedef void (*attn_fn)(float *restrict, float *restrict, const float *restrict,
                        const kern_kv_pages *, int64_t, int64_t, int64_t, int64_t, int64_t);
static attn_fn kernel = kern_attn_paged;

/* Rows [0, S) of q through the pages in chunks: mode 0 all at once, 1 random chunks, 2 one by
 * one. */
static void run_chunks(float *out, const float *q, const kern_kv_pages *pg, int64_t S, int64_t Nl,
                       int64_t Kl, int64_t H, int mode) {
    float *scr = malloc(sizeof(float) * (size_t)kern_attn_paged_scratch(0, S, Nl, Kl));
    for (int64_t p0 = 0; p0 < S;) {
        const int64_t n = pages_chunk(&lcg, mode, p0, S);
        kernel(out + p0 * Nl * H, scr, q + p0 * Nl * H, pg, p0, n, Nl, Kl, H);
        p0 += n;
    }
    free(scr);
}

static void run(int64_t S, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t KH = Kl * H, nq = S * Nl * H;
    float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)(S * KH));
    float *v = malloc(sizeof(float) * (size_t)(S * KH)), *ref = malloc(sizeof(float) * (size_t)nq);
    float *contig = malloc(sizeof(float) * (size_t)nq), *out = malloc(sizeof(float) * (size_t)nq);
    int32_t table[128];
    for (int64_t i = 0; i < nq; i++) q[i] = 2 * rnd();
    for (int64_t i = 0; i < S * KH; i++) k[i] = 2 * rnd(), v[i] = rnd();
    /* contiguous: one block of S rows, row stride Kl·H */
    const int32_t zero = 0;
    const kern_kv_pages one = {k, v, {&zero, S, S * KH, KH}};
    run_chunks(contig, q, &one, S, Nl, Kl, H, 0);
    kern_attn_paged_ref(ref, q, &one, 0, S, Nl, Kl, H);
    float *cached = malloc(sizeof(float) * (size_t)nq);
    float *scr = malloc(sizeof(float) * (size_t)kern_attn_cached_scratch(0, S, Nl, Kl));
    kern_attn_cached(cached, scr, q, k, v, 0, S, Nl, Kl, H, KH);
    const double wr = check_worst_dev(contig, ref, nq), wc = check_worst_dev(contig, cached, nq);
    check_expect(wr <= 64 && wc <= 64,
                 "S=%lld Nl=%lld Kl=%lld H=%lld: contiguous vs naive %.1f, vs kern_attn_cached "
                 "%.1f eps units (k = 64)",
                 (long long)S, (long long)Nl, (long long)Kl, (long long)H, wr, wc);
    const int64_t sizes[] = {1, 3, 4, 16, S + 1};
    int bad = 0;
    for (int si = 0; si < 5; si++)
        for (int mode = 0; mode < 3; mode++) {
            kern_kv_pages pg;
            float *pool = paginate(&pg, table, k, v, S, KH, sizes[si]);
            for (int64_t i = 0; i < nq; i++) out[i] = NAN;
            run_chunks(out, q, &pg, S, Nl, Kl, H, mode);
            if (memcmp(out, contig, sizeof(float) * (size_t)nq)) {
                bad++;
                printf("  block size %lld, chunking %d: differs from the contiguous cache (worst "
                       "%.2f eps units)\n",
                       (long long)sizes[si], mode, check_worst_dev(out, contig, nq));
            }
            free(pool);
        }
    check_expect(bad == 0,
                 "S=%lld Nl=%lld Kl=%lld H=%lld: paged (5 block sizes x 3 chunkings, shuffled "
                 "blocks) bit-identical to contiguous",
                 (long long)S, (long long)Nl, (long long)Kl, (long long)H);
    free(q), free(k), free(v), free(ref), free(contig), free(out), free(cached), free(scr);
}

int main(void) {
    for (int plain = 0; plain < 2; plain++) {
        printf("%s\n", plain ? "kern_attn_paged_plain:" : "kern_attn_paged (this CPU's path):");
        kernel = plain ? kern_attn_paged_plain : kern_attn_paged;
        run(1, 1, 1, 4);
        run(7, 4, 2, 8);
        run(33, 6, 2, 5);
        run(70, 3, 1, 16);
        run(17, 8, 8, 6);
        run(40, 4, 2, 32);
    }
    return check_finish("test_attn_paged");
}
