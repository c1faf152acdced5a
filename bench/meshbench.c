/* meshbench: collective benchmark of the emulated TPU slice, after nccl-tests' conventions.
 *
 *   mpirun -np 4 meshbench --mesh 2x2 --op ag,rs,ar --axes xy --alg ring,bidir,mpi \
 *          -b 1K -e 64M -f 2 -w 5 -n 20 [-r 3] [-c 1] [--emulate v5e] [--csv F] [--json F]
 *
 * Conventions (printed in the header too):
 *  - size: bytes of the WHOLE array, as nccl-tests: the gathered output of AllGather, the
 *    unreduced input of ReduceScatter and AllToAll (n blocks), the buffer of AllReduce;
 *    count: its elements (float32).
 *  - time: per rank, the mean over -n iterations; then the mean, min and max over ranks. With
 *    -r R the sweep point is repeated R times, algorithms interleaved inside each repetition, and
 *    the row shows the median repetition (of the rank mean) and the best one.
 *  - algbw = size / time; busbw = algbw × 2(n−1)/n (AllReduce), (n−1)/n (others). GB = 1e9 B.
 *  - predicted: mesh/cost.h's time for the algorithm (the book's sharding chapter), with the
 *    emulated link when --emulate/--link is given, else with the α–β ping-pong fit of the first
 *    axis of the set.
 *  - error: max |result − serial truth| with -c 1 (inputs are small integers: must be 0).
 *  - /mpi (CSV time_over_mpi): with mpi among --alg, the median over repetitions of the row's time
 *    over MPI's time in the same repetition — paired, so slow drifts of a shared machine's load
 *    cancel; < 1 means faster than MPI.
 * Lanes: --chunk BYTES sets mesh_set_chunk for every algorithm; an --alg item ALG:BYTES (e.g.
 * bidir:0,bidir:64K,mpi) runs ALG with that chunk, so chunk sizes compare in one interleaved run.
 * Ping-pong (--pingpong): per axis, one-way time of ppermute by +1 then −1 over sizes 8 B..4 MB,
 * and the least-squares fit t = α + bytes/β (weights 1/t², i.e. relative error).
 * Flags: one table (below) drives parsing, range checks and --help. Bad input gets one message
 * from rank 0 naming the flag, and every rank exits with status 2; the largest size is checked
 * against the host's available memory before anything is allocated. */
#define _POSIX_C_SOURCE 200809L /* sysconf */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/meshbench_a2av.h"
#include "data/linefile.h"
#include "data/lockfile.h"
#include "data/paths.h"
#include "mesh/coll.h"
#include "mesh/cost.h"
#include "mesh/errmsg.h"
#include "mesh/link.h"
#include "mesh/mesh_mpi.h"

typedef struct {
    int64_t b, e;
    double f;
    int warm, iters, reps, check, pingpong, placement, no_data, help;
    const char *ops, *algs, *axes, *spec, *open, *cross, *emulate, *link, *csv, *json;
    const char *chip; /* predict with this chip's links instead of the ping-pong fit */
    double flops;
    int64_t chunk; /* -1: mesh default */
} opts;

typedef struct {
    int64_t size, count;
    int op; /* a mesh_op, or BENCH_OP_A2AV.. */
    mesh_alg alg;
    char axes[8];
    double t_med, t_best, t_min_rank, t_max_rank, algbw, busbw, busbw_best, pred, err;
    const char *label; /* the --alg item, e.g. "bidir:64K" */
    double vs_mpi;     /* median over repetitions of time / MPI's time in the same repetition */
} row;

/* ---- flags ---- */

typedef enum { F_SIZE, F_INT, F_F64, F_STR, F_SWITCH } flag_kind;

typedef struct {
    const char *name, *alias; /* "--op"; alias "-b" style short name or NULL */
    flag_kind kind;
    size_t off;
    double lo, hi; /* inclusive range of a number */
    const char *meta, *help;
} bench_flag;

