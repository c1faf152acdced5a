/* ckpt_cli: `meshtrain ckpt info FILE` and `meshtrain ckpt diff A B [--tol K]` (see ckpt.h).
 * Rank 0 does the work alone (mesh_self_comm()), reading each array in blocks of whole rows of at
 * most CLI_BLOCK elements (or one row, where a row is larger), so any checkpoint fits in a little
 * memory; the other ranks wait for the verdict. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/paths.h"
#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"

#define CLI_BLOCK (1 << 22) /* elements per read */
#define CLI_ERR_LEN 1024

/* "[4, 8, 2]" */
static const char *shape_str(char *buf, size_t len, int ndim, const int64_t *dims) {
    int at = snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at >= 0 && (size_t)at < len; i++)
        at += snprintf(buf + at, len - (size_t)at, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (at >= 0 && (size_t)at < len) snprintf(buf + at, len - (size_t)at, "]");
    return buf;
}

/* The elements of one row of dim 0. */
static int64_t row_size(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 1; i < ndim; i++) n *= dims[i];
    return n;
}

/* Rows of dim 0 per block: as many whole rows as fit in CLI_BLOCK elements, at least one. */
static int64_t block_rows(int ndim, const int64_t *dims) {
    const int64_t row = row_size(ndim, dims);
    return row > CLI_BLOCK ? 1 : CLI_BLOCK / row;
}

/* The block of `rows` rows from row r0 (clipped at the last row) as a slab off[ndim], cnt[ndim].
 * Returns its element count. */
static int64_t block_slab(int ndim, const int64_t *dims, int64_t r0, int64_t rows, int64_t *off,
                          int64_t *cnt) {
    for (int i = 0; i < ndim; i++) off[i] = 0, cnt[i] = dims[i];
    off[0] = r0;
    cnt[0] = dims[0] - r0 < rows ? dims[0] - r0 : rows;
    return cnt[0] * row_size(ndim, dims);
}

/* Makes *buf hold a block of the array dims[ndim] (see block_rows): grown when one row is larger
 * than CLI_BLOCK. Returns 0, or -1 (out of memory, *buf kept). */
static int block_buf(float **buf, int64_t *cap, int ndim, const int64_t *dims, char *err,
                     size_t errlen) {
    const int64_t need = block_rows(ndim, dims) * row_size(ndim, dims);
    if (need <= *cap) return 0;
    float *b = realloc(*buf, (size_t)need * sizeof *b);
    if (!b)
        return errmsg_fail(err, errlen, "out of memory for a block of %lld elements",
                           (long long)need);
    *buf = b, *cap = need;
    return 0;
}

static void print_meta(const ckpt_meta *k, const char *path) {
    const model_shape *s = &k->shape;
    printf("%s: %s version %lld\n", path, CKPT_FORMAT, (long long)k->version);
    printf("  step %lld | tokens seen %lld | seed %llu | data %s, %s order, next batch = step "
           "%lld\n",
           (long long)k->step, (long long)k->tokens_seen, (unsigned long long)k->seed, k->data,
           tokens_order_name(k->order), (long long)k->step);
    printf("  model --layers %lld --d-model %lld --heads %lld --kv-heads %lld --head-dim %lld "
           "--d-ff %lld --vocab %lld --seq-len %lld\n",
           (long long)s->L, (long long)s->D, (long long)s->N, (long long)s->K, (long long)s->H,
           (long long)s->F, (long long)s->V, (long long)s->T);
    if (s->moe.E > 0) {
        char cap[48] = " (dropless)";
        if (s->moe.capacity > 0)
            snprintf(cap, sizeof cap, " --capacity-factor %.6g", s->moe.capacity);
        printf("  experts --experts %lld --moe-top-k %lld --moe-every %lld --shared-experts %lld "
               "--expert-d-ff %lld%s --aux-loss-coef %g --router-z-loss-coef %g\n",
               (long long)s->moe.E, (long long)s->moe.k, (long long)s->moe.every,
               (long long)s->moe.shared, (long long)s->moe.F, cap, s->moe.aux_coef, s->moe.z_coef);
    }
    printf("  optimizer %s | schedule --lr %g --min-lr %g --warmup %lld --steps %lld | batch "
           "%lld\n",
           k->optimizer == OPT_SGD ? "sgd" : "adamw", k->lr, k->min_lr, (long long)k->warmup,
           (long long)k->schedule_steps, (long long)k->batch);
    printf("  written by %lld rank%s, mesh %s, sharding %s\n", (long long)k->ranks,
           k->ranks == 1 ? "" : "s", k->mesh, k->sharding);
}

