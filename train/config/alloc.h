/* alloc: the one allocator of train/ for float buffers: 64-byte aligned (a cache line, and the
 * widest vector load) and zeroed, rounded up to whole cache lines. Freed with free(). Not
 * collective; depends on nothing. */
#ifndef MT_TRAIN_ALLOC_H
#define MT_TRAIN_ALLOC_H
#include <stdint.h>

/* n floats (at least one), zeroed; NULL when the allocation fails. */
float *alloc_floats(int64_t n);
#endif