#define O_(field) offsetof(opts, field)
static const bench_flag flags[] = {
    {"--begin", "-b", F_SIZE, O_(b), 4, 1e15, "BYTES", "smallest size (K, M, G = 2^10, 2^20, 2^30)"},
    {"--end", "-e", F_SIZE, O_(e), 4, 1e15, "BYTES", "largest size, >= -b"},
    {"--factor", "-f", F_F64, O_(f), 1.000001, 1e6, "F", "size multiplier between points, > 1"},
    {"--warmup", "-w", F_INT, O_(warm), 0, 1e6, "N", "warm-up calls per point"},
    {"--iters", "-n", F_INT, O_(iters), 1, 1e7, "N", "timed calls per point"},
    {"--reps", "-r", F_INT, O_(reps), 1, 64, "R", "interleaved repetitions per point (median)"},
    {"--check", "-c", F_INT, O_(check), 0, 1, "0|1", "check results against a serial truth"},
    {"--op", NULL, F_STR, O_(ops), 0, 0, "OPS", "ag,rs,ar,a2a,a2av,a2av-skew (or their full names)"},
    {"--alg", NULL, F_STR, O_(algs), 0, 0, "ALGS",
     "default,ring,bidir,seq,multi,mpi,direct; ALG:BYTES sets that lane's chunk"},
    {"--axes", NULL, F_STR, O_(axes), 0, 0, "AXES", "the axis set, e.g. xy (default: all)"},
    {"--mesh", NULL, F_STR, O_(spec), 0, 0, "SPEC", "x=4,y=2 or 4x2 (default: 1D, all ranks)"},
    {"--open", NULL, F_STR, O_(open), 0, 0, "AXES", "axes without wraparound"},
    {"--cross-hosts", NULL, F_STR, O_(cross), 0, 0, "AXES",
     "axes that cross hosts: slowest in MPI rank order (default: the first)"},
    {"--emulate", NULL, F_STR, O_(emulate), 0, 0, "CHIP", "links at v3|v4p|v5e|v5p|v6e's C/W"},
    {"--flops", NULL, F_F64, O_(flops), 1, 1e18, "F", "this CPU's FLOP/s for --emulate"},
    {"--chunk", NULL, F_SIZE, O_(chunk), 0, 1e15, "BYTES", "lane chunk of every algorithm"},
    {"--link", NULL, F_STR, O_(link), 0, 0, "BW,LAT", "slow links: bytes/s one way, s per hop"},
    {"--chip", NULL, F_STR, O_(chip), 0, 0, "CHIP",
     "predict with CHIP's links, no ping-pong (simulated slices, bench/simpod)"},
    {"--csv", NULL, F_STR, O_(csv), 0, 0, "FILE", "rows as CSV"},
    {"--json", NULL, F_STR, O_(json), 0, 0, "FILE", "ping-pong fits and rows as JSON"},
    {"--pingpong", NULL, F_SWITCH, O_(pingpong), 0, 0, NULL, "print the ping-pong sweep"},
    {"--placement", NULL, F_SWITCH, O_(placement), 0, 0, NULL, "print rank, coordinates, host"},
    {"--no-data", NULL, F_SWITCH, O_(no_data), 0, 0, NULL,
     "SMPI build, with -c 0: leave arrays of 1 MiB or more alone (timing only)"},
    {"--help", "-h", F_SWITCH, O_(help), 0, 0, NULL, "this text"},
};
#undef O_
enum { NFLAGS = sizeof flags / sizeof flags[0] };

static const bench_flag *find_flag(const char *a, size_t len) {
    for (int i = 0; i < NFLAGS; i++)
        if ((strlen(flags[i].name) == len && !strncmp(a, flags[i].name, len)) ||
            (flags[i].alias && strlen(flags[i].alias) == len && !strncmp(a, flags[i].alias, len)))
            return &flags[i];
    return NULL;
}

/* "64M" → 67108864; −1 for anything that is not a non-negative number with an optional K/M/G. */
static int64_t parse_size(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return -1;
    if (*end == 'K' || *end == 'k')
        v *= 1024, end++;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    return *end || v > 9e18 ? -1 : (int64_t)v;
}

static int parse_op(const char *s) {
    static const char *shortn[] = {"ag", "rs", "ar", "a2a"};
    for (int k = 0; k < MESH_OP_PPERMUTE; k++)
        if (!strcmp(s, shortn[k]) || !strcmp(s, mesh_op_name(k))) return k;
    return a2av_op_parse(s);
}

static void print_help(void) {
    mesh_log("meshbench: time the mesh's collectives against MPI's and the book's cost model.\n\n"
             "usage: mpirun -np R meshbench [flags]   (flags: --flag VALUE or --flag=VALUE)\n\n");
    for (int i = 0; i < NFLAGS; i++) {
        const bench_flag *f = &flags[i];
        char lhs[48];
        snprintf(lhs, sizeof lhs, "%s%s%s%s%s", f->alias ? f->alias : "", f->alias ? ", " : "",
                 f->name, f->meta ? " " : "", f->meta ? f->meta : "");
        mesh_log("  %-26s %s\n", lhs, f->help);
    }
    mesh_log("\nDefaults: -b 1K -e 64M -f 2 -w 5 -n 20 -r 1 -c 1 --op ag,rs,ar --alg default.\n"
             "Exit status: 0 ok, 2 bad input (one message from rank 0).\n");
}

/* Parses argv into o, or returns −1 with err naming the flag (the same on every rank). */
static int parse_args(opts *o, int argc, char **argv, char *err, size_t errlen) {
    int given[NFLAGS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        const bench_flag *f = find_flag(a, eq ? (size_t)(eq - a) : strlen(a));
        if (!f)
            return snprintf(err, errlen, "unknown flag '%s' (see --help)", a), -1;
        if (given[f - flags]++)
            return snprintf(err, errlen, "%s%s%s is given twice", f->alias ? f->alias : "",
                            f->alias ? "/" : "", f->name),
                   -1;
        void *field = (char *)o + f->off;
        if (f->kind == F_SWITCH) {
            if (eq) return snprintf(err, errlen, "%s takes no value, got '%s'", f->name, a), -1;
            *(int *)field = 1;
            continue;
        }
        char name[32]; /* the flag as typed, without "=VALUE" */
        snprintf(name, sizeof name, "%.*s", (int)(eq ? eq - a : (ptrdiff_t)strlen(a)), a);
        a = name;
        const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!v) return snprintf(err, errlen, "%s needs a value: %s %s", a, a, f->meta), -1;
        double x = 0;
        char *end = NULL;
        if (f->kind == F_STR) {
            if (!*v) return snprintf(err, errlen, "%s: the value is empty", a), -1;
            *(const char **)field = v;
            continue;
        }
        if (f->kind == F_SIZE) {
            x = (double)parse_size(v);
            if (x < 0)
                return snprintf(err, errlen, "%s '%s': expected a size in bytes like 4096 or 64M",
                                a, v),
                       -1;
        } else {
            errno = 0;
            x = strtod(v, &end);
            if (end == v || *end || errno || !isfinite(x) || (f->kind == F_INT && x != floor(x)))
                return snprintf(err, errlen, "%s '%s': expected a %s", a, v,
                                f->kind == F_INT ? "whole number" : "number"),
                       -1;
        }
        if (x < f->lo || x > f->hi)
            return snprintf(err, errlen, "%s %s: must be between %.10g and %.10g", a, v, f->lo,
                            f->hi),
                   -1;
        if (f->kind == F_SIZE)
            *(int64_t *)field = (int64_t)x;
        else if (f->kind == F_INT)
            *(int *)field = (int)x;
        else
            *(double *)field = x;
    }
    if (o->e < o->b)
        return snprintf(err, errlen, "-e %lld is below -b %lld", (long long)o->e,
                        (long long)o->b),
               -1;
    /* a flag that would change nothing is refused, as every command's */
    if (given[find_flag("--factor", 8) - flags] && o->e == o->b)
        return snprintf(err, errlen, "-f/--factor is unused: -b equals -e (one size)"), -1;
    if (given[find_flag("--flops", 7) - flags] && !o->emulate)
        return snprintf(err, errlen, "--flops is unused: it scales --emulate's links"), -1;
    if (o->pingpong && o->chip)
        return snprintf(err, errlen, "--pingpong is unused: --chip's links replace the fit"), -1;
    return 0;
}

