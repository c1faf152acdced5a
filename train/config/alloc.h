/* alloc: the one allocator of train/ for float buffers: 64-byte aligned (a cache line, and the
 * widest vector load) and zeroed, rounded up to whole cache lines. Freed with free(), or a list
 * of them at once with ALLOC_FREE_ALL. Not collective; depends on nothing. */
#ifndef MT_TRAIN_ALLOC_H
#define MT_TRAIN_ALLOC_H
#include <stdint.h>

/* n floats (at least one), zeroed; NULL when the allocation fails. */
float *alloc_floats(int64_t n);

/* Frees the n pointers of p, in order (NULL ones too, as free() does). */
void alloc_free_list(void *const *p, int n);
/* ALLOC_FREE_ALL(a, b, ...): free(a); free(b); ... in that order. The pointers are read before
 * any is freed, so an owner may come last after its own buffers: ALLOC_FREE_ALL(g->x, g). */
#define ALLOC_FREE_ALL(...)                                                                       \
    alloc_free_list((void *const[]){__VA_ARGS__},                                                 \
                    (int)(sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *)))
#endif
