/* The config's checks beyond the flag table's ranges: axis names, the model's shape, the
 * sharding flags and the collectives' choices, each with one message naming the flag
 * (config_validate in config.c runs them after the ranges). */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/config/config_check.h"

/* Axis names x, y, z, none repeated; commas allowed (and ignored) when `commas`. */
static int check_axes(const char *flag, const char *axes, bool commas, char *err, size_t errlen) {
    for (const char *p = axes; *p; p++) {
        if (commas && *p == ',') continue;
        if (*p != 'x' && *p != 'y' && *p != 'z')
            return errmsg_fail(err, errlen,
                               "--%s %s: axes are named x, y, z (e.g. --%s x or --%s %s)", flag,
                               axes, flag, flag, commas ? "x,z" : "xz");
        if (strchr(p + 1, *p))
            return errmsg_fail(err, errlen, "--%s %s: axis %c is listed twice", flag, axes, *p);
    }
    return 0;
}

/* The mixture-of-experts layers of a model with experts. */
static int config_check_moe(const model_shape *s, char *err, size_t errlen) {
    const moe_shape *mo = &s->moe;
    if (mo->k < 1)
        return errmsg_fail(err, errlen, "--moe-top-k %lld: each token goes to at least 1 expert",
                           (long long)mo->k);
    if (mo->k > mo->E)
        return errmsg_fail(err, errlen,
                           "--moe-top-k %lld is more than --experts %lld: a token goes to k "
                           "distinct experts; choose k <= E",
                           (long long)mo->k, (long long)mo->E);
    if (mo->every < 1 || mo->every > s->L)
        return errmsg_fail(err, errlen,
                           "--moe-every %lld: must be from 1 to --layers %lld (every n-th block's "
                           "MLP is MoE: blocks n-1, 2n-1, ...; n > L leaves none)",
                           (long long)mo->every, (long long)s->L);
    if (mo->F < 1)
        return errmsg_fail(err, errlen, "--expert-d-ff %lld: an expert needs a width >= 1",
                           (long long)mo->F);
    return 0;
}

/* The model's shape, the batch, the schedule and the files. */
int config_check_model(const config *c, char *err, size_t errlen) {
    const model_shape *s = &c->shape;
    if (s->N % s->K != 0) {
        char divs[256] = "";
        size_t used = 0;
        for (int64_t k = 1; k <= s->N && used + 24 < sizeof divs; k++)
            if (s->N % k == 0)
                used += (size_t)snprintf(divs + used, sizeof divs - used, "%s%lld",
                                         used ? ", " : "", (long long)k);
        return errmsg_fail(
            err, errlen,
            "--heads %lld is not divisible by --kv-heads %lld: each kv head serves N/K "
            "query heads; choose --kv-heads from %s",
            (long long)s->N, (long long)s->K, divs);
    }
    if (s->H % 2 != 0)
        return errmsg_fail(
            err, errlen,
            "head dim %lld (--head-dim, default d-model/heads) is odd: rotary embedding "
            "pairs element i with i + H/2, so it must be even",
            (long long)s->H);
    if (s->moe.E > 0 && config_check_moe(s, err, errlen) < 0) return -1;
    if (c->batch % c->micro_batch != 0)
        return errmsg_fail(
            err, errlen,
            "--batch %lld is not a multiple of --micro-batch %lld: pick a micro-batch "
            "that divides the batch",
            (long long)c->batch, (long long)c->micro_batch);
    if (c->min_lr > c->lr)
        return errmsg_fail(err, errlen,
                           "--min-lr %g is above --lr %g: the schedule decays to min-lr", c->min_lr,
                           c->lr);
    if (!c->bench && c->data[0] == '\0')
        return errmsg_fail(err, errlen,
                           "--data is empty: give a token (.h5) or text file, or --bench");
    if ((c->save_every > 0 || strcmp(c->resume, "latest") == 0) && c->ckpt_dir[0] == '\0')
        return errmsg_fail(err, errlen,
                           "--ckpt-dir is empty: give the directory of the checkpoints");
    return 0;
}

