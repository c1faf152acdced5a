/* traffic: how many floats the memory passes between kernels touch, counted per thread. A memory
 * pass is the work of a step that is neither a matmul nor one of the elementwise kernels that
 * train/step/ktime.h times on the step's shapes: copies, clears and additions of float arrays
 * (residual copies, weight gathers' packing, gradient reductions' additions, column packing, the
 * embedding's lookup and scatter-add). The helpers that make them count what they do: a copy
 * (one array read, one written: memcpy of floats, a row gather, an in-place scale), a clear (one
 * array written) and an add (two arrays read, one written: y += x, the embedding's scatter-add).
 * The count is the calling thread's own (C11 _Thread_local; in the SMPI build, whose simulated
 * ranks may share a thread, a global, which SMPI keeps per rank), so a reader on the thread that
 * runs the step's compute sees that thread's passes only. One addition per call. With gemm.c's
 * bug handler the only state in kernels/: a count, which changes no result. Depends on
 * nothing. */
#ifndef MT_KERNELS_TRAFFIC_H
#define MT_KERNELS_TRAFFIC_H
#include <stdint.h>

typedef enum { KERN_PASS_COPY, KERN_PASS_CLEAR, KERN_PASS_ADD, KERN_PASS_COUNT } kern_pass;

/* Adds n floats to the calling thread's count of kind k. */
void kern_traffic_count(kern_pass k, int64_t n);
/* The calling thread's counts so far, by kind (they only grow). */
void kern_traffic_read(int64_t out[KERN_PASS_COUNT]);
/* The rows each grouped-expert forward (moe.h, moe_bf16.h) ran on the calling thread, in call
 * order, since the last reset: the step's prediction prices the experts on the rows the slowest
 * rank ran (train/observe/report.c). Calls past the KERN_TRAFFIC_ROWS − 1st add to the last. */
#define KERN_TRAFFIC_ROWS 256
void kern_traffic_rows(int64_t rows);
/* Copies the calls' rows into out[KERN_TRAFFIC_ROWS] (0 past the calls); returns the calls made. */
int64_t kern_traffic_rows_read(int64_t *out);
void kern_traffic_rows_reset(void);
/* "copy", "clear", "add". */
const char *kern_pass_name(kern_pass k);
#endif
