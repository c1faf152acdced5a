/* activity: what this rank is doing inside mesh, published for the observers (the where-line and
 * the SIGUSR1 handler, where.c; the watchdog, watchdog.c), which read it while the rank is stuck.
 * The collectives (coll.c, the engine), the waits for non-blocking calls (coll_async.c) and the
 * point-to-point waits (p2p.c) write it; nothing here reads their private state.
 *
 * Two slots, one per thread that runs calls: 0 the caller's, 1 the progress thread's (or the
 * inline coroutine's). Each has one writer and readers anywhere, signal handlers included: its
 * fields are lock-free atomics under a sequence counter (odd while an update is under way; a
 * reader retries, and gives up after a few tries rather than spin inside a signal handler that
 * interrupted the writer). Besides the slots: the program's note and step (mesh_where_note,
 * mesh_where_step) and what a blocking MPI call outside the collectives is (mesh_blocking_begin).
 * Private to mesh/. Depends on coll.h (mesh_call) and C11 atomics; no MPI. */
#ifndef MT_MESH_ACTIVITY_H
#define MT_MESH_ACTIVITY_H
#include <stdatomic.h>

#include "mesh/coll.h"

/* What a slot is doing. */
enum { ACT_IDLE, ACT_CHECK, ACT_COLL, ACT_WAIT, ACT_P2P, ACT_BLOCKING };
/* Fields of a slot: the call in progress (kind, op, axis set id, algorithm, shift or direction,
 * number on its set, count; engine progress: phase k of n, steps done of total; start in ns of
 * CLOCK_MONOTONIC), then the last call completed (op, set, number, end; AF_LAST_T = 0: none). */
/* clang-format off */
enum {
    AF_KIND, AF_OP, AF_SET, AF_ALG, AF_SHIFT, AF_SETSEQ, AF_COUNT,
    AF_PHASE, AF_NPHASE, AF_DONE, AF_TOTAL, AF_T0,
    AF_LAST_OP, AF_LAST_SET, AF_LAST_SETSEQ, AF_LAST_T,
    AF_N
};
/* clang-format on */
typedef struct {
    atomic_uint gen;
    atomic_llong f[AF_N];
} act_slot;

typedef struct mesh_activity mesh_activity;
struct mesh_activity {
    act_slot slot[2]; /* 0: the caller's thread; 1: the progress thread (or coroutine) */
    _Atomic(const char *) note;
    _Atomic(const char *) blocking; /* what an ACT_BLOCKING slot 0 is in (mesh_blocking_begin) */
    atomic_llong note_i, step, step_t0; /* step_t0 = 0: not in a step */
};

/* None of these is collective. Slot s starts a call of kind `kind` described by rec (op, axes,
 * set_seq, count, alg; shift: the direction for send/recv). */
void act_enter(act_slot *s, int kind, const mesh_call *rec);
/* The call in progress moves on to kind (ACT_CHECK → ACT_COLL), keeping its start time. */
void act_kind(act_slot *s, int kind);
/* Engine progress of the call in progress: phase ph (1-based) of nph, steps done of total. */
void act_steps(act_slot *s, int ph, int nph, int done, int total);
/* The call in progress completed. */
void act_leave(act_slot *s);
/* Copies the slot's fields into f[AF_N]; returns 0 if the copy may be torn (the writer never got
 * out of the way, e.g. this is a signal handler that interrupted it). Async-signal-safe. */
int act_read(const act_slot *s, long long *f);
/* CLOCK_MONOTONIC in ns (async-signal-safe): the time base of the slots. */
long long act_now_ns(void);
#endif
