/* tokens: see tokens.h. */
#define _POSIX_C_SOURCE 200809L /* fsync, getpid, rename, unlink */
#include "data/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/hash.h"
#include "data/h5util.h"
#include "data/paths.h"
#include "mesh/where.h"
#include "data/tokenizer.h"

struct tokens {
    char path[1024];
    char source[1024];
    int is_text;
    int64_t n[2];
    /* text input: all tokens in memory, split s starts at text + start[s] */
    uint8_t *text;
    int64_t start[2];
    /* token file */
    hid_t file, dset[2], dxpl;
};

static const char *const split_names[2] = {"train", "val"};

const char *tokens_split_name(tokens_split split) {
    return split == TOKENS_VAL ? "val" : "train";
}

int64_t tokens_val_count(int64_t n, double val_fraction) {
    return (int64_t)floor((double)n * val_fraction);
}

/* ---- windows ---- */

uint64_t tokens_hash(uint64_t seed, uint64_t split, uint64_t step, uint64_t row) {
    return hash_mix64(hash_mix64(hash_mix64(hash_mix64(seed) ^ split) ^ step) ^ row);
}

/* (a · b) mod m for a, b < m < 2^63, by doubling: exact where a·b would overflow. */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
    uint64_t r = 0;
    while (b) {
        if (b & 1) r = (r + a) % m;
        a = (a * 2) % m;
        b >>= 1;
    }
    return r;
}

int64_t tokens_offset(tokens_order order, uint64_t seed, tokens_split split, int64_t step,
                      int64_t B, int64_t b, int64_t n, int64_t T) {
    uint64_t m = (uint64_t)(n - T - 1);
    if (order == TOKENS_ORDER_SEQUENTIAL) {
        uint64_t row = (mulmod((uint64_t)step % m, (uint64_t)B % m, m) + (uint64_t)b % m) % m;
        return (int64_t)mulmod(row, (uint64_t)T % m, m);
    }
    double u =
        (double)(tokens_hash(seed, (uint64_t)split, (uint64_t)step, (uint64_t)b) >> 11) * 0x1.0p-53;
    uint64_t o = (uint64_t)(u * (double)m);
    return (int64_t)(o < m ? o : m - 1);
}

/* ---- handle ---- */

int64_t tokens_count(const tokens *tf, tokens_split split) {
    return tf->n[split == TOKENS_VAL];
}

int64_t tokens_max_T(const tokens *tf) {
    int64_t n = tf->n[0] < tf->n[1] ? tf->n[0] : tf->n[1];
    return n - 2;
}

const char *tokens_source(const tokens *tf) {
    return tf->source;
}

int tokens_is_text(const tokens *tf) {
    return tf->is_text;
}

void tokens_close(tokens *tf) {
    if (!tf) return;
    h5util_quiet q;
    h5util_quiet_begin(&q);
    for (int s = 0; s < 2; s++)
        if (tf->dset[s] >= 0) H5Dclose(tf->dset[s]);
    if (tf->dxpl >= 0) H5Pclose(tf->dxpl);
    if (tf->file >= 0) H5Fclose(tf->file);
    h5util_quiet_end(&q);
    free(tf->text);
    free(tf);
}

