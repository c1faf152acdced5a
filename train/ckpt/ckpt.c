/* ckpt: see ckpt.h and docs/checkpoints.md.
 *
 * How a save works. Every array of the file is a global logical array; each rank holds a slab of
 * it (parameters: model_slab; AdamW m and v: par_state_slab, the global slab of the slice it
 * updates). A block held by several ranks (replicated over the data axes, or over tensor ranks
 * for norm gains and shared kv heads) has one owner (par_is_writer; rank 0 without a plan) and
 * the owners' slabs tile the array exactly, so one collective h5array_write per array puts every
 * element in place once. The same owners compute the array's checksum over their slabs; one
 * AllReduce adds the partial sums. A load reads this rank's slabs of its own layout — any mesh,
 * any scheme — and the owners of that layout recompute the checksum from what they read.
 *
 * Atomicity comes from h5array: the file is written as path.tmp.<pid>, fsynced and renamed only
 * when every rank has succeeded; a failure (a full disk) deletes the temp file and leaves the
 * previous checkpoint untouched. Older checkpoints are pruned only after the rename. */
/* opendir, mkdir, stat, statvfs; not unistd.h, whose pipe() clashes with pipe.h's type */
#define _POSIX_C_SOURCE 200809L
#include "train/ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "data/hash.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/model/model.h"
#include "train/parallel/par.h"

#define CKPT_ERR_LEN 1024
enum { G_PARAMS, G_M, G_V, NGROUPS };
static const char *const group_name[NGROUPS] = {"params", "optimizer/m", "optimizer/v"};

/* ---- checksums ---- */

void ckpt_checksum_add(uint64_t *sum, const float *data, int ndim, const int64_t *dims,
                       const int64_t *offset, const int64_t *count) {
    int64_t d[4] = {1, 1, 1, 1}, o[4] = {0, 0, 0, 0}, n[4] = {1, 1, 1, 1};
    for (int i = 0; i < ndim && i < 4; i++) d[i] = dims[i], o[i] = offset[i], n[i] = count[i];
    if (n[0] * n[1] * n[2] * n[3] == 0) return;
    uint64_t s = *sum;
    const float *p = data;
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++)
            for (int64_t c = 0; c < n[2]; c++, p += n[3]) {
                const uint64_t g0 =
                    (uint64_t)((((o[0] + a) * d[1] + o[1] + b) * d[2] + o[2] + c) * d[3] + o[3]);
                for (int64_t e = 0; e < n[3]; e++) {
                    uint32_t u;
                    memcpy(&u, p + e, sizeof u);
                    s += hash_mix64((g0 + (uint64_t)e) * 0x9e3779b97f4a7c15ull + u);
                }
            }
    *sum = s;
}

/* Collective over: world. v[i] ← Σ over ranks of v[i] (mod 2^64), exactly: each value travels as
 * its 8 bytes in floats, whose sums (≤ 255 · ranks < 2^24) are exact in any order. */
static void sum_over_world(mesh *m, uint64_t *v, int n) {
    float *limb = calloc((size_t)(16 * n), sizeof *limb);
    CHECK(limb, "out of memory for %d checksums", n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 8; k++) limb[8 * i + k] = (float)((v[i] >> (8 * k)) & 255u);
    mesh_all_reduce(m, mesh_all_axes(m), limb + 8 * n, limb, 8 * n, MESH_ALG_MPI);
    for (int i = 0; i < n; i++) {
        uint64_t s = 0;
        for (int k = 0; k < 8; k++) s += (uint64_t)limb[8 * n + 8 * i + k] << (8 * k);
        v[i] = s;
    }
    free(limb);
}

/* ---- the arrays of a trainer ---- */

/* One array of the file as this rank holds it. */
typedef struct {
    char name[96]; /* "params/wq", "optimizer/m/wq" */
    param_info pi; /* global shape */
    param_slab slab;
    h5array_rows rows; /* the slab's layers in blocks (an interleaved pipeline's chunks) */
    float *data;       /* the slab, row-major (the blocks one after another) */
    int owner;         /* writes the slab / counts it in the checksum */
} ckpt_array;

