/* Global arrays in HDF5: a 5×6×7 array (and 1-D, 2-D ones) of integer-valued floats written by
 * slabs under several decompositions — split along dim 0 or dim 2, fully replicated with one
 * writer, replicated in pairs with one writer per pair — then read back bit-equal under other
 * decompositions and whole. Attributes round-trip; listing; shape and name errors; a slab error
 * on one rank reaches every rank. Atomic saves: an HDF5 error mid-save, a close without commit,
 * and a failed rename all leave the previous file byte-identical and no temp file behind. */
#define _XOPEN_SOURCE 700 /* mkdir */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/h5array.h"
#include "dtest.h"

enum { D0 = 5, D1 = 6, D2 = 7 };
static const int64_t dims[3] = {D0, D1, D2};

/* The truth: element (i, j, k) of array `salt` is a distinct integer, exact in float. */
static float truth(int salt, int64_t i, int64_t j, int64_t k) {
    return (float)(salt * 1000 + (i * D1 + j) * D2 + k) - 500.0f;
}

static float *make_slab(int salt, const int64_t *off, const int64_t *cnt) {
    float *x = malloc((size_t)(cnt[0] * cnt[1] * cnt[2] + 1) * sizeof *x);
    for (int64_t i = 0; i < cnt[0]; i++)
        for (int64_t j = 0; j < cnt[1]; j++)
            for (int64_t k = 0; k < cnt[2]; k++)
                x[(i * cnt[1] + j) * cnt[2] + k] = truth(salt, off[0] + i, off[1] + j, off[2] + k);
    return x;
}

/* Block p of q along `dim` (uneven: [p·n/q, (p+1)·n/q)), the whole extent elsewhere. */
static void block(int dim, int p, int q, int64_t *off, int64_t *cnt) {
    for (int d = 0; d < 3; d++) {
        off[d] = 0;
        cnt[d] = dims[d];
    }
    off[dim] = p * dims[dim] / q;
    cnt[dim] = (p + 1) * dims[dim] / q - off[dim];
}

static void write3(h5array *f, const char *name, int salt, const int64_t *off, const int64_t *cnt,
                   int writer) {
    char err[512] = "";
    float *x = make_slab(salt, off, cnt);
    int rc = h5array_write(f, name, 3, dims, off, cnt, writer, x, err, sizeof err);
    DT_CHECK(rc == 0, "write %s: %s", name, err);
    free(x);
}

static void read3(h5array *f, const char *name, int salt, const int64_t *off, const int64_t *cnt) {
    char err[512] = "";
    float *want = make_slab(salt, off, cnt);
    float *got = calloc((size_t)(cnt[0] * cnt[1] * cnt[2] + 1), sizeof *got);
    int rc = h5array_read(f, name, 3, dims, off, cnt, got, err, sizeof err);
    DT_CHECK(rc == 0, "read %s: %s", name, err);
    int64_t n = cnt[0] * cnt[1] * cnt[2];
    for (int64_t e = 0; rc == 0 && e < n; e++) {
        if (memcmp(&got[e], &want[e], sizeof *got) != 0) {
            DT_CHECK(0, "%s slab at [%lld,%lld,%lld] element %lld: %g, expected %g", name,
                     (long long)off[0], (long long)off[1], (long long)off[2], (long long)e, got[e],
                     want[e]);
            break;
        }
    }
    free(got);
    free(want);
}

