/* Checkpoint round trip, exact resume and resharding, inside one MPI job.
 * usage: test_resume DIR [writer flags...] [--then reader flags...]
 * (sharding flags: --mesh --dp --zero --tensor --pipeline --optimizer; the reader's default to the
 * writer's). With STEPS = 2N steps on a generated stream:
 *  1. round trip: the writer W trains N steps and saves; a fresh W2 loads: params, m and v are
 *     bit-identical to W's at the save.
 *  2. exact resume: W trains N more steps, W2 its N steps from the checkpoint: losses and final
 *     params, m and v are bit-identical (the same mesh and scheme).
 *  3. resharding is exact: R (reader flags) loads W's file: every element of R's params, m and v
 *     is bit-identical to the file's whole array at the same global index (read directly).
 *  4. cross-scheme resume: R continues N steps from W's file; then R loads (over its own trained
 *     state: a load must overwrite everything) the file the 1-rank reference wrote at step N and
 *     continues N steps again. Both times its losses and final params match the 1-rank run of 2N
 *     steps within |a−b| ≤ k·FLT_EPSILON·(|a|+|b|+1), k = 200 (test_equiv's tolerance: schemes
 *     differ only in reduction order; the worst seen over the matrix is printed).
 * Model as in tests/parallel/test_equiv.c: GQA (N=4, K=2), batch 24 in micro-batches of 12, AdamW with
 * clipping and ε = 1e-6. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/mesh_mpi.h"
#include "stream.h"
#include "train/ckpt/ckpt.h"
#include "train/step/trainer.h"

#define N_HALF 3
#define STEPS (2 * N_HALF)
static const double K_TOL = 200.0, EPS = 1.1920929e-7;

static int failures = 0;

/* Steps [from, to) of trainer t; loss[s] for each. */
static void train(trainer *t, const config *c, int64_t from, int64_t to, double *loss) {
    int64_t row0, nrows;
    trainer_rows(t, &row0, &nrows);
    int32_t *tok = malloc((size_t)(nrows * (c->shape.T + 1)) * sizeof(int32_t));
    for (int64_t s = from; s < to; s++) {
        step_stats st;
        test_stream_batch(tok, row0, nrows, c->shape.T, s);
        trainer_step(t, s, tok, &st);
        loss[s] = st.loss;
    }
    free(tok);
}

/* A copy of this rank's whole state: params, then m and v. */
static float *snapshot(trainer *t, int64_t *n) {
    int64_t np, ns;
    float *p = model_params_flat(trainer_model(t), &np), *m, *v;
    trainer_opt_state(t, &m, &v, &ns);
    if (!m) ns = 0;
    float *out = malloc((size_t)(np + 2 * ns + 1) * sizeof(float));
    memcpy(out, p, (size_t)np * sizeof(float));
    if (ns) {
        memcpy(out + np, m, (size_t)ns * sizeof(float));
        memcpy(out + np + ns, v, (size_t)ns * sizeof(float));
    }
    *n = np + 2 * ns;
    return out;
}

static void expect(int ok, int rank, const char *what) {
    if (!ok) {
        failures++;
        printf("FAIL (rank %d): %s\n", rank, what);
    }
}

static trainer *make(const config *c, mesh *m, int serial) {
    char err[512];
    trainer *t = serial ? trainer_create_serial(c, m, err, sizeof err)
                        : trainer_create(c, m, err, sizeof err);
    if (!t) mesh_exit_error("%s", err);
    return t;
}

static void save(trainer *t, mesh *m, const config *c, int64_t step, const char *path) {
    char err[1024];
    if (ckpt_write(t, m, c, step, step * c->batch * c->shape.T, path, NULL, err, sizeof err) < 0)
        mesh_exit_error("save: %s", err);
}

static void load(trainer *t, mesh *m, const config *c, const char *path) {
    char err[1024];
    ckpt_meta k;
    if (ckpt_load(t, m, c, path, &k, NULL, err, sizeof err) < 0) mesh_exit_error("load: %s", err);
    if (k.step != N_HALF) mesh_exit_error("load: step %lld, want %d", (long long)k.step, N_HALF);
}

/* Worst deviation, in units of EPS·(|a|+|b|+1), of slab `sl` of a global array (data, row-major)
 * from the whole array `full` of shape pi. bits != NULL: also counts elements not bit-equal.
 * lm != NULL: the slab's rows are layers stored by lm (an interleaved pipeline's chunks). */
static double slab_dev(const param_info *pi, const param_slab *sl, const float *data,
                       const float *full, int64_t *bits, const model *lm) {
    double worst = 0;
    int64_t i = 0;
    for (int64_t a = 0; a < sl->cnt[0]; a++)
        for (int64_t b = 0; b < (pi->ndim > 1 ? sl->cnt[1] : 1); b++)
            for (int64_t e = 0; e < (pi->ndim > 2 ? sl->cnt[2] : 1); e++, i++) {
                const int64_t d1 = pi->ndim > 1 ? pi->shape[1] : 1;
                const int64_t d2 = pi->ndim > 2 ? pi->shape[2] : 1;
                const int64_t row = lm ? model_layer_global(lm, a + sl->off[0]) : a + sl->off[0];
                const int64_t g = (row * d1 + (pi->ndim > 1 ? b + sl->off[1] : 0)) * d2 +
                                  (pi->ndim > 2 ? e + sl->off[2] : 0);
                const double x = data[i], y = full[g];
                const double d = fabs(x - y) / (EPS * (fabs(x) + fabs(y) + 1));
                if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
                if (bits && memcmp(&data[i], &full[g], sizeof(float)) != 0) ++*bits;
            }
    return worst;
}

