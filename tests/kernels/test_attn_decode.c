/* Decode against a KV cache sharded over the sequence (kern_attn_part_cached): the cache of one
 * sequence is dealt to R "ranks" (contiguous shards, striped by position, the zigzag split), each
 * rank's partial (m, l, O) is checked against the double twin, and the partials merged in rank
 * order and in reverse equal kern_attn_cached on the whole cache within the bound below, for one
 * new token (the grouped-head path) and for a few.
 *
 * Bound (first order, u = 2^-24, q, k in [−1.5, 1.5], v in [−1, 1], σ = max Σ_c |q_c k_c|/√H;
 * see test_attn_part.c for the terms): a row seeing n keys, from nb shards, is off by
 * E_f(n, nb) = u·(2(H+1)σ + 21 + 9n/8 + 3nb) on the sharded path; kern_attn_cached sums its
 * softmax in one accumulator (n·u instead of (n/8 + 11)u): u·(2(H+1)σ + 10 + 2n). The check is
 * the sum of the two. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_cache.h"
#include "kernels/attn_part.h"
#include "kernels/seqsplit.h"
#include "ktest.h"

static const double U = 0x1.0p-24;

typedef enum { DEAL_CONTIG, DEAL_STRIPED, DEAL_ZIGZAG } deal;
static const char *deal_name[] = {"contiguous", "striped", "zigzag"};

/* The positions of rank r's cache rows among S when dealt to R ranks; returns how many. */
static int64_t deal_rows(int32_t *pos, deal how, int64_t S, int64_t R, int64_t r) {
    int64_t n = 0;
    if (how == DEAL_ZIGZAG) {
        kern_seq_zigzag(pos, S, R, r);
        return S / R;
    }
    for (int64_t p = 0; p < S; p++)
        if (how == DEAL_STRIPED ? p % R == r : p * R / S == r) pos[n++] = (int32_t)p;
    return n;
}