/* Writes the standard file at path with the given salt offset and commits it. */
static void write_file(const char *path, int salt) {
    int r = dtest_rank, q = dtest_nranks;
    int64_t off[3], cnt[3];
    char err[512] = "";
    h5array *f;
    int rc = h5array_create(&f, path, dtest_world(), err, sizeof err);
    DT_CHECK(rc == 0, "create: %s", err);
    if (rc) return;
    block(0, r, q, off, cnt);
    write3(f, "a/split0", salt + 1, off, cnt, 1);
    block(2, r, q, off, cnt);
    write3(f, "a/split2", salt + 2, off, cnt, 1);
    block(0, 0, 1, off, cnt);
    write3(f, "rep/whole", salt + 3, off, cnt, r == q - 1); /* replicated: the last rank writes */
    /* Replicated in pairs: ranks 2p and 2p+1 hold block p of dim 1; the odd one writes. */
    int pairs = (q + 1) / 2;
    block(1, r / 2, pairs, off, cnt);
    write3(f, "rep/pairs", salt + 4, off, cnt, r % 2 == 1 || r == q - 1);
    /* 1-D and 2-D, written by rank 0 alone. */
    float v[D2], m[D1 * D2];
    for (int k = 0; k < D2; k++) v[k] = (float)(salt + k);
    for (int k = 0; k < D1 * D2; k++) m[k] = (float)(salt - k);
    int64_t d1[1] = {D2}, o1[1] = {0}, d2[2] = {D1, D2}, o2[2] = {0, 0};
    DT_CHECK(h5array_write(f, "top1", 1, d1, o1, d1, r == 0, v, err, sizeof err) == 0, "%s", err);
    DT_CHECK(h5array_write(f, "top2", 2, d2, o2, d2, r == 0, m, err, sizeof err) == 0, "%s", err);
    DT_CHECK(h5array_attr_put_str(f, "/", "kind", "test", err, sizeof err) == 0, "%s", err);
    DT_CHECK(h5array_attr_put_i64(f, "/", "salt", salt, err, sizeof err) == 0, "%s", err);
    DT_CHECK(h5array_attr_put_f64(f, "meta/run", "lr", 3e-4, err, sizeof err) == 0, "%s", err);
    DT_CHECK(h5array_attr_put_str(f, "a/split0", "layout", "W[D_X, F]", err, sizeof err) == 0, "%s",
             err);
    DT_CHECK(h5array_attr_put_i64(f, "/", "salt", salt, err, sizeof err) == 0, "overwrite: %s",
             err);
    rc = h5array_commit(f, err, sizeof err);
    DT_CHECK(rc == 0, "commit: %s", err);
    h5array_close(f);
}

