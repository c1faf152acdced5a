/* config_limits: what no flag's range can say alone. The sizes the run forms by multiplying flags
 * (the logits are micro-batch × seq-len × vocab floats) must stay exact in the int64_t element
 * counts of the allocator and the kernels, each flag within its own range or not; a chip to
 * emulate must be in the table; and a string flag's value that is longer than any valid one gets
 * the list of valid values, as any other wrong value does. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mesh/cost.h"
#include "mesh/errmsg.h"
#include "train/config/config.h"

/* The most elements one array may hold: 2^53 (exact in a double, and ×8 bytes within int64_t). */
#define LIMIT_ELEMS 9007199254740992.0

/* "v3, v4p, v5e, v5p or v6e" from the chip table. */
static const char *chip_list(char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    const int k = cost_chip_count();
    for (int i = 0; i < k && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s",
                              i == 0       ? ""
                              : i == k - 1 ? " or "
                                           : ", ",
                              cost_chip_at(i)->name);
    return buf;
}

const char *config_str_expect(const char *flag, char *buf, size_t len) {
    static const struct {
        const char *flag, *expect;
    } choices[] = {
        {"progress", "thread, inline or auto"},
        {"emulate-rate", "peak or model"},
        {"comm-dtype", "fp32 or bf16"},
        {"alg", "ring, bidir, seq, multi, mpi or direct"},
        {"tensor", "one axis, x, y or z"},
        {"pipeline", "one axis, x, y or z"},
        {"dcn", "one axis, x, y or z"},
        {"cp", "one axis, x, y or z"},
        {"cp-alg", "allgather, ring or ulysses"},
        {"dp", "axes named x, y, z, each at most once"},
        {"data-axes", "axes named x, y, z, each at most once"},
        {"open", "axes named x, y, z, each at most once"},
        {"cross-hosts", "axes named x, y, z, each at most once"},
    };
    if (strcmp(flag, "emulate") == 0) return chip_list(buf, len);
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if (strcmp(flag, choices[i].flag) == 0) return choices[i].expect;
    return NULL;
}

int config_check_limits(const config *c, char *err, size_t errlen) {
    char chips[64];
    if (c->emulate[0] && !cost_chip_find(c->emulate))
        return errmsg_fail(err, errlen, "--emulate %s: unknown chip (expected %s)", c->emulate,
                           chip_list(chips, sizeof chips));
    const model_shape *s = &c->shape;
    const double B = (double)c->micro_batch, T = (double)s->T, L = (double)s->L;
    const double D = (double)s->D, F = (double)s->F, V = (double)s->V, NH = (double)(s->N * s->H);
    const struct {
        const char *what;
        double n;
    } sizes[] = {
        {"the logits, --micro-batch x --seq-len x --vocab", B * T * V},
        {"the MLP's activations, --micro-batch x --seq-len x --d-ff", B * T * F},
        {"the attention's activations, --micro-batch x --seq-len x --heads x --head-dim",
         B * T * NH},
        {"the activations kept for the backward pass, --layers x --micro-batch x --seq-len x "
         "--d-model",
         L * B * T * D},
        {"the MLP weights, --layers x --d-model x --d-ff", L * D * F},
        {"the attention weights, --layers x --d-model x --heads x --head-dim", L * D * NH},
        {"the embedding, --vocab x --d-model", V * D},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].n > LIMIT_ELEMS)
            return errmsg_fail(err, errlen,
                               "%s = %.3g elements: more than one array can hold (2^53 = %.0f); "
                               "make one of these flags smaller",
                               sizes[i].what, sizes[i].n, LIMIT_ELEMS);
    return 0;
}
