/* config_used: no flag is silently ignored. A flag given on the command line must change what the
 * command does; where it cannot (a training flag to `generate`, --beta1 with --optimizer sgd,
 * --keep without --save-every), the command refuses it, naming it and why. One row per rule,
 * read by config_parse_for after the other checks. */
#include <stddef.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "train/config/config.h"

/* M_GEN: generation (generate, its decode sweep, serve); M_GBENCH: the decode sweep alone. */
enum {
    M_TRAIN = 1 << CONFIG_MODE_TRAIN,
    M_BENCH = 1 << CONFIG_MODE_BENCH,
    M_GBENCH = 1 << CONFIG_MODE_GEN_BENCH,
    M_GEN = 1 << CONFIG_MODE_GENERATE | M_GBENCH | 1 << CONFIG_MODE_SERVE
};

/* Each returns NULL when the flag matters for c in `mode`, else why it does not. */
static const char *no_sample(const config *c, config_mode mode) {
    return c->sample > 0 || mode == CONFIG_MODE_GENERATE || mode == CONFIG_MODE_SERVE
               ? NULL
               : "only --sample N > 0 generates text at the end of training";
}
static const char *no_decay(const config *c, config_mode mode) {
    (void)mode;
    return c->steps - c->warmup > 1 ? NULL
                                    : "the learning rate decays to --min-lr over the steps after "
                                      "--warmup, and --steps minus --warmup leaves fewer than 2";
}
static const char *no_eval(const config *c, config_mode mode) {
    (void)mode;
    return c->eval_every > 0 ? NULL : "--eval-every 0 runs no evaluation";
}
static const char *not_adamw(const config *c, config_mode mode) {
    (void)mode;
    return c->optimizer == OPT_ADAMW ? NULL : "only AdamW has moments (--optimizer sgd)";
}
static const char *no_saves(const config *c, config_mode mode) {
    (void)mode;
    return c->save_every > 0 ? NULL : "only --save-every N > 0 writes checkpoints there";
}
static const char *no_ckpt_dir(const config *c, config_mode mode) {
    (void)mode;
    return c->save_every > 0 || strcmp(c->resume, "latest") == 0
               ? NULL
               : "the checkpoint directory is used by --save-every N > 0 and --resume latest";
}
static const char *no_ckpt_use(const config *c, config_mode mode) {
    (void)mode;
    return c->save_every > 0 || c->resume[0]
               ? NULL
               : "ownership of checkpoints matters only with --save-every or --resume";
}
static const char *no_pipe(const config *c, config_mode mode) {
    (void)mode;
    return c->pipe_axis[0] ? NULL : "only a pipeline (--pipeline AXIS) has micro-batch schedules";
}
static const char *no_emulate(const config *c, config_mode mode) {
    (void)mode;
    return c->emulate[0] ? NULL : "the rate stands for the chip of --emulate CHIP";
}
static const char *no_tensor(const config *c, config_mode mode) {
    (void)mode;
    return c->tensor_axis[0] ? NULL : "the collective matmul is tensor parallelism's (--tensor)";
}
static const char *no_async(const config *c, config_mode mode) {
    (void)mode;
    return c->overlap || c->tensor_axis[0]
               ? NULL
               : "only --overlap and the collective matmul (--tensor) run asynchronous "
                 "collectives";
}
static const char *gen_no_tensor(const config *c, config_mode mode) {
    return (mode != CONFIG_MODE_GENERATE && mode != CONFIG_MODE_GEN_BENCH &&
            mode != CONFIG_MODE_SERVE) ||
                   c->tensor_axis[0]
               ? NULL
               : "generation's collectives are tensor parallelism's (--tensor)";
}
static const char *no_cp(const config *c, config_mode mode) {
    (void)mode;
    return c->cp_axis[0] ? NULL : "only a context axis (--cp AXIS) has an attention algorithm";
}
static const char *never(const config *c, config_mode mode) {
    (void)mode;
    (void)c;
    return NULL;
}

typedef struct {
    const char *flag;
    int refused_in; /* modes where the flag does nothing at all */
    const char *(*unused)(const config *c, config_mode mode);
} used_rule;

