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
 *  - predicted: mesh/cost.h's time for the algorithm (book §3.3), with the emulated link when
 *    --emulate/--link is given, else with the α–β ping-pong fit of the first axis of the set.
 *  - error: max |result − serial truth| with -c 1 (inputs are small integers: must be 0).
 *  - /mpi (CSV time_over_mpi): with mpi among --alg, the median over repetitions of the row's time
 *    over MPI's time in the same repetition — paired, so slow drifts of a shared machine's load
 *    cancel; < 1 means faster than MPI.
 * Lanes: --chunk BYTES sets mesh_set_chunk for every algorithm; an --alg item ALG:BYTES (e.g.
 * bidir:0,bidir:64K,mpi) runs ALG with that chunk, so chunk sizes compare in one interleaved run.
 * Ping-pong (--pingpong): per axis, one-way time of ppermute by +1 then −1 over sizes 8 B..4 MB,
 * and the least-squares fit t = α + bytes/β (weights 1/t², i.e. relative error). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/cost.h"
#include "mesh/link.h"

typedef struct {
    int64_t b, e;
    double f;
    int warm, iters, reps, check, pingpong;
    const char *ops, *algs, *axes, *spec, *open, *emulate, *link, *csv, *json;
    double flops;
    int64_t chunk; /* -1: mesh default */
} opts;

typedef struct {
    int64_t size, count;
    mesh_op op;
    mesh_alg alg;
    char axes[8];
    double t_med, t_best, t_min_rank, t_max_rank, algbw, busbw, busbw_best, pred, err;
    const char *label; /* the --alg item, e.g. "bidir:64K" */
    double vs_mpi;     /* median over repetitions of time / MPI's time in the repetition */
} row;

static int64_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return (int64_t)v;
}

static int parse_op(const char *s) {
    static const char *shortn[] = {"ag", "rs", "ar", "a2a", "pp"};
    for (int k = 0; k < MESH_OP_PPERMUTE; k++)
        if (!strcmp(s, shortn[k]) || !strcmp(s, mesh_op_name(k))) return k;
    return -1;
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
    return cost_collective(mesh_cost_op(op), &l, sizes, wraps, a.n, mesh_cost_alg(alg), V, NULL);
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
        MPI_Barrier(mesh_world_comm(m));
        double t0 = mesh_now();
        for (int i = 0; i < it; i++) {
            mesh_ppermute(m, ax, 1, buf2, buf, c);
            mesh_ppermute(m, ax, -1, buf, buf2, c);
        }
        double dt = (mesh_now() - t0) / (2.0 * it), mx = 0;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, mesh_world_comm(m));
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

