/* fuzz_inputs: a fuzz pass, in process (fast: thousands of cases a second), over what a user
 * feeds meshtrain. Every case must end in a clean verdict — accepted, or refused with a one-line
 * message — never a crash, a hang (the caller's timeout) or an accepted corruption that fails
 * later. Before each case the seed and case number are on stdout, so a crash names its replay.
 *   fuzz_inputs flags SEED N          N random command lines of flags (known and misspelt) and
 *                                     hostile values: config_parse returns 0 (and the config
 *                                     validates), 1 (--help) or −1 with a one-line message;
 *                                     a line with a flag given twice is always refused
 *   fuzz_inputs tokens SEED N FILE DIR  N corrupted copies of a token file (bytes flipped,
 *                                     zeroed, spliced, truncated): tokens_open refuses with a
 *                                     message naming the file, or opens it and every batch read
 *                                     returns 0 or −1 with a message
 *   fuzz_inputs ckpt SEED N FILE DIR  the same for a checkpoint: open, header, every array read
 *                                     and its checksum compared, as `meshtrain ckpt info` does
 * Prints a tally of verdicts; exit 0 when every case was clean. */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/h5array.h"
#include "data/tokens.h"
#include "mesh/mesh.h"
#include "train/ckpt/ckpt.h"
#include "train/config/config.h"

static uint64_t g_rng;
static uint64_t rnd(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}
static int pick(int n) {
    return (int)(rnd() % (uint64_t)n);
}

static int failures;
static void bad(const char *what, const char *detail) {
    printf("FAIL %s: %s\n", what, detail);
    failures++;
}
/* A refusal must say something, on one line. */
static void check_msg(const char *what, const char *err) {
    if (!err[0] || strchr(err, '\n')) bad(what, err[0] ? "message spans lines" : "no message");
}

/* ---- flags ---- */

static const char *names[] = {
    "layers",   "d-model",  "heads",    "kv-heads",     "head-dim",     "d-ff",       "seq-len",
    "vocab",    "batch",    "micro-batch", "steps",     "optimizer",    "lr",         "warmup",
    "min-lr",   "weight-decay", "clip", "beta1",        "beta2",        "eps",        "seed",
    "data",     "data-order", "eval-every", "eval-batches", "sample",    "temperature", "top-k",
    "prompt",   "metrics",  "save-init", "save-final",  "threads",      "bench",      "quiet",
    "save-every", "keep",   "ckpt-dir", "resume",       "take-over",    "mesh",       "open",
    "dp",       "data-axes", "zero",    "tensor",       "overlap",      "alg",        "emulate",
    "pipeline", "microbatches", "schedule", "trace",    "debug-collectives", "timeout", "layer",
    "stepz",    "",         "-"};
static const char *values[] = {
    "", "0", "1", "-1", "2", "3", "7", "64", "1e309", "-1e309", "nan", "inf", "-inf", "1e-300",
    "4.9e-324", "1e-39", "99999999999999999999999", "9223372036854775807", "-9223372036854775808",
    "0x10", "1.5", "abc", " 3", "3 ", "1e", "-0", "+4", "08", "x", "xy", "xyz", "xx", "x=2",
    "x=2,y=2", "2x2", "0x0", "x=0", "x=65536,y=65536,z=2", "adamw", "sgd", "gpipe", "1f1b",
    "random", "sequential", "ring", "bidir", "mpi", "direct", "v5p", "v9", "latest", "/", ".",
    "--steps", "--", "\xff\xfe", "very-long-value-very-long-value-very-long-value-very-long"};

