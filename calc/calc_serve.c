/* calc_serve: speculative and disaggregated serving priced (see calc_serve.h). */
#include "calc/calc_serve.h"

#include <math.h>
#include <string.h>

#include "mesh/cost.h"
#include "mesh/cost_serve.h"

void calc_serve_defaults(calc_serve_opt *o) {
    *o = (calc_serve_opt){-1, 0, 0};
}

static void speculative(const calc_spec *s, const calc_infer_result *r, const calc_serve_opt *o,
                        calc_serve_result *sr) {
    double best = -1;
    for (int k = 1; k <= CALC_SPEC_KMAX; k++) {
        double step;
        const double ici =
            calc_infer_forward_ici(s, r, (k + 1) * r->batch_per_replica) + r->t_alltoall;
        calc_infer_decode_step(r->t_kv, (k + 1) * r->t_flops, r->t_params, ici, &step);
        sr->verify[k] = step / r->decode_step_s;
        sr->tokens[k] = cost_spec_tokens(o->alpha, k);
        sr->speedup[k] = cost_spec_speedup(o->alpha, k, o->draft_cost, sr->verify[k]);
        if (sr->speedup[k] > best) best = sr->speedup[k], sr->k_best = k;
    }
}

static void disaggregated(const calc_spec *s, const calc_infer_opt *io, const calc_infer_result *r,
                          const calc_serve_opt *o, calc_serve_result *sr) {
    const double Br = r->batch_per_replica;
    sr->kv_request_bytes = io->prefill * r->kv_bytes_per_token;
    sr->dcn_bw = s->dcn_bw > 0 ? s->dcn_bw : cost_chip_dcn_bw(&s->chip);
    sr->transfer_s = cost_kv_transfer(sr->kv_request_bytes, (int)r->Y, (int)r->Y, sr->dcn_bw,
                                      s->link.hop_latency);
    sr->prefill_per_decode = cost_prefill_servers(Br, o->generated, r->ttft_s, r->decode_step_s);
    sr->prefill_replicas = ceil(sr->prefill_per_decode * r->replicas - 1e-9);
    sr->prefill_chips = sr->prefill_replicas * r->Y;
    sr->decode_chips = r->chips;
    sr->disagg_tokens_per_s_chip = r->tokens_per_s / (sr->decode_chips + sr->prefill_chips);
    sr->interleaved_step_s = r->decode_step_s + Br / o->generated * r->ttft_s;
    sr->interleaved_tokens_per_s_chip = Br * r->replicas / sr->interleaved_step_s / r->chips;
}

void calc_serve(const calc_spec *s, const calc_infer_opt *io, const calc_infer_result *r,
                const calc_serve_opt *o, calc_serve_result *sr) {
    memset(sr, 0, sizeof *sr);
    if (o->alpha >= 0) speculative(s, r, o, sr);
    if (o->generated > 0) disaggregated(s, io, r, o, sr);
}

static void print_spec(FILE *out, const calc_infer_result *r, const calc_serve_opt *o,
                       const calc_serve_result *sr) {
    fprintf(out,
            "\nspeculative sampling: alpha %.3g, a drafter step %.3g decode steps (c); a verify "
            "step of k + 1 rows a sequence = KV + max((k+1) FLOPs, weights, ICI of (k+1) rows), in "
            "decode "
            "steps (v); tokens a target step (1 - alpha^(k+1))/(1 - alpha); speed-up = tokens / "
            "(k c + v) over plain decode (%s-bound, B/R = %.0f)\n",
            o->alpha, o->draft_cost, calc_infer_regime_name(r->regime), r->batch_per_replica);
    fprintf(out, "  %4s %10s %8s %9s\n", "k", "tokens", "v", "speed-up");
    for (int k = 1; k <= CALC_SPEC_KMAX; k++)
        if (k <= 8 || k == sr->k_best || k == CALC_SPEC_KMAX)
            fprintf(out, "  %4d %10.4g %8.4g %8.3gx%s\n", k, sr->tokens[k], sr->verify[k],
                    sr->speedup[k], k == sr->k_best ? "  <- best k" : "");
}

static void print_disagg(FILE *out, const calc_infer_opt *io, const calc_infer_result *r,
                         const calc_serve_opt *o, const calc_serve_result *sr) {
    fprintf(out,
            "\ndisaggregated serving (prompts of %.0f tokens, %.0f generated each): a request's "
            "KV cache %.4g MB crosses to the decode slice over DCN (%.3g B/s per chip, %.0f "
            "chips each side of a replica) in %.4g ms\n",
            io->prefill, o->generated, sr->kv_request_bytes / 1e6, sr->dcn_bw, r->Y,
            sr->transfer_s * 1e3);
    fprintf(out,
            "  a decode replica finishes (B/R)/G = %.4g requests a step of %.4g ms, each a "
            "prefill of %.4g ms: (B/R)/G * TTFT/step = %.3g prefill replicas per decode replica\n",
            r->batch_per_replica / o->generated, r->decode_step_s * 1e3, r->ttft_s * 1e3,
            sr->prefill_per_decode);
    fprintf(out,
            "  chips: decode %.0f (%.0f replica%s) + prefill %.0f (%.0f replica%s of Y = %.0f) -> "
            "%.6g tokens/s per chip\n",
            sr->decode_chips, r->replicas, r->replicas == 1 ? "" : "s", sr->prefill_chips,
            sr->prefill_replicas, sr->prefill_replicas == 1 ? "" : "s", r->Y,
            sr->disagg_tokens_per_s_chip);
    fprintf(out,
            "  interleaved on the %.0f decode chips: each step also prefills (B/R)/G prompts, "
            "%.4g ms a step (the decodes' jitter: +%.4g ms) -> %.6g tokens/s per chip\n",
            r->chips, sr->interleaved_step_s * 1e3,
            (sr->interleaved_step_s - r->decode_step_s) * 1e3, sr->interleaved_tokens_per_s_chip);
}

void calc_serve_print(FILE *out, const calc_infer_opt *io, const calc_infer_result *r,
                      const calc_serve_opt *o, const calc_serve_result *sr) {
    if (o->alpha >= 0) print_spec(out, r, o, sr);
    if (o->generated > 0) print_disagg(out, io, r, o, sr);
}