/* Opens a checkpoint on this rank alone and reads its header. */
static int open_ckpt(const char *path, h5array **f, ckpt_meta *k, char *err, size_t errlen) {
    char why[256];
    *f = NULL;
    if (paths_can_read(path, why, sizeof why) < 0)
        return errmsg_fail(err, errlen, "%s: %s", path, why);
    int rc = h5array_open(f, path, mesh_self_comm(), err, errlen);
    if (rc == 0) rc = ckpt_meta_get(*f, k, err, errlen);
    if (rc < 0) {
        h5array_close(*f);
        *f = NULL;
    }
    return rc;
}

/* Summary of one array: Σx², min, max, non-finite count, checksum. */
typedef struct {
    double sumsq, min, max;
    int64_t nonfinite;
    uint64_t checksum;
} array_stats;

static int stats_of(h5array *f, const char *name, int ndim, const int64_t *dims, float *buf,
                    array_stats *st, char *err, size_t errlen) {
    *st = (array_stats){0, INFINITY, -INFINITY, 0, 0};
    const int64_t rows = block_rows(ndim, dims);
    for (int64_t r0 = 0; r0 < dims[0]; r0 += rows) {
        int64_t off[H5ARRAY_MAX_DIMS], cnt[H5ARRAY_MAX_DIMS];
        const int64_t n = block_slab(ndim, dims, r0, rows, off, cnt);
        if (h5array_read(f, name, ndim, dims, off, cnt, buf, err, errlen) < 0) return -1;
        ckpt_checksum_add(&st->checksum, buf, ndim, dims, off, cnt);
        for (int64_t i = 0; i < n; i++) {
            const double x = buf[i];
            if (!isfinite(x)) {
                st->nonfinite++;
                continue;
            }
            st->sumsq += x * x;
            if (x < st->min) st->min = x;
            if (x > st->max) st->max = x;
        }
    }
    return 0;
}

static int cmd_info(const char *path, char *err, size_t errlen) {
    h5array *f = NULL;
    ckpt_meta k;
    if (open_ckpt(path, &f, &k, err, errlen) < 0) return -1;
    print_meta(&k, path);
    char **names = NULL;
    int n = 0, rc = h5array_list(f, "/", 1, &names, &n, err, errlen), bad = 0;
    float *buf = NULL;
    int64_t cap = 0;
    if (rc == 0)
        printf("  %-24s %-16s %12s %13s %13s  %s\n", "array", "shape", "L2 norm", "min", "max",
               "checksum");
    for (int i = 0; i < n && rc == 0; i++) {
        int nd;
        int64_t dims[H5ARRAY_MAX_DIMS], want = 0;
        array_stats st;
        char shp[64];
        rc = h5array_shape(f, names[i], &nd, dims, err, errlen);
        if (rc == 0) rc = block_buf(&buf, &cap, nd, dims, err, errlen);
        if (rc == 0) rc = stats_of(f, names[i], nd, dims, buf, &st, err, errlen);
        if (rc < 0) break;
        const int has = h5array_attr_get_i64(f, names[i], "checksum", &want, NULL, 0) == 0;
        const int ok = has && (uint64_t)want == st.checksum;
        bad += !ok;
        printf("  %-24s %-16s %12.6g %13.6g %13.6g  %s", names[i],
               shape_str(shp, sizeof shp, nd, dims), sqrt(st.sumsq), st.min, st.max,
               !has ? "MISSING"
               : ok ? "ok"
                    : "MISMATCH");
        if (st.nonfinite) printf("  (%lld non-finite)", (long long)st.nonfinite);
        printf("\n");
    }
    if (rc == 0 && bad)
        rc = errmsg_fail(err, errlen, "%s: corrupt checkpoint: %d array%s fail%s the checksum",
                         path, bad, bad == 1 ? "" : "s", bad == 1 ? "s" : "");
    free(buf);
    h5array_names_free(names, n);
    h5array_close(f);
    return rc;
}