/* Bytes this host has for new allocations (MemAvailable; the free pages where /proc is absent). */
static double host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb >= 0) return (double)kb * 1024;
    return (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

/* Bytes one rank allocates for the largest point: input and output buffers and the mesh's
 * scratch, which can hold as much as the output. */
static double bytes_per_rank(const opts *o, const int *ops, int nops, int n) {
    double worst = 0, total = (double)(o->e / 4);
    for (int k = 0; k < nops; k++) {
        if (ops[k] >= BENCH_OP_A2AV) { /* input, output, the padded copies of a2av-skew */
            worst = fmax(worst, 4 * total * (3.0 + n));
            continue;
        }
        double c = ops[k] == MESH_OP_ALL_REDUCE ? total : floor(total / n);
        double nin = ops[k] == MESH_OP_ALL_GATHER || ops[k] == MESH_OP_ALL_REDUCE ? c : c * n;
        double nout = ops[k] == MESH_OP_REDUCE_SCATTER || ops[k] == MESH_OP_ALL_REDUCE ? c : c * n;
        worst = fmax(worst, 4 * (nin + 2 * nout));
    }
    return worst;
}
static float val(int r, int64_t e) {
    return (float)((r * 131 + e * 7 + 3) % 17 - 8);
}

/* Max |out − truth| of op (block count c) on this rank. */
static double check_err(const mesh *m, mesh_op op, mesh_axes a, const float *out, int64_t c) {
    int n = mesh_axes_size(m, a), i = mesh_axes_index(m, a);
    int *mr = malloc((size_t)n * sizeof(int));
    for (int j = 0; j < n; j++) mr[j] = mesh_axes_member(m, a, j);
    double err = 0;
    if (op == MESH_OP_ALL_GATHER || op == MESH_OP_ALL_TO_ALL) {
        for (int j = 0; j < n; j++)
            for (int64_t e = 0; e < c; e++) {
                float w = val(mr[j], (op == MESH_OP_ALL_TO_ALL ? i * c : 0) + e);
                err = fmax(err, fabs((double)out[j * c + e] - w));
            }
    } else {
        int64_t base = op == MESH_OP_REDUCE_SCATTER ? i * c : 0;
        for (int64_t e = 0; e < c; e++) {
            float s = 0;
            for (int j = 0; j < n; j++) s += val(mr[j], base + e);
            err = fmax(err, fabs((double)out[e] - s));
        }
    }
    free(mr);
    return err;
}

/* A cblas-free FLOP/s estimate: a blocked 192³ single-precision matmul loop. */
static double measure_flops(void) {
    enum { N = 192 };
    static float A[N * N], B[N * N], C[N * N];
    for (int i = 0; i < N * N; i++) A[i] = (float)(i % 7), B[i] = (float)(i % 5), C[i] = 0;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = mesh_now();
        for (int i = 0; i < N; i++)
            for (int k = 0; k < N; k++) {
                float aik = A[i * N + k];
                for (int j = 0; j < N; j++) C[i * N + j] += aik * B[k * N + j];
            }
        double t = mesh_now() - t0;
        best = fmax(best, 2.0 * N * N * N / t);
    }
    return C[7] > -1 ? best : 0;
}

/* Link constants the cost model uses for a set: emulated if set, else the fit. */
static cost_link link_for(const mesh *m, mesh_axes a, const double *alpha, const double *beta) {
    cost_link l = {0, 0};
    int ax = a.n ? a.ax[a.n - 1] : 0;
    double bw, lat;
    mesh_link_get(m, ax, &bw, &lat);
    if (bw > 0)
        l.w_oneway = bw, l.hop_latency = lat;
    else
        l.w_oneway = beta[ax], l.hop_latency = alpha[ax];
    return l;
}

static double predict(const mesh *m, mesh_op op, mesh_axes a, mesh_alg alg, int64_t size,
                      const double *alpha, const double *beta) {
    int sizes[3], wraps[3];
    for (int k = 0; k < a.n; k++) {
        sizes[k] = mesh_axis_size(m, a.ax[k]);
        wraps[k] = mesh_axis_wraps(m, a.ax[k]);
    }
    cost_link l = link_for(m, a, alpha, beta);
    if (!(l.w_oneway > 0)) return -1;
    double V = (double)size;
    if (op == MESH_OP_ALL_TO_ALL) V *= mesh_axes_size(m, a);
    return cost_collective(mesh_cost_op(op), &l, sizes, wraps, a.n, alg, V, NULL);
}

