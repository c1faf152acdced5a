/* alloc: see alloc.h. */
#include "train/config/alloc.h"

#include <stdlib.h>
#include <string.h>

float *alloc_floats(int64_t n) {
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void alloc_free_list(void *const *p, int n) {
    for (int i = 0; i < n; i++) free(p[i]);
}
