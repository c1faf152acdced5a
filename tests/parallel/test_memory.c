/* Memory per rank drops as the book's training chapter says (ZeRO): on a data axis of |X| ranks,
 * params + grads + optimizer state of ZeRO-3 ≈ 1/|X| of pure DP's, and ZeRO-1 > ZeRO-2 > ZeRO-3
 * in between; ZeRO-3 in bf16 compute holds its gathered layers in bf16 (check_z3_bf16). Prints
 * the per-category table. */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "mesh/mesh.h"
#include "train/step/trainer.h"

static int64_t buf_bytes(const plan *pl, plan_buf_id id, int slot) {
    const plan_buf *b = plan_buffer(pl, id, slot);
    return b ? b->n * plan_dtype_bytes(b->dtype) : 0;
}

/* ZeRO-3 in bf16 compute holds a gathered layer in bf16 only: each slot's bytes are the matrices'
 * 2 per element and the norm gains' 4, with at most 64 bytes of alignment and |X| elements of
 * padding a block (the two slots and their stages: 4 such); a send buffer of the rank's bf16
 * shards; the unembedding gathered in bf16 too, 2 bytes an element (|X| shards, each padded to
 * even); and the model keeps no per-use bf16 copy of any weight (its bf16 scratch is the
 * unsharded bf16 run's). Returns 1 on failure. */
static int check_z3_bf16(config c, mesh *m) {
    char err[512];
    const int64_t X = mesh_nranks(m), D = c.shape.D;
    c.bucket = 0;
    int64_t gathered[2], scratch[2], unembed[2];
    const plan *pl = NULL;
    trainer *t[2];
    for (int bf = 0; bf < 2; bf++) {
        c.compute = bf ? COMPUTE_BF16 : COMPUTE_FP32;
        if (!(t[bf] = trainer_create(&c, m, err, sizeof err))) mesh_exit_error("%s", err);
        plan_mem_bytes mem;
        plan_memory(trainer_plan(t[bf]), &mem);
        gathered[bf] = mem.bytes[PLAN_MEM_GATHERED];
        unembed[bf] = buf_bytes(trainer_plan(t[bf]), BUF_GATHERED_UNEMBED, 0);
    }
    pl = trainer_plan(t[1]);
    const int64_t norms = 2 * D, mats = pl->layer_elems - norms;
    const int64_t slot_max = 2 * mats + 4 * norms + 9 * (64 + 2 * X);
    const int64_t slot = buf_bytes(pl, BUF_GATHERED_LAYER, 0);
    const int64_t fp32_slot = buf_bytes(trainer_plan(t[0]), BUF_GATHERED_LAYER, 0);
    scratch[1] = buf_bytes(pl, BUF_MODEL_SCRATCH_BF16, 0);
    trainer_destroy(t[0]);
    trainer_destroy(t[1]);
    c.zero = 0;
    if (!(t[0] = trainer_create(&c, m, err, sizeof err))) mesh_exit_error("%s", err);
    scratch[0] = buf_bytes(trainer_plan(t[0]), BUF_MODEL_SCRATCH_BF16, 0);
    trainer_destroy(t[0]);
    const int64_t extra = scratch[1] - scratch[0], sh = D * c.shape.V / X;
    const int64_t unembed_max = 2 * (sh + sh % 2) * X;
    const int ok = X == 1 || (slot <= slot_max && gathered[1] < gathered[0] && extra == 0 &&
                              unembed[1] <= unembed_max && unembed[0] == 4 * D * c.shape.V);
    return check_expect(ok,
                        "ZeRO-3 bf16: a layer slot %lld B (bound %lld; fp32 %lld), the unembedding "
                        "%lld B (bound %lld; fp32 %lld), gathered %lld B (fp32 %lld), model bf16 "
                        "scratch %lld B over the unsharded run's (0)",
                        (long long)slot, (long long)slot_max, (long long)fp32_slot,
                        (long long)unembed[1], (long long)unembed_max, (long long)unembed[0],
                        (long long)gathered[1], (long long)gathered[0], (long long)extra);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[512];
    mesh *m = mesh_create("", NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    check_quiet(mesh_rank(m) != 0);
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
    c.zero = 3;
    fail |= check_z3_bf16(c, m);
    const double ratio = pgo[3] / pgo[0];
    fail |= check_expect(X == 1 || fabs(ratio * X - 1.0) <= 0.02,
                         "ZeRO-3 / DP = %.4f, 1/|X| = %.4f (tolerance 2%%)", ratio, 1.0 / X);
    fail |= check_expect(X == 1 || (pgo[0] > pgo[1] && pgo[1] > pgo[2] && pgo[2] > pgo[3]),
                         "params+grads+opt: ZeRO-0 > 1 > 2 > 3 (%.0f, %.0f, %.0f, %.0f B)", pgo[0],
                         pgo[1], pgo[2], pgo[3]);
    /* rank 0 prints; a check failed on another rank fails here too */
    check_expect(mesh_agree(mesh_world_comm(m), fail ? -1 : 0) == 0, "every rank's checks pass");
    mesh_destroy(m);
    const int rc = check_finish("test_memory");
    mesh_mpi_finalize();
    return rc;
}
