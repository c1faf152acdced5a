/* cmatmul: the collective matmuls (see cmatmul.h). Buffers of one step: c = M·N/n floats. */
#include "train/parallel/cmatmul.h"

#include "kernels/optim.h"
#include "mesh/coll.h"

int64_t cmm_scratch(int64_t M, int64_t N, int64_t n) {
    return 6 * M * (N / n);
}

static int64_t ring_mod(int64_t a, int64_t n) {
    return ((a % n) + n) % n;
}

/* A ring step: c floats of in to the neighbour at shift (+1: coord+1), out from the other one,
 * in wire format w. */
static mesh_req *step(mesh *m, int axis, mesh_wire w, int shift, float *out, const float *in,
                      int64_t c) {
    const mesh_coll_call call = {
        MESH_OP_PPERMUTE, {1, {axis, 0, 0}}, shift, c, MESH_ALG_DEFAULT, w};
    return mesh_coll_start(m, &call, out, in);
}

/* The exchange of an axis of 2: this rank's c floats to the other, whose arrive in
 * both[(1 − i)·c ...] (an AllGather: both[i·c ...] receives a copy of the rank's own). */
static mesh_req *exchange(mesh *m, int axis, mesh_wire w, float *both, const float *mine,
                          int64_t c) {
    const mesh_coll_call call = {MESH_OP_ALL_GATHER, {1, {axis, 0, 0}}, 0, c, MESH_ALG_DEFAULT, w};
    return mesh_coll_start(m, &call, both, mine);
}

/* One direction of a line's stream: three buffers rotate as in the ring (snd on the wire, rcv
 * arriving, cmp being computed). */
typedef struct {
    float *snd, *rcv, *cmp;
    mesh_req *req;
} stream;

static void stream_send(mesh *m, int axis, mesh_wire w, int shift, stream *st, int64_t c) {
    float *sent = st->cmp;
    st->req = step(m, axis, w, shift, st->snd, sent, c); /* arrives in the old snd */
    st->cmp = st->rcv, st->rcv = st->snd, st->snd = sent;
}

/* The matmul-ReduceScatter on an open axis (a line, no ring): block b's partial sum is built from
 * both ends, ranks 0 .. b−1 in a stream to the right and ranks n−1 .. b+1 in one to the left,
 * the farthest blocks first, so that every sum arrives at its rank after the n−2th step. At step
 * s rank i passes on the rightward sum of block n−1−s+i (if i <= s) and the leftward one of block
 * s+i−n+1 (if i >= n−1−s), each its own product added to the sum that arrived (ranks with
 * nothing to pass on send what they hold, which the receiver ignores). Ends with
 * out = this rank's product + the sum from the left + the sum from the right. */
static void rs_line(mesh *m, int axis, mesh_wire w, float *out, cmm_product_fn fn, void *ctx,
                    int64_t M, int64_t N, float *scratch) {
    const int64_t n = mesh_axis_size(m, axis), i = mesh_axis_coord(m, axis);
    const int64_t nl = N / n, c = M * nl;
    stream r = {scratch, scratch + c, scratch + 2 * c, NULL};
    stream l = {scratch + 3 * c, scratch + 4 * c, scratch + 5 * c, NULL};
    for (int64_t s = 0; s <= n - 2; s++) {
        const int right = i <= s, left = i >= n - 1 - s;
        if (right) fn(ctx, r.cmp, n - 1 - s + i, n);
        if (left) fn(ctx, l.cmp, s + i - n + 1, n);
        if (s > 0) {
            mesh_wait(r.req), mesh_wait(l.req);
            if (right && i >= 1) kern_add(r.cmp, r.rcv, c);
            if (left && i <= n - 2) kern_add(l.cmp, l.rcv, c);
        }
        stream_send(m, axis, w, 1, &r, c);
        stream_send(m, axis, w, -1, &l, c);
    }
    fn(ctx, out, i, n);
    mesh_wait(r.req), mesh_wait(l.req);
    if (i >= 1) kern_add(out, r.rcv, c);
    if (i <= n - 2) kern_add(out, l.rcv, c);
}

