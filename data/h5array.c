/* h5array: see h5array.h. */
#define _POSIX_C_SOURCE 200809L /* fsync, getpid, rename, unlink, SIGKILL */
#include "data/h5array.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/h5util.h"
#include "mesh/mesh.h"
#include "mesh/where.h"

struct h5array {
    MPI_Comm comm; /* a dup of the caller's, so our agreement traffic never meets theirs */
    int rank;
    int writing, committed;
    int writes; /* h5array_write calls that reached h5array_fault_point */
    hid_t file;
    char path[1024];
    char tmp[1100];
};

const char *h5array_path(const h5array *f) {
    return f->path;
}

/* "[4, 8, 2]" into buf. */
static const char *shape_str(char *buf, size_t len, int ndim, const int64_t *dims) {
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
    return buf;
}

/* "path: what (innermost HDF5 error)" into err, what formatted from fmt; returns -1. */
static int fail_h5(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_h5(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    char what[300], h5[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    h5util_last_error(h5, sizeof h5);
    errmsg_fail(err, errlen, "%s: %s (%s)", path, what, h5);
    return -1;
}

static h5array *handle_new(const char *path, MPI_Comm comm) {
    h5array *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    MPI_Comm_dup(comm, &f->comm);
    MPI_Comm_rank(comm, &f->rank);
    f->file = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    return f;
}

static void handle_free(h5array *f) {
    MPI_Comm_free(&f->comm);
    free(f);
}

/* Collective over: the handle's comm. The end of h5array_create (f->writing: creates f->tmp) and
 * h5array_open (opens path read-only), through MPI-IO. Ranks agree; then *out = f, or f is closed
 * (a created temp file deleted) and *out stays NULL. */
static int open_file(h5array **out, h5array *f, const char *path, char *err, size_t errlen) {
    int st = 0;
    hid_t fapl = h5util_fapl_mpio(f->comm);
    if (f->writing) {
        f->file = fapl >= 0 ? H5Fcreate(f->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : -1;
        if (f->file < 0) st = fail_h5(err, errlen, f->tmp, "cannot create");
    } else {
        f->file = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
        if (f->file < 0)
            st = fail_h5(err, errlen, path, "HDF5 file cannot be opened, truncated or corrupt?");
    }
    if (fapl >= 0) H5Pclose(fapl);
    st = h5util_agree(f->comm, st, err, errlen);
    if (st < 0) {
        h5array_close(f);
        return st;
    }
    *out = f;
    return 0;
}

int h5array_create(h5array **out, const char *path, const mesh_comm *on, char *err, size_t errlen) {
    const MPI_Comm comm = on->mpi;
    *out = NULL;
    h5util_quiet q;
    h5util_quiet_begin(&q);
    h5array *f = handle_new(path, comm);
    long pid = (long)getpid();
    mesh_blocking_begin("MPI_Bcast (the temporary file's name)");
    MPI_Bcast(&pid, 1, MPI_LONG, 0, comm);
    mesh_blocking_end();
    int st = 0;
    if (!f) {
        errmsg_fail(err, errlen, "%s: out of memory", path);
        st = -1;
    }
    if (h5util_agree(comm, st, err, errlen) < 0) {
        if (f) handle_free(f);
        h5util_quiet_end(&q);
        return -1;
    }
    f->writing = 1;
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%ld", path, pid);
    st = open_file(out, f, path, err, errlen);
    h5util_quiet_end(&q);
    return st;
}

int h5array_open(h5array **out, const char *path, const mesh_comm *on, char *err, size_t errlen) {
    const MPI_Comm comm = on->mpi;
    *out = NULL;
    h5util_quiet q;
    h5util_quiet_begin(&q);
    h5array *f = handle_new(path, comm);
    int st = 0;
    if (!f) {
        errmsg_fail(err, errlen, "%s: out of memory", path);
        st = -1;
    } else if (f->rank == 0) {
        int64_t size;
        int e;
        h5util_file_kind kind = h5util_sniff(path, &size, &e);
        if (kind != H5UTIL_FILE_HDF5) st = -1;
        if (kind == H5UTIL_FILE_MISSING)
            errmsg_fail(err, errlen, "%s: cannot open (%s)", path, strerror(e));
        else if (kind == H5UTIL_FILE_EMPTY)
            errmsg_fail(err, errlen, "%s: file is empty", path);
        else if (kind == H5UTIL_FILE_OTHER)
            errmsg_fail(err, errlen, "%s: not an HDF5 file (no HDF5 signature)", path);
    }
    if (h5util_agree(comm, st, err, errlen) < 0) {
        if (f) handle_free(f);
        h5util_quiet_end(&q);
        return -1;
    }
    st = open_file(out, f, path, err, errlen);
    h5util_quiet_end(&q);
    return st;
}

int h5array_commit(h5array *f, char *err, size_t errlen) {
    int st = 0;
    if (!f->writing || f->committed || f->file < 0) {
        errmsg_fail(err, errlen, "%s: commit of a file that is not open for writing", f->path);
        st = -1;
    }
    if (h5util_agree(f->comm, st, err, errlen) < 0) return -1;
    h5util_quiet q;
    h5util_quiet_begin(&q);
    if (H5Fclose(f->file) < 0) st = fail_h5(err, errlen, f->tmp, "cannot close");
    f->file = -1;
    h5util_quiet_end(&q);
    /* Every rank has closed (its data is written) before rank 0 publishes the file. */
    st = h5util_agree(f->comm, st, err, errlen);
    if (st == 0 && f->rank == 0) {
        int fd = open(f->tmp, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0 || rename(f->tmp, f->path) != 0) {
            errmsg_fail(err, errlen, "%s: cannot sync and rename %s into place (%s)", f->path,
                        f->tmp, strerror(errno));
            st = -1;
        }
        if (fd >= 0) close(fd);
        if (st == 0) { /* make the rename itself durable */
            char dir[1024];
            snprintf(dir, sizeof dir, "%s", f->path);
            int dfd = open(dirname(dir), O_RDONLY);
            if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
            }
        }
    }
    st = h5util_agree(f->comm, st, err, errlen);
    f->committed = st == 0;
    if (st < 0 && f->rank == 0) unlink(f->tmp);
    mesh_blocking_begin("MPI_Barrier (publishing a file)");
    MPI_Barrier(f->comm);
    mesh_blocking_end();
    f->writing = 0; /* nothing left to discard */
    return st;
}

void h5array_close(h5array *f) {
    if (!f) return;
    h5util_quiet q;
    h5util_quiet_begin(&q);
    if (f->file >= 0) H5Fclose(f->file);
    h5util_quiet_end(&q);
    if (f->writing && !f->committed) {
        mesh_blocking_begin("MPI_Barrier (discarding an unfinished file)");
        MPI_Barrier(f->comm);
        if (f->rank == 0) unlink(f->tmp);
        MPI_Barrier(f->comm);
        mesh_blocking_end();
    }
    handle_free(f);
}

/* ---- datasets ---- */

/* 0 when 1 ≤ ndim ≤ MAX and 0 ≤ offset, 0 ≤ count, offset + count ≤ dims in every dim. */
static int check_slab(const char *name, int ndim, const int64_t *dims, const int64_t *offset,
                      const int64_t *count, char *err, size_t errlen) {
    if (ndim < 1 || ndim > H5ARRAY_MAX_DIMS) {
        errmsg_fail(err, errlen, "dataset '%s': %d dims, supported 1 to %d", name, ndim,
                    H5ARRAY_MAX_DIMS);
        return -1;
    }
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 1 || offset[i] < 0 || count[i] < 0 || offset[i] + count[i] > dims[i]) {
            char s1[96], s2[96], s3[96];
            errmsg_fail(err, errlen, "dataset '%s': slab at %s of %s does not fit shape %s", name,
                        shape_str(s1, sizeof s1, ndim, offset),
                        shape_str(s2, sizeof s2, ndim, count),
                        shape_str(s3, sizeof s3, ndim, dims));
            return -1;
        }
    }
    return 0;
}

