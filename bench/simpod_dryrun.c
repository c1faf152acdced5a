/* simpod-dryrun: the trainer's real training step on a simulated pod, with every kernel replaced
 * by its FLOP count at the chip's rate (bench/simpod_kernels.c), beside the calculator's
 * prediction for the same model, slice and sharding. Built only in the SMPI tree; run it with
 * bench/simpod, which passes --mesh and --open:
 *
 *   bench/simpod --chip v5p --topology 2x2x2 build-smpi/simpod-dryrun --chip v5p \
 *       --model llama3-70b --batch 8 --dp xyz --zero 3 --steps 1 --no-data
 *
 * Flags: --chip NAME (the calculator's chip, default v5p: give the same as simpod's), --model
 * NAME (a calculator preset, llama3-70b or llama2-13b, expanded into the trainer's model flags;
 * later flags override it), --steps N (steps to run, default 2; the last one is reported),
 * --poll-us US (simulated compute between polls of the collectives in flight, default 10),
 * --no-data (mesh_set_no_data: every array of 1 MiB or more is left alone — no additions, copies,
 * conversions or clears — while every message still goes through MPI with its real size, so the
 * simulated schedule and times are those of the data run at a fraction of the host's work), and
 * every flag of meshtrain (--dp, --zero, --tensor, --pipeline, --microbatches, --comm-dtype, --alg,
 * --overlap, ...). Tokens are random (no data file); weights are not initialised. With --no-data
 * (or, computing, with simpod's --shared: the big buffers one shared block) a model far larger
 * than the machine's memory runs: only shapes and byte counts matter here.
 *
 * Output (rank 0): the step's simulated time (max over ranks), its compute (FLOPs charged / the
 * chip's rate), the collectives this rank ran in the step (calls and bytes sent per op, from
 * mesh/'s accounting) and how much of their time the caller was blocked, then the calculator's
 * lines for the same sharding and the ratios to its serial step (T_math + T_comms) and its
 * overlapped one. With --overlap the non-blocking collectives progress in simulated time while
 * the kernels' FLOPs are charged (mesh_sim_compute, polled every --poll-us microseconds of
 * compute, default 10; see docs/simpod.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calc/calc.h"
#include "kernels/rng.h"
#include "mesh/coll.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/step/trainer.h"

#define MAX_ARGS 256

double simpod_flops_charged(void); /* bench/simpod_kernels.c: FLOPs charged on this rank */
void simpod_set_execute(void (*fn)(double flops)); /* and how they take simulated time */

/* --no-data: arrays from this size on are left alone (the size simpod --shared 1M shares). */
#define DRY_NO_DATA_BYTES (1 << 20)

typedef struct {
    const char *chip, *model;
    int steps, no_data;
    double poll; /* --poll-us: seconds of compute between polls of the collectives in flight */
    int argc;
    char *argv[MAX_ARGS]; /* the trainer's argv */
} dry_opts;

/* The preset's model flags for the trainer, as strings in buf (kept alive by the caller), but
 * those that argv gives itself (the preset, then flags override). Returns how many, or −1. */
static int preset_args(const char *name, int argc, char **argv, char buf[8][24], char **out) {
    model_shape s;
    if (calc_model_preset(&s, name) < 0) return -1;
    static const char *names[8] = {"--layers",   "--d-model", "--heads", "--kv-heads",
                                   "--head-dim", "--d-ff",    "--vocab", "--seq-len"};
    const int64_t v[8] = {s.L, s.D, s.N, s.K, s.H, s.F, s.V, s.T};
    int n = 0;
    for (int i = 0; i < 8; i++) {
        int given = 0;
        for (int j = 1; j < argc; j++) given |= strcmp(argv[j], names[i]) == 0;
        if (given) continue;
        snprintf(buf[i], 24, "%lld", (long long)v[i]);
        out[n++] = (char *)names[i];
        out[n++] = buf[i];
    }
    return n;
}

