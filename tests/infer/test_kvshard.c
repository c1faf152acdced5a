/* Generation with the KV cache sharded over the sequence (--kv-shard AXIS), on the mesh given by
 * the arguments (--mesh SPEC --kv-shard AXIS [--dp AXES] [--tensor AXIS] [--kv-replicate]; or
 * --cp AXIS: the prefill's prompts over the axis too, gen_create_cp),
 * against the unsharded cached decode on the same ranks (the reference: the same run with the
 * kv axis as one more data axis, so every rank of it holds whole caches of its share of the
 * prompts). Both decode the same tokens (the sharded run's picks fed to both), and:
 *  - the logits of prefill and of every decode step agree within
 *    |a − b| ≤ k·FLT_EPSILON·(|a| + |b| + 1), k = TOL_K: the shards' partials merged by the
 *    online softmax round differently from one pass over the whole cache, by an eps or so of
 *    each row's sum, which the last layers carry into the logits (measured: at most 0.6 eps
 *    units on these meshes; k leaves room for other CPUs' kernels);
 *  - the greedy picks are equal;
 *  - the logits are bit-identical on every rank of the kv axis (the partials are merged in rank
 *    order, not arrival order);
 *  - each rank's cache holds ceil(S/P) of the S positions of each of its sequences: its bytes
 *    per sequence are the reference's times ceil(S/P)/S, exactly;
 *  - with --cp, the prefill ran this rank's positions only: the rows of the ranks of the axis sum
 *    to the prompts' tokens (the prompts' lengths 1 to 17 include multiples of 2 and 3, others,
 *    and prompts shorter than the axis, of which some ranks hold nothing).
 * Fresh initialisation (seed 7), L=2 D=32 N=4 K=2 H=8 F=64 V=256; 12 prompts of unequal length. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gen_test.h"
#include "mesh/coll.h"
#include "mesh/mesh.h"
#include "train/infer/gen.h"

#define TOL_K 16.0
#define NTOK 12

/* The axis of --kv-shard AXIS or --cp AXIS (0 without); *cp = 1 with --cp. */
static char kv_shard_axis(int argc, char **argv, int *cp) {
    char axis = 0;
    *cp = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--kv-shard")) axis = argv[i + 1][0];
        if (!strcmp(argv[i], "--cp")) axis = argv[i + 1][0], *cp = 1;
    }
    return axis;
}