/* One-way time of ppermute along axis, and the α–β fit. */
static void pingpong(mesh *m, int ax, double *alpha, double *beta, int print, FILE *json) {
    int64_t sizes[12];
    double t[12];
    int ns = 0;
    float *buf = calloc(1 << 20, sizeof(float)), *buf2 = calloc(1 << 20, sizeof(float));
    if (print)
        mesh_log("# ping-pong along axis %c: one-way time of a ppermute by ±1\n"
                 "# %10s %12s %10s\n",
                 mesh_axis_name(m, ax), "bytes", "time_us", "GB/s");
    for (int64_t b = 8; b <= (4 << 20); b *= 4) {
        int64_t c = b / 4;
        int it = b < 65536 ? 200 : b < (1 << 20) ? 40 : 10;
        for (int w = 0; w < 3; w++) {
            mesh_ppermute(m, ax, 1, buf2, buf, c);
            mesh_ppermute(m, ax, -1, buf, buf2, c);
        }
        MPI_Barrier(mesh_world_comm(m)->mpi);
        double t0 = mesh_now();
        for (int i = 0; i < it; i++) {
            mesh_ppermute(m, ax, 1, buf2, buf, c);
            mesh_ppermute(m, ax, -1, buf, buf2, c);
        }
        double dt = (mesh_now() - t0) / (2.0 * it), mx = 0;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, mesh_world_comm(m)->mpi);
        sizes[ns] = b, t[ns++] = mx;
        if (print) mesh_log("  %10lld %12.2f %10.3f\n", (long long)b, mx * 1e6, b / mx / 1e9);
    }
    /* weighted least squares of t = α + x·b (x = 1/β), weights 1/t² */
    double S = 0, Sx = 0, Sy = 0, Sxx = 0, Sxy = 0;
    for (int i = 0; i < ns; i++) {
        double w = 1 / (t[i] * t[i]), x = (double)sizes[i];
        S += w, Sx += w * x, Sy += w * t[i], Sxx += w * x * x, Sxy += w * x * t[i];
    }
    double slope = (S * Sxy - Sx * Sy) / (S * Sxx - Sx * Sx);
    double a = (Sy - slope * Sx) / S;
    *alpha = a > 0 ? a : t[0];
    *beta = slope > 0 ? 1 / slope : sizes[ns - 1] / t[ns - 1];
    if (print)
        mesh_log("# fit axis %c: alpha = %.2f us, beta = %.3f GB/s\n", mesh_axis_name(m, ax),
                 *alpha * 1e6, *beta / 1e9);
    if (json && mesh_rank(m) == 0)
        fprintf(json, "%s{\"axis\":\"%c\",\"alpha_s\":%.6e,\"beta_Bps\":%.6e}", ax ? "," : "",
                mesh_axis_name(m, ax), *alpha, *beta);
    free(buf), free(buf2);
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- set-up ---- */

typedef struct {
    mesh *m;
    opts o;
    mesh_axes set;
    char an[8];   /* the set's axis names */
    int n;        /* ranks in the set */
    int ops[8], nops, algs[8], nalgs;
    int64_t *vcnt; /* the AllToAllv's counts (n·n) of the point being timed */
    int64_t achunk[8]; /* ALG:CHUNK: this algorithm with mesh_set_chunk(CHUNK); −1: --chunk */
    char alabel[8][32];
    double alpha[3], beta[3]; /* ping-pong fit per axis */
    linefile *csv;            /* rank 0 only */
    int csv_err;              /* −errno of a failed row (rank 0) */
    FILE *json;               /* rank 0 only: the temp file */
    char json_tmp[1100];
    int nrow;
} bench;

/* Collective over: world. The axis set, --op and --alg lists; ends the job on bad input. */
static void parse_lists(bench *b) {
    const opts *o = &b->o;
    if (!o->axes) {
        b->set.n = mesh_ndims(b->m);
        for (int k = 0; k < 3; k++) b->set.ax[k] = k < b->set.n ? k : 0;
    } else if (mesh_axes_parse(b->m, o->axes, &b->set) < 0) {
        mesh_exit_error("--axes '%s': unknown or repeated axis (the mesh's axes are named by "
                        "--mesh, e.g. x,y,z)",
                        o->axes);
    }
    mesh_axes_str(b->m, b->set, b->an, sizeof b->an);
    b->n = mesh_axes_size(b->m, b->set);
    char list[256];
    snprintf(list, sizeof list, "%s", o->ops);
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        if (b->nops == 8) mesh_exit_error("--op %s: at most 8 operations", o->ops);
        if ((b->ops[b->nops++] = parse_op(t)) < 0)
            mesh_exit_error("--op: unknown operation '%s' (ag, rs, ar, a2a, a2av, a2av-skew)", t);
    }
    snprintf(list, sizeof list, "%s", o->algs);
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        if (b->nalgs == 8) mesh_exit_error("--alg %s: at most 8 algorithms", o->algs);
        const int k = b->nalgs++;
        snprintf(b->alabel[k], sizeof b->alabel[k], "%s", t);
        char *colon = strchr(t, ':');
        b->achunk[k] = colon ? parse_size(colon + 1) : -1;
        if (colon) *colon = 0;
        if ((b->algs[k] = mesh_alg_parse(t)) < 0 || (colon && b->achunk[k] < 0))
            mesh_exit_error("--alg: unknown algorithm '%s' (ring, bidir, seq, multi, mpi, direct, "
                            "optionally with :CHUNK, e.g. bidir:64K)",
                            b->alabel[k]);
    }
    if (!b->nops || !b->nalgs) mesh_exit_error("--op and --alg need at least one item each");
}