static void parse_opts(int argc, char **argv, dry_opts *o, char preset_buf[8][24]) {
    o->chip = "v5p", o->model = NULL, o->steps = 2, o->no_data = 0, o->poll = 10e-6;
    static char bench[] = "--bench", quiet[] = "--quiet";
    o->argc = 0;
    o->argv[o->argc++] = argv[0];
    o->argv[o->argc++] = bench; /* synthetic tokens, no data file */
    o->argv[o->argc++] = quiet;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--model") == 0) o->model = argv[i + 1];
    if (o->model) {
        const int n = preset_args(o->model, argc, argv, preset_buf, o->argv + o->argc);
        if (n < 0)
            mesh_exit_error("simpod-dryrun: --model %s: expected llama3-70b or llama2-13b",
                            o->model);
        o->argc += n;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-data") == 0) {
            o->no_data = 1;
            continue;
        }
        const int own = strcmp(argv[i], "--model") == 0 || strcmp(argv[i], "--chip") == 0 ||
                        strcmp(argv[i], "--steps") == 0 || strcmp(argv[i], "--poll-us") == 0;
        if (own) {
            if (i + 1 >= argc) mesh_exit_error("simpod-dryrun: %s needs a value", argv[i]);
            if (strcmp(argv[i], "--chip") == 0) o->chip = argv[i + 1];
            if (strcmp(argv[i], "--steps") == 0) o->steps = atoi(argv[i + 1]);
            if (strcmp(argv[i], "--poll-us") == 0) o->poll = 1e-6 * atof(argv[i + 1]);
            i++;
            continue;
        }
        if (o->argc >= MAX_ARGS) mesh_exit_error("simpod-dryrun: too many arguments");
        o->argv[o->argc++] = argv[i];
    }
    if (o->steps < 1) mesh_exit_error("simpod-dryrun: --steps: expected a count >= 1");
    if (!(o->poll > 0)) mesh_exit_error("simpod-dryrun: --poll-us: expected a time > 0");
    if (!cost_chip_find(o->chip))
        mesh_exit_error("simpod-dryrun: --chip %s: not in the chip table (mesh/cost.c)", o->chip);
}

/* The calculator for the config's model, mesh and sharding: meshplan's flags, run into a string
 * (JSON), from which the step's serial and overlapped times and compute are read. */
typedef struct {
    double t_math, t_comm, t_step_max, t_step_sum;
    double calls[MESH_OP_COUNT], bytes[MESH_OP_COUNT]; /* per chip per step, by mesh op */
} calc_pred;

static double json_num(const char *js, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(js, k);
    return p ? strtod(p + strlen(k), NULL) : -1.0;
}

/* The string value of "key" in the object starting at obj, into out ("" if absent). */
static void json_str(const char *obj, const char *key, char *out, size_t len) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": \"", key);
    const char *p = strstr(obj, k);
    out[0] = '\0';
    if (!p) return;
    p += strlen(k);
    const size_t n = strcspn(p, "\"");
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
}

/* The calculator's collectives (its JSON list) as calls and bytes one chip sends per step: a call
 * on n chips sends (n−1)/n of V (AllGather, ReduceScatter, AllToAll) or 2(n−1)/n (AllReduce),
 * whatever the ring; per-layer entries count L/P times. Axes with splits ("z:4") are skipped. */
static void calc_sent(const char *js, const mesh *m, double layers, calc_pred *out) {
    static const char *ops[] = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll"};
    const char *end = strstr(js, "\"phases\"");
    for (const char *o = strstr(js, "{\"what\""); o && (!end || o < end);
         o = strstr(o + 1, "{\"what\"")) {
        char op[32], axes[24], seg[16];
        json_str(o, "op", op, sizeof op), json_str(o, "axes", axes, sizeof axes);
        json_str(o, "seg", seg, sizeof seg);
        int k = -1, n = 1;
        for (int i = 0; i < 4; i++)
            if (strcmp(op, ops[i]) == 0) k = i;
        for (const char *a = axes; *a && k >= 0; a++) {
            const int ax = mesh_axis_index(m, *a);
            if (ax < 0)
                k = -1;
            else
                n *= mesh_axis_size(m, ax);
        }
        if (k < 0 || n < 2) continue;
        const double reps = json_num(o, "count") * (strcmp(seg, "layer") == 0 ? layers : 1.0);
        const mesh_op mo = k == 0   ? MESH_OP_ALL_GATHER
                           : k == 1 ? MESH_OP_REDUCE_SCATTER
                           : k == 2 ? MESH_OP_ALL_REDUCE
                                    : MESH_OP_ALL_TO_ALL;
        out->calls[mo] += reps;
        out->bytes[mo] += reps * json_num(o, "bytes") * (k == 2 ? 2.0 : 1.0) * (n - 1) / n;
    }
}

