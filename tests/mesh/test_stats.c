/* test_stats: the accounting and trace part alone (mesh/stats.h, private to mesh/): no mesh, no
 * MPI. Calls are issued and completed by hand, with bytes and times chosen so every sum is exact:
 *  - numbering: seq counts every call; set_seq counts collectives per axis set (send and recv
 *    get none);
 *  - totals by op, over every axis set and by major axis: calls, bytes (both directions of every
 *    axis), seconds, idle polls; the caller's wait counted for blocking calls at completion and
 *    for non-blocking ones by stats_waited only; reset clears the totals, not the numbering;
 *  - the trace: the newest STATS_TRACE_LEN records, oldest first, from any seq; a call not yet
 *    complete is not in it;
 *  - observers: at most STATS_MAX_HOOKS; done() per completion, waited() per stats_waited, none
 *    after removal. */
#include <stdio.h>

#include "mesh/stats.h"

static int failures;
static int n_done, n_waited;

static void expect_i(const char *what, long long got, long long want) {
    if (got == want) return;
    printf("FAIL %s: %lld, want %lld\n", what, got, want);
    failures++;
}

static void on_done(const mesh_call *rec, void *ctx) {
    (void)rec, (void)ctx;
    n_done++;
}
static void on_waited(const mesh_call *rec, double t0, double t1, void *ctx) {
    (void)rec, (void)t0, (void)t1, (void)ctx;
    n_waited++;
}

/* A call of op over axes, issued, then completed after `secs` with `bytes` on axis ax0's +
 * direction and the same on its − direction; async as given. */
static mesh_call call(mesh_stats_part *s, mesh_op op, mesh_axes a, int64_t bytes, double secs,
                      int async) {
    mesh_call r;
    stats_issue(s, &r, op, a, 10, 0);
    r.async = async;
    r.t_start = r.t_issue = 100;
    r.t_end = 100 + secs;
    r.idle_polls = 3;
    r.link_bytes[a.n ? a.ax[0] : 0][0] = r.link_bytes[a.n ? a.ax[0] : 0][1] = bytes;
    stats_complete(s, &r);
    return r;
}

static void numbering_and_totals(mesh_stats_part *s) {
    const mesh_axes x = {1, {0, 0, 0}}, y = {1, {1, 0, 0}}, xy = {2, {0, 1, 0}};
    const mesh_call a = call(s, MESH_OP_ALL_GATHER, x, 100, 0.5, 0);
    const mesh_call b = call(s, MESH_OP_ALL_GATHER, x, 200, 0.25, 1);
    const mesh_call c = call(s, MESH_OP_ALL_GATHER, y, 400, 0.125, 0);
    const mesh_call d = call(s, MESH_OP_SEND, x, 8, 0, 0);
    const mesh_call e = call(s, MESH_OP_ALL_GATHER, xy, 1000, 1, 0);
    expect_i("seq of the 5th call", e.seq, 4);
    expect_i("set_seq: 2nd call over x", b.set_seq, 1);
    expect_i("set_seq: 1st call over y", c.set_seq, 0);
    expect_i("set_seq: send", d.set_seq, 0);
    expect_i("set_seq: 1st call over xy", e.set_seq, 0);
    (void)a;
    const mesh_stat all = stats_get(s, MESH_OP_ALL_GATHER, -1),
                    onx = stats_get(s, MESH_OP_ALL_GATHER, 0);
    expect_i("AllGather calls", all.calls, 4);
    expect_i("AllGather bytes (both directions)", all.bytes, 2 * (100 + 200 + 400 + 1000));
    expect_i("AllGather seconds x 8", (long long)(8 * all.seconds), 8 * 1.875);
    expect_i("idle polls", all.idle_polls, 12);
    expect_i("major axis x: calls (x, x, xy)", onx.calls, 3);
    expect_i("major axis x: wait seconds x 2 (blocking only: 0.5 + 1)",
             (long long)(2 * onx.wait_seconds), 3);
    stats_waited(s, &b, 10, 10.25, 0);
    expect_i("after stats_waited: x 4",
             (long long)(4 * stats_get(s, MESH_OP_ALL_GATHER, 0).wait_seconds), 7);
    expect_i("send counted apart", stats_get(s, MESH_OP_SEND, -1).calls, 1);
    stats_reset(s);
    expect_i("reset: no calls", stats_get(s, MESH_OP_ALL_GATHER, -1).calls, 0);
    mesh_call f;
    stats_issue(s, &f, MESH_OP_ALL_GATHER, x, 1, 0);
    expect_i("reset keeps the numbering", f.seq, 5);
    expect_i("  and set_seq", f.set_seq, 2);
}

static void trace(mesh_stats_part *s) {
    const mesh_axes x = {1, {0, 0, 0}};
    mesh_call pending;
    stats_issue(s, &pending, MESH_OP_ALL_REDUCE, x, 1, 0); /* never completed */
    for (int i = 0; i < STATS_TRACE_LEN + 10; i++) call(s, MESH_OP_ALL_REDUCE, x, 4, 1, 0);
    static mesh_call out[STATS_TRACE_LEN + 10];
    const int got = stats_trace_read(s, 0, out, STATS_TRACE_LEN + 10);
    expect_i("trace: the newest STATS_TRACE_LEN", got, STATS_TRACE_LEN);
    expect_i("trace: oldest first", out[0].seq + got - 1, out[got - 1].seq);
    expect_i("trace: up to the newest", out[got - 1].seq, s->seq - 1);
    expect_i("trace from a late seq", stats_trace_read(s, s->seq - 3, out, 10), 3);
    expect_i("trace from the future", stats_trace_read(s, s->seq, out, 10), 0);
}

static void hooks(mesh_stats_part *s) {
    static int ctx[STATS_MAX_HOOKS + 1];
    for (int i = 0; i < STATS_MAX_HOOKS; i++)
        expect_i("add a hook", stats_add_hook(s, on_done, on_waited, &ctx[i]), 0);
    expect_i("one hook too many", stats_add_hook(s, on_done, NULL, &ctx[STATS_MAX_HOOKS]), -1);
    const mesh_axes x = {1, {0, 0, 0}};
    n_done = n_waited = 0;
    const mesh_call r = call(s, MESH_OP_ALL_REDUCE, x, 4, 1, 1);
    stats_waited(s, &r, 0, 1, 0);
    expect_i("done() per hook", n_done, STATS_MAX_HOOKS);
    expect_i("waited() per hook", n_waited, STATS_MAX_HOOKS);
    for (int i = 0; i < STATS_MAX_HOOKS; i++) stats_remove_hook(s, &ctx[i]);
    call(s, MESH_OP_ALL_REDUCE, x, 4, 1, 0);
    expect_i("no calls after removal", n_done, STATS_MAX_HOOKS);
}

int main(void) {
    static mesh_stats_part s;
    stats_init(&s);
    numbering_and_totals(&s);
    trace(&s);
    hooks(&s);
    stats_destroy(&s);
    printf("test_stats: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
