/* Memory per rank drops as the book's training chapter says (ZeRO): on a data axis of |X| ranks,
 * params + grads + optimizer state of ZeRO-3 ≈ 1/|X| of pure DP's, and ZeRO-1 > ZeRO-2 > ZeRO-3
 * in between. Prints the per-category table. */
#include <math.h>
#include <stdio.h>

#include "mesh/mesh.h"
#include "train/step/trainer.h"

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[512];
    mesh *m = mesh_create("", NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int X = mesh_nranks(m);
    config c;
    config_defaults(&c);
    c.shape = (model_shape){.L = 3, .D = 48, .N = 4, .K = 2, .H = 12, .F = 96, .V = 256, .T = 16};
    c.batch = 12, c.micro_batch = 12, c.steps = 1;
    c.quick_start = 1; /* numbers only: no careful kernel timing at start-up */
    snprintf(c.data_axes, sizeof c.data_axes, "x");
    double pgo[4] = {0};
    int fail = 0;
    for (int z = 0; z <= 3; z++) {
        c.zero = z;
        trainer *t = trainer_create(&c, m, err, sizeof err);
        if (!t) mesh_exit_error("%s", err);
        plan_mem_bytes mem;
        plan_memory(trainer_plan(t), &mem);
        const int64_t *b = mem.bytes;
        pgo[z] = (double)(b[PLAN_MEM_PARAMS] + b[PLAN_MEM_GRADS] + b[PLAN_MEM_OPTIMIZER]);
        if (mesh_rank(m) == 0)
            printf("zero %d: params %8lld  grads %8lld  optimizer %8lld  gathered %8lld  "
                   "buffers %8lld  (params+grads+opt %.0f B)\n",
                   z, (long long)b[PLAN_MEM_PARAMS], (long long)b[PLAN_MEM_GRADS],
                   (long long)b[PLAN_MEM_OPTIMIZER], (long long)b[PLAN_MEM_GATHERED],
                   (long long)b[PLAN_MEM_BUFFERS], pgo[z]);
        trainer_destroy(t);
    }
    const double ratio = pgo[3] / pgo[0];
    if (mesh_rank(m) == 0)
        printf("ZeRO-3 / DP = %.4f, 1/|X| = %.4f (tolerance 2%%)\n", ratio, 1.0 / X);
    if (X > 1 && !(fabs(ratio * X - 1.0) <= 0.02)) fail = 1;
    if (X > 1 && !(pgo[0] > pgo[1] && pgo[1] > pgo[2] && pgo[2] > pgo[3])) fail = 1;
    if (mesh_rank(m) == 0) printf(fail ? "FAIL\n" : "PASS\n");
    mesh_destroy(m);
    mesh_mpi_finalize();
    return fail;
}