static int64_t slab_size(int ndim, const int64_t *count) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= count[i];
    return n;
}

/* Selects the slab in fspace (rows: its dim-0 blocks) and makes the matching memory space; an
 * empty slab selects none. */
static int select_slab(hid_t fspace, hid_t *mspace, int ndim, const int64_t *offset,
                       const int64_t *count, h5array_rows rows) {
    hsize_t start[H5ARRAY_MAX_DIMS], cnt[H5ARRAY_MAX_DIMS], mem[H5ARRAY_MAX_DIMS];
    hsize_t step[H5ARRAY_MAX_DIMS], times[H5ARRAY_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        start[i] = (hsize_t)offset[i];
        cnt[i] = mem[i] = (hsize_t)count[i];
        step[i] = 1, times[i] = 1;
    }
    if (slab_size(ndim, count) == 0) {
        hsize_t one = 1;
        *mspace = H5Screate_simple(1, &one, NULL);
        if (*mspace < 0 || H5Sselect_none(*mspace) < 0) return -1;
        return H5Sselect_none(fspace) < 0 ? -1 : 0;
    }
    mem[0] *= (hsize_t)rows.blocks;
    *mspace = H5Screate_simple(ndim, mem, NULL);
    if (*mspace < 0) return -1;
    if (rows.blocks == 1)
        return H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, cnt, NULL) < 0 ? -1 : 0;
    step[0] = (hsize_t)rows.stride, times[0] = (hsize_t)rows.blocks;
    return H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, step, times, cnt) < 0 ? -1 : 0;
}