/* Collective over: world. The largest point must fit in this host's memory, with every rank of
 * the host allocating at once, and its blocks in MPI's int counts. */
static void check_memory(bench *b) {
    const double per_rank = bytes_per_rank(&b->o, b->ops, b->nops, b->n);
    const int host_ranks = mesh_host_ranks(b->m);
    const double avail = host_available_bytes();
    int ok = per_rank * host_ranks <= 0.9 * avail;
    if (mesh_agree(mesh_world_comm(b->m), ok ? 0 : -1) < 0)
        mesh_exit_error("-e %lld: the largest point needs %.3g GB per rank x %d ranks on this "
                        "host = %.3g GB, but %.3g GB are available (give a smaller -e)",
                        (long long)b->o.e, per_rank / 1e9, host_ranks, per_rank * host_ranks / 1e9,
                        avail / 1e9);
    if (b->o.e / 4 > (int64_t)INT32_MAX)
        mesh_exit_error("-e %lld: more than 2^31 - 1 floats in one buffer (MPI's count limit)",
                        (long long)b->o.e);
}

/* --no-data: mesh_set_no_data for arrays of 1 MiB or more (simpod --shared 1M's threshold): the
 * collectives skip their additions and copies, and the inputs are not filled, while every message
 * keeps its size, so a timing sweep of a simulated slice, whose shared buffers hold no data
 * anyway, does not spend the host's time on 512 ranks' arrays. */
static void set_no_data(const opts *o) {
#ifdef MESHTRAIN_SMPI
    if (o->check) mesh_exit_error("--no-data leaves the results unset: give -c 0");
    mesh_set_no_data(1 << 20);
#else
    (void)o;
    mesh_exit_error("--no-data does nothing in this build: only the SMPI build "
                    "(build-smpi/meshbench, bench/simpod) leaves arrays unset");
#endif
}

/* Collective over: world. Rank 0 claims FILE before any work: it can be written, and no other
 * live run writes it (data/lockfile.h); every rank ends the job if not. */
static void claim_output(bench *b, const char *flag, const char *path) {
    char err[1400] = "", why[512];
    int st = 0;
    if (path && mesh_rank(b->m) == 0) {
        if (paths_can_write(path, why, sizeof why) < 0)
            st = errmsg_fail(err, sizeof err, "%s %s: cannot create it (%s)", flag, path, why);
        else
            st = lockfile_output(path, flag, err, sizeof err);
    }
    if (mesh_agree(mesh_world_comm(b->m), st) < 0) mesh_exit_error("%s", err);
}

/* Collective over: world. --csv: rows as whole lines, flushed as they come (data/linefile.h: a
 * full disk leaves the finished rows and no half row). --json: one object, written to a temp file
 * renamed into place at the end. */
static void open_outputs(bench *b) {
    char why[256] = "";
    int st = 0;
    if (mesh_rank(b->m) == 0 && b->o.csv && !(b->csv = linefile_open(b->o.csv, 0, why, sizeof why)))
        st = -1;
    if (mesh_agree(mesh_world_comm(b->m), st) < 0)
        mesh_exit_error("--csv %s: cannot open for writing (%s)", b->o.csv, why);
    if (mesh_rank(b->m) == 0 && b->o.json) {
        snprintf(b->json_tmp, sizeof b->json_tmp, "%s.tmp.%ld", b->o.json, (long)getpid());
        if (!(b->json = fopen(b->json_tmp, "w"))) st = errno;
    }
    if (mesh_agree(mesh_world_comm(b->m), st) < 0)
        mesh_exit_error("--json %s: cannot open %s for writing (%s)", b->o.json, b->json_tmp,
                        strerror(st));
}

/* Collective over: world. Ends the job when a --csv row could not be written (rank 0's status). */
static void csv_agree(bench *b) {
    if (mesh_agree(mesh_world_comm(b->m), b->csv_err) < 0)
        mesh_exit_error("--csv %s: writing a row failed (%s); the file ends with the last whole "
                        "row",
                        b->o.csv, strerror(-b->csv_err));
}

/* Collective over: world. Closes both; the JSON is renamed into place only when complete. */
static void close_outputs(bench *b) {
    int bad = b->csv && linefile_close(b->csv) != 0;
    if (mesh_agree(mesh_world_comm(b->m), bad ? -1 : 0) < 0)
        mesh_exit_error("--csv %s: writing failed (disk full?)", b->o.csv);
    bad = b->json && (ferror(b->json) | fclose(b->json)) != 0;
    if (b->json && !bad && rename(b->json_tmp, b->o.json) != 0) bad = 1;
    if (bad) remove(b->json_tmp);
    if (mesh_agree(mesh_world_comm(b->m), bad ? -1 : 0) < 0)
        mesh_exit_error("--json %s: writing failed (disk full?); no partial file was left",
                        b->o.json);
}

