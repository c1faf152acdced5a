/* where: the where-line, an observer of the rank's activity (activity.h), printed by the SIGUSR1
 * handler and the watchdog (watchdog.c). See where.h. */
#define _POSIX_C_SOURCE 200809L /* sigaction */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "mesh/activity.h"
#include "mesh/parts.h"
#include "mesh/progress.h"
#include "mesh/sbuf.h"
#include "mesh/sig.h"
#include "mesh/where.h"
#include "mesh/where_impl.h"

static void put_slot(sbuf *b, const mesh *m, const act_slot *s, long long now) {
    const mesh_topo *t = mesh_part_topo((mesh *)m);
    long long f[AF_N];
    int clean = act_read(s, f);
    switch ((int)f[AF_KIND]) {
    case ACT_CHECK:
    case ACT_COLL:
        put_s(b, "in ");
        put_call(b, t, f[AF_OP], f[AF_SETSEQ], f[AF_SET]);
        if (f[AF_OP] == MESH_OP_PPERMUTE) {
            put_s(b, " (shift ");
            put_i(b, f[AF_SHIFT]);
            put_c(b, ')');
        }
        if (f[AF_KIND] == ACT_CHECK) {
            put_s(b, ", comparing call signatures with its peers (--debug-collectives)");
        } else if (f[AF_ALG] == MESH_ALG_MPI) {
            put_s(b, ", in MPI's built-in");
        } else {
            if (f[AF_NPHASE] > 1) {
                put_s(b, ", phase ");
                put_i(b, f[AF_PHASE]);
                put_s(b, " of ");
                put_i(b, f[AF_NPHASE]);
            }
            if (f[AF_TOTAL] > 0) {
                put_s(b, ", ");
                put_i(b, f[AF_DONE]);
                put_s(b, " of ");
                put_i(b, f[AF_TOTAL]);
                put_s(b, " hops done");
            }
        }
        break;
    case ACT_BLOCKING:
        put_s(b, "in ");
        put_s(b,
              atomic_load_explicit(&mesh_part_activity((mesh *)m)->blocking, memory_order_relaxed));
        break;
    case ACT_WAIT:
        put_s(b, "waiting for the non-blocking ");
        put_call(b, t, f[AF_OP], f[AF_SETSEQ], f[AF_SET]);
        break;
    case ACT_P2P: {
        const int recv = f[AF_OP] == MESH_OP_RECV;
        put_s(b, recv ? "in recv from " : "in send to ");
        put_set(b, t, f[AF_SET]);
        put_s(b, f[AF_SHIFT] > 0 ? "+1 (" : "-1 (");
        put_i(b, f[AF_COUNT]);
        put_s(b, " floats)");
        break;
    }
    default:
        put_s(b, "not in mesh");
        if (f[AF_LAST_T] > 0) {
            put_s(b, " (last: ");
            if (f[AF_LAST_OP] == MESH_OP_SEND || f[AF_LAST_OP] == MESH_OP_RECV) {
                put_s(b, mesh_op_title((mesh_op)f[AF_LAST_OP]));
                put_s(b, " over ");
                put_set(b, t, f[AF_LAST_SET]);
            } else {
                put_call(b, t, f[AF_LAST_OP], f[AF_LAST_SETSEQ], f[AF_LAST_SET]);
            }
            put_s(b, ", ended ");
            put_secs(b, now - f[AF_LAST_T]);
            put_s(b, " ago)");
        }
        return;
    }
    put_s(b, ", for ");
    put_secs(b, now - f[AF_T0]);
    if (!clean) put_s(b, " (state changing)");
}

size_t mesh_where_str(const mesh *m, char *buf, size_t len) {
    if (!len) return 0;
    sbuf b = {buf, 0, len};
    buf[0] = 0;
    const long long now = act_now_ns();
    const mesh_activity *a = mesh_part_activity((mesh *)m);
    put_s(&b, "rank ");
    put_i(&b, mesh_rank(m));
    put_c(&b, ' ');
    put_coords(&b, mesh_part_topo((mesh *)m), mesh_rank(m));
    put_s(&b, ": ");
    put_slot(&b, m, &a->slot[0], now);
    const long long step = atomic_load_explicit(&a->step, memory_order_relaxed);
    const long long st0 = atomic_load_explicit(&a->step_t0, memory_order_acquire);
    const char *note = atomic_load_explicit(&a->note, memory_order_acquire);
    if (st0 > 0 || note) put_s(&b, " | ");
    if (st0 > 0) {
        put_s(&b, "step ");
        put_i(&b, step);
        put_s(&b, " (");
        put_secs(&b, now - st0);
        put_c(&b, ')');
        if (note) put_s(&b, ", ");
    }
    if (note) {
        const long long i = atomic_load_explicit(&a->note_i, memory_order_relaxed);
        for (const char *p = note; *p; p++) {
            if (*p == '#') {
                put_i(&b, i);
                put_s(&b, p + 1);
                break;
            }
            put_c(&b, *p);
        }
    }
    if (mesh_part_queue((mesh *)m)->q) { /* the progress thread (or the inline coroutine) exists */
        put_s(&b, mesh_get_progress(m) == MESH_PROGRESS_INLINE ? " | inline progress: "
                                                               : " | progress thread: ");
        put_slot(&b, m, &a->slot[1], now);
    }
    return b.n;
}

void where_write(const mesh *m, const char *tail) {
    char buf[1024];
    sbuf b = {buf, 0, sizeof buf - 1};
    put_s(&b, "meshtrain: where: ");
    b.n += mesh_where_str(m, buf + b.n, b.cap - b.n);
    put_s(&b, tail);
    buf[b.n++] = '\n';
    const ssize_t w = write(STDERR_FILENO, buf, b.n);
    (void)w;
}

/* ---- SIGUSR1: the current mesh's where-line ---- */

static void on_sigusr1(int sig, siginfo_t *info, void *uc) {
    (void)sig, (void)info, (void)uc;
    const int saved = errno;
    const mesh *m = mesh_current();
    if (m) where_write(m, " (SIGUSR1)");
    errno = saved;
}

void mesh_where_signal(mesh *m) {
    (void)m;
    mesh_sig_catch(SIGUSR1, on_sigusr1, SA_RESTART);
}

void where_release(void) {
    struct sigaction sa;
    if (mesh_current() || sigaction(SIGUSR1, NULL, &sa) != 0 || sa.sa_sigaction != on_sigusr1)
        return;
    signal(SIGUSR1, SIG_DFL);
}
