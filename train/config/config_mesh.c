/* config_mesh: the rules of the sharding flags that need the mesh (see config.h), in one place:
 * the sharding plan's input (par_plan_in), and so the trainer, generation and serving, go through
 * config_for_mesh, and the flag-level rules (an axis named twice, --tensor inside --dp, ...) stay
 * in config_validate. */
#include <stdio.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/config/config_flags.h"

/* --schedule's names, in pipe_schedule's order (config_flags.h). Defined here, which config.c and
 * config_check.c call, so that no object of train/config calls back into theirs. */
const char *const config_schedule_names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"};

void config_data_axes(const config *c, const mesh *m, char out[CONFIG_AXES_LEN]) {
    memset(out, 0, CONFIG_AXES_LEN);
    if (c->data_axes[0]) {
        snprintf(out, CONFIG_AXES_LEN, "%s", c->data_axes);
        return;
    }
    int n = 0; /* every axis that --tensor, --pipeline and --cp leave free */
    for (int a = 0; a < mesh_ndims(m) && n < CONFIG_AXES_LEN - 1; a++) {
        const char name = mesh_axis_name(m, a);
        if (c->tensor_axis[0] != name && c->pipe_axis[0] != name && c->cp_axis[0] != name)
            out[n++] = name;
    }
}

static int check_div(char *err, size_t errlen, const char *what, int64_t n, const char *by,
                     int64_t d) {
    if (d > 0 && n % d == 0) return 0;
    return errmsg_fail(err, errlen, "%s = %lld is not divisible by %s = %lld", what, (long long)n,
                       by, (long long)d);
}

/* The tensor axis divides every dimension it shards; fewer kv heads than |Y| are replicated
 * over groups of |Y|/K tensor ranks. */
static int check_tensor(const model_shape *s, const mesh *m, int axis, int64_t nY, char *err,
                        size_t errlen) {
    char by[64];
    snprintf(by, sizeof by, "|%c| (--tensor)", mesh_axis_name(m, axis));
    if (check_div(err, errlen, "query heads N", s->N, by, nY) ||
        check_div(err, errlen, "d_ff F", s->F, by, nY) ||
        check_div(err, errlen, "vocabulary V", s->V, by, nY) ||
        check_div(err, errlen, "d_model D (residual In[B, D_Y])", s->D, by, nY) ||
        (s->moe.E > 0 && check_div(err, errlen, "--expert-d-ff F_e", s->moe.F, by, nY)))
        return -1;
    if (s->K >= nY) return check_div(err, errlen, "kv heads K", s->K, by, nY);
    return check_div(err, errlen, "tensor axis size", nY, "kv heads K", s->K);
}

/* Each mesh axis shards exactly one thing: the batch, the tensor dimension or the layers. */
static int check_axis_use(const config *c, const mesh *m, mesh_axes dax, mesh_axes tax,
                          mesh_axes pax, int64_t nZ, char *err, size_t errlen) {
    int used[MESH_MAX_AXES] = {0};
    for (int k = 0; k < dax.n; k++) used[dax.ax[k]]++;
    if (pax.n) {
        const int a = pax.ax[0];
        CHECK(!used[a] && !(tax.n && tax.ax[0] == a),
              "--pipeline %s reuses an axis: the config "
              "was not validated (config_validate)",
              c->pipe_axis);
        used[a]++;
        char by[64];
        snprintf(by, sizeof by, "|%c| (--pipeline)", mesh_axis_name(m, a));
        if (check_div(err, errlen, "layers L", c->shape.L, by, nZ)) return -1;
    }
    if (tax.n) {
        CHECK(!used[tax.ax[0]],
              "--tensor %s is in --dp: the config was not validated "
              "(config_validate)",
              c->tensor_axis);
        used[tax.ax[0]]++;
    }
    const int cpa = c->cp_axis[0] ? mesh_axis_index(m, c->cp_axis[0]) : -1;
    if (cpa >= 0) used[cpa]++;
    for (int a = 0; a < mesh_ndims(m); a++)
        if (!used[a] && mesh_axis_size(m, a) > 1)
            return errmsg_fail(err, errlen,
                               "mesh axis %c (size %d) is used by none of --dp, --tensor, "
                               "--pipeline, --cp: every rank along it would repeat the same work; add "
                               "it to --dp",
                               mesh_axis_name(m, a), mesh_axis_size(m, a));
    return 0;
}