/* Collective over: world. --chunk, --emulate and --link. */
static void setup_links(bench *b) {
    opts *o = &b->o;
    if (o->chunk >= 0)
        mesh_set_chunk(b->m, o->chunk);
    else
        o->chunk = 1 << 20; /* the mesh's default */
    if (o->emulate) {
        double fl = o->flops > 0 ? o->flops : measure_flops();
        mesh_emulation e;
        char err[256];
        if (mesh_emulate(b->m, o->emulate, fl, &e, err, sizeof err) < 0) mesh_exit_error("%s", err);
        if (!e.one_host)
            mesh_log("warning: --emulate on several hosts: emulated delays rely on one shared "
                     "clock and will be off by the hosts' clock offsets\n");
        mesh_log("# emulating %s: C = %.3g FLOP/s, W_ici = %.3g B/s one way, T_min = %.3g s\n"
                 "# %s %.3g FLOP/s/rank -> time scale %.4g: links %.4g B/s, %.4g s/hop\n",
                 o->emulate, e.chip_flops, e.chip_w_oneway, e.chip_latency,
                 o->flops > 0 ? "given (--flops)" : "measured", e.measured_flops, e.time_scale,
                 e.bw, e.latency);
    }
    if (o->link) {
        double bw = 0, lat = 0;
        char tail;
        if (sscanf(o->link, "%lf,%lf%c", &bw, &lat, &tail) != 2 || !(bw > 0) || !(lat >= 0) ||
            !isfinite(bw) || !isfinite(lat))
            mesh_exit_error("--link '%s': expected BYTES_PER_S,LATENCY_S like 1e8,1e-4", o->link);
        for (int k = 0; k < mesh_ndims(b->m); k++) mesh_link_set(b->m, k, bw, lat);
    }
}

/* One line: each axis's fitted link and whether it crosses hosts (the network) or not. */
static void print_axis_links(bench *b) {
    int crosses[MESH_MAX_AXES], nh = mesh_hosts(b->m, crosses);
    mesh_log("# links (%s), %d host%s:", b->o.chip ? "--chip" : "ping-pong fit", nh,
             nh > 1 ? "s" : "");
    for (int k = 0, first = 1; k < mesh_ndims(b->m); k++)
        if (mesh_axis_size(b->m, k) > 1) {
            mesh_log("%s %c %s: alpha %.2f us, beta %.3f GB/s", first ? "" : " |",
                     mesh_axis_name(b->m, k), crosses[k] ? "across hosts" : "inside a host",
                     b->alpha[k] * 1e6, b->beta[k] / 1e9);
            first = 0;
        }
    mesh_log("\n");
    if (b->json) {
        fprintf(b->json, "],\"hosts\":%d,\"across_hosts\":\"", nh);
        for (int k = 0; k < mesh_ndims(b->m); k++)
            if (crosses[k]) fputc(mesh_axis_name(b->m, k), b->json);
        fputc('"', b->json);
    }
}

static void print_header(bench *b) {
    char spec[96];
    const opts *o = &b->o;
    if (b->json)
        fprintf(b->json,
                "{\"mesh\":\"%s\",\"ranks\":%d,\"axes\":\"%s\",\"conventions\":\"size = bytes "
                "of the whole array; time in seconds = per-rank mean over iterations, median over "
                "repetitions; busbw in GB/s, GB = 1e9\",\"pingpong\":[",
                mesh_spec_str(b->m, spec, sizeof spec), mesh_nranks(b->m), b->an);
    for (int k = 0; k < 3; k++) b->alpha[k] = 1e-6, b->beta[k] = 1e9;
    const cost_chip *c = o->chip ? cost_chip_find(o->chip) : NULL;
    if (o->chip && !c) mesh_exit_error("--chip %s: unknown chip (v3, v4p, v5e, v5p, v6e)", o->chip);
    for (int k = 0; k < mesh_ndims(b->m); k++) {
        if (c) /* a simulated slice's links are the chip's (bench/simpod): no fit needed */
            b->alpha[k] = c->hop_latency, b->beta[k] = c->ici_oneway;
        else if (mesh_axis_size(b->m, k) > 1)
            pingpong(b->m, k, &b->alpha[k], &b->beta[k], o->pingpong, b->json);
    }
    print_axis_links(b); /* closes the ping-pong list */
    csv_agree(b);
    if (b->json) fprintf(b->json, ",\"rows\":[");
    if (b->csv)
        b->csv_err = linefile_printf(b->csv, "size_bytes,count,op,axes,alg,time_s,time_best_s,"
                                             "time_min_rank_s,time_max_rank_s,algbw_GBps,"
                                             "busbw_GBps,busbw_best_GBps,predicted_s,"
                                             "meas_over_pred,error,time_over_mpi\n");
    mesh_log("# meshbench: mesh %s, %d ranks, collectives over '%s' (%d ranks)\n"
             "# size = bytes of the whole array (AllGather output, ReduceScatter/AllToAll input, "
             "AllReduce buffer); count = its floats\n"
             "# time = per-rank mean over %d iters (after %d warm-up), mean/min/max over ranks; "
             "median (and best) of %d interleaved repetitions\n"
             "# busbw = algbw x 2(n-1)/n (AllReduce), (n-1)/n (others); GB = 1e9 B; predicted: "
             "mesh/cost.h with %s links\n"
             "# /mpi = median over repetitions of time / MPI's time in the same repetition "
             "(paired; < 1: faster than MPI; 0: no mpi in --alg)\n"
             "# lanes: chunk %lld bytes (--chunk; ALG:BYTES per --alg item); error: %s\n",
             mesh_spec_str(b->m, spec, sizeof spec), mesh_nranks(b->m), b->an, b->n, o->iters,
             o->warm, o->reps,
             o->emulate || o->link ? "the emulated"
             : o->chip             ? "the --chip"
                                   : "the ping-pong-fitted",
             (long long)o->chunk,
             o->check ? "max |result - serial truth| (-c 1)" : "not checked (-c 0)");
    mesh_log("%12s %11s %-14s %-9s %10s %10s %10s %10s %8s %8s %8s %10s %6s %6s %6s\n", "size(B)",
             "count", "op", "alg", "time(us)", "best(us)", "min_rk", "max_rk", "algbw", "busbw",
             "bus_best", "pred(us)", "m/p", "/mpi", "error");
}