/* The rows a slab's blocks span along dim 0 (for the fit check): count with its count[0] the
 * span. */
static void rows_span(int ndim, const int64_t *count, h5array_rows rows, int64_t *out) {
    for (int i = 0; i < ndim; i++) out[i] = count[i];
    if (rows.blocks > 1) out[0] = (rows.blocks - 1) * rows.stride + count[0];
}

/* Collective over: the handle's comm. st is this rank's status so far. Selects this rank's slab
 * offset[]/count[] in fspace (the dataset's file space), agrees with the other ranks that all got
 * this far, then moves the slab in one collective transfer: buf → dataset d when writing, d → buf
 * when reading (buf is not touched for an empty slab). Returns this rank's status; the caller
 * agrees on it after its cleanup. */
static int move_slab(h5array *f, int st, int writing, hid_t d, hid_t fspace, hid_t dxpl,
                     const char *name, int ndim, const int64_t *offset, const int64_t *count,
                     h5array_rows rows, float *buf, char *err, size_t errlen) {
    hid_t mspace = -1;
    if (st == 0 && (fspace < 0 || select_slab(fspace, &mspace, ndim, offset, count, rows) < 0))
        st = fail_h5(err, errlen, f->path, "cannot select a slab");
    st = h5util_agree(f->comm, st, err, errlen);
    if (st == 0) {
        float dummy = 0;
        float *p = slab_size(ndim, count) ? buf : &dummy;
        herr_t rc = writing ? H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, p)
                            : H5Dread(d, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, p);
        if (rc < 0)
            st = fail_h5(err, errlen, f->path, "cannot %s dataset '%s'", writing ? "write" : "read",
                         name);
    }
    if (mspace >= 0) H5Sclose(mspace);
    return st;
}

/* FNV-1a of the name, to catch ranks that disagree on which dataset they write. */
static int64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (int64_t)(h >> 1);
}

/* Collective. Checks that ranks agree on name, ndim, dims and that the writers' slabs add up to
 * the array's size. st is this rank's local status so far. */
