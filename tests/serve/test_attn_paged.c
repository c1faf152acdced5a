/* kern_attn_paged, the serving engine's attention through a block table:
 *  - bit for bit equal to the same attention on a contiguous cache (one block holding every row),
 *    whatever the block size (1, 3, 4, 16 and one past the rows), wherever the blocks sit in the
 *    pool (a shuffled table, other layers' rows interleaved, row padding full of NaN), and however
 *    the query rows are chunked (one prefill, random chunks, one row at a time as decode does);
 *  - within k·FLT_EPSILON·(|a| + |b| + 1) of its naive double twin, k = 64, and of kern_attn_cached
 *    (the contiguous-cache kernel of `generate`) on the same rows, k = 64;
 * on G = Nl/Kl of 1, 2 and 3, odd head dims, 1 to 70 positions; head dims past 64, 136 with a
 * tail (the AVX2 kernel holds 64 columns of a head's output in registers, then the next 64, then
 * the columns past a multiple of 8 one by one, and scores four key rows of a block at a time:
 * block sizes 1 and 3 against 4 and 16 check a row's bits do not depend on its group); for the
 * kernel as it runs on this CPU (AVX2 and FMA where there are) and for its plain version. */
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

typedef void (*attn_fn)(float *restrict, float *restrict, const float *restrict,
                        const kern_kv_pages *, int64_t, int64_t, int64_t, int64_t, int64_t);
static attn_fn kernel = kern_attn_paged;

/* The query rows [S, Nl·H] and the kernel's scratch. */
typedef struct {
    const float *q;
    float *scr;
    int64_t Nl, Kl, H;
} rows;

static void attend(void *arg, float *out, const void *k, const void *v, const kern_kv_table *at,
                   int64_t p0, int64_t n) {
    const rows *R = arg;
    const kern_kv_pages pg = {k, v, *at};
    const int64_t ld = R->Nl * R->H;
    kernel(out + p0 * ld, R->scr, R->q + p0 * ld, &pg, p0, n, R->Nl, R->Kl, R->H);
}

static void run(int64_t S, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t KH = Kl * H, nq = S * Nl * H;
    float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)(S * KH));
    float *v = malloc(sizeof(float) * (size_t)(S * KH)), *ref = malloc(sizeof(float) * (size_t)nq);
    float *contig = malloc(sizeof(float) * (size_t)nq);
    for (int64_t i = 0; i < nq; i++) q[i] = 2 * rnd();
    for (int64_t i = 0; i < S * KH; i++) k[i] = 2 * rnd(), v[i] = rnd();
    rows R = {q, malloc(sizeof(float) * (size_t)kern_attn_paged_scratch(0, S, Nl, Kl)), Nl, Kl, H};
    const float nan = NAN;
    const pages_case c = {attend, &R, k, v, &nan, S, KH, sizeof(float), nq, &lcg};
    /* contiguous: one block of S rows, row stride Kl·H */
    const int32_t zero = 0;
    const kern_kv_pages one = {k, v, {&zero, S, S * KH, KH}};
    pages_run(&c, contig, k, v, &one.at, 0);
    kern_attn_paged_ref(ref, q, &one, 0, S, Nl, Kl, H);
    float *cached = malloc(sizeof(float) * (size_t)nq);
    float *scr = malloc(sizeof(float) * (size_t)kern_attn_cached_scratch(0, S, Nl, Kl));
    kern_attn_cached(cached, scr, q, k, v, 0, S, Nl, Kl, H, KH);
    const double wr = check_worst_dev(contig, ref, nq), wc = check_worst_dev(contig, cached, nq);
    check_expect(wr <= 64 && wc <= 64,
                 "S=%lld Nl=%lld Kl=%lld H=%lld: contiguous vs naive %.1f, vs kern_attn_cached "
                 "%.1f eps units (k = 64)",
                 (long long)S, (long long)Nl, (long long)Kl, (long long)H, wr, wc);
    const int bad = pages_sweep(&c, contig);
    check_expect(bad == 0,
                 "S=%lld Nl=%lld Kl=%lld H=%lld: paged (5 block sizes x 3 chunkings, shuffled "
                 "blocks) bit-identical to contiguous",
                 (long long)S, (long long)Nl, (long long)Kl, (long long)H);
    free(q), free(k), free(v), free(ref), free(contig), free(cached), free(scr);
    free(R.scr);
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
        run(70, 2, 1, 64);
        run(37, 4, 2, 69);
        run(21, 2, 2, 140);
    }
    return check_finish("test_attn_paged");
}
