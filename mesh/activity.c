/* activity: the published slots, the program's note and step, and the brackets of blocking MPI
 * calls made outside the collectives. See activity.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "mesh/activity.h"

#include <time.h>

#include "mesh/parts.h"
#include "mesh/topo.h"
#include "mesh/where.h"

long long act_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* async-signal-safe */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the slots (seqlock writers: one thread per slot) ---- */

static void slot_begin(act_slot *s) {
    unsigned g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    atomic_store_explicit(&s->gen, g + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}
static void slot_commit(act_slot *s) {
    unsigned g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    atomic_store_explicit(&s->gen, g + 1, memory_order_release);
}
static void slot_set(act_slot *s, int f, long long v) {
    atomic_store_explicit(&s->f[f], v, memory_order_relaxed);
}

int act_read(const act_slot *s, long long *f) {
    for (int tries = 0; tries < 64; tries++) {
        unsigned g1 = atomic_load_explicit(&s->gen, memory_order_acquire);
        for (int k = 0; k < AF_N; k++) f[k] = atomic_load_explicit(&s->f[k], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        unsigned g2 = atomic_load_explicit(&s->gen, memory_order_relaxed);
        if (g1 == g2 && !(g1 & 1)) return 1;
    }
    return 0;
}

void act_enter(act_slot *s, int kind, const mesh_call *rec) {
    slot_begin(s);
    slot_set(s, AF_OP, rec->op);
    slot_set(s, AF_SET, mesh_set_id(rec->axes));
    slot_set(s, AF_ALG, rec->alg);
    slot_set(s, AF_SHIFT, rec->shift);
    slot_set(s, AF_SETSEQ, rec->set_seq);
    slot_set(s, AF_COUNT, rec->count);
    slot_set(s, AF_PHASE, 0);
    slot_set(s, AF_NPHASE, 0);
    slot_set(s, AF_DONE, 0);
    slot_set(s, AF_TOTAL, 0);
    slot_set(s, AF_T0, act_now_ns());
    slot_set(s, AF_KIND, kind);
    slot_commit(s);
}

void act_kind(act_slot *s, int kind) {
    slot_begin(s);
    slot_set(s, AF_KIND, kind);
    slot_commit(s);
}

void act_steps(act_slot *s, int ph, int nph, int done, int total) {
    slot_begin(s);
    slot_set(s, AF_PHASE, ph);
    slot_set(s, AF_NPHASE, nph);
    slot_set(s, AF_DONE, done);
    slot_set(s, AF_TOTAL, total);
    slot_commit(s);
}

void act_leave(act_slot *s) {
    slot_begin(s);
    slot_set(s, AF_LAST_OP, atomic_load_explicit(&s->f[AF_OP], memory_order_relaxed));
    slot_set(s, AF_LAST_SET, atomic_load_explicit(&s->f[AF_SET], memory_order_relaxed));
    slot_set(s, AF_LAST_SETSEQ, atomic_load_explicit(&s->f[AF_SETSEQ], memory_order_relaxed));
    slot_set(s, AF_LAST_T, act_now_ns());
    slot_set(s, AF_KIND, ACT_IDLE);
    slot_commit(s);
}

/* ---- what the program says (where.h) ---- */

void mesh_where_note(mesh *m, const char *label, int64_t i) {
    mesh_activity *a = mesh_part_activity(m);
    atomic_store_explicit(&a->note_i, i, memory_order_relaxed);
    atomic_store_explicit(&a->note, label, memory_order_release);
}

void mesh_where_step(mesh *m, int64_t step) {
    mesh_activity *a = mesh_part_activity(m);
    atomic_store_explicit(&a->step, step, memory_order_relaxed);
    atomic_store_explicit(&a->step_t0, step >= 0 ? act_now_ns() : 0, memory_order_release);
}

/* ---- blocking MPI calls outside mesh's collectives, on the current mesh ---- */

static _Thread_local int t_blocking_depth, t_blocking_owned;

void mesh_blocking_begin(const char *what) {
    if (t_blocking_depth++ > 0) return;
    t_blocking_owned = 0;
    mesh *m = mesh_current();
    if (!m) return;
    mesh_activity *a = mesh_part_activity(m);
    act_slot *s = &a->slot[0];
    if (atomic_load_explicit(&s->f[AF_KIND], memory_order_relaxed) != ACT_IDLE) return;
    atomic_store_explicit(&a->blocking, what, memory_order_relaxed);
    slot_begin(s);
    slot_set(s, AF_T0, act_now_ns());
    slot_set(s, AF_KIND, ACT_BLOCKING);
    slot_commit(s);
    t_blocking_owned = 1;
}

void mesh_blocking_end(void) {
    if (t_blocking_depth == 0 || --t_blocking_depth > 0) return;
    mesh *m = mesh_current();
    if (!t_blocking_owned || !m) return;
    act_slot *s = &mesh_part_activity(m)->slot[0];
    slot_begin(s);
    slot_set(s, AF_KIND, ACT_IDLE);
    slot_commit(s);
    t_blocking_owned = 0;
}