static void fuzz_flags(uint64_t seed, int n) {
    static char store[8][1200];
    int tally[3] = {0, 0, 0};
    for (int k = 0; k < n; k++) {
        g_rng = seed * 1000003u + (uint64_t)k + 1;
        char *argv[24];
        int argc = 0, dup = 0;
        argv[argc++] = "meshtrain";
        const int nf = 1 + pick(4);
        const char *used[4];
        for (int i = 0; i < nf; i++) {
            const char *nm = names[pick(sizeof names / sizeof names[0])];
            const char *v = values[pick(sizeof values / sizeof values[0])];
            used[i] = nm;
            for (int j = 0; j < i; j++) dup |= nm[0] && !strcmp(used[j], nm);
            const int form = pick(4);
            if (form == 0) { /* --flag=value */
                snprintf(store[i], sizeof store[i], "--%s=%s", nm, v);
                argv[argc++] = store[i];
            } else if (form == 1 && i == nf - 1) { /* a value missing at the end */
                snprintf(store[i], sizeof store[i], "--%s", nm);
                argv[argc++] = store[i];
            } else {
                snprintf(store[i], sizeof store[i], "--%s", nm);
                argv[argc++] = store[i];
                argv[argc++] = (char *)v;
            }
        }
        argv[argc] = NULL;
        config c;
        config_defaults(&c);
        char err[1024] = "", line[1400] = "", what[1500];
        for (int i = 1; i < argc; i++)
            snprintf(line + strlen(line), sizeof line - strlen(line), " %s", argv[i]);
        snprintf(what, sizeof what, "flags seed %llu case %d:%s", (unsigned long long)seed, k, line);
        const int rc = config_parse(&c, argc, argv, err, sizeof err);
        if (rc == -1) {
            check_msg(what, err);
            tally[0]++;
        } else if (rc == 0) {
            char e2[1024] = "";
            if (config_validate(&c, e2, sizeof e2) != 0) bad(what, "accepted but does not validate");
            /* a flag given twice (switches included) must never be accepted */
            if (dup) bad(what, "a flag given twice was accepted");
            tally[1]++;
        } else if (rc == 1) {
            tally[2]++;
        } else {
            bad(what, "config_parse returned an unknown status");
        }
    }
    printf("flags: %d lines: %d refused, %d accepted, %d --help\n", n, tally[0], tally[1], tally[2]);
}

/* ---- files ---- */

static unsigned char *slurp(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) free(b), b = NULL;
    fclose(f);
    return b;
}

/* A corrupted copy of good[n] at path; returns a description. */
static const char *corrupt(const unsigned char *good, long n, const char *path) {
    unsigned char *b = malloc((size_t)n);
    memcpy(b, good, (size_t)n);
    long len = n;
    const char *how;
    switch (pick(5)) {
    case 0: /* a few bits */
        for (int i = 1 + pick(8); i > 0; i--) b[rnd() % (uint64_t)n] ^= (unsigned char)(1u << pick(8));
        how = "bits flipped";
        break;
    case 1: { /* a zeroed block */
        const long at = (long)(rnd() % (uint64_t)n), m = 1 + pick(512);
        memset(b + at, 0, (size_t)(at + m > n ? n - at : m));
        how = "block zeroed";
        break;
    }
    case 2: { /* random bytes spliced over */
        const long at = (long)(rnd() % (uint64_t)n), m = 1 + pick(64);
        for (long i = at; i < at + m && i < n; i++) b[i] = (unsigned char)rnd();
        how = "garbage spliced";
        break;
    }
    case 3: /* the first 4 kB, where HDF5 keeps its superblock and root metadata */
        for (int i = 1 + pick(4); i > 0; i--) b[rnd() % (uint64_t)(n < 4096 ? n : 4096)] ^= 0xff;
        how = "metadata bytes inverted";
        break;
    default:
        len = (long)(rnd() % (uint64_t)n);
        how = "truncated";
    }
    FILE *f = fopen(path, "wb");
    if (f) fwrite(b, 1, (size_t)len, f), fclose(f);
    free(b);
    return how;
}

/* 0: opened and every batch read fine; 1: refused cleanly. */
static int try_tokens(const char *path, const char *what) {
    tokens *tf = NULL;
    char err[1024] = "";
    if (tokens_open(&tf, path, 0.1, mesh_self_comm(), err, sizeof err) < 0) {
        check_msg(what, err);
        if (!strstr(err, path)) bad(what, "the message does not name the file");
        return 1;
    }
    int refused = 0;
    static int32_t rows[4 * 17];
    for (int s = 0; s < 4; s++)
        for (int split = 0; split < 2; split++) {
            err[0] = '\0';
            if (tokens_batch(tf, (tokens_split)split, (tokens_order)(s & 1), 7, s, 4, 0, 4, 16,
                             rows, err, sizeof err) < 0) {
                check_msg(what, err);
                refused = 1;
            } else {
                for (int i = 0; i < 4 * 17; i++)
                    if (rows[i] < 0 || rows[i] >= 256) bad(what, "a token outside [0, 256) got out");
            }
        }
    tokens_close(tf);
    return refused;
}