/* The sharding flags on their own (the rules that need the mesh: config_mesh.c). */
int config_check_sharding(const config *c, char *err, size_t errlen) {
    if (check_axes("dp", c->data_axes, false, err, errlen)) return -1;
    if (check_axes("open", c->mesh_open, true, err, errlen)) return -1;
    if (check_axes("cross-hosts", c->cross_hosts, false, err, errlen)) return -1;
    if (c->tensor_axis[0]) {
        if (strlen(c->tensor_axis) != 1 || check_axes("tensor", c->tensor_axis, false, err, errlen))
            return errmsg_fail(err, errlen, "--tensor %s: give one axis, x, y or z",
                               c->tensor_axis);
        if (strchr(c->data_axes, c->tensor_axis[0]))
            return errmsg_fail(
                err, errlen,
                "--tensor %s is also in --dp %s: one axis cannot shard both the batch "
                "and the weights' model dimension",
                c->tensor_axis, c->data_axes);
    }
    if (c->cmatmul == 1 && !c->tensor_axis[0])
        return errmsg_fail(err, errlen,
                           "--collective-matmul on needs a tensor axis (--tensor AXIS): it "
                           "overlaps tensor parallelism's collectives with its matmuls");
    if (c->pipe_axis[0]) {
        if (strlen(c->pipe_axis) != 1 || check_axes("pipeline", c->pipe_axis, false, err, errlen))
            return errmsg_fail(err, errlen, "--pipeline %s: give one axis, x, y or z",
                               c->pipe_axis);
        if (strchr(c->data_axes, c->pipe_axis[0]) || strchr(c->tensor_axis, c->pipe_axis[0]))
            return errmsg_fail(
                err, errlen,
                "--pipeline %s is also used by --dp or --tensor: one axis cannot shard "
                "both the layers and another dimension",
                c->pipe_axis);
        if (c->microbatches > 0 && config_check_microbatches(c, err, errlen)) return -1;
    }
    if (c->dcn_axis[0]) {
        if (strlen(c->dcn_axis) != 1 || check_axes("dcn", c->dcn_axis, false, err, errlen))
            return errmsg_fail(err, errlen, "--dcn %s: give one axis, x, y or z", c->dcn_axis);
        if (strchr(c->tensor_axis, c->dcn_axis[0]) || strchr(c->pipe_axis, c->dcn_axis[0]))
            return errmsg_fail(err, errlen,
                               "--dcn %s is the --tensor or --pipeline axis: only data "
                               "parallelism runs across the data-center network",
                               c->dcn_axis);
        if (c->data_axes[0] && !strchr(c->data_axes, c->dcn_axis[0]))
            return errmsg_fail(err, errlen,
                               "--dcn %s is not among --dp %s: the DCN axis is a "
                               "data axis",
                               c->dcn_axis, c->data_axes);
    }
    return 0;
}

/* The collective algorithm and the wire format. */
int config_check_collectives(const config *c, char *err, size_t errlen) {
    const int elem = mesh_wire_bytes(c->comm_dtype);
    if (c->bucket > 0 && c->bucket < elem)
        return errmsg_fail(err, errlen,
                           "--bucket %lld: smaller than one element on the wire (%s: %d bytes); "
                           "the minimum is %d bytes (or 0 = off, auto)",
                           (long long)c->bucket, mesh_wire_name(c->comm_dtype), elem, elem);
    if (c->emulate_rate == CONFIG_RATE_MODEL && !c->emulate[0])
        return errmsg_fail(err, errlen,
                           "--emulate-rate model needs --emulate CHIP: the rate stands for an "
                           "emulated chip's peak FLOP/s, and without --emulate no link is scaled");
    if (c->progress == CONFIG_PROGRESS_INLINE && c->emulate[0])
        return errmsg_fail(err, errlen,
                           "--progress inline with --emulate: the link emulation sleeps until "
                           "each message's emulated delivery, which needs the progress thread "
                           "(use --progress thread or auto)");
    if (c->comm_dtype == MESH_WIRE_BF16 && (c->alg == MESH_ALG_MPI || c->alg == MESH_ALG_DIRECT))
        return errmsg_fail(err, errlen,
                           "--comm-dtype bf16 needs --alg ring, bidir, seq or multi: %s moves fp32",
                           mesh_alg_name(c->alg));
    return 0;
}