/* Largest differences between two arrays of the same shape. */
typedef struct {
    double abs, rel, units; /* max |Δ|, max |Δ|/max(|a|,|b|), max |Δ|/(ε·(|a|+|b|+1)) */
    int identical;          /* bit for bit */
    int64_t nonfinite;      /* elements that differ where either is NaN or ±inf: beyond any
                               tolerance, --tol inf included */
    uint64_t sum_a, sum_b;  /* the checksums of what was read (ckpt_checksum_add) */
} array_diff;

static int diff_of(h5array *fa, h5array *fb, const char *name, int ndim, const int64_t *dims,
                   float *ba, float *bb, array_diff *d, char *err, size_t errlen) {
    *d = (array_diff){0, 0, 0, 1, 0, 0, 0};
    const int64_t rows = block_rows(ndim, dims);
    for (int64_t r0 = 0; r0 < dims[0]; r0 += rows) {
        int64_t off[H5ARRAY_MAX_DIMS], cnt[H5ARRAY_MAX_DIMS];
        const int64_t n = block_slab(ndim, dims, r0, rows, off, cnt);
        if (h5array_read(fa, name, ndim, dims, off, cnt, ba, err, errlen) < 0 ||
            h5array_read(fb, name, ndim, dims, off, cnt, bb, err, errlen) < 0)
            return -1;
        ckpt_checksum_add(&d->sum_a, ba, ndim, dims, off, cnt);
        ckpt_checksum_add(&d->sum_b, bb, ndim, dims, off, cnt);
        if (memcmp(ba, bb, (size_t)n * sizeof *ba) == 0) continue;
        d->identical = 0;
        for (int64_t i = 0; i < n; i++) {
            if (memcmp(&ba[i], &bb[i], sizeof *ba) == 0) continue;
            const double a = ba[i], b = bb[i], dx = fabs(a - b);
            if (!isfinite(a) || !isfinite(b)) { /* NaN or ±inf on one side, or both */
                d->nonfinite++;
                d->abs = d->rel = d->units = INFINITY;
                continue;
            }
            const double big = fmax(fabs(a), fabs(b));
            if (dx > d->abs) d->abs = dx;
            if (big > 0 && dx / big > d->rel) d->rel = dx / big;
            const double u = dx / (FLT_EPSILON * (fabs(a) + fabs(b) + 1.0));
            if (u > d->units) d->units = u;
        }
    }
    return 0;
}

static int has_name(char **names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return 1;
    return 0;
}

/* Whether array `name` of f carries a checksum attribute equal to `sum` (*want: the stored one). */
static int checksum_ok(h5array *f, const char *name, uint64_t sum, int64_t *want) {
    return h5array_attr_get_i64(f, name, "checksum", want, NULL, 0) == 0 && (uint64_t)*want == sum;
}

/* One row of `ckpt diff`'s table: the differences of one array and its verdict. */
static void print_diff_row(const char *name, const char *shape, const array_diff *d, int same,
                           int ok_a, int ok_b) {
    printf("  %-24s %-16s %12.3g %12.3g %14.1f  %s%s%s%s", name, shape, d->abs, d->rel, d->units,
           d->identical ? "identical"
           : same       ? "within tolerance"
                        : "DIFFERENT",
           ok_a ? "" : ", A FAILS ITS CHECKSUM", ok_b ? "" : ", B FAILS ITS CHECKSUM",
           d->nonfinite ? ", NON-FINITE" : "");
    if (d->nonfinite) printf(" (%lld elements NaN or inf)", (long long)d->nonfinite);
    printf("\n");
}

/* Returns 0 (same), 1 (different) or −1 (error). tol < 0: "same" means bit-identical. */
/* ckpt diff's state: the two files, the tolerance, the block buffers, what was found. */
typedef struct {
    h5array *fa, *fb;
    const char *pa, *pb;
    double tol;
    float *ba, *bb;
    int64_t cap_a, cap_b;
    int differ, nbad_sum;
    char bad_sum[CLI_ERR_LEN]; /* the first failed checksum */
} diff_run;

