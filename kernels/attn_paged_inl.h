/* Kernel-private (not part of the kernels/ API): the walk over a paged cache's blocks in position
 * order, shared by the fp32 and bf16 paged attention kernels (attn_paged.c, attn_paged_bf16.c).
 * It yields element offsets, so one walk serves both pools; it reads the block table once per
 * block and never past the block of the last position. Depends on attn_paged.h only. */
#ifndef MT_KERNELS_ATTN_PAGED_INL_H
#define MT_KERNELS_ATTN_PAGED_INL_H
#include <stdint.h>

#include "kernels/attn_paged.h"

/* The blocks holding positions 0 .. S − 1, in order, columns from col on (kv head j: col = j·H):
 * after each successful kern_page_next, the block holds positions t0 .. t0 + rows − 1, their rows
 * ldk apart from the element offset off of the pool's k (or v). */
typedef struct {
    const kern_kv_table *at;
    int64_t col, S;
    int64_t b, t0, rows, off; /* the block's index in the table, its positions, its offset */
} kern_page_walk;

static inline kern_page_walk kern_page_start(const kern_kv_table *at, int64_t col, int64_t S) {
    return (kern_page_walk){.at = at, .col = col, .S = S, .b = -1, .t0 = -at->bs};
}

/* Steps to the next block; 0 past the last. */
static inline int kern_page_next(kern_page_walk *w) {
    w->b++, w->t0 += w->at->bs;
    if (w->t0 >= w->S) return 0;
    w->rows = w->S - w->t0 < w->at->bs ? w->S - w->t0 : w->at->bs;
    w->off = w->at->table[w->b] * w->at->bstride + w->col;
    return 1;
}
#endif
