/* meshbench_a2av: see meshbench_a2av.h. */
#include "bench/meshbench_a2av.h"

#include <math.h>
#include <string.h>

const char *a2av_op_name(int op) {
    return op == BENCH_OP_A2AV ? "a2av" : op == BENCH_OP_A2AV_SKEW ? "a2av-skew" : NULL;
}

int a2av_op_parse(const char *s) {
    for (int op = BENCH_OP_A2AV; op < BENCH_OP_END; op++)
        if (!strcmp(s, a2av_op_name(op))) return op;
    return -1;
}

int64_t a2av_counts(mesh *m, mesh_axes a, int op, int64_t total, int64_t *counts) {
    const int n = mesh_axes_size(m, a), me = mesh_axes_index(m, a);
    int64_t send[64], rest = total;
    CHECK(n <= 64, "meshbench a2av: at most 64 ranks in the set");
    for (int j = 0; j < n; j++) {
        send[j] = op == BENCH_OP_A2AV ? total / n : total / (2 * n);
        rest -= send[j];
    }
    send[op == BENCH_OP_A2AV ? me : (me + 1) % n] += rest;
    mesh_all_to_allv_counts(m, a, counts, send, MESH_ALG_MPI);
    int64_t got = 0;
    for (int i = 0; i < n; i++) got += counts[(int64_t)i * n + me];
    return got;
}

double a2av_check(const mesh *m, mesh_axes a, const int64_t *counts, const float *out,
                  float (*val)(int, int64_t)) {
    const int n = mesh_axes_size(m, a), me = mesh_axes_index(m, a);
    double err = 0;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        int64_t off = 0; /* where i's block for me starts in i's input */
        for (int j = 0; j < me; j++) off += counts[(int64_t)i * n + j];
        for (int64_t e = 0; e < counts[(int64_t)i * n + me]; e++, at++)
            err = fmax(err, fabs((double)out[at] - val(mesh_axes_member(m, a, i), off + e)));
    }
    return err;
}