static int64_t slab_numel(const param_info *pi, const param_slab *s) {
    int64_t n = 1;
    for (int i = 0; i < pi->ndim; i++) n *= s->cnt[i];
    return n;
}

/* A stack over blocks on a rank holding chunks (interleaved, or a V): its slab (stored layers
 * [l0, l1), or the stage's dense MLPs or MoE blocks) becomes the chunks' blocks of the global
 * stack, a constant stride apart (|Z|·Lc layers dealt round-robin; (2|Z|−1−2r)·Lc in a V);
 * else one block. */
static void chunk_rows(const model *mod, param_id id, ckpt_array *a) {
    a->rows = H5ARRAY_ONE_BLOCK;
    const int v = model_chunks(mod);
    if (v == 1 || !model_param_stacked(id) || a->slab.cnt[0] == 0) return;
    int64_t g0, g1, n;
    model_stack_chunk(mod, id, 1, &g1, &n);
    model_stack_chunk(mod, id, 0, &g0, &n);
    a->rows = (h5array_rows){v, g1 - g0};
    a->slab.cnt[0] = n;
    a->slab.off[0] = g0;
}

/* Adds a's slab (every block) to its checksum. */
static void checksum_slab(uint64_t *sum, const ckpt_array *a) {
    const int64_t per = slab_numel(&a->pi, &a->slab);
    param_slab b = a->slab;
    for (int64_t k = 0; k < a->rows.blocks; k++, b.off[0] += a->rows.stride)
        ckpt_checksum_add(sum, a->data + k * per, a->pi.ndim, a->pi.shape, b.off, b.cnt);
}

static int64_t array_numel(const param_info *pi) {
    int64_t n = 1;
    for (int i = 0; i < pi->ndim; i++) n *= pi->shape[i];
    return n;
}

/* The trainer's arrays in file order (params, then m and v for AdamW); returns how many. */
static int list_arrays(trainer *t, mesh *m, ckpt_array *out) {
    model *mod = trainer_model(t);
    par *run = trainer_par(t);
    const model_shape *s = model_shape_of(mod);
    float *om, *ov;
    int64_t nstate;
    trainer_opt_state(t, &om, &ov, &nstate);
    const int ng = om ? NGROUPS : 1;
    int n = 0;
    for (int g = 0; g < ng; g++)
        for (int id = 0; id < model_param_ids(s); id++) {
            if (model_param_numel(s, (param_id)id) == 0) continue; /* e.g. no dense MLP */
            ckpt_array *a = &out[n++];
            a->pi = model_param_info(s, (param_id)id);
            snprintf(a->name, sizeof a->name, "%s/%s", group_name[g], a->pi.name);
            /* without a plan every rank holds everything (one rank, or the serial reference) */
            a->owner = run ? par_is_writer(run, (param_id)id, g != G_PARAMS) : mesh_rank(m) == 0;
            int64_t cnt;
            if (g == G_PARAMS) {
                a->slab = *model_slab(mod, (param_id)id);
                a->data = model_param(mod, (param_id)id, &cnt);
            } else {
                const par_owned o = par_owned_slice(run, mod, (param_id)id);
                a->slab = par_state_slab(run, mod, (param_id)id);
                a->data = (g == G_M ? om : ov) + o.state_off;
                cnt = o.n;
                CHECK(o.state_off + o.n <= nstate, "optimizer slice of %s outside the state",
                      a->pi.name);
            }
            chunk_rows(mod, (param_id)id, a);
            const int64_t held = a->rows.blocks * slab_numel(&a->pi, &a->slab);
            CHECK(held == cnt, "%s: slab of %lld elements, storage of %lld", a->name,
                  (long long)held, (long long)cnt);
        }
    return n;
}

/* ---- metadata ---- */

static const char *optim_name(optim_kind o) {
    return o == OPT_SGD ? "sgd" : "adamw";
}

