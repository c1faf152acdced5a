/* run: the training run and `prepare` (see run.h).
 *
 * Reporting. Rank 0 prints one line per step; the time is rank 0's wall time of the step with
 * its data loading, tokens are the global batch (B·T), FLOPs are shape_flops_per_token × tokens
 * (the formula is in --help), and MFU divides by the sum over ranks of the sgemm FLOP/s each
 * measured at start-up (run_measure_peak: kern_measure_flops, CPUPEAK_TRIALS × 0.1 s, combined
 * by cpupeak_measured: the best trial, or a trial's rate while its thread ran where another
 * process took part of its CPU), all ranks at once: with one rank per core that is ranks × one
 * core's rate, and when ranks share cores it is what the cores deliver. A step faster than that
 * peak raises it to the step's rate (the measurement was low), so an MFU never exceeds 100%. */
#define _POSIX_C_SOURCE 200809L /* SIGKILL */
#include "train/cli/run.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/linefile.h"
#include "data/lockfile.h"
#include "data/paths.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "kernels/gemm.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"
#include "train/cli/inspect.h"
#include "train/observe/metrics.h"
#include "train/model/model.h"
#include "train/parallel/par.h"
#include "train/model/sample.h"

/* Room for one error message. */
#define RUN_ERR_LEN 512

int run_prepare(int argc, char **argv) {
    char err[RUN_ERR_LEN] = "";
    if (config_help_asked(argc, argv)) {
        if (mesh_world_rank() == 0)
            printf("usage: meshtrain prepare TEXT OUT.h5   (a text file -> an HDF5 token file "
                   "of its bytes, the last %g of them for validation; no flags)\n",
                   TOKENS_VAL_FRACTION);
        return 0;
    }
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1])
            mesh_exit_error("prepare: unknown flag %s (prepare takes TEXT OUT.h5 and no flags)",
                            argv[i]);
    if (argc != 3)
        mesh_exit_error("usage: meshtrain prepare TEXT OUT.h5 (got %d arguments)", argc - 1);
    int status = 0;
    if (mesh_world_rank() == 0) {
        char why[RUN_ERR_LEN / 2];
        if (paths_can_read(argv[1], why, sizeof why) < 0)
            status = errmsg_fail(err, sizeof err, "prepare: TEXT %s: %s", argv[1], why);
        else if (paths_can_write(argv[2], why, sizeof why) < 0)
            status = errmsg_fail(err, sizeof err, "prepare: OUT.h5 %s: cannot create it (%s)",
                                 argv[2], why);
        else
            status = lockfile_output(argv[2], "prepare: OUT.h5", err, sizeof err);
        if (status == 0)
            status = tokens_prepare(argv[1], argv[2], TOKENS_VAL_FRACTION, err, sizeof err);
        if (status == 0) printf("wrote %s from %s\n", argv[2], argv[1]);
    }
    mesh *m = mesh_create(NULL, NULL, err, sizeof err);
    CHECK(m, "default mesh: %s", err);
    mesh_agree_or_exit(mesh_world_comm(m), status, "%s", err);
    mesh_destroy(m);
    return 0;
}

static int file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

void run_resolve_data(config *c, const char *argv0) {
    if (c->bench || c->data[0] == '\0' || c->data[0] == '/' || file_exists(c->data)) return;
    char cand[2 * sizeof c->data];
    const char *home = getenv("MESHTRAIN_HOME");
    if (home && *home) {
        snprintf(cand, sizeof cand, "%s/%s", home, c->data);
        if (strlen(cand) < sizeof c->data && file_exists(cand)) {
            memcpy(c->data, cand, strlen(cand) + 1);
            return;
        }
    }
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    if (slash) {
        snprintf(cand, sizeof cand, "%.*s/../%s", (int)(slash - argv0), argv0, c->data);
        if (strlen(cand) < sizeof c->data && file_exists(cand))
            memcpy(c->data, cand, strlen(cand) + 1);
    }
}

