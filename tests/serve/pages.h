/* pages: what the paged-attention tests (test_attn_paged, test_attn_paged_bf16) share: their
 * random numbers, a cache copied into a shuffled pool of blocks, for any element type (fp32 or
 * bf16), the chunking of the query rows and the sweep over block sizes and chunkings. Test code;
 * depends on kernels/attn_paged.h (the block table's type) and check.h. */
#ifndef MT_TESTS_SERVE_PAGES_H
#define MT_TESTS_SERVE_PAGES_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/attn_paged.h"

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

/* The test's kernel on query rows [p0, p0 + n) against the cache whose key and value rows start
 * at k and v (esz-byte elements) and sit where at says; it writes those rows of out. */
typedef void (*pages_attend)(void *arg, float *out, const void *k, const void *v,
                             const kern_kv_table *at, int64_t p0, int64_t n);

/* A case: the kernel, the S contiguous rows of k and v ([S, KH] of esz-byte elements, padding
 * copies of nan[esz]) and the size of its output (nq floats); random numbers from *state. */
typedef struct {
    pages_attend attend;
    void *arg;
    const void *k, *v, *nan;
    int64_t S, KH;
    size_t esz;
    int64_t nq;
    uint64_t *state;
} pages_case;

/* Rows [0, S) into out through at, chunked by pages_chunk's mode. */
void pages_run(const pages_case *c, float *out, const void *k, const void *v,
               const kern_kv_table *at, int mode);

/* The sweep: for block sizes 1, 3, 4, 16 and S + 1 (pages_pool) and chunkings 0, 1, 2, an output
 * of NaN computed through the pool; returns how many of the 15 runs differ from want[nq] bit for
 * bit, printing each. */
int pages_sweep(const pages_case *c, const float *want);
#endif