/* The scheme in words ("FSDP (ZeRO-3) over x + TP over y"), as the run's summary names it. */
static void sharding_str(trainer *t, char *buf, size_t len) {
    if (!trainer_par(t)) {
        snprintf(buf, len, "none (every rank holds the whole model)");
        return;
    }
    report_case k;
    plan_report_case(trainer_plan(t), &k, buf, len);
}

/* Root attributes from tables of (key, value). */
typedef struct {
    const char *key;
    int64_t v;
} attr_i64;
typedef struct {
    const char *key;
    double v;
} attr_f64;
static int put_attrs(h5array *f, const attr_i64 *ints, size_t ni, const attr_f64 *dbls, size_t nd,
                     char *err, size_t errlen) {
    int rc = 0;
    for (size_t i = 0; i < ni && rc == 0; i++)
        rc = h5array_attr_put_i64(f, "/", ints[i].key, ints[i].v, err, errlen);
    for (size_t i = 0; i < nd && rc == 0; i++)
        rc = h5array_attr_put_f64(f, "/", dbls[i].key, dbls[i].v, err, errlen);
    return rc;
}

/* The model's shape as root attributes, written and read in this order. */
static const struct {
    const char *key;
    size_t off; /* of an int64_t in model_shape */
} shape_attrs[] = {{"layers", offsetof(model_shape, L)},   {"d_model", offsetof(model_shape, D)},
                   {"heads", offsetof(model_shape, N)},    {"kv_heads", offsetof(model_shape, K)},
                   {"head_dim", offsetof(model_shape, H)}, {"d_ff", offsetof(model_shape, F)},
                   {"vocab", offsetof(model_shape, V)},    {"seq_len", offsetof(model_shape, T)}};
enum { N_SHAPE_ATTRS = sizeof shape_attrs / sizeof shape_attrs[0] };

static int64_t *shape_field(model_shape *s, int i) {
    return (int64_t *)(void *)((char *)s + shape_attrs[i].off);
}

/* With experts, their attributes (a dense model's file has none: get_moe). */
static int put_moe(h5array *f, const moe_shape *mo, char *err, size_t errlen) {
    if (mo->E == 0) return 0;
    const attr_i64 ints[] = {{"experts", mo->E},
                             {"moe_top_k", mo->k},
                             {"moe_every", mo->every},
                             {"shared_experts", mo->shared},
                             {"expert_d_ff", mo->F}};
    const attr_f64 dbls[] = {{"capacity_factor", mo->capacity},
                             {"aux_loss_coef", mo->aux_coef},
                             {"router_z_loss_coef", mo->z_coef}};
    return put_attrs(f, ints, sizeof ints / sizeof *ints, dbls, sizeof dbls / sizeof *dbls, err,
                     errlen);
}

static int put_meta(h5array *f, trainer *t, mesh *m, const config *c, int64_t step,
                    int64_t tokens_seen, char *err, size_t errlen) {
    model_shape s = c->shape;
    attr_i64 ints[9 + N_SHAPE_ATTRS] = {{"version", CKPT_VERSION},    {"step", step},
                                        {"tokens_seen", tokens_seen}, {"data_step", step},
                                        {"seed", (int64_t)c->seed},   {"batch", c->batch},
                                        {"warmup", c->warmup},        {"schedule_steps", c->steps}};
    for (int i = 0; i < N_SHAPE_ATTRS; i++)
        ints[8 + i] = (attr_i64){shape_attrs[i].key, *shape_field(&s, i)};
    ints[8 + N_SHAPE_ATTRS] = (attr_i64){"written_by_ranks", mesh_nranks(m)};
    const attr_f64 dbls[] = {{"lr", c->lr},
                             {"min_lr", c->min_lr},
                             {"weight_decay", c->weight_decay},
                             {"beta1", c->beta1},
                             {"beta2", c->beta2},
                             {"eps", c->eps},
                             {"clip", c->clip},
                             {"lr_next", trainer_lr(c, step)}};
    char mspec[96], shard[160];
    const char *slash = strrchr(c->data, '/');
    sharding_str(t, shard, sizeof shard);
    const struct {
        const char *key, *v;
    } strs[] = {{"format", CKPT_FORMAT},
                {"run_id", c->run_id},
                {"data_order", tokens_order_name(c->order)},
                {"data", slash ? slash + 1 : c->data},
                {"optimizer", optim_name(c->optimizer)},
                {"written_by_mesh", mesh_spec_str(m, mspec, sizeof mspec)},
                {"written_by_sharding", shard}};
    int rc = 0;
    for (size_t i = 0; i < sizeof strs / sizeof strs[0] && rc == 0; i++)
        rc = h5array_attr_put_str(f, "/", strs[i].key, strs[i].v, err, errlen);
    if (rc == 0)
        rc = put_attrs(f, ints, sizeof ints / sizeof *ints, dbls, sizeof dbls / sizeof *dbls, err,
                       errlen);
    return rc == 0 ? put_moe(f, &s.moe, err, errlen) : rc;
}

