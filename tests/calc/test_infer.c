/* test_infer: the calculator's inference half (calc/calc_infer.c) against the book's inference
 * and applied-inference chapters: KV-cache sizes, the memory-bound step-time table of
 * LLaMA-2-13B, the pop quiz on a 30B model, B_crit for each dtype, the smallest slices, the
 * full-HBM step, prefill time, and the tensor-parallel bounds. Each check quotes the book's
 * number; where the book rounds or uses other constants than the chip table, the comment says
 * which and the tolerance covers it. */
#include "calc/calc_infer.h"
#include "check.h"
#include "spec.h"

#include <stdlib.h>
#include <string.h>

/* A serving spec: `chip` with topology sizes[n], model parallel over every axis. */
static calc_spec make(const char *chip, const int *sizes, int n, const model_shape *m) {
    calc_spec s = test_spec(chip, sizes, n, m);
    s.tensor_mask = (1 << n) - 1;
    return s;
}

/* LLaMA-3-70B on a v5e slice of sizes[2], model parallel over both axes. */
static calc_spec llama3_v5e(const int *sizes) {
    model_shape m;
    calc_model_preset(&m, "llama3-70b");
    return make("v5e", sizes, 2, &m);
}

static calc_infer_opt opts(double batch, double context, double param_bytes, double kv_bytes,
                           calc_flops_dtype dtype) {
    calc_infer_opt o;
    calc_infer_defaults(&o);
    o.batch = batch;
    o.context = context;
    o.prefill = context;
    o.param_bytes = param_bytes;
    o.kv_bytes = kv_bytes;
    o.flops_dtype = dtype;
    return o;
}

static calc_infer_result run(const calc_spec *s, const calc_infer_opt *o) {
    return test_infer_run(s, o);
}

/* The book's step-time formula, without the ICI term: B·KV/BW + max(2·B·P/C, P_bytes/BW). */
static double book_step(const calc_infer_result *r) {
    return r->t_kv + (r->t_flops > r->t_params ? r->t_flops : r->t_params);
}

/* One of the book's tables by batch B[6]: our step time without ICI against ms[i], and the
 * throughput B/step against tps[i], within 0.5%; the full step (with ICI) is never below it. */
static void check_step_table(const char *name, const calc_spec *s, calc_infer_opt o,
                             const double *B, const double *ms, const double *tps) {
    char what[128];
    for (int i = 0; i < 6; i++) {
        o.batch = B[i];
        const calc_infer_result r = run(s, &o);
        snprintf(what, sizeof what, "%s B=%.0f: step time (ms)", name, B[i]);
        check_near(what, book_step(&r) * 1e3, ms[i], 0.005);
        snprintf(what, sizeof what, "%s B=%.0f: throughput (tokens/s)", name, B[i]);
        check_near(what, B[i] / book_step(&r), tps[i], 0.005);
        check_true("  ... the full step (with ICI) is never below the book's bound",
                   r.decode_step_s >= book_step(&r));
    }
}

static const int v5e_8[2] = {4, 2}, v5e_16[2] = {4, 4}, v5e_32[2] = {8, 4};

/* Inference chapter, "Modeling throughput and latency for LLaMA 2-13B" on 8 TPU v5e: "8x TPU
 * v5es gives us ... 6.5TiB/s of HBM bandwidth (0.82TiB/s each)", so W_hbm = 8.2e11 here (the
 * chip table has 8.1e11). Theoretical step time (ms) and throughput (tokens/s) by batch, bf16,
 * 8192 tokens of context, MHA and then "1:5 GMQA" with "the total number of params the same". */
