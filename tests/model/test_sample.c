/* sample: the picker against exact expectations (greedy and ties, top-k support, the inverse CDF
 * reproducing softmax(l/τ) on a uniform grid of u, non-finite logits), and generation: the same
 * seed gives the same text twice and on every rank of the mesh. Run at 1 and 2 ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mesh/coll.h"
#include "mesh/mesh.h"
#include "train/model/sample.h"
#include "train/step/trainer.h"

static void test_pick(void) {
    enum { V = 7 };
    sample_item scratch[V];
    const float l[V] = {0.5f, 2.0f, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f};
    check_expect(sample_pick(l, V, 0.0, 0, 0.99, scratch) == 1,
                 "greedy picks the lowest id of a tie");
    int only_top = 1;
    for (int i = 0; i < 100; i++)
        only_top &= sample_pick(l, V, 1.0, 1, (i + 0.5) / 100, scratch) == 1;
    check_expect(only_top, "top-k 1 is greedy for every u");

    /* top-k 3 keeps ids {1, 3, 5}; over a fine uniform grid of u the picks reproduce the
     * renormalised softmax(l/τ) to within the grid step. */
    const double tau = 0.7;
    const int n = 100000;
    int count[V] = {0};
    for (int i = 0; i < n; i++) count[sample_pick(l, V, tau, 3, (i + 0.5) / n, scratch)]++;
    double z = 0, p[V] = {0};
    const int keep[3] = {1, 3, 5};
    for (int j = 0; j < 3; j++) z += exp(l[keep[j]] / tau);
    for (int j = 0; j < 3; j++) p[keep[j]] = exp(l[keep[j]] / tau) / z;
    double worst = 0;
    for (int j = 0; j < V; j++) worst = fmax(worst, fabs(count[j] / (double)n - p[j]));
    check_expect(worst <= 2.0 / n,
                 "top-k 3, τ=0.7: frequencies match softmax within 2/n (worst %.2e)", worst);

    /* Same u, same pick (pure); u just below 1 stays in range. */
    check_expect(sample_pick(l, V, 1.3, 0, 0.123, scratch) ==
                     sample_pick(l, V, 1.3, 0, 0.123, scratch),
                 "pure: same inputs, same token");
    const int32_t last = sample_pick(l, V, 1.0, 0, 0x1.fffffffffffffp-1, scratch);
    check_expect(last >= 0 && last < V, "u → 1 gives a valid token (%d)", last);

    const float bad[4] = {NAN, 1.0f, INFINITY, 0.5f};
    int finite_only = 1;
    for (int i = 0; i < 50; i++) {
        const int32_t t = sample_pick(bad, 4, 1.0, 0, (i + 0.5) / 50, scratch);
        finite_only &= t == 1 || t == 3;
    }
    check_expect(finite_only, "NaN and inf logits are never picked");
    const float none[2] = {NAN, NAN};
    check_expect(sample_pick(none, 2, 1.0, 0, 0.5, scratch) == 0, "no finite logit: token 0");
}

static void test_generate(void) {
    config c;
    config_defaults(&c);
    c.quick_start = 1; /* numbers only: no careful kernel timing at start-up */
    c.shape = (model_shape){.L = 2, .D = 32, .N = 4, .K = 2, .H = 8, .F = 64, .V = 256, .T = 16};
    c.batch = c.micro_batch = 2 * mesh_world_size();
    char err[512];
    mesh *m = mesh_create(NULL, NULL, err, sizeof err);
    CHECK(m, "mesh: %s", err);
    trainer *t = trainer_create(&c, m, err, sizeof err);
    CHECK(t, "trainer: %s", err);
    enum { NGEN = 40 };
    const int32_t prompt[3] = {'T', 'h', 'e'};
    int32_t a[NGEN], b[NGEN], d[NGEN];
    const sample_cfg sc = {0.9, 20, 7}, other = {0.9, 20, 8};
    sample_generate(trainer_model(t), prompt, 3, NGEN, &sc, a, NULL); /* past T: sliding window */
    sample_generate(trainer_model(t), prompt, 3, NGEN, &sc, b, NULL);
    sample_generate(trainer_model(t), prompt, 3, NGEN, &other, d, NULL);
    check_expect(memcmp(a, b, sizeof a) == 0, "same seed, same %d tokens", NGEN);
    check_expect(memcmp(a, d, sizeof a) != 0, "another seed, other tokens");

    /* Every rank chose the same tokens: gather them (as floats, exact) and compare. */
    const int R = mesh_world_size();
    float mine[NGEN], *all = malloc((size_t)(R * NGEN) * sizeof *all);
    CHECK(all, "oom");
    for (int i = 0; i < NGEN; i++) mine[i] = (float)a[i];
    mesh_all_gather(m, mesh_all_axes(m), all, mine, NGEN, MESH_ALG_MPI);
    int same = 1;
    for (int r = 1; r < R; r++) same &= memcmp(all, all + r * NGEN, sizeof mine) == 0;
    check_expect(same, "all %d ranks generated the same text", R);
    free(all);
    trainer_destroy(t);
    mesh_destroy(m);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    check_quiet(mesh_world_rank() != 0);
    test_pick();
    test_generate();
    const int rc = check_finish("test_sample");
    mesh_mpi_finalize();
    return rc;
}