/* The mixture-of-experts attributes: a checkpoint without `experts` (older, or dense) holds a
 * dense model, all 0; with experts every one of them must be there. */
static int get_moe(h5array *f, moe_shape *mo, const char *path, char *err, size_t errlen) {
    char e[CKPT_ERR_LEN];
    *mo = (moe_shape){0};
    if (h5array_attr_get_i64(f, "/", "experts", &mo->E, e, sizeof e) < 0 || mo->E == 0) {
        mo->E = 0;
        return 0;
    }
    const struct {
        const char *key;
        int64_t *v;
    } ints[] = {{"moe_top_k", &mo->k},
                {"moe_every", &mo->every},
                {"shared_experts", &mo->shared},
                {"expert_d_ff", &mo->F}};
    int rc = 0;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && rc == 0; i++)
        rc = h5array_attr_get_i64(f, "/", ints[i].key, ints[i].v, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_f64(f, "/", "capacity_factor", &mo->capacity, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_f64(f, "/", "aux_loss_coef", &mo->aux_coef, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_f64(f, "/", "router_z_loss_coef", &mo->z_coef, e, sizeof e);
    if (rc < 0) return errmsg_fail(err, errlen, "damaged checkpoint header: %s", e);
    if (mo->E < 0 || mo->k < 1 || mo->k > mo->E || mo->every < 1 || mo->shared < 0 || mo->F < 1)
        return errmsg_fail(err, errlen,
                           "%s: damaged checkpoint header (experts %lld, moe_top_k %lld, "
                           "moe_every %lld, shared_experts %lld, expert_d_ff %lld)",
                           path, (long long)mo->E, (long long)mo->k, (long long)mo->every,
                           (long long)mo->shared, (long long)mo->F);
    return 0;
}

int ckpt_meta_get(h5array *f, ckpt_meta *k, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    const char *path = h5array_path(f);
    char fmt[64] = "", e[CKPT_ERR_LEN];
    if (h5array_attr_get_str(f, "/", "format", fmt, sizeof fmt, e, sizeof e) < 0)
        return errmsg_fail(err, errlen,
                           "%s: not a meshtrain checkpoint (an HDF5 file without a 'format' "
                           "attribute)",
                           path);
    if (strcmp(fmt, CKPT_FORMAT) != 0)
        return errmsg_fail(
            err, errlen, "%s: not a meshtrain checkpoint (its format is '%s'%s)", path, fmt,
            strcmp(fmt, "meshtrain-tokens") == 0 ? ": a token file, for --data" : "");
    if (h5array_attr_get_i64(f, "/", "version", &k->version, e, sizeof e) < 0)
        return errmsg_fail(err, errlen, "%s: damaged checkpoint header: %s", path, e);
    if (k->version > CKPT_VERSION)
        return errmsg_fail(err, errlen,
                           "%s: checkpoint format version %lld is newer than this meshtrain "
                           "reads (up to %d): resume it with a newer meshtrain",
                           path, (long long)k->version, CKPT_VERSION);
    if (k->version < 1)
        return errmsg_fail(err, errlen, "%s: invalid checkpoint format version %lld", path,
                           (long long)k->version);
    int64_t seed = 0;
    const struct {
        const char *key;
        int64_t *v;
    } ints[] = {{"step", &k->step},     {"tokens_seen", &k->tokens_seen},
                {"seed", &seed},        {"batch", &k->batch},
                {"warmup", &k->warmup}, {"schedule_steps", &k->schedule_steps}};
    char order[32] = "", opt[32] = "";
    int rc = 0;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && rc == 0; i++)
        rc = h5array_attr_get_i64(f, "/", ints[i].key, ints[i].v, e, sizeof e);
    for (int i = 0; i < N_SHAPE_ATTRS && rc == 0; i++)
        rc = h5array_attr_get_i64(f, "/", shape_attrs[i].key, shape_field(&k->shape, i), e,
                                  sizeof e);
    if (rc == 0) rc = h5array_attr_get_i64(f, "/", "written_by_ranks", &k->ranks, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_f64(f, "/", "lr", &k->lr, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_f64(f, "/", "min_lr", &k->min_lr, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_str(f, "/", "data_order", order, sizeof order, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_str(f, "/", "optimizer", opt, sizeof opt, e, sizeof e);
    if (rc == 0) rc = h5array_attr_get_str(f, "/", "data", k->data, sizeof k->data, e, sizeof e);
    if (rc == 0)
        rc = h5array_attr_get_str(f, "/", "written_by_mesh", k->mesh, sizeof k->mesh, e, sizeof e);
    if (rc == 0)
        rc = h5array_attr_get_str(f, "/", "written_by_sharding", k->sharding, sizeof k->sharding, e,
                                  sizeof e);
    if (rc < 0) return errmsg_fail(err, errlen, "damaged checkpoint header: %s", e);
    /* optional: checkpoints written before runs had ids carry none ("") */
    if (h5array_attr_get_str(f, "/", "run_id", k->run_id, sizeof k->run_id, e, sizeof e) < 0)
        k->run_id[0] = '\0';
    if (get_moe(f, &k->shape.moe, path, err, errlen) < 0) return -1;
    k->seed = (uint64_t)seed;
    const int order_ok = tokens_order_parse(order) >= 0;
    const int opt_ok = !strcmp(opt, "adamw") || !strcmp(opt, "sgd");
    const model_shape *s = &k->shape;
    if (!order_ok || !opt_ok || k->step < 0 || k->batch < 1 || s->L < 1 || s->D < 1 || s->N < 1 ||
        s->K < 1 || s->H < 1 || s->F < 1 || s->V < 1 || s->T < 1)
        return errmsg_fail(err, errlen,
                           "%s: damaged checkpoint header (data_order '%s', optimizer '%s', "
                           "step %lld, a model size below 1?)",
                           path, order, opt, (long long)k->step);
    k->order = (tokens_order)tokens_order_parse(order);
    k->optimizer = !strcmp(opt, "sgd") ? OPT_SGD : OPT_ADAMW;
    return 0;
}

/* A flag's value in the checkpoint and on the command line. */
typedef struct {
    const char *flag;
    int64_t file, flags;
} flag_match;

/* −1 with the message for the first flag whose values differ ("the <whose> shape must match"). */
static int check_match(const flag_match *f, size_t n, const char *whose, const char *path,
                       char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (f[i].file != f[i].flags)
            return errmsg_fail(err, errlen,
                               "%s: checkpoint has --%s %lld, flags say %lld (the %s shape must "
                               "match; give --%s %lld)",
                               path, f[i].flag, (long long)f[i].file, (long long)f[i].flags, whose,
                               f[i].flag, (long long)f[i].file);
    return 0;
}

/* A dense checkpoint against MoE flags or the reverse, then the experts' shape. */
static int check_moe(const moe_shape *file, const moe_shape *flags, const char *path, char *err,
                     size_t errlen) {
    if ((file->E == 0) != (flags->E == 0))
        return errmsg_fail(err, errlen,
                           "%s: checkpoint holds a %s model%s, flags say %s: a dense model and a "
                           "mixture of experts have different parameters (%s)",
                           path, file->E ? "mixture-of-experts" : "dense",
                           file->E ? "" : " (no --experts)", flags->E ? "--experts" : "dense",
                           file->E ? "give the checkpoint's --experts and MoE flags, see "
                                     "`meshtrain ckpt info`"
                                   : "leave out --experts");
    const flag_match f[] = {{"experts", file->E, flags->E},
                            {"moe-top-k", file->k, flags->k},
                            {"moe-every", file->every, flags->every},
                            {"shared-experts", file->shared, flags->shared},
                            {"expert-d-ff", file->F, flags->F}};
    return check_match(f, sizeof f / sizeof f[0], "experts'", path, err, errlen);
}

int ckpt_check_config(const ckpt_meta *k, const config *c, const char *path, char *err,
                      size_t errlen) {
    const flag_match f[] = {
        {"layers", k->shape.L, c->shape.L},   {"d-model", k->shape.D, c->shape.D},
        {"heads", k->shape.N, c->shape.N},    {"kv-heads", k->shape.K, c->shape.K},
        {"head-dim", k->shape.H, c->shape.H}, {"d-ff", k->shape.F, c->shape.F},
        {"vocab", k->shape.V, c->shape.V}};
    if (check_match(f, sizeof f / sizeof f[0], "model's", path, err, errlen) < 0) return -1;
    if (check_moe(&k->shape.moe, &c->shape.moe, path, err, errlen) < 0) return -1;
    if (k->optimizer != c->optimizer)
        return errmsg_fail(err, errlen,
                           "%s: checkpoint has --optimizer %s, flags say %s (its optimizer "
                           "state would be %s)",
                           path, optim_name(k->optimizer), optim_name(c->optimizer),
                           k->optimizer == OPT_ADAMW ? "dropped" : "missing");
    return 0;
}

/* ---- write and load ---- */

/* After a failed save: appends the free space of path's file system to the message, so that a
 * full disk says so whatever layer noticed it first. */
static void add_free_space(char *err, size_t errlen, const char *path, double need) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0'; /* the root directory */
    else
        *slash = '\0';
    struct statvfs sv;
    const size_t used = err ? strlen(err) : 0;
    if (!err || used + 1 >= errlen || statvfs(dir, &sv) != 0) return;
    snprintf(err + used, errlen - used, " [%.1f MB free in %s, the checkpoint needs %.1f MB]",
             (double)sv.f_bavail * (double)sv.f_frsize / 1e6, dir, need / 1e6);
}

int ckpt_write(trainer *t, mesh *m, const config *c, int64_t step, int64_t tokens_seen,
               const char *path, ckpt_io *io, char *err, size_t errlen) {
    const double t0 = mesh_now();
    ckpt_array a[NGROUPS * P_ALL];
    const int n = list_arrays(t, m, a);
    uint64_t sum[NGROUPS * P_ALL] = {0};
    double bytes = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].owner) checksum_slab(&sum[i], &a[i]);
        bytes += 4.0 * (double)array_numel(&a[i].pi);
    }
    sum_over_world(m, sum, n);
    h5array *f = NULL;
    int rc = h5array_create(&f, path, mesh_world_comm(m), err, errlen);
    for (int i = 0; i < n && rc == 0; i++) {
        rc = h5array_write_rows(f, a[i].name, a[i].pi.ndim, a[i].pi.shape, a[i].slab.off,
                                a[i].slab.cnt, a[i].rows, a[i].owner, a[i].data, err, errlen);
        if (rc == 0)
            rc = h5array_attr_put_i64(f, a[i].name, "checksum", (int64_t)sum[i], err, errlen);
    }
    if (rc == 0) rc = put_meta(f, t, m, c, step, tokens_seen, err, errlen);
    if (rc == 0) rc = h5array_commit(f, err, errlen);
    h5array_close(f);
    if (rc < 0) add_free_space(err, errlen, path, bytes);
    if (io) *io = (ckpt_io){bytes, mesh_now() - t0};
    return rc;
}

/* Reads a[0..n) from the open file and checks each array's checksum (summed over the owners of
 * its slabs). */
static int read_arrays(h5array *f, mesh *m, ckpt_array *a, int n, const char *path, double *bytes,
                       char *err, size_t errlen) {
    uint64_t sum[NGROUPS * P_ALL] = {0}, want[NGROUPS * P_ALL] = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = h5array_read_rows(f, a[i].name, a[i].pi.ndim, a[i].pi.shape, a[i].slab.off,
                               a[i].slab.cnt, a[i].rows, a[i].data, err, errlen);
        int64_t w = 0;
        if (rc == 0) rc = h5array_attr_get_i64(f, a[i].name, "checksum", &w, err, errlen);
        want[i] = (uint64_t)w;
        if (rc == 0 && a[i].owner) checksum_slab(&sum[i], &a[i]);
        *bytes += 4.0 * (double)array_numel(&a[i].pi);
    }
    if (rc < 0) return rc;
    sum_over_world(m, sum, n);
    for (int i = 0; i < n; i++)
        if (sum[i] != want[i])
            return errmsg_fail(err, errlen,
                               "%s: corrupt checkpoint: the data of /%s do not match its "
                               "checksum (stored %016" PRIx64 ", computed %016" PRIx64 ")",
                               path, a[i].name, want[i], sum[i]);
    return 0;
}