static int check_write_args(h5array *f, int st, const char *name, int ndim, const int64_t *dims,
                            int64_t written, char *err, size_t errlen) {
    int64_t mine[2 + H5ARRAY_MAX_DIMS] = {name_hash(name), ndim}, lo[2 + H5ARRAY_MAX_DIMS],
                     hi[2 + H5ARRAY_MAX_DIMS], total;
    for (int i = 0; i < ndim && i < H5ARRAY_MAX_DIMS; i++) mine[2 + i] = dims[i];
    mesh_blocking_begin("MPI_Allreduce (checking the slabs of a dataset)");
    MPI_Allreduce(mine, lo, 2 + H5ARRAY_MAX_DIMS, MPI_INT64_T, MPI_MIN, f->comm);
    MPI_Allreduce(mine, hi, 2 + H5ARRAY_MAX_DIMS, MPI_INT64_T, MPI_MAX, f->comm);
    MPI_Allreduce(&written, &total, 1, MPI_INT64_T, MPI_SUM, f->comm);
    mesh_blocking_end();
    if (st == 0 && memcmp(lo, hi, sizeof lo) != 0) {
        char s[96];
        errmsg_fail(err, errlen,
                    "%s: ranks disagree on the name or shape of dataset '%s' (rank %d has %s)",
                    f->path, name, f->rank, shape_str(s, sizeof s, ndim, dims));
        st = -1;
    }
    int64_t size = st == 0 ? slab_size(ndim, dims) : 0;
    if (st == 0 && total != size) {
        char s[96];
        errmsg_fail(err, errlen,
                    "%s: the writers' slabs of dataset '%s' %s hold %lld elements, the array %lld "
                    "(each element must be written by exactly one writer)",
                    f->path, name, shape_str(s, sizeof s, ndim, dims), (long long)total,
                    (long long)size);
        st = -1;
    }
    return h5util_agree(f->comm, st, err, errlen);
}

/* Test hook, for the test of a rank killed mid-save (tests/ckpt/sigkill.sh): with
 * MESHTRAIN_FAULT_KILL_SAVE=R:I in the environment, world rank R raises SIGKILL at the I-th write
 * (from 0) into every file it creates: the arrays before it are in the temp file, the other ranks
 * are on their way into the write's collectives, and mpirun must end the job. */
static void h5array_kill_point(int write) {
    const char *v = getenv("MESHTRAIN_FAULT_KILL_SAVE");
    int rank, at;
    if (!v || sscanf(v, "%d:%d", &rank, &at) != 2 || at != write) return;
    if (mesh_world_rank() == rank) raise(SIGKILL);
}

/* Test hook, for the tests where no small file system can be mounted to fill up: with
 * MESHTRAIN_FAULT_SAVE=i in the environment, the i-th write (from 0) into every created file fails
 * as a full disk would, midway through it (in a checkpoint: the i-th array of every save). Not
 * collective: every rank reads the same environment and counts the same calls, and the failure
 * joins the write's own agreement. Returns 0, or -1 with a message naming the injection. */
static int h5array_fault_point(h5array *f, const char *name, char *err, size_t errlen) {
    h5array_kill_point(f->writes);
    const char *fault = getenv("MESHTRAIN_FAULT_SAVE");
    const int fail_at = fault && *fault ? atoi(fault) : -1;
    if (f->writes++ != fail_at) return 0;
    errmsg_fail(err, errlen,
                "%s: cannot write dataset '%s' (injected by MESHTRAIN_FAULT_SAVE=%d: No space "
                "left on device)",
                f->tmp, name, fail_at);
    return -1;
}

/* The end of a collective write or read: closes the ids[n] that are open (datasets, dataspaces,
 * datatypes, property lists), restores HDF5's error printing and agrees on st over the file's
 * communicator. */
static int slab_end(const h5array *f, const h5util_quiet *q, int st, const hid_t *ids, int n,
                    char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0) continue;
        switch (H5Iget_type(ids[i])) {
        case H5I_DATASET:
            H5Dclose(ids[i]);
            break;
        case H5I_DATASPACE:
            H5Sclose(ids[i]);
            break;
        case H5I_DATATYPE:
            H5Tclose(ids[i]);
            break;
        default:
            H5Pclose(ids[i]);
        }
    }
    h5util_quiet_end(q);
    return h5util_agree(f->comm, st, err, errlen);
}

int h5array_write(h5array *f, const char *name, int ndim, const int64_t *dims,
                  const int64_t *offset, const int64_t *count, int writer, const float *data,
                  char *err, size_t errlen) {
    return h5array_write_rows(f, name, ndim, dims, offset, count, H5ARRAY_ONE_BLOCK, writer, data,
                              err, errlen);
}

