/* bf16 compute on one rank (--compute-dtype bf16) against fp32, on windows of the text file
 * given as argument (data/tinyshakespeare.txt's bytes):
 *   - bf16 trains: its loss falls by more than 0.5 over the steps (fp32's falls by ~1.5);
 *   - bf16 follows fp32 within a stated tolerance at every step (below);
 *   - the same seed twice: bit-identical losses and parameters;
 *   - every bf16 path this CPU has, forced with MESHTRAIN_BF16_PATH: portable and, where the CPU
 *     has AVX2, avx2 give the same bits (their contract, kernels/gemm_bf16.h: one fp32 chain per
 *     element in the same order); the oneDNN paths (amx, avx512bf16, where present: the default
 *     there) sum in their own order and meet the same tolerance against fp32, as does avx512
 *     (where the CPU has AVX-512: bf16 widened, the fp32 sgemm's order), bit-identical twice;
 *   - --compute-dtype auto resolves to bf16 exactly where the fastest path is a matrix unit that
 *     outruns fp32 (amx; avx512bf16 but on Intel), else to fp32;
 *   - a mixture of experts (4 experts, top-2, a shared expert, every block) in bf16 follows its
 *     fp32 run within the same tolerance and runs bit-identically twice.
 * Tolerance. The bf16 run differs from fp32 by its roundings (relative u = 2⁻⁹ each): at step 0 the
 * loss moves by at most 2·n·u·max|logit| (the cross-entropy is 2-Lipschitz in the logits' max
 * norm; n = 13 roundings on a logit's path through this 2-layer model: per block h1, q/k/v, P,
 * att, h2, g, and the head's hf); with max|logit| ≲ 1 at initialisation that is 0.05. Later
 * steps add the updates' differences: AdamW's first step moves every weight by ±lr whatever
 * its gradient's size, so a small gradient whose sign the rounding flips moves it by 2·lr (the
 * worst seen, 8.4e-3 at step 1 on the avx2 path, is there). The check uses 0.04 absolute at
 * every step, below the 0.2–0.9 the loss moves in one step here at lr 2e-2: a bf16 weight copy
 * left stale by one update (the loss of the previous step's weights) fails it. A MoE block's
 * path rounds as a dense MLP's does (h2, then each expert's SwiGLU output, its shared expert's
 * too), and the router multiplies in fp32: the same n and the same bound. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "mesh/mesh_mpi.h"
#include "train/step/trainer.h"

#define STEPS 6

static unsigned char text[1 << 16];
static int64_t text_len;

/* Step s's batch: nrows windows of T + 1 bytes of the text, a fixed stride apart. */
static void batch(int32_t *tok, int64_t nrows, int64_t T, int64_t s) {
    for (int64_t b = 0; b < nrows; b++) {
        const int64_t at = ((s * nrows + b) * 997) % (text_len - T - 1);
        for (int64_t t = 0; t <= T; t++) tok[b * (T + 1) + t] = text[at + t];
    }
}

/* STEPS steps of a fresh 1-rank trainer: the losses and a copy of the parameters (*np). */
static float *run(const config *c, mesh *m, double *loss, int64_t *np) {
    char err[512];
    trainer *t = trainer_create_serial(c, m, err, sizeof err);
    if (!t) mesh_exit_error("%s", err);
    int64_t row0, nrows;
    trainer_rows(t, &row0, &nrows);
    int32_t *tok = malloc((size_t)(nrows * (c->shape.T + 1)) * sizeof(int32_t));
    for (int64_t s = 0; s < STEPS; s++) {
        step_stats st;
        batch(tok, nrows, c->shape.T, s);
        trainer_step(t, s, tok, &st);
        loss[s] = st.loss;
    }
    free(tok);
    const float *p = model_params_flat(trainer_model(t), np);
    float *copy = malloc((size_t)*np * sizeof(float));
    memcpy(copy, p, (size_t)*np * sizeof(float));
    trainer_destroy(t);
    return copy;
}

static int same(const float *a, const float *b, int64_t n, const double *la, const double *lb) {
    return !memcmp(a, b, (size_t)n * sizeof(float)) && !memcmp(la, lb, STEPS * sizeof(double));
}

/* The losses of x against fp32's: |Δ| ≤ tol at every step; prints them. */
static int near_fp32(const char *what, const double *x, const double *ref, double tol) {
    double worst = 0;
    printf("%-22s losses", what);
    for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(x[s] - ref[s])), printf(" %.5f", x[s]);
    printf("\n");
    printf("%-22s worst |bf16 - fp32| %.2e (tolerance %.2g): %s\n", what, worst, tol,
           worst <= tol ? "ok" : "FAIL");
    return worst <= tol;
}

/* c's fp32 run, then its bf16 run twice (the default path): the losses into l32 and lb; whether
 * bf16 follows fp32 within tol and runs bit-identically twice (printed with the name's suffix). */