/* 0: every array read and matched its checksum; 1: refused or a mismatch reported. */
static int try_ckpt(const char *path, const char *what) {
    h5array *f = NULL;
    ckpt_meta k;
    char err[1024] = "";
    if (h5array_open(&f, path, mesh_self_comm(), err, sizeof err) < 0 ||
        ckpt_meta_get(f, &k, err, sizeof err) < 0) {
        check_msg(what, err);
        h5array_close(f);
        return 1;
    }
    char **nm = NULL;
    int n = 0, refused = 0;
    if (h5array_list(f, "/", 1, &nm, &n, err, sizeof err) < 0) {
        check_msg(what, err);
        h5array_close(f);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        int nd;
        int64_t dims[H5ARRAY_MAX_DIMS], off[H5ARRAY_MAX_DIMS] = {0}, numel = 1, want;
        err[0] = '\0';
        if (h5array_shape(f, nm[i], &nd, dims, err, sizeof err) < 0) {
            check_msg(what, err);
            refused = 1;
            continue;
        }
        for (int d = 0; d < nd; d++) numel *= dims[d];
        if (numel < 0 || numel > (1 << 22)) { /* a damaged shape: a reader must not trust it */
            refused = 1;
            continue;
        }
        float *x = malloc((size_t)(numel ? numel : 1) * sizeof *x);
        if (h5array_read(f, nm[i], nd, dims, off, dims, x, err, sizeof err) < 0) {
            check_msg(what, err);
            refused = 1;
        } else {
            uint64_t sum = 0;
            ckpt_checksum_add(&sum, x, nd, dims, off, dims);
            if (h5array_attr_get_i64(f, nm[i], "checksum", &want, NULL, 0) != 0 ||
                (uint64_t)want != sum)
                refused = 1; /* the corruption is seen: resume and ckpt info refuse this file */
        }
        free(x);
    }
    h5array_names_free(nm, n);
    h5array_close(f);
    return refused;
}

static void fuzz_files(int ckpt, uint64_t seed, int n, const char *good_path, const char *dir) {
    long len = 0;
    unsigned char *good = slurp(good_path, &len);
    if (!good || len < 16) {
        bad(good_path, "cannot read the good file");
        return;
    }
    char path[1100], what[1400];
    snprintf(path, sizeof path, "%s/fuzz_%s.h5", dir, ckpt ? "ckpt" : "tokens");
    int clean = 0, refused = 0;
    for (int k = 0; k < n; k++) {
        g_rng = seed * 1000003u + (uint64_t)k + 1;
        const char *how = corrupt(good, len, path);
        snprintf(what, sizeof what, "%s seed %llu case %d (%s)", ckpt ? "ckpt" : "tokens",
                 (unsigned long long)seed, k, how);
        printf("%s\n", what);
        fflush(stdout);
        if (ckpt ? try_ckpt(path, what) : try_tokens(path, what))
            refused++;
        else
            clean++;
        const ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
        if (open_ids > 0) {
            char d[64];
            snprintf(d, sizeof d, "%lld HDF5 objects left open", (long long)open_ids);
            bad(what, d);
            H5close(); /* start the next case clean */
            H5open();
        }
    }
    remove(path);
    free(good);
    printf("%s: %d corrupted copies: %d refused or caught by a checksum, %d read clean (%s)\n",
           ckpt ? "ckpt" : "tokens", n, refused, clean,
           ckpt ? "the damage hit bytes no reader uses"
                : "tokens still in range: token files carry no checksum");
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    const char *mode = argc > 3 ? argv[1] : "";
    const uint64_t seed = argc > 3 ? strtoull(argv[2], NULL, 10) : 0;
    const int n = argc > 3 ? atoi(argv[3]) : 0;
    if (!strcmp(mode, "flags"))
        fuzz_flags(seed, n);
    else if ((!strcmp(mode, "tokens") || !strcmp(mode, "ckpt")) && argc == 6)
        fuzz_files(!strcmp(mode, "ckpt"), seed, n, argv[4], argv[5]);
    else
        bad("usage", "fuzz_inputs flags SEED N | tokens|ckpt SEED N FILE DIR");
    printf("fuzz_inputs %s: %d failure(s)\n", mode, failures);
    mesh_mpi_finalize();
    return failures ? 1 : 0;
}
