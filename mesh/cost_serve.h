/* cost_serve: the book's serving formulas that both the calculator (calc/calc_serve.c) and the
 * server (train/) price with, so the two never count differently:
 *  - speculative sampling: a drafter proposes k tokens and the target scores them in one
 *    forward; when each drafted token is kept with probability α independently, a target step
 *    yields (1 − α^(k+1))/(1 − α) tokens on average (k + 1 at α = 1), and a round costs k drafter
 *    steps and one target step over k + 1 positions;
 *  - disaggregated serving: a request's KV cache, prefilled on one slice and decoded on
 *    another, crosses between the slices as the book moves data between slices: over the
 *    data-center network, each sending chip its own shard at its share of the host's DCN
 *    bandwidth, the transfer taking latency + bytes / (the sending chips' bandwidth, or the
 *    receiving chips', whichever is smaller);
 *  - how many prefill servers keep one generate server busy: a generate server of B sequences
 *    finishes B/G requests a step of t_step seconds (G generated tokens each), and each needs a
 *    prefill of t_prefill seconds, so (B/G)·t_prefill/t_step prefill servers (the book's 3:1
 *    for LLaMA-3-70B on v5e).
 * Pure: no MPI, no model. Units: seconds, bytes, bytes/s. */
#ifndef MT_MESH_COST_SERVE_H
#define MT_MESH_COST_SERVE_H

/* Expected tokens per target step: (1 − α^(k+1))/(1 − α), for 0 ≤ α ≤ 1, k ≥ 0. */
double cost_spec_tokens(double alpha, int k);
/* The speed-up of speculative over plain decoding: expected tokens per round over the round's
 * cost, k·c_draft + c_verify, both in units of a plain target step (c_draft: a drafter step;
 * c_verify: the target's step over k + 1 positions, 1 while the step is bound by reading the
 * weights). */
double cost_spec_speedup(double alpha, int k, double c_draft, double c_verify);
/* The k in [1, kmax] of the largest speed-up for α and a drafter step of c_draft target steps,
 * the verify step costing verify(k) = 1 + slope·k target steps (slope 0: memory-bound); the
 * speed-up in *speedup. */
int cost_spec_best_k(double alpha, double c_draft, double slope, int kmax, double *speedup);
/* A KV transfer of `bytes` between two slices: latency + bytes / (min(senders, receivers) ×
 * bw_per_chip). */
double cost_kv_transfer(double bytes, int senders, int receivers, double bw_per_chip,
                        double latency);
/* Prefill servers per generate server: (batch / generated)·t_prefill / t_step. */
double cost_prefill_servers(double batch, double generated, double t_prefill, double t_step);
#endif