static int against_fp32(config c, mesh *m, const char *suffix, double tol, double *l32,
                        double *lb) {
    double lb2[STEPS];
    int64_t n32, nb, nb2;
    char what[32];
    c.compute = COMPUTE_FP32;
    float *p32 = run(&c, m, l32, &n32);
    c.compute = COMPUTE_BF16;
    float *pb = run(&c, m, lb, &nb), *pb2 = run(&c, m, lb2, &nb2);
    snprintf(what, sizeof what, "fp32%s", suffix);
    printf("%-22s losses", what);
    for (int s = 0; s < STEPS; s++) printf(" %.5f", l32[s]);
    printf("\n");
    snprintf(what, sizeof what, "bf16%s", suffix[0] ? suffix : " (default path)");
    const int ok = near_fp32(what, lb, l32, tol);
    const int rep = nb == nb2 && same(pb, pb2, nb, lb, lb2);
    printf("bf16%s twice: %s\n", suffix, rep ? "bit-identical" : "FAIL: differ");
    free(p32), free(pb), free(pb2);
    return ok && rep && nb == n32;
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    config c;
    config_defaults(&c);
    char err[512];
    char *args[] = {argv[0], "--batch", "8", "--layers", "2", "--mesh", "1"};
    if (config_parse(&c, 7, args, err, sizeof err) != 0) mesh_exit_error("%s", err);
    c.shape = (model_shape){.L = 2, .D = 48, .N = 4, .K = 2, .H = 12, .F = 96, .V = 256, .T = 16};
    c.steps = STEPS, c.lr = 2e-2, c.warmup = 1, c.clip = 1.0, c.seed = 5;
    c.quick_start = 1;
    mesh *m = mesh_create(c.mesh, c.mesh_open, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (!f) mesh_exit_error("usage: test_bf16 TEXT_FILE (cannot read %s)", argc > 1 ? argv[1] : "");
    text_len = (int64_t)fread(text, 1, sizeof text, f);
    fclose(f);
    if (text_len < 4096) mesh_exit_error("%s: too short", argv[1]);
    const double tol = 0.04;
    int ok = 1;

    double l32[STEPS], lb[STEPS], lp[STEPS], la[STEPS];
    int64_t np, na;
    ok &= against_fp32(c, m, "", tol, l32, lb);
    const int learns = lb[0] - lb[STEPS - 1] > 0.5;
    printf("bf16 learns: loss falls by %.3f (> 0.5): %s\n", lb[0] - lb[STEPS - 1],
           learns ? "ok" : "FAIL");
    ok &= learns;

    c.compute = COMPUTE_BF16;
    setenv(KERN_BF16_PATH_ENV, "portable", 1);
    float *pp = run(&c, m, lp, &np);
    ok &= near_fp32("bf16 path portable", lp, l32, tol);
    if (kern_cpu_has(KERN_CPU_AVX2_FMA)) {
        setenv(KERN_BF16_PATH_ENV, "avx2", 1);
        float *pa = run(&c, m, la, &na);
        ok &= near_fp32("bf16 path avx2", la, l32, tol);
        const int eq = na == np && same(pa, pp, na, la, lp);
        printf("paths avx2 and portable: %s\n", eq ? "bit-identical" : "FAIL: differ");
        ok &= eq;
        free(pa);
    }
    if (kern_cpu_has(KERN_CPU_AVX512)) {
        double lw[STEPS], lw2[STEPS];
        int64_t nw, nw2;
        setenv(KERN_BF16_PATH_ENV, "avx512", 1);
        float *pw = run(&c, m, lw, &nw), *pw2 = run(&c, m, lw2, &nw2);
        ok &= near_fp32("bf16 path avx512", lw, l32, tol);
        const int eq = nw == nw2 && same(pw, pw2, nw, lw, lw2);
        printf("path avx512 twice: %s\n", eq ? "bit-identical" : "FAIL: differ");
        ok &= eq;
        free(pw), free(pw2);
    }
    unsetenv(KERN_BF16_PATH_ENV);
    /* 4 experts of width F/2, top-2, a shared expert, every block */
    config cm = c;
    double lm32[STEPS], lmb[STEPS];
    cm.shape.moe =
        (moe_shape){.E = 4, .k = 2, .shared = 1, .every = 1, .F = c.shape.F / 2, .aux_coef = 0.01};
    ok &= against_fp32(cm, m, " MoE", tol, lm32, lmb);
    /* --compute-dtype auto: bf16 exactly where the CPU's fastest path is a matrix unit that
     * outruns fp32 (AMX; AVX512-BF16 but on Intel) */
    kern_bf16_path fastest;
    char msg[256];
    if (kern_bf16_path_check(KERN_BF16_AUTO, &fastest, msg, sizeof msg) < 0) mesh_exit_error("%s", msg);
    c.compute = COMPUTE_AUTO;
    trainer *ta = trainer_create_serial(&c, m, err, sizeof err);
    if (!ta) mesh_exit_error("%s", err);
    const int unit = kern_bf16_path_outruns_fp32(fastest);
    const int auto_ok = trainer_precision(ta)->dtype == (unit ? COMPUTE_BF16 : COMPUTE_FP32);
    printf("auto on path %s: %s (%s)\n", kern_bf16_path_name(fastest),
           compute_dtype_name(trainer_precision(ta)->dtype), auto_ok ? "ok" : "FAIL");
    ok &= auto_ok;
    trainer_destroy(ta);
    free(pp);
    printf("%s\n", ok ? "PASS" : "FAIL");
    mesh_destroy(m);
    mesh_mpi_finalize();
    return ok ? 0 : 1;
}
