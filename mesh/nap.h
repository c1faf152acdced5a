/* nap: how a wait inside mesh/ sleeps instead of spinning. Open MPI's blocking waits spin, so a
 * rank blocked on a stopped or far-behind peer would hold a core for as long as it waits; the
 * waits of mesh/ on real cores poll MPI and nap between polls instead, on the schedule below, and
 * count their naps (mesh_naps). The SMPI build's waits block in MPI, in simulated time.
 *
 * The schedule of one idle stretch (polls that find nothing): first mesh_get_spin() (NAP_SPIN
 * unless mesh_set_spin said otherwise) of polling without sleeping (a message from a peer that is
 * already there arrives within a few µs: the fast path stays as fast), yielding the core between
 * polls (sched_yield: a peer that shares the core, on an oversubscribed or loaded machine, runs
 * meanwhile; alone, it returns at once), then naps doubling from NAP_FIRST up to the larger of
 * NAP_WAITED and NAP_SHARE of the time idle so far, at most NAP_MAX. A nap costs ~20 µs of CPU on
 * a virtual machine (the timer and the wake-up), so a wait on a stopped peer costs about 2% of a
 * core, and a late message is noticed at most 2% of the wait (or 50 µs) after it arrives.
 * Where every rank of the host has a core of its own (mesh_spin_auto), the spin is
 * NAP_SPIN_OWN_CORE: a nap there frees a core no one needs and costs a wake-up (the timer's 50 µs
 * slack, and on a virtual machine a halted vCPU that the host may have given away) on each wait,
 * dozens a step under tensor parallelism; MPI's and NCCL's own waits spin for that reason.
 * Private to mesh/. Depends on MPI and the clock only (no mesh): tested alone. */
#ifndef MT_MESH_NAP_H
#define MT_MESH_NAP_H
#include "mesh/mesh_mpi.h"

#define NAP_SPIN 50e-6   /* polling (and yielding) at the start of an idle stretch */
#define NAP_SPIN_OWN_CORE 20e-3 /* the same where each rank has a core of its own */
#define NAP_FIRST 2e-6   /* the first nap */
#define NAP_WAITED 50e-6 /* the longest nap for the first 2.5 ms of waiting */
#define NAP_SHARE 0.02   /* then up to this share of the time idle */
#define NAP_MAX 1e-3     /* and never longer */

/* One idle stretch of a wait. All zero: not idle. */
typedef struct {
    double idle0; /* mesh_now() when the polls started finding nothing (0: not idle) */
    double nap;   /* the latest nap (0: none yet) */
} nap_state;

/* Something arrived: the next wait starts a new idle stretch. */
static inline void nap_reset(nap_state *s) {
    s->idle0 = s->nap = 0;
}
/* The next nap of stretch s: the latest doubled, at least `first`, at most `cap`. */
double nap_next(nap_state *s, double first, double cap);
/* The longest nap of a waiting caller after `idle` seconds of finding nothing (the schedule
 * above: NAP_WAITED, or NAP_SHARE of idle, at most NAP_MAX). */
double nap_waited_cap(double idle);
/* Sleeps until mesh_now() >= t, counted in mesh_naps. */
void nap_until(double t);
/* Counts a nap taken otherwise (the progress thread's, on a condition variable). */
void nap_count(void);

/* One wait of the caller's thread over rq[0..n) on real cores. Returns MPI_Testsome's outc (idx
 * as its indices): > 0 when some completed, MPI_UNDEFINED when none is in flight, 0 after one
 * step of the schedule found nothing: at the start of an idle stretch, polls for
 * mesh_get_spin(); after that, one nap, never past `wake` (mesh_now() time, 0: none), such as an
 * emulated delivery. */
int nap_waitsome(nap_state *s, int n, MPI_Request *rq, int *idx, double wake);
/* MPI_Waitsome on the schedule: blocks until some of rq[0..n) complete; returns how many (their
 * indices in idx), or MPI_UNDEFINED when none is in flight. The SMPI build: MPI_Waitsome. */
int nap_block(int n, MPI_Request *rq, int *idx);
/* MPI_Waitany on the schedule: returns the index of the one completed (MPI_UNDEFINED: none in
 * flight). The SMPI build: MPI_Waitany. */
int nap_waitany(int n, MPI_Request *rq);
/* MPI_Waitall on the schedule (the SMPI build: MPI_Waitall). */
void nap_waitall(int n, MPI_Request *rq);
#endif