int h5array_write_rows(h5array *f, const char *name, int ndim, const int64_t *dims,
                       const int64_t *offset, const int64_t *count, h5array_rows rows,
                       int writer, const float *data, char *err, size_t errlen) {
    int st = 0;
    int64_t span[H5ARRAY_MAX_DIMS];
    if (ndim >= 1 && ndim <= H5ARRAY_MAX_DIMS) rows_span(ndim, count, rows, span);
    if (!f->writing || f->file < 0) {
        errmsg_fail(err, errlen, "%s: not open for writing", f->path);
        st = -1;
    } else {
        static const int64_t zero[H5ARRAY_MAX_DIMS] = {0, 0, 0};
        st = check_slab(name, ndim, dims, writer ? offset : zero, writer ? span : zero, err,
                        errlen);
    }
    if (st == 0) st = h5array_fault_point(f, name, err, errlen);
    int64_t written = st == 0 && writer ? rows.blocks * slab_size(ndim, count) : 0;
    if (check_write_args(f, st, name, ndim, dims, written, err, errlen) < 0) return -1;

    h5util_quiet q;
    h5util_quiet_begin(&q);
    hsize_t hd[H5ARRAY_MAX_DIMS];
    for (int i = 0; i < ndim; i++) hd[i] = (hsize_t)dims[i];
    int64_t none[H5ARRAY_MAX_DIMS] = {0, 0, 0};
    hid_t fspace = H5Screate_simple(ndim, hd, NULL), d = -1;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t dxpl = h5util_dxpl(1);
    if (fspace < 0 || lcpl < 0 || dcpl < 0 || dxpl < 0 ||
        H5Pset_create_intermediate_group(lcpl, 1) < 0 ||
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0) {
        st = fail_h5(err, errlen, f->path, "cannot set up a dataset write");
    }
    if (st == 0) {
        d = H5Dcreate2(f->file, name, H5T_IEEE_F32LE, fspace, lcpl, dcpl, H5P_DEFAULT);
        if (d < 0) {
            st = fail_h5(err, errlen, f->path,
                         "cannot create dataset '%s' (does it exist already?)", name);
        }
    }
    /* H5Dwrite only reads from the buffer: the cast is for move_slab's one signature. */
    st = move_slab(f, st, 1, d, fspace, dxpl, name, ndim, writer ? offset : none,
                   writer ? count : none, rows, (float *)data, err, errlen);
    return slab_end(f, &q, st, (const hid_t[]){d, fspace, lcpl, dcpl, dxpl}, 5, err, errlen);
}

