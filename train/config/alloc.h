/* alloc: the one allocator of train/ for float buffers: 64-byte aligned (a cache line, and the
 * widest vector load) and zeroed, rounded up to whole cache lines. Freed with free(), or a list
 * of them at once with ALLOC_FREE_ALL. Also the clears and copies of whole float arrays that the
 * SMPI dry run's "no data" mode skips. Not collective; depends on mesh/mesh.h and
 * kernels/traffic.h. */
#ifndef MT_TRAIN_ALLOC_H
#define MT_TRAIN_ALLOC_H
#include <stdint.h>
#include <string.h>

#include "kernels/traffic.h"
#include "mesh/mesh.h"

/* n floats (at least one), zeroed; NULL when the allocation fails. */
float *alloc_floats(int64_t n);

/* Frees p = alloc_floats(n): free(), or in the SMPI build also one of the "no data" mode's
 * mappings. */
void alloc_release(float *p, int64_t n);

/* Frees the n pointers of p, in order (NULL ones too, as free() does). */
void alloc_free_list(void *const *p, int n);
/* memset / memcpy / memmove of n floats; skipped for an array of mesh_no_data's size (only the
 * SMPI build has that mode: elsewhere these are exactly memset, memcpy and memmove). What they do
 * is counted as a clear or a copy pass of n floats (kernels/traffic.h): the step's prediction
 * prices the passes a step makes (train/step/ktime.h). */
static inline void floats_clear(float *p, int64_t n) {
    if (mesh_no_data(n * (int64_t)sizeof(float))) return;
    memset(p, 0, (size_t)n * sizeof(float));
    kern_traffic_count(KERN_PASS_CLEAR, n);
}
static inline void floats_copy(float *dst, const float *src, int64_t n) {
    if (mesh_no_data(n * (int64_t)sizeof(float))) return;
    memcpy(dst, src, (size_t)n * sizeof(float));
    kern_traffic_count(KERN_PASS_COPY, n);
}
static inline void floats_move(float *dst, const float *src, int64_t n) {
    if (mesh_no_data(n * (int64_t)sizeof(float))) return;
    memmove(dst, src, (size_t)n * sizeof(float));
    kern_traffic_count(KERN_PASS_COPY, n);
}

/* ALLOC_FREE_ALL(a, b, ...): free(a); free(b); ... in that order. The pointers are read before
 * any is freed, so an owner may come last after its own buffers: ALLOC_FREE_ALL(g->x, g). */
#define ALLOC_FREE_ALL(...)                                                                        \
    alloc_free_list((void *const[]){__VA_ARGS__},                                                  \
                    (int)(sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *)))
#endif
