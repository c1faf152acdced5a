/* pages: what the paged-attention tests (test_attn_paged, test_attn_paged_bf16) share: their
 * random numbers and a cache copied into a shuffled pool of blocks, for any element type (fp32 or
 * bf16), and the chunking of the query rows. Test code; depends on nothing of meshtrain. */
#ifndef MT_TESTS_SERVE_PAGES_H
#define MT_TESTS_SERVE_PAGES_H
#include <stddef.h>
#include <stdint.h>

/* A number in [-1, 1) from the LCG *state; an integer in [0, n) from it. */
float pages_rnd(uint64_t *state);
int64_t pages_rndi(uint64_t *state, int64_t n);

/* Where pages_pool put the rows: element offsets of layer 1's key rows (v at n + k_off), the row
 * stride and the block stride. */
typedef struct {
    int64_t k_off, n, ldk, bstride;
} pages_layout;

/* The S rows of k and v ([S, KH] of esz-byte elements, contiguous) copied into a pool of blocks of
 * bs rows, laid out as a cache of 2 layers would be (these rows are layer 1), row stride KH + 3,
 * blocks in random order (from *state) among 3 spare ones; every other element a copy of nan[esz].
 * Fills table and *lay; returns the pool (keys first, values n elements after), for free(). */
void *pages_pool(pages_layout *lay, int32_t *table, const void *k, const void *v, int64_t S,
                 int64_t KH, int64_t bs, size_t esz, const void *nan, uint64_t *state);

/* The rows of the next chunk starting at row p0 of S: mode 0 all at once, 1 random (from *state),
 * 2 one by one. */
int64_t pages_chunk(uint64_t *state, int mode, int64_t p0, int64_t S);
#endif
