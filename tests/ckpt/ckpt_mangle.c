/* ckpt_mangle: damages a checkpoint in one precise way, for the bad-input tests (serial HDF5 calls
 * on one process; no MPI).
 *   ckpt_mangle FILE attr KEY VALUE   sets the int64 attribute KEY on "/" (e.g. version 2)
 *   ckpt_mangle FILE flip DATASET     flips one bit in the middle of DATASET's raw data on disk
 *                                     (what a bad sector or a torn copy does; HDF5 cannot see it)
 *   ckpt_mangle FILE nan DATASET      sets DATASET's middle element to NaN and its checksum to
 *                                     match: a sound file of a diverged run
 *   ckpt_mangle FILE shape DATASET DIM VALUE
 *                                     sets extent DIM of DATASET's shape to VALUE in its header
 *                                     (e.g. 2^62 + n: the element count overflows to a small one)
 * Exit status 0 on success, 1 with a message otherwise. */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/ckpt.h"

static int set_attr(const char *path, const char *key, long long value) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return 1;
    if (H5Aexists(f, key) > 0) H5Adelete(f, key);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, key, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, H5T_NATIVE_LLONG, &value) < 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return H5Fclose(f) < 0 || rc;
}

static int flip(const char *path, const char *dset) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 1;
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    haddr_t off = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
    hsize_t size = d >= 0 ? H5Dget_storage_size(d) : 0;
    if (d >= 0) H5Dclose(d);
    H5Fclose(f);
    if (off == HADDR_UNDEF || size == 0) return 1;
    FILE *fp = fopen(path, "r+b");
    if (!fp) return 1;
    const long at = (long)(off + size / 2);
    int c = fseek(fp, at, SEEK_SET) == 0 ? fgetc(fp) : EOF;
    int rc = c == EOF || fseek(fp, at, SEEK_SET) != 0 || fputc(c ^ 0x10, fp) == EOF;
    rc |= fclose(fp) != 0;
    if (!rc) printf("flipped bit 4 of byte %ld (in %s)\n", at, dset);
    return rc;
}

static int nan_in(const char *path, const char *dset) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return 1;
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT), sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t hd[8] = {0};
    int nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, hd, NULL) : -1, rc = nd < 1 || nd > 8;
    int64_t dims[8], off[8] = {0}, n = 1;
    for (int i = 0; i < nd && !rc; i++) dims[i] = (int64_t)hd[i], n *= dims[i];
    float *x = rc ? NULL : malloc((size_t)n * sizeof *x);
    rc = rc || !x || H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0;
    if (!rc) {
        x[n / 2] = NAN;
        uint64_t sum = 0;
        ckpt_checksum_add(&sum, x, nd, dims, off, dims);
        long long v = (long long)sum;
        hid_t a = H5Aopen(d, "checksum", H5P_DEFAULT);
        rc = H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0 || a < 0 ||
             H5Awrite(a, H5T_NATIVE_LLONG, &v) < 0;
        if (a >= 0) H5Aclose(a);
    }
    free(x);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    return H5Fclose(f) < 0 || rc;
}

/* The dataspace message stores the extents as consecutive 8-byte little-endian numbers: find the
 * current shape's bytes in the object header (which starts at the dataset's address) and patch. */
static int set_extent(const char *path, const char *dset, int dim, unsigned long long value) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 1;
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT), sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t hd[8] = {0};
    H5O_info_t oi;
    int nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, hd, NULL) : -1;
    int rc = nd < 1 || nd > 8 || dim < 0 || dim >= nd || H5Oget_info2(d, &oi, H5O_INFO_BASIC) < 0;
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    H5Fclose(f);
    if (rc) return 1;
    unsigned char want[64], hdr[1024];
    for (int i = 0; i < nd; i++)
        for (int b = 0; b < 8; b++) want[8 * i + b] = (unsigned char)(hd[i] >> (8 * b));
    FILE *fp = fopen(path, "r+b");
    size_t got = fp && fseek(fp, (long)oi.addr, SEEK_SET) == 0 ? fread(hdr, 1, sizeof hdr, fp) : 0;
    long at = -1;
    for (size_t i = 0; at < 0 && i + 8 * (size_t)nd <= got; i++)
        if (memcmp(hdr + i, want, 8 * (size_t)nd) == 0) at = (long)oi.addr + (long)i + 8 * dim;
    for (int b = 0; b < 8; b++) want[b] = (unsigned char)(value >> (8 * b));
    rc = at < 0 || fseek(fp, at, SEEK_SET) != 0 || fwrite(want, 1, 8, fp) != 8;
    if (fp) rc |= fclose(fp) != 0;
    if (!rc) printf("set extent %d of %s to %llu (byte %ld)\n", dim, dset, value, at);
    return rc;
}

int main(int argc, char **argv) {
    int rc = 1;
    if (argc == 5 && strcmp(argv[2], "attr") == 0)
        rc = set_attr(argv[1], argv[3], atoll(argv[4]));
    else if (argc == 4 && strcmp(argv[2], "flip") == 0)
        rc = flip(argv[1], argv[3]);
    else if (argc == 4 && strcmp(argv[2], "nan") == 0)
        rc = nan_in(argv[1], argv[3]);
    else if (argc == 6 && strcmp(argv[2], "shape") == 0)
        rc = set_extent(argv[1], argv[3], atoi(argv[4]), strtoull(argv[5], NULL, 10));
    else
        fprintf(stderr, "usage: ckpt_mangle FILE attr KEY VALUE | FILE flip|nan DATASET | "
                        "FILE shape DATASET DIM VALUE\n");
    if (rc) fprintf(stderr, "ckpt_mangle: failed on %s\n", argc > 1 ? argv[1] : "?");
    return rc;
}