static tokens *tokens_alloc(const char *path) {
    tokens *tf = calloc(1, sizeof *tf);
    if (!tf) return NULL;
    snprintf(tf->path, sizeof tf->path, "%s", path);
    tf->file = tf->dset[0] = tf->dset[1] = tf->dxpl = -1;
    return tf;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ---- text ---- */

/* Reads a whole regular file into *buf (malloc'd, n bytes). Returns 0 or -1 with a message. */
static int read_all(const char *path, uint8_t **buf, int64_t *n, char *err, size_t errlen) {
    int64_t size;
    int e;
    h5util_file_kind kind = h5util_sniff(path, &size, &e);
    *buf = NULL;
    *n = 0;
    if (kind == H5UTIL_FILE_MISSING) {
        errmsg_fail(err, errlen, "%s: cannot open (%s)", path, strerror(e));
        return -1;
    }
    if (kind == H5UTIL_FILE_EMPTY) {
        errmsg_fail(err, errlen, "%s: file is empty", path);
        return -1;
    }
    if (kind == H5UTIL_FILE_HDF5) {
        errmsg_fail(err, errlen, "%s: is an HDF5 file, not text", path);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    *buf = malloc((size_t)size);
    if (!f || !*buf || fread(*buf, 1, (size_t)size, f) != (size_t)size) {
        errmsg_fail(err, errlen, "%s: cannot read %lld bytes", path, (long long)size);
        if (f) fclose(f);
        free(*buf);
        *buf = NULL;
        return -1;
    }
    fclose(f);
    *n = size;
    return 0;
}

/* Index of the first byte that breaks UTF-8 (or is NUL), or -1 when the text is clean. */
static int64_t utf8_bad_at(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        int len = c == 0           ? 0
                  : c < 0x80       ? 1
                  : (c >> 5) == 6  ? 2
                  : (c >> 4) == 14 ? 3
                  : (c >> 3) == 30 ? 4
                                   : 0;
        if (len == 0 || i + len > n) return i;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return -1;
}

/* Splits a text of n tokens; -1 with a message when a split would be shorter than 3. */
static int split_text(const char *path, int64_t n, double val_fraction, int64_t *n_train,
                      int64_t *n_val, char *err, size_t errlen) {
    if (!(val_fraction > 0 && val_fraction < 1)) {
        errmsg_fail(err, errlen, "%s: val_fraction must lie in (0, 1), got %g", path, val_fraction);
        return -1;
    }
    *n_val = tokens_val_count(n, val_fraction);
    *n_train = n - *n_val;
    if (*n_val < 3 || *n_train < 3) {
        errmsg_fail(err, errlen,
                    "%s: text too short: %lld bytes split into %lld train + %lld val tokens "
                    "(val_fraction %g), each split needs at least 3",
                    path, (long long)n, (long long)*n_train, (long long)*n_val, val_fraction);
        return -1;
    }
    return 0;
}

/* Collective over comm. Rank 0 has read and checked the text (status st, bytes buf[n]); everyone
 * gets a copy. */
static int open_text(tokens **out, const char *path, int st, uint8_t *buf, int64_t n,
                     double val_fraction, MPI_Comm comm, char *err, size_t errlen) {
    int rank;
    MPI_Comm_rank(comm, &rank);
    int64_t n_train = 0, n_val = 0;
    if (st == 0 && rank == 0) st = split_text(path, n, val_fraction, &n_train, &n_val, err, errlen);
    st = h5util_agree(comm, st, err, errlen);
    if (st < 0) return st;
    mesh_blocking_begin("MPI_Bcast (a data file from rank 0)");
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
    mesh_blocking_end();
    tokens *tf = tokens_alloc(path);
    if (rank != 0) buf = malloc((size_t)n);
    st = tf && buf ? 0 : -1;
    if (st < 0) errmsg_fail(err, errlen, "%s: out of memory for %lld tokens", path, (long long)n);
    st = h5util_agree(comm, st, err, errlen);
    if (st < 0) {
        if (rank != 0) free(buf);
        tokens_close(tf);
        return st;
    }
    for (int64_t at = 0; at < n; at += INT_MAX / 2) {
        int64_t len = n - at < INT_MAX / 2 ? n - at : INT_MAX / 2;
        mesh_blocking_begin("MPI_Bcast (a data file from rank 0)");
        MPI_Bcast(buf + at, (int)len, MPI_UINT8_T, 0, comm);
        mesh_blocking_end();
    }
    tf->is_text = 1;
    tf->text = buf;
    tf->n[1] = tokens_val_count(n, val_fraction);
    tf->n[0] = n - tf->n[1];
    tf->start[0] = 0;
    tf->start[1] = tf->n[0];
    snprintf(tf->source, sizeof tf->source, "%s", base_name(path));
    *out = tf;
    return 0;
}

/* ---- token files ---- */

/* Checks that string attribute key on / equals want; the message names file, key and values. */
static int want_str(hid_t file, const char *path, const char *key, const char *want, char *err,
                    size_t errlen) {
    char got[256], e[256];
    int rc = h5util_attr_get_str(file, "/", key, got, sizeof got, e, sizeof e);
    if (rc == 1) {
        if (strcmp(key, "format") == 0)
            errmsg_fail(err, errlen,
                        "%s: HDF5 file but not a meshtrain token file (no attribute format = "
                        "\"%s\" on /)",
                        path, want);
        else
            errmsg_fail(err, errlen, "%s: token file lacks the '%s' attribute on /", path, key);
        return -1;
    }
    if (rc < 0) {
        errmsg_fail(err, errlen, "%s: %s", path, e);
        return -1;
    }
    if (strcmp(got, want) != 0) {
        if (strcmp(key, "format") == 0)
            errmsg_fail(err, errlen,
                        "%s: HDF5 file but not a meshtrain token file (format is \"%s\", expected "
                        "\"%s\")",
                        path, got, want);
        else
            errmsg_fail(err, errlen, "%s: %s is \"%s\"; this build supports \"%s\"", path, key, got,
                        want);
        return -1;
    }
    return 0;
}

static int want_i64(hid_t file, const char *path, const char *obj, const char *key, int64_t *v,
                    char *err, size_t errlen) {
    char e[256];
    int rc = h5util_attr_get_i64(file, obj, key, v, e, sizeof e);
    if (rc == 1)
        errmsg_fail(err, errlen, "%s: token file lacks the '%s' attribute on %s", path, key, obj);
    if (rc < 0) errmsg_fail(err, errlen, "%s: %s", path, e);
    return rc == 0 ? 0 : -1;
}

/* The integer attribute `key` of / must be `want`; else "<path>: <what> <got>; <expect> <want>". */
static int want_i64_is(hid_t file, const char *path, const char *key, int64_t want,
                       const char *what, const char *expect, char *err, size_t errlen) {
    int64_t v;
    if (want_i64(file, path, "/", key, &v, err, errlen) < 0) return -1;
    if (v == want) return 0;
    return errmsg_fail(err, errlen, "%s: %s %lld; %s %lld", path, what, (long long)v, expect,
                       (long long)want);
}

/* Validates an open token file and opens its datasets into tf. Not collective beyond HDF5's own
 * (every rank runs the same checks on the same file). */
static int check_file(tokens *tf, char *err, size_t errlen) {
    const char *path = tf->path;
    hid_t f = tf->file;
    if (want_str(f, path, "format", TOKENS_FORMAT, err, errlen) < 0 ||
        want_i64_is(f, path, "version", TOKENS_VERSION, "token file version",
                    "this build reads version", err, errlen) < 0 ||
        want_str(f, path, "tokenizer", TOK_NAME, err, errlen) < 0 ||
        want_i64_is(f, path, "vocab_size", TOK_VOCAB_SIZE, "vocab_size", "the byte tokenizer has",
                    err, errlen) < 0)
        return -1;
    if (h5util_attr_get_str(f, "/", "source", tf->source, sizeof tf->source, NULL, 0) != 0)
        snprintf(tf->source, sizeof tf->source, "%s", base_name(path));
    for (int s = 0; s < 2; s++) {
        char obj[16];
        snprintf(obj, sizeof obj, "/%s", split_names[s]);
        htri_t exists = H5Lexists(f, obj, H5P_DEFAULT);
        tf->dset[s] = exists > 0 ? H5Dopen2(f, obj, H5P_DEFAULT) : -1;
        if (tf->dset[s] < 0) {
            errmsg_fail(err, errlen, "%s: token file has no dataset %s", path, obj);
            return -1;
        }
        hid_t space = H5Dget_space(tf->dset[s]), type = H5Dget_type(tf->dset[s]);
        hsize_t dim = 0;
        int ok = space >= 0 && type >= 0 && H5Sget_simple_extent_ndims(space) == 1 &&
                 H5Sget_simple_extent_dims(space, &dim, NULL) == 1 &&
                 H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) <= 4;
        if (space >= 0) H5Sclose(space);
        if (type >= 0) H5Tclose(type);
        if (!ok) {
            errmsg_fail(err, errlen, "%s: dataset %s is not a 1-D integer array of at most 32 bits",
                        path, obj);
            return -1;
        }
        int64_t n_attr;
        if (want_i64(f, path, obj, "n_tokens", &n_attr, err, errlen) < 0) return -1;
        if (n_attr != (int64_t)dim) {
            errmsg_fail(err, errlen, "%s: dataset %s holds %lld tokens but its n_tokens says %lld",
                        path, obj, (long long)dim, (long long)n_attr);
            return -1;
        }
        tf->n[s] = (int64_t)dim;
        if (dim < 3) {
            errmsg_fail(err, errlen, "%s: split '%s' is %s: %lld tokens, at least 3 needed", path,
                        split_names[s], dim == 0 ? "empty" : "too short", (long long)dim);
            return -1;
        }
    }
    tf->dxpl = h5util_dxpl(0);
    if (tf->dxpl < 0) {
        errmsg_fail(err, errlen, "%s: cannot create a transfer property list", path);
        return -1;
    }
    return 0;
}

static int open_file(tokens **out, const char *path, int st, MPI_Comm comm, char *err,
                     size_t errlen) {
    tokens *tf = tokens_alloc(path);
    if (!tf) {
        st = -1;
        errmsg_fail(err, errlen, "%s: out of memory", path);
    }
    st = h5util_agree(comm, st, err, errlen);
    if (st < 0) {
        free(tf);
        return st;
    }
    hid_t fapl = h5util_fapl_mpio(comm);
    tf->file = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
    if (tf->file < 0) {
        char h5[256];
        h5util_last_error(h5, sizeof h5);
        errmsg_fail(err, errlen, "%s: HDF5 file cannot be opened, truncated or corrupt? (%s)", path,
                    h5);
        st = -1;
    }
    if (fapl >= 0) H5Pclose(fapl);
    if (st == 0) st = check_file(tf, err, errlen);
    st = h5util_agree(comm, st, err, errlen);
    if (st < 0) {
        tokens_close(tf);
        return st;
    }
    *out = tf;
    return 0;
}

int tokens_open(tokens **out, const char *path, double val_fraction, const mesh_comm *on, char *err,
                size_t errlen) {
    const MPI_Comm comm = on->mpi;
    *out = NULL;
    int rank;
    MPI_Comm_rank(comm, &rank);
    h5util_quiet q;
    h5util_quiet_begin(&q);
    /* Rank 0 looks at the bytes; everyone follows its verdict. */
    int kind = 0, st = 0;
    uint8_t *buf = NULL;
    int64_t n = 0;
    if (rank == 0) {
        int e;
        kind = h5util_sniff(path, &n, &e);
        if (kind == H5UTIL_FILE_MISSING) {
            errmsg_fail(err, errlen, "%s: cannot open (%s)", path, strerror(e));
            st = -1;
        } else if (kind == H5UTIL_FILE_EMPTY) {
            errmsg_fail(err, errlen, "%s: file is empty", path);
            st = -1;
        } else if (kind == H5UTIL_FILE_OTHER) {
            st = read_all(path, &buf, &n, err, errlen);
            int64_t bad = st == 0 ? utf8_bad_at(buf, n) : -1;
            if (bad >= 0) {
                errmsg_fail(err, errlen,
                            "%s: neither a meshtrain token file (no HDF5 signature) nor UTF-8 text "
                            "(byte 0x%02x at offset %lld)",
                            path, buf[bad], (long long)bad);
                st = -1;
            }
        }
    }
    mesh_blocking_begin("MPI_Bcast (a data file from rank 0)");
    MPI_Bcast(&kind, 1, MPI_INT, 0, comm);
    mesh_blocking_end();
    if (kind == H5UTIL_FILE_OTHER)
        st = open_text(out, path, st, buf, n, val_fraction, comm, err, errlen);
    else
        st = open_file(out, path, st, comm, err, errlen);
    if (st < 0 && rank == 0) free(buf);
    h5util_quiet_end(&q);
    return st;
}

/* ---- prepare ---- */

static int write_split(hid_t f, const char *name, const uint8_t *tok, int64_t n, char *err,
                       size_t errlen) {
    hsize_t dim = (hsize_t)n;
    hid_t space = H5Screate_simple(1, &dim, NULL);
    hid_t d = space >= 0
                  ? H5Dcreate2(f, name, H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                  : -1;
    int rc =
        d >= 0 && H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok) >= 0 ? 0 : -1;
    if (rc < 0) {
        char h5[256];
        h5util_last_error(h5, sizeof h5);
        errmsg_fail(err, errlen, "cannot write dataset %s (%s)", name, h5);
    }
    if (d >= 0) H5Dclose(d);
    if (space >= 0) H5Sclose(space);
    if (rc == 0) rc = h5util_attr_put_i64(f, name, "n_tokens", n, err, errlen);
    return rc;
}

static int write_token_file(const char *tmp, const char *text_path, const uint8_t *buf, int64_t n,
                            int64_t n_train, double val_fraction, char *err, size_t errlen) {
    char e[H5UTIL_MSG_MAX] = "";
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        char h5[256];
        h5util_last_error(h5, sizeof h5);
        errmsg_fail(err, errlen, "%s: cannot create (%s)", tmp, h5);
        return -1;
    }
    int rc = 0;
    rc = rc ? rc : h5util_attr_put_str(f, "/", "format", TOKENS_FORMAT, e, sizeof e);
    rc = rc ? rc : h5util_attr_put_i64(f, "/", "version", TOKENS_VERSION, e, sizeof e);
    rc = rc ? rc : h5util_attr_put_str(f, "/", "tokenizer", TOK_NAME, e, sizeof e);
    rc = rc ? rc : h5util_attr_put_i64(f, "/", "vocab_size", TOK_VOCAB_SIZE, e, sizeof e);
    rc = rc ? rc : h5util_attr_put_str(f, "/", "source", base_name(text_path), e, sizeof e);
    rc = rc ? rc : h5util_attr_put_f64(f, "/", "val_fraction", val_fraction, e, sizeof e);
    rc = rc ? rc : write_split(f, "/train", buf, n_train, e, sizeof e);
    rc = rc ? rc : write_split(f, "/val", buf + n_train, n - n_train, e, sizeof e);
    if (H5Fclose(f) < 0 && rc == 0) {
        snprintf(e, sizeof e, "cannot close");
        rc = -1;
    }
    if (rc < 0) errmsg_fail(err, errlen, "%s: %s", tmp, e);
    return rc;
}

