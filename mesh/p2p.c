/* p2p: point-to-point messages between neighbours along one axis (pipeline stages), on a
 * communicator of their own so they never mix with collectives. A message is a small header (the
 * emulated delivery time, 0 when the axis is not emulated) followed by the data; the receiver
 * treats the data as arrived no sooner than that time. */
#include <stdlib.h>

#include "mesh/activity.h"
#include "mesh/comms.h"
#include "mesh/links.h"
#include "mesh/parts.h"
#include "mesh/progress.h"
#include "mesh/stats.h"
#include "mesh/topo.h"

#define P2P_TAG_HDR 101  /* channel c: 101 + 2c */
#define P2P_TAG_DATA 102 /* channel c: 102 + 2c */

struct mesh_p2p {
    mesh *m;
    int recv, axis, dir;
    MPI_Request req[2];
    double hdr;
    mesh_call rec;
};

static int peer(const mesh_topo *t, int axis, int dir) {
    const int n = t->size[axis], c = t->coord[axis] + dir;
    if (c >= 0 && c < n) return c;
    CHECK(t->wrap[axis], "p2p along axis %c past its open end", t->name[axis]);
    return (c + n) % n;
}

static mesh_p2p *start(mesh *m, int recv, int axis, int dir, int ch, float *buf, int64_t count) {
    const mesh_topo *t = mesh_part_topo(m);
    CHECK(axis >= 0 && axis < t->ndims && (dir == 1 || dir == -1) && ch >= 0 &&
              ch < MESH_P2P_CHANNELS,
          "bad p2p axis/dir/channel");
    CHECK(count >= 0 && count <= 0x7fffffff, "p2p count %lld does not fit an MPI int",
          (long long)count);
    mesh_p2p *r = calloc(1, sizeof *r);
    CHECK(r != NULL, "out of memory");
    r->m = m, r->recv = recv, r->axis = axis, r->dir = dir;
    const mesh_axes one = {1, {axis, 0, 0}};
    stats_issue(mesh_part_stats(m), &r->rec, recv ? MESH_OP_RECV : MESH_OP_SEND, one, count, dir);
    r->rec.t_start = r->rec.t_issue;
    MPI_Comm comm = mesh_part_p2p(m)->axis[axis];
    const int p = peer(t, axis, dir);
    if (recv) {
        MPI_Irecv(&r->hdr, 1, MPI_DOUBLE, p, P2P_TAG_HDR + 2 * ch, comm, &r->req[0]);
        MPI_Irecv(buf, (int)count, MPI_FLOAT, p, P2P_TAG_DATA + 2 * ch, comm, &r->req[1]);
    } else {
        const int64_t bytes = count * (int64_t)sizeof(float);
        r->hdr = links_book(mesh_part_links(m), axis, dir > 0 ? 0 : 1, bytes, 1);
        r->rec.link_bytes[axis][dir > 0 ? 0 : 1] = bytes;
        MPI_Isend(&r->hdr, 1, MPI_DOUBLE, p, P2P_TAG_HDR + 2 * ch, comm, &r->req[0]);
        MPI_Isend(buf, (int)count, MPI_FLOAT, p, P2P_TAG_DATA + 2 * ch, comm, &r->req[1]);
    }
    return r;
}

mesh_p2p *mesh_isend(mesh *m, int axis, int dir, const float *buf, int64_t count) {
    return start(m, 0, axis, dir, 0, (float *)buf, count);
}

mesh_p2p *mesh_irecv(mesh *m, int axis, int dir, float *buf, int64_t count) {
    return start(m, 1, axis, dir, 0, buf, count);
}

mesh_p2p *mesh_isend_on(mesh *m, int axis, int dir, int ch, const float *buf, int64_t count) {
    return start(m, 0, axis, dir, ch, (float *)buf, count);
}

void mesh_recv_on(mesh *m, int axis, int dir, int ch, float *buf, int64_t count) {
    mesh_p2p_wait(start(m, 1, axis, dir, ch, buf, count));
}

void mesh_p2p_wait(mesh_p2p *r) {
    if (!r) return;
    const double t0 = mesh_now(), c0 = mesh_thread_cpu();
    act_slot *slot = &mesh_part_activity(r->m)->slot[0];
    act_enter(slot, ACT_P2P, &r->rec);
    int idx[2];
    progress_waitall(mesh_part_queue(r->m)->q, 2, r->req, idx); /* naps, or serves the coroutine */
    if (r->recv && r->hdr > 0) link_sleep_until(r->hdr);
    act_leave(slot);
    r->rec.t_end = mesh_now();
    /* the caller was blocked from the wait's start (a receive posted early is not idle) */
    r->rec.t_issue = t0;
    r->rec.cpu_issue = c0;
    stats_complete(mesh_part_stats(r->m), &r->rec);
    free(r);
}

void mesh_recv(mesh *m, int axis, int dir, float *buf, int64_t count) {
    mesh_p2p_wait(mesh_irecv(m, axis, dir, buf, count));
}
