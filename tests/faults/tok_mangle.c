/* tok_mangle: makes a token file hold one out-of-range token, for the fault tests (serial HDF5 on
 * one process; no MPI).
 *   tok_mangle FILE SPLIT INDEX VALUE   rewrites dataset /SPLIT as int32 with element INDEX set to
 *                                       VALUE (a file whose type allows tokens past the vocabulary)
 * Exit status 0 on success, 1 with a message otherwise. */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rewrite(const char *path, const char *split, long long at, int value) {
    char name[64];
    snprintf(name, sizeof name, "/%s", split);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return 1;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT), sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t n = 0;
    int rc = sp < 0 || H5Sget_simple_extent_dims(sp, &n, NULL) != 1 || at < 0 ||
             (hsize_t)at >= n;
    int32_t *x = rc ? NULL : malloc(n * sizeof *x);
    long long ntok = 0;
    hid_t a = d >= 0 ? H5Aopen(d, "n_tokens", H5P_DEFAULT) : -1;
    rc = rc || !x || a < 0 || H5Aread(a, H5T_NATIVE_LLONG, &ntok) < 0 ||
         H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0;
    if (a >= 0) H5Aclose(a);
    if (d >= 0) H5Dclose(d);
    if (!rc) rc = H5Ldelete(f, name, H5P_DEFAULT) < 0;
    if (!rc) {
        x[at] = value;
        hid_t d2 = H5Dcreate2(f, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t as = H5Screate(H5S_SCALAR);
        hid_t a2 = d2 >= 0 ? H5Acreate2(d2, "n_tokens", H5T_STD_I64LE, as, H5P_DEFAULT,
                                        H5P_DEFAULT)
                           : -1;
        rc = d2 < 0 || a2 < 0 ||
             H5Dwrite(d2, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0 ||
             H5Awrite(a2, H5T_NATIVE_LLONG, &ntok) < 0;
        if (a2 >= 0) H5Aclose(a2);
        H5Sclose(as);
        if (d2 >= 0) H5Dclose(d2);
    }
    free(x);
    if (sp >= 0) H5Sclose(sp);
    return H5Fclose(f) < 0 || rc;
}

int main(int argc, char **argv) {
    int rc = 1;
    if (argc == 5)
        rc = rewrite(argv[1], argv[2], atoll(argv[3]), atoi(argv[4]));
    else
        fprintf(stderr, "usage: tok_mangle FILE SPLIT INDEX VALUE\n");
    if (rc) fprintf(stderr, "tok_mangle: failed on %s\n", argc > 1 ? argv[1] : "?");
    return rc;
}