/* Opens dataset `name` and returns its id with its shape, or -1 with a message. */
static hid_t open_dataset(h5array *f, const char *name, int *ndim, int64_t *dims, char *err,
                          size_t errlen) {
    htri_t is = H5Lexists(f->file, name, H5P_DEFAULT);
    hid_t d = is > 0 ? H5Dopen2(f->file, name, H5P_DEFAULT) : -1;
    if (d < 0) {
        H5Eclear2(H5E_DEFAULT);
        errmsg_fail(err, errlen, "%s: no dataset '%s'", f->path, name);
        return -1;
    }
    hid_t space = H5Dget_space(d);
    hsize_t hd[H5ARRAY_MAX_DIMS];
    int nd = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (nd < 1 || nd > H5ARRAY_MAX_DIMS || H5Sget_simple_extent_dims(space, hd, NULL) < 0) {
        errmsg_fail(err, errlen, "%s: dataset '%s' has %d dims, supported 1 to %d", f->path, name,
                    nd, H5ARRAY_MAX_DIMS);
        if (space >= 0) H5Sclose(space);
        H5Dclose(d);
        return -1;
    }
    H5Sclose(space);
    int64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        dims[i] = hd[i] > (hsize_t)H5ARRAY_MAX_ELEMS ? -1 : (int64_t)hd[i];
        numel = dims[i] < 1 || numel > H5ARRAY_MAX_ELEMS / dims[i] ? -1 : numel * dims[i];
        if (numel < 0) break;
    }
    if (numel < 0) { /* a damaged header: no reader may size a buffer or a loop from it */
        char s1[160];
        size_t at = (size_t)snprintf(s1, sizeof s1, "[");
        for (int i = 0; i < nd && at < sizeof s1; i++)
            at += (size_t)snprintf(s1 + at, sizeof s1 - at, "%s%llu", i ? ", " : "",
                                   (unsigned long long)hd[i]);
        if (at < sizeof s1) snprintf(s1 + at, sizeof s1 - at, "]");
        errmsg_fail(err, errlen,
                    "%s: dataset '%s' has shape %s: an empty extent or over %lld elements "
                    "(a damaged file)",
                    f->path, name, s1, (long long)H5ARRAY_MAX_ELEMS);
        H5Dclose(d);
        return -1;
    }
    /* The layout message keeps the stored size apart from the shape: for contiguous and compact
     * storage they must agree (a damaged extent that still fits the limit would read past the
     * array or leave it short; a zeroed layout message reads as compact with nothing stored). */
    hid_t dcpl = H5Dget_create_plist(d), type = H5Dget_type(d);
    const H5D_layout_t lay = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    const size_t esize = type >= 0 ? H5Tget_size(type) : 0;
    const hsize_t stored = H5Dget_storage_size(d), want = (hsize_t)numel * esize;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (type >= 0) H5Tclose(type);
    const int bad = esize == 0 ||
                    (lay != H5D_CONTIGUOUS && lay != H5D_COMPACT && lay != H5D_CHUNKED) ||
                    (lay == H5D_CONTIGUOUS && stored != 0 && stored != want) ||
                    (lay == H5D_COMPACT && stored != want);
    if (bad) {
        char s1[96];
        errmsg_fail(err, errlen,
                    "%s: dataset '%s' has shape %s of %lld elements of %zu bytes, but %llu bytes "
                    "of %s storage (a damaged file)",
                    f->path, name, shape_str(s1, sizeof s1, nd, dims), (long long)numel, esize,
                    (unsigned long long)stored,
                    lay == H5D_CONTIGUOUS ? "contiguous"
                    : lay == H5D_COMPACT  ? "compact"
                    : lay == H5D_CHUNKED  ? "chunked"
                                          : "unknown");
        H5Dclose(d);
        return -1;
    }
    *ndim = nd;
    return d;
}

int h5array_shape(h5array *f, const char *name, int *ndim, int64_t dims[H5ARRAY_MAX_DIMS],
                  char *err, size_t errlen) {
    h5util_quiet q;
    h5util_quiet_begin(&q);
    hid_t d = open_dataset(f, name, ndim, dims, err, errlen);
    if (d >= 0) H5Dclose(d);
    h5util_quiet_end(&q);
    return h5util_agree(f->comm, d >= 0 ? 0 : -1, err, errlen);
}

int h5array_read(h5array *f, const char *name, int ndim, const int64_t *dims, const int64_t *offset,
                 const int64_t *count, float *data, char *err, size_t errlen) {
    return h5array_read_rows(f, name, ndim, dims, offset, count, H5ARRAY_ONE_BLOCK, data, err,
                             errlen);
}

