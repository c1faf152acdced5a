/* The bf16 context's worker threads (see pool_impl.h): a job is published under a mutex with a
 * new generation number; each worker runs its part when it sees the number change and counts
 * itself done; the caller runs part 0, then waits until the count reaches n − 1. */
#include "kernels/pool_impl.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    kern_pool *pool;
    int t;
    pthread_t th;
} worker;

struct kern_pool {
    int n, done, quit;
    unsigned long gen; /* the job's number: a worker runs each number once */
    kern_pool_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t go, finished;
    worker *w; /* n − 1 workers, parts 1..n-1 */
};

static void *work(void *a) {
    worker *w = a;
    kern_pool *p = w->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        const kern_pool_fn fn = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(arg, w->t);
        pthread_mutex_lock(&p->mu);
        if (++p->done == p->n - 1) pthread_cond_signal(&p->finished);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

kern_pool *kern_pool_create(int n) {
    if (n < 2) return NULL;
    kern_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->w = calloc((size_t)(n - 1), sizeof *p->w);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->finished, NULL);
    int made = 0;
    while (p->w && made < n - 1) {
        p->w[made] = (worker){p, made + 1, 0};
        if (pthread_create(&p->w[made].th, NULL, work, &p->w[made]) != 0) break;
        made++;
    }
    if (made == n - 1) return p;
    p->n = made + 1; /* join the ones that started */
    kern_pool_destroy(p);
    return NULL;
}

void kern_pool_run(kern_pool *p, kern_pool_fn fn, void *arg) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn, p->arg = arg, p->done = 0;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0);
    pthread_mutex_lock(&p->mu);
    while (p->done < p->n - 1) pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void kern_pool_destroy(kern_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; p->w && i < p->n - 1; i++) pthread_join(p->w[i].th, NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->finished);
    pthread_mutex_destroy(&p->mu);
    free(p->w);
    free(p);
}
