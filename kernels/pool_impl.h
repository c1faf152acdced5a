/* Kernel-private (not part of the kernels/ API): a fixed set of worker threads for the bf16
 * context (gemm_bf16.c), made once with the context and joined with it. A job runs fn(arg, t) for
 * t = 0..n-1, part 0 on the calling thread and part t on worker t, and returns when all parts are
 * done; nothing is allocated per job. The workers sleep on a condition variable between jobs (no
 * spinning: the machine's other ranks keep their cores). Depends on pthreads. */
#ifndef MT_KERNELS_POOL_IMPL_H
#define MT_KERNELS_POOL_IMPL_H

typedef struct kern_pool kern_pool;
typedef void (*kern_pool_fn)(void *arg, int t);

/* A pool of n threads in all: n − 1 workers and the caller. NULL if n < 2 or on failure. */
kern_pool *kern_pool_create(int n);
/* Runs fn(arg, t) for every t < n, as described above. One job at a time (not reentrant). */
void kern_pool_run(kern_pool *p, kern_pool_fn fn, void *arg);
/* Joins the workers and frees the pool (NULL: nothing). */
void kern_pool_destroy(kern_pool *p);
#endif
