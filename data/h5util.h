/* h5util: helpers shared by data/'s modules (not for use outside data/): error messages that
 * ranks agree on, HDF5's automatic error printing switched off around our calls, the innermost
 * HDF5 error as text, sniffing a file's kind, typed attributes on any HDF5 object, and the
 * MPI-IO property lists. Depends on MPI and HDF5. */
#ifndef MT_DATA_H5UTIL_H
#define MT_DATA_H5UTIL_H
#include <hdf5.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "mesh/errmsg.h" /* errmsg_fail: how data/ formats its messages */
#include "mesh/mesh_mpi.h"

/* Longest message carried between ranks (longer ones are truncated). */
#define H5UTIL_MSG_MAX 512

/* Collective over: comm. mesh_agree_msg (mesh/mesh.h): the minimum of `status` over comm, and
 * when it is negative the message of the lowest failing rank in err on every rank. */
int h5util_agree(MPI_Comm comm, int status, char *err, size_t errlen);

/* Not collective. Switches HDF5's automatic error printing off (begin) and back to what it was
 * (end). Every public data/ function that calls HDF5 brackets its body with these. */
typedef struct {
    H5E_auto2_t func;
    void *data;
} h5util_quiet;
void h5util_quiet_begin(h5util_quiet *q);
void h5util_quiet_end(const h5util_quiet *q);

/* Not collective. The innermost message on HDF5's error stack ("truncated file: eof = ...") into
 * buf[len] ("" if the stack is empty; bytes outside printable ASCII, such as those of a name
 * read from a damaged file, become '?'), then clears the stack. Returns buf. */
const char *h5util_last_error(char *buf, size_t len);

/* What a path holds, judged from its bytes (not its name). */
typedef enum {
    H5UTIL_FILE_MISSING = -1, /* not a readable regular file (errno in *sys_errno) */
    H5UTIL_FILE_EMPTY = 0,
    H5UTIL_FILE_HDF5 = 1,  /* HDF5 signature at 0, 512, 1024, 2048, ... */
    H5UTIL_FILE_OTHER = 2, /* anything else */
} h5util_file_kind;
/* Not collective. Classifies `path`; *size gets its size in bytes (0 when missing). */
h5util_file_kind h5util_sniff(const char *path, int64_t *size, int *sys_errno);

/* Property lists for MPI-IO over comm (file access) and for collective/independent transfers.
 * Close them with H5Pclose. */
hid_t h5util_fapl_mpio(MPI_Comm comm);
hid_t h5util_dxpl(int collective);

/* Not collective unless the file was opened with MPI-IO and the call writes, in which case every
 * rank must call it with the same arguments. Attributes on the object at obj_path of loc (a file
 * or group id; "/" or "." for loc itself). Writing replaces an existing attribute. Strings are
 * stored fixed-length, null-terminated; reading accepts fixed and variable-length strings. Integers
 * are stored as int64 and read from any integer type; doubles as float64. Return 0 or -1 with a
 * message naming obj_path and key. */
int h5util_attr_put_str(hid_t loc, const char *obj_path, const char *key, const char *val,
                        char *err, size_t errlen);
int h5util_attr_put_i64(hid_t loc, const char *obj_path, const char *key, int64_t val, char *err,
                        size_t errlen);
int h5util_attr_put_f64(hid_t loc, const char *obj_path, const char *key, double val, char *err,
                        size_t errlen);
/* Return 0, 1 if the object exists but has no such attribute (err untouched), -1 on other errors
 * (missing object, wrong type class) with a message. */
int h5util_attr_get_str(hid_t loc, const char *obj_path, const char *key, char *val, size_t vallen,
                        char *err, size_t errlen);
int h5util_attr_get_i64(hid_t loc, const char *obj_path, const char *key, int64_t *val, char *err,
                        size_t errlen);
int h5util_attr_get_f64(hid_t loc, const char *obj_path, const char *key, double *val, char *err,
                        size_t errlen);
#endif