void run_print_hosts(const config *c, mesh *m, trainer *t) {
    char hosts[160];
    mesh_hosts_str(m, hosts, sizeof hosts); /* collective */
    if (!c->quiet && mesh_world_rank() == 0) {
        char cores[512];
        printf("hosts: %s (%s)\n", hosts,
               c->cross_hosts[0] ? "axes across hosts chosen by --cross-hosts"
                                 : "default: the first axis crosses hosts first, the last stays "
                                   "inside one; --cross-hosts AXES to choose");
        printf("cores: %s\n", share_describe(report_share(trainer_report(t)), cores, sizeof cores));
    }
}

run_peak run_measure_peak(mesh *m, trainer *t) {
    const cpupeak_trial *trials;
    const int n = trainer_peak_trials(t, &trials);
    run_peak pk = {cpupeak_measured(trials, n, report_share(trainer_report(t))->per_cpu, 0), 0};
    float v = (float)pk.rank, sum = 0.0f;
    mesh_all_reduce(m, mesh_all_axes(m), &sum, &v, 1, MESH_ALG_MPI);
    pk.total = sum;
    return pk;
}

/* ---- the training loop ---- */

typedef struct {
    const config *c;
    mesh *m;
    trainer *t;
    tokens *data;
    int32_t *rows; /* [nrows, T+1] */
    int64_t row0, nrows;
    double peak;       /* ranks × this rank's sgemm FLOP/s */
    linefile *metrics; /* rank 0 only */
    /* the first step of this run (--resume) and the training tokens consumed so far */
    int64_t step0, tokens_seen;
} run_ctx;

/* Collective over: world. Loads this rank's rows of step `step` of `split`; on failure every rank
 * leaves with the message of the lowest failing rank (ranks read different rows). */
static void load_rows(run_ctx *r, tokens_split split, int64_t step) {
    char err[RUN_ERR_LEN] = "";
    const config *c = r->c;
    int rc = tokens_batch(r->data, split, c->order, c->seed, step, c->batch, r->row0, r->nrows,
                          c->shape.T, r->rows, err, sizeof err);
    mesh_agree_or_exit(mesh_world_comm(r->m), rc, "%s", err);
}

/* Mean validation loss over eval_batches fixed batches (val steps 0..eval_batches−1, the same
 * every time, so successive evaluations are comparable). */
static double evaluate(run_ctx *r) {
    double sum = 0.0;
    for (int64_t e = 0; e < r->c->eval_batches; e++) {
        load_rows(r, TOKENS_VAL, e);
        sum += trainer_eval(r->t, r->rows);
    }
    return sum / (double)r->c->eval_batches;
}

/* Seconds the step spent blocked in collectives (communication not hidden behind compute). */
static double exposed_comm(const step_stats *st) {
    double sum = 0.0;
    for (int op = 0; op < MESH_OP_COUNT; op++) sum += st->split.exposed[op];
    return sum;
}

/* Test hook (tests/ckpt/sigkill.sh): with MESHTRAIN_FAULT_KILL_STEP=R:S in the environment, world
 * rank R raises SIGKILL as it begins step S + 1, after S steps and their saves, while the others
 * go on into that step's collectives: a rank killed mid-run, at a point no scheduling can move. */
static void fault_kill_point(int64_t step) {
    const char *v = getenv("MESHTRAIN_FAULT_KILL_STEP");
    int rank;
    long long at;
    if (v && sscanf(v, "%d:%lld", &rank, &at) == 2 && at == (long long)step &&
        rank == mesh_world_rank())
        raise(SIGKILL);
}

/* Collective over: world. Writes the state after `step` steps to `path` (train/ckpt/ckpt.h); a
 * failure ends the run (every rank, one message), leaving any previous file at path intact. */
