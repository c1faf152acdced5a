/* Kernel-private (not part of the kernels/ API): the timing loop of the start-up rate
 * measurements, shared by the fp32 (gemm.c) and the bf16 (gemm_bf16.c) products. Depends on
 * nothing. */
#ifndef MT_KERNELS_MEASURE_IMPL_H
#define MT_KERNELS_MEASURE_IMPL_H
#include <stdint.h>

/* Runs one n×n×n product on the caller's operands: which = 0 y = x·w, 1 dx = dy·wᵀ, 2 dw += xᵀ·dy.
 */
typedef void (*kern_product_fn)(void *operands, int which);

/* FLOP/s of run: after a warm-up of each product timed, products 0, 1, 2 in turn (a training
 * step's three in equal FLOPs), or product 0 alone (fwd_only), until `seconds` have passed on the
 * monotonic clock, or on the calling thread's CPU clock (thread_clock). */
double kern_time_products(kern_product_fn run, void *operands, int64_t n, double seconds,
                          int thread_clock, int fwd_only);
#endif