static void test_llama2_table(void) {
    model_shape m;
    calc_model_preset(&m, "llama2-13b");
    const double B[6] = {1, 8, 16, 32, 64, 240};
    const double mha_ms[6] = {4.98, 12.13, 20.30, 36.65, 69.33, 249.09};
    const double mha_tps[6] = {200.61, 659.30, 787.99, 873.21, 923.13, 963.53};
    const double gqa_ms[6] = {4.17, 5.60, 7.23, 10.50, 17.04, 52.99};
    const double gqa_tps[6] = {239.94, 1429.19, 2212.48, 3047.62, 3756.62, 4529.34};
    calc_spec s = make("v5e", v5e_8, 2, &m);
    s.chip.hbm_bw = 8.2e11;
    calc_infer_opt o = opts(1, 8192, 2, 2, CALC_FLOPS_BF16);
    calc_infer_result r = run(&s, &o);
    /* "8192 (T) x 40 (K) x 128 (H) x 40 (L) x 2 (bytes) x 2 = 6.7 GB" */
    check_near("LLaMA-2-13B KV cache per 8192-token sequence, bf16 (book 6.7 GB)",
               r.kv_bytes_per_seq, 6.7e9, 0.005);
    /* "we store one copy of our parameters, let's say in bf16. That uses 26GB" */
    check_near("LLaMA-2-13B weights in bf16 (book 26 GB)", r.param_bytes_total, 26e9, 0.002);
    check_step_table("MHA", &s, o, B, mha_ms, mha_tps);
    /* "We OOM beyond batch size 16", but its own table puts batch 16 at 133.2 (total memory)
     * against "128GiB of HBM": with the chip's 16 GB each, batch 8 fits and 16 does not. */
    o.batch = 8;
    r = run(&s, &o);
    const int fit8 = r.fits;
    o.batch = 16;
    r = run(&s, &o);
    check_true("MHA: batch 8 fits 8 v5e, batch 16 (133 GB) does not", fit8 && !r.fits);
    m.K = 8;
    s = make("v5e", v5e_8, 2, &m);
    s.chip.hbm_bw = 8.2e11;
    o.params = 13e9;
    check_step_table("GQA 1:5", &s, o, B, gqa_ms, gqa_tps);
    /* "KV Cache Memory (GiB) 1.34" per sequence with 8 KV heads. */
    r = run(&s, &o);
    check_near("GQA 1:5: KV per sequence (book 1.34)", r.kv_bytes_per_seq, 1.34e9, 0.005);
}

/* Inference chapter pop quiz: "a batch of 4 tokens from a 30B parameter dense model on TPU v5e
 * 4x4 slice in int8 with bf16 FLOPs, 8192 context and 100 kB / token KV caches ... at least
 * (4 * 819e6 + 30e9) / (16 * 8.1e11) = 2.5 ms. At 256 tokens ... (256 * 819e6) / (16 * 8.1e11)
 * + (2 * 256 * 30e9) / (16 * 1.97e14) = 21ms". The shape only sizes the collectives here. */
static void test_pop_quiz(void) {
    const model_shape m = {60, 6144, 48, 48, 128, 24576, 32000, 8192, {0}};
    calc_spec s = make("v5e", v5e_16, 2, &m);
    calc_infer_opt o = opts(4, 8192, 1, 1, CALC_FLOPS_BF16);
    o.params = 30e9;
    o.kv_token_bytes = 100e3;
    calc_infer_result r = run(&s, &o);
    check_near("pop quiz: KV per 8192-token sequence (book 819 MB)", r.kv_bytes_per_seq, 819e6,
               0.001);
    check_near("pop quiz: B=4 step lower bound, ms (book 2.5)", book_step(&r) * 1e3, 2.5, 0.03);
    check_true("  ... B=4 is HBM-bound", r.regime == CALC_REGIME_HBM);
    o.batch = 256;
    r = run(&s, &o);
    check_near("pop quiz: B=256 step, ms (book 21)", book_step(&r) * 1e3, 21, 0.01);
    check_true("  ... B=256 is past B_crit: the weights' FLOPs exceed their loading",
               r.t_flops > r.t_params && o.batch > r.b_crit);
}

/* Inference chapter: "B >= 240 = B_crit" (v5e, bf16, 1.97e14/8.2e11); "if we have int8
 * parameters but do our computation in bfloat16, the critical batch size drops to 120. With
 * int8 activations and int8 params, it jumps back up to 240". Roofline chapter: int8 x int8
 * "3.94e14/8.1e11 = 486", so B > 243 with the table's constants. */
static void test_b_crit(void) {
    calc_spec s = llama3_v5e(v5e_16);
    calc_infer_opt o = opts(16, 2048, 2, 2, CALC_FLOPS_BF16);
    s.chip.hbm_bw = 8.2e11;
    check_near("B_crit bf16 weights and FLOPs, W_hbm 8.2e11 (book 240)", run(&s, &o).b_crit, 240.2,
               0.001);
    s.chip.hbm_bw = 8.1e11;
    o.param_bytes = 1;
    check_near("B_crit int8 weights, bf16 FLOPs (book 120)", run(&s, &o).b_crit, 120, 0.015);
    o.flops_dtype = CALC_FLOPS_INT8;
    check_near("B_crit int8 weights and FLOPs (book 240; 243 with the table)", run(&s, &o).b_crit,
               243.2, 0.001);
    o.param_bytes = 0.5;
    o.flops_dtype = CALC_FLOPS_BF16;
    /* Applied-inference chapter: "int8 or int4 but do bfloat16 matmuls, this drops to 120 or
     * 60". */
    check_near("B_crit int4 weights, bf16 FLOPs (book 60)", run(&s, &o).b_crit, 60, 0.015);
}

