/* pages: the paged-attention tests' shared set-up (see pages.h). */
#include "pages.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

float pages_rnd(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*state >> 40) & 0xffffff) / (float)(1 << 24) * 2.0f - 1.0f;
}

int64_t pages_rndi(uint64_t *state, int64_t n) {
    return (int64_t)((pages_rnd(state) + 1.0f) * 0.5f * (float)n) % n;
}

void *pages_pool(pages_layout *lay, int32_t *table, const void *k, const void *v, int64_t S,
                 int64_t KH, int64_t bs, size_t esz, const void *nan, uint64_t *state) {
    const int64_t ldk = KH + 3, nb = (S + bs - 1) / bs, pool_blocks = nb + 3;
    const int64_t bstride = 2 * bs * ldk, n = pool_blocks * bstride;
    char *pool = malloc(esz * (size_t)(2 * n));
    for (int64_t i = 0; i < 2 * n; i++) memcpy(pool + (size_t)i * esz, nan, esz);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pool_blocks);
    for (int64_t i = 0; i < pool_blocks; i++) perm[i] = (int32_t)i;
    for (int64_t i = pool_blocks - 1; i > 0; i--) {
        const int64_t j = pages_rndi(state, i + 1);
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t b = 0; b < nb; b++) table[b] = perm[b];
    const int64_t layer = bs * ldk; /* layer 1 of the block */
    const size_t row = esz * (size_t)KH;
    for (int64_t p = 0; p < S; p++) {
        char *kr = pool + esz * (size_t)(table[p / bs] * bstride + layer + (p % bs) * ldk);
        memcpy(kr, (const char *)k + (size_t)p * row, row);
        memcpy(kr + esz * (size_t)n, (const char *)v + (size_t)p * row, row);
    }
    *lay = (pages_layout){layer, n, ldk, bstride};
    free(perm);
    return pool;
}

int64_t pages_chunk(uint64_t *state, int mode, int64_t p0, int64_t S) {
    const int64_t n = mode == 0 ? S : mode == 2 ? 1 : 1 + pages_rndi(state, S - p0);
    return n > S - p0 ? S - p0 : n;
}

void pages_run(const pages_case *c, float *out, const void *k, const void *v,
               const kern_kv_table *at, int mode) {
    for (int64_t p0 = 0; p0 < c->S;) {
        const int64_t n = pages_chunk(c->state, mode, p0, c->S);
        c->attend(c->arg, out, k, v, at, p0, n);
        p0 += n;
    }
}

int pages_sweep(const pages_case *c, const float *want) {
    const int64_t sizes[] = {1, 3, 4, 16, c->S + 1};
    int32_t table[128];
    float *out = malloc(sizeof(float) * (size_t)c->nq);
    int bad = 0;
    for (int si = 0; si < 5; si++)
        for (int mode = 0; mode < 3; mode++) {
            pages_layout l;
            char *pool =
                pages_pool(&l, table, c->k, c->v, c->S, c->KH, sizes[si], c->esz, c->nan, c->state);
            const kern_kv_table at = {table, sizes[si], l.bstride, l.ldk};
            for (int64_t i = 0; i < c->nq; i++) out[i] = NAN;
            pages_run(c, out, pool + c->esz * (size_t)l.k_off,
                      pool + c->esz * (size_t)(l.n + l.k_off), &at, mode);
            if (memcmp(out, want, sizeof(float) * (size_t)c->nq)) {
                bad++;
                printf("  block size %lld, chunking %d: differs from the contiguous cache (worst "
                       "%.2f eps units)\n",
                       (long long)sizes[si], mode, check_worst_dev(out, want, c->nq));
            }
            free(pool);
        }
    free(out);
    return bad;
}
