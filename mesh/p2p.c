/* p2p: point-to-point messages between neighbours along one axis (pipeline stages), on a
 * communicator of their own so they never mix with collectives. A message is a small header (the
 * emulated delivery time, 0 when the axis is not emulated) followed by the data; the receiver
 * treats the data as arrived no sooner than that time. */
#include <stdlib.h>

#include "mesh/mesh_impl.h"
#include "mesh/progress.h"

#define P2P_TAG_HDR 101
#define P2P_TAG_DATA 102

struct mesh_p2p {
    mesh *m;
    int recv, axis, dir;
    MPI_Request req[2];
    double hdr;
    mesh_call rec;
};

static int peer(const mesh *m, int axis, int dir) {
    const int n = m->size[axis], c = m->coord[axis] + dir;
    if (c >= 0 && c < n) return c;
    CHECK(m->wrap[axis], "p2p along axis %c past its open end", m->name[axis]);
    return (c + n) % n;
}

static mesh_p2p *start(mesh *m, int recv, int axis, int dir, float *buf, int64_t count) {
    CHECK(axis >= 0 && axis < m->ndims && (dir == 1 || dir == -1), "bad p2p axis/dir");
    CHECK(count >= 0 && count <= 0x7fffffff, "p2p count %lld does not fit an MPI int",
          (long long)count);
    mesh_p2p *r = calloc(1, sizeof *r);
    CHECK(r != NULL, "out of memory");
    r->m = m, r->recv = recv, r->axis = axis, r->dir = dir;
    coll_args x = {.op = recv ? MESH_OP_RECV : MESH_OP_SEND, .axis = axis, .count = count};
    coll_record_begin(m, &x, &r->rec);
    r->rec.axes.n = 1, r->rec.axes.ax[0] = axis;
    r->rec.t_start = r->rec.t_issue;
    r->rec.shift = dir;
    MPI_Comm comm = m->p2p[axis];
    const int p = peer(m, axis, dir);
    if (recv) {
        MPI_Irecv(&r->hdr, 1, MPI_DOUBLE, p, P2P_TAG_HDR, comm, &r->req[0]);
        MPI_Irecv(buf, (int)count, MPI_FLOAT, p, P2P_TAG_DATA, comm, &r->req[1]);
    } else {
        const int64_t bytes = count * (int64_t)sizeof(float);
        r->hdr = links_book(&m->links, axis, dir > 0 ? 0 : 1, bytes, 1);
        r->rec.link_bytes[axis][dir > 0 ? 0 : 1] = bytes;
        MPI_Isend(&r->hdr, 1, MPI_DOUBLE, p, P2P_TAG_HDR, comm, &r->req[0]);
        MPI_Isend(buf, (int)count, MPI_FLOAT, p, P2P_TAG_DATA, comm, &r->req[1]);
    }
    return r;
}

mesh_p2p *mesh_isend(mesh *m, int axis, int dir, const float *buf, int64_t count) {
    return start(m, 0, axis, dir, (float *)buf, count);
}

mesh_p2p *mesh_irecv(mesh *m, int axis, int dir, float *buf, int64_t count) {
    return start(m, 1, axis, dir, buf, count);
}

void mesh_p2p_wait(mesh_p2p *r) {
    if (!r) return;
    const double t0 = mesh_now(), c0 = mesh_thread_cpu();
    where_enter(r->m, 0, WHERE_P2P, &r->rec);
    int idx[2];
    progress_waitall(r->m->async, 2, r->req, idx); /* naps, or serves the coroutine (progress.h) */
    if (r->recv && r->hdr > 0) link_sleep_until(r->hdr);
    where_leave(r->m, 0);
    r->rec.t_end = mesh_now();
    /* the caller was blocked from the wait's start (a receive posted early is not idle) */
    r->rec.t_issue = t0;
    r->rec.cpu_issue = c0;
    coll_record_end(r->m, &r->rec);
    free(r);
}

void mesh_recv(mesh *m, int axis, int dir, float *buf, int64_t count) {
    mesh_p2p_wait(mesh_irecv(m, axis, dir, buf, count));
}
