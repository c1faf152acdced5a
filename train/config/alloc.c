/* alloc: see alloc.h. */
#include "train/config/alloc.h"

#include <stdlib.h>
#include <string.h>

float *alloc_floats(int64_t n) {
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
#ifdef MESHTRAIN_SMPI
    /* SMPI's calloc: past smpi/auto-shared-malloc-thresh one block shared by every simulated rank,
     * not cleared (bench/simpod --shared, the dry run); below it zeroed. 16-byte aligned. */
    return calloc(bytes, 1);
#else
    float *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
#endif
}

void alloc_free_list(void *const *p, int n) {
    for (int i = 0; i < n; i++) free(p[i]);
}