/* The model whose stored layers a stack over layers (parameter id) is in, or NULL. */
static const model *layers_of(const model *m, int id) {
    return id >= P_ATTN_NORM && id <= P_W_DOWN ? m : NULL;
}

/* Trainer r's params vs the whole-model trainer s's: worst deviation. */
static double params_dev(trainer *r, trainer *s) {
    model *mr = trainer_model(r), *ms = trainer_model(s);
    double worst = 0;
    for (int id = 0; id < P_COUNT; id++) {
        const param_info pi = model_param_info(model_shape_of(mr), (param_id)id);
        const double d =
            slab_dev(&pi, model_slab(mr, (param_id)id), model_param(mr, (param_id)id, NULL),
                     model_param(ms, (param_id)id, NULL), NULL, layers_of(mr, id));
        if (d > worst) worst = d;
    }
    return worst;
}

/* Elements of trainer r's params, m and v not bit-identical to the arrays of checkpoint `path`
 * (read whole on every rank). */
static int64_t file_mismatches(trainer *r, mesh *m, const char *path) {
    char err[1024];
    h5array *f = NULL;
    if (h5array_open(&f, path, mesh_world_comm(m), err, sizeof err) < 0) mesh_exit_error("%s", err);
    model *mr = trainer_model(r);
    float *om, *ov;
    int64_t ns, bits = 0;
    trainer_opt_state(r, &om, &ov, &ns);
    for (int g = 0; g < (om ? 3 : 1); g++)
        for (int id = 0; id < P_COUNT; id++) {
            const param_info pi = model_param_info(model_shape_of(mr), (param_id)id);
            const int64_t zero[3] = {0, 0, 0};
            int64_t n = 1;
            for (int i = 0; i < pi.ndim; i++) n *= pi.shape[i];
            float *full = malloc((size_t)n * sizeof(float));
            char name[96];
            snprintf(name, sizeof name, "%s/%s",
                     g == 0   ? "params"
                     : g == 1 ? "optimizer/m"
                              : "optimizer/v",
                     pi.name);
            if (h5array_read(f, name, pi.ndim, pi.shape, zero, pi.shape, full, err, sizeof err) < 0)
                mesh_exit_error("%s", err);
            if (g == 0) {
                slab_dev(&pi, model_slab(mr, (param_id)id), model_param(mr, (param_id)id, NULL),
                         full, &bits, layers_of(mr, id));
            } else {
                const par_owned o = par_owned_slice(trainer_par(r), mr, (param_id)id);
                const param_slab sl = par_state_slab(trainer_par(r), mr, (param_id)id);
                slab_dev(&pi, &sl, (g == 1 ? om : ov) + o.state_off, full, &bits,
                         layers_of(mr, id));
            }
            free(full);
        }
    h5array_close(f);
    return bits;
}