void cmm_matmul_reduce_scatter(mesh *m, int axis, mesh_wire w, float *out, cmm_product_fn fn,
                               void *ctx, int64_t M, int64_t N, float *scratch) {
    const int64_t n = mesh_axis_size(m, axis), i = mesh_axis_coord(m, axis);
    const int64_t nl = N / n, c = M * nl;
    CHECK(N % n == 0, "matmul-ReduceScatter: N = %lld over %lld ranks of axis %c", (long long)N,
          (long long)n, mesh_axis_name(m, axis));
    if (n == 1) {
        fn(ctx, out, 0, 1);
        return;
    }
    if (n == 2) { /* the other's block first, on the wire while this rank's own is computed */
        float *mine = scratch, *both = scratch + c;
        fn(ctx, mine, 1 - i, 2);
        mesh_req *r = exchange(m, axis, w, both, mine, c);
        fn(ctx, out, i, 2);
        mesh_wait(r);
        kern_add(out, both + (1 - i) * c, c);
        return;
    }
    if (!mesh_axis_wraps(m, axis)) {
        rs_line(m, axis, w, out, fn, ctx, M, N, scratch);
        return;
    }
    /* three buffers rotate: the sum on the wire, the one arriving, the product being computed */
    float *snd = scratch, *rcv = scratch + c, *cmp = scratch + 2 * c;
    fn(ctx, snd, ring_mod(i - 1, n), n);
    mesh_req *r = step(m, axis, w, 1, rcv, snd, c);
    for (int64_t s = 1; s < n; s++) {
        float *dst = s == n - 1 ? out : cmp;
        fn(ctx, dst, ring_mod(i - 1 - s, n), n);
        mesh_wait(r);
        kern_add(dst, rcv, c); /* block i−1−s: the sum of ranks i−s .. i−1, then this rank's */
        if (s == n - 1) break;
        float *free_buf = snd;
        r = step(m, axis, w, 1, free_buf, dst, c);
        snd = dst, cmp = rcv, rcv = free_buf;
    }
}

/* The AllGather on an open axis (a line): every block travels both ways, the rank's own first; at
 * step s rank i receives block i−s from the left and block i+s from the right (where they exist:
 * the others are what the neighbour held, ignored) and passes each on at once. */
static void gather_line(mesh *m, int axis, mesh_wire w, const float *xi, int64_t c, float *scratch,
                        cmm_block_fn fn, void *ctx) {
    const int64_t n = mesh_axis_size(m, axis), i = mesh_axis_coord(m, axis);
    float *from_l[2] = {scratch, scratch + c}, *from_r[2] = {scratch + 2 * c, scratch + 3 * c};
    mesh_req *rr = step(m, axis, w, 1, from_l[0], xi, c);
    mesh_req *rl = step(m, axis, w, -1, from_r[0], xi, c);
    fn(ctx, xi, i, 1);
    for (int64_t s = 1; s < n; s++) {
        mesh_wait(rr), mesh_wait(rl);
        const float *hl = from_l[(s - 1) % 2], *hr = from_r[(s - 1) % 2];
        rr = rl = NULL;
        if (s < n - 1) {
            rr = step(m, axis, w, 1, from_l[s % 2], hl, c);
            rl = step(m, axis, w, -1, from_r[s % 2], hr, c);
        }
        if (i - s >= 0) fn(ctx, hl, i - s, 0);
        if (i + s < n) fn(ctx, hr, i + s, 0);
    }
}

void cmm_gather_blocks(mesh *m, int axis, mesh_wire w, const float *xi, int64_t c, float *scratch,
                       cmm_block_fn fn, void *ctx) {
    const int64_t n = mesh_axis_size(m, axis), i = mesh_axis_coord(m, axis);
    if (n == 1) {
        fn(ctx, xi, 0, 1);
        return;
    }
    if (n == 2) {
        mesh_req *r = exchange(m, axis, w, scratch, xi, c);
        fn(ctx, xi, i, 1);
        mesh_wait(r);
        fn(ctx, scratch + (1 - i) * c, 1 - i, 0);
        return;
    }
    if (!mesh_axis_wraps(m, axis)) {
        gather_line(m, axis, w, xi, c, scratch, fn, ctx);
        return;
    }
    /* at step s this rank holds block i−s: received into buf[(s−1) % 2], passed on at once */
    float *buf[2] = {scratch, scratch + c};
    mesh_req *r = step(m, axis, w, 1, buf[0], xi, c);
    fn(ctx, xi, i, 1);
    for (int64_t s = 1; s < n; s++) {
        mesh_wait(r);
        const float *held = buf[(s - 1) % 2];
        r = s < n - 1 ? step(m, axis, w, 1, buf[s % 2], held, c) : NULL;
        fn(ctx, held, ring_mod(i - s, n), 0);
    }
}
