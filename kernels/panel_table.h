/* panel_table: kernel-private, the table of registered panel copies a context keeps (gemm.c's
 * kern_f32_ctx, gemm_bf16.c's kern_bf16_ctx): weights B [K, N] of row stride ldb, each with its
 * copy P in panels of 16 columns, one after another ([K][16] each, or [⌈K/2⌉][16][2]: rows in
 * pairs, the avx512bf16 path's). The table holds addresses,
 * so it serves either dtype: a lookup is told the size of a value. */
#ifndef MT_KERNELS_PANEL_TABLE_H
#define MT_KERNELS_PANEL_TABLE_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const void *B, *P;
    int64_t K, N, ldb;
} panel_entry;

typedef struct {
    panel_entry *e; /* n entries (room for cap), grown by panel_table_add */
    int n, cap, last; /* last: the entry of the last hit */
} panel_table;

/* Registers x: the entry of the same B is replaced (B packed again), else x is added. 0, or −1
 * when the table cannot grow (nothing changed). */
static inline int panel_table_add(panel_table *t, panel_entry x) {
    int i = 0;
    while (i < t->n && t->e[i].B != x.B) i++;
    if (i == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        panel_entry *e = realloc(t->e, (size_t)cap * sizeof *e);
        if (!e) return -1;
        t->e = e, t->cap = cap;
    }
    t->e[i] = x;
    if (i == t->n) t->n++;
    return 0;
}

/* The panels of a registered copy holding B (values of elem bytes), a block [K, N] of row stride
 * ldb that starts on a panel's first column (a multiple of 16 from its weight's): their start (a
 * row and a panel inside the copy) and *ps, the panel stride in values; NULL if none holds it.
 * kstep: the rows of a panel's step, 1 ([K][16]) or 2 (pairs of rows, [⌈K/2⌉][16][2]: the
 * block's first row even from its weight's, and an odd K ending at its weight's last row, whose
 * pair the copy pads with a zero). The search starts at the last hit: a pass's products come in
 * the order the copies were registered. */
static inline const void *panel_table_find(panel_table *t, const void *B, size_t elem, int64_t K,
                                           int64_t N, int64_t ldb, int64_t kstep, int64_t *ps) {
    for (int j = 0; j < t->n; j++) {
        const int i = (t->last + j) % t->n;
        const panel_entry *e = &t->e[i];
        const uintptr_t b = (uintptr_t)B, b0 = (uintptr_t)e->B;
        if (e->ldb != ldb || b < b0 || b >= b0 + (uintptr_t)(e->K * ldb) * elem) continue;
        const int64_t off = (int64_t)((b - b0) / elem), r = off / ldb, j0 = off % ldb;
        if (j0 % 16 || j0 + N > e->N || r + K > e->K) continue;
        if (r % kstep || (K % kstep && r + K != e->K)) continue;
        t->last = i;
        *ps = 16 * ((e->K + kstep - 1) / kstep * kstep);
        return (const char *)e->P + (size_t)(j0 / 16 * *ps + 16 * r) * elem;
    }
    return NULL;
}

/* Values in the copy of a [K, N] weight: K rows of N rounded up to whole panels of 16 columns
 * (kern_f32_panel_elems, kern_bf16_panel_elems). */
static inline int64_t panel_elems(int64_t K, int64_t N) {
    return K * ((N + 15) / 16 * 16);
}
#endif
