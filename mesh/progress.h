/* progress: how a call waits while none of its messages can move on, as a small table of
 * waiters. The engine (coll_engine.c), DIRECT's rounds (coll_direct.c) and the point-to-point
 * waits (p2p.c) call it; the row is picked, at each wait, by where the call runs and over which
 * links:
 *   coroutine  the inline mode (mesh_set_progress) while the queue's coroutine has messages in
 *              flight or runs this call, and always in the SMPI build: on the coroutine, hands
 *              the thread back to the caller; on the caller, waits for its own requests and the
 *              coroutine's at once (co_progress.c), blocking in MPI under SMPI (simulated time)
 *   emulated   only emulated links take part: polls, then naps doubling from 2 µs up to a
 *              quarter of the shortest hop latency (on the progress thread: at least 50 µs),
 *              never past the next emulated delivery; a message is delivered at least one hop
 *              latency after it was sent and the real transfer is far faster, so it is noticed
 *              before it is due and a transfer in flight costs no CPU
 *   thread     the progress thread on real links: naps from 100 µs up to 1 ms while its caller
 *              computes (at most ~2% of a core, no wake-up stealing the compute's core), and on
 *              the schedule of nap.h while a caller waits for it in mesh_wait, whose start cuts
 *              a nap short
 *   caller     a blocking call on real links: nap.h's schedule (50 µs of polling, or
 *              mesh_set_spin's, then naps)
 * Private to mesh/. Depends on nap.h and on the queue (async_impl.h) for the thread's naps and
 * the coroutine. */
#ifndef MT_MESH_PROGRESS_H
#define MT_MESH_PROGRESS_H
#include "mesh/mesh_mpi.h"
#include "mesh/nap.h"

typedef struct mesh_async mesh_async;

/* A mesh's handle of its queue of non-blocking calls (coll_async.c): the queue, made at the first
 * non-blocking call, and who runs it (mesh_set_progress). */
typedef struct mesh_queue mesh_queue;
struct mesh_queue {
    mesh_async *q;   /* NULL: none yet */
    int inline_mode; /* MESH_PROGRESS_INLINE: a coroutine of the caller's thread runs it */
};

/* The waits of one call. */
typedef struct {
    mesh_async *q; /* the mesh's queue of non-blocking calls (NULL: none made yet) */
    int on_thread; /* the call runs on the progress thread */
    double emul;   /* the shortest hop latency of its emulated links / 4, at most 2 ms (0: none) */
    int real;      /* a real (not emulated) link takes part */
    nap_state nap;
} progress_wait;

/* The waits of a call over links as described by emul and real, run by the progress thread
 * (on_thread) or by the caller. */
void progress_wait_init(progress_wait *w, mesh_async *q, int on_thread, double emul, int real);
/* Something moved on: the next wait starts a new idle stretch. */
static inline void progress_moved(progress_wait *w) {
    nap_reset(&w->nap);
}
/* None of rq[0..n) can move the call on: one wait of the row for the call's situation. Returns
 * MPI_Testsome's outc (indices in idx): > 0 when some completed, 0 when it woke up without (a
 * nap or a spin ended), MPI_UNDEFINED when none is in flight and nothing is due; never sleeps
 * past `wake` (an emulated delivery, mesh_now() time; 0: none). */
int progress_waitsome(progress_wait *w, int n, MPI_Request *rq, int *idx, double wake);
/* MPI_Waitsome on the caller's thread: blocks until some of rq[0..n) complete and returns how
 * many (indices in idx; MPI_UNDEFINED: none in flight), serving the coroutine meanwhile where
 * the coroutine row applies, on nap.h's schedule otherwise. */
int progress_block(mesh_async *q, int n, MPI_Request *rq, int *idx);
/* Blocks until every request of rq[0..n) has completed, as progress_block (idx: n ints). */
void progress_waitall(mesh_async *q, int n, MPI_Request *rq, int *idx);
#endif
