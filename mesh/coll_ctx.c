/* coll_ctx: the engine's state on one context: scratch and offset tables (see coll_impl.h). */
#include <stdlib.h>

#include "mesh/coll_impl.h"

float *eng_scratch(eng_ctx *c, int slot, int64_t n) {
    CHECK(slot >= 0 && slot < ENG_NSCRATCH, "scratch slot %d out of range", slot);
    if (c->scratch_n[slot] < n) {
        free(c->scratch[slot]);
        size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
#ifdef MESHTRAIN_SMPI
        /* SMPI's malloc, so that smpi/auto-shared-malloc-thresh (simpod --shared) shares big
         * scratch, with or without "no data": SMPI copies no message into a shared block, while
         * the C library's fresh pages were touched by the copies of a no-data call's small
         * messages (a MULTI AllGather's steps), every rank's scratch in full. */
        c->scratch[slot] = malloc(bytes);
#else
        c->scratch[slot] = aligned_alloc(64, bytes);
#endif
        CHECK(c->scratch[slot], "out of memory for %lld floats of scratch", (long long)n);
        c->scratch_n[slot] = n;
    }
    return c->scratch[slot];
}

void eng_tables(eng_ctx *c, int64_t n, int lanes) {
    if (n > c->tab_n) {
        free(c->boff);
        free(c->blen);
        c->boff = calloc((size_t)n + 1, sizeof(int64_t));
        c->blen = calloc((size_t)n + 1, sizeof(int64_t));
        CHECK(c->boff && c->blen, "out of memory");
        c->tab_n = n;
    }
    const int64_t ln = (lanes > 1 ? lanes : 1) * n;
    if (ln > c->tab_ln) {
        free(c->loff);
        free(c->llen);
        free(c->lmid);
        c->loff = calloc((size_t)ln, sizeof(int64_t));
        c->llen = calloc((size_t)ln, sizeof(int64_t));
        c->lmid = calloc((size_t)ln, sizeof(int64_t));
        CHECK(c->loff && c->llen && c->lmid, "out of memory");
        c->tab_ln = ln;
    }
}

void eng_free(eng_ctx *c) {
    for (int i = 0; i < ENG_NSCRATCH; i++) free(c->scratch[i]);
    free(c->boff);
    free(c->blen);
    free(c->loff);
    free(c->llen);
    free(c->lmid);
}
