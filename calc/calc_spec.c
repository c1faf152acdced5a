/* The spec's defaults, its topology, the model presets, the names of its settings and the axes of
 * each role (with split axes). calc.c, calc_moe.c and calc_pipe.c all read these. See calc.h. */
#include "calc/calc.h"

#include <stdio.h>
#include <string.h>

void calc_spec_defaults(calc_spec *s) {
    memset(s, 0, sizeof *s);
    s->chip = *cost_chip_find("v5p");
    s->link = cost_chip_link(&s->chip);
    s->alg = MESH_ALG_DEFAULT;
    s->remat = CALC_REMAT_NONE;
    s->ckpt_n = 1;
    s->microbatches = 1;
    s->schedule = SCHED_GPIPE;
    s->pods = 1;
    /* transformers chapter: bf16 params + fp32 Adam moments = 10 B/param; we add bf16 gradients (2
     * B). */
    s->param_bytes = 2;
    s->grad_bytes = 2;
    s->opt_bytes = 8;
    s->act_bytes = 2;
}

int calc_spec_set_topology(calc_spec *s, const int *sizes, int n_axes, char *err, size_t errlen) {
    if (cost_topology_check(&s->chip, sizes, n_axes, err, errlen) < 0) return -1;
    s->n_axes = n_axes;
    for (int i = 0; i < n_axes; i++) {
        s->sizes[i] = sizes[i];
        s->names[i] = (char)('x' + i);
        s->wraps[i] = cost_axis_wraps(&s->chip, sizes, n_axes, i);
    }
    return 0;
}

int calc_model_preset(model_shape *m, const char *name) {
    /* applied-training chapter: LLaMA-3-70B. Training chapter Q1: LLaMA-2-13B (F = 2.7·D, exactly
     * 13,824). */
    static const struct {
        const char *name;
        model_shape s;
    } presets[] = {
        {"llama3-70b", {80, 8192, 64, 8, 128, 28672, 128256, 4096, {0}}},
        {"llama2-13b", {40, 5120, 40, 40, 128, 13824, 32000, 4096, {0}}},
        /* Mixtral 8x7B's published sizes (its experts: calc_moe_preset) */
        {"mixtral-8x7b", {32, 4096, 32, 8, 128, 14336, 32000, 4096, {0}}},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(name, presets[i].name) == 0) {
            *m = presets[i].s;
            return 0;
        }
    return -1;
}

/* ---- axes of a role, with splits ---- */

const char *calc_path_name(calc_path p) {
    return p == CALC_PATH_CRITICAL ? "critical" : p == CALC_PATH_PREFETCH ? "prefetch" : "async";
}

const char *calc_weights_bound(double batch, double crit) {
    return batch > crit ? "FLOP-bound" : "HBM-bound";
}

const char *calc_alg_name(mesh_alg a) {
    return a == MESH_ALG_DEFAULT ? "auto" : mesh_alg_name(a);
}

int calc_alg_parse(const char *s) {
    if (strcmp(s, "auto") == 0) return MESH_ALG_DEFAULT;
    const int a = mesh_alg_parse(s);
    return a == MESH_ALG_DEFAULT || a == MESH_ALG_MPI ? -1 : a;
}

void calc_topology_str(const calc_spec *s, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_axes && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? "x" : "", s->sizes[i]);
}

const char *calc_remat_str(const calc_spec *s, int detail, char *buf, size_t len) {
    static const char *names[] = {"none", "block", "ffw3"};
    static const char *details[] = {" (~20 [B,D] tensors per layer)", " (layer inputs only)",
                                    " (3 FFW matmul outputs)"};
    if (s->remat == CALC_REMAT_CKPT)
        snprintf(buf, len, detail ? "ckpt%d (%d [B,D] tensors per layer)" : "ckpt%d", s->ckpt_n,
                 s->ckpt_n);
    else if (s->remat == CALC_REMAT_MESHTRAIN)
        snprintf(buf, len, "meshtrain%s", detail ? " (as meshtrain saves them)" : "");
    else
        snprintf(buf, len, "%s%s", names[s->remat], detail ? details[s->remat] : "");
    return buf;
}

int calc_axis_split(const calc_spec *s, int axis) {
    const int k = s->tensor_block[axis];
    return (s->tensor_mask & (1 << axis)) && k > 1 && k < s->sizes[axis];
}

int calc_role_mask(const calc_spec *s, calc_role role) {
    return role == CALC_ROLE_DATA          ? s->data_mask
           : role == CALC_ROLE_TENSOR      ? s->tensor_mask
           : role == CALC_ROLE_EXPERT      ? s->moe.expert_mask
           : role == CALC_ROLE_EXPERT_DATA ? s->data_mask & ~s->moe.expert_mask
                                           : s->pipe_mask;
}

void calc_axes_str(const calc_spec *s, calc_role role, char *out, size_t len) {
    const int mask = calc_role_mask(s, role);
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < s->n_axes && k < len; i++) {
        if (!(mask & (1 << i))) continue;
        if (calc_axis_split(s, i))
            k += (size_t)snprintf(out + k, len - k, "%c%c%d", s->names[i],
                                  role == CALC_ROLE_TENSOR ? ':' : '/', s->tensor_block[i]);
        else
            k += (size_t)snprintf(out + k, len - k, "%c", s->names[i]);
    }
}

void calc_axes_label(const calc_spec *s, calc_role role, char *out, size_t len) {
    calc_axes_str(s, role, out, len);
    if (!out[0]) snprintf(out, len, "-");
}