static void save_or_exit(run_ctx *r, int64_t step, const char *path) {
    char err[2 * RUN_ERR_LEN] = "";
    ckpt_io io;
    if (ckpt_write(r->t, r->m, r->c, step, r->tokens_seen, path, &io, err, sizeof err) < 0)
        mesh_exit_error("writing checkpoint %s: %s", path, err);
    if (!r->c->quiet)
        mesh_log("checkpoint %s (step %lld): %.1f MB in %.2f s, %.0f MB/s\n", path, (long long)step,
                 io.bytes / 1e6, io.seconds, io.bytes / 1e6 / io.seconds);
}

/* --save-every: DIR/step_NNNNNN.h5, then (rank 0) --keep's pruning of older ones. */
static void save_step(run_ctx *r, int64_t step) {
    char path[sizeof r->c->ckpt_dir + 32], err[RUN_ERR_LEN] = "";
    ckpt_step_path(path, sizeof path, r->c->ckpt_dir, step);
    save_or_exit(r, step, path);
    if (mesh_world_rank() == 0 && ckpt_prune(r->c->ckpt_dir, r->c->keep, step, err, sizeof err))
        mesh_log("note: could not delete old checkpoints in %s: %s\n", r->c->ckpt_dir, err);
}

/* --resume (resolved and checked by ckpt_run_setup): loads the state; the run continues at its
 * step. */
static void resume_or_exit(run_ctx *r) {
    char err[2 * RUN_ERR_LEN] = "";
    ckpt_meta k;
    ckpt_io io;
    if (ckpt_load(r->t, r->m, r->c, r->c->resume, &k, &io, err, sizeof err) < 0)
        mesh_exit_error("--resume: %s", err);
    r->step0 = k.step;
    r->tokens_seen = k.tokens_seen;
    if (!r->c->quiet)
        mesh_log("resumed from %s: step %lld, %lld tokens seen (written by %lld rank%s, mesh %s, "
                 "sharding %s) | %.1f MB in %.2f s, %.0f MB/s\n",
                 r->c->resume, (long long)k.step, (long long)k.tokens_seen, (long long)k.ranks,
                 k.ranks == 1 ? "" : "s", k.mesh, k.sharding, io.bytes / 1e6, io.seconds,
                 io.bytes / 1e6 / io.seconds);
}

/* The matmul rate the MFU is against: fp32 sgemm's, or the bf16 path's. */
static const char *peak_name(trainer *t) {
    return trainer_precision(t)->dtype == COMPUTE_BF16 ? "bf16 matmul" : "sgemm";
}