/* Applied-inference chapter, LLaMA-3-70B on v5e. */
static void test_llama3_serving(void) {
    calc_spec s = llama3_v5e(v5e_16);
    /* "KV cache size per token in int8 = 2 * K * H * L = 2 * 8 * 128 * 80 = 160kiB"; "a sequence
     * length of 32k tokens ... 162e3 * 32,768 = 5.3GB / sequence. For BS=240, this is 1.3TB ...
     * we would need about (70e9 + 1.3e12) / 16e9 = 86 TPU v5e chips". */
    calc_infer_opt o = opts(240, 32768, 1, 1, CALC_FLOPS_BF16);
    calc_infer_result r = run(&s, &o);
    check_near("KV bytes per token, int8 (book 2*8*128*80)", r.kv_bytes_per_token, 163840, 0);
    check_near("KV per 32K sequence (book 5.3 GB)", r.kv_bytes_per_seq, 5.3e9, 0.015);
    check_near("KV for BS=240 (book 1.3 TB)", r.kv_bytes, 1.3e12, 0.01);
    check_near("chips to hold it (book 86, from rounded 1.3e12)", r.min_chips, 86, 0.02);
    check_true("  ... which does not fit one 4x4", !r.fits);

    /* "smallest slice ... batch size 1 and 8k context": bf16 "4x4 = 16 chips", int8 "4x2 = 8
     * chips", int4 "2x2 = 4 chips" (weights and KV in the same dtype). */
    const double bytes[3] = {2, 1, 0.5};
    const int chips[3] = {16, 8, 4};
    const char *shape[3] = {"4x4", "4x2", "2x2"};
    for (int i = 0; i < 3; i++) {
        o = opts(1, 8192, bytes[i], bytes[i], CALC_FLOPS_BF16);
        r = run(&s, &o);
        char what[96];
        snprintf(what, sizeof what, "smallest slice at %g B/param, batch 1, 8K (book %s)", bytes[i],
                 shape[i]);
        check_true(what, r.min_slice == chips[i] && strcmp(r.min_slice_shape, shape[i]) == 0);
    }
    /* bf16 on the 4x4: "remaining HBM for KV caches 116 ... num KV caches @ 8k 43". We keep
     * the K/V projection weights replicated past 8-way sharding (0.34 GB more per chip), so 41. */
    o = opts(1, 8192, 2, 2, CALC_FLOPS_BF16);
    r = run(&s, &o);
    check_near("bf16 4x4: 8K caches that fit (book 43)", r.max_batch, 43, 0.05);
    /* "16GB / 8.2e11 = 19ms, so this is 19ms / step" when the batch fills HBM; "QPS / chip"
     * for bf16 "0.27" with 512-token decodes: B / (t_step * 512 * N). */
    o.batch = r.max_batch;
    r = run(&s, &o);
    check_near("full-HBM decode step, ms (book 19)", r.decode_step_s * 1e3, 19, 0.05);
    check_near("bf16 4x4 QPS per chip at 512 tokens (book 0.27; our batch 41 not 43)",
               r.tokens_per_s_per_chip / 512, 0.27, 0.10);

    /* "BS=32, 8K context, all int8: 112 GB total ... 17 ms/step on a 4x2, 8.5 ms on a 4x4". */
    o = opts(32, 8192, 1, 1, CALC_FLOPS_INT8);
    s = llama3_v5e(v5e_8);
    r = run(&s, &o);
    check_near("BS=32 8K int8: weights + KV (book 112 GB)", r.param_bytes_total + r.kv_bytes, 112e9,
               0.015);
    check_true("  ... fits a 4x2 (tight)", r.fits && r.memory_per_chip > 0.85 * r.hbm);
    check_near("  ... decode step on a 4x2, ms (book 17)", r.decode_step_s * 1e3, 17, 0.04);
    s = llama3_v5e(v5e_16);
    r = run(&s, &o);
    check_near("  ... decode step on a 4x4, ms (book 8.5)", r.decode_step_s * 1e3, 8.5, 0.05);

    /* "Prefill: 0.91 s for 8K tokens on 16 chips at 40% MFU" counts 2*P*T; we add causal
     * attention 2*L*T^2*N*H on top. */
    o = opts(1, 8192, 2, 2, CALC_FLOPS_BF16);
    o.prefill_mfu = 0.4;
    r = run(&s, &o);
    check_near("prefill 8K tokens, 16 chips, 40% MFU, 2*P*T only, s (book 0.91)",
               r.prefill_flops_dense / (16 * s.chip.flops_bf16 * 0.4), 0.91, 0.01);
    check_near("  ... our compute term adds the attention FLOPs", r.prefill_t_math,
               (r.prefill_flops_dense + r.prefill_flops_attn) / (16 * s.chip.flops_bf16 * 0.4),
               1e-12);
    check_true("  ... TTFT = the prefill of one prompt, >= its compute term",
               r.ttft_s == r.prefill_s && r.prefill_s >= r.prefill_t_math);
}