int ckpt_load(trainer *t, mesh *m, const config *c, const char *path, ckpt_meta *k, ckpt_io *io,
              char *err, size_t errlen) {
    const double t0 = mesh_now();
    h5array *f = NULL;
    int rc = h5array_open(&f, path, mesh_world_comm(m), err, errlen);
    if (rc == 0) rc = ckpt_meta_get(f, k, err, errlen);
    if (rc == 0 && ckpt_check_config(k, c, path, err, errlen) < 0) rc = -1;
    ckpt_array a[NGROUPS * P_ALL];
    double bytes = 0;
    if (rc == 0) rc = read_arrays(f, m, a, list_arrays(t, m, a), path, &bytes, err, errlen);
    h5array_close(f);
    if (rc < 0) return rc;
    par_params_loaded(trainer_par(t), trainer_model(t));
    model_params_changed(trainer_model(t)); /* bf16 compute: the weights' copy made again */
    if (io) *io = (ckpt_io){bytes, mesh_now() - t0};
    return 0;
}

int ckpt_load_params(model *mod, par *run, mesh *m, const char *path, char *err, size_t errlen) {
    h5array *f = NULL;
    int rc = h5array_open(&f, path, mesh_world_comm(m), err, errlen);
    ckpt_array a[P_ALL];
    const model_shape *s = model_shape_of(mod);
    int n = 0;
    for (int id = 0; id < model_param_ids(s); id++) {
        if (model_param_numel(s, (param_id)id) == 0) continue;
        ckpt_array *b = &a[n++];
        b->pi = model_param_info(s, (param_id)id);
        snprintf(b->name, sizeof b->name, "%s/%s", group_name[G_PARAMS], b->pi.name);
        b->owner = run ? par_is_writer(run, (param_id)id, 0) : mesh_rank(m) == 0;
        b->slab = *model_slab(mod, (param_id)id);
        chunk_rows(mod, (param_id)id, b);
        b->data = model_param(mod, (param_id)id, NULL);
    }
    double bytes = 0;
    if (rc == 0) rc = read_arrays(f, m, a, n, path, &bytes, err, errlen);
    h5array_close(f);
    if (rc == 0) par_params_loaded(run, mod), model_params_changed(mod);
    return rc;
}