/* ---- one point ---- */

/* Collective over: the set. One call of op (an AllToAllv: with b->vcnt). */
static void run_op(bench *b, int op, float *out, const float *in, int64_t c, mesh_alg alg) {
    if (op >= BENCH_OP_A2AV)
        mesh_all_to_allv(b->m, b->set, out, in, b->vcnt, alg);
    else
        mesh_collective(b->m, (mesh_op)op, b->set, out, in, c, alg);
}
static const char *op_label(int op) {
    return op >= BENCH_OP_A2AV ? a2av_op_name(op) : mesh_op_name((mesh_op)op);
}

/* Collective over: world. The timings of one point: t[ai][r] the rank mean of algorithm ai in
 * repetition r; tmin/tmax over ranks and repetitions; errv with -c 1. */
static void time_point(bench *b, int op, int64_t c, float *out, const float *in,
                       double t[8][64], double *tmin, double *tmax, double *errv) {
    mesh *m = b->m;
    MPI_Comm w = mesh_world_comm(m)->mpi;
    for (int r = 0; r < b->o.reps; r++)
        for (int ai = 0; ai < b->nalgs; ai++) { /* interleaved */
            mesh_alg alg = (mesh_alg)b->algs[ai];
            mesh_set_chunk(m, b->achunk[ai] >= 0 ? b->achunk[ai] : b->o.chunk);
            for (int k = 0; k < b->o.warm; k++) run_op(b, op, out, in, c, alg);
            MPI_Barrier(w);
            double t0 = mesh_now();
            for (int it = 0; it < b->o.iters; it++) run_op(b, op, out, in, c, alg);
            double dt = (mesh_now() - t0) / b->o.iters, sum = 0, mn = 0, mx = 0;
            MPI_Allreduce(&dt, &sum, 1, MPI_DOUBLE, MPI_SUM, w);
            MPI_Allreduce(&dt, &mn, 1, MPI_DOUBLE, MPI_MIN, w);
            MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, w);
            t[ai][r] = sum / mesh_nranks(m);
            if (r == 0 || mn < tmin[ai]) tmin[ai] = mn;
            if (r == 0 || mx > tmax[ai]) tmax[ai] = mx;
            if (r == 0) {
                errv[ai] = 0;
                if (b->o.check) {
                    double e = op >= BENCH_OP_A2AV ? a2av_check(m, b->set, b->vcnt, out, val)
                                                   : check_err(m, (mesh_op)op, b->set, out, c);
                    MPI_Allreduce(&e, &errv[ai], 1, MPI_DOUBLE, MPI_MAX, w);
                }
            }
        }
}

static void emit_row(bench *b, const row *w) {
    mesh_log("%12lld %11lld %-14s %-9s %10.1f %10.1f %10.1f %10.1f %8.3f %8.3f %8.3f "
             "%10.1f %6.2f %6.2f %6.0g\n",
             (long long)w->size, (long long)w->count, op_label(w->op), w->label,
             w->t_med * 1e6, w->t_best * 1e6, w->t_min_rank * 1e6, w->t_max_rank * 1e6, w->algbw,
             w->busbw, w->busbw_best, w->pred * 1e6, w->pred > 0 ? w->t_med / w->pred : 0,
             w->vs_mpi, w->err);
    if (b->csv && !b->csv_err) /* written as it comes: a run stopped early keeps its rows */
        b->csv_err = linefile_printf(
            b->csv, "%lld,%lld,%s,%s,%s,%.6e,%.6e,%.6e,%.6e,%.4f,%.4f,%.4f,%.6e,%.4f,%g,%.4f\n",
            (long long)w->size, (long long)w->count, op_label(w->op), w->axes, w->label,
            w->t_med, w->t_best, w->t_min_rank, w->t_max_rank, w->algbw, w->busbw, w->busbw_best,
            w->pred, w->pred > 0 ? w->t_med / w->pred : 0, w->err, w->vs_mpi);
    if (b->json)
        fprintf(b->json,
                "%s{\"size\":%lld,\"count\":%lld,\"op\":\"%s\",\"axes\":\"%s\","
                "\"alg\":\"%s\",\"time\":%.6e,\"time_best\":%.6e,"
                "\"time_min_rank\":%.6e,\"time_max_rank\":%.6e,\"algbw\":%.4f,"
                "\"busbw\":%.4f,\"busbw_best\":%.4f,\"predicted\":%.6e,"
                "\"error\":%g,\"time_over_mpi\":%.4f}",
                b->nrow ? "," : "", (long long)w->size, (long long)w->count, op_label(w->op),
                w->axes, w->label, w->t_med, w->t_best, w->t_min_rank, w->t_max_rank, w->algbw,
                w->busbw, w->busbw_best, w->pred, w->err, w->vs_mpi);
    b->nrow++;
}

