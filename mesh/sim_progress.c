/* sim_progress: the SMPI build's simulated compute, which lets the non-blocking collectives in
 * flight progress. Built only with MESHTRAIN_SMPI (mesh/CMakeLists.txt); the queue runs on the
 * coroutine of co_progress.c (see async_impl.h).
 *
 * mesh_sim_compute charges its FLOPs in slices of `poll` seconds (mesh_sim_set_poll) while a
 * call is in flight, resuming the coroutine between slices. SimGrid moves the messages in flight
 * meanwhile, so a collective overlaps the caller's compute in simulated time. The messages, their
 * order and the arithmetic are the progress thread's, so results are bit-identical; the only
 * difference in time is that a step whose receive completes during a slice of compute is noticed
 * at the slice's end (at most `poll` later). */
#include <simgrid/host.h>

#include "mesh/async_impl.h"

static double g_poll = 10e-6; /* seconds of compute between polls (privatised per rank) */

void mesh_sim_set_poll(double seconds) {
    CHECK(seconds > 0, "the simulated compute's poll interval must be > 0, got %g", seconds);
    g_poll = seconds;
}

void mesh_sim_compute(double flops) {
    mesh_async *q = co_latest();
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
        co_resume(q);
    }
}
