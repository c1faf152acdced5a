/* where_impl: the where-state inside struct mesh (see where.h) and the calls by which coll.c,
 * coll_async.c, coll_engine.c and p2p.c publish what they are doing. Private to mesh/.
 *
 * Every slot has one writer (the caller's thread for slot 0, the progress thread for slot 1) and
 * readers anywhere, signal handlers included: the fields are lock-free atomics under a sequence
 * counter (odd while an update is under way; a reader retries, and gives up after a few tries
 * rather than spin inside a signal handler that interrupted the writer). */
#ifndef MT_MESH_WHERE_IMPL_H
#define MT_MESH_WHERE_IMPL_H
#include <pthread.h>
#include <stdatomic.h>

#include "mesh/coll.h"

/* What a slot is doing. */
enum { WHERE_IDLE, WHERE_CHECK, WHERE_COLL, WHERE_WAIT, WHERE_P2P, WHERE_BLOCKING };
/* Fields of a slot: the call in progress (kind, op, axis set id, algorithm, shift or direction,
 * number on its set, count; engine progress: phase k of n, steps done of total; start in ns of
 * CLOCK_MONOTONIC), then the last call completed (op, set, number, end; WF_LAST_T = 0: none). */
/* clang-format off */
enum {
    WF_KIND, WF_OP, WF_SET, WF_ALG, WF_SHIFT, WF_SETSEQ, WF_COUNT,
    WF_PHASE, WF_NPHASE, WF_DONE, WF_TOTAL, WF_T0,
    WF_LAST_OP, WF_LAST_SET, WF_LAST_SETSEQ, WF_LAST_T,
    WF_N
};
/* clang-format on */
typedef struct {
    atomic_uint gen;
    atomic_llong f[WF_N];
} where_slot;

typedef struct {
    where_slot slot[2]; /* 0: the caller's thread; 1: the progress thread */
    _Atomic(const char *) note;
    _Atomic(const char *) blocking; /* what a WHERE_BLOCKING slot 0 is in (mesh_blocking_begin) */
    atomic_llong note_i, step, step_t0; /* step_t0 = 0: not in a step */
    /* watchdog (where.c) */
    pthread_t wd_thread;
    int wd_running; /* 0: off; 1: communicator only (the thread failed); 2: running */
    double wd_timeout;
    double wd_grace; /* seconds to wait for the others' where-lines (WD_GRACE in where.c) */
    MPI_Comm wd_comm;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    int wd_stop;         /* guarded by wd_mu */
    atomic_int reported; /* this rank printed its where-line for the watchdog */
} where_state;

/* None of these is collective except where_verify and where_destroy. Slot `slot` starts a call
 * of kind `kind` described by rec (op, axes, set_seq, count, alg; shift: the direction for
 * send/recv). */
void where_enter(struct mesh *m, int slot, int kind, const mesh_call *rec);
/* The call in progress moves on to kind (WHERE_CHECK → WHERE_COLL), keeping its start time. */
void where_kind(struct mesh *m, int slot, int kind);
/* Engine progress of the call in progress: phase ph (1-based) of nph, steps done of total. */
void where_steps(struct mesh *m, int slot, int ph, int nph, int done, int total);
/* The call in progress completed. */
void where_leave(struct mesh *m, int slot);
/* Debug mode, collective over comm (the call's axis set): every rank of it compares rec's
 * signature (number on the set, op, axes, count, algorithm, shift); if they differ, the set's
 * first rank prints one message naming every rank with its coordinates and call, and the job
 * ends with MPI_Abort (status 3). */
void where_verify(struct mesh *m, MPI_Comm comm, const mesh_call *rec);
/* Not collective: stops the watchdog's thread (its communicator stays until mesh_watchdog_stop
 * or MPI_Finalize). mesh_exit_error calls it, so that no MPI call races with MPI_Finalize. */
void where_stop_thread(struct mesh *m);
/* Not collective (from mesh_create): m is the mesh that mesh_blocking_begin reports into. */
void where_attach(struct mesh *m);
/* Collective over: world (from mesh_destroy). Stops the watchdog, uninstalls the signal handler
 * if it points at m, detaches m from mesh_blocking_begin. */
void where_destroy(struct mesh *m);
#endif
