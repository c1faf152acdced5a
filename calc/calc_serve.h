/* calc_serve: the calculator's pricing of the two serving techniques the engine adds on top of
 * plain decoding (meshplan --infer with --spec-alpha or --generate), on calc_infer's figures and
 * mesh/cost_serve.h's formulas, the ones the server reports with:
 *  - speculative sampling: a drafter step costs --draft-cost target decode steps; the target's
 *    verify step scores k + 1 rows a sequence, so it reads the same KV and weights as a decode
 *    step, does k + 1 times its FLOPs and moves the activations of (k + 1)·B/R rows:
 *    verify(k) = T_kv + max((k+1)·T_flops, T_params, T_ici((k+1)·B/R)), in decode steps (the
 *    experts' AllToAlls, if any, as a decode step's); a target step
 *    yields E(k) = (1 − α^(k+1))/(1 − α) tokens, the speed-up is E(k)/(k·c + verify(k)), and the
 *    best k is the largest one of k = 1..16 (while decode is HBM-bound verify(k) stays 1, so only
 *    c and α limit k; once (k+1)·B/R passes B_crit the FLOPs grow with k);
 *  - disaggregated serving: a request's prompt (--prefill tokens) is prefilled on its own slice of
 *    the same sharding and its KV cache (--prefill × the KV bytes per token) crosses to the decode
 *    slice over DCN (cost_kv_transfer: the Y sending chips each their shard); a decode replica of
 *    B/R sequences generating G (--generate) tokens each finishes (B/R)/G requests a step, so it
 *    needs (B/R)/G · TTFT/step prefill replicas (cost_prefill_servers). Interleaving the prefills
 *    into the decode batch instead lengthens each step by that prefill work, (B/R)/G · TTFT,
 *    which is the decodes' jitter; the two are compared in tokens/s per chip.
 * Pure arithmetic; no MPI. */
#ifndef MT_CALC_CALC_SERVE_H
#define MT_CALC_CALC_SERVE_H
#include <stdio.h>

#include "calc/calc_infer.h"

#define CALC_SPEC_KMAX 16

typedef struct {
    double alpha;      /* --spec-alpha: probability a drafted token is kept; < 0: not asked */
    double draft_cost; /* --draft-cost: a drafter step in target decode steps */
    double generated;  /* --generate: tokens a request generates; 0: not asked */
} calc_serve_opt;

typedef struct {
    /* speculative sampling, k = 1..CALC_SPEC_KMAX (index k) */
    double tokens[CALC_SPEC_KMAX + 1], verify[CALC_SPEC_KMAX + 1], speedup[CALC_SPEC_KMAX + 1];
    int k_best;
    /* disaggregated serving */
    double kv_request_bytes, transfer_s, dcn_bw;
    double prefill_per_decode; /* prefill replicas one decode replica keeps busy */
    double prefill_replicas, prefill_chips, decode_chips;
    double disagg_tokens_per_s_chip;
    double interleaved_step_s, interleaved_tokens_per_s_chip;
} calc_serve_result;

void calc_serve_defaults(calc_serve_opt *o); /* nothing asked */
/* Prices what o asks for from calc_infer's result r for spec s and options io. */
void calc_serve(const calc_spec *s, const calc_infer_opt *io, const calc_infer_result *r,
                const calc_serve_opt *o, calc_serve_result *out);
/* The table's sections for what o asks for. */
void calc_serve_print(FILE *out, const calc_infer_opt *io, const calc_infer_result *r,
                      const calc_serve_opt *o, const calc_serve_result *sr);
#endif