/* One array of A against B's (nb: B's names): its row of the table. Returns 0 or −1 with err. */
static int diff_one(diff_run *r, const char *name, char **nb, int cb, char *err, size_t errlen) {
    char shp[64];
    int nda, ndb;
    int64_t da[H5ARRAY_MAX_DIMS], db[H5ARRAY_MAX_DIMS];
    if (!has_name(nb, cb, name)) {
        printf("  %-24s only in A\n", name);
        r->differ = 1;
        return 0;
    }
    int rc = h5array_shape(r->fa, name, &nda, da, err, errlen);
    if (rc == 0) rc = h5array_shape(r->fb, name, &ndb, db, err, errlen);
    if (rc < 0) return -1;
    if (nda != ndb || memcmp(da, db, (size_t)nda * sizeof *da) != 0) {
        char s2[64];
        printf("  %-24s shape %s in A, %s in B\n", name, shape_str(shp, sizeof shp, nda, da),
               shape_str(s2, sizeof s2, ndb, db));
        r->differ = 1;
        return 0;
    }
    array_diff d;
    rc = block_buf(&r->ba, &r->cap_a, nda, da, err, errlen);
    if (rc == 0) rc = block_buf(&r->bb, &r->cap_b, nda, da, err, errlen);
    if (rc == 0) rc = diff_of(r->fa, r->fb, name, nda, da, r->ba, r->bb, &d, err, errlen);
    if (rc < 0) return -1;
    const int same = r->tol < 0 ? d.identical : d.identical || (!d.nonfinite && d.units <= r->tol);
    r->differ |= !same;
    int64_t want_a = 0, want_b = 0;
    const int ok_a = checksum_ok(r->fa, name, d.sum_a, &want_a);
    const int ok_b = checksum_ok(r->fb, name, d.sum_b, &want_b);
    print_diff_row(name, shape_str(shp, sizeof shp, nda, da), &d, same, ok_a, ok_b);
    if ((!ok_a || !ok_b) && !r->bad_sum[0])
        snprintf(r->bad_sum, sizeof r->bad_sum,
                 "%s: corrupt checkpoint: %s fails its checksum "
                 "(stored %016llx, computed %016llx)",
                 ok_a ? r->pb : r->pa, name, (unsigned long long)(ok_a ? want_b : want_a),
                 (unsigned long long)(ok_a ? d.sum_b : d.sum_a));
    r->nbad_sum += !ok_a + !ok_b;
    return 0;
}

static int cmd_diff(const char *pa, const char *pb, double tol, char *err, size_t errlen) {
    diff_run r = {.pa = pa, .pb = pb, .tol = tol};
    ckpt_meta ka, kb;
    if (open_ckpt(pa, &r.fa, &ka, err, errlen) < 0) return -1;
    if (open_ckpt(pb, &r.fb, &kb, err, errlen) < 0) {
        h5array_close(r.fa);
        return -1;
    }
    printf("A = %s (step %lld, %lld ranks, %s, %s)\nB = %s (step %lld, %lld ranks, %s, %s)\n", pa,
           (long long)ka.step, (long long)ka.ranks, ka.mesh, ka.sharding, pb, (long long)kb.step,
           (long long)kb.ranks, kb.mesh, kb.sharding);
    char **na = NULL, **nb = NULL;
    int ca = 0, cb = 0;
    int rc = h5array_list(r.fa, "/", 1, &na, &ca, err, errlen);
    if (rc == 0) rc = h5array_list(r.fb, "/", 1, &nb, &cb, err, errlen);
    if (rc == 0)
        printf("  %-24s %-16s %12s %12s %14s\n", "array", "shape", "max |a-b|", "max rel",
               "eps units");
    for (int i = 0; i < ca && rc == 0; i++) rc = diff_one(&r, na[i], nb, cb, err, errlen);
    for (int i = 0; i < cb && rc == 0; i++)
        if (!has_name(na, ca, nb[i])) {
            printf("  %-24s only in B\n", nb[i]);
            r.differ = 1;
        }
    if (rc == 0 && r.nbad_sum) { /* a corrupt file: an error, not a difference */
        rc = errmsg_fail(err, errlen, "%s%s", r.bad_sum,
                         r.nbad_sum > 1 ? " (and more: see the table)" : "");
    } else if (rc == 0) {
        if (tol < 0)
            printf("%s\n", r.differ ? "the checkpoints differ" : "every array is bit-identical");
        else
            printf("%s (tolerance %g units of FLT_EPSILON·(|a|+|b|+1); NaN and inf never within "
                   "it)\n",
                   r.differ ? "the checkpoints differ" : "every array is within tolerance", tol);
    }
    free(r.ba);
    free(r.bb);
    h5array_names_free(na, ca);
    h5array_names_free(nb, cb);
    h5array_close(r.fa);
    h5array_close(r.fb);
    return rc < 0 ? -1 : r.differ;
}

