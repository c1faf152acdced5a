/* h5util: see h5util.h. */
#define _POSIX_C_SOURCE 200809L /* stat */
#include "data/h5util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mesh/mesh.h"
#include "mesh/where.h"

int h5util_agree(MPI_Comm comm, int status, char *err, size_t errlen) {
    const mesh_comm on = {comm};
    return mesh_agree_msg(&on, status, err, errlen);
}

void h5util_quiet_begin(h5util_quiet *q) {
    mesh_blocking_begin("parallel HDF5 (file I/O, collective over the ranks)");
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5util_quiet_end(const h5util_quiet *q) {
    H5Eset_auto2(H5E_DEFAULT, q->func, q->data);
    mesh_blocking_end();
}

typedef struct {
    char *buf;
    size_t len;
} last_error_ctx;

static herr_t last_error_cb(unsigned n, const H5E_error2_t *e, void *p) {
    last_error_ctx *c = p;
    if (n == 0 && e->desc) snprintf(c->buf, c->len, "%s", e->desc);
    return 0;
}

const char *h5util_last_error(char *buf, size_t len) {
    if (len > 0) buf[0] = '\0';
    last_error_ctx c = {buf, len};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, last_error_cb, &c);
    H5Eclear2(H5E_DEFAULT);
    /* it may quote names read from a damaged file: keep the message one printable line */
    for (char *p = buf; len > 0 && *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
    return buf;
}

h5util_file_kind h5util_sniff(const char *path, int64_t *size, int *sys_errno) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    *size = 0;
    *sys_errno = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        *sys_errno = errno;
        return H5UTIL_FILE_MISSING;
    }
    if (!S_ISREG(sb.st_mode)) {
        *sys_errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        return H5UTIL_FILE_MISSING;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        *sys_errno = errno;
        return H5UTIL_FILE_MISSING;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        *sys_errno = errno;
        fclose(f);
        return H5UTIL_FILE_MISSING;
    }
    long end = ftell(f);
    if (end < 0) { /* a directory or a pipe */
        *sys_errno = errno ? errno : EINVAL;
        fclose(f);
        return H5UTIL_FILE_MISSING;
    }
    *size = end;
    h5util_file_kind kind = end == 0 ? H5UTIL_FILE_EMPTY : H5UTIL_FILE_OTHER;
    /* The superblock sits at 0 or after a user block of 512·2^k bytes. */
    for (long at = 0; kind == H5UTIL_FILE_OTHER && at + 8 <= end; at = at ? 2 * at : 512) {
        unsigned char b[8];
        if (fseek(f, at, SEEK_SET) != 0 || fread(b, 1, 8, f) != 8) break;
        if (memcmp(b, sig, 8) == 0) kind = H5UTIL_FILE_HDF5;
    }
    fclose(f);
    return kind;
}

hid_t h5util_fapl_mpio(MPI_Comm comm) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return fapl;
    if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

hid_t h5util_dxpl(int collective) {
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (dxpl < 0) return dxpl;
    if (H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT) < 0) {
        H5Pclose(dxpl);
        return -1;
    }
    return dxpl;
}

/* ---- attributes ---- */

static hid_t open_obj(hid_t loc, const char *obj_path, char *err, size_t errlen) {
    hid_t o = H5Oopen(loc, obj_path, H5P_DEFAULT);
    if (o < 0) {
        char h5[256];
        h5util_last_error(h5, sizeof h5);
        errmsg_fail(err, errlen, "no object '%s' (%s)", obj_path, h5);
    }
    return o;
}

/* Writes `val` of memory type mtype into a scalar attribute of file type ftype. */
static int attr_put(hid_t loc, const char *obj_path, const char *key, hid_t ftype, hid_t mtype,
                    const void *val, char *err, size_t errlen) {
    hid_t o = open_obj(loc, obj_path, err, errlen);
    if (o < 0) return -1;
    int rc = -1;
    hid_t space = H5Screate(H5S_SCALAR), a = -1;
    htri_t exists = H5Aexists(o, key);
    if (space >= 0 && exists >= 0 && (!exists || H5Adelete(o, key) >= 0)) {
        a = H5Acreate2(o, key, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0 && H5Awrite(a, mtype, val) >= 0) rc = 0;
    }
    if (rc < 0) {
        char h5[256];
        h5util_last_error(h5, sizeof h5);
        errmsg_fail(err, errlen, "cannot write attribute '%s' on '%s' (%s)", key, obj_path, h5);
    }
    if (a >= 0) H5Aclose(a);
    if (space >= 0) H5Sclose(space);
    H5Oclose(o);
    return rc;
}