int h5array_read_rows(h5array *f, const char *name, int ndim, const int64_t *dims,
                      const int64_t *offset, const int64_t *count, h5array_rows rows, float *data,
                      char *err, size_t errlen) {
    int64_t span[H5ARRAY_MAX_DIMS];
    if (ndim >= 1 && ndim <= H5ARRAY_MAX_DIMS) rows_span(ndim, count, rows, span);
    int st = f->file < 0 ? -1 : check_slab(name, ndim, dims, offset, span, err, errlen);
    if (f->file < 0) errmsg_fail(err, errlen, "%s: file is not open", f->path);
    if (h5util_agree(f->comm, st, err, errlen) < 0) return -1;

    h5util_quiet q;
    h5util_quiet_begin(&q);
    int nd = 0;
    int64_t got[H5ARRAY_MAX_DIMS];
    hid_t d = open_dataset(f, name, &nd, got, err, errlen), fspace = -1, type = -1;
    hid_t dxpl = h5util_dxpl(1);
    if (d < 0 || dxpl < 0) st = -1;
    if (st == 0 && (nd != ndim || memcmp(got, dims, (size_t)nd * sizeof *dims) != 0)) {
        char s1[96], s2[96];
        errmsg_fail(err, errlen, "%s: dataset '%s' has shape %s, expected %s", f->path, name,
                    shape_str(s1, sizeof s1, nd, got), shape_str(s2, sizeof s2, ndim, dims));
        st = -1;
    }
    if (st == 0 && ((type = H5Dget_type(d)) < 0 || H5Tget_class(type) != H5T_FLOAT)) {
        errmsg_fail(err, errlen, "%s: dataset '%s' is not floating point", f->path, name);
        st = -1;
    }
    /* Every rank passed the same checks on the same file, so all reach the collective read. */
    st = h5util_agree(f->comm, st, err, errlen);
    if (st == 0) fspace = H5Dget_space(d);
    st = move_slab(f, st, 0, d, fspace, dxpl, name, ndim, offset, count, rows, data, err,
                   errlen);
    return slab_end(f, &q, st, (const hid_t[]){type, fspace, dxpl, d}, 4, err, errlen);
}

/* ---- attributes ---- */

/* Creates group `obj` (and its parents) when it does not exist yet. Collective when writing. */
static int ensure_object(h5array *f, const char *obj, char *err, size_t errlen) {
    if (strcmp(obj, "/") == 0 || strcmp(obj, ".") == 0) return 0;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    /* H5Lexists fails rather than answers when a parent is missing: both mean "create". */
    htri_t is = H5Lexists(f->file, obj, H5P_DEFAULT);
    int rc = 0;
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        hid_t g = H5Gcreate2(f->file, obj, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) {
            rc = fail_h5(err, errlen, f->path, "cannot create group '%s'", obj);
        } else {
            H5Gclose(g);
        }
    }
    H5Pclose(lcpl);
    return rc;
}

typedef enum { ATTR_STR, ATTR_I64, ATTR_F64 } attr_kind;

static int attr_put(h5array *f, const char *obj, const char *key, attr_kind kind, const void *val,
                    char *err, size_t errlen) {
    int st = f->writing && f->file >= 0 ? 0 : -1;
    if (st < 0) errmsg_fail(err, errlen, "%s: not open for writing", f->path);
    if (h5util_agree(f->comm, st, err, errlen) < 0) return -1;
    h5util_quiet q;
    h5util_quiet_begin(&q);
    char e[H5UTIL_MSG_MAX] = "";
    st = ensure_object(f, obj, err, errlen);
    if (st == 0) {
        if (kind == ATTR_STR)
            st = h5util_attr_put_str(f->file, obj, key, val, e, sizeof e);
        else if (kind == ATTR_I64)
            st = h5util_attr_put_i64(f->file, obj, key, *(const int64_t *)val, e, sizeof e);
        else
            st = h5util_attr_put_f64(f->file, obj, key, *(const double *)val, e, sizeof e);
        if (st < 0) errmsg_fail(err, errlen, "%s: %s", f->path, e);
    }
    h5util_quiet_end(&q);
    return h5util_agree(f->comm, st, err, errlen);
}

static int attr_get(h5array *f, const char *obj, const char *key, attr_kind kind, void *val,
                    size_t vallen, char *err, size_t errlen) {
    h5util_quiet q;
    h5util_quiet_begin(&q);
    char e[H5UTIL_MSG_MAX] = "";
    int st = -1;
    if (f->file < 0)
        snprintf(e, sizeof e, "file is not open");
    else if (kind == ATTR_STR)
        st = h5util_attr_get_str(f->file, obj, key, val, vallen, e, sizeof e);
    else if (kind == ATTR_I64)
        st = h5util_attr_get_i64(f->file, obj, key, val, e, sizeof e);
    else
        st = h5util_attr_get_f64(f->file, obj, key, val, e, sizeof e);
    if (st == 1) {
        errmsg_fail(err, errlen, "%s: no attribute '%s' on '%s'", f->path, key, obj);
        st = -1;
    } else if (st < 0) {
        errmsg_fail(err, errlen, "%s: %s", f->path, e);
    }
    h5util_quiet_end(&q);
    return h5util_agree(f->comm, st, err, errlen);
}

