/* Bad inputs end cleanly: tokens_open, h5array_open and tokens_prepare on a missing file, an empty
 * file, binary garbage, an HDF5 file that is not a token file, a token file of another version,
 * one with an empty split, and truncated HDF5 files — each returns a negative status with a
 * message naming the file and the problem, identical on every rank, and nothing crashes or
 * prints HDF5 error stacks. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/h5array.h"
#include "data/tokens.h"
#include "dtest.h"

/* tokens_open(path) must fail with a message containing `want` (and the path). */
static void want_tokens_error(const char *path, const char *want) {
    tokens *tf = (tokens *)1;
    char err[512] = "";
    int rc = tokens_open(&tf, path, TOKENS_VAL_FRACTION, dtest_world(), err, sizeof err);
    DT_CHECK(rc < 0 && tf == NULL, "tokens_open(%s) succeeded", path);
    DT_CHECK(strstr(err, want) && strstr(err, path), "tokens_open(%s): message '%s', expected '%s'",
             path, err, want);
    DT_CHECK(dtest_same_everywhere(err), "tokens_open(%s): ranks disagree on the message", path);
    if (rc == 0) tokens_close(tf);
}

static void want_array_error(const char *path, const char *want) {
    h5array *f = (h5array *)1;
    char err[512] = "";
    int rc = h5array_open(&f, path, dtest_world(), err, sizeof err);
    DT_CHECK(rc < 0 && f == NULL, "h5array_open(%s) succeeded", path);
    DT_CHECK(strstr(err, want) && strstr(err, path),
             "h5array_open(%s): message '%s', expected '%s'", path, err, want);
    DT_CHECK(dtest_same_everywhere(err), "h5array_open(%s): ranks disagree on the message", path);
    if (rc == 0) h5array_close(f);
}

static void want_prepare_error(const char *text, const char *out, double frac, const char *want) {
    char err[512] = "";
    int rc = tokens_prepare(text, out, frac, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, want), "prepare(%s, %g): rc %d, message '%s', expected '%s'",
             text, frac, rc, err, want);
}

/* Rank 0 only: rewrites a root attribute of an HDF5 file (serial HDF5). */
static void set_version(const char *path, int64_t v) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = H5Aopen(f, "version", H5P_DEFAULT);
    DT_CHECK(f >= 0 && a >= 0 && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0, "set_version");
    H5Aclose(a);
    H5Fclose(f);
}

/* Rank 0 only: a copy of src truncated to n bytes (0: half of it). */
static void truncated_copy(const char *src, const char *dst, size_t n) {
    size_t size;
    unsigned char *b = dtest_read_file(src, &size);
    if (n == 0) n = size / 2;
    DT_CHECK(b && size > n, "truncated_copy: %zu bytes", size);
    dtest_write_file(dst, b, n);
    free(b);
}

