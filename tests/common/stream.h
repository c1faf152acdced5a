/* stream: the generated token stream of the trainer tests that compare runs (equivalence across
 * meshes, checkpoint resume): a pure function of (step, global row, position), so every mesh and
 * every resume point feeds the same data. Depends on kernels/rng.h. */
#ifndef MT_TESTS_COMMON_STREAM_H
#define MT_TESTS_COMMON_STREAM_H
#include <stdint.h>

/* Rows [row0, row0 + nrows) of step `step`'s batch: nrows × (T + 1) byte tokens into out. */
void test_stream_batch(int32_t *out, int64_t row0, int64_t nrows, int64_t T, int64_t step);
#endif