static void run(int64_t p0, int64_t n, int64_t Nl, int64_t Kl, int64_t H, int64_t R, deal how) {
    const int64_t S = p0 + n, ldk = Kl * H + 3, NH = Nl * H, G = Nl / Kl;
    if (how == DEAL_ZIGZAG && S % (2 * R)) return;
    float *q = kt_floats(n * NH), *kc = kt_floats(S * ldk), *vc = kt_floats(S * ldk);
    float *whole = kt_floats(n * NH), *wref = kt_floats(n * NH), *o[2], *m[2], *l[2];
    float *po = kt_floats(n * NH), *pm = kt_floats(n * Nl), *pl = kt_floats(n * Nl);
    float *ro = kt_floats(n * NH), *rm = kt_floats(n * Nl), *rl = kt_floats(n * Nl);
    float *sk = kt_floats(S * ldk), *sv = kt_floats(S * ldk);
    float *scr = kt_floats(kern_attn_cached_scratch(p0, n, Nl, Kl) +
                           kern_attn_part_cached_scratch(n, S, Nl, Kl));
    int32_t *qpos = malloc((size_t)n * sizeof *qpos), *kpos = malloc((size_t)S * sizeof *kpos);
    for (int a = 0; a < 2; a++)
        o[a] = kt_floats(n * NH), m[a] = kt_floats(n * Nl), l[a] = kt_floats(n * Nl);
    kt_fill(q, n * NH, 21, -1.5f, 1.5f);
    kt_fill(kc, S * ldk, 22, -1.5f, 1.5f);
    kt_fill(vc, S * ldk, 23, -1, 1);
    for (int64_t i = 0; i < n; i++) qpos[i] = (int32_t)(p0 + i);
    kern_attn_cached(whole, scr, q, kc, vc, p0, n, Nl, Kl, H, ldk);
    kern_attn_cached_ref(wref, q, kc, vc, p0, n, Nl, Kl, H, ldk);
    double sigma = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < Nl; h++)
            for (int64_t j = 0; j < S; j++) {
                double s = 0;
                for (int64_t c = 0; c < H; c++)
                    s += fabs((double)q[i * NH + h * H + c] * kc[j * ldk + (h / G) * H + c]);
                sigma = fmax(sigma, s / sqrt((double)H));
            }
    char what[160], shape[128];
    snprintf(shape, sizeof shape, "p0=%lld n=%lld Nl=%lld Kl=%lld H=%lld, %lld %s shards",
             (long long)p0, (long long)n, (long long)Nl, (long long)Kl, (long long)H, (long long)R,
             deal_name[how]);
    int twins_ok = 1;
    for (int64_t r = 0; r < R; r++) {
        const int64_t Sr = deal_rows(kpos, how, S, R, r);
        for (int64_t j = 0; j < Sr; j++) {
            memcpy(sk + j * ldk, kc + kpos[j] * ldk, (size_t)ldk * 4);
            memcpy(sv + j * ldk, vc + kpos[j] * ldk, (size_t)ldk * 4);
        }
        kern_attn_part_cached(po, pm, pl, scr, q, sk, sv, qpos, n, kpos, Sr, Nl, Kl, H, ldk);
        kern_attn_part_cached_ref(ro, rm, rl, q, sk, sv, qpos, n, kpos, Sr, Nl, Kl, H, ldk);
        /* the shard against its twin: k = 16, as the one-shot kernels against theirs */
        twins_ok &= check_worst_dev(po, ro, n * NH) <= 16 && check_worst_dev(pl, rl, n * Nl) <= 16;
        for (int64_t i = 0; i < n * Nl; i++) twins_ok &= isinf(pm[i]) == isinf(rm[i]);
        /* merged in rank order into o[0], in reverse into o[1] (built from the end) */
        if (r == 0) {
            memcpy(o[0], po, (size_t)(n * NH) * 4), memcpy(m[0], pm, (size_t)(n * Nl) * 4);
            memcpy(l[0], pl, (size_t)(n * Nl) * 4);
            memcpy(o[1], po, (size_t)(n * NH) * 4), memcpy(m[1], pm, (size_t)(n * Nl) * 4);
            memcpy(l[1], pl, (size_t)(n * Nl) * 4);
        } else {
            kern_attn_part_merge(o[0], m[0], l[0], po, pm, pl, n, Nl, H);
            /* reverse: the new shard first, then what came before */
            kern_attn_part_merge(po, pm, pl, o[1], m[1], l[1], n, Nl, H);
            memcpy(o[1], po, (size_t)(n * NH) * 4), memcpy(m[1], pm, (size_t)(n * Nl) * 4);
            memcpy(l[1], pl, (size_t)(n * Nl) * 4);
        }
    }
    check_expect(twins_ok, "decode shards vs their twin (k=16, equal -inf rows) %s", shape);
    for (int a = 0; a < 2; a++) {
        double worst = 0, err = 0, bnd = 0;
        for (int64_t e = 0; e < n * NH; e++) {
            const double nk = (double)(p0 + e / NH + 1), ce = 2 * ((double)H + 1) * sigma;
            const double b = U * (ce + 21 + 9 * nk / 8 + 3 * (double)R) + U * (ce + 10 + 2 * nk);
            const double d = fabs((double)o[a][e] - whole[e]);
            if (!(d / b <= worst)) worst = d / b, err = d, bnd = b;
        }
        check_expect(worst <= 1,
                     "decode merged %s vs kern_attn_cached: worst %.3g = %.3g of the "
                     "bound %.3g; %s",
                     a ? "in reverse" : "in order", err, worst, bnd, shape);
    }
    snprintf(what, sizeof what, "decode merged vs cached twin %s", shape);
    kt_close(what, o[0], wref, n * NH, 16);
    free(q), free(kc), free(vc), free(whole), free(wref), free(po), free(pm);
    free(pl), free(ro), free(rm), free(rl), free(sk), free(sv), free(scr), free(qpos), free(kpos);
    for (int a = 0; a < 2; a++) free(o[a]), free(m[a]), free(l[a]);
}

int main(void) {
    static const int64_t shapes[][5] = {
        /* p0, n, Nl, Kl, H */
        {11, 1, 4, 2, 8},  /* decode, GQA: the grouped path */
        {0, 1, 2, 2, 4},   /* the first token: one key */
        {45, 1, 8, 1, 6},  /* MQA, 8 query heads on one kv head */
        {37, 3, 4, 2, 8},  /* three new tokens */
        {90, 70, 2, 1, 4}, /* more rows than one block */
    };
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int64_t R = 1; R <= 4; R++)
            for (int how = 0; how < 3; how++) {
                const int64_t *s = shapes[c];
                run(s[0], s[1], s[2], s[3], s[4], R, (deal)how);
            }
    return check_finish("test_kern_attn_decode");
}
