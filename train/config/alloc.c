/* alloc: see alloc.h. */
#include "train/config/alloc.h"

#include <stdlib.h>
#include <string.h>
#ifdef MESHTRAIN_SMPI
#include <sys/mman.h>
#endif

float *alloc_floats(int64_t n) {
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
#ifdef MESHTRAIN_SMPI
    /* SMPI's calloc: past smpi/auto-shared-malloc-thresh one block shared by every simulated rank
     * (bench/simpod --shared, the dry run), which each rank clears in turn; below it zeroed. With
     * "no data" (mesh_no_data) a big block is a private mapping without swap reservation instead:
     * pages that nothing touches take no memory and no time, and one block may exceed the
     * machine's memory (a 70B model's activations). free() cannot take such a block: the dry run
     * leaves them to the end of the process. Page-aligned. */
    if (mesh_no_data((int64_t)bytes)) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    return calloc(bytes, 1);
#else
    float *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
#endif
}

void alloc_release(float *p, int64_t n) {
#ifdef MESHTRAIN_SMPI
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    if (p && mesh_no_data((int64_t)bytes)) {
        munmap(p, bytes);
        return;
    }
#else
    (void)n;
#endif
    free(p);
}

void alloc_free_list(void *const *p, int n) {
    for (int i = 0; i < n; i++) free(p[i]);
}