static int calc_predict(const config *c, const mesh *m, const char *chip, calc_pred *out,
                        FILE *print) {
    char v[16][32], data[CONFIG_AXES_LEN], spec[64];
    config_data_axes(c, m, data);
    for (int k = 0, o = 0; k < mesh_ndims(m); k++)
        o += snprintf(spec + o, sizeof spec - (size_t)o, "%s%c=%d", k ? "," : "",
                      mesh_axis_name(m, k), mesh_axis_size(m, k));
    const int wire = mesh_wire_bytes(c->comm_dtype);
    const model_shape *s = &c->shape;
    const int64_t nums[9] = {s->L, s->D, s->N, s->K, s->H, s->F, s->V, s->T, c->batch};
    static const char *nf[9] = {"--layers", "--d-model", "--heads",   "--kv-heads", "--head-dim",
                                "--d-ff",   "--vocab",   "--seq-len", "--batch"};
    char *a[64];
    int n = 0;
    a[n++] = "meshplan", a[n++] = "--chip", a[n++] = (char *)chip, a[n++] = "--mesh", a[n++] = spec;
    char open[8] = "";
    for (int k = 0, j = 0; k < mesh_ndims(m); k++)
        if (!mesh_axis_wraps(m, k) && mesh_axis_size(m, k) > 2) open[j++] = mesh_axis_name(m, k);
    if (open[0]) a[n++] = "--open", a[n++] = open;
    for (int i = 0; i < 9; i++) {
        snprintf(v[i], sizeof v[i], "%lld", (long long)nums[i]);
        a[n++] = (char *)nf[i], a[n++] = v[i];
    }
    snprintf(v[9], sizeof v[9], "%d", wire);
    snprintf(v[10], sizeof v[10], "%d", c->zero);
    a[n++] = "--param-bytes", a[n++] = v[9], a[n++] = "--grad-bytes", a[n++] = v[9];
    a[n++] = "--act-bytes", a[n++] = v[9], a[n++] = "--zero", a[n++] = v[10];
    if (data[0]) a[n++] = "--dp", a[n++] = data;
    if (c->tensor_axis[0]) a[n++] = "--tensor", a[n++] = (char *)c->tensor_axis;
    if (c->pipe_axis[0]) {
        snprintf(v[11], sizeof v[11], "%lld", (long long)c->microbatches);
        a[n++] = "--pipeline", a[n++] = (char *)c->pipe_axis, a[n++] = "--microbatches",
        a[n++] = v[11];
        a[n++] = "--schedule", a[n++] = c->schedule == PIPE_1F1B ? "1f1b" : "gpipe";
    }
    if (c->alg != MESH_ALG_DEFAULT) a[n++] = "--alg", a[n++] = (char *)mesh_alg_name(c->alg);
    if (print) {
        fprintf(print, "calculator:");
        for (int i = 0; i < n; i++) fprintf(print, " %s", a[i]);
        fprintf(print, "\n");
    }
    a[n++] = "--format", a[n++] = "json";
    char *js = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&js, &len);
    if (!f) return -1;
    const int rc = calc_run(n, a, f, print);
    fclose(f);
    const char *step = js ? strstr(js, "\"step\": {") : NULL; /* the step's, not a phase's */
    if (rc == 0 && step) {
        out->t_math = json_num(step, "t_math"), out->t_comm = json_num(step, "t_comm");
        out->t_step_max = json_num(step, "t_step_max");
        out->t_step_sum = json_num(step, "t_step_sum");
        int64_t P = 1;
        if (c->pipe_axis[0]) P = mesh_axis_size(m, mesh_axis_index(m, c->pipe_axis[0]));
        calc_sent(js, m, (double)c->shape.L / (double)P, out);
    }
    free(js);
    return rc == 0 && step ? 0 : -1;
}

/* Random tokens for this rank's rows (the dry run needs their shape only). */
static int32_t *make_tokens(const config *c, trainer *t) {
    int64_t row0, nrows;
    trainer_rows(t, &row0, &nrows);
    const int64_t T1 = c->shape.T + 1, n = nrows * T1;
    int32_t *rows = malloc((size_t)(n > 0 ? n : 1) * sizeof *rows);
    if (!rows) mesh_exit_error("simpod-dryrun: out of memory for %lld tokens", (long long)n);
    for (int64_t i = 0; i < n; i++)
        rows[i] = (int32_t)(kern_rng_u64(c->seed, 0x647279, (uint64_t)((row0 * T1) + i)) %
                            (uint64_t)c->shape.V);
    return rows;
}

/* What the timed steps measured: the last step's simulated time (the slowest rank's), the first's,
 * the FLOPs charged on this rank in the last and its stats. */
typedef struct {
    double dt, dt_first, flops;
    step_stats st;
} dry_run;