int config_check_microbatches(const config *c, char *err, size_t errlen) {
    if (c->batch % c->microbatches == 0) return 0;
    return errmsg_fail(err, errlen, "--batch %lld is not divisible by --microbatches %lld",
                       (long long)c->batch, (long long)c->microbatches);
}

/* A pipeline of chunks (interleaved, zb-v) with experts: every chunk of Lc = L/(|Z|·v) layers
 * starts at a multiple of --moe-every n, so that its MoE blocks and dense MLPs are consecutive in
 * their stacks (train/model/stack.c). Counts that do not divide are the schedule's to refuse. */
static int check_expert_chunks(const config *c, const mesh *m, char *err, size_t errlen) {
    const int zbv = c->schedule == PIPE_ZB_V, il = c->schedule == PIPE_INTERLEAVED;
    const int a = c->pipe_axis[0] ? mesh_axis_index(m, c->pipe_axis[0]) : -1;
    if (a < 0 || !(zbv || il)) return 0;
    const int64_t v = c->virtual_stages > 0 ? c->virtual_stages : 2, n = c->shape.moe.every;
    const int64_t S = mesh_axis_size(m, a) * v, L = c->shape.L;
    if (L % S != 0 || (L / S) % n == 0) return 0;
    return errmsg_fail(err, errlen,
                       "--experts with --schedule %s: each of its %lld chunks holds %lld layers, "
                       "not a multiple of --moe-every %lld (every chunk must start a run of "
                       "--moe-every blocks)",
                       config_schedule_names[c->schedule], (long long)S, (long long)(L / S),
                       (long long)n);
}

/* --experts on several ranks: data parallelism, with the routed experts sharded over --expert's
 * axis (one of the data axes, the book's case) or replicated, the tensor axis (the experts'
 * F_e over it) and the pipeline (each stage holds its MoE blocks; chunks: check_expert_chunks). */
static int check_experts(const config *c, const mesh *m, mesh_axes dax, char *err, size_t errlen) {
    const int64_t E = c->shape.moe.E;
    const char *ea = c->expert_axis;
    if (ea[0] && (strlen(ea) != 1 || mesh_axis_index(m, ea[0]) < 0))
        return errmsg_fail(err, errlen, "--expert %s: give one axis of the mesh", ea);
    if (ea[0] && ea[0] == c->tensor_axis[0])
        return errmsg_fail(err, errlen,
                           "--expert %s is the --tensor axis: the experts are sharded over a "
                           "data axis, whose ranks hold different tokens to exchange",
                           ea);
    if (ea[0] && ea[0] == c->dcn_axis[0])
        return errmsg_fail(err, errlen,
                           "--expert %s is the --dcn axis: the experts' AllToAlls stay inside a "
                           "pod (ICI); shard them over another data axis",
                           ea);
    if (ea[0] && ea[0] == c->pipe_axis[0])
        return errmsg_fail(err, errlen,
                           "--expert %s is the --pipeline axis: the experts are sharded over a "
                           "data axis",
                           ea);
    if (check_expert_chunks(c, m, err, errlen) < 0) return -1;
    if (!ea[0]) return 0;
    const int a = mesh_axis_index(m, ea[0]);
    int in_dp = 0;
    for (int k = 0; k < dax.n; k++) in_dp |= dax.ax[k] == a;
    in_dp |= ea[0] == c->cp_axis[0]; /* the context axis: its ranks hold other tokens too */
    if (!in_dp)
        return errmsg_fail(err, errlen,
                           "--expert %s is not a data axis (--dp): the expert axis shards the "
                           "batch too, and its ranks exchange their tokens",
                           ea);
    char by[48];
    snprintf(by, sizeof by, "|%c| (--expert)", ea[0]);
    return check_div(err, errlen, "experts E", E, by, mesh_axis_size(m, a));
}

