/* sim_progress: the non-blocking collectives of the SMPI build, progressing in simulated time.
 * Built only with MESHTRAIN_SMPI (mesh/CMakeLists.txt); see async_impl.h.
 *
 * A simulated rank is one SimGrid actor, and only it may call MPI, so the queue of non-blocking
 * calls cannot run on a thread. It runs on a coroutine (ucontext) of the same actor instead,
 * with the progress thread's code: coll_execute on ctx[1], in issue order. Where the engine would
 * block (nothing ready, messages in flight) the coroutine returns to the caller, publishing the
 * requests it waits for; the caller resumes it when one of them may have completed:
 *  - at issue (its first sends and receives are posted at once), and in mesh_test;
 *  - in mesh_wait, which blocks in MPI_Waitany over those requests between resumptions;
 *  - in a blocking collective's wait (the engine on ctx[0]) and a point-to-point wait (p2p.c),
 *    which wait over their own requests and the coroutine's at once, so neither stalls the other;
 *  - in mesh_sim_compute, the simulated compute of the dry run: it charges its FLOPs in slices of
 *    `poll` seconds (mesh_sim_set_poll) while a call is in flight, resuming the coroutine
 *    between slices.
 * SimGrid moves the messages in flight meanwhile, so a collective overlaps the caller's compute
 * in simulated time. The messages, their order and the arithmetic are the progress thread's, so
 * results are bit-identical; the only difference in time is that a step whose receive completes
 * during a slice of compute is noticed at the slice's end (at most `poll` later). */
#include <simgrid/host.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mesh/async_impl.h"

#define SIM_STACK (1 << 20) /* the coroutine's stack (mapped, untouched pages cost nothing) */

/* SMPI privatises these per simulated rank. */
static mesh *g_mesh;            /* the mesh of the rank's latest non-blocking call */
static void (*g_serve)(mesh *); /* its coroutine's body (coll_async.c) */
static double g_poll = 10e-6;   /* seconds of compute between polls */
static mesh *g_boot;            /* the mesh whose coroutine is starting */

static void co_entry(void) {
    mesh *m = g_boot;
    g_serve(m); /* never returns: it idles in sim_idle between calls */
}

static void co_make(mesh *m, void (*serve)(mesh *)) {
    mesh_async *q = m->async;
    q->stack = mmap(NULL, SIM_STACK, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(q->stack != MAP_FAILED, "cannot map the non-blocking calls' coroutine stack");
    CHECK(getcontext(&q->co_uc) == 0, "getcontext failed");
    q->co_uc.uc_stack.ss_sp = q->stack;
    q->co_uc.uc_stack.ss_size = SIM_STACK;
    q->co_uc.uc_link = NULL;
    makecontext(&q->co_uc, co_entry, 0);
    g_serve = serve;
}

void sim_resume(mesh *m, void (*serve)(mesh *)) {
    mesh_async *q = m->async;
    CHECK(!q->inside, "the non-blocking calls' coroutine resumed from itself");
    g_mesh = m;
    if (!q->stack) co_make(m, serve);
    g_boot = m;
    q->inside = 1;
    CHECK(swapcontext(&q->caller_uc, &q->co_uc) == 0, "swapcontext failed");
}

static void yield(mesh_async *q) {
    q->inside = 0;
    CHECK(swapcontext(&q->co_uc, &q->caller_uc) == 0, "swapcontext failed");
}

void sim_idle(mesh *m) {
    mesh_async *q = m->async;
    q->pend = NULL, q->npend = 0;
    yield(q);
}

void sim_wait(mesh *m, void (*serve)(mesh *), const mesh_req *r) {
    mesh_async *q = m->async;
    while (!r->done) {
        sim_resume(m, serve);
        if (r->done) break;
        int i;
        CHECK(q->npend > 0, "non-blocking call stalled with nothing in flight");
        MPI_Waitany(q->npend, q->pend, &i, MPI_STATUS_IGNORE);
    }
}

/* The engine's wait (coll_engine.c) and p2p.c's in the SMPI build. On the coroutine: test, and
 * hand the rank back to the caller while nothing has completed. On the caller: wait over the
 * caller's requests and the coroutine's at once; resume the coroutine when one of its own
 * completed; return when one of the caller's did. With no call in flight, one completion per
 * wait (MPI_Waitany): SimGrid 3.32's MPI_Waitsome collects the others by test in a way that
 * leaves them in the simulated rank's list of activities, scanned at every later completion (CPU
 * quadratic in a run's messages). With calls in flight Testsome and Waitsome stay: one
 * completion per switch to the coroutine took twice the CPU (LLaMA-3-70B, 16 layers, 2x2x2). */
void sim_waitsome(mesh *m, int n, MPI_Request *rq, int *outc, int *idx) {
    mesh_async *q = m->async;
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
            MPI_Waitany(n, rq, idx, MPI_STATUS_IGNORE);
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
        int oc;
        MPI_Waitsome(tot, q->all, &oc, q->idx, MPI_STATUSES_IGNORE);
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
        if (co) sim_resume(m, g_serve);
        if (own) {
            *outc = own;
            return;
        }
    }
}

void sim_destroy(mesh *m) {
    mesh_async *q = m->async;
    if (q->stack) munmap(q->stack, SIM_STACK);
    free(q->all), free(q->idx);
    q->stack = NULL, q->all = NULL, q->idx = NULL, q->cap = 0;
    if (g_mesh == m) g_mesh = NULL;
}

void mesh_sim_set_poll(double seconds) {
    CHECK(seconds > 0, "the simulated compute's poll interval must be > 0, got %g", seconds);
    g_poll = seconds;
}

void mesh_sim_compute(double flops) {
    mesh *m = g_mesh;
    mesh_async *q = m ? m->async : NULL;
    if (!q || !q->head) {
        smpi_execute_flops(flops);
        return;
    }
    const double slice = g_poll * sg_host_get_speed(sg_host_self());
    while (flops > 0) {
        if (!q->head) { /* the queue ran dry: the rest in one piece */
            smpi_execute_flops(flops);
            return;
        }
        const double f = flops < 1.5 * slice ? flops : slice;
        smpi_execute_flops(f);
        flops -= f;
        sim_resume(m, g_serve);
    }
}