int main(int argc, char **argv) {
    char dir[256];
    dtest_init(&argc, &argv, dir, sizeof dir);
    char p[12][300];
    const char *names[12] = {"missing.h5", "empty.h5", "garbage.bin",   "foreign.h5",
                             "v2.h5",      "good.h5",  "trunc_half.h5", "trunc_head.h5",
                             "short.txt",  "text.txt", "emptyval.h5",   "out.h5"};
    for (int i = 0; i < 12; i++) snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
    enum {
        MISSING,
        EMPTY,
        GARBAGE,
        FOREIGN,
        V2,
        GOOD,
        TRUNC_HALF,
        TRUNC_HEAD,
        SHORT,
        TEXT,
        EMPTYVAL,
        OUT
    };

    /* Fixtures: rank 0 writes them, then everyone looks. */
    if (dtest_rank == 0) {
        char err[512] = "";
        unsigned char junk[4096];
        uint64_t x = 88172645463325252ull;
        for (size_t i = 0; i < sizeof junk; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            junk[i] = (unsigned char)x;
        }
        dtest_write_file(p[EMPTY], "", 0);
        dtest_write_file(p[GARBAGE], junk, sizeof junk);
        dtest_write_file(p[SHORT], "ab\n", 3);
        unsigned char text[2000];
        dtest_make_text(text, sizeof text, 3);
        dtest_write_file(p[TEXT], text, sizeof text);
        DT_CHECK(tokens_prepare(p[TEXT], p[GOOD], 0.1, err, sizeof err) == 0, "%s", err);
        DT_CHECK(tokens_prepare(p[TEXT], p[V2], 0.1, err, sizeof err) == 0, "%s", err);
        set_version(p[V2], 2);
        truncated_copy(p[GOOD], p[TRUNC_HALF], 0);
        truncated_copy(p[GOOD], p[TRUNC_HEAD], 40);
        /* An HDF5 file that is not ours, and a token file whose val split is empty. */
        hid_t f = H5Fcreate(p[FOREIGN], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hsize_t d = 4;
        hid_t s = H5Screate_simple(1, &d, NULL);
        H5Dclose(
            H5Dcreate2(f, "weights", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Sclose(s);
        H5Fclose(f);
        DT_CHECK(tokens_prepare(p[TEXT], p[EMPTYVAL], 0.1, err, sizeof err) == 0, "%s", err);
        f = H5Fopen(p[EMPTYVAL], H5F_ACC_RDWR, H5P_DEFAULT);
        H5Ldelete(f, "/val", H5P_DEFAULT);
        d = 0;
        s = H5Screate_simple(1, &d, NULL);
        hid_t v = H5Dcreate2(f, "/val", H5T_STD_U8LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t as = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(v, "n_tokens", H5T_STD_I64LE, as, H5P_DEFAULT, H5P_DEFAULT);
        int64_t zero = 0;
        H5Awrite(a, H5T_NATIVE_INT64, &zero);
        H5Aclose(a);
        H5Sclose(as);
        H5Dclose(v);
        H5Sclose(s);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Each fixture and the message its open must fail with. */
    typedef struct {
        int file;
        const char *want;
    } bad_case;
    static const bad_case bad_tokens[] = {
        {MISSING, "cannot open (No such file or directory)"},
        {EMPTY, "file is empty"},
        {GARBAGE, "neither a meshtrain token file (no HDF5 signature) nor UTF-8 text"},
        {FOREIGN, "HDF5 file but not a meshtrain token file"},
        {V2, "token file version 2; this build reads version 1"},
        {TRUNC_HALF, "HDF5 file cannot be opened, truncated or corrupt?"},
        {TRUNC_HEAD, "HDF5 file cannot be opened, truncated or corrupt?"},
        {SHORT, "text too short: 3 bytes"},
        {EMPTYVAL, "split 'val' is empty"},
    };
    static const bad_case bad_arrays[] = {
        {MISSING, "cannot open (No such file or directory)"},
        {EMPTY, "file is empty"},
        {GARBAGE, "not an HDF5 file"},
        {TEXT, "not an HDF5 file"},
        {TRUNC_HALF, "HDF5 file cannot be opened, truncated or corrupt?"},
        {TRUNC_HEAD, "HDF5 file cannot be opened, truncated or corrupt?"},
    };
    for (size_t i = 0; i < sizeof bad_tokens / sizeof *bad_tokens; i++)
        want_tokens_error(p[bad_tokens[i].file], bad_tokens[i].want);
    want_tokens_error(dir, "cannot open"); /* a directory */
    for (size_t i = 0; i < sizeof bad_arrays / sizeof *bad_arrays; i++)
        want_array_error(p[bad_arrays[i].file], bad_arrays[i].want);

    /* The good ones still open (the fixtures are what we think they are). */
    tokens *tf;
    char err[512] = "";
    DT_CHECK(tokens_open(&tf, p[GOOD], 0.1, dtest_world(), err, sizeof err) == 0, "good: %s", err);
    tokens_close(tf);
    DT_CHECK(tokens_open(&tf, p[TEXT], 0.1, dtest_world(), err, sizeof err) == 0, "text: %s", err);
    tokens_close(tf);

    if (dtest_rank == 0) {
        want_prepare_error(p[MISSING], p[OUT], 0.1, "cannot open (No such file or directory)");
        want_prepare_error(p[EMPTY], p[OUT], 0.1, "file is empty");
        want_prepare_error(p[GOOD], p[OUT], 0.1, "is an HDF5 file, not text");
        want_prepare_error(p[TEXT], p[OUT], 0.0, "val_fraction must lie in (0, 1), got 0");
        want_prepare_error(p[TEXT], p[OUT], 1.0, "val_fraction must lie in (0, 1), got 1");
        want_prepare_error(p[SHORT], p[OUT], 0.1, "text too short");
        /* what --data refuses as text, prepare refuses too (it once wrote a token file of it) */
        want_prepare_error(p[GARBAGE], p[OUT], 0.1, "not UTF-8 text (byte 0x");
        /* the output naming the input, as spelled or through another path: the text survives */
        char alias[320];
        snprintf(alias, sizeof alias, "%s/./%s", dir, names[TEXT]);
        want_prepare_error(p[TEXT], p[TEXT], 0.1, "the output is the input text itself");
        want_prepare_error(p[TEXT], alias, 0.1, "the output is the input text itself");
        tokens *kept;
        DT_CHECK(tokens_open(&kept, p[TEXT], 0.1, mesh_self_comm(), err, sizeof err) == 0 &&
                     tokens_is_text(kept),
                 "the text was overwritten: %s", err);
        tokens_close(kept);
        char bad[320];
        snprintf(bad, sizeof bad, "%s/nodir/out.h5", dir);
        want_prepare_error(p[TEXT], bad, 0.1, "cannot create");
        DT_CHECK(dtest_count_prefix(dir, "out.h5") == 0, "a failed prepare left a file behind");
    }
    return dtest_finish("test_badfiles", dir);
}