/* ---- directories ---- */

/* mkdir -p; then creates and deletes a probe file, so that an unwritable directory is reported
 * before training, not at the first save. */
static int prepare_dir(const char *dir, char *err, size_t errlen) {
    char p[1100];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        const char ch = *s;
        if (ch != '/' && ch != '\0') continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return errmsg_fail(err, errlen, "--ckpt-dir %s: cannot create %s (%s)", dir, p,
                               strerror(errno));
        *s = ch;
        if (ch == '\0') break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return errmsg_fail(err, errlen, "--ckpt-dir %s: not a directory", dir);
    FILE *probe = NULL;
    for (int i = 0; i < 100 && !probe; i++) { /* "wx": never touch an existing file */
        snprintf(p, sizeof p, "%s/.meshtrain-probe.%d", dir, i);
        probe = fopen(p, "wx");
        if (!probe && errno != EEXIST) break;
    }
    if (!probe)
        return errmsg_fail(err, errlen, "--ckpt-dir %s: cannot create a file there (%s)", dir,
                           strerror(errno));
    fclose(probe);
    remove(p);
    return 0;
}

/* Rank 0: "note: ..." lines for settings of the run that differ from the checkpoint's. */
static void print_notes(const ckpt_meta *k, const config *c) {
    if (k->seed != c->seed)
        mesh_log("note: resuming with the checkpoint's --seed %llu (flags say %llu): batches are "
                 "a function of (seed, step)\n",
                 (unsigned long long)k->seed, (unsigned long long)c->seed);
    if (k->order != c->order)
        mesh_log("note: resuming with the checkpoint's --data-order %s (flags say %s)\n",
                 tokens_order_name(k->order), tokens_order_name(c->order));
    if (k->schedule_steps != c->steps || k->warmup != c->warmup || k->lr != c->lr ||
        k->min_lr != c->min_lr)
        mesh_log("note: the learning-rate schedule changes at step %lld: the checkpoint's was "
                 "--steps %lld --warmup %lld --lr %g --min-lr %g, now --steps %lld --warmup %lld "
                 "--lr %g --min-lr %g\n",
                 (long long)k->step, (long long)k->schedule_steps, (long long)k->warmup, k->lr,
                 k->min_lr, (long long)c->steps, (long long)c->warmup, c->lr, c->min_lr);
    const char *slash = strrchr(c->data, '/'), *data = slash ? slash + 1 : c->data;
    if (strcmp(k->data, data) != 0)
        mesh_log("note: the checkpoint was trained on %s, continuing on %s\n", k->data, data);
    if (k->batch != c->batch || k->shape.T != c->shape.T)
        mesh_log("note: the checkpoint was trained with --batch %lld --seq-len %lld, continuing "
                 "with --batch %lld --seq-len %lld\n",
                 (long long)k->batch, (long long)k->shape.T, (long long)c->batch,
                 (long long)c->shape.T);
}

