/* The printed plan against the executed run (flags from argv: --mesh, --dp, --dcn, --tensor,
 * --zero): the tokens of a micro-batch per data shard that the layout prints ("micro-batch of N
 * tokens per data shard") must be the rows the model runs, and the count every tensor-axis
 * ReduceScatter of a training step carries (recorded by the mesh, not by the plan) must be those
 * N rows times this rank's D/|Y| columns, the count the printed table gives; and their number
 * must be the printed rows' calls per layer × layers × micro-batches, plus the head's one per
 * micro-batch (its final norm's backward, which the per-layer table does not list). Under --dcn
 * the batch is sharded over every data axis, the DCN one included, so N = micro-batch /
 * |batch axes| · T. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "stream.h"
#include "targs.h"
#include "train/step/trainer.h"

static int tensor_axis = -1;
static atomic_llong rs_calls, rs_count, rs_other;

/* Every tensor-axis ReduceScatter's count: the first, and how many differ from it. */
static void on_call(const mesh_call *c, void *ctx) {
    (void)ctx;
    if (c->op != MESH_OP_REDUCE_SCATTER || c->axes.n != 1 || c->axes.ax[0] != tensor_axis) return;
    long long zero = 0;
    atomic_compare_exchange_strong(&rs_count, &zero, (long long)c->count);
    if (atomic_load(&rs_count) != (long long)c->count) atomic_fetch_add(&rs_other, 1);
    atomic_fetch_add(&rs_calls, 1);
}

/* The printed layout of trainer t: the micro-batch's tokens it names (−1 if none) and the calls
 * per layer of its tensor-axis ReduceScatter rows (the "n×" column of rows "reduce_scatter Y"). */
static long long printed_tokens(trainer *t, long long *rs_per_layer) {
    FILE *f = tmpfile();
    if (!f) return -1;
    trainer_print_layout(t, f);
    rewind(f);
    char line[1024];
    long long n = -1;
    *rs_per_layer = 0;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "micro-batch of ");
        if (at && strstr(at, "tokens per data shard")) n = atoll(at + strlen("micro-batch of "));
        const char *rs = strstr(line, "reduce_scatter Y ");
        const char *times = rs ? strstr(rs, "× ") : NULL;
        if (times) {
            const char *d = times;
            while (d > rs && d[-1] >= '0' && d[-1] <= '9') d--;
            *rs_per_layer += atoll(d);
        }
    }
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
    const model_shape s = {.L = 2, .D = 48, .N = 4, .K = 2, .H = 12, .F = 96, .V = 256, .T = 16};
    config c = targs_init(&argc, &argv, "--batch 24 --micro-batch 12", s);
    char err[512];
    mesh *m = mesh_create(c.mesh, c.mesh_open, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    trainer *t = trainer_create(&c, m, err, sizeof err);
    if (!t) mesh_exit_error("%s", err);
    const plan *pl = trainer_plan(t);
    tensor_axis = pl->tensor.axes.n ? pl->tensor.axes.ax[0] : -1;
    long long rs_per_layer = 0;
    const long long shown = printed_tokens(t, &rs_per_layer);
    const long long rows = model_local_rows(trainer_model(t));
    /* on rank 0 (the one that prints) the number must be there; every rank checks its runs */
    int fail = mesh_rank(m) == 0 && shown != rows;
    CHECK(mesh_add_trace_hook(m, on_call, NULL, NULL) == 0, "no room for the test's observer");
    int64_t row0, nrows;
    trainer_rows(t, &row0, &nrows);
    int32_t *tok = malloc((size_t)(nrows * (c.shape.T + 1)) * sizeof(int32_t));
    test_stream_batch(tok, row0, nrows, c.shape.T, 0);
    step_stats st;
    trainer_step(t, 0, tok, &st);
    mesh_remove_trace_hook(m, NULL);
    const long long per_call = rows * (c.shape.D / pl->tensor.n);
    const long long want_calls =
        (rs_per_layer * (pl->l1 - pl->l0) + (pl->l1 == c.shape.L)) * pl->n_micro;
    if (tensor_axis >= 0)
        fail |= atomic_load(&rs_calls) == 0 || atomic_load(&rs_other) != 0 ||
                atomic_load(&rs_count) != per_call ||
                (mesh_rank(m) == 0 && atomic_load(&rs_calls) != want_calls);
    printf("rank %d: printed %lld tokens per micro-batch and data shard, the model runs %lld rows; "
           "%lld tensor-axis ReduceScatters (printed: %lld a layer, so %lld a step) of %lld "
           "elements (%lld others; want %lld)%s\n",
           mesh_rank(m), shown, rows, (long long)atomic_load(&rs_calls), rs_per_layer, want_calls,
           (long long)atomic_load(&rs_count), (long long)atomic_load(&rs_other), per_call,
           fail ? "  <-- FAIL" : "");
    fail = mesh_agree_max(mesh_world_comm(m), fail);
    if (mesh_rank(m) == 0) printf(fail ? "FAIL\n" : "PASS\n");
    free(tok);
    trainer_destroy(t);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return fail;
}