/* Collective over: world. One size and op for every algorithm: allocate, time, print rows. */
static void bench_point(bench *b, int64_t size, int op) {
    const int n = b->n;
    const int64_t total = size / 4;
    const int64_t c = op == MESH_OP_ALL_REDUCE ? total : total / n; /* per-rank block */
    if (c < 1) return;
    const int64_t count = op == MESH_OP_ALL_REDUCE ? c : c * n, bytes = count * 4;
    const int64_t nin = op == MESH_OP_ALL_GATHER || op == MESH_OP_ALL_REDUCE ? c : c * n;
    int64_t nout = op == MESH_OP_REDUCE_SCATTER || op == MESH_OP_ALL_REDUCE ? c : c * n;
    int64_t pred_bytes = bytes; /* an AllToAllv is predicted as the AllToAll of its padding */
    if (op >= BENCH_OP_A2AV) {
        b->vcnt = malloc((size_t)n * n * sizeof(int64_t));
        nout = a2av_counts(b->m, b->set, op, nin, b->vcnt);
        pred_bytes = (int64_t)n * mesh_all_to_allv_max(b->m, b->set, b->vcnt) * 4;
    }
    float *in = malloc((size_t)nin * 4), *out = malloc((size_t)nout * 4);
    if (mesh_agree(mesh_world_comm(b->m), in && out ? 0 : -1) < 0)
        mesh_exit_error("size %lld: out of memory for %lld + %lld floats per rank (give a smaller "
                        "-e)",
                        (long long)size, (long long)nin, (long long)nout);
    if (!mesh_no_data(nin * 4))
        for (int64_t e = 0; e < nin; e++) in[e] = val(mesh_rank(b->m), e);
    double t[8][64], tmin[8], tmax[8], errv[8];
    time_point(b, op, c, out, in, t, tmin, tmax, errv);
    /* paired: this algorithm's time over MPI's in the same repetition, median over repetitions
     * (before median() below sorts t) */
    const int R = b->o.reps;
    int mpi_ai = -1;
    double vs_mpi[8] = {0}, q[64];
    for (int ai = 0; ai < b->nalgs; ai++)
        if (b->algs[ai] == MESH_ALG_MPI && mpi_ai < 0) mpi_ai = ai;
    for (int ai = 0; ai < b->nalgs && mpi_ai >= 0; ai++) {
        for (int r = 0; r < R; r++) q[r] = t[ai][r] / t[mpi_ai][r];
        vs_mpi[ai] = median(q, R);
    }
    const double fac = op == MESH_OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    for (int ai = 0; ai < b->nalgs; ai++) {
        double best = t[ai][0];
        for (int r = 1; r < R; r++) best = fmin(best, t[ai][r]);
        const double med = median(t[ai], R);
        const mesh_alg alg = mesh_alg_resolve(b->m, b->set, (mesh_alg)b->algs[ai]);
        row w = {.size = bytes,
                 .count = count,
                 .op = op,
                 .alg = (mesh_alg)b->algs[ai],
                 .t_med = med,
                 .t_best = best,
                 .t_min_rank = tmin[ai],
                 .t_max_rank = tmax[ai],
                 .algbw = bytes / med / 1e9,
                 .busbw = bytes / med / 1e9 * fac,
                 .busbw_best = bytes / best / 1e9 * fac,
                 .pred = predict(b->m, op >= BENCH_OP_A2AV ? MESH_OP_ALL_TO_ALL : (mesh_op)op,
                                 b->set, alg, pred_bytes, b->alpha, b->beta),
                 .err = errv[ai],
                 .label = b->alabel[ai],
                 .vs_mpi = vs_mpi[ai]};
        snprintf(w.axes, sizeof w.axes, "%s", b->an);
        emit_row(b, &w);
    }
    csv_agree(b);
    free(in), free(out), free(b->vcnt);
    b->vcnt = NULL;
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    mesh_set_progname("meshbench");
    bench b = {.o = {.b = 1024,
                     .e = 64 << 20,
                     .f = 2,
                     .warm = 5,
                     .iters = 20,
                     .reps = 1,
                     .check = 1,
                     .ops = "ag,rs,ar",
                     .algs = "default",
                     .chunk = -1}};
    char err[256];
    if (parse_args(&b.o, argc, argv, err, sizeof err) < 0) mesh_exit_error("%s", err);
    if (b.o.help) {
        print_help();
        mesh_mpi_finalize();
        return 0;
    }
    if (!(b.m = mesh_create_placed(b.o.spec, b.o.open, b.o.cross, err, sizeof err)))
        mesh_exit_error("%s", err);
    parse_lists(&b);
    mesh_axes_comm(b.m, b.set); /* made now where made at first use (the SMPI build): not timed */
    if (b.o.no_data) set_no_data(&b.o);
    check_memory(&b);
    claim_output(&b, "--csv", b.o.csv);
    claim_output(&b, "--json", b.o.json);
    open_outputs(&b);
    if (b.o.placement) mesh_print_placement(b.m, stdout);
    setup_links(&b);
    print_header(&b);
    for (double size = (double)b.o.b; size <= (double)b.o.e; size = ceil(size * b.o.f))
        for (int oi = 0; oi < b.nops; oi++) bench_point(&b, (int64_t)size, b.ops[oi]);
    if (b.json) fprintf(b.json, "]}\n");
    close_outputs(&b);
    mesh_destroy(b.m);
    mesh_mpi_finalize();
    return 0;
}
