/* Speculative decoding in generate (train/infer/draft.h) against plain decoding, on the mesh
 * given by the arguments (--mesh SPEC --tensor AXIS --dp AXES --kv-replicate, as `meshtrain
 * generate` takes them): 12 prompts of 1 to 17 bytes, 14 new tokens each, with drafters
 *  - "right": the target itself (the same weights), which should always be kept;
 *  - "wrong": the target with its unembedding negated (it proposes the target's argmin), which
 *    must never be kept;
 *  - "noisy": the target with noise on its unembedding, kept some of the time;
 *  - "small": a 1-layer model of its own initialisation (the shape a real drafter has);
 * and k = 1, 2, 3 and 5 drafted tokens a round:
 *  - greedy: every sequence's tokens equal plain greedy decoding's (gen_prefill, gen_decode)
 *    exactly, for every drafter and k;
 *  - the counts: the right drafter has every drafted token kept, the wrong one none, the noisy
 *    one some but not all;
 *  - sampling (temperature 0.8, top-k 20): the run completes with every sequence's n tokens,
 *    and the right drafter's tokens are kept (α ≥ 0.9), the wrong one's rarely (α ≤ 0.5).
 * Target: fresh initialisation (seed 7), L=2 D=32 N=4 K=2 H=8 F=64 V=256 T=48. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "drafter.h"
#include "mesh/mesh.h"
#include "train/infer/draft.h"
#include "train/infer/gen.h"
#include "train/model/model.h"

#define NTOK 14
#define B 12

/* The drafters: test_drafter_make's three, and a 1-layer model of its own initialisation (the
 * shape a real drafter has). */
enum { D_SMALL = DRAFTER_NOISY + 1, N_DRAFTERS };

static gen *make_drafter(const config *c, mesh *m, const gen_dims *d, int kind) {
    char err[512];
    config dc = *c;
    if (kind == D_SMALL) {
        dc.shape.L = 1;
        dc.seed = 11;
    }
    gen *g = gen_create(&dc, m, d, err, sizeof err);
    if (!g) mesh_exit_error("%s", err);
    if (kind != D_SMALL) test_drafter_make(gen_model(g), (drafter_kind)kind);
    return g;
}

