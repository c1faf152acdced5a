/* stream: see stream.h. */
#include "stream.h"

#include "kernels/rng.h"

void test_stream_batch(int32_t *out, int64_t row0, int64_t nrows, int64_t T, int64_t step) {
    for (int64_t b = 0; b < nrows; b++)
        for (int64_t t = 0; t <= T; t++) {
            uint64_t pos =
                kern_rng_u64(3, (uint64_t)step, (uint64_t)(row0 + b)) % 1000 + (uint64_t)t;
            out[b * (T + 1) + t] = (int32_t)((pos * pos * 7 + pos / 3) % 256);
        }
}
