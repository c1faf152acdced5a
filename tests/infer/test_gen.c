/* Generation with a KV cache against independent truth, on the mesh given by the arguments
 * (--mesh SPEC --tensor AXIS --dp AXES --kv-replicate, as `meshtrain generate` takes them):
 *  - the logits of prefill and of every cached decode step match the training forward
 *    (model_next_logits on a whole, unsharded model that recomputes the full prefix) within
 *    |a − b| ≤ k·FLT_EPSILON·(|a| + |b| + 1), k = TOL_K below;
 *  - the last decode step's logits match a full recompute through the cache path (a fresh
 *    prefill of prompt + generated tokens) within the same tolerance;
 *  - greedy tokens equal those of the training forward run on each prompt alone, so a batch of
 *    unequal prompt lengths (1, 7, 13, 3, ... bytes, no padding) gives every sequence the same
 *    tokens as alone.
 * Fresh initialisation (seed 7), L=2 D=32 N=4 K=2 H=8 F=64 V=256. With --experts E (one rank),
 * block 1 is a mixture of E experts (top-2, F_e 48, a shared expert), with --capacity-factor c
 * dropping past ceil(c·k·T/E) slots of a sequence: generation keeps each sequence's counts from
 * its prefill through every decode step, so its tokens equal the training forward's. With
 * --expert AXIS (a data axis) the routed experts are sharded over it: every prefill and cached
 * decode step dispatches the tokens to their experts' ranks and back (AllToAllv). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gen_test.h"
#include "mesh/mesh.h"
#include "train/infer/gen.h"
#include "train/model/hooks.h"
#include "train/model/model.h"
#include "train/model/sample.h"

#define TOL_K 200.0
#define NTOK 10

/* The flags beyond the mesh's: --experts E, --capacity-factor C. */
static void parse(config *c, int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--experts")) /* a mixture of experts, top-2, every other block */
            c->shape.moe =
                (moe_shape){.E = atoll(argv[i + 1]), .k = 2, .every = 2, .F = 48, .shared = 1};
        if (!strcmp(argv[i], "--capacity-factor")) c->shape.moe.capacity = atof(argv[i + 1]);
    }
}

int main(int argc, char **argv) {
    config c;
    int kv_rep;
    mesh *m = gen_test_start(&c, &kv_rep, &argc, &argv);
    parse(&c, argc, argv);
    char err[512];
    const int64_t V = c.shape.V;
    const int64_t B = GEN_TEST_PROMPTS;
    prompt_set ps = {0};
    gen_test_prompts(&ps);
    /* with an expert axis, prefill chunks of at most 17 rows: the ranks' prompts then take
     * different numbers of forwards (3 ranks: 2, 3, 2), and every rank joins every AllToAll */
    gen_dims d = {B, ps.max_len + NTOK, c.expert_axis[0] ? 17 : 64, kv_rep};
    gen *g = gen_create(&c, m, &d, err, sizeof err);
    if (!g) mesh_exit_error("%s", err);
    int64_t row0, nb;
    gen_rows(g, &row0, &nb);
    model *ref = model_create(&c.shape, 1, c.seed, &model_hooks_single);
    int32_t *tok = calloc((size_t)(nb * NTOK), 4), cur[16], next[16], seq[64];
    float *lref = malloc((size_t)V * 4);
    sample_item *items = malloc((size_t)V * sizeof *items);
    gen_step st;
    double worst = 0;
    int mismatches = 0;
    for (int64_t s = 0; s < NTOK; s++) {
        gen_test_step(g, s, &ps, cur, next, &st);
        for (int64_t b = 0; b < nb; b++) {
            const int64_t gb = row0 + b, plen = ps.len[gb];
            for (int64_t i = 0; i < plen; i++) seq[i] = ps.tok[gb][i];
            for (int64_t i = 0; i < s; i++) seq[plen + i] = tok[b * NTOK + i];
            model_next_logits(ref, seq, plen + s, lref);
            const double w = check_worst_dev(gen_logits(g) + b * V, lref, V);
            worst = w > worst ? w : worst;
            const int32_t want = sample_pick(lref, V, 0.0, 0, 0.0, items);
            if (want != next[b]) {
                mismatches++;
                printf("rank %d: sequence %lld token %lld: cached %d, training forward %d\n",
                       mesh_rank(m), (long long)gb, (long long)s, next[b], want);
            }
            tok[b * NTOK + s] = next[b];
            cur[b] = next[b];
        }
    }
    /* a full recompute of each prefix through the cache path: the last step's logits */
    float *last = malloc((size_t)(nb * V) * 4);
    memcpy(last, gen_logits(g), (size_t)(nb * V) * 4);
    prompt_set full = {0};
    gen_test_prefixes(&full, &ps, tok, NTOK, row0, nb);
    gen_dims d2 = {B, full.max_len + 1, 64, kv_rep};
    gen *g2 = gen_create(&c, m, &d2, err, sizeof err);
    if (!g2) mesh_exit_error("%s", err);
    gen_prefill(g2, &full, next, &st);
    const double wre = check_worst_dev(last, gen_logits(g2), nb * V);
    char label[160];
    snprintf(label, sizeof label, "rank %d (%s, tensor %s, dp %s%s)", mesh_rank(m),
             c.mesh[0] ? c.mesh : "1D", c.tensor_axis[0] ? c.tensor_axis : "-",
             c.data_axes[0] ? c.data_axes : "default", kv_rep ? ", kv replicated" : "");
    check_expect(worst <= TOL_K,
                 "%s: cached logits vs the training forward, %lld steps: worst %.1f eps units "
                 "(k = %.0f)",
                 label, (long long)NTOK, worst, TOL_K);
    check_expect(wre <= TOL_K,
                 "%s: last decode logits vs a full recompute of the prefix: worst %.1f eps units",
                 label, wre);
    check_expect(mismatches == 0,
                 "%s: greedy tokens of %lld sequences of unequal length equal each one alone "
                 "(%d mismatches)",
                 label, (long long)nb, mismatches);
    gen_destroy(g2);
    gen_destroy(g);
    model_destroy(ref);
    prompts_free(&ps);
    prompts_free(&full);
    free(tok), free(lref), free(items), free(last);
    mesh_destroy(m);
    const int rc = check_finish("test_gen");
    mesh_mpi_finalize();
    return rc;
}
