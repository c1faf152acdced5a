/* co_progress: the queue of non-blocking calls on a coroutine (ucontext) of the caller's own
 * thread, instead of a progress thread; see async_impl.h. Used by the SMPI build always (a
 * simulated rank is one SimGrid actor, and only it may call MPI) and on real cores in the inline
 * mode (mesh_set_progress: no thread to share a core with the compute).
 *
 * The coroutine runs the progress thread's code: coll_execute on context 1, in issue order. Where
 * the engine would block (nothing ready, messages in flight) the coroutine returns to the caller,
 * publishing the requests it waits for; the caller resumes it when one of them may have
 * completed:
 *  - at issue (its first sends and receives are posted at once), in mesh_test and mesh_poll;
 *  - in mesh_wait, which waits for one of those requests between resumptions (nap.h);
 *  - in a blocking collective's wait (the engine on context 0) and a point-to-point wait (p2p.c),
 *    which wait over their own requests and the coroutine's at once, so neither stalls the other
 *    (a peer may wait in a blocking call for this rank while this rank's queue must move on for
 *    the peer's mesh_wait);
 *  - in the SMPI build, in mesh_sim_compute between slices of simulated compute
 *    (sim_progress.c).
 * The messages, their order and the arithmetic are the progress thread's, so results are
 * bit-identical; only the times at which a step's receive is noticed differ. */
#ifndef _DEFAULT_SOURCE /* (smpicc defines it) */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mesh/async_impl.h"
#include "mesh/nap.h"

#define CO_STACK (1 << 20) /* the coroutine's stack (mapped, untouched pages cost nothing) */

/* One process is one rank (SMPI privatises these per simulated rank). */
static mesh_async *g_boot; /* the queue whose coroutine is starting (its body's argument) */

static void co_entry(void) {
    mesh_async *q = g_boot;
    q->serve(q->m); /* never returns: it idles in co_idle between calls */
}

static void co_make(mesh_async *q) {
    q->stack = mmap(NULL, CO_STACK, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(q->stack != MAP_FAILED, "cannot map the non-blocking calls' coroutine stack");
    CHECK(getcontext(&q->co_uc) == 0, "getcontext failed");
    q->co_uc.uc_stack.ss_sp = q->stack;
    q->co_uc.uc_stack.ss_size = CO_STACK;
    q->co_uc.uc_link = NULL;
    makecontext(&q->co_uc, co_entry, 0);
}

void co_resume(mesh_async *q) {
    CHECK(!q->inside, "the non-blocking calls' coroutine resumed from itself");
    if (!q->stack) co_make(q);
    g_boot = q;
    q->inside = 1;
#ifndef MESHTRAIN_SMPI
    const double c0 = mesh_thread_cpu();
#endif
    CHECK(swapcontext(&q->caller_uc, &q->co_uc) == 0, "swapcontext failed");
#ifndef MESHTRAIN_SMPI
    q->co_cpu += mesh_thread_cpu() - c0;
#endif
}

static void yield(mesh_async *q) {
    q->inside = 0;
    CHECK(swapcontext(&q->co_uc, &q->caller_uc) == 0, "swapcontext failed");
}

void co_idle(mesh_async *q) {
    q->pend = NULL, q->npend = 0;
    yield(q);
}

void co_wait(mesh_async *q, const mesh_req *r) {
    while (!r->done) {
        co_resume(q);
        if (r->done) break;
        CHECK(q->npend > 0, "non-blocking call stalled with nothing in flight");
        nap_waitany(q->npend, q->pend);
    }
}

int co_active(const mesh_async *q) {
    return q && !q->thread && (q->inside || q->npend > 0);
}

/* The engine's wait (coll_engine.c) and p2p.c's where co_active. On the coroutine: test, and
 * hand the thread back to the caller while nothing has completed. On the caller: wait over the
 * caller's requests and the coroutine's at once; resume the coroutine when one of its own
 * completed; return when one of the caller's did. With no call in flight, one completion per
 * wait (MPI_Waitany): SimGrid 3.32's MPI_Waitsome collects the others by test in a way that
 * leaves them in the simulated rank's list of activities, scanned at every later completion (CPU
 * quadratic in a run's messages). With calls in flight Testsome and Waitsome stay: one
 * completion per switch to the coroutine took twice the CPU (LLaMA-3-70B, 16 layers, 2x2x2). */
void co_waitsome(mesh_async *q, int n, MPI_Request *rq, int *outc, int *idx) {
    if (q && q->inside) {
        MPI_Testsome(n, rq, outc, idx, MPI_STATUSES_IGNORE);
        if (*outc != 0) return;
        q->pend = rq, q->npend = n;
        yield(q);
        *outc = 0; /* resumed: the caller may have completed some of rq (set to NULL); re-scan */
        return;
    }
    int live = 0;
    for (int i = 0; i < n; i++) live |= rq[i] != MPI_REQUEST_NULL;
    if (!live) { /* nothing of the caller's in flight: MPI_Waitsome's answer */
        *outc = MPI_UNDEFINED;
        return;
    }
    for (;;) {
        if (!q || q->npend == 0) {
            idx[0] = nap_waitany(n, rq);
            *outc = idx[0] == MPI_UNDEFINED ? MPI_UNDEFINED : 1;
            return;
        }
        const int tot = n + q->npend;
        if (q->cap < tot) {
            free(q->all), free(q->idx);
            q->all = malloc((size_t)tot * sizeof *q->all);
            q->idx = malloc((size_t)tot * sizeof *q->idx);
            CHECK(q->all && q->idx, "out of memory");
            q->cap = tot;
        }
        memcpy(q->all, rq, (size_t)n * sizeof *rq);
        memcpy(q->all + n, q->pend, (size_t)q->npend * sizeof *rq);
        const int oc = nap_block(tot, q->all, q->idx);
        memcpy(rq, q->all, (size_t)n * sizeof *rq); /* completed ones are MPI_REQUEST_NULL */
        memcpy(q->pend, q->all + n, (size_t)q->npend * sizeof *rq);
        if (oc == MPI_UNDEFINED) {
            *outc = MPI_UNDEFINED;
            return;
        }
        int own = 0, co = 0;
        for (int k = 0; k < oc; k++)
            if (q->idx[k] < n)
                idx[own++] = q->idx[k];
            else
                co = 1;
        if (co) co_resume(q);
        if (own) {
            *outc = own;
            return;
        }
    }
}

void co_destroy(mesh_async *q) {
    if (q->stack) munmap(q->stack, CO_STACK);
    free(q->all), free(q->idx);
    q->stack = NULL, q->all = NULL, q->idx = NULL, q->cap = 0;
}