static const used_rule rules[] = {
    /* what training alone does */
    {"batch", M_GEN, never},
    {"micro-batch", M_GEN, never},
    {"steps", M_GEN, never},
    {"optimizer", M_GEN, never},
    {"lr", M_GEN, never},
    {"warmup", M_GEN, never},
    {"min-lr", M_GEN, no_decay},
    {"weight-decay", M_GEN, never},
    {"clip", M_GEN, never},
    {"beta1", M_GEN, not_adamw},
    {"beta2", M_GEN, not_adamw},
    {"eps", M_GEN, not_adamw},
    {"data", M_BENCH | M_GEN, never},
    {"data-order", M_BENCH | M_GEN, never},
    {"eval-every", M_BENCH | M_GEN, never},
    {"eval-batches", M_BENCH | M_GEN, no_eval},
    {"sample", M_BENCH | M_GEN, never},
    {"prompt", M_BENCH | 1 << CONFIG_MODE_SERVE, no_sample}, /* serve's prompts come by HTTP */
    /* the decode sweep prints timings, never the texts it samples */
    {"temperature", M_BENCH | M_GBENCH, no_sample},
    {"top-k", M_BENCH | M_GBENCH, no_sample},
    {"seed", M_GBENCH, never},
    {"quiet", M_GBENCH, never},
    {"metrics", M_BENCH | M_GEN, never},
    {"save-init", M_BENCH | M_GEN, never},
    {"save-final", M_BENCH | M_GEN, never},
    {"save-every", M_BENCH | M_GEN, never},
    {"keep", M_BENCH | M_GEN, no_saves},
    {"ckpt-dir", M_BENCH | M_GEN, no_ckpt_dir},
    {"resume", M_BENCH | M_GEN, never},
    {"take-over", M_BENCH | M_GEN, no_ckpt_use},
    {"demo", M_BENCH | M_GEN, never},
    {"bench", 1 << CONFIG_MODE_SERVE, never}, /* generate --bench is generate's mode */
    {"no-matmul-bound", M_TRAIN | M_GEN, never},
    /* the sharding and collectives of a training step */
    {"dcn", M_GEN, never},
    /* (generate refuses --zero, --pipeline and --emulate itself, saying why: gen.h) */
    {"overlap", M_GEN, never},
    {"progress", M_GEN, no_async},
    {"comm-dtype", M_GEN, never},
    {"kv-dtype", M_TRAIN | M_BENCH, never},             /* only generation keeps a KV cache */
    {"bucket", M_GEN, never},
    {"collective-matmul", M_GEN, no_tensor},
    {"alg", 0, gen_no_tensor},
    {"emulate-rate", M_GEN, no_emulate},
    {"microbatches", M_GEN, no_pipe},
    {"cp", M_GEN & ~(1 << CONFIG_MODE_GENERATE), never}, /* generate: the prefill's prompts */
    {"cp-alg", M_GEN & ~(1 << CONFIG_MODE_GENERATE), no_cp},
    {"schedule", M_GEN, no_pipe},
    {"virtual-stages", M_GEN, never},
    /* the mixture of experts' training losses */
    {"aux-loss-coef", M_GEN, never},
    {"router-z-loss-coef", M_GEN, never},
    /* the inspection flags wire the training loop */
    {"trace", M_GEN, never},
    {"debug-collectives", M_GEN, never},
    {"timeout", M_GEN & ~(1 << CONFIG_MODE_SERVE), never}, /* serve refuses it, saying why */
};

static const char *const mode_name[] = {"training", "meshtrain --bench", "meshtrain generate",
                                        "meshtrain generate --bench", "meshtrain serve"};

int config_check_used(const config *c, config_mode mode, const char *const *given, int ngiven,
                      char *err, size_t errlen) {
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        const used_rule *u = &rules[r];
        int k = 0;
        while (k < ngiven && strcmp(given[k], u->flag) != 0) k++;
        if (k == ngiven) continue;
        if (u->refused_in & (1 << mode))
            return errmsg_fail(err, errlen,
                               "--%s does nothing in %s: drop it (see --help for what applies)",
                               u->flag, mode_name[mode]);
        const char *why = u->unused(c, mode);
        if (why) return errmsg_fail(err, errlen, "--%s is given but unused: %s", u->flag, why);
    }
    return 0;
}