int ckpt_run_setup(config *c, mesh *m, char *err, size_t errlen) {
    const mesh_comm *world = mesh_world_comm(m);
    int st = 0;
    if (c->save_every > 0 && mesh_rank(m) == 0) st = prepare_dir(c->ckpt_dir, err, errlen);
    if (mesh_agree_msg(world, st, err, errlen) < 0) return -1;
    if (!c->resume[0]) return ckpt_dir_claim(c, m, NULL, 0, err, errlen);
    const int latest = strcmp(c->resume, "latest") == 0;
    if (strcmp(c->resume, "latest") == 0) { /* every rank scans: they see the same directory */
        char path[sizeof c->resume];
        int64_t step;
        st = ckpt_latest(c->ckpt_dir, path, sizeof path, &step, err, errlen);
        if (mesh_agree_msg(world, st, err, errlen) < 0) return -1;
        memcpy(c->resume, path, sizeof path);
    }
    char e[CKPT_ERR_LEN];
    ckpt_meta k;
    h5array *f = NULL;
    st = h5array_open(&f, c->resume, world, e, sizeof e);
    if (st == 0) st = ckpt_meta_get(f, &k, e, sizeof e);
    h5array_close(f);
    if (st < 0) return errmsg_fail(err, errlen, "--resume: %s", e);
    if (ckpt_check_config(&k, c, c->resume, e, sizeof e) < 0)
        return errmsg_fail(err, errlen, "--resume: %s", e);
    if (k.step > c->steps)
        return errmsg_fail(err, errlen,
                           "--resume %s: the checkpoint is at step %lld, past --steps %lld "
                           "(--steps counts from step 0: give more to continue)",
                           c->resume, (long long)k.step, (long long)c->steps);
    if (ckpt_dir_claim(c, m, &k, latest, err, errlen) < 0) return -1;
    print_notes(&k, c);
    c->seed = k.seed;
    c->order = k.order;
    return 0;
}