/* Collective over: world. o->steps training steps on tokens, each between barriers. */
static dry_run run_steps(const dry_opts *o, trainer *t, mesh *m, const int32_t *tokens) {
    dry_run r = {0};
    for (int step = 0; step < o->steps; step++) {
        MPI_Barrier(MPI_COMM_WORLD);
        mesh_stats_reset(m);
        const double t0 = MPI_Wtime(), f0 = simpod_flops_charged();
        trainer_step(t, step, tokens, &r.st);
        const double mine = MPI_Wtime() - t0;
        r.flops = simpod_flops_charged() - f0;
        MPI_Allreduce(&mine, &r.dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (step == 0) r.dt_first = r.dt;
    }
    return r;
}

/* Rank 0's report of the run: the set-up, the step, the compute and the collectives. */
static void print_run(const dry_opts *o, const config *c, const mesh *m, const dry_run *r) {
    const model_shape *s = &c->shape;
    char spec[64];
    printf("dry run: %s on %d simulated %s chips (mesh %s), L=%lld D=%lld N=%lld K=%lld "
           "H=%lld F=%lld V=%lld T=%lld, batch %lld sequences, zero %d, dp %s, tensor %s, "
           "pipeline %s, wire %s, data %s\n",
           o->model ? o->model : "model", mesh_nranks(m), o->chip,
           mesh_spec_str(m, spec, sizeof spec), (long long)s->L, (long long)s->D, (long long)s->N,
           (long long)s->K, (long long)s->H, (long long)s->F, (long long)s->V, (long long)s->T,
           (long long)c->batch, c->zero, c->data_axes[0] ? c->data_axes : "(free axes)",
           c->tensor_axis[0] ? c->tensor_axis : "-", c->pipe_axis[0] ? c->pipe_axis : "-",
           mesh_wire_name(c->comm_dtype),
           o->no_data ? "none (--no-data: arrays of 1 MiB or more are left alone)" : "computed");
    const double speed = cost_chip_find(o->chip)->flops_bf16;
    printf("simulated step: %.6g s (step %d of %d; the first took %.6g s), loss %.4f\n", r->dt,
           o->steps, o->steps, r->dt_first, r->st.loss);
    printf("compute charged on rank 0: %.6g FLOP = %.6g s at the chip's %.4g FLOP/s\n", r->flops,
           r->flops / speed, speed);
    printf("collectives of the step on rank 0 (op calls bytes_sent):\n");
    double busy = 0, blocked = 0;
    for (int op = 0; op < MESH_OP_COUNT; op++) {
        const mesh_stat ms = mesh_stats(m, (mesh_op)op, -1);
        if (ms.calls)
            printf("  coll %s %lld %lld\n", mesh_op_name((mesh_op)op), (long long)ms.calls,
                   (long long)ms.bytes);
        busy += ms.seconds, blocked += ms.wait_seconds;
    }
    printf("communication on rank 0: %.6g s in the collectives' runs, %.6g s of it exposed "
           "(the caller blocked):",
           busy, blocked);
    for (int op = 0; op < MESH_OP_COUNT; op++) {
        const mesh_stat ms = mesh_stats(m, (mesh_op)op, -1);
        if (ms.calls) printf(" %s %.6g", mesh_op_name((mesh_op)op), ms.wait_seconds);
    }
    printf("\n");
}

/* Rank 0's comparison with the calculator's prediction p. */
static void print_calc(const calc_pred *p, const dry_run *r) {
    printf("collectives of the calculator, per chip (op calls bytes_sent):\n");
    for (int op = 0; op < MESH_OP_COUNT; op++)
        if (p->calls[op] > 0)
            printf("  calc %s %.0f %.0f\n", mesh_op_name((mesh_op)op), p->calls[op], p->bytes[op]);
    printf("calculator: compute %.6g s, comms %.6g s, serial step %.6g s, overlapped %.6g s\n"
           "simulated/serial %.3f  simulated/overlapped %.3f\n",
           p->t_math, p->t_comm, p->t_step_sum, p->t_step_max, r->dt / p->t_step_sum,
           r->dt / p->t_step_max);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    dry_opts o;
    char preset_buf[8][24];
    parse_opts(argc, argv, &o, preset_buf);
    if (o.no_data) mesh_set_no_data(DRY_NO_DATA_BYTES);
    /* the kernels' simulated compute lets the non-blocking collectives (--overlap) progress */
    mesh_sim_set_poll(o.poll);
    simpod_set_execute(mesh_sim_compute);
    char err[512];
    config c;
    config_defaults(&c);
    const int parsed = config_parse(&c, o.argc, o.argv, err, sizeof err);
    if (parsed != 0)
        mesh_exit_error("simpod-dryrun: %s", parsed > 0 ? "see meshtrain --help" : err);
    mesh *m = mesh_create_placed(c.mesh, c.mesh_open, c.cross_hosts, err, sizeof err);
    if (!m) mesh_exit_error("simpod-dryrun: %s", err);
    trainer *t = trainer_create(&c, m, err, sizeof err);
    if (!t) mesh_exit_error("simpod-dryrun: %s", err);
    int32_t *tokens = make_tokens(&c, t);
    const int r0 = mesh_rank(m) == 0; /* every rank is on the mesh */
    const dry_run r = run_steps(&o, t, m, tokens);
    if (r0) print_run(&o, &c, m, &r);
    calc_pred p;
    memset(&p, 0, sizeof p);
    if (calc_predict(&c, m, o.chip, &p, r0 ? stdout : NULL) == 0 && r0) print_calc(&p, &r);
    free(tokens);
    /* --no-data: the big buffers are mappings that free() cannot take (train/config/alloc.c);
     * they go with the process */
    if (!o.no_data) trainer_destroy(t);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return 0;
}