/* Plain greedy: gen_prefill, then gen_decode; out[b·NTOK + s]. */
static void plain(gen *g, const prompt_set *ps, int64_t nb, int32_t *out) {
    int32_t cur[B], next[B];
    gen_step st;
    for (int64_t s = 0; s < NTOK; s++) {
        if (s == 0)
            gen_prefill(g, ps, next, &st);
        else
            gen_decode(g, cur, next, &st);
        for (int64_t b = 0; b < nb; b++) out[b * NTOK + s] = cur[b] = next[b];
    }
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    config c;
    config_defaults(&c);
    char err[512];
    int kv_rep = 0, nargs = 0; /* --kv-replicate is generate's, the others config_parse's */
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--kv-replicate"))
            argv[nargs++] = argv[i];
        else
            kv_rep = 1;
    if (config_parse(&c, nargs, argv, err, sizeof err) < 0) mesh_exit_error("%s", err);
    c.shape = (model_shape){.L = 2, .D = 32, .N = 4, .K = 2, .H = 8, .F = 64, .V = 256, .T = 48};
    c.seed = 7;
    c.temperature = 0; /* gen's own pick (prefill's first token, plain decoding): greedy */
    c.top_k = 0;
    mesh *m = mesh_create(c.mesh, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const char *texts[B] = {"Q",
                            "MENENIUS: ",
                            "What say you",
                            "be",
                            "Second Citizen:",
                            "a b c",
                            "Before we proceed",
                            "I",
                            "QUEEN MARGARET:",
                            "my",
                            "Peace!",
                            "yes"};
    prompt_set ps = {0};
    for (int64_t b = 0; b < B; b++)
        if (prompts_add(&ps, texts[b], strlen(texts[b]), "prompt", err, sizeof err) < 0)
            mesh_exit_error("%s", err);
    const int ks[] = {1, 2, 3, 5};
    gen_dims d = {B, ps.max_len + NTOK, B * (5 + 2) > 64 ? B * (5 + 2) : 64, kv_rep};
    gen *tg = gen_create(&c, m, &d, err, sizeof err);
    if (!tg) mesh_exit_error("%s", err);
    int64_t row0, nb;
    gen_rows(tg, &row0, &nb);
    int32_t *ref = calloc((size_t)(nb * NTOK + 1), 4), *out = calloc((size_t)(nb * NTOK + 1), 4);
    int32_t first[B];
    plain(tg, &ps, nb, ref);
    char label[160];
    snprintf(label, sizeof label, "rank %d (%s, tensor %s, dp %s%s)", mesh_rank(m),
             c.mesh[0] ? c.mesh : "1D", c.tensor_axis[0] ? c.tensor_axis : "-",
             c.data_axes[0] ? c.data_axes : "default", kv_rep ? ", kv replicated" : "");
    for (int kind = 0; kind < N_DRAFTERS; kind++) {
        gen *dg = make_drafter(&c, m, &d, kind);
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            for (int sampled = 0; sampled < 2; sampled++) {
                const double temp = sampled ? 0.8 : 0.0;
                const int64_t top_k = sampled ? 20 : 0;
                gen_step st;
                int32_t dnext[B];
                gen_prefill(tg, &ps, first, &st);
                gen_prefill(dg, &ps, dnext, &st);
                if (sampled) /* the first token is any: let the rounds sample the rest */
                    for (int64_t b = 0; b < nb; b++) first[b] = ref[b * NTOK];
                spec_run r;
                spec_generate(tg, dg, &ps, NTOK, ks[ki], temp, top_k, 3, first, out, &r);
                const double alpha = spec_alpha(&r.all);
                int differ = 0, range = 0;
                for (int64_t i = 0; i < nb * NTOK; i++) {
                    differ += out[i] != ref[i];
                    range += out[i] < 0 || out[i] >= c.shape.V;
                }
                const int64_t made = r.tokens + nb;
                if (!sampled) {
                    const int counts_ok = kind == DRAFTER_RIGHT   ? r.all.accepted == r.all.drafted
                                          : kind == DRAFTER_WRONG ? r.all.accepted == 0
                                          : kind == DRAFTER_NOISY
                                              ? r.all.accepted > 0 && r.all.accepted < r.all.drafted
                                              : 1;
                    check_expect(
                        differ == 0 && counts_ok && made == nb * NTOK,
                        "%s: greedy, %s drafter, k = %d: tokens equal plain greedy's "
                        "(%d differ); drafted %lld, kept %lld, rejected %lld (alpha "
                        "%.2f), %lld target steps for %lld tokens",
                        label, kind == D_SMALL ? "small" : test_drafter_name((drafter_kind)kind),
                        ks[ki], differ, (long long)r.all.drafted, (long long)r.all.accepted,
                        (long long)r.all.rejected, alpha, (long long)r.rounds, (long long)made);
                } else if (kind == DRAFTER_RIGHT || kind == DRAFTER_WRONG) {
                    const int a_ok = kind == DRAFTER_RIGHT ? alpha >= 0.9 : alpha <= 0.5;
                    check_expect(range == 0 && a_ok && made == nb * NTOK,
                                 "%s: sampled (T 0.8, top-k 20), %s drafter, k = %d: %lld "
                                 "tokens in range, alpha %.2f (%lld of %lld kept)",
                                 label,
                                 kind == D_SMALL ? "small" : test_drafter_name((drafter_kind)kind),
                                 ks[ki], (long long)made, alpha, (long long)r.all.accepted,
                                 (long long)r.all.drafted);
                }
                spec_run_free(&r);
            }
        }
        gen_destroy(dg);
    }
    gen_destroy(tg);
    prompts_free(&ps);
    free(ref), free(out);
    mesh_destroy(m);
    const int rc = check_finish("test_draft");
    mesh_mpi_finalize();
    return rc;
}
