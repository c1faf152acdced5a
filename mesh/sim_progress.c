/* sim_progress: the SMPI build's simulated compute, which lets the non-blocking collectives in
 * flight progress, and its "no data" switch (mesh.h: mesh_set_no_data). Built only with
 * MESHTRAIN_SMPI (mesh/CMakeLists.txt); the queue runs on the coroutine of co_progress.c (see
 * async_impl.h).
 *
 * mesh_sim_compute charges its FLOPs in slices of `poll` seconds (mesh_sim_set_poll) while a
 * call is in flight, resuming the coroutine between slices. SimGrid moves the messages in flight
 * meanwhile, so a collective overlaps the caller's compute in simulated time. The messages, their
 * order and the arithmetic are the progress thread's, so results are bit-identical; the only
 * difference in time is that a step whose receive completes during a slice of compute is noticed
 * at the slice's end (at most `poll` later). */
#include <simgrid/host.h>

#include "mesh/async_impl.h"
#include "mesh/parts.h"
#include "mesh/progress.h"

static int64_t no_data_min; /* 0: off (SMPI privatises it per simulated rank) */

/* SMPI's own payload copy (simgrid 3.32 declares it in C++ only: its mangled name). */
void mesh_smpi_copy_payload(smx_activity_t comm, void *buf, size_t bytes) __asm__(
    "_Z30smpi_comm_copy_buffer_callbackPN7simgrid6kernel8activity8CommImplEPvm");

/* When a simulated message arrives, SMPI copies its payload into the receive buffer (unless one
 * side is one of its shared blocks): "no data" copies the small ones only, so that the big
 * buffers, lazily allocated and never touched, cost neither memory nor time. */
static void no_data_copy(smx_activity_t comm, void *buf, size_t bytes) {
    if (!mesh_no_data((int64_t)bytes)) mesh_smpi_copy_payload(comm, buf, bytes);
}

void mesh_set_no_data(int64_t min_bytes) {
    no_data_min = min_bytes > 0 ? min_bytes : 0;
    if (no_data_min) smpi_comm_set_copy_data_callback(no_data_copy);
}
int mesh_no_data(int64_t bytes) {
    return no_data_min > 0 && bytes >= no_data_min;
}

static double g_poll = 10e-6; /* seconds of compute between polls (privatised per rank) */

void mesh_sim_set_poll(double seconds) {
    CHECK(seconds > 0, "the simulated compute's poll interval must be > 0, got %g", seconds);
    g_poll = seconds;
}

void mesh_sim_compute(double flops) {
    mesh *m = mesh_current();
    mesh_async *q = m ? mesh_part_queue(m)->q : NULL;
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