static void print_header(const run_ctx *r, double rank_flops) {
    const config *c = r->c;
    const model_shape *s = &c->shape;
    char buf[32], spec[96];
    mesh_log("meshtrain: %d rank%s, mesh %s | model L=%lld D=%lld N=%lld K=%lld H=%lld F=%lld "
             "V=%lld T=%lld | %s params | %.2f MFLOP/token\n",
             mesh_nranks(r->m), mesh_nranks(r->m) > 1 ? "s" : "",
             mesh_spec_str(r->m, spec, sizeof spec), (long long)s->L, (long long)s->D,
             (long long)s->N, (long long)s->K, (long long)s->H, (long long)s->F, (long long)s->V,
             (long long)s->T, metrics_si(buf, sizeof buf, (double)model_param_total(s)),
             shape_flops_per_token(s) / 1e6);
    mesh_log("data: %s (%s) | %lld train / %lld val tokens | batch %lld x %lld = %lld tokens "
             "per step, %lld micro-batch%s, order %s\n",
             c->data, tokens_is_text(r->data) ? "text, byte tokenizer" : "token file",
             (long long)tokens_count(r->data, TOKENS_TRAIN),
             (long long)tokens_count(r->data, TOKENS_VAL), (long long)c->batch, (long long)s->T,
             (long long)(c->batch * s->T), (long long)(c->batch / c->micro_batch),
             c->batch / c->micro_batch > 1 ? "es" : "", tokens_order_name(c->order));
    const moe_shape *mo = &s->moe;
    if (mo->E > 0)
        mesh_log(
            "experts: %lld of the %lld blocks are MoE (--moe-every %lld): %lld routed experts, "
            "top-%lld (weights renormalised over the k), %lld shared, F_e = %lld | %s | "
            "aux-loss coef %g, z-loss coef %g | MFLOP/token counts the activated experts\n",
            (long long)model_moe_layers(s), (long long)s->L, (long long)mo->every, (long long)mo->E,
            (long long)mo->k, (long long)mo->shared, (long long)mo->F,
            mo->capacity > 0 ? "capacity per sequence ceil(c·k·T/E)" : "dropless", mo->aux_coef,
            mo->z_coef);
    mesh_log("optimizer %s | lr %.1e (warm-up %lld, cosine to %.1e) | steps %lld | %s %.1f "
             "GFLOP/s on rank 0, %.1f on all ranks together (the MFU peak)\n",
             c->optimizer == OPT_SGD ? "sgd" : "adamw", c->lr, (long long)c->warmup, c->min_lr,
             (long long)c->steps, peak_name(r->t), rank_flops / 1e9, r->peak / 1e9);
    if (c->overlap || c->tensor_axis[0]) /* the asynchronous collectives' progress, as resolved */
        mesh_log("asynchronous collectives progressed %s (--progress %s)\n",
                 mesh_get_progress(r->m) == MESH_PROGRESS_INLINE
                     ? "inline, by each rank's own thread"
                     : "by a progress thread",
                 config_progress_name(c->progress));
    if (mesh_nranks(r->m) > 1) /* mesh_spin_auto's choice for rank 0 (trainer.c) */
        mesh_log("waits: a rank polls a late peer %.3g ms before it naps (rank 0's core share at "
                 "start-up %.2f; 20 ms where each rank of the host has a core of its own)\n",
                 mesh_get_spin() * 1e3, trainer_core_share(r->t));
}

