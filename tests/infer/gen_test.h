/* gen_test: what the generation tests share: the small model they decode (fresh initialisation,
 * seed 7, greedy), their 12 prompts of unequal length (1 to 17 bytes, no padding) and their mesh
 * flags, and the start of their main. */
#ifndef MT_TESTS_INFER_GEN_TEST_H
#define MT_TESTS_INFER_GEN_TEST_H
#include <stdio.h>
#include <string.h>

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/infer/gen.h"
#include "train/infer/prompts.h"

/* L=2 D=32 N=4 K=2 H=8 F=64 V=256 T=48, seed 7, greedy, into the defaults. */
static inline void gen_test_config(config *c) {
    config_defaults(c);
    c->shape = (model_shape){.L = 2, .D = 32, .N = 4, .K = 2, .H = 8, .F = 64, .V = 256, .T = 48};
    c->seed = 7;
    c->temperature = 0;
    c->top_k = 0;
}

/* The mesh flags of argv[1..argc) into c: --mesh SPEC, --tensor AXIS, --dp AXES, --expert AXIS
 * (each followed by its value); *kv_replicate = 1 when --kv-replicate is there (unchanged otherwise). */
static inline void gen_test_mesh_flags(config *c, int *kv_replicate, int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mesh")) snprintf(c->mesh, sizeof c->mesh, "%s", argv[i + 1]);
        if (!strcmp(argv[i], "--tensor"))
            snprintf(c->tensor_axis, sizeof c->tensor_axis, "%s", argv[i + 1]);
        if (!strcmp(argv[i], "--dp"))
            snprintf(c->data_axes, sizeof c->data_axes, "%s", argv[i + 1]);
        if (!strcmp(argv[i], "--expert"))
            snprintf(c->expert_axis, sizeof c->expert_axis, "%s", argv[i + 1]);
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--kv-replicate")) *kv_replicate = 1;
}

/* The tests' start: MPI up, gen_test_config into *c, the mesh flags of argv into c and
 * *kv_replicate (0 without --kv-replicate), and the mesh of c->mesh (a bad one ends the job). */
static inline mesh *gen_test_start(config *c, int *kv_replicate, int *argc, char ***argv) {
    mesh_mpi_init(argc, argv);
    gen_test_config(c);
    *kv_replicate = 0;
    gen_test_mesh_flags(c, kv_replicate, *argc, *argv);
    char err[512];
    mesh *m = mesh_create(c->mesh, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    return m;
}

#define GEN_TEST_PROMPTS 12
/* The prompts into ps (empty before). */
static inline void gen_test_prompts(prompt_set *ps) {
    static const char *const texts[GEN_TEST_PROMPTS] = {"R",
                                                        "ROMEO: ",
                                                        "To be or not ",
                                                        "ab",
                                                        "First Citizen:",
                                                        "x y",
                                                        "Now is the winter",
                                                        "O",
                                                        "KING RICHARD III:",
                                                        "thou",
                                                        "Hark!",
                                                        "no"};
    char err[256];
    for (int b = 0; b < GEN_TEST_PROMPTS; b++)
        if (prompts_add(ps, texts[b], strlen(texts[b]), "prompt", err, sizeof err) < 0)
            mesh_exit_error("%s", err);
}

/* Step s of a generation: the prefill of ps at s = 0, else the decode of cur. */
static inline void gen_test_step(gen *g, int64_t s, const prompt_set *ps, const int32_t *cur,
                                 int32_t *next, gen_step *st) {
    if (s == 0)
        gen_prefill(g, ps, next, st);
    else
        gen_decode(g, cur, next, st);
}

/* Into full (empty before): each prompt b of ps followed by the first ntok − 1 tokens this rank
 * generated for it (tok[(b − row0)·ntok + i], rows row0 .. row0 + nb − 1), 'a's for the prompts
 * of other ranks: the whole prefixes whose last logits the generation's last step computed. */
static inline void gen_test_prefixes(prompt_set *full, const prompt_set *ps, const int32_t *tok,
                                     int64_t ntok, int64_t row0, int64_t nb) {
    char err[256];
    for (int64_t b = 0; b < ps->n; b++) {
        char buf[64];
        const int64_t bl = b - row0, plen = ps->len[b];
        for (int64_t i = 0; i < plen; i++) buf[i] = (char)ps->tok[b][i];
        for (int64_t i = 0; i < ntok - 1; i++)
            buf[plen + i] = (char)(bl >= 0 && bl < nb ? tok[bl * ntok + i] : 'a');
        if (prompts_add(full, buf, (size_t)(plen + ntok - 1), "prefix", err, sizeof err) < 0)
            mesh_exit_error("%s", err);
    }
}
#endif
