/* verify: the debug signature check (--debug-collectives): before each collective the ranks of
 * its axis set compare their calls, and a mismatch ends the job with one report naming every
 * rank. See where_impl.h. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mesh/sbuf.h"
#include "mesh/topo.h"
#include "mesh/where_impl.h"

#define CHECK_STATUS 3 /* exit status of a job a mismatch ended */

enum { SG_RANK, SG_SETSEQ, SG_OP, SG_SET, SG_COUNT, SG_ALG, SG_SHIFT, SG_N };

static int sig_equal(const long long *a, const long long *b) {
    for (int k = SG_SETSEQ; k < SG_N; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

/* Prints the mismatch report: one line per distinct signature, with the ranks that made it. */
static void report_mismatch(const mesh_topo *t, const long long *all, int n, const mesh_call *rec) {
    char line[1024];
    sbuf b = {line, 0, sizeof line};
    put_s(&b, "meshtrain: error: collective mismatch (--debug-collectives): the ");
    put_i(&b, n);
    put_s(&b, " ranks of axis set ");
    put_set(&b, t, mesh_set_id(rec->axes));
    put_s(&b, " disagree on their next collective over it:");
    fprintf(stderr, "%s\n", line);
    char *seen = calloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        if (seen && seen[i]) continue;
        const long long *s = all + (size_t)i * SG_N;
        b.n = 0;
        put_s(&b, "  ");
        int shown = 0, more = 0;
        for (int j = i; j < n; j++) {
            const long long *q = all + (size_t)j * SG_N;
            if (!sig_equal(s, q) || (seen && seen[j])) continue;
            if (seen) seen[j] = 1;
            if (shown == 8) {
                more++;
                continue;
            }
            put_s(&b, shown ? ", rank " : "rank ");
            put_i(&b, q[SG_RANK]);
            put_c(&b, ' ');
            put_coords(&b, t, (int)q[SG_RANK]);
            shown++;
        }
        if (more) {
            put_s(&b, " and ");
            put_i(&b, more);
            put_s(&b, " more");
        }
        put_s(&b, ": ");
        put_call(&b, t, s[SG_OP], s[SG_SETSEQ], s[SG_SET]);
        put_s(&b, ", count ");
        put_i(&b, s[SG_COUNT]);
        if (s[SG_OP] == MESH_OP_PPERMUTE) {
            put_s(&b, ", shift ");
            put_i(&b, s[SG_SHIFT]);
        }
        put_s(&b, ", alg ");
        put_s(&b, mesh_alg_name((mesh_alg)s[SG_ALG]));
        fprintf(stderr, "%s\n", line);
        if (!seen) break;
    }
    free(seen);
    fprintf(stderr, "meshtrain: ending the job (MPI_Abort, status %d)\n", CHECK_STATUS);
    fflush(stderr);
}

void verify_signature(const mesh_topo *t, MPI_Comm world, MPI_Comm comm, const mesh_call *rec) {
    long long mine[SG_N] = {t->rank,    rec->set_seq, rec->op,   mesh_set_id(rec->axes),
                            rec->count, rec->alg,     rec->shift};
    int n = 1, me = 0;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    long long *all = malloc((size_t)n * SG_N * sizeof *all); /* debug mode only */
    CHECK(all, "out of memory for the signature check");
    MPI_Allgather(mine, SG_N, MPI_LONG_LONG, all, SG_N, MPI_LONG_LONG, comm);
    int same = 1;
    for (int i = 1; i < n; i++) same &= sig_equal(all, all + (size_t)i * SG_N);
    if (same) {
        free(all);
        return;
    }
    /* Every rank of the set saw the same table: the first one reports, the others wait to be
     * ended by its MPI_Abort (and abort themselves if that never comes). */
    if (me == 0) {
        report_mismatch(t, all, n, rec);
        MPI_Abort(world, CHECK_STATUS);
    }
    struct timespec ts = {10, 0};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
    MPI_Abort(world, CHECK_STATUS);
    abort();
}