int config_for_mesh(config *c, const mesh *m, char *err, size_t errlen) {
    if (c->pipe_axis[0]) { /* the pipeline's micro-batches replace --micro-batch */
        const int a = mesh_axis_index(m, c->pipe_axis[0]);
        if (c->microbatches <= 0) c->microbatches = a >= 0 ? mesh_axis_size(m, a) : 1;
        if (config_check_microbatches(c, err, errlen)) return -1;
        c->micro_batch = c->batch / c->microbatches;
    }
    char dp[CONFIG_AXES_LEN];
    config_data_axes(c, m, dp);
    mesh_axes dax, tax, pax;
    if (mesh_axes_parse(m, dp, &dax) != 0)
        return errmsg_fail(err, errlen, "--dp %s: not a list of distinct mesh axes", dp);
    if (mesh_axes_parse(m, c->tensor_axis, &tax) != 0 || tax.n > 1)
        return errmsg_fail(err, errlen, "--tensor %s: must name one mesh axis", c->tensor_axis);
    if (mesh_axes_parse(m, c->pipe_axis, &pax) != 0 || pax.n > 1)
        return errmsg_fail(err, errlen, "--pipeline %s: must name one mesh axis", c->pipe_axis);
    const int64_t nX = mesh_axes_size(m, dax), nY = mesh_axes_size(m, tax);
    if (c->shape.moe.E > 0 && check_experts(c, m, dax, err, errlen)) return -1;
    if (check_axis_use(c, m, dax, tax, pax, mesh_axes_size(m, pax), err, errlen)) return -1;
    if (c->zero > 0 && dax.n == 0 && !c->cp_axis[0])
        return errmsg_fail(err, errlen, "--zero needs data axes to shard over (--dp AXES or --cp)");
    mesh_axes zax = dax; /* the axes ZeRO shards over: --dcn's axis holds replicas */
    if (c->cp_axis[0]) { /* the context axis: its own rules, then ZeRO shards over it too */
        const int a = mesh_axis_index(m, c->cp_axis[0]);
        if (a < 0)
            return errmsg_fail(err, errlen, "--cp %s: the mesh has no axis %s", c->cp_axis,
                               c->cp_axis);
        if (config_check_cp_mesh(c, mesh_axis_size(m, a), mesh_axis_wraps(m, a), nY, err, errlen))
            return -1;
        zax.ax[zax.n++] = a;
    }
    if (c->dcn_axis[0]) {
        const int d = mesh_axis_index(m, c->dcn_axis[0]);
        int at = -1;
        for (int k = 0; k < dax.n; k++)
            if (dax.ax[k] == d) at = k;
        if (at < 0)
            return errmsg_fail(err, errlen, "--dcn %s: not one of the data axes (--dp %s)",
                               c->dcn_axis, dp);
        for (int k = at; k + 1 < zax.n; k++) zax.ax[k] = zax.ax[k + 1];
        zax.n--;
        if (c->zero > 0 && mesh_axes_size(m, zax) == 1)
            return errmsg_fail(err, errlen,
                               "--zero %d shards over the ICI data axes, and --dcn %s leaves "
                               "none: add an ICI axis to --dp, or use --zero 0 (the book: FSDP "
                               "inside a pod, pure data parallelism across pods)",
                               c->zero, c->dcn_axis);
    }
    if (nY > 1 && check_tensor(&c->shape, m, tax.ax[0], nY, err, errlen)) return -1;
    if (c->zero > 0) {
        char buf[16], by[64];
        mesh_axes_str(m, zax, buf, sizeof buf);
        snprintf(by, sizeof by, "|%s| (--dp, ZeRO shards D_%s)", buf, buf);
        if (check_div(err, errlen, "d_model D", c->shape.D, by, mesh_axes_size(m, zax))) return -1;
    }
    if (c->batch % nX != 0 || c->micro_batch % nX != 0)
        return errmsg_fail(err, errlen,
                           "--batch %lld and --micro-batch %lld must be divisible by the %lld "
                           "data shards",
                           (long long)c->batch, (long long)c->micro_batch, (long long)nX);
    return 0;
}