tokens *run_open_data(const config *c, mesh *m) {
    char err[RUN_ERR_LEN] = "";
    tokens *data = NULL;
    if (tokens_open(&data, c->data, TOKENS_VAL_FRACTION, mesh_world_comm(m), err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    if (c->shape.V != TOK_VOCAB_SIZE) {
        tokens_close(data);
        mesh_exit_error("--vocab %lld does not match %s, which holds %s tokens (vocabulary %d): "
                        "use --vocab %d",
                        (long long)c->shape.V, c->data, TOK_NAME, TOK_VOCAB_SIZE, TOK_VOCAB_SIZE);
    }
    if (c->shape.T > tokens_max_T(data)) {
        const long long maxT = (long long)tokens_max_T(data);
        tokens_close(data);
        mesh_exit_error("--seq-len %lld is too long for %s: its splits allow at most %lld",
                        (long long)c->shape.T, c->data, maxT);
    }
    return data;
}

static void generate(run_ctx *r) {
    const config *c = r->c;
    const char *p = c->prompt[0] ? c->prompt : "\n";
    const int64_t plen = (int64_t)strlen(p);
    int32_t *prompt = malloc((size_t)plen * sizeof *prompt);
    int32_t *out = malloc((size_t)c->sample * sizeof *out);
    CHECK(prompt && out, "out of memory for --sample %lld", (long long)c->sample);
    tok_encode(prompt, p, plen);
    const sample_cfg sc = {c->temperature, c->top_k, c->seed};
    const int root = mesh_world_rank() == 0;
    if (root) {
        printf("sample (%lld bytes, temperature %g, top-k %lld):\n%s", (long long)c->sample,
               c->temperature, (long long)c->top_k, c->prompt);
        fflush(stdout);
    }
    sample_generate(trainer_model(r->t), prompt, plen, c->sample, &sc, out, root ? stdout : NULL);
    if (root) printf("\n");
    free(prompt);
    free(out);
}

/* The step's metrics (its line and JSON row; val_loss NAN until an evaluation fills it in). */
static metrics_row step_row(const run_ctx *r, const step_stats *st, int64_t step, double dt,
                            double tokens_per_step, double flops_per_step) {
    return (metrics_row){.step = step + 1,
                         .loss = st->loss,
                         .lr = st->lr,
                         .grad_norm = st->grad_norm,
                         .seconds = dt,
                         .tokens = tokens_per_step,
                         .flops = flops_per_step,
                         .peak_flops = r->peak,
                         .comm_frac = mesh_nranks(r->m) > 1 ? exposed_comm(st) / dt : -1.0,
                         .idle_frac = st->split.idle / dt,
                         .comm_ag = st->split.exposed[MESH_OP_ALL_GATHER] / dt,
                         .comm_rs = st->split.exposed[MESH_OP_REDUCE_SCATTER] / dt,
                         .comm_ar = st->split.exposed[MESH_OP_ALL_REDUCE] / dt,
                         .comm_p2p =
                             (st->split.exposed[MESH_OP_SEND] + st->split.exposed[MESH_OP_RECV] +
                              st->split.exposed[MESH_OP_PPERMUTE]) /
                             dt,
                         .bubble = st->pipe.bubble,
                         .bubble_ideal = st->pipe.bubble_ideal,
                         .bubble_sim = st->pipe.bubble_sim,
                         .stage_act_bytes = (double)st->pipe.act_bytes,
                         .pred_seconds = st->split.pred_step,
                         .pred_dedicated = st->split.pred_dedicated,
                         .book_seconds = st->split.book_step,
                         .dominant = st->split.dominant,
                         .val_loss = NAN};
}

/* The step's mixture-of-experts figures, summed over the data shards. */
static void moe_row(metrics_row *row, trainer *t) {
    model_moe_stats ms;
    par_moe_stats(trainer_par(t), trainer_model(t), &ms);
    row->moe_layers = ms.layers;
    row->moe_E = ms.E;
    row->moe_kept = ms.kept;
    row->moe_dropped = ms.slots ? (double)ms.dropped / (double)ms.slots : 0.0;
    row->moe_aux = ms.aux;
    row->moe_z = ms.z;
}

/* The run's last line: steps, time, losses, throughput and MFU (rank 0). */
static void print_done(const run_ctx *r, int64_t nsteps, double train_secs, double last_loss,
                       double last_val, double tokens_per_step, double flops_per_step,
                       double cpu_peak) {
    char tok[32], val[32] = "";
    if (!isnan(last_val)) snprintf(val, sizeof val, " | val loss %.4f", last_val);
    const double fps = flops_per_step * (double)nsteps / train_secs;
    char cpu[64] = "unknown";
    if (cpu_peak > 0) snprintf(cpu, sizeof cpu, "%.1f%%", 100.0 * fps / cpu_peak);
    mesh_log("done: %lld steps in %.1f s (evaluation excluded) | loss %.4f%s | %s tok/s | "
             "MFU %.0f%% of the measured %s peak, %s of the CPU's nominal peak\n",
             (long long)nsteps, train_secs, last_loss, val,
             metrics_si(tok, sizeof tok, tokens_per_step * (double)nsteps / train_secs),
             100.0 * fps / r->peak, peak_name(r->t), cpu);
}

/* Step step's --metrics line (rank 0 writes; every rank agrees on the outcome). */
static void write_metrics(run_ctx *r, const metrics_row *row, int64_t step) {
    int werr = 0;
    if (r->metrics) {
        char small[METRICS_JSON_MAX], *json = small;
        const size_t n = metrics_json(small, sizeof small, row);
        if (n >= sizeof small) { /* a row with many experts */
            CHECK((json = malloc(n + 1)) != NULL, "out of memory for a --metrics row");
            metrics_json(json, n + 1, row);
        }
        werr = linefile_write(r->metrics, json, n);
        if (json != small) free(json);
    }
    mesh_agree_or_exit(mesh_world_comm(r->m), werr,
                       "--metrics %s: writing step %lld failed (%s); the file keeps every "
                       "earlier step's line whole",
                       r->c->metrics, (long long)(step + 1), strerror(-werr));
}

int run_train(const config *c, mesh *m, trainer *t, tokens *data, const run_peak *pk) {
    run_ctx r = {.c = c, .m = m, .t = t, .data = data, .peak = pk->total};
    trainer_rows(t, &r.row0, &r.nrows);
    r.rows = malloc((size_t)(r.nrows * (c->shape.T + 1)) * sizeof *r.rows);
    CHECK(r.rows, "out of memory for %lld token rows", (long long)r.nrows);
    char merr[RUN_ERR_LEN] = "";
    int ok = 1;
    if (mesh_world_rank() == 0 && c->metrics[0]) /* a resumed run continues the file */
        ok = (r.metrics = linefile_open(c->metrics, c->resume[0] != 0, merr, sizeof merr)) != NULL;
    mesh_agree_or_exit(mesh_world_comm(m), ok ? 0 : -1,
                       "--metrics %s: cannot open for writing (%s)", c->metrics, merr);
    cpupeak host;
    const double cpu_peak = inspect_cpu_peak(m, c->threads, &host);
    if (!c->quiet) {
        print_header(&r, pk->rank);
        inspect_print_mfu(&c->shape, r.peak, cpu_peak, &host, mesh_nranks(m), stdout);
        trainer_print_layout(t, stdout);
    }
    run_print_hosts(c, m, t);
    if (c->resume[0]) resume_or_exit(&r);
    if (c->save_init[0]) save_or_exit(&r, r.step0, c->save_init);

    const double tokens_per_step = (double)(c->batch * c->shape.T);
    const double flops_per_step = shape_flops_per_token(&c->shape) * tokens_per_step;
    int width = 1;
    for (int64_t s = c->steps; s >= 10; s /= 10) width++;
    double train_secs = 0.0, last_loss = NAN, last_val = NAN;
    for (int64_t step = r.step0; step < c->steps; step++) {
        fault_kill_point(step);
        const double t0 = mesh_now();
        load_rows(&r, TOKENS_TRAIN, step);
        step_stats st;
        if (c->shape.moe.E > 0) model_moe_stats_reset(trainer_model(t));
        trainer_step(t, step, r.rows, &st);
        r.tokens_seen += c->batch * c->shape.T;
        const double dt = mesh_now() - t0;
        train_secs += dt;
        r.peak = cpupeak_measured(&(cpupeak_trial){r.peak, 0}, 1, 1, flops_per_step / dt);
        last_loss = st.loss;
        metrics_row row = step_row(&r, &st, step, dt, tokens_per_step, flops_per_step);
        if (c->shape.moe.E > 0) moe_row(&row, t);
        char line[512];
        metrics_format(line, sizeof line, &row, width);
        if (st.split.overlap >= 0) { /* non-blocking collectives ran: how much was hidden */
            const size_t n = strlen(line);
            snprintf(line + n, sizeof line - n, " | overlap %.0f%% (pred %.0f%%)",
                     100.0 * st.split.overlap, 100.0 * st.split.pred_overlap);
        }
        if (!c->quiet) mesh_log("%s\n", line);
        if (c->eval_every > 0 && ((step + 1) % c->eval_every == 0 || step + 1 == c->steps)) {
            row.val_loss = last_val = evaluate(&r);
            if (!c->quiet)
                mesh_log("eval %*lld | val loss %.4f\n", width, (long long)(step + 1),
                         row.val_loss);
        }
        write_metrics(&r, &row, step);
        if (c->save_every > 0 && ((step + 1) % c->save_every == 0 || step + 1 == c->steps))
            save_step(&r, step + 1);
    }
    const int64_t nsteps = c->steps - r.step0;
    if (nsteps > 0)
        print_done(&r, nsteps, train_secs, last_loss, last_val, tokens_per_step, flops_per_step,
                   cpu_peak);
    if (!c->quiet && nsteps > 0) trainer_print_summary(t, stdout);
    if (c->save_final[0]) save_or_exit(&r, c->steps, c->save_final);
    if (c->sample > 0) generate(&r);
    linefile_close(r.metrics);
    free(r.rows);
    return 0;
}