static void check_file(const char *path, int salt) {
    int r = dtest_rank, q = dtest_nranks;
    int64_t off[3], cnt[3];
    char err[512] = "", s[64] = "";
    h5array *f;
    int rc = h5array_open(&f, path, dtest_world(), err, sizeof err);
    DT_CHECK(rc == 0, "open: %s", err);
    if (rc) return;
    const char *names[4] = {"a/split0", "a/split2", "rep/whole", "rep/pairs"};
    for (int k = 0; k < 4; k++) {
        block(1, q - 1 - r, q, off, cnt); /* a different decomposition, reversed */
        read3(f, names[k], salt + 1 + k, off, cnt);
        block(2, (r + 1) % q, q, off, cnt);
        read3(f, names[k], salt + 1 + k, off, cnt);
        block(0, 0, 1, off, cnt); /* everyone reads everything */
        read3(f, names[k], salt + 1 + k, off, cnt);
    }
    float v[D2], m[D1 * D2];
    int64_t d1[1] = {D2}, o1[1] = {0}, d2[2] = {D1, D2}, o2[2] = {0, 0};
    DT_CHECK(h5array_read(f, "top1", 1, d1, o1, d1, v, err, sizeof err) == 0, "%s", err);
    DT_CHECK(h5array_read(f, "top2", 2, d2, o2, d2, m, err, sizeof err) == 0, "%s", err);
    DT_CHECK(v[D2 - 1] == (float)(salt + D2 - 1) && m[D1 * D2 - 1] == (float)(salt - D1 * D2 + 1),
             "1-D/2-D values %g %g", v[D2 - 1], m[D1 * D2 - 1]);
    int64_t i64 = 0;
    double f64 = 0;
    DT_CHECK(h5array_attr_get_str(f, "/", "kind", s, sizeof s, err, sizeof err) == 0 &&
                 !strcmp(s, "test"),
             "kind '%s' %s", s, err);
    DT_CHECK(h5array_attr_get_i64(f, "/", "salt", &i64, err, sizeof err) == 0 && i64 == salt,
             "salt %lld %s", (long long)i64, err);
    DT_CHECK(h5array_attr_get_f64(f, "meta/run", "lr", &f64, err, sizeof err) == 0 && f64 == 3e-4,
             "lr %g %s", f64, err);
    DT_CHECK(h5array_attr_get_str(f, "a/split0", "layout", s, sizeof s, err, sizeof err) == 0 &&
                 !strcmp(s, "W[D_X, F]"),
             "layout '%s' %s", s, err);
    DT_CHECK(h5array_attr_get_str(f, "/", "kind", s, 3, err, sizeof err) == 0 && !strcmp(s, "te"),
             "truncated '%s'", s);
    rc = h5array_attr_get_i64(f, "/", "nope", &i64, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "no attribute 'nope'"), "missing attr: %d '%s'", rc, err);
    rc = h5array_attr_get_i64(f, "/", "kind", &i64, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "not a scalar integer"), "string as int: %d '%s'", rc, err);

    /* Listing. */
    char **ls;
    int n;
    DT_CHECK(h5array_list(f, "/", 0, &ls, &n, err, sizeof err) == 0 && n == 2 &&
                 !strcmp(ls[0], "top1") && !strcmp(ls[1], "top2"),
             "list /: n %d %s", n, err);
    h5array_names_free(ls, n);
    DT_CHECK(h5array_list(f, "/", 1, &ls, &n, err, sizeof err) == 0 && n == 6 &&
                 !strcmp(ls[0], "a/split0") && !strcmp(ls[3], "rep/whole"),
             "list -r /: n %d %s", n, err);
    h5array_names_free(ls, n);
    DT_CHECK(h5array_list(f, "rep", 0, &ls, &n, err, sizeof err) == 0 && n == 2 &&
                 !strcmp(ls[0], "pairs"),
             "list rep: n %d %s", n, err);
    h5array_names_free(ls, n);
    rc = h5array_list(f, "nope", 0, &ls, &n, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "no group 'nope'") && dtest_same_everywhere(err),
             "list nope: '%s'", err);

    /* Shapes: query, mismatch, missing dataset, and a slab error on one rank only. */
    int nd = 0;
    int64_t got[H5ARRAY_MAX_DIMS] = {0};
    DT_CHECK(h5array_shape(f, "rep/pairs", &nd, got, err, sizeof err) == 0 && nd == 3 &&
                 got[2] == D2,
             "shape %s", err);
    int64_t wrong[3] = {D0, D1, D2 + 1};
    float x[D0 * D1 * D2];
    block(0, 0, 1, off, cnt);
    rc = h5array_read(f, "a/split2", 3, wrong, off, cnt, x, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "dataset 'a/split2' has shape [5, 6, 7], expected [5, 6, 8]") &&
                 dtest_same_everywhere(err),
             "shape mismatch: '%s'", err);
    rc = h5array_read(f, "a/nope", 3, dims, off, cnt, x, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "no dataset 'a/nope'") && dtest_same_everywhere(err),
             "missing: '%s'", err);
    if (r == q - 1) off[1] = 1; /* past the end on the last rank only */
    rc = h5array_read(f, "a/split0", 3, dims, off, cnt, x, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "does not fit shape [5, 6, 7]") && dtest_same_everywhere(err),
             "one bad slab: '%s'", err);
    rc = h5array_commit(f, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "not open for writing"), "commit of a read-only file: '%s'",
             err);
    h5array_close(f);
}

