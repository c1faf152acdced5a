/* kern_attn_paged_bf16, the serving engine's attention through a block table of a bf16 pool
 * (--kv-dtype bf16):
 *  - bit for bit equal to kern_attn_cached_bf16 (generate's kernel for a bf16 cache, itself
 *    checked against its double twin in test_attn_bf16.c) on a contiguous copy of the cache, for
 *    the contexts of the own kernels' paths this CPU has (avx2, portable), over the prefill of all
 *    rows at once and one row at a time;
 *  - bit for bit the same whatever the block size (1, 3, 4, 16, one past the rows), wherever the
 *    blocks sit in the pool (a shuffled table, other layers' rows interleaved, padding holding
 *    NaN's bf16) and however the rows are chunked (all, random chunks, one by one);
 *  - within 2^-6·(|a| + |b| + 1) of the fp32 attention (kern_attn_paged_ref) on the same fp32
 *    keys and values, a sanity bound: bf16 rounds q, K, V and P each by at most 2^-9 relative;
 * on G = Nl/Kl of 1, 2 and 3, odd head dims, 1 to 70 positions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/attn_bf16.h"
#include "kernels/attn_paged.h"
#include "pages.h"

static uint64_t lcg = 4242;
static float rnd(void) {
    return pages_rnd(&lcg);
}

/* The query rows [S, Nl·H] and the kernel's scratch (ns floats, set to NaN before each call). */
typedef struct {
    const float *q;
    float *scr;
    int64_t ns, Nl, Kl, H;
} rows;

static void attend(void *arg, float *out, const void *k, const void *v, const kern_kv_table *at,
                   int64_t p0, int64_t n) {
    const rows *R = arg;
    const kern_kv_pages_bf16 pg = {k, v, *at};
    for (int64_t i = 0; i < R->ns; i++) R->scr[i] = NAN;
    kern_attn_paged_bf16(out + p0 * R->Nl * R->H, R->scr, R->q + p0 * R->Nl * R->H, &pg, p0, n,
                         R->Nl, R->Kl, R->H);
}

/* kern_attn_cached_bf16 on the contiguous cache: prefill of every row (mode 0) or decode, one row
 * at a time (mode 2). */
static void cached(kern_bf16_ctx *ctx, float *out, const float *q, const kern_bf16 *k,
                   const kern_bf16 *v, int64_t S, int64_t Nl, int64_t Kl, int64_t H, int mode) {
    float *scr = malloc(sizeof(float) * (size_t)kern_attn_cached_bf16_scratch(0, S, Nl, Kl, H) +
                        sizeof(float) * (size_t)kern_attn_cached_bf16_scratch(S, 1, Nl, Kl, H));
    if (mode == 0) kern_attn_cached_bf16(ctx, out, scr, q, k, v, 0, S, Nl, Kl, H, Kl * H);
    for (int64_t p = 0; mode != 0 && p < S; p++)
        kern_attn_cached_bf16(ctx, out + p * Nl * H, scr, q + p * Nl * H, k, v, p, 1, Nl, Kl, H,
                              Kl * H);
    free(scr);
}

static void run(kern_bf16_ctx *const *ctx, int nctx, int64_t S, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t KH = Kl * H, nq = S * Nl * H;
    float *q = malloc(sizeof(float) * (size_t)nq), *kf = malloc(sizeof(float) * (size_t)(S * KH));
    float *vf = malloc(sizeof(float) * (size_t)(S * KH)), *ref = malloc(sizeof(float) * (size_t)nq);
    float *contig = malloc(sizeof(float) * (size_t)nq), *out = malloc(sizeof(float) * (size_t)nq);
    kern_bf16 *k = malloc(2 * (size_t)(S * KH)), *v = malloc(2 * (size_t)(S * KH));
    for (int64_t i = 0; i < nq; i++) q[i] = 2 * rnd();
    for (int64_t i = 0; i < S * KH; i++) kf[i] = 2 * rnd(), vf[i] = rnd();
    kern_bf16_pack(k, kf, S * KH);
    kern_bf16_pack(v, vf, S * KH);
    const int64_t ns = kern_attn_paged_bf16_scratch(0, S, Nl, Kl, H);
    rows R = {q, malloc(sizeof(float) * (size_t)ns), ns, Nl, Kl, H};
    const kern_bf16 nan = 0x7fc0; /* NaN's bf16 */
    const pages_case pc = {attend, &R, k, v, &nan, S, KH, sizeof(kern_bf16), nq, &lcg};
    const int32_t zero = 0;
    const kern_kv_pages_bf16 one = {k, v, {&zero, S, S * KH, KH}};
    pages_run(&pc, contig, k, v, &one.at, 0);
    int bad = 0;
    for (int c = 0; c < nctx; c++)
        for (int mode = 0; mode < 3; mode += 2) {
            cached(ctx[c], out, q, k, v, S, Nl, Kl, H, mode);
            if (memcmp(out, contig, sizeof(float) * (size_t)nq)) {
                bad++;
                printf("  path %s, %s: differs from kern_attn_cached_bf16 (worst %.2f eps)\n",
                       kern_bf16_path_name(kern_bf16_ctx_path(ctx[c])), mode ? "decode" : "prefill",
                       check_worst_dev(out, contig, nq));
            }
        }
    const kern_kv_pages onef = {kf, vf, {&zero, S, S * KH, KH}};
    kern_attn_paged_ref(ref, q, &onef, 0, S, Nl, Kl, H);
    double worst = 0;
    for (int64_t i = 0; i < nq; i++) {
        const double d = fabs(ref[i] - contig[i]) / (fabs(ref[i]) + fabs(contig[i]) + 1);
        worst = d > worst ? d : worst;
    }
    bad += pages_sweep(&pc, contig);
    check_expect(bad == 0 && worst <= 1.0 / 64,
                 "S=%lld Nl=%lld Kl=%lld H=%lld: paged bf16 bit-identical to "
                 "kern_attn_cached_bf16 (%d paths) and across 5 block sizes x 3 chunkings (%d "
                 "differ); vs the fp32 attention %.2e (bound 2^-6)",
                 (long long)S, (long long)Nl, (long long)Kl, (long long)H, nctx, bad, worst);
    free(q), free(kf), free(vf), free(ref), free(contig), free(out), free(k), free(v), free(R.scr);
}

int main(void) {
    kern_bf16_ctx *ctx[2];
    int nctx = 0;
    const kern_bf16_path paths[2] = {KERN_BF16_AVX2, KERN_BF16_PORTABLE};
    for (int i = 0; i < 2; i++) {
        char msg[256];
        kern_bf16_path r;
        if (kern_bf16_path_check(paths[i], &r, msg, sizeof msg) < 0) {
            printf("skipped: %s\n", msg);
            continue;
        }
        ctx[nctx] = kern_bf16_ctx_create(paths[i], 1, msg, sizeof msg);
        if (ctx[nctx])
            nctx++;
        else
            check_expect(0, "the %s context: %s", kern_bf16_path_name(paths[i]), msg);
    }
    run(ctx, nctx, 1, 1, 1, 4);
    run(ctx, nctx, 7, 4, 2, 8);
    run(ctx, nctx, 33, 6, 2, 5);
    run(ctx, nctx, 70, 3, 1, 16);
    run(ctx, nctx, 17, 8, 8, 6);
    run(ctx, nctx, 40, 4, 2, 32);
    for (int i = 0; i < nctx; i++) kern_bf16_ctx_destroy(ctx[i]);
    return check_finish("test_attn_paged_bf16");
}