int h5array_attr_put_str(h5array *f, const char *obj, const char *key, const char *val, char *err,
                         size_t errlen) {
    return attr_put(f, obj, key, ATTR_STR, val, err, errlen);
}

int h5array_attr_put_i64(h5array *f, const char *obj, const char *key, int64_t val, char *err,
                         size_t errlen) {
    return attr_put(f, obj, key, ATTR_I64, &val, err, errlen);
}

int h5array_attr_put_f64(h5array *f, const char *obj, const char *key, double val, char *err,
                         size_t errlen) {
    return attr_put(f, obj, key, ATTR_F64, &val, err, errlen);
}

int h5array_attr_get_str(h5array *f, const char *obj, const char *key, char *val, size_t vallen,
                         char *err, size_t errlen) {
    return attr_get(f, obj, key, ATTR_STR, val, vallen, err, errlen);
}

int h5array_attr_get_i64(h5array *f, const char *obj, const char *key, int64_t *val, char *err,
                         size_t errlen) {
    return attr_get(f, obj, key, ATTR_I64, val, 0, err, errlen);
}

int h5array_attr_get_f64(h5array *f, const char *obj, const char *key, double *val, char *err,
                         size_t errlen) {
    return attr_get(f, obj, key, ATTR_F64, val, 0, err, errlen);
}

/* ---- listing ---- */

typedef struct {
    char **names;
    int n, cap, oom;
} name_list;

static herr_t list_cb(hid_t g, const char *name, const H5L_info_t *info, void *p) {
    name_list *l = p;
    if (info->type != H5L_TYPE_HARD) return 0;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    H5I_type_t type = o >= 0 ? H5Iget_type(o) : H5I_BADID;
    if (o >= 0) H5Oclose(o);
    if (type != H5I_DATASET) return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **grown = realloc(l->names, (size_t)cap * sizeof *grown);
        if (!grown) {
            l->oom = 1;
            return -1;
        }
        l->names = grown;
        l->cap = cap;
    }
    l->names[l->n] = malloc(strlen(name) + 1);
    if (!l->names[l->n]) {
        l->oom = 1;
        return -1;
    }
    strcpy(l->names[l->n++], name);
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void h5array_names_free(char **names, int count) {
    if (!names) return;
    for (int i = 0; i < count; i++) free(names[i]);
    free(names);
}

int h5array_list(h5array *f, const char *group, int recursive, char ***names, int *count, char *err,
                 size_t errlen) {
    *names = NULL;
    *count = 0;
    h5util_quiet q;
    h5util_quiet_begin(&q);
    name_list l = {0};
    int st = 0;
    hid_t g = f->file >= 0 ? H5Gopen2(f->file, group, H5P_DEFAULT) : -1;
    if (g < 0) {
        H5Eclear2(H5E_DEFAULT);
        errmsg_fail(err, errlen, "%s: no group '%s'", f->path, group);
        st = -1;
    } else {
        herr_t rc = recursive ? H5Lvisit(g, H5_INDEX_NAME, H5_ITER_INC, list_cb, &l)
                              : H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, list_cb, &l);
        if (rc < 0) {
            st = l.oom ? -1 : fail_h5(err, errlen, f->path, "cannot list a group");
            if (l.oom) errmsg_fail(err, errlen, "%s: out of memory listing '%s'", f->path, group);
        }
        H5Gclose(g);
    }
    h5util_quiet_end(&q);
    st = h5util_agree(f->comm, st, err, errlen);
    if (st < 0) {
        h5array_names_free(l.names, l.n);
        return st;
    }
    if (l.n > 1) qsort(l.names, (size_t)l.n, sizeof *l.names, cmp_str);
    *names = l.names;
    *count = l.n;
    return 0;
}