int tokens_prepare(const char *text_path, const char *out_path, double val_fraction, char *err,
                   size_t errlen) {
    uint8_t *buf;
    int64_t n, n_train, n_val;
    if (paths_same_file(text_path, out_path)) {
        errmsg_fail(err, errlen, "%s: the output is the input text itself (give another OUT.h5)",
                    out_path);
        return -1;
    }
    if (read_all(text_path, &buf, &n, err, errlen) < 0) return -1;
    const int64_t bad = utf8_bad_at(buf, n);
    if (bad >= 0) { /* what --data would refuse to read as text */
        errmsg_fail(err, errlen,
                    "%s: not UTF-8 text (byte 0x%02x at offset %lld): prepare tokenizes text files",
                    text_path, buf[bad], (long long)bad);
        free(buf);
        return -1;
    }
    if (split_text(text_path, n, val_fraction, &n_train, &n_val, err, errlen) < 0) {
        free(buf);
        return -1;
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out_path, (long)getpid());
    h5util_quiet q;
    h5util_quiet_begin(&q);
    int rc = write_token_file(tmp, text_path, buf, n, n_train, val_fraction, err, errlen);
    h5util_quiet_end(&q);
    free(buf);
    if (rc == 0) {
        int fd = open(tmp, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0 || rename(tmp, out_path) != 0) {
            errmsg_fail(err, errlen, "%s: cannot sync and rename %s into place (%s)", out_path, tmp,
                        strerror(errno));
            rc = -1;
        }
        if (fd >= 0) close(fd);
    }
    if (rc < 0) unlink(tmp);
    return rc;
}