static double loss_dev(const double *a, const double *b) {
    double worst = 0;
    for (int s = N_HALF; s < STEPS; s++) {
        const double d = fabs(a[s] - b[s]) / (EPS * (fabs(a[s]) + fabs(b[s]) + 1));
        if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

static void parse(config *c, int argc, char **argv) {
    char err[512];
    char *args[64] = {"test_resume", "--batch", "24", "--micro-batch", "12"};
    int nargs = 5;
    for (int i = 0; i < argc && nargs < 64; i++) args[nargs++] = argv[i];
    config_defaults(c);
    c->quick_start = 1; /* numbers only: no careful kernel timing at start-up */
    if (config_parse(c, nargs, args, err, sizeof err) != 0) mesh_exit_error("%s", err);
    int64_t L = 2; /* --layers when given (chunked pipelines need |Z|·v of them) */
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], "--layers") == 0) L = c->shape.L;
    c->shape = (model_shape){.L = L, .D = 32, .N = 4, .K = 2, .H = 8, .F = 64, .V = 256, .T = 16};
    c->steps = STEPS, c->lr = 1e-2, c->warmup = 1, c->clip = 1.0;
    c->weight_decay = 0.1, c->seed = 11, c->eps = 1e-6;
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    if (argc < 2) mesh_exit_error("usage: test_resume DIR [writer flags] [--then reader flags]");
    int split = argc;
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--then") == 0) split = i;
    config cw, cr;
    parse(&cw, split - 2, argv + 2);
    if (split < argc)
        parse(&cr, argc - split - 1, argv + split + 1);
    else
        parse(&cr, split - 2, argv + 2);
    const int chunked = cw.schedule == PIPE_INTERLEAVED || cr.schedule == PIPE_INTERLEAVED ||
                        cw.schedule == PIPE_ZB_V || cr.schedule == PIPE_ZB_V;
    if (chunked && cw.shape.L == 2 && cr.shape.L == 2)
        cw.shape.L = cr.shape.L = 4; /* 2 pipeline ranks x 2 chunks */
    char err[512], fw[1200], fs[1200];
    mesh *mw = mesh_create(cw.mesh, cw.mesh_open, err, sizeof err);
    if (!mw) mesh_exit_error("writer mesh: %s", err);
    mesh *mr = mesh_create(cr.mesh, cr.mesh_open, err, sizeof err);
    if (!mr) mesh_exit_error("reader mesh: %s", err);
    const int rank = mesh_world_rank();
    snprintf(fw, sizeof fw, "%s/writer.h5", argv[1]);
    snprintf(fs, sizeof fs, "%s/serial.h5", argv[1]);
    const int adamw = cw.optimizer == OPT_ADAMW;

    /* the 1-rank reference: 2N steps, its own checkpoint at N */
    double ref[STEPS], wl[STEPS], w2[STEPS], rl[STEPS], r2l[STEPS];
    trainer *ref_t = make(&cw, mw, 1);
    train(ref_t, &cw, 0, N_HALF, ref);
    save(ref_t, mw, &cw, N_HALF, fs);
    train(ref_t, &cw, N_HALF, STEPS, ref);

    /* 1 and 2: the writer, round trip and exact resume */
    trainer *w = make(&cw, mw, 0);
    train(w, &cw, 0, N_HALF, wl);
    save(w, mw, &cw, N_HALF, fw);
    int64_t nsnap, n2;
    float *at_save = snapshot(w, &nsnap);
    train(w, &cw, N_HALF, STEPS, wl);
    float *w_final = snapshot(w, &nsnap);
    trainer *w2t = make(&cw, mw, 0);
    load(w2t, mw, &cw, fw);
    float *loaded = snapshot(w2t, &n2);
    expect(n2 == nsnap && !memcmp(loaded, at_save, (size_t)n2 * sizeof(float)), rank,
           "round trip: loaded state is not bit-identical to the saved one");
    train(w2t, &cw, N_HALF, STEPS, w2);
    float *w2_final = snapshot(w2t, &n2);
    expect(!memcmp(w2 + N_HALF, wl + N_HALF, N_HALF * sizeof(double)), rank,
           "resume: losses not bit-identical to the uninterrupted run");
    expect(n2 == nsnap && !memcmp(w2_final, w_final, (size_t)n2 * sizeof(float)), rank,
           "resume: final params/m/v not bit-identical to the uninterrupted run");

    /* 3: resharding is exact */
    trainer *r = make(&cr, mr, 0);
    load(r, mr, &cr, fw);
    expect(file_mismatches(r, mr, fw) == 0, rank,
           "resharding: reader's slabs differ from the file's arrays");

    /* 4: cross-scheme resume vs the 1-rank run, from the writer's file and from the 1-rank one */
    train(r, &cr, N_HALF, STEPS, rl);
    double worst[4] = {loss_dev(rl, ref), params_dev(r, ref_t)};
    load(r, mr, &cr, fs);
    expect(file_mismatches(r, mr, fs) == 0, rank,
           "reload: the trained state was not overwritten by the file's");
    train(r, &cr, N_HALF, STEPS, r2l);
    worst[2] = loss_dev(r2l, ref), worst[3] = params_dev(r, ref_t);
    double wmax[4];
    MPI_Allreduce(worst, wmax, 4, MPI_DOUBLE, MPI_MAX, mesh_world_comm(mw)->mpi);
    for (int i = 0; i < 4; i++)
        expect(wmax[i] <= K_TOL, rank, "cross-scheme resume beyond the tolerance");
    int anyfail;
    MPI_Allreduce(&failures, &anyfail, 1, MPI_INT, MPI_MAX, mesh_world_comm(mw)->mpi);
    if (rank == 0) {
        printf("optimizer %s, %d + %d steps\n", adamw ? "adamw" : "sgd", N_HALF, N_HALF);
        printf("1-rank losses        ");
        for (int i = N_HALF; i < STEPS; i++) printf(" %.9f", ref[i]);
        printf("\nwriter -> reader     ");
        for (int i = N_HALF; i < STEPS; i++) printf(" %.9f", rl[i]);
        printf("\nworst deviation (units of eps·(|a|+|b|+1), tolerance k = %.0f): writer->reader "
               "loss %.2f params %.2f | 1-rank->reader loss %.2f params %.2f\n",
               K_TOL, wmax[0], wmax[1], wmax[2], wmax[3]);
        printf("round trip bit-identical, resume bit-identical, resharding exact: %s\n",
               anyfail ? "see FAIL lines" : "yes");
        printf(anyfail ? "FAIL\n" : "PASS\n");
        remove(fw);
        remove(fs);
    }
    free(at_save), free(w_final), free(loaded), free(w2_final);
    trainer_destroy(ref_t), trainer_destroy(w), trainer_destroy(w2t);
    trainer_destroy(r);
    mesh_destroy(mr);
    mesh_destroy(mw);
    mesh_mpi_finalize();
    return anyfail;
}
