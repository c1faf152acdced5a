/* sbuf: see sbuf.h. */
#include "mesh/sbuf.h"

#include "mesh/coll.h"
#include "mesh/topo.h"
#include "mesh/where.h"

void put_s(sbuf *b, const char *s) {
    while (*s && b->n + 1 < b->cap) b->p[b->n++] = *s++;
    b->p[b->n] = 0;
}

void put_c(sbuf *b, char c) {
    const char s[2] = {c, 0};
    put_s(b, s);
}

void put_i(sbuf *b, long long v) {
    char d[24];
    int k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do d[k++] = (char)('0' + u % 10);
    while ((u /= 10) && k < 23);
    if (v < 0) put_c(b, '-');
    while (k) put_c(b, d[--k]);
}

void put_secs(sbuf *b, long long ns) {
    if (ns < 0) ns = 0;
    const long long ds = (ns + 50000000LL) / 100000000LL;
    put_i(b, ds / 10);
    put_c(b, '.');
    put_i(b, ds % 10);
    put_s(b, " s");
}

void put_set(sbuf *b, const mesh_topo *t, long long id) {
    const mesh_axes a = mesh_set_axes((int)id);
    if (a.n == 0) put_s(b, "no axes");
    for (int k = 0; k < a.n; k++) put_c(b, a.ax[k] < t->ndims ? t->name[a.ax[k]] : '?');
}

void put_coords(sbuf *b, const mesh_topo *t, int rank) {
    int c[MESH_MAX_AXES];
    topo_coords(t, rank, c);
    put_c(b, '(');
    for (int k = 0; k < t->ndims; k++) {
        if (k) put_c(b, ',');
        put_c(b, t->name[k]);
        put_c(b, '=');
        put_i(b, c[k]);
    }
    put_c(b, ')');
}

void put_call(sbuf *b, const mesh_topo *t, long long op, long long setseq, long long set) {
    put_s(b, mesh_op_title((mesh_op)op));
    put_s(b, " #");
    put_i(b, setseq);
    put_s(b, " over ");
    put_set(b, t, set);
}
