/* stats: the accounting and trace of a mesh's calls (see stats.h), and its public calls
 * (coll.h: mesh_stats, mesh_trace_read, mesh_add_trace_hook, ...). */
#include "mesh/stats.h"

#include <string.h>

#include "mesh/parts.h"

void stats_init(mesh_stats_part *s) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

void stats_destroy(mesh_stats_part *s) {
    pthread_mutex_destroy(&s->mu);
}

void stats_issue(mesh_stats_part *s, mesh_call *rec, mesh_op op, mesh_axes axes, int64_t count,
                 int shift) {
    memset(rec, 0, sizeof *rec);
    rec->op = op;
    rec->axes = axes;
    const int set = mesh_set_id(axes);
    pthread_mutex_lock(&s->mu);
    rec->seq = s->seq++;
    if (op != MESH_OP_SEND && op != MESH_OP_RECV && set >= 0 && set < MESH_NSETS)
        rec->set_seq = s->set_seq[set]++;
    pthread_mutex_unlock(&s->mu);
    rec->count = count;
    rec->shift = shift;
    rec->t_issue = mesh_now();
    rec->cpu_issue = mesh_thread_cpu();
}

static mesh_stat *stat_of(mesh_stats_part *s, const mesh_call *rec) {
    return &s->stat[rec->op][rec->axes.n ? rec->axes.ax[0] + 1 : 0];
}

void stats_complete(mesh_stats_part *s, const mesh_call *rec) {
    int64_t bytes = 0;
    for (int k = 0; k < MESH_MAX_AXES; k++) bytes += rec->link_bytes[k][0] + rec->link_bytes[k][1];
    pthread_mutex_lock(&s->mu);
    mesh_stat *st = stat_of(s, rec);
    st->calls++;
    st->bytes += bytes;
    st->seconds += rec->t_end - rec->t_start;
    st->idle_polls += rec->idle_polls;
    if (!rec->async) { /* completed on the caller's thread */
        st->wait_seconds += rec->t_end - rec->t_issue;
        st->wait_cpu += mesh_thread_cpu() - rec->cpu_issue;
    }
    s->trace[rec->seq % STATS_TRACE_LEN] = *rec;
    stats_hook hk[STATS_MAX_HOOKS];
    memcpy(hk, s->hook, sizeof hk);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < STATS_MAX_HOOKS; i++)
        if (hk[i].done) hk[i].done(rec, hk[i].ctx);
}

void stats_waited(mesh_stats_part *s, const mesh_call *rec, double t0, double t1, double cpu) {
    pthread_mutex_lock(&s->mu);
    mesh_stat *st = stat_of(s, rec);
    st->wait_seconds += t1 - t0;
    st->wait_cpu += cpu;
    stats_hook hk[STATS_MAX_HOOKS];
    memcpy(hk, s->hook, sizeof hk);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < STATS_MAX_HOOKS; i++)
        if (hk[i].done && hk[i].waited) hk[i].waited(rec, t0, t1, hk[i].ctx);
}

mesh_stat stats_get(mesh_stats_part *s, mesh_op op, int axis) {
    mesh_stat t = {0, 0, 0, 0, 0, 0};
    CHECK(op >= 0 && op < MESH_OP_COUNT, "bad op %d", (int)op);
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k <= MESH_MAX_AXES; k++) {
        if (axis >= 0 && k != axis + 1) continue;
        const mesh_stat *x = &s->stat[op][k];
        t.calls += x->calls, t.bytes += x->bytes;
        t.seconds += x->seconds, t.wait_seconds += x->wait_seconds, t.wait_cpu += x->wait_cpu;
        t.idle_polls += x->idle_polls;
    }
    pthread_mutex_unlock(&s->mu);
    return t;
}

void stats_reset(mesh_stats_part *s) {
    pthread_mutex_lock(&s->mu);
    memset(s->stat, 0, sizeof s->stat);
    pthread_mutex_unlock(&s->mu);
}

int stats_trace_read(mesh_stats_part *s, int64_t from_seq, mesh_call *out, int max) {
    int got = 0;
    pthread_mutex_lock(&s->mu);
    const int64_t lo = s->seq - STATS_TRACE_LEN;
    for (int64_t q = from_seq > lo ? from_seq : lo; q < s->seq && got < max; q++) {
        if (q < 0) continue;
        const mesh_call *r = &s->trace[q % STATS_TRACE_LEN];
        if (r->seq == q && r->t_end > 0) out[got++] = *r;
    }
    pthread_mutex_unlock(&s->mu);
    return got;
}

int stats_add_hook(mesh_stats_part *s, mesh_trace_fn done, mesh_wait_fn waited, void *ctx) {
    CHECK(done, "mesh_add_trace_hook: done must not be NULL");
    int rc = -1;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < STATS_MAX_HOOKS && rc < 0; i++)
        if (!s->hook[i].done) s->hook[i] = (stats_hook){done, waited, ctx}, rc = 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void stats_remove_hook(mesh_stats_part *s, void *ctx) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < STATS_MAX_HOOKS; i++)
        if (s->hook[i].ctx == ctx) s->hook[i] = (stats_hook){NULL, NULL, NULL};
    pthread_mutex_unlock(&s->mu);
}

/* ---- the public calls (coll.h) ---- */

mesh_stat mesh_stats(const mesh *m, mesh_op op, int axis) {
    return stats_get(mesh_part_stats((mesh *)m), op, axis);
}
void mesh_stats_reset(mesh *m) {
    stats_reset(mesh_part_stats(m));
}
int mesh_trace_read(const mesh *m, int64_t from_seq, mesh_call *out, int max) {
    return stats_trace_read(mesh_part_stats((mesh *)m), from_seq, out, max);
}
int mesh_add_trace_hook(mesh *m, mesh_trace_fn done, mesh_wait_fn waited, void *ctx) {
    return stats_add_hook(mesh_part_stats(m), done, waited, ctx);
}
void mesh_remove_trace_hook(mesh *m, void *ctx) {
    stats_remove_hook(mesh_part_stats(m), ctx);
}