int main(int argc, char **argv) {
    config c;
    int kv_rep;
    mesh *m = gen_test_start(&c, &kv_rep, &argc, &argv);
    int cp;
    const char axis = kv_shard_axis(argc, argv, &cp);
    char err[512];
    const int ka = mesh_axis_index(m, axis);
    if (ka < 0) mesh_exit_error("test_kvshard: --kv-shard AXIS of the mesh is needed");
    const int64_t V = c.shape.V, P = mesh_axis_size(m, ka);
    const int64_t B = GEN_TEST_PROMPTS;
    prompt_set ps = {0};
    gen_test_prompts(&ps);
    const int64_t S = ps.max_len + NTOK;
    gen_dims d = {B, S, 64, kv_rep};
    gen *g = (cp ? gen_create_cp : gen_create_kv)(&c, m, &d, axis, err, sizeof err);
    if (!g) mesh_exit_error("%s", err);
    config rc = c; /* the reference: the kv axis holds replicas instead */
    char dp[CONFIG_AXES_LEN];
    config_data_axes(&c, m, dp);
    const size_t ndp = strlen(dp);
    if (!strchr(dp, axis) && ndp + 1 < sizeof rc.data_axes) {
        memcpy(rc.data_axes, dp, ndp);
        rc.data_axes[ndp] = axis;
        rc.data_axes[ndp + 1] = 0;
    }
    gen *ref = gen_create(&rc, m, &d, err, sizeof err);
    if (!ref) mesh_exit_error("%s", err);
    int64_t row0, nb, rrow0, rnb, kidx;
    gen_rows(g, &row0, &nb);
    gen_rows(ref, &rrow0, &rnb);
    const int64_t Pg = gen_kv_shard(g, &kidx), off = rrow0 - row0;
    const mesh_axes kax = {.n = 1, .ax = {ka}};
    int32_t cur[16], next[16], rcur[16], rnext[16];
    float *all = malloc((size_t)(P * nb * V) * sizeof *all);
    gen_step st;
    double worst = 0, rows = 0;
    int mismatches = 0, rank_diff = 0;
    for (int64_t s = 0; s < NTOK; s++) {
        gen_test_step(g, s, &ps, cur, next, &st);
        if (s == 0) rows = st.rows;
        gen_test_step(ref, s, &ps, rcur, rnext, &st);
        for (int64_t b = 0; b < rnb; b++) {
            const double w =
                check_worst_dev(gen_logits(g) + (off + b) * V, gen_logits(ref) + b * V, V);
            worst = w > worst ? w : worst;
            mismatches += rnext[b] != next[off + b];
            rcur[b] = next[off + b];
        }
        for (int64_t b = 0; b < nb; b++) cur[b] = next[b];
        mesh_all_gather(m, kax, all, gen_logits(g), nb * V, MESH_ALG_MPI);
        for (int64_t i = 1; i < P; i++)
            rank_diff += memcmp(all, all + i * nb * V, (size_t)(nb * V) * sizeof *all) != 0;
    }
    char label[160];
    snprintf(label, sizeof label, "rank %d (%s, %s %c, tensor %s, dp %s%s)", mesh_rank(m), c.mesh,
             cp ? "cp" : "kv-shard", axis, c.tensor_axis[0] ? c.tensor_axis : "-",
             c.data_axes[0] ? c.data_axes : "default", kv_rep ? ", kv replicated" : "");
    check_expect(Pg == P && kidx == mesh_axis_coord(m, ka), "%s: gen_kv_shard %lld of %lld", label,
                 (long long)kidx, (long long)Pg);
    check_expect(worst <= TOL_K,
                 "%s: logits vs the unsharded cached decode, prefill + %d steps: worst %.1f eps "
                 "units (k = %.0f)",
                 label, NTOK - 1, worst, TOL_K);
    check_expect(mismatches == 0, "%s: greedy picks equal the unsharded ones (%d mismatches)",
                 label, mismatches);
    double tokens = 0, share = 0, nY = (double)(c.shape.N / model_extents_of(gen_model(g))->Nl);
    for (int64_t b = 0; b < nb; b++)
        tokens += (double)ps.len[row0 + b], share += (double)((ps.len[row0 + b] + P - 1) / P);
    float rows_f = (float)(rows * nY), sum_f = 0;
    mesh_all_reduce(m, kax, &sum_f, &rows_f, 1, MESH_ALG_MPI);
    if (cp)
        check_expect(sum_f == (float)tokens && rows * nY <= share,
                     "%s: the prefill's rows: %.0f here (at most %.0f), %.0f over the axis, of "
                     "%.0f tokens",
                     label, rows * nY, share, (double)sum_f, tokens);
    check_expect(rank_diff == 0, "%s: logits bit-identical on the %lld ranks of the kv axis", label,
                 (long long)P);
    const int64_t mine = gen_cache_bytes(g) / nb, theirs = gen_cache_bytes(ref) / rnb;
    check_expect(mine * S == theirs * ((S + P - 1) / P),
                 "%s: KV bytes per sequence %lld, unsharded %lld: S = %lld positions, %lld per "
                 "rank",
                 label, (long long)mine, (long long)theirs, (long long)S,
                 (long long)((S + P - 1) / P));
    gen_destroy(ref);
    gen_destroy(g);
    prompts_free(&ps);
    free(all);
    mesh_destroy(m);
    const int rcode = check_finish("test_kvshard");
    mesh_mpi_finalize();
    return rcode;
}