/* ---- batches ---- */

/* out[T1] = tokens [o, o + T1) of split s. */
static int read_window(tokens *tf, int s, int64_t o, int64_t T1, int32_t *out) {
    if (tf->is_text) {
        const uint8_t *src = tf->text + tf->start[s] + o;
        for (int64_t i = 0; i < T1; i++) out[i] = src[i];
        return 0;
    }
    hsize_t start = (hsize_t)o, count = (hsize_t)T1;
    hid_t fspace = H5Dget_space(tf->dset[s]);
    hid_t mspace = H5Screate_simple(1, &count, NULL);
    int rc = fspace >= 0 && mspace >= 0 &&
                     H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0 &&
                     H5Dread(tf->dset[s], H5T_NATIVE_INT32, mspace, fspace, tf->dxpl, out) >= 0
                 ? 0
                 : -1;
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    return rc;
}

int tokens_batch(tokens *tf, tokens_split split, tokens_order order, uint64_t seed, int64_t step,
                 int64_t B, int64_t row0, int64_t nrows, int64_t T, int32_t *out, char *err,
                 size_t errlen) {
    int s = split == TOKENS_VAL;
    int64_t n = tf->n[s];
    if (B < 1 || row0 < 0 || nrows < 0 || row0 + nrows > B || T < 1 || step < 0) {
        errmsg_fail(err, errlen,
                    "tokens_batch: bad arguments: rows [%lld, %lld) of B = %lld, T = %lld, step "
                    "%lld (need 0 <= row0 <= row0 + nrows <= B, T >= 1, step >= 0)",
                    (long long)row0, (long long)(row0 + nrows), (long long)B, (long long)T,
                    (long long)step);
        return -1;
    }
    if (n < T + 2) {
        errmsg_fail(err, errlen,
                    "%s: split '%s' has %lld tokens, too few for windows of T+1 = %lld (needs at "
                    "least T+2 = %lld; largest T for this file is %lld)",
                    tf->path, split_names[s], (long long)n, (long long)(T + 1), (long long)(T + 2),
                    (long long)tokens_max_T(tf));
        return -1;
    }
    h5util_quiet q;
    h5util_quiet_begin(&q);
    int rc = 0;
    for (int64_t r = 0; r < nrows && rc == 0; r++) {
        int64_t o = tokens_offset(order, seed, split, step, B, row0 + r, n, T);
        int32_t *w = out + r * (T + 1);
        if (read_window(tf, s, o, T + 1, w) < 0) {
            char h5[256];
            h5util_last_error(h5, sizeof h5);
            errmsg_fail(err, errlen, "%s: cannot read tokens [%lld, %lld) of split '%s' (%s)",
                        tf->path, (long long)o, (long long)(o + T + 1), split_names[s], h5);
            rc = -1;
        }
        for (int64_t i = 0; i <= T && rc == 0; i++) {
            if (w[i] < 0 || w[i] >= TOK_VOCAB_SIZE) {
                errmsg_fail(
                    err, errlen, "%s: token %d at offset %lld of split '%s' is outside [0, %d)",
                    tf->path, (int)w[i], (long long)(o + i), split_names[s], TOK_VOCAB_SIZE);
                rc = -1;
            }
        }
    }
    h5util_quiet_end(&q);
    return rc;
}