static const char *const usage =
    "usage: meshtrain ckpt info FILE          (metadata; per array: shape, L2 norm, min, max, "
    "checksum)\n"
    "       meshtrain ckpt diff A B [--tol K] (per array: max |a-b|, max relative difference and "
    "max |a-b|/(FLT_EPSILON·(|a|+|b|+1)); exit 0 when bit-identical, or every array within K "
    "of those units with --tol, 1 when not)";

/* ckpt's arguments: the command, its files and --tol. 0, 1 (--help: the usage printed) or −1
 * with err naming what is wrong. */
static int parse_args(int argc, char **argv, int *info, const char **files, double *tol, char *err,
                      size_t errlen) {
    const char *cmd = argc > 1 ? argv[1] : "";
    int nfiles = 0, tols = 0;
    if (config_help_asked(argc, argv)) {
        if (mesh_world_rank() == 0) printf("%s\n", usage);
        return 1;
    }
    *info = !strcmp(cmd, "info");
    if (!*info && strcmp(cmd, "diff") != 0)
        return errmsg_fail(err, errlen,
                           "ckpt: expected the command info or diff, got '%s' (see "
                           "meshtrain ckpt --help)",
                           cmd);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--tol", 5) && (a[5] == '\0' || a[5] == '=')) {
            const char *v = a[5] == '=' ? a + 6 : i + 1 < argc ? argv[++i] : NULL;
            char *end = NULL;
            *tol = v ? strtod(v, &end) : -1;
            if (*info) return errmsg_fail(err, errlen, "--tol goes with ckpt diff, not info");
            if (!v || end == v || *end || isnan(*tol) || *tol < 0)
                return errmsg_fail(err, errlen,
                                   "--tol %s: expected a number >= 0 or inf (units of "
                                   "FLT_EPSILON·(|a|+|b|+1))",
                                   v ? v : "(no value)");
            if (tols++) return errmsg_fail(err, errlen, "--tol is given twice");
        } else if (!strncmp(a, "--", 2) || (a[0] == '-' && a[1])) {
            return errmsg_fail(err, errlen, "ckpt %s: unknown flag %s (see meshtrain ckpt --help)",
                               cmd, a);
        } else if (nfiles < 2) {
            files[nfiles++] = a;
        } else {
            nfiles++;
        }
    }
    const int want = *info ? 1 : 2;
    if (nfiles != want)
        return errmsg_fail(err, errlen,
                           "ckpt %s takes %s, got %d file%s (see meshtrain ckpt "
                           "--help)",
                           cmd, *info ? "one FILE" : "two files A B", nfiles,
                           nfiles == 1 ? "" : "s");
    return 0;
}

int ckpt_cli_main(int argc, char **argv) {
    char err[CLI_ERR_LEN] = "";
    double tol = -1;
    int info = 0;
    const char *files[2] = {NULL, NULL};
    int rc = parse_args(argc, argv, &info, files, &tol, err, sizeof err);
    if (rc == 1) return 0;
    if (rc == 0 && mesh_world_rank() == 0) {
        rc = info ? cmd_info(files[0], err, sizeof err)
                  : cmd_diff(files[0], files[1], tol, err, sizeof err);
        fflush(stdout);
    }
    /* every rank leaves with rank 0's verdict */
    char merr[256];
    mesh *m = mesh_create(NULL, NULL, merr, sizeof merr);
    CHECK(m, "default mesh: %s", merr);
    rc = mesh_agree(mesh_world_comm(m), mesh_world_rank() == 0 ? rc : INT_MAX);
    mesh_destroy(m);
    if (rc < 0) mesh_exit_error("%s", err);
    return rc;
}