int h5util_attr_put_str(hid_t loc, const char *obj_path, const char *key, const char *val,
                        char *err, size_t errlen) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return errmsg_fail(err, errlen, "cannot make a string type for attribute '%s'", key);
    H5Tset_size(t, strlen(val) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = attr_put(loc, obj_path, key, t, t, val, err, errlen);
    H5Tclose(t);
    return rc;
}

int h5util_attr_put_i64(hid_t loc, const char *obj_path, const char *key, int64_t val, char *err,
                        size_t errlen) {
    return attr_put(loc, obj_path, key, H5T_STD_I64LE, H5T_NATIVE_INT64, &val, err, errlen);
}

int h5util_attr_put_f64(hid_t loc, const char *obj_path, const char *key, double val, char *err,
                        size_t errlen) {
    return attr_put(loc, obj_path, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &val, err, errlen);
}

/* Opens attribute key on obj_path; returns its id, 0 when absent (no message), -1 on error. */
static hid_t attr_open(hid_t loc, const char *obj_path, const char *key, hid_t *obj, char *err,
                       size_t errlen) {
    *obj = open_obj(loc, obj_path, err, errlen);
    if (*obj < 0) return -1;
    htri_t exists = H5Aexists(*obj, key);
    if (exists <= 0) {
        if (exists < 0)
            errmsg_fail(err, errlen, "cannot query attribute '%s' on '%s'", key, obj_path);
        H5Oclose(*obj);
        return exists < 0 ? -1 : 0;
    }
    hid_t a = H5Aopen(*obj, key, H5P_DEFAULT);
    if (a < 0) {
        errmsg_fail(err, errlen, "cannot open attribute '%s' on '%s'", key, obj_path);
        H5Oclose(*obj);
    }
    return a;
}

/* The type class and element count of an open attribute; -1 when it is not a scalar. */
static H5T_class_t attr_class(hid_t a, hid_t *type) {
    *type = H5Aget_type(a);
    hid_t space = H5Aget_space(a);
    hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    if (space >= 0) H5Sclose(space);
    if (*type < 0 || n != 1) return H5T_NO_CLASS;
    return H5Tget_class(*type);
}

int h5util_attr_get_str(hid_t loc, const char *obj_path, const char *key, char *val, size_t vallen,
                        char *err, size_t errlen) {
    hid_t o, t = -1;
    hid_t a = attr_open(loc, obj_path, key, &o, err, errlen);
    if (a <= 0) return a < 0 ? -1 : 1;
    int rc = -1;
    if (attr_class(a, &t) == H5T_STRING) {
        htri_t vl = H5Tis_variable_str(t);
        if (vl > 0) {
            char *s = NULL;
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            if (H5Aread(a, mt, &s) >= 0 && s) {
                snprintf(val, vallen, "%s", s);
                H5free_memory(s);
                rc = 0;
            }
            H5Tclose(mt);
        } else if (vl == 0) {
            size_t n = H5Tget_size(t);
            char *s = calloc(n + 1, 1);
            if (s && H5Aread(a, t, s) >= 0) {
                snprintf(val, vallen, "%s", s);
                rc = 0;
            }
            free(s);
        }
    }
    if (rc < 0) errmsg_fail(err, errlen, "attribute '%s' on '%s' is not a string", key, obj_path);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    H5Oclose(o);
    return rc;
}

static int attr_get_num(hid_t loc, const char *obj_path, const char *key, H5T_class_t want,
                        hid_t mtype, void *val, char *err, size_t errlen) {
    hid_t o, t = -1;
    hid_t a = attr_open(loc, obj_path, key, &o, err, errlen);
    if (a <= 0) return a < 0 ? -1 : 1;
    int rc = -1;
    if (attr_class(a, &t) == want && H5Aread(a, mtype, val) >= 0) rc = 0;
    if (rc < 0)
        errmsg_fail(err, errlen, "attribute '%s' on '%s' is not a scalar %s", key, obj_path,
                    want == H5T_INTEGER ? "integer" : "float");
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    H5Oclose(o);
    return rc;
}

int h5util_attr_get_i64(hid_t loc, const char *obj_path, const char *key, int64_t *val, char *err,
                        size_t errlen) {
    return attr_get_num(loc, obj_path, key, H5T_INTEGER, H5T_NATIVE_INT64, val, err, errlen);
}

int h5util_attr_get_f64(hid_t loc, const char *obj_path, const char *key, double *val, char *err,
                        size_t errlen) {
    return attr_get_num(loc, obj_path, key, H5T_FLOAT, H5T_NATIVE_DOUBLE, val, err, errlen);
}