static void usage(void) {
    mesh_log(
        "usage: meshbench [--mesh SPEC] [--open AXES] [--op ag,rs,ar,a2a] [--axes xy]\n"
        "  [--alg default,ring,bidir,seq,multi,mpi,direct] [-b 1K] [-e 64M] [-f 2] [-w 5] [-n 20]\n"
        "  [-r REPS] [-c 0|1] [--pingpong] [--emulate v3|v4p|v5e|v5p|v6e] [--flops F]\n"
        "  [--chunk BYTES]\n"
        "  [--link BYTES_PER_S,LATENCY_S] [--placement] [--csv FILE] [--json FILE]\n");
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    opts o = {1024, 64 << 20, 2,    5,    20,   1,    1,    0, "ag,rs,ar", "default",
              NULL, NULL,     NULL, NULL, NULL, NULL, NULL, 0, -1};
    int placement = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "-b") && v)
            o.b = parse_size(v);
        else if (!strcmp(a, "-e") && v)
            o.e = parse_size(v);
        else if (!strcmp(a, "-f") && v)
            o.f = atof(v);
        else if (!strcmp(a, "-w") && v)
            o.warm = atoi(v);
        else if (!strcmp(a, "-n") && v)
            o.iters = atoi(v);
        else if (!strcmp(a, "-r") && v)
            o.reps = atoi(v);
        else if (!strcmp(a, "-c") && v)
            o.check = atoi(v);
        else if (!strcmp(a, "--op") && v)
            o.ops = v;
        else if (!strcmp(a, "--alg") && v)
            o.algs = v;
        else if (!strcmp(a, "--axes") && v)
            o.axes = v;
        else if (!strcmp(a, "--mesh") && v)
            o.spec = v;
        else if (!strcmp(a, "--open") && v)
            o.open = v;
        else if (!strcmp(a, "--emulate") && v)
            o.emulate = v;
        else if (!strcmp(a, "--flops") && v)
            o.flops = atof(v);
        else if (!strcmp(a, "--chunk") && v)
            o.chunk = parse_size(v);
        else if (!strcmp(a, "--link") && v)
            o.link = v;
        else if (!strcmp(a, "--csv") && v)
            o.csv = v;
        else if (!strcmp(a, "--json") && v)
            o.json = v;
        else {
            used = 0;
            if (!strcmp(a, "--pingpong"))
                o.pingpong = 1;
            else if (!strcmp(a, "--placement"))
                placement = 1;
            else {
                usage();
                mesh_exit_error("meshbench: unknown or incomplete option '%s'", a);
            }
        }
        i += used;
    }
    if (o.b < 4 || o.e < o.b || o.f <= 1 || o.iters < 1 || o.warm < 0 || o.reps < 1)
        mesh_exit_error("meshbench: need 4 <= -b <= -e, -f > 1, -n >= 1, -w >= 0, -r >= 1");
    char err[256];
    mesh *m = mesh_create(o.spec, o.open, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    mesh_axes set;
    if (!o.axes) {
        set.n = mesh_ndims(m);
        for (int k = 0; k < 3; k++) set.ax[k] = k < set.n ? k : 0;
    } else if (mesh_axes_parse(m, o.axes, &set) < 0) {
        mesh_exit_error("--axes '%s': unknown or repeated axis (the mesh's axes are named by "
                        "--mesh, e.g. x,y,z)",
                        o.axes);
    }
    int ops[8], nops = 0, algs[8], nalgs = 0;
    int64_t achunk[8]; /* ALG:CHUNK: this algorithm with mesh_set_chunk(CHUNK); −1: --chunk */
    char list[128], alabel[8][32];
    snprintf(list, sizeof list, "%s", o.ops);
    for (char *t = strtok(list, ","); t && nops < 8; t = strtok(NULL, ","))
        if ((ops[nops++] = parse_op(t)) < 0) mesh_exit_error("--op: unknown operation '%s'", t);
    snprintf(list, sizeof list, "%s", o.algs);
    for (char *t = strtok(list, ","); t && nalgs < 8; t = strtok(NULL, ",")) {
        snprintf(alabel[nalgs], sizeof alabel[nalgs], "%s", t);
        char *colon = strchr(t, ':');
        achunk[nalgs] = colon ? parse_size(colon + 1) : -1;
        if (colon) *colon = 0;
        if ((algs[nalgs++] = mesh_alg_parse(t)) < 0 || (colon && achunk[nalgs - 1] < 0))
            mesh_exit_error("--alg: unknown algorithm '%s' (ring, bidir, seq, multi, mpi, direct, "
                            "optionally with :CHUNK, e.g. bidir:64K)",
                            alabel[nalgs - 1]);
    }
    if (placement) mesh_print_placement(m, stdout);
    if (o.chunk >= 0)
        mesh_set_chunk(m, o.chunk);
    else
        o.chunk = 1 << 20; /* the mesh's default */
    if (o.emulate) {
        double fl = o.flops > 0 ? o.flops : measure_flops();
        mesh_emulation e;
        if (mesh_emulate(m, o.emulate, fl, &e) < 0)
            mesh_exit_error("--emulate %s: unknown chip (v3, v4p, v5e, v5p, v6e)", o.emulate);
        mesh_log("# emulating %s: C = %.3g FLOP/s, W_ici = %.3g B/s one way, T_min = %.3g s\n"
                 "# measured %.3g FLOP/s/rank -> time scale %.4g: links %.4g B/s, %.4g s/hop\n",
                 o.emulate, e.chip_flops, e.chip_w_oneway, e.chip_latency, e.measured_flops,
                 e.time_scale, e.bw, e.latency);
    }
    if (o.link) {
        double bw = 0, lat = 0;
        if (sscanf(o.link, "%lf,%lf", &bw, &lat) != 2 || bw <= 0 || lat < 0)
            mesh_exit_error("--link '%s': expected BYTES_PER_S,LATENCY_S like 1e8,1e-4", o.link);
        for (int k = 0; k < mesh_ndims(m); k++) mesh_link_set(m, k, bw, lat);
    }
    char spec[96], an[8];
    mesh_axes_str(m, set, an, sizeof an);
    int n = mesh_axes_size(m, set);
    FILE *json = NULL, *csv = NULL;
    if (mesh_rank(m) == 0 && o.json && !(json = fopen(o.json, "w")))
        fprintf(stderr, "meshbench: cannot write %s\n", o.json);
    if (mesh_rank(m) == 0 && o.csv && !(csv = fopen(o.csv, "w")))
        fprintf(stderr, "meshbench: cannot write %s\n", o.csv);
    if (json)
        fprintf(json,
                "{\"mesh\":\"%s\",\"ranks\":%d,\"axes\":\"%s\",\"conventions\":\"size = bytes "
                "of the whole array; time in seconds = per-rank mean over iterations, median over "
                "repetitions; busbw in GB/s, GB = 1e9\",\"pingpong\":[",
                mesh_spec_str(m, spec, sizeof spec), mesh_nranks(m), an);
    double alpha[3] = {1e-6, 1e-6, 1e-6}, beta[3] = {1e9, 1e9, 1e9};
    for (int k = 0; k < mesh_ndims(m); k++)
        if (mesh_axis_size(m, k) > 1) pingpong(m, k, &alpha[k], &beta[k], o.pingpong, json);
    if (json) fprintf(json, "],\"rows\":[");
    if (csv)
        fprintf(csv, "size_bytes,count,op,axes,alg,time_s,time_best_s,time_min_rank_s,"
                     "time_max_rank_s,algbw_GBps,busbw_GBps,busbw_best_GBps,predicted_s,"
                     "meas_over_pred,error,time_over_mpi\n");
    mesh_log("# meshbench: mesh %s, %d ranks, collectives over '%s' (%d ranks)\n"
             "# size = bytes of the whole array (AllGather output, ReduceScatter/AllToAll input, "
             "AllReduce buffer); count = its floats\n"
             "# time = per-rank mean over %d iters (after %d warm-up), mean/min/max over ranks; "
             "median (and best) of %d interleaved repetitions\n"
             "# busbw = algbw x 2(n-1)/n (AllReduce), (n-1)/n (others); GB = 1e9 B; predicted: "
             "mesh/cost.h with %s links\n"
             "# /mpi = median over repetitions of time / MPI's time in the same repetition "
             "(paired; < 1: faster than MPI; 0: no mpi in --alg)\n",
             mesh_spec_str(m, spec, sizeof spec), mesh_nranks(m), an, n, o.iters, o.warm, o.reps,
             o.emulate || o.link ? "the emulated" : "the ping-pong-fitted");
    mesh_log("%12s %11s %-14s %-9s %10s %10s %10s %10s %8s %8s %8s %10s %6s %6s %6s\n", "size(B)",
             "count", "op", "alg", "time(us)", "best(us)", "min_rk", "max_rk", "algbw", "busbw",
             "bus_best", "pred(us)", "m/p", "/mpi", "error");
    int nrow = 0;
    for (int64_t size = o.b; size <= o.e; size = (int64_t)ceil((double)size * o.f)) {
        for (int oi = 0; oi < nops; oi++) {
            mesh_op op = (mesh_op)ops[oi];
            int64_t total = size / 4;
            int64_t c = op == MESH_OP_ALL_REDUCE ? total : total / n; /* per-rank block */
            if (c < 1) continue;
            int64_t count = op == MESH_OP_ALL_REDUCE ? c : c * n, bytes = count * 4;
            int64_t nin = op == MESH_OP_ALL_GATHER || op == MESH_OP_ALL_REDUCE ? c : c * n;
            int64_t nout = op == MESH_OP_REDUCE_SCATTER || op == MESH_OP_ALL_REDUCE ? c : c * n;
            float *in = malloc((size_t)nin * 4), *out = malloc((size_t)nout * 4);
            for (int64_t e = 0; e < nin; e++) in[e] = val(mesh_rank(m), e);
            double t[8][64];
            double tmin[8], tmax[8], errv[8];
            for (int r = 0; r < o.reps && r < 64; r++)
                for (int ai = 0; ai < nalgs; ai++) { /* interleaved */
                    mesh_alg alg = (mesh_alg)algs[ai];
                    mesh_set_chunk(m, achunk[ai] >= 0 ? achunk[ai] : o.chunk);
                    for (int w = 0; w < o.warm; w++) mesh_collective(m, op, set, out, in, c, alg);
                    MPI_Barrier(mesh_world_comm(m));
                    double t0 = mesh_now();
                    for (int it = 0; it < o.iters; it++)
                        mesh_collective(m, op, set, out, in, c, alg);
                    double dt = (mesh_now() - t0) / o.iters, sum = 0, mn = 0, mx = 0;
                    MPI_Allreduce(&dt, &sum, 1, MPI_DOUBLE, MPI_SUM, mesh_world_comm(m));
                    MPI_Allreduce(&dt, &mn, 1, MPI_DOUBLE, MPI_MIN, mesh_world_comm(m));
                    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, mesh_world_comm(m));
                    t[ai][r] = sum / mesh_nranks(m);
                    if (r == 0 || t[ai][r] < tmin[ai]) tmin[ai] = mn;
                    if (r == 0 || mx > tmax[ai]) tmax[ai] = mx;
                    if (r == 0) {
                        errv[ai] = 0;
                        if (o.check) {
                            double e = check_err(m, op, set, out, c);
                            MPI_Allreduce(&e, &errv[ai], 1, MPI_DOUBLE, MPI_MAX,
                                          mesh_world_comm(m));
                        }
                    }
                }
            /* paired: this algorithm's time over MPI's in the same repetition, median over
             * repetitions (before median() below sorts t) */
            int R = o.reps < 64 ? o.reps : 64, mpi_ai = -1;
            double vs_mpi[8] = {0}, q[64];
            for (int ai = 0; ai < nalgs; ai++)
                if (algs[ai] == MESH_ALG_MPI && mpi_ai < 0) mpi_ai = ai;
            for (int ai = 0; ai < nalgs && mpi_ai >= 0; ai++) {
                for (int r = 0; r < R; r++) q[r] = t[ai][r] / t[mpi_ai][r];
                vs_mpi[ai] = median(q, R);
            }
            for (int ai = 0; ai < nalgs; ai++) {
                double best = t[ai][0];
                for (int r = 1; r < R; r++) best = fmin(best, t[ai][r]);
                double med = median(t[ai], R);
                double fac = op == MESH_OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
                mesh_alg alg = mesh_alg_resolve(m, set, (mesh_alg)algs[ai]);
                row w = {bytes,
                         count,
                         op,
                         (mesh_alg)algs[ai],
                         "",
                         med,
                         best,
                         tmin[ai],
                         tmax[ai],
                         bytes / med / 1e9,
                         bytes / med / 1e9 * fac,
                         bytes / best / 1e9 * fac,
                         predict(m, op, set, alg, bytes, alpha, beta),
                         errv[ai],
                         alabel[ai],
                         vs_mpi[ai]};
                snprintf(w.axes, sizeof w.axes, "%s", an);
                mesh_log("%12lld %11lld %-14s %-9s %10.1f %10.1f %10.1f %10.1f %8.3f %8.3f %8.3f "
                         "%10.1f %6.2f %6.2f %6.0g\n",
                         (long long)w.size, (long long)w.count, mesh_op_name(op), w.label,
                         w.t_med * 1e6, w.t_best * 1e6, w.t_min_rank * 1e6, w.t_max_rank * 1e6,
                         w.algbw, w.busbw, w.busbw_best, w.pred * 1e6,
                         w.pred > 0 ? w.t_med / w.pred : 0, w.vs_mpi, w.err);
                if (csv)
                    fprintf(csv,
                            "%lld,%lld,%s,%s,%s,%.6e,%.6e,%.6e,%.6e,%.4f,%.4f,%.4f,%.6e,%.4f,%g,"
                            "%.4f\n",
                            (long long)w.size, (long long)w.count, mesh_op_name(op), w.axes,
                            w.label, w.t_med, w.t_best, w.t_min_rank, w.t_max_rank, w.algbw,
                            w.busbw, w.busbw_best, w.pred, w.pred > 0 ? w.t_med / w.pred : 0, w.err,
                            w.vs_mpi);
                if (json)
                    fprintf(json,
                            "%s{\"size\":%lld,\"count\":%lld,\"op\":\"%s\",\"axes\":\"%s\","
                            "\"alg\":\"%s\",\"time\":%.6e,\"time_best\":%.6e,"
                            "\"time_min_rank\":%.6e,\"time_max_rank\":%.6e,\"algbw\":%.4f,"
                            "\"busbw\":%.4f,\"busbw_best\":%.4f,\"predicted\":%.6e,"
                            "\"error\":%g,\"time_over_mpi\":%.4f}",
                            nrow ? "," : "", (long long)w.size, (long long)w.count,
                            mesh_op_name(op), w.axes, w.label, w.t_med, w.t_best, w.t_min_rank,
                            w.t_max_rank, w.algbw, w.busbw, w.busbw_best, w.pred, w.err, w.vs_mpi);
                nrow++;
            }
            free(in), free(out);
        }
    }
    if (json) fprintf(json, "]}\n"), fclose(json);
    if (csv) fclose(csv);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return 0;
}
