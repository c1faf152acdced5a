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

typedef struct {
    const char *flags; /* the flags of the rule, separated by spaces, checked in this order */
    int refused_in;    /* modes where the flags do nothing at all */
    const char *(*unused)(const config *c, config_mode mode); /* NULL: used wherever allowed */
    size_t needs;    /* unused NULL: 0, or the config string (an axis, a chip) the flags need */
    const char *why; /* ...and what the message says when it is empty */
} used_rule;
/* The last three fields of a rule: its flags are used wherever the mode allows them (USED), unless
 * fn says why not (UNLESS), or unless the config string `field` is empty (NEEDS). */
#define USED NULL, 0, NULL
#define UNLESS(fn) fn, 0, NULL
#define NEEDS(field, why) NULL, offsetof(config, field), why

static const used_rule rules[] = {
    /* what training alone does */
    {"batch micro-batch steps optimizer lr warmup", M_GEN, USED},
    {"min-lr", M_GEN, UNLESS(no_decay)},
    {"weight-decay clip", M_GEN, USED},
    {"beta1 beta2 eps", M_GEN, UNLESS(not_adamw)},
    {"data data-order eval-every", M_BENCH | M_GEN, USED},
    {"eval-batches", M_BENCH | M_GEN, UNLESS(no_eval)},
    {"sample", M_BENCH | M_GEN, USED},
    /* serve's prompts come by HTTP */
    {"prompt", M_BENCH | 1 << CONFIG_MODE_SERVE, UNLESS(no_sample)},
    /* the decode sweep prints timings, never the texts it samples */
    {"temperature top-k", M_BENCH | M_GBENCH, UNLESS(no_sample)},
    {"seed quiet", M_GBENCH, USED},
    {"metrics save-init save-final save-every", M_BENCH | M_GEN, USED},
    {"keep", M_BENCH | M_GEN, UNLESS(no_saves)},
    {"ckpt-dir", M_BENCH | M_GEN, UNLESS(no_ckpt_dir)},
    {"resume", M_BENCH | M_GEN, USED},
    {"take-over", M_BENCH | M_GEN, UNLESS(no_ckpt_use)},
    {"demo", M_BENCH | M_GEN, USED},
    {"bench", 1 << CONFIG_MODE_SERVE, USED}, /* generate --bench is generate's mode */
    {"no-matmul-bound", M_TRAIN | M_GEN, USED},
    /* the sharding and collectives of a training step */
    {"dcn", M_GEN, USED},
    /* (generate refuses --zero, --pipeline and --emulate itself, saying why: gen.h) */
    {"overlap", M_GEN, USED},
    {"progress", M_GEN, UNLESS(no_async)},
    {"comm-dtype", M_GEN, USED},
    {"kv-dtype", M_TRAIN | M_BENCH, USED}, /* only generation keeps a KV cache */
    {"bucket", M_GEN, USED},
    {"collective-matmul", M_GEN,
     NEEDS(tensor_axis, "the collective matmul is tensor parallelism's (--tensor)")},
    {"alg", 0, UNLESS(gen_no_tensor)},
    {"emulate-rate", M_GEN, NEEDS(emulate, "the rate stands for the chip of --emulate CHIP")},
    {"microbatches", M_GEN,
     NEEDS(pipe_axis, "only a pipeline (--pipeline AXIS) has micro-batch schedules")},
    {"cp", M_GEN & ~(1 << CONFIG_MODE_GENERATE), USED}, /* generate: the prefill's prompts */
    {"cp-alg", M_GEN & ~(1 << CONFIG_MODE_GENERATE),
     NEEDS(cp_axis, "only a context axis (--cp AXIS) has an attention algorithm")},
    {"schedule", M_GEN,
     NEEDS(pipe_axis, "only a pipeline (--pipeline AXIS) has micro-batch schedules")},
    {"virtual-stages", M_GEN, USED},
    /* the mixture of experts' training losses */
    {"aux-loss-coef router-z-loss-coef", M_GEN, USED},
    /* the inspection flags wire the training loop */
    {"trace debug-collectives", M_GEN, USED},
    {"timeout", M_GEN & ~(1 << CONFIG_MODE_SERVE), USED}, /* serve refuses it, saying why */
};
#undef USED
#undef UNLESS
#undef NEEDS

static const char *const mode_name[] = {"training", "meshtrain --bench", "meshtrain generate",
                                        "meshtrain generate --bench", "meshtrain serve"};

/* NULL when the rule's flags matter for c in `mode`, else why they do not. */
static const char *rule_unused(const used_rule *u, const config *c, config_mode mode) {
    if (u->unused) return u->unused(c, mode);
    return u->needs && !((const char *)c + u->needs)[0] ? u->why : NULL;
}

int config_check_used(const config *c, config_mode mode, const char *const *given, int ngiven,
                      char *err, size_t errlen) {
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        const used_rule *u = &rules[r];
        for (const char *f = u->flags; *f; f += strspn(f, " ")) {
            const size_t len = strcspn(f, " ");
            int k = 0;
            while (k < ngiven && (strlen(given[k]) != len || strncmp(given[k], f, len) != 0)) k++;
            f += len;
            if (k == ngiven) continue;
            if (u->refused_in & (1 << mode))
                return errmsg_fail(err, errlen,
                                   "--%s does nothing in %s: drop it (see --help for what applies)",
                                   given[k], mode_name[mode]);
            const char *why = rule_unused(u, c, mode);
            if (why) return errmsg_fail(err, errlen, "--%s is given but unused: %s", given[k], why);
        }
    }
    return 0;
}
