/* test_serving: the calculator's pricing of speculative and disaggregated serving
 * (calc/calc_serve.c, mesh/cost_serve.c) against independent arithmetic and the book:
 *  - tokens a target step: the closed form (1 − α^(k+1))/(1 − α) against the expectation summed
 *    over the acceptance process (the first rejection at draft j + 1 with probability
 *    α^j·(1 − α) yields j + 1 tokens, all k kept yield k + 1), for several α and k;
 *  - while decode is HBM-bound with FLOPs far below the weights' read (LLaMA-3-70B on a v5e 4x4
 *    at batch 1) a verify step of k + 1 rows costs one decode step, so the speed-up is
 *    E(k)/(k·c + 1) and the best k that of cost_spec_best_k with slope 0;
 *  - past B_crit the verify step grows with k: the best k is smaller than while HBM-bound;
 *  - the book's 3:1 prefill:generate servers for LLaMA-3-70B (B = 32, 512 generated, 0.91 s
 *    prefill, 19 ms step), and the calculator's own ratio, KV bytes per request, transfer time
 *    and chips recomputed from calc_infer's figures. */
#include "calc/calc_serve.h"
#include "check.h"
#include "mesh/cost.h"
#include "mesh/cost_serve.h"
#include "spec.h"

#include <math.h>
#include <stdlib.h>

static calc_infer_result infer(const calc_spec *s, const calc_infer_opt *o) {
    return test_infer_run(s, o);
}

static calc_spec llama3_v5e_4x4(void) {
    model_shape m;
    calc_model_preset(&m, "llama3-70b");
    static const int sizes[2] = {4, 4};
    calc_spec s = test_spec("v5e", sizes, 2, &m);
    s.tensor_mask = 3;
    return s;
}

static calc_infer_opt opts(double batch, double context) {
    calc_infer_opt o;
    calc_infer_defaults(&o);
    o.batch = batch, o.context = context, o.prefill = context;
    return o;
}

static void test_tokens(void) {
    static const double alphas[] = {0, 0.3, 0.6, 0.9, 0.999, 1};
    double worst = 0;
    for (size_t a = 0; a < sizeof alphas / sizeof *alphas; a++)
        for (int k = 0; k <= 12; k++) {
            const double al = alphas[a];
            double e = pow(al, k) * (k + 1);
            for (int j = 0; j < k; j++) e += pow(al, j) * (1 - al) * (j + 1);
            worst = fmax(worst, fabs(cost_spec_tokens(al, k) - e) / e);
        }
    check_near("E(k) closed form vs the acceptance process, worst relative error", 1 + worst, 1,
               1e-12);
}

static void test_spec_hbm_bound(void) {
    const calc_spec s = llama3_v5e_4x4();
    const calc_infer_opt io = opts(1, 4096);
    const calc_infer_result r = infer(&s, &io);
    calc_serve_opt o;
    calc_serve_defaults(&o);
    o.alpha = 0.8, o.draft_cost = 0.05;
    calc_serve_result sr;
    calc_serve(&s, &io, &r, &o, &sr);
    check_true("batch 1: the decode step is HBM-bound", r.regime == CALC_REGIME_HBM);
    int unit = 1;
    for (int k = 1; k <= 8; k++) unit &= fabs(sr.verify[k] - 1) < 1e-12;
    check_true("batch 1: a verify step of k + 1 <= 9 rows costs one decode step", unit);
    check_near("speed-up at k = 3: E(3)/(3c + 1)", sr.speedup[3],
               (1 - pow(0.8, 4)) / 0.2 / (3 * 0.05 + 1), 1e-12);
    double best;
    const int kb = cost_spec_best_k(0.8, 0.05, 0, CALC_SPEC_KMAX, &best);
    check_true("batch 1: the best k is cost_spec_best_k's with slope 0", sr.k_best == kb);
    check_near("batch 1: its speed-up", sr.speedup[sr.k_best], best, 1e-9);

    const calc_infer_opt big = opts(1024, 1024);
    const calc_infer_result rb = infer(&s, &big);
    calc_serve_result sb;
    calc_serve(&s, &big, &rb, &o, &sb);
    check_true("batch 1024 past B_crit: the verify step grows with k (v(2) > 1.5)",
               sb.verify[2] > 1.5);
    check_true("batch 1024: the best k is smaller than at batch 1", sb.k_best < sr.k_best);
}

static void test_disaggregated(void) {
    check_near("the book's prefill:generate servers, LLaMA-3-70B (B 32, G 512, 0.91 s, 19 ms)",
               cost_prefill_servers(32, 512, 0.91, 0.019), 3, 0.01);
    const calc_spec s = llama3_v5e_4x4();
    calc_infer_opt io = opts(32, 8192);
    io.prefill = 2048;
    const calc_infer_result r = infer(&s, &io);
    calc_serve_opt o;
    calc_serve_defaults(&o);
    o.generated = 512;
    calc_serve_result sr;
    calc_serve(&s, &io, &r, &o, &sr);
    const double kv = 2048.0 * 2 * 2 * 8 * 128 * 80; /* T·2·bytes·K·H·L, bf16 */
    check_near("KV bytes shipped per request (2048 tokens, bf16)", sr.kv_request_bytes, kv, 1e-12);
    check_near("its transfer: latency + bytes/(16 chips x DCN per chip)", sr.transfer_s,
               s.link.hop_latency + kv / (16 * cost_chip_dcn_bw(&s.chip)), 1e-12);
    check_near("prefill replicas per decode replica: (B/R)/G x TTFT/step", sr.prefill_per_decode,
               32.0 / 512 * r.ttft_s / r.decode_step_s, 1e-12);
    check_true("prefill chips: whole replicas of 16 covering the ratio",
               sr.prefill_chips == 16 * ceil(sr.prefill_per_decode) && sr.decode_chips == 16);
    check_near("interleaved step: the decode step + (B/R)/G prefills", sr.interleaved_step_s,
               r.decode_step_s + 32.0 / 512 * r.ttft_s, 1e-12);
}

int main(void) {
    test_tokens();
    test_spec_hbm_bound();
    test_disaggregated();
    return check_report("test_serving");
}
