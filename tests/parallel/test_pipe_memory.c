/* Pipelining's activation memory: GPipe holds the activations of
 * all M micro-batches on every stage, 1F1B at most P − s on stage s (so at most P), whatever M.
 * Runs M = 1, 2, 4, 8 with both schedules on the mesh given (--mesh z=P --pipeline z) and checks
 * the peak number of micro-batches in flight and the bytes it implies, on every stage. */
#include <stdio.h>
#include <stdlib.h>

#include "mesh/mesh.h"
#include "train/step/trainer.h"

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[512];
    char spec[32];
    snprintf(spec, sizeof spec, "z=%d", mesh_world_size());
    mesh *m = mesh_create(spec, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    (void)argc, (void)argv;
    const int64_t P = mesh_nranks(m), s = mesh_axis_coord(m, 0);
    int fail = 0;
    for (int sched = 0; sched <= 1; sched++)
        for (int64_t M = 1; M <= 8; M *= 2) {
            config c;
            config_defaults(&c);
            c.shape =
                (model_shape){.L = P, .D = 32, .N = 4, .K = 2, .H = 8, .F = 64, .V = 256, .T = 8};
            c.batch = 2 * M, c.micro_batch = 2 * M, c.steps = 1; /* micro-batches of 2 rows */
            c.quick_start = 1; /* numbers only */
            snprintf(c.pipe_axis, sizeof c.pipe_axis, "z");
            c.microbatches = M, c.schedule = (pipe_schedule)sched;
            trainer *t = trainer_create(&c, m, err, sizeof err);
            if (!t) mesh_exit_error("%s", err);
            int64_t row0, nrows;
            trainer_rows(t, &row0, &nrows);
            int32_t *tok = calloc((size_t)(nrows * 9), sizeof(int32_t)); /* T + 1 = 9 */
            for (int64_t i = 0; i < nrows * 9; i++) tok[i] = (int32_t)(i % 251);
            step_stats st;
            trainer_step(t, 0, tok, &st);
            const int64_t want = sched == 0 ? M : (P - s < M ? P - s : M);
            const int64_t per_mb = model_activation_bytes(trainer_model(t));
            const int ok = st.pipe.peak_inflight == want && st.pipe.act_bytes == want * per_mb &&
                           model_slots(trainer_model(t)) <= (sched == 0 ? M : (P < M ? P : M));
            if (!ok) fail = 1;
            printf("rank %d stage %lld %s M=%lld: peak %lld micro-batches in flight (expected "
                   "%lld), %.2f MB of activations, %d slots allocated%s\n",
                   mesh_rank(m), (long long)s, sched ? "1F1B " : "GPipe", (long long)M,
                   (long long)st.pipe.peak_inflight, (long long)want, st.pipe.act_bytes / 1e6,
                   model_slots(trainer_model(t)), ok ? "" : "  <-- FAIL");
            free(tok);
            trainer_destroy(t);
        }
    int any = mesh_agree(mesh_world_comm(m), fail ? -1 : 0) < 0;
    if (mesh_rank(m) == 0) printf(any ? "FAIL\n" : "PASS\n");
    mesh_destroy(m);
    mesh_mpi_finalize();
    return any;
}