/* Tensor-parallel bounds. Applied-inference chapter: "Y > F * n_axes / 2550 ... F = 28,672, so
 * if we do 2 axes of model sharding this gives us roughly Y = 28672 * 2 / 2550 = 22" (the book
 * uses v5p's alpha = 2550 here; v5e's table gives C/W = 2189 and 26.2). "B=64 on a 4x8 ... the
 * limit is Y <= F/(8B) = 56, so the slice is still HBM-bound" (beta = W_hbm/W_ici taken as 8;
 * the table gives 9). Inference chapter: "F=16,384, B=32 gives 64-way". */
static void test_tp_bounds(void) {
    calc_spec s = llama3_v5e(v5e_32);
    calc_infer_opt o = opts(64, 8192, 2, 2, CALC_FLOPS_BF16);
    calc_infer_result r = run(&s, &o);
    check_near("TP FLOP bound, 2 axes, v5e table alpha 2189", r.tp_bound_flops, 26.2, 0.002);
    check_true("B=64 on a 4x8 (Y = 32), bf16: the decode step is HBM-bound",
               r.regime == CALC_REGIME_HBM && r.Y == 32);
    s.chip.flops_bf16 = 2550 * s.chip.ici_bidi;
    s.chip.hbm_bw = 8 * s.chip.ici_bidi;
    s.link = cost_chip_link(&s.chip);
    r = run(&s, &o);
    check_near("TP FLOP bound with the book's alpha = 2550 (book 22)", r.tp_bound_flops, 22, 0.025);
    check_near("TP bound while HBM-bound, B=64, beta = 8 (book 56)", r.tp_bound_hbm, 56, 0.001);
    /* The inference chapter's invented model: L=64, D=4096, F=16384 (ffw multiplier 4), N=32,
     * K=8, H=256, V=32,128, tied embeddings: 18.4e9 params. */
    const model_shape inv = {64, 4096, 32, 8, 256, 16384, 32128, 8192, {0}};
    const double tied = shape_params(&inv) - 4096.0 * 32128 - (2.0 * 64 * 4096 + 4096);
    check_near("invented model params, tied embeddings, no norms (book 18.4e9)", tied, 18.4e9,
               0.005);
    s = make("v5e", v5e_16, 2, &inv);
    s.chip.hbm_bw = 8 * s.chip.ici_bidi;
    o = opts(32, 8192, 2, 2, CALC_FLOPS_BF16);
    r = run(&s, &o);
    check_near("invented model, B=32, beta = 8: Y = F/(B*beta) (book 64)", r.tp_bound_hbm, 64,
               0.001);
}

/* Replicas, KV sharding and rejected shardings. */
static void test_sharding(void) {
    calc_spec s = llama3_v5e(v5e_16);
    s.tensor_mask = 2; /* model parallel over y (4 chips); x holds 4 replicas */
    calc_infer_opt o = opts(64, 4096, 1, 1, CALC_FLOPS_INT8);
    calc_infer_result r = run(&s, &o);
    check_true("tensor over y of a 4x4: Y = 4, 4 replicas of 16 sequences",
               r.Y == 4 && r.replicas == 4 && r.batch_per_replica == 16);
    check_near("  ... KV per chip: 16 sequences over 4 head shards", r.mem_kv,
               16 * r.kv_bytes_per_seq / 4, 1e-12);
    check_near("  ... tokens/s counts every replica", r.tokens_per_s, 64 / r.decode_step_s, 1e-12);
    /* Y = 16 > K = 8: the cache goes over heads, then batch: min(Y, K*B/R) shards. */
    s.tensor_mask = 3;
    o.batch = 1;
    r = run(&s, &o);
    check_near("Y = 16 > K = 8 with one sequence: the cache splits 8 ways only", r.mem_kv,
               r.kv_bytes_per_seq / 8, 1e-12);
    char err[256];
    o.batch = 6;
    s.tensor_mask = 2;
    check_true("a batch the replicas do not divide is rejected",
               calc_infer(&s, &o, &r, err, sizeof err) < 0 && strstr(err, "replicas"));
    o.batch = 8;
    s.zero = 3;
    check_true("FSDP is rejected for generation, saying why",
               calc_infer(&s, &o, &r, err, sizeof err) < 0 && strstr(err, "FSDP"));
    s.zero = 0;
    o.context = 0;
    check_true("no context is rejected", calc_infer(&s, &o, &r, err, sizeof err) < 0);
}

int main(void) {
    test_llama2_table();
    test_pop_quiz();
    test_b_crit();
    test_llama3_serving();
    test_tp_bounds();
    test_sharding();
    return check_report("test_infer");
}