/* Saves that fail must leave the previous file as it was and no temp file. */
static void check_atomic(const char *dir, const char *path) {
    int r = dtest_rank, q = dtest_nranks;
    size_t n0, n1;
    unsigned char *before = dtest_read_file(path, &n0);
    DT_CHECK(before && n0 > 0, "no previous file");
    char err[512] = "";
    int64_t off[3], cnt[3];
    h5array *f;

    /* 1. An HDF5 error mid-save (creating a dataset twice). */
    DT_CHECK(h5array_create(&f, path, dtest_world(), err, sizeof err) == 0, "%s", err);
    block(0, r, q, off, cnt);
    write3(f, "x", 9, off, cnt, 1);
    DT_CHECK(dtest_count_prefix(dir, "arr.h5.tmp.") == 1, "temp file not where expected");
    float *x = make_slab(9, off, cnt);
    int rc = h5array_write(f, "x", 3, dims, off, cnt, 1, x, err, sizeof err);
    free(x);
    DT_CHECK(rc < 0 && strstr(err, "cannot create dataset 'x'") && dtest_same_everywhere(err),
             "double create: '%s'", err);
    /* 2. Slabs that do not tile the array: every rank a writer of the whole block. */
    block(0, 0, 1, off, cnt);
    x = make_slab(9, off, cnt);
    rc = h5array_write(f, "y", 3, dims, off, cnt, 1, x, err, sizeof err);
    free(x);
    DT_CHECK(q == 1 ? rc == 0
                    : rc < 0 && strstr(err, "each element must be written by exactly one writer"),
             "overlapping writers: %d '%s'", rc, err);
    /* 3. Ranks disagreeing on the shape. */
    int64_t odd[3] = {D0, D1, r == 0 ? D2 : D2 + 1}, z[3] = {0, 0, 0};
    rc = h5array_write(f, "z", 3, odd, z, z, 0, NULL, err, sizeof err);
    DT_CHECK(q == 1 ? rc < 0 : rc < 0 && strstr(err, "ranks disagree"),
             "disagreeing shapes: %d '%s'", rc, err);
    h5array_close(f); /* no commit: discarded */
    MPI_Barrier(MPI_COMM_WORLD);
    unsigned char *after = dtest_read_file(path, &n1);
    DT_CHECK(after && n1 == n0 && memcmp(before, after, n0) == 0,
             "previous file changed by a failed save");
    free(after);
    DT_CHECK(dtest_count_prefix(dir, "arr.h5.tmp.") == 0,
             "temp file left behind after a failed save");

    /* 4. The rename fails (the target is a directory): the temp file is removed. */
    char dpath[300];
    snprintf(dpath, sizeof dpath, "%s/isdir", dir);
    if (r == 0) {
        mkdir(dpath, 0755);
        char inner[320];
        snprintf(inner, sizeof inner, "%s/keep", dpath);
        dtest_write_file(inner, "k", 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    DT_CHECK(h5array_create(&f, dpath, dtest_world(), err, sizeof err) == 0, "%s", err);
    block(0, r, q, off, cnt);
    write3(f, "x", 9, off, cnt, 1);
    rc = h5array_commit(f, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "cannot sync and rename") && dtest_same_everywhere(err),
             "rename onto a directory: '%s'", err);
    h5array_close(f);
    DT_CHECK(dtest_count_prefix(dir, "isdir.tmp.") == 0,
             "temp file left behind after a failed rename");

    /* 5. Creating in a missing directory fails cleanly. */
    char mpath[300];
    snprintf(mpath, sizeof mpath, "%s/missing/arr.h5", dir);
    rc = h5array_create(&f, mpath, dtest_world(), err, sizeof err);
    DT_CHECK(rc < 0 && !f && strstr(err, "cannot create") && dtest_same_everywhere(err),
             "missing dir: '%s'", err);

    /* 6. A read-only directory (meaningless as root, who may write anyway). */
    if (geteuid() != 0) {
        char ro[300], rpath[320];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        snprintf(rpath, sizeof rpath, "%s/arr.h5", ro);
        if (r == 0) mkdir(ro, 0555);
        MPI_Barrier(MPI_COMM_WORLD);
        rc = h5array_create(&f, rpath, dtest_world(), err, sizeof err);
        DT_CHECK(rc < 0 && strstr(err, "cannot create"), "read-only dir: '%s'", err);
        if (r == 0) chmod(ro, 0755);
    }
    free(before);
}

int main(int argc, char **argv) {
    char dir[256], path[300];
    dtest_init(&argc, &argv, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/arr.h5", dir);
    write_file(path, 0);
    check_file(path, 0);
    check_atomic(dir, path);
    check_file(path, 0);  /* still the first save */
    write_file(path, 50); /* a successful overwrite replaces it */
    check_file(path, 50);
    return dtest_finish("test_h5array", dir);
}
