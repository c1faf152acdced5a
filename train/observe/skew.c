/* skew: see skew.h. */
#include "train/observe/skew.h"

#include <stdlib.h>

#define SEQ_BITS 22

void skew_pack(const skew_call *c, int n, int nmax, double ref, float *rows) {
    for (int i = 0; i < nmax; i++) {
        float *w = rows + (int64_t)i * SKEW_FIELDS;
        if (i < n) {
            w[0] = (float)c[i].set, w[1] = (float)c[i].group;
            w[2] = (float)(c[i].seq & ((1 << SEQ_BITS) - 1));
            w[3] = (float)(c[i].t0 - ref), w[4] = (float)(c[i].t1 - ref);
        } else {
            w[0] = -1.0f, w[1] = w[2] = w[3] = w[4] = 0.0f;
        }
    }
}

typedef struct {
    int64_t key;
    int rank, row;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int64_t key_of(const float *w) {
    return ((int64_t)w[0] << 48) | ((int64_t)w[1] << SEQ_BITS) | (int64_t)w[2];
}

int skew_transfers(const float *all, int nranks, int nmax, int me, int shared_clock, double *out) {
    const int64_t total = (int64_t)nranks * nmax;
    entry *e = malloc((size_t)(total > 0 ? total : 1) * sizeof *e);
    if (!e) return -1;
    int64_t n = 0;
    int mine = 0;
    for (int r = 0; r < nranks; r++)
        for (int i = 0; i < nmax; i++) {
            const float *w = all + ((int64_t)r * nmax + i) * SKEW_FIELDS;
            if (w[0] < 0) break; /* padding: the rank's calls end here */
            e[n++] = (entry){key_of(w), r, i};
            mine += r == me;
        }
    qsort(e, (size_t)n, sizeof *e, cmp_entry);
    for (int64_t a = 0; a < n;) {
        int64_t b = a;
        double t0 = -1e300, t1 = -1e300, dur = 1e300;
        for (; b < n && e[b].key == e[a].key; b++) {
            const float *w = all + ((int64_t)e[b].rank * nmax + e[b].row) * SKEW_FIELDS;
            const double s = w[3], f = w[4];
            t0 = s > t0 ? s : t0, t1 = f > t1 ? f : t1;
            dur = f - s < dur ? f - s : dur;
        }
        const double x = shared_clock ? t1 - t0 : dur;
        for (int64_t k = a; k < b; k++)
            if (e[k].rank == me) out[e[k].row] = x > 0 ? x : 0;
        a = b;
    }
    free(e);
    return mine;
}
